"""Writing a Minari dataset for ``rbdata convert``: with the minari package, episode by episode.

Episodes end where ``("next", "done")`` (else terminated or truncated) is set
or the ``"episode"`` entry changes; a last episode without an end is written
as it is. Each leaf gets a Box space over its dtype's range (Dict spaces for
nested keys); images are stored raw, not JPEG-encoded, so nothing is lost.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rbdata.cli._sinks import replacing
from rbdata.datasets.minari import datasets_root

_DATASET_ID = re.compile(r"([\w.-]+/)*[\w.-]+-v\d+")  # minari's [namespace/]name-v<version>
_WRITTEN = {
    ("observation",),
    ("action",),
    ("next", "observation"),
    ("next", "reward"),
    ("next", "terminated"),
    ("next", "truncated"),
    ("next", "done"),
    ("episode",),
}


def write_minari(dst: Path, chunks: Iterator[TensorDictBase], max_rows: int) -> list[str]:
    """Write the transitions as a Minari dataset at ``dst``; the keys it has no place for."""
    minari = _import_minari()
    from minari.dataset.minari_storage import MinariStorage

    dataset_id = _dataset_id(dst)
    with replacing(dst) as tmp:
        storage, dropped = None, []
        episodes = _Episodes()
        pending: list[Any] = []
        for chunk in chunks:
            if storage is None:
                dropped = _check_layout(chunk)
                (tmp / "data").mkdir(parents=True)
                storage = MinariStorage.new(
                    tmp / "data",
                    observation_space=_space(chunk["observation"]),
                    action_space=_space(chunk["action"]),
                    jpeg_encoding=False,
                )
                storage.update_metadata(
                    {"dataset_id": dataset_id, "minari_version": minari.__version__}
                )
            pending += episodes.add(chunk)
            if sum(len(e) for e in pending) >= max_rows:
                storage.update_episodes(pending)
                pending = []
        if storage is None:
            raise ValueError("the source holds no transition; nothing to convert.")
        storage.update_episodes(pending + episodes.finish())
    return dropped


class _Episodes:
    """Cuts a stream of transitions into minari EpisodeBuffers."""

    def __init__(self) -> None:
        self._open: list[TensorDictBase] = []

    def add(self, chunk: TensorDictBase) -> list[Any]:
        """The episodes that end in ``chunk`` (the rest stays open)."""
        ends = _ends(chunk)
        new_id = self._open and "episode" in chunk.keys()
        if new_id and int(self._open[-1]["episode"][-1]) != int(chunk["episode"][0]):
            ends = torch.cat([torch.tensor([-1]), ends])  # the open episode ended before
        done, start = [], 0
        for end in ends.tolist():
            if end >= 0:
                self._open.append(chunk[start : end + 1])
            done.append(_episode_buffer(_concat(self._open)) if self._open else None)
            self._open, start = [], end + 1
        if start < chunk.shape[0]:
            self._open.append(chunk[start:])
        return [e for e in done if e is not None]

    def finish(self) -> list[Any]:
        """The last, unfinished episode, if any."""
        rest = [_episode_buffer(_concat(self._open))] if self._open else []
        self._open = []
        return rest


def _concat(parts: list[TensorDictBase]) -> TensorDictBase:
    # torch types cat as Tensors -> Tensor; TensorDicts dispatch it to their own cat
    out: TensorDictBase = torch.cat(parts)  # type: ignore[arg-type,assignment]
    return out


def _ends(chunk: TensorDictBase) -> torch.Tensor:
    """Rows of ``chunk`` that end an episode."""
    n = chunk.shape[0]
    keys = chunk.keys(include_nested=True)
    if ("next", "done") in keys:
        end = chunk["next", "done"].reshape(n, -1).any(-1)
    else:
        end = chunk["next", "terminated"].reshape(n, -1).any(-1)
        if ("next", "truncated") in keys:
            end |= chunk["next", "truncated"].reshape(n, -1).any(-1)
    if "episode" in keys:
        ids = chunk["episode"].reshape(n)
        end[:-1] |= ids[1:] != ids[:-1]
    rows: torch.Tensor = end.nonzero().squeeze(-1)
    return rows


def _episode_buffer(rows: TensorDictBase) -> Any:
    from minari.data_collector import EpisodeBuffer

    t = rows.shape[0]
    truncated = (
        rows["next", "truncated"].reshape(t).numpy()
        if ("next", "truncated") in rows.keys(include_nested=True)
        else np.zeros(t, bool)
    )
    return EpisodeBuffer(
        observations=_tree(rows["observation"], rows["next", "observation"][-1:]),
        actions=_tree(rows["action"]),
        rewards=rows["next", "reward"].reshape(t).numpy(),
        terminations=rows["next", "terminated"].reshape(t).numpy(),
        truncations=truncated,
    )


def _tree(value: Any, last: Any = None) -> Any:
    """Numpy arrays (dicts of them for nested keys), with ``last`` appended when given."""
    if isinstance(value, TensorDictBase):
        return {k: _tree(value[k], None if last is None else last[k]) for k in value.keys()}
    array = value.numpy()
    return array if last is None else np.concatenate([array, last.numpy()])


def _space(value: Any) -> Any:
    from gymnasium import spaces

    if isinstance(value, TensorDictBase):
        return spaces.Dict({k: _space(value[k]) for k in value.keys()})
    dtype, shape = value.numpy().dtype, tuple(value.shape[1:])
    if dtype == np.bool_:
        return spaces.MultiBinary(list(shape)) if shape else spaces.Discrete(2)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return spaces.Box(int(info.min), int(info.max), shape, dtype)
    return spaces.Box(-np.inf, np.inf, shape, dtype)


def _check_layout(chunk: TensorDictBase) -> list[str]:
    """Raise for entries a Minari dataset needs; return the ones it has no place for."""
    keys = {(k,) if isinstance(k, str) else tuple(k) for k in chunk.keys(True, True)}
    nodes = {(k,) if isinstance(k, str) else tuple(k) for k in chunk.keys(True)}
    for needed in (("observation",), ("action",), ("next", "observation")):
        if needed not in nodes:
            raise ValueError(f"a Minari dataset needs the entry {needed!r}; the source has none.")
    for needed in (("next", "reward"), ("next", "terminated")):
        if needed not in keys:
            raise ValueError(f"a Minari dataset needs the entry {needed!r}; the source has none.")
    kept = {k for k in keys if k in _WRITTEN or k[:1] in {("observation",), ("action",)}}
    kept |= {k for k in keys if k[:2] == ("next", "observation")}
    return sorted(".".join(k) for k in keys - kept)


def _dataset_id(dst: Path) -> str:
    """The id a dataset at ``dst`` has: its path under the datasets root, else its name."""
    try:
        dataset_id = dst.resolve().relative_to(datasets_root().resolve()).as_posix()
    except ValueError:
        dataset_id = dst.name
    if not _DATASET_ID.fullmatch(dataset_id):
        raise ValueError(
            f"a Minari dataset's id must read [namespace/]name-v<version>, e.g. "
            f"'cartpole-converted-v0'; {str(dst)!r} gives {dataset_id!r}."
        )
    return dataset_id


def _import_minari() -> Any:
    try:
        import minari
    except ImportError as err:
        raise ImportError(
            f"writing Minari datasets needs the minari package: pip install 'rbdata[minari]' "
            f"({err})."
        ) from err
    return minari
