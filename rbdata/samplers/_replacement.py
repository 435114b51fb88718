"""The ``replacement=`` keyword every sampler takes (torchrl 0.14.1's): its check.

``RandomSampler(replacement=False, ...)`` builds a ``SamplerWithoutReplacement(...)``
and ``SliceSampler(replacement=False, ...)`` a ``SliceSamplerWithoutReplacement(...)``
(their ``__new__`` picks the class, on the exact class called only, as
``pathlib.Path(...)`` builds a ``PosixPath``). The without-replacement samplers take
the keyword either way and change nothing. Every other sampler, subclasses of
``RandomSampler`` and ``SliceSampler`` included, has no without-replacement variant:
``replacement=True`` changes nothing, ``replacement=False`` raises ``TypeError``.
"""

from __future__ import annotations

__all__ = ["check_replacement"]


def check_replacement(replacement: object, sampler: str, *, without: bool = False) -> None:
    """Check a sampler's ``replacement=`` argument.

    Args:
        replacement: the argument given.
        sampler: the sampler's class name (for the message).
        without: whether the sampler draws without replacement (``False`` is then
            what it does already).

    Raises:
        TypeError: if ``replacement`` is not a bool, or is False for a sampler that
            has no without-replacement variant.
    """
    if type(replacement) is not bool:
        raise TypeError(
            f"replacement must be a bool, got {type(replacement).__name__} ({replacement!r})."
        )
    if not replacement and not without:
        raise TypeError(
            f"{sampler} has no without-replacement variant; it cannot be built with "
            "replacement=False (RandomSampler and SliceSampler can: they build a "
            "SamplerWithoutReplacement and a SliceSamplerWithoutReplacement)."
        )
