"""Pass a ``torch.Generator`` to a spawned process (a DataLoader worker) by its state's bytes.

torch's own reduction sends a generator's state as a temporary tensor whose
memory is shared by file descriptor; the child then fails to map it
("unable to resize file <filename not specified> to the right size: Invalid
argument"), so a buffer seeded with ``generator=`` killed every DataLoader
worker at start. :func:`install` registers a reduction for
``multiprocessing``'s pickler that sends the state as plain bytes instead:
the child gets a generator of the same device and state (an independent
copy, as any pickled object).
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

__all__ = ["install"]


def _rebuild(device: str, state: bytes) -> torch.Generator:
    generator = torch.Generator(device)
    generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
    return generator


def _reduce(
    generator: torch.Generator,
) -> tuple[Callable[[str, bytes], torch.Generator], tuple[Any, ...]]:
    state = generator.get_state().numpy().tobytes()
    return _rebuild, (str(generator.device), state)


def install() -> None:
    """Make ``multiprocessing`` pickle generators by state (idempotent).

    Examples:
        >>> import io, pickle, torch
        >>> from multiprocessing.reduction import ForkingPickler
        >>> install()
        >>> buf = io.BytesIO()
        >>> ForkingPickler(buf).dump(torch.Generator().manual_seed(3))
        >>> copy = pickle.loads(buf.getvalue())
        >>> bool(torch.equal(copy.get_state(), torch.Generator().manual_seed(3).get_state()))
        True
    """
    ForkingPickler.register(torch.Generator, _reduce)
