"""Saving, loading, sharing and pickling a replay buffer (mixed into ReplayBuffer)."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import torch.multiprocessing as mp

from rbdata.checkpoint import CheckpointError, read_dump, write_dump
from rbdata.storages.list import ListStorage

if TYPE_CHECKING:
    from rbdata.buffers.replay import ReplayBuffer

_TRANSIENT = ("_iterator", "_stats_sources")


def _state_dict(rb: ReplayBuffer) -> dict[str, Any]:
    """The buffer's state under fixed keys: storage, sampler, writer, rng, counters."""
    rb._init()
    with rb._lock:
        return {
            "storage": rb._storage.state_dict(),
            "sampler": rb._sampler.state_dict(),
            "writer": rb._writer.state_dict(),
            "sample_unit": rb._sample_unit.state_dict(),
            "rng": None if rb._generator is None else rb._generator.get_state(),
            "skipped_priority_updates": rb._skipped_priority_updates,
        }


def _load_state_dict(rb: ReplayBuffer, sd: dict[str, Any]) -> None:
    """Load ``sd`` into ``rb``; on any error the buffer is left as it was."""
    rb._init()
    with rb._lock:
        rb._drain_prefetch()
        saved = {
            "sampler": rb._sampler.state_dict(),
            "writer": rb._writer.state_dict(),
            "sample_unit": rb._sample_unit.state_dict(),
        }
        saved_rng = None if rb._generator is None else rb._generator.get_state()
        try:
            if "writer" in sd:
                rb._writer.load_state_dict(sd["writer"])
            if "sampler" in sd:
                rb._sampler.load_state_dict(sd["sampler"])
            if "sample_unit" in sd:
                rb._sample_unit.load_state_dict(sd["sample_unit"])
            if sd.get("rng") is not None and rb._generator is not None:
                rb._generator.set_state(sd["rng"])
            if "storage" in sd:
                rb._storage.load_state_dict(sd["storage"])
        except BaseException:
            rb._writer.load_state_dict(saved["writer"])
            rb._sampler.load_state_dict(saved["sampler"])
            rb._sample_unit.load_state_dict(saved["sample_unit"])
            if saved_rng is not None:
                rb._generator.set_state(saved_rng)
            raise
        rb._skipped_priority_updates = int(sd.get("skipped_priority_updates", 0))
        rb._cond.notify_all()


def _components(rb: ReplayBuffer) -> dict[str, str]:
    return {
        "storage": type(rb._storage).__name__,
        "sampler": type(rb._sampler).__name__,
        "writer": type(rb._writer).__name__,
    }


def _dumps(rb: ReplayBuffer, path: str | os.PathLike) -> None:
    """Write ``rb`` atomically to the directory ``path`` (see :mod:`rbdata.checkpoint`)."""
    sd = _state_dict(rb)
    storage_sd = sd["storage"]
    for hook in rb._storage._save_hooks:
        storage_sd = hook(storage_sd)
    objects = None
    if "items" in storage_sd:  # list storages hold arbitrary Python objects
        objects = storage_sd["items"]
        storage_sd = {k: v for k, v in storage_sd.items() if k != "items"}
    sd["storage"] = storage_sd
    manifest = {
        "components": _components(rb),
        "max_size": rb._storage.max_size,
        "length": len(rb._storage),
        "cursor": int(getattr(rb._writer, "cursor", 0)),
        "write_count": rb._writer.write_count,
        "spec": storage_sd.get("spec"),
    }
    write_dump(path, manifest, sd, objects)


def _loads(rb: ReplayBuffer, path: str | os.PathLike, allow_pickle: bool) -> None:
    """Read and check a dump, then load it into ``rb``; on any error ``rb`` is unchanged.

    Pickled objects are unpickled only with ``allow_pickle`` and only into a list storage.
    """
    rb._init()
    holds_objects = isinstance(rb._storage, ListStorage)
    manifest, sd, objects = read_dump(path, allow_pickle=allow_pickle and holds_objects)
    expected = _components(rb)
    found = manifest.get("components")
    found = found if isinstance(found, dict) else {}
    for name, cls in expected.items():
        if found.get(name) != cls:
            raise CheckpointError(
                f"dump at {str(path)!r} was written by a buffer with {name} {found.get(name)!r}; "
                f"this buffer's {name} is {cls!r}. Build the buffer with matching components."
            )
    if manifest.get("max_size") != rb._storage.max_size:
        raise CheckpointError(
            f"dump at {str(path)!r} has storage max_size {manifest.get('max_size')}; this buffer's "
            f"storage has max_size {rb._storage.max_size}."
        )
    if (objects is not None) != holds_objects:
        raise CheckpointError(
            f"dump at {str(path)!r} {'holds' if objects is not None else 'lacks'} list-storage "
            f"objects; this buffer's storage is a {type(rb._storage).__name__}."
        )
    if objects is not None:
        sd["storage"] = {**sd["storage"], "items": objects}
    storage_sd = sd["storage"]
    for hook in rb._storage._load_hooks:
        storage_sd = hook(storage_sd)
    sd["storage"] = storage_sd
    try:
        _load_state_dict(rb, sd)
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError) as err:
        if isinstance(err, CheckpointError):
            raise
        raise CheckpointError(f"dump at {str(path)!r} does not fit this buffer: {err}") from err


def share(rb: ReplayBuffer) -> None:
    """Put the buffer's state in shared memory and use process-safe locks."""
    share_storage = getattr(rb._storage, "share_memory_", None)
    if share_storage is None:
        raise ValueError(
            f"shared=True needs a storage with share_memory_() (LazyTensorStorage, "
            f"LazyMemmapStorage, TensorStorage); got {type(rb._storage).__name__}."
        )
    share_storage()
    rb._writer.share_memory_()
    lock = mp.RLock()
    rb._lock = lock
    rb._cond = mp.Condition(lock)


def _getstate(rb: ReplayBuffer) -> dict[str, Any]:
    """Pickle state: drop threads and queues; keep process-safe locks of shared buffers."""
    state = {k: v for k, v in rb.__dict__.items() if k not in _TRANSIENT}
    if not rb._shared:
        state.pop("_lock", None)
        state.pop("_cond", None)
    return state


def _setstate(rb: ReplayBuffer, state: dict[str, Any]) -> None:
    """Rebuild what :func:`getstate` dropped."""
    rb.__dict__.update(state)
    if "_lock" not in state:
        rb._lock = threading.RLock()
        rb._cond = threading.Condition(rb._lock)
    rb._iterator = None
    rb._stats_sources = []


def _sampling_state(rb: ReplayBuffer) -> dict[str, Any]:
    """What decides the next draws: the sampler's state and the RNG's (call under the lock)."""
    return {
        "sampler": rb._sampler.state_dict(),
        "rng": None if rb._generator is None else rb._generator.get_state(),
    }


def _load_sampling_state(rb: ReplayBuffer, state: dict[str, Any]) -> None:
    """Load the ``sampler``/``rng`` entries of ``state`` (absent ones: kept); unchanged on error."""
    saved = _sampling_state(rb)
    try:
        if state.get("sampler") is not None:
            rb._sampler.load_state_dict(state["sampler"])
        if state.get("rng") is not None and rb._generator is not None:
            rb._generator.set_state(state["rng"])
    except BaseException:
        rb._sampler.load_state_dict(saved["sampler"])
        if saved["rng"] is not None:
            rb._generator.set_state(saved["rng"])
        raise


class _BufferPersistence:
    """state_dict / dumps / loads (and their aliases) and pickling of a buffer."""

    def _sampling_state(self) -> dict[str, Any]:
        return _sampling_state(self)

    def _load_sampling_state(self, state: dict[str, Any]) -> None:
        _load_sampling_state(self, state)

    def state_dict(self) -> dict[str, Any]:
        """The buffer's full state (content included) under fixed keys."""
        return _state_dict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (validated first; unchanged on error)."""
        _load_state_dict(self, state_dict)

    def dumps(self, path: str | os.PathLike) -> None:
        """Save the buffer atomically in the directory ``path``."""
        _dumps(self, path)

    def loads(self, path: str | os.PathLike, *, allow_pickle: bool = False) -> None:
        """Load a buffer saved with :meth:`dumps` (checked first; unchanged on error).

        ``allow_pickle=True`` lets a list storage's pickled objects be unpickled
        (which runs code from the file: only for dumps you trust).
        """
        _loads(self, path, allow_pickle)

    def dump(self, *args: Any, **kwargs: Any) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(*args, **kwargs)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(*args, **kwargs)

    def load(self, *args: Any, **kwargs: Any) -> None:
        """Alias for :meth:`loads`."""
        self.loads(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return _getstate(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        _setstate(self, state)
