"""``Sampler(replacement=False)``: a with-replacement sampler builds its variant, as torchrl."""

from __future__ import annotations

from typing import Any

#: a with-replacement sampler class -> its without-replacement variant
_VARIANTS: dict[type, type] = {}


def register_without_replacement(cls: type, variant: type) -> None:
    """Make ``cls(..., replacement=False)`` build ``variant(...)`` instead."""
    _VARIANTS[cls] = variant


class _SamplerMeta(type):
    """The samplers' metaclass: takes torchrl's ``replacement=`` keyword on every sampler.

    ``replacement=True`` (the default) builds the class as usual; ``False`` builds the
    registered without-replacement variant (``RandomSampler`` ->
    ``SamplerWithoutReplacement``, ``SliceSampler`` -> ``SliceSamplerWithoutReplacement``),
    is a no-op on a variant itself, and a ``TypeError`` on a sampler with no variant.

    Examples:
        >>> from rbdata import RandomSampler
        >>> type(RandomSampler(replacement=False, drop_last=True)).__name__
        'SamplerWithoutReplacement'
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if "replacement" in kwargs:
            replacement = kwargs.pop("replacement")
            if not isinstance(replacement, bool):
                raise TypeError(
                    f"replacement must be a bool, got {type(replacement).__name__} "
                    f"({replacement!r})."
                )
            if not replacement:
                variant = _VARIANTS.get(cls)
                if variant is not None:
                    return variant(*args, **kwargs)
                if cls not in _VARIANTS.values():
                    raise TypeError(
                        f"{cls.__name__} has no without-replacement variant; it cannot be "
                        "built with replacement=False."
                    )
        return super().__call__(*args, **kwargs)
