"""The one error every problem with a dump is reported as."""

from __future__ import annotations


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
