"""The multiprocessing start method rbdata sets on import, as torchrl does.

torchrl 0.14.1 sets the global start method to ``"spawn"`` when it is imported
and the program has not chosen one. Code written for torchrl relies on it: a
buffer given to a ``Process`` is pickled for a spawned child, which is where
storages, writers and samplers that cannot be shared refuse (a forked child
would silently get a private copy). ``import rbdata`` does the same, and never
overrides a start method the program already set.
"""

from __future__ import annotations

import logging
import multiprocessing  # torch.multiprocessing shares the standard library's start method

logger = logging.getLogger(__name__)


def default_to_spawn() -> None:
    """Set the global start method to ``"spawn"`` if none is set yet.

    Examples:
        >>> import multiprocessing
        >>> default_to_spawn()
        >>> multiprocessing.get_start_method(allow_none=True) is not None
        True
    """
    if multiprocessing.get_start_method(allow_none=True) is None:
        multiprocessing.set_start_method("spawn")
        logger.debug("multiprocessing start method set to 'spawn' (none was set)")
