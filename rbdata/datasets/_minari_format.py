"""Minari's HDF5 layout: what its files hold and how one step's arrays are read.

Used by :mod:`rbdata.datasets.minari`; spaces are read from ``metadata.json``'s
JSON serialization (no gymnasium needed).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

Key = tuple[str, ...]
# Minari's per-step fields -> TED key; stored [T] (or [T, 1]), loaded as [N, 1].
STEP_FIELDS: dict[str, tuple[str, str]] = {
    "rewards": ("next", "reward"),
    "terminations": ("next", "terminated"),
    "truncations": ("next", "truncated"),
}
_FLAGS = {"terminations", "truncations"}


@dataclass(frozen=True)
class Leaf:
    """One array of every episode: where it is in a group and where it goes in the TED."""

    path: str  # inside an episode group, e.g. "observations/camera"
    key: Key  # TED key of the step's value, e.g. ("observation", "camera")
    shape: tuple[int, ...]  # one step's shape, as loaded
    dtype: np.dtype
    jpeg: bool = False  # stored as JPEG bytes, decoded to uint8 ``shape``

    @property
    def is_observation(self) -> bool:
        return self.path.startswith("observations")

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def read_metadata(path: Path) -> dict[str, Any]:
    """``metadata.json``, checked for the HDF5 format and the serialized spaces."""
    try:
        metadata: Any = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{str(path)!r} is not valid JSON: {err}.") from err
    if not isinstance(metadata, dict):
        raise ValueError(f"{str(path)!r} holds {type(metadata).__name__}; expected an object.")
    data_format = metadata.get("data_format", "hdf5")
    if data_format != "hdf5":
        raise ValueError(
            f"{str(path)!r}: data_format {data_format!r} is not supported; rbdata reads Minari's "
            "'hdf5' format."
        )
    for field in ("observation_space", "action_space"):
        if field not in metadata:
            raise KeyError(f"{str(path)!r} has no {field!r}; rbdata needs the serialized spaces.")
    checked: dict[str, Any] = metadata
    return checked


def episode_ids(f: Any, metadata: dict[str, Any], file: Path) -> list[int]:
    """The ids ``0 .. total_episodes - 1``, in numeric order, once each group is found."""
    found = sorted(int(name[8:]) for name in f if name[8:].isdigit() and name[:8] == "episode_")
    total = metadata.get("total_episodes", len(found))
    ids = list(range(int(total)))
    missing = sorted(set(ids) - set(found))
    if missing:
        raise KeyError(
            f"{str(file)!r} has no group 'episode_{missing[0]}' ({len(missing)} of the "
            f"{len(ids)} episodes that metadata.json counts are missing)."
        )
    if not ids:
        raise ValueError(f"{str(file)!r} holds no episode.")
    return ids


def _space(metadata: dict[str, Any], field: str) -> dict[str, Any]:
    space: dict[str, Any] = (
        json.loads(metadata[field]) if isinstance(metadata[field], str) else metadata[field]
    )
    return space


def layout(group: Any, metadata: dict[str, Any], file: Path) -> list[Leaf]:
    """The leaves of the first episode (the others must match them)."""
    jpeg = bool(metadata.get("jpeg_encoding", True))
    leaves = [
        *_space_leaves(
            group,
            "observations",
            ("observation",),
            _space(metadata, "observation_space"),
            jpeg,
            file,
        ),
        *_space_leaves(group, "actions", ("action",), _space(metadata, "action_space"), jpeg, file),
    ]
    for name, key in STEP_FIELDS.items():
        ds = _dataset(group, name, file)
        dtype = np.dtype(bool) if name in _FLAGS else ds.dtype
        leaves.append(Leaf(name, key, (1,), dtype))
    return leaves


def _space_leaves(
    group: Any, path: str, key: Key, space: dict[str, Any], jpeg: bool, file: Path
) -> list[Leaf]:
    kind = space.get("type")
    if kind == "Dict":
        return [
            leaf
            for name, sub in space["subspaces"].items()
            for leaf in _space_leaves(group, f"{path}/{name}", (*key, name), sub, jpeg, file)
        ]
    if kind == "Tuple":
        return [
            leaf
            for i, sub in enumerate(space["subspaces"])
            for leaf in _space_leaves(group, f"{path}/_index_{i}", (*key, str(i)), sub, jpeg, file)
        ]
    if kind == "Text":
        raise ValueError(f"{str(file)!r}: {path!r} is a Text space; rbdata reads numeric spaces.")
    ds = _dataset(group, path, file)
    if jpeg and _is_image_space(space) and tuple(ds.shape[1:]) != tuple(space["shape"]):
        return [Leaf(path, key, tuple(space["shape"]), np.dtype(np.uint8), jpeg=True)]
    return [Leaf(path, key, tuple(ds.shape[1:]), ds.dtype)]


def _is_image_space(space: dict[str, Any]) -> bool:
    """Minari's rule for the Box spaces it stores as JPEG."""
    shape = space.get("shape", [])
    return (
        space.get("type") == "Box"
        and space.get("dtype") == "uint8"
        and len(shape) in (2, 3)
        and shape[0] >= 32
        and shape[1] >= 32
        and bool(np.all(np.asarray(space.get("low")) == 0))
        and bool(np.all(np.asarray(space.get("high")) == 255))
    )


def _dataset(group: Any, path: str, file: Path) -> Any:
    if path not in group:
        raise KeyError(f"{str(file)!r}: {group.name}/{path} is missing.")
    ds = group[path]
    if not hasattr(ds, "shape"):
        raise ValueError(f"{str(file)!r}: {group.name}/{path} is a group; expected an array.")
    if not ds.shape:
        raise ValueError(
            f"{str(file)!r}: {group.name}/{path} is a scalar; expected one row per step."
        )
    return ds


def check_episode(f: Any, episode: int, leaves: list[Leaf], file: Path) -> int:
    """The episode's number of steps, after checking its fields against ``leaves``."""
    group = f[f"episode_{episode}"]
    steps = _dataset(group, next(leaf.path for leaf in leaves if leaf.key[0] == "action"), file)
    length = steps.shape[0]
    for leaf in leaves:
        ds = _dataset(group, leaf.path, file)
        rows = length + 1 if leaf.is_observation else length
        what = (
            "T + 1 rows (one more than actions)" if leaf.is_observation else "T rows like actions"
        )
        if ds.shape[0] != rows:
            raise ValueError(
                f"{str(file)!r}: {group.name}/{leaf.path} has {ds.shape[0]} rows; expected {what}, "
                f"T = {length}."
            )
        stored = tuple(ds.shape[1:])
        if leaf.key[0] == "next":  # per-step fields: [T] or [T, 1]
            ok = stored in ((), (1,))
        else:
            ok = leaf.jpeg or (stored == leaf.shape and ds.dtype == leaf.dtype)
        if not ok:
            raise ValueError(
                f"{str(file)!r}: {group.name}/{leaf.path} has per-step shape {stored} and dtype "
                f"{ds.dtype}; expected {leaf.shape} and {leaf.dtype} like episode_0."
            )
    return int(length)


def read_rows(ds: Any, leaf: Leaf, a: int, b: int) -> np.ndarray:
    """Rows ``a .. b - 1`` of one stored array, in the loaded shape and dtype."""
    if leaf.jpeg:
        return _decode_jpeg(ds[a:b], leaf.shape)
    rows = np.asarray(ds[a:b])
    if leaf.key[0] == "next":
        rows = rows.reshape(b - a, 1)
        if leaf.dtype == np.bool_:
            rows = rows != 0
    return rows


def _decode_jpeg(frames: Any, shape: tuple[int, ...]) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError as err:
        raise ImportError(
            "decoding JPEG-encoded Minari images needs pillow: "
            f"pip install 'rbdata[minari]' ({err})."
        ) from err
    out = np.empty((len(frames), *shape), np.uint8)
    for i, frame in enumerate(frames):
        out[i] = np.asarray(Image.open(io.BytesIO(np.asarray(frame, np.uint8).tobytes())))
    return out
