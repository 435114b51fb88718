"""Reader for local Minari datasets (the successor of D4RL's format), never downloading.

A Minari dataset is a directory ``<root>/<dataset id>/data/`` holding
``metadata.json`` (the observation and action spaces, serialized as JSON, and
the episode count) and ``main_data.hdf5``, one group ``episode_{i}`` per
episode with ``observations`` (T + 1 rows), ``actions``, ``rewards``,
``terminations`` and ``truncations`` (T rows each). Dict observations and
actions are nested groups; Tuple ones are groups of ``_index_{k}`` members;
image spaces may be stored as JPEG bytes. Reading needs h5py (the ``hdf5`` or
``minari`` extra) and, for JPEG-encoded images only, pillow.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tqdm.auto import tqdm

from rbdata.datasets._minari_format import (
    Key,
    Leaf,
    check_episode,
    episode_ids,
    layout,
    read_metadata,
    read_rows,
)
from rbdata.storages import Storage

__all__ = ["MinariReader", "load_minari", "minari_data_dir"]

DATASETS_ENV = "MINARI_DATASETS_PATH"
DEFAULT_ROOT = Path("~") / ".minari" / "datasets"
METADATA = "metadata.json"
MAIN_DATA = "main_data.hdf5"
_CHUNK_BYTES = 64 << 20
_PROGRESS_DELAY_S = 0.5  # a progress bar appears only for loads that take longer

S = TypeVar("S", bound=Storage)


def minari_data_dir(dataset_id_or_path: str | os.PathLike[str]) -> Path:
    """Find a local Minari dataset's ``data/`` directory (nothing is downloaded).

    Args:
        dataset_id_or_path: a path to the dataset's directory or its ``data/``
            directory, or a dataset id (``"D4RL/door/human-v2"``) looked up
            under ``$MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``).

    Returns:
        The directory holding ``metadata.json`` and ``main_data.hdf5``.

    Raises:
        TypeError: if the argument is neither a str nor a path.
        FileNotFoundError: if it names no local directory.

    Examples:
        >>> import os, tempfile
        >>> from pathlib import Path
        >>> from rbdata.datasets import minari_data_dir
        >>> root = tempfile.mkdtemp()
        >>> os.makedirs(f"{root}/cartpole/expert-v0/data")
        >>> os.environ["MINARI_DATASETS_PATH"] = root
        >>> minari_data_dir("cartpole/expert-v0") == Path(root, "cartpole/expert-v0/data")
        True
        >>> del os.environ["MINARI_DATASETS_PATH"]
    """
    if not isinstance(dataset_id_or_path, (str, os.PathLike)):
        raise TypeError(
            "dataset_id_or_path must be a Minari dataset id (str) or a path, got "
            f"{type(dataset_id_or_path).__name__}."
        )
    path = Path(dataset_id_or_path).expanduser()
    if not path.is_dir() and isinstance(dataset_id_or_path, str) and not path.is_absolute():
        path = datasets_root() / dataset_id_or_path
        if not path.is_dir():
            raise FileNotFoundError(
                f"no local Minari dataset {dataset_id_or_path!r}: it is neither a directory nor "
                f"a dataset id under {str(datasets_root())!r} (set {DATASETS_ENV} to look "
                "elsewhere; rbdata never downloads, `minari download ID` does)."
            )
    if not path.is_dir():
        raise FileNotFoundError(f"no Minari dataset directory at {str(path)!r}.")
    return path / "data" if (path / "data").is_dir() else path


def datasets_root() -> Path:
    """Where dataset ids are looked up: ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``.

    Examples:
        >>> import os
        >>> from rbdata.datasets.minari import datasets_root
        >>> os.environ["MINARI_DATASETS_PATH"] = "/data/minari"
        >>> str(datasets_root())
        '/data/minari'
        >>> del os.environ["MINARI_DATASETS_PATH"]
    """
    return Path(os.environ.get(DATASETS_ENV) or DEFAULT_ROOT).expanduser()


def is_minari_dataset(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a Minari dataset's directory or its ``data/`` directory.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from rbdata.datasets.minari import is_minari_dataset
        >>> data = Path(tempfile.mkdtemp(), "data")
        >>> data.mkdir()
        >>> for name in ("metadata.json", "main_data.hdf5"):
        ...     (data / name).touch()
        >>> is_minari_dataset(data.parent), is_minari_dataset(data), is_minari_dataset("/")
        (True, True, False)
    """
    return any(
        (data / METADATA).is_file() and (data / MAIN_DATA).is_file()
        for data in (Path(path), Path(path) / "data")
    )


class MinariReader:
    """A local Minari dataset opened for reading in the TED layout.

    Opening reads ``metadata.json`` and checks every episode's groups, fields
    and lengths from their shapes, without reading data; :meth:`chunks`
    then streams the transitions in bounded pieces and :meth:`read` gathers
    them (see :func:`load_minari` for the layout).

    Args:
        dataset_id_or_path: see :func:`~rbdata.datasets.minari_data_dir`.

    Raises:
        ImportError: if h5py is not installed.
        FileNotFoundError: for an unknown dataset, or a missing ``metadata.json``
            or ``main_data.hdf5`` (named).
        KeyError: for a missing episode group or field (named).
        ValueError: for an unsupported data format or space, or lengths, shapes
            or dtypes that disagree (the field and episode named).

    Examples:
        >>> import tempfile, h5py, json, numpy as np
        >>> from rbdata.datasets import MinariReader
        >>> data = tempfile.mkdtemp()
        >>> space = {"type": "Box", "dtype": "float32", "shape": [2], "low": [0, 0], "high": [1, 1]}
        >>> with open(f"{data}/metadata.json", "w") as f:
        ...     json.dump({"data_format": "hdf5", "total_episodes": 1,
        ...                "observation_space": json.dumps(space),
        ...                "action_space": json.dumps({"type": "Discrete", "n": 2})}, f)
        >>> with h5py.File(f"{data}/main_data.hdf5", "w") as f:
        ...     f["episode_0/observations"] = np.zeros((4, 2), np.float32)
        ...     f["episode_0/actions"] = np.array([0, 1, 1])
        ...     f["episode_0/rewards"] = np.ones(3)
        ...     f["episode_0/terminations"] = np.array([False, False, True])
        ...     f["episode_0/truncations"] = np.zeros(3, bool)
        >>> reader = MinariReader(data)
        >>> len(reader), reader.episodes
        (3, [0])
        >>> [chunk.shape[0] for chunk in reader.chunks(max_rows=2)]
        [2, 1]
    """

    def __init__(self, dataset_id_or_path: str | os.PathLike[str]) -> None:
        h5py = _import_h5py()
        self.path = minari_data_dir(dataset_id_or_path)
        for name in (METADATA, MAIN_DATA):
            if not (self.path / name).is_file():
                raise FileNotFoundError(
                    f"{str(self.path / name)!r} not found: a Minari dataset directory holds "
                    f"{METADATA} and {MAIN_DATA}."
                )
        self.metadata: dict[str, Any] = read_metadata(self.path / METADATA)
        self._file = self.path / MAIN_DATA
        with h5py.File(self._file, "r") as f:
            self.episodes = episode_ids(f, self.metadata, self._file)
            self._leaves = layout(f[f"episode_{self.episodes[0]}"], self.metadata, self._file)
            self._lengths = [check_episode(f, i, self._leaves, self._file) for i in self.episodes]
        self._starts = np.concatenate([[0], np.cumsum(self._lengths, dtype=np.int64)])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __repr__(self) -> str:
        return f"MinariReader({str(self.path)!r}, episodes={len(self.episodes)}, steps={len(self)})"

    @property
    def row_bytes(self) -> int:
        """Bytes of one loaded transition (observations counted twice, as in the TED)."""
        obs = sum(leaf.row_bytes for leaf in self._leaves if leaf.is_observation)
        return sum(leaf.row_bytes for leaf in self._leaves) + obs + 1 + 8  # done, episode

    def chunks(self, max_rows: int | None = None) -> Iterator[TensorDict]:
        """Yield the transitions in order, at most ``max_rows`` per TensorDict.

        Args:
            max_rows: rows per chunk; None sizes chunks to about 64 MiB.

        Yields:
            TensorDicts in the TED layout whose concatenation is the dataset.
        """
        rows = max_rows if max_rows is not None else max(1, _CHUNK_BYTES // self.row_bytes)
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"max_rows must be an int >= 1 or None, got {max_rows!r}.")
        h5py = _import_h5py()
        with h5py.File(self._file, "r") as f:
            pieces: list[tuple[int, int, int]] = []  # (episode, first step, end step)
            filled = 0
            for episode, length in zip(self.episodes, self._lengths, strict=True):
                step = 0
                while step < length:
                    take = min(length - step, rows - filled)
                    pieces.append((episode, step, step + take))
                    step, filled = step + take, filled + take
                    if filled == rows:
                        yield self._read_pieces(f, pieces)
                        pieces, filled = [], 0
            if pieces:
                yield self._read_pieces(f, pieces)

    def read(
        self,
        storage: Storage | Callable[[int], Storage] | None = None,
        *,
        progress: bool = True,
    ) -> TensorDictBase | Storage:
        """Read every transition into memory or into ``storage`` (see :func:`load_minari`)."""
        n = len(self)
        out: TensorDictBase | Storage
        if storage is None:
            out = _empty_ted(self._leaves, n)
            write: Callable[[slice, TensorDictBase], None] = out.__setitem__
        else:
            target = storage if isinstance(storage, Storage) else storage(n)
            _check_storage(target, n)
            out, write = target, target.set
        with tqdm(
            total=n,
            unit="steps",
            desc=f"reading {self.path.parent.name or self.path.name}",
            disable=not progress,
            delay=_PROGRESS_DELAY_S,
        ) as bar:
            start = 0
            for chunk in self.chunks():
                stop = start + chunk.shape[0]
                write(slice(start, stop), chunk)
                bar.update(stop - start)
                start = stop
        return out

    def _read_pieces(self, f: Any, pieces: list[tuple[int, int, int]]) -> TensorDict:
        columns: dict[Key, list[np.ndarray]] = {}
        for episode, a, b in pieces:
            group = f[f"episode_{episode}"]
            for leaf in self._leaves:
                columns.setdefault(leaf.key, []).append(read_rows(group[leaf.path], leaf, a, b))
                if leaf.is_observation:
                    nxt = ("next", *leaf.key)
                    columns.setdefault(nxt, []).append(
                        read_rows(group[leaf.path], leaf, a + 1, b + 1)
                    )
            columns.setdefault(("episode",), []).append(np.full(b - a, episode, np.int64))
        n = sum(b - a for _, a, b in pieces)
        td = TensorDict(
            {key: torch.from_numpy(np.concatenate(parts)) for key, parts in columns.items()},
            batch_size=[n],
        )
        td["next", "done"] = td["next", "terminated"] | td["next", "truncated"]
        return td


@overload
def load_minari(
    dataset_id_or_path: str | os.PathLike[str],
    *,
    storage: None = None,
    progress: bool = True,
    download: bool = False,
) -> TensorDictBase: ...


@overload
def load_minari(
    dataset_id_or_path: str | os.PathLike[str],
    *,
    storage: S | Callable[[int], S],
    progress: bool = True,
    download: bool = False,
) -> S: ...


def load_minari(
    dataset_id_or_path: str | os.PathLike[str],
    *,
    storage: Storage | Callable[[int], Storage] | None = None,
    progress: bool = True,
    download: bool = False,
) -> TensorDictBase | Storage:
    """Read a local Minari dataset into the TED layout, episode after episode.

    Episodes come in numeric order (``episode_2`` before ``episode_10``); each
    step ``t`` of an episode of ``T`` steps becomes one row:
    ``observation`` (``observations[t]``), ``action``, ``("next",
    "observation")`` (``observations[t + 1]``), ``("next", "reward")``
    (``[N, 1]``, the file's dtype), ``("next", "terminated")``, ``("next",
    "truncated")`` and ``("next", "done")`` (bool ``[N, 1]``, done =
    terminated | truncated), and ``"episode"`` (int64 ``[N]``, the ``i`` of
    ``episode_{i}``). Observations and actions keep the file's dtype; Dict
    spaces become nested keys (``("observation", "a", "b")``), Tuple spaces
    nested keys ``"0"``, ``"1"``, ...; JPEG-encoded images are decoded to
    uint8. ``infos`` are not read.

    Args:
        dataset_id_or_path: a dataset id looked up under
            ``$MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``), or a
            path to the dataset's directory or its ``data/`` directory.
        storage: where to put the transitions instead of memory: an empty
            storage with room for them (e.g. ``LazyMemmapStorage(n)``, which
            keeps them memory-mapped on disk) or a callable taking the number
            of transitions and returning one (``storage=LazyMemmapStorage``).
            The dataset is read in chunks of about 64 MiB either way.
        progress: show a progress bar (on stderr) when reading takes more than
            half a second.
        download: accepted for code written for loaders that download (torchrl's
            ``MinariExperienceReplay(download=True)``): rbdata never downloads.
            A dataset already there loads as usual; a missing one raises a
            FileNotFoundError that names the command to run
            (``minari download ID``).

    Returns:
        The transitions, a TensorDict with batch size ``[N]`` on the CPU, or
        ``storage`` holding them in slots ``0 .. N - 1``.

    Raises:
        ImportError: if h5py is not installed (``pip install 'rbdata[minari]'``).
        FileNotFoundError: for an unknown dataset id or path (with ``download=True``: naming
            the ``minari download`` command to run), or a missing
            ``metadata.json`` or ``main_data.hdf5``.
        KeyError: for a missing episode group or field.
        ValueError: for lengths that disagree (rewards shorter than actions,
            observations not T + 1), an unsupported format or space, or a
            storage that is not empty or too small.

    Examples:
        >>> import tempfile, h5py, json, numpy as np
        >>> from rbdata import LazyMemmapStorage
        >>> from rbdata.datasets import load_minari
        >>> data = tempfile.mkdtemp()
        >>> obs = {"type": "Dict", "subspaces": {
        ...     "pos": {"type": "Box", "dtype": "float32", "shape": [2], "low": 0, "high": 1}}}
        >>> with open(f"{data}/metadata.json", "w") as f:
        ...     json.dump({"data_format": "hdf5", "total_episodes": 2,
        ...                "observation_space": json.dumps(obs),
        ...                "action_space": json.dumps({"type": "Discrete", "n": 2})}, f)
        >>> with h5py.File(f"{data}/main_data.hdf5", "w") as f:
        ...     for i, steps in enumerate((3, 2)):
        ...         f[f"episode_{i}/observations/pos"] = np.zeros((steps + 1, 2), np.float32)
        ...         f[f"episode_{i}/actions"] = np.ones(steps, np.int64)
        ...         f[f"episode_{i}/rewards"] = np.ones(steps)
        ...         f[f"episode_{i}/terminations"] = np.arange(steps) == steps - 1
        ...         f[f"episode_{i}/truncations"] = np.zeros(steps, bool)
        >>> td = load_minari(data)
        >>> td["episode"].tolist(), td["observation", "pos"].shape, td["next", "done"].shape
        ([0, 0, 0, 1, 1], torch.Size([5, 2]), torch.Size([5, 1]))
        >>> storage = load_minari(data, storage=LazyMemmapStorage)
        >>> len(storage), storage[4]["next", "done"].item()
        (5, True)
    """
    if not isinstance(download, bool):
        raise TypeError(f"download must be a bool, got {type(download).__name__}.")
    try:
        reader = MinariReader(dataset_id_or_path)
    except FileNotFoundError as err:
        if not download:
            raise
        name = str(dataset_id_or_path)
        raise FileNotFoundError(
            f"load_minari({name!r}, download=True): rbdata never downloads datasets. Run "
            f"`minari download {name}` (the minari command comes with pip install "
            f"'rbdata[minari]'; it saves under {str(datasets_root())!r}, which "
            f"${DATASETS_ENV} changes), then load_minari({name!r}). ({err})"
        ) from err
    return reader.read(storage, progress=progress)


# ------------------------------------------------------------------ layout checks
def _import_h5py() -> Any:
    try:
        import h5py
    except ImportError as err:
        raise ImportError(
            f"reading Minari datasets needs h5py: pip install 'rbdata[minari]' ({err})."
        ) from err
    return h5py


def _check_storage(storage: Storage, n: int) -> None:
    if not isinstance(storage, Storage):
        raise TypeError(
            f"storage must be an rbdata Storage or a callable returning one, got "
            f"{type(storage).__name__}."
        )
    if len(storage) or storage.max_size < n:
        raise ValueError(
            f"storage must be empty with room for the dataset's {n} transitions; it holds "
            f"{len(storage)} items and has max_size {storage.max_size}."
        )


# ------------------------------------------------------------------ reading
def _empty_ted(leaves: list[Leaf], n: int) -> TensorDict:
    out: dict[Key, torch.Tensor] = {}
    for leaf in leaves:
        out[leaf.key] = torch.from_numpy(np.empty((n, *leaf.shape), leaf.dtype))
        if leaf.is_observation:
            next_key = ("next", *leaf.key)  # mypy reads out[("next", *k)] as 3.11-only syntax
            out[next_key] = torch.from_numpy(np.empty((n, *leaf.shape), leaf.dtype))
    out[("episode",)] = torch.empty(n, dtype=torch.int64)
    out[("next", "done")] = torch.empty(n, 1, dtype=torch.bool)
    return TensorDict(out, batch_size=[n])
