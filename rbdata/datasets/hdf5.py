"""Reader for D4RL-style HDF5 offline datasets."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from tensordict import TensorDict
from tqdm.auto import tqdm

__all__ = ["load_d4rl_hdf5"]

# D4RL dataset name -> TED key. ``timeouts`` may be absent (older datasets).
_FIELDS: dict[str, str | tuple[str, str]] = {
    "observations": "observation",
    "actions": "action",
    "next_observations": ("next", "observation"),
    "rewards": ("next", "reward"),
    "terminals": ("next", "terminated"),
    "timeouts": ("next", "truncated"),
}
_OPTIONAL = {"timeouts"}
_FLAGS = {"terminals", "timeouts"}
_PER_STEP = {"rewards", "terminals", "timeouts"}  # stored [N] or [N, 1]; loaded as [N, 1]
#: attribute of a per-step dataset (written by ``rbdata convert``) holding the per-item shape,
#: ``[]`` or ``[1]``, of the entry it was written from: read back, the entry keeps that shape
ITEM_SHAPE_ATTR = "rbdata_item_shape"
_CHUNK_BYTES = 64 << 20
_PROGRESS_DELAY_S = 0.5  # a progress bar appears only for loads that take longer


class _H5Dataset(Protocol):
    """What is read of an ``h5py.Dataset``."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...

    def __getitem__(self, rows: slice) -> Any: ...

    def read_direct(self, dest: np.ndarray, source_sel: Any, dest_sel: Any) -> None: ...

    @property
    def attrs(self) -> Any: ...


class _H5File(Protocol):
    """What is read of an open ``h5py.File``: its top-level datasets by name."""

    def __contains__(self, name: str) -> bool: ...

    def __getitem__(self, name: str) -> _H5Dataset: ...

    def keys(self) -> Iterable[str]: ...


def load_d4rl_hdf5(
    path: str | os.PathLike[str], *, progress: bool = True, rows: slice | None = None
) -> TensorDict:
    """Read a D4RL-style HDF5 file into a TensorDict in the TED layout, in file order.

    The file holds one dataset per field, all with the same first dimension ``N``:
    ``observations``, ``actions``, ``rewards``, ``terminals``, ``next_observations``
    and ``timeouts`` (optional: all False when absent). Other datasets and groups
    (``infos/...``, ``metadata/...``) are ignored. The result has batch size
    ``[N]`` and the keys ``observation``, ``action``, ``("next", "observation")``,
    ``("next", "reward")`` (``[N, 1]``, the file's dtype),
    ``("next", "terminated")``, ``("next", "truncated")`` and ``("next", "done")``
    (bool ``[N, 1]``; done = terminated | truncated).

    Args:
        path: the ``.hdf5`` / ``.h5`` file.
        progress: show a progress bar (on stderr) when reading takes more than
            half a second.
        rows: read only these rows (a slice with step 1, clipped to the file
            like Python's slicing), so a file larger than memory can be read
            piece by piece; None reads them all.

    Returns:
        The transitions, as a TensorDict on the CPU.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ImportError: if h5py (the ``hdf5`` extra) is not installed.
        KeyError: if a required dataset is missing.
        ValueError: if the datasets' lengths or per-step shapes disagree.

    Examples:
        >>> import tempfile, h5py, numpy as np
        >>> from rbdata.datasets import load_d4rl_hdf5
        >>> path = tempfile.mkdtemp() + "/data.hdf5"
        >>> with h5py.File(path, "w") as f:
        ...     f["observations"] = np.zeros((5, 3), np.float32)
        ...     f["next_observations"] = np.ones((5, 3), np.float32)
        ...     f["actions"] = np.zeros((5, 2), np.float32)
        ...     f["rewards"] = np.arange(5, dtype=np.float32)
        ...     f["terminals"] = np.array([0, 0, 1, 0, 0], bool)
        ...     f["timeouts"] = np.array([0, 0, 0, 0, 1], bool)
        >>> td = load_d4rl_hdf5(path)
        >>> td["next", "done"].squeeze(-1).tolist()
        [False, False, True, False, True]
        >>> td["next", "reward"].shape
        torch.Size([5, 1])
        >>> load_d4rl_hdf5(path, rows=slice(3, 10))["next", "reward"].squeeze(-1).tolist()
        [3.0, 4.0]
    """
    try:
        import h5py
    except ImportError as err:
        raise ImportError(
            f"reading HDF5 datasets needs the 'hdf5' extra: pip install 'rbdata[hdf5]' ({err})."
        ) from err

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path {str(path)!r}: no such HDF5 file.")
    if rows is not None and rows.step not in (None, 1):
        raise ValueError(f"rows must be a slice with step 1, got {rows!r}.")
    with h5py.File(path, "r") as f:
        datasets = _check_layout(f, path)
        first, stop, _ = (rows or slice(None)).indices(datasets["observations"].shape[0])
        n = max(0, stop - first)
        out = {name: _empty_like(ds, name, n) for name, ds in datasets.items()}
        total = sum(t.numel() * t.element_size() for t in out.values())
        with tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            desc=f"reading {path.name}",
            disable=not progress,
            delay=_PROGRESS_DELAY_S,
        ) as bar:
            for name, ds in datasets.items():
                _read_into(ds, first, out[name], name, bar)
    if "timeouts" not in out:
        out["timeouts"] = torch.zeros(out["terminals"].shape, dtype=torch.bool)
    td = TensorDict({_FIELDS[name]: tensor for name, tensor in out.items()}, batch_size=[n])
    td["next", "done"] = td["next", "terminated"] | td["next", "truncated"]
    return td


def _check_layout(f: _H5File, path: Path) -> dict[str, _H5Dataset]:
    missing = [name for name in _FIELDS if name not in _OPTIONAL and name not in f]
    if missing:
        raise KeyError(
            f"{str(path)!r} is not a D4RL-style dataset: missing {missing}; expected the "
            f"datasets {sorted(_FIELDS)} ('timeouts' optional), found {sorted(f.keys())}."
        )
    datasets = {name: f[name] for name in _FIELDS if name in f}
    n = datasets["observations"].shape[0]
    for name, ds in datasets.items():
        shape = tuple(ds.shape)
        if not shape or shape[0] != n:
            raise ValueError(
                f"{str(path)!r}: dataset {name!r} has shape {shape}; expected a first dimension "
                f"of {n} like 'observations'."
            )
        if name in _PER_STEP and shape[1:] not in ((), (1,)):
            raise ValueError(
                f"{str(path)!r}: dataset {name!r} has shape {shape}; expected ({n},) or ({n}, 1)."
            )
    return datasets


def _item_shape(ds: _H5Dataset) -> tuple[int, ...]:
    """A per-step dataset's item shape once loaded: ``(1,)``, or ``()`` if rbdata wrote it so."""
    stored = ds.attrs.get(ITEM_SHAPE_ATTR)
    if stored is not None and tuple(int(d) for d in np.asarray(stored).reshape(-1)) == ():
        return ()
    return (1,)


def _empty_like(ds: _H5Dataset, name: str, n: int) -> torch.Tensor:
    if name in _FLAGS:
        return torch.empty(n, *_item_shape(ds), dtype=torch.bool)
    shape = (n, *_item_shape(ds)) if name in _PER_STEP else (n, *ds.shape[1:])
    return torch.from_numpy(np.empty(shape, dtype=ds.dtype))


def _read_into(ds: _H5Dataset, first: int, out: torch.Tensor, name: str, bar: tqdm[Any]) -> None:
    """Read rows ``first .. first + len(out) - 1`` of ``ds`` into ``out``, in chunks."""
    n = out.shape[0]
    row_bytes = max(1, out[0].numel() * out.element_size()) if n else 1
    step = max(1, _CHUNK_BYTES // row_bytes)
    flat = out.reshape(n, *ds.shape[1:]) if name in _PER_STEP else out
    for start in range(0, n, step):
        stop = min(n, start + step)
        if name in _FLAGS:
            flat[start:stop] = torch.from_numpy(np.asarray(ds[first + start : first + stop]) != 0)
        else:
            ds.read_direct(flat.numpy(), np.s_[first + start : first + stop], np.s_[start:stop])
        bar.update((stop - start) * row_bytes)
