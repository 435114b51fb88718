"""The ``replacement=`` keyword every sampler takes (torchrl main's): dispatch to the variant.

``RandomSampler(replacement=False, ...)`` builds a :class:`SamplerWithoutReplacement`
and ``SliceSampler(replacement=False, ...)`` a :class:`SliceSamplerWithoutReplacement`,
with the other arguments. ``replacement=True`` (the default) builds the class called;
``replacement=False`` given to a without-replacement class builds it too, and given to
any other sampler raises ``TypeError``. The dispatch is on the exact class called: a
subclass of ``RandomSampler`` or ``SliceSampler`` (``PrioritizedSliceSampler``) has no
variant.
"""

from __future__ import annotations

from abc import ABCMeta
from typing import Any

__all__ = ["SamplerType", "register_without_replacement"]

#: the class called with ``replacement=False`` -> the class built instead
_VARIANTS: dict[type, type] = {}


def register_without_replacement(with_replacement: type, without_replacement: type) -> None:
    """Make ``with_replacement(replacement=False, ...)`` build ``without_replacement(...)``."""
    _VARIANTS[with_replacement] = without_replacement


class SamplerType(ABCMeta):
    """The samplers' metaclass: it takes ``replacement=`` out of the constructor's arguments.

    An :class:`abc.ABCMeta`, as torchrl's samplers are abstract base classes
    (a subclass may mix in :class:`abc.ABC`).
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if "replacement" not in kwargs:
            return super().__call__(*args, **kwargs)
        replacement = kwargs.pop("replacement")
        if type(replacement) is not bool:
            raise TypeError(
                f"replacement must be a bool, got {type(replacement).__name__} ({replacement!r})."
            )
        if not replacement:
            variant = _VARIANTS.get(cls)
            if variant is not None:
                return variant(*args, **kwargs)
            if cls not in _VARIANTS.values():
                raise TypeError(
                    f"{cls.__name__} has no without-replacement variant; it cannot be built "
                    "with replacement=False (RandomSampler and SliceSampler have one)."
                )
        return super().__call__(*args, **kwargs)
