"""Reading a directory written by torchrl 0.14's ``ReplayBuffer.dumps`` into a buffer state.

torchrl's layout::

    path/
      buffer_metadata.json   batch_size, consume_after_n_samples
      prefetch.pkl           the prefetch state (a pickle)
      storage/               the rows as a memory-mapped TensorDict, or a single tensor
                             (``_-single-tensor-_.memmap``), and storage_metadata.json (len)
      sampler/               the sampler's state as a memory-mapped TensorDict, if any
      writer/metadata.json   cursor, write_count (and generation.memmap when tracked)
      rng_state/             the generator's state, if the buffer had one
      transform.t            the transforms' state, if any (torch.save)

Everything it holds is read into torchrl's ``state_dict`` layout, which the
buffer's ``load_state_dict`` reads; what cannot be read raises CheckpointError
naming the file. Pickles are read only with ``allow_pickle`` (``prefetch.pkl``
holding plain values only is read without it: no class is ever loaded then).
"""

from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rbdata.checkpoint import MANIFEST
from rbdata.errors import CheckpointError

_SINGLE_TENSOR = "_-single-tensor-_"


def is_torchrl_dump(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a torchrl ``dumps`` directory (and no rbdata manifest)."""
    root = Path(path)
    return (root / "buffer_metadata.json").is_file() and not (root / MANIFEST).exists()


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain values only (dicts, tuples, numbers...): it loads no class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"needs {module}.{name}")


def _json(file: Path) -> Any:
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{file}: cannot be read as JSON ({err}).") from err


def _refuse_pickles(folder: Path, allow_pickle: bool) -> None:
    if allow_pickle or not folder.is_dir():
        return
    for file in sorted(folder.rglob("*")):
        if file.suffix in (".pkl", ".pickle"):
            raise CheckpointError(
                f"{file}: a pickle (unpickling runs code from the file); load the dump with "
                "allow_pickle=True only if you trust it."
            )


def _memmap_dict(folder: Path) -> dict[str, Any]:
    try:
        return TensorDict.load_memmap(folder).to_dict()
    except Exception as err:  # tensordict raises many kinds for a damaged folder
        raise CheckpointError(
            f"{folder}: not a readable memory-mapped TensorDict ({err})."
        ) from err


def _raw_tensor(file: Path, dtype: str, shape: list[int]) -> torch.Tensor:
    torch_dtype = getattr(torch, dtype.removeprefix("torch."), None)
    if not isinstance(torch_dtype, torch.dtype):
        raise CheckpointError(f"{file}: unknown dtype {dtype!r}.")
    raw = np.fromfile(file, dtype=np.uint8)
    expected = int(np.prod(shape)) * torch.empty((), dtype=torch_dtype).element_size()
    if raw.size != expected:
        raise CheckpointError(f"{file}: holds {raw.size} bytes, {shape} of {dtype} is {expected}.")
    return torch.from_numpy(raw.copy()).view(torch_dtype).reshape(shape)


def _storage_state(folder: Path) -> dict[str, Any]:
    meta = _json(folder / "storage_metadata.json")
    length = meta.get("len") if isinstance(meta, dict) else None
    if not meta.get("is_pytree"):
        rows: Any = TensorDict.load_memmap(folder) if (folder / "meta.json").exists() else None
        if rows is None:
            raise CheckpointError(f"{folder}: no memory-mapped TensorDict (meta.json missing).")
        return {"_storage": rows.clone(), "_len": length, "initialized": True}
    leaves = meta.get("metadata") or {}
    if set(leaves) != {_SINGLE_TENSOR}:
        raise CheckpointError(
            f"{folder}: a torchrl PyTree storage with leaves {sorted(leaves)} is not read "
            "(rbdata reads torchrl's TensorDict and single-tensor storages)."
        )
    leaf = leaves[_SINGLE_TENSOR]
    tensor = _raw_tensor(folder / f"{_SINGLE_TENSOR}.memmap", leaf["dtype"], leaf["shape"])
    return {"_storage": tensor, "_len": length, "initialized": True}


def _writer_state(folder: Path) -> dict[str, Any]:
    meta = _json(folder / "metadata.json")
    state: dict[str, Any] = {"_cursor": meta.get("cursor"), "_write_count": meta.get("write_count")}
    if "generation_shape" in meta:
        state["_generation"] = _raw_tensor(
            folder / "generation.memmap", meta["generation_dtype"], meta["generation_shape"]
        )
    return state


def _prefetch_state(file: Path, allow_pickle: bool) -> Any:
    raw = file.read_bytes()
    try:
        return _PlainUnpickler(io.BytesIO(raw)).load()
    except (pickle.UnpicklingError, EOFError, ValueError) as err:
        if not allow_pickle:
            raise CheckpointError(
                f"{file}: holds Python objects ({err}); unpickling runs code from the file: "
                "load the dump with allow_pickle=True only if you trust it."
            ) from err
    return pickle.loads(raw)  # noqa: S301 - the caller trusts this file (allow_pickle)


def read_torchrl_dump(path: str | os.PathLike[str], allow_pickle: bool) -> dict[str, Any]:
    """The buffer state dumped at ``path``, in torchrl's ``state_dict`` layout (module docstring).

    Raises:
        CheckpointError: naming the file that cannot be read.
    """
    root = Path(path)
    for folder in ("storage", "sampler", "rng_state"):
        _refuse_pickles(root / folder, allow_pickle)
    meta = _json(root / "buffer_metadata.json")
    state: dict[str, Any] = {
        "_batch_size": meta.get("batch_size"),
        "_consume_after_n_samples": meta.get("consume_after_n_samples"),
        "_writer": _writer_state(root / "writer"),
    }
    if (root / "storage").is_dir():
        state["_storage"] = _storage_state(root / "storage")
    sampler = root / "sampler"
    if sampler.is_dir() and any(sampler.iterdir()):
        state["_sampler"] = _memmap_dict(sampler)
    if (root / "rng_state").is_dir():
        state["_rng"] = _memmap_dict(root / "rng_state")["rng_state"]
    if (root / "transform.t").is_file():
        try:
            state["_transforms"] = torch.load(root / "transform.t", weights_only=True)
        except Exception as err:  # torch.load raises many kinds for what it refuses
            raise CheckpointError(f"{root / 'transform.t'}: cannot be read ({err}).") from err
    if (root / "prefetch.pkl").is_file():
        state["_prefetch_state"] = _prefetch_state(root / "prefetch.pkl", allow_pickle)
    known = {"buffer_metadata.json", "prefetch.pkl", "storage", "sampler", "writer"}
    known |= {"rng_state", "transform.t"}
    unknown = sorted(p.name for p in root.iterdir() if p.name not in known)
    if unknown:
        raise CheckpointError(f"{root / unknown[0]}: not part of a torchrl dump; not read.")
    return state
