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

Before anything is read, the directory must be one nobody but the user and
root can plant files in (:mod:`rbdata._trust`), hold only torchrl's entries,
no symlink leading out of it, and, without ``allow_pickle``, no pickle
anywhere in it (tensordict's ``other.pickle`` included). The memory-mapped
TensorDicts are then read by rbdata itself (``meta.json`` and raw
``.memmap`` files); one holding anything but tensors is handed to tensordict
with ``allow_pickle=False`` unless the caller allowed pickles.
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
from tensordict import TensorDict, TensorDictBase

from rbdata._trust import check_contained, check_trusted_dir
from rbdata.checkpoint import (
    MANIFEST,
    TENSORDICT_REFUSES_PICKLES,
    load_tensordict_dir,
    refuse_pickles,
)
from rbdata.errors import CheckpointError

_SINGLE_TENSOR = "_-single-tensor-_"
_TENSORDICT = "<class 'tensordict._td.TensorDict'>"
_META_KEYS = {"shape", "device", "_type", "_format_version", "_class"}
_KNOWN = {"buffer_metadata.json", "prefetch.pkl", "storage", "sampler", "writer"}
_KNOWN |= {"rng_state", "transform.t"}


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


def _plain_name(name: Any, folder: Path) -> str:
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name:
        raise CheckpointError(f"{folder / 'meta.json'}: names the entry {name!r}; not read.")
    return name


def _read_tensordict(folder: Path) -> TensorDict | None:
    """The memory-mapped TensorDict in ``folder``, read by rbdata (None: not tensors only)."""
    meta = _json(folder / "meta.json")
    if not isinstance(meta, dict) or meta.get("_type") != _TENSORDICT:
        return None
    entries: dict[str, Any] = {}
    for key, entry in meta.items():
        if key in _META_KEYS:
            continue
        name = _plain_name(key, folder)
        if entry == {"type": "TensorDict"}:
            nested = _read_tensordict(folder / name)
            if nested is None:
                return None
            entries[name] = nested
        elif isinstance(entry, dict) and not entry.get("is_nested") and "dtype" in entry:
            shape = entry.get("shape")
            if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
                raise CheckpointError(f"{folder / 'meta.json'}: bad shape for {name!r}.")
            entries[name] = _raw_tensor(folder / f"{name}.memmap", str(entry["dtype"]), shape)
        else:
            return None  # a non-tensor entry, a nested tensor...: tensordict reads it
    batch = meta.get("shape")
    if not isinstance(batch, list) or not all(type(n) is int and n >= 0 for n in batch):
        raise CheckpointError(f"{folder / 'meta.json'}: bad batch shape {batch!r}.")
    try:
        return TensorDict(entries, batch_size=batch)
    except (RuntimeError, ValueError) as err:
        raise CheckpointError(f"{folder}: not a memory-mapped TensorDict ({err}).") from err


def _load_tensordict(folder: Path, allow_pickle: bool) -> TensorDictBase:
    """The memory-mapped TensorDict in ``folder``; tensordict never unpickles without leave."""
    if not (folder / "meta.json").is_file():
        raise CheckpointError(f"{folder}: no memory-mapped TensorDict (meta.json missing).")
    read = _read_tensordict(folder)
    if read is not None:
        return read
    if not TENSORDICT_REFUSES_PICKLES and not allow_pickle:
        raise CheckpointError(
            f"{folder}: holds more than tensors, and this tensordict cannot read it without "
            "being allowed to unpickle; load the dump with allow_pickle=True only if you "
            "trust it (or update tensordict)."
        )
    return load_tensordict_dir(folder, allow_pickle=allow_pickle)


def _memmap_dict(folder: Path, allow_pickle: bool) -> dict[str, Any]:
    return _load_tensordict(folder, allow_pickle).to_dict()


def _raw_tensor(file: Path, dtype: str, shape: list[int]) -> torch.Tensor:
    torch_dtype = getattr(torch, dtype.removeprefix("torch."), None)
    if not isinstance(torch_dtype, torch.dtype):
        raise CheckpointError(f"{file}: unknown dtype {dtype!r}.")
    expected = int(np.prod(shape)) * torch.empty((), dtype=torch_dtype).element_size()
    if expected == 0 and not file.exists():
        return torch.empty(shape, dtype=torch_dtype)
    try:
        raw = np.fromfile(file, dtype=np.uint8)
    except OSError as err:
        raise CheckpointError(f"{file}: cannot be read ({err}).") from err
    if raw.size != expected:
        raise CheckpointError(f"{file}: holds {raw.size} bytes, {shape} of {dtype} is {expected}.")
    return torch.from_numpy(raw.copy()).view(torch_dtype).reshape(shape)


def _storage_state(folder: Path, allow_pickle: bool) -> dict[str, Any]:
    meta = _json(folder / "storage_metadata.json")
    if not isinstance(meta, dict):
        raise CheckpointError(f"{folder / 'storage_metadata.json'}: not a JSON object.")
    length = meta.get("len")
    if not meta.get("is_pytree"):
        rows = _load_tensordict(folder, allow_pickle)
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
        CheckpointError: naming the file that cannot be read, or a symlink leading out of
            the dump.
        UntrustedPathError: if another user could have planted files in ``path``.
    """
    root = Path(path)
    check_trusted_dir(root, "the torchrl dump")
    unknown = sorted(p.name for p in root.iterdir() if p.name not in _KNOWN)
    if unknown:
        raise CheckpointError(f"{root / unknown[0]}: not part of a torchrl dump; not read.")
    check_contained(root, "the torchrl dump", CheckpointError)
    if not allow_pickle:
        refuse_pickles(root, allowed=("prefetch.pkl",))  # read below, plain values only
    meta = _json(root / "buffer_metadata.json")
    state: dict[str, Any] = {
        "_batch_size": meta.get("batch_size"),
        "_consume_after_n_samples": meta.get("consume_after_n_samples"),
        "_writer": _writer_state(root / "writer"),
    }
    if (root / "storage").is_dir():
        state["_storage"] = _storage_state(root / "storage", allow_pickle)
    sampler = root / "sampler"
    if sampler.is_dir() and any(sampler.iterdir()):
        state["_sampler"] = _memmap_dict(sampler, allow_pickle)
    if (root / "rng_state").is_dir():
        rng = _memmap_dict(root / "rng_state", allow_pickle)
        if "rng_state" not in rng:
            raise CheckpointError(f"{root / 'rng_state'}: holds no 'rng_state' entry.")
        state["_rng"] = rng["rng_state"]
    if (root / "transform.t").is_file():
        try:
            state["_transforms"] = torch.load(root / "transform.t", weights_only=True)
        except Exception as err:  # torch.load raises many kinds for what it refuses
            raise CheckpointError(f"{root / 'transform.t'}: cannot be read ({err}).") from err
    if (root / "prefetch.pkl").is_file():
        state["_prefetch_state"] = _prefetch_state(root / "prefetch.pkl", allow_pickle)
    return state
