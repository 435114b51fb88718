"""Every exception class rbdata raises, in one place.

rbdata follows one rule: a wrong type is a :class:`TypeError`, a wrong value a
:class:`ValueError`, and the message names the argument, what was given and
what was expected. Where torch or torchrl raise another class in the same
situation (often a :class:`RuntimeError`), the class below derives from both,
so code written for either library catches it.

This module imports nothing from rbdata: every package may import it.

Examples:
    >>> from rbdata.errors import CheckpointError, IncompatibleValueError
    >>> issubclass(CheckpointError, ValueError), issubclass(IncompatibleValueError, RuntimeError)
    (True, True)
"""

from __future__ import annotations

__all__ = [
    "BatchSizeError",
    "CheckpointError",
    "DuplicateStepError",
    "ExclusiveArgumentsError",
    "IncompatibleValueError",
    "MarkerShapeError",
    "RateLimitTimeoutError",
    "ServiceUnavailableError",
    "SharedMemoryFull",
    "SliceSizeError",
    "Unencodable",
    "UnsupportedDataError",
    "UntrustedPathError",
]


# ------------------------------------------------------------------ data and arguments
class IncompatibleValueError(RuntimeError, ValueError):
    """A value that does not fit where it goes (a shape that does not broadcast, ...).

    A ``ValueError`` by rbdata's rule, and a ``RuntimeError`` first, as torch and
    torchrl raise in the same situations.

    Examples:
        >>> [issubclass(IncompatibleValueError, kind) for kind in (ValueError, RuntimeError)]
        [True, True]
    """


class UnsupportedDataError(TypeError, RuntimeError):
    """Data of a kind a component cannot hold (e.g. a plain tensor given to a TensorDict writer).

    A ``TypeError`` by rbdata's rule, and a ``RuntimeError`` as torchrl raises
    in the same situations, so code written for either catches it.

    Examples:
        >>> [issubclass(UnsupportedDataError, kind) for kind in (TypeError, RuntimeError)]
        [True, True]
    """


class _PytreeMismatch(Exception):
    """Raised by the storages' fast pytree flattener; the exact path then reports the difference."""


# ------------------------------------------------------------------ trajectories and slices
class _BoundaryValueError(ValueError, RuntimeError):
    """A bad value (a ``ValueError`` by rbdata's rule, a ``RuntimeError`` as torchrl raises)."""


class _BoundaryTypeError(TypeError, RuntimeError):
    """A bad type (a ``TypeError`` by rbdata's rule, a ``RuntimeError`` as torchrl raises)."""


class DuplicateStepError(RuntimeError, ValueError):
    """Two live transitions share a (trajectory id, step) pair in a fragmented index.

    A ``ValueError`` by rbdata's rule (bad data) and a ``RuntimeError`` as
    torchrl raises it.

    Examples:
        >>> [issubclass(DuplicateStepError, kind) for kind in (RuntimeError, ValueError)]
        [True, True]
    """


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


# ------------------------------------------------------------------ checkpoints
class CheckpointError(ValueError, FileNotFoundError):
    """A dump directory is missing, partial, corrupt or does not match the buffer.

    It is both a ValueError and a FileNotFoundError, so either ``except`` catches it.
    Its message names the file and what is wrong with it.

    Examples:
        >>> from rbdata import CheckpointError, ReplayBuffer
        >>> try:
        ...     ReplayBuffer().loads("/nonexistent/dump")
        ... except CheckpointError as err:
        ...     print(type(err).__name__)
        CheckpointError
    """


class UntrustedPathError(PermissionError):
    """A directory or file another local user could have planted, refused before it is read.

    rbdata reads and writes its scratch, rendezvous, recovery and dump
    directories only where nobody but the user (and root) can create or replace
    files (OpenSSH's rule for key files): the directory and each of its parents
    owned by the user or root, and none writable by others (a parent may be if
    it has the sticky bit, as ``/tmp`` has). The message names the path, its
    owner and its mode.

    Examples:
        >>> issubclass(UntrustedPathError, PermissionError)
        True
    """


class Unencodable(TypeError):
    """A value the JSON state tree of a checkpoint cannot describe (``where`` names its place)."""


# ------------------------------------------------------------------ shared buffers
class SharedMemoryFull(OSError):
    """The file system that would hold a shared buffer's rows has too little room for them.

    Raised before anything is written (a full tmpfs would kill the writer with
    SIGBUS later); the message names the bytes needed, the mount and the fix.

    Examples:
        >>> issubclass(SharedMemoryFull, OSError)
        True
    """


# ------------------------------------------------------------------ the Ray service
class ServiceUnavailableError(RuntimeError):
    """The Ray actor hosting a replay buffer is gone (shut down, or its process died).

    Examples:
        >>> issubclass(ServiceUnavailableError, RuntimeError)
        True
    """


class RateLimitTimeoutError(TimeoutError):
    """A Ray-hosted buffer's rate limiter held a sample or an insert past its timeout.

    The service (``service_backend_options={"rate_limiter": ...}``) blocks a sample
    until the collectors have inserted enough, and an insert until the learners have
    sampled enough; a wait longer than ``rate_limiter_timeout`` seconds raises this.

    Examples:
        >>> issubclass(RateLimitTimeoutError, TimeoutError)
        True
    """
