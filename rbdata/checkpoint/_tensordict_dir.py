"""Opening a memory-mapped TensorDict directory (``TensorDict.memmap``) from elsewhere, pickle-free.

tensordict keeps what is not a tensor in such a directory as ``other.pickle``
files, and ``TensorDict.load_memmap`` unpickles them unless told not to. A
directory that came from elsewhere (an offline dataset, a torchrl dump) is
opened here instead: a symlink leading out of it is refused, and, unless the
caller allows pickles, so is any pickle in it, and tensordict is asked not to
unpickle (``allow_pickle=False``, tensordict >= 0.15).
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

from tensordict import TensorDict, TensorDictBase

from rbdata._trust import check_contained
from rbdata.errors import CheckpointError

__all__ = ["TENSORDICT_REFUSES_PICKLES", "load_tensordict_dir", "refuse_pickles"]

#: whether this tensordict's ``load_memmap`` can be told not to unpickle
TENSORDICT_REFUSES_PICKLES = "allow_pickle" in inspect.signature(TensorDict.load_memmap).parameters
_PICKLE_SUFFIXES = (".pkl", ".pickle")


def refuse_pickles(root: str | os.PathLike[str], *, allowed: tuple[str, ...] = ()) -> None:
    """Raise if a file under ``root`` (symlinks not followed) is a pickle.

    Args:
        root: the directory tree.
        allowed: paths relative to ``root`` that the caller reads safely itself.

    Raises:
        CheckpointError: naming the pickle.
    """
    top = Path(root)
    for folder, _, files in os.walk(top, followlinks=False):
        for name in sorted(files):
            file = Path(folder) / name
            if file.suffix in _PICKLE_SUFFIXES and str(file.relative_to(top)) not in allowed:
                raise CheckpointError(
                    f"{file}: a pickle (unpickling runs code from the file); load it with "
                    "allow_pickle=True only if you trust it."
                )


def load_tensordict_dir(
    path: str | os.PathLike[str], *, allow_pickle: bool = False
) -> TensorDictBase:
    """The memory-mapped TensorDict in the directory ``path``, nothing unpickled by default.

    Args:
        path: a directory ``TensorDict.memmap`` wrote.
        allow_pickle: let tensordict unpickle its non-tensor entries (runs code from the
            files: only for a directory you trust).

    Raises:
        CheckpointError: naming a symlink in it that leads out of it, a pickle in it
            (without ``allow_pickle``), or when tensordict cannot read it.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata.checkpoint import load_tensordict_dir
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = TensorDict({"a": torch.arange(3)}, [3]).memmap(tmp)
        ...     print(load_tensordict_dir(tmp)["a"].tolist())
        [0, 1, 2]
    """
    check_contained(path, "the memory-mapped TensorDict directory", CheckpointError)
    if not allow_pickle:
        refuse_pickles(path)
    try:
        if TENSORDICT_REFUSES_PICKLES:
            return TensorDict.load_memmap(Path(path), allow_pickle=allow_pickle)
        return TensorDict.load_memmap(Path(path))
    except Exception as err:  # tensordict raises many kinds for a damaged folder
        raise CheckpointError(f"{path}: not a readable memory-mapped TensorDict ({err}).") from err
