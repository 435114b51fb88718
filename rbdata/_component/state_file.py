"""One component's ``state_dict`` in a file of a directory: what ``dumps``/``loads`` write and read.

Storages, samplers and writers each save their state as ``<name>_state.pt`` in the
directory given to their ``dumps``; this module is the one place that knows how.
The file is read with ``torch.load(weights_only=True)`` (tensors and plain values:
torch's restricted unpickler loads no other class), and only from a directory
nobody but the user and root can write (:mod:`rbdata._trust`); a directory
``dumps`` makes is made with mode 0700.

Example:
    >>> import tempfile
    >>> from rbdata._component.state_file import read_state, write_state
    >>> folder = tempfile.mkdtemp()
    >>> write_state({"cursor": 3}, folder, "writer")
    >>> read_state(folder, "writer")
    {'cursor': 3}
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from rbdata._trust import check_trusted_dir, private_dir

__all__ = ["read_state", "write_state"]


def _state_path(folder: str | os.PathLike[str], component: str) -> Path:
    return Path(folder) / f"{component}_state.pt"


def write_state(state: dict[str, Any], folder: str | os.PathLike[str], component: str) -> None:
    """Save ``state`` as ``<component>_state.pt`` in ``folder`` (created 0700 if missing).

    Raises:
        UntrustedPathError: if another user could plant files in ``folder``.
    """
    private_dir(folder, "the dumps path")
    torch.save(state, _state_path(folder, component))


def read_state(folder: str | os.PathLike[str], component: str) -> dict[str, Any]:
    """Read the state :func:`write_state` saved (``weights_only=True``, onto the CPU).

    Raises:
        FileNotFoundError: if ``folder`` holds no state of ``component``.
        UntrustedPathError: if another user could have planted files in ``folder``.
    """
    if os.path.isdir(folder):
        check_trusted_dir(folder, "the loads path")
    state: dict[str, Any] = torch.load(
        _state_path(folder, component), weights_only=True, map_location="cpu"
    )
    return state
