"""Errors of the slice samplers: torchrl's kind first, then rbdata's (code for either works)."""

from __future__ import annotations


class ExclusiveArgumentsError(RuntimeError, ValueError):
    """Arguments that exclude each other were given together.

    A ``ValueError`` by rbdata's rule and a ``RuntimeError`` as torchrl raises it.

    Examples:
        >>> [issubclass(ExclusiveArgumentsError, kind) for kind in (RuntimeError, ValueError)]
        [True, True]
    """


class BatchSizeError(RuntimeError, ValueError):
    """A batch size that is not a multiple of the slice size (``num_slices`` or ``slice_len``).

    A ``ValueError`` by rbdata's rule and a ``RuntimeError`` as torchrl raises it.

    Examples:
        >>> [issubclass(BatchSizeError, kind) for kind in (RuntimeError, ValueError)]
        [True, True]
    """


class SliceSizeError(TypeError, ValueError):
    """Not exactly one of ``num_slices`` and ``slice_len`` was given.

    A ``ValueError`` by rbdata's rule and a ``TypeError`` as torchrl raises it.

    Examples:
        >>> [issubclass(SliceSizeError, kind) for kind in (TypeError, ValueError)]
        [True, True]
    """


class MarkerShapeError(RuntimeError, ValueError):
    """A trajectory marker entry holds more than one value per stored transition.

    A ``ValueError`` by rbdata's rule (the data does not fit the arguments) and
    a ``RuntimeError`` as torchrl raises it.

    Examples:
        >>> [issubclass(MarkerShapeError, kind) for kind in (RuntimeError, ValueError)]
        [True, True]
    """
