"""A buffer's state: ``state_dict``/``load_state_dict``, sampling state, ``dumps``/``loads``, stats.

The functions here define the format and work on a buffer's public interface
(its components and ``state_dict``), so that any buffer class can use them;
:class:`_BufferState` is the part of :class:`~rbdata.ReplayBuffer` that
saves, restores and reports its state with them.
"""

from __future__ import annotations

import math
import os
from typing import Any, NamedTuple, Protocol

import torch

from rbdata._component.prefetch_state import check_queue_state
from rbdata._component.stateful import transaction
from rbdata.buffers._components import _Components
from rbdata.buffers._torchrl_dump import is_torchrl_dump, read_torchrl_dump
from rbdata.checkpoint import read_dump, write_dump
from rbdata.errors import CheckpointError
from rbdata.sample_units import SampleUnit
from rbdata.samplers import Sampler
from rbdata.storages import ListStorage, Storage, TensorStorage
from rbdata.transforms import Compose
from rbdata.writers import Writer


class _Persistable(Protocol):
    """What saving and loading need from a buffer."""

    @property
    def storage(self) -> Storage: ...

    @property
    def sampler(self) -> Sampler: ...

    @property
    def writer(self) -> Writer: ...

    @property
    def generator(self) -> torch.Generator | None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class _Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class Parts(NamedTuple):
    """A buffer's components, as its state is made of them."""

    storage: Storage
    sampler: Sampler
    writer: Writer
    sample_unit: SampleUnit
    transform: Compose
    generator: torch.Generator | None
    batch_size: int | None
    counters: _Stateful


def buffer_state(parts: Parts) -> dict[str, Any]:
    """The buffer's state under torchrl's keys (``_storage``, ``_sampler``, ...) and rbdata's."""
    generator = parts.generator
    return {
        "_storage": parts.storage.state_dict(),
        "_sampler": parts.sampler.state_dict(),
        "_writer": parts.writer.state_dict(),
        "_transforms": parts.transform.state_dict(),
        "_sample_unit": parts.sample_unit.state_dict(),
        "_batch_size": parts.batch_size,
        "_consume_after_n_samples": parts.sampler.consume_after_n,
        "_rng": None if generator is None else generator.get_state(),
        **parts.counters.state_dict(),
    }


# Keys of the first rbdata format, still read.
_LEGACY = {
    "_storage": "storage",
    "_sampler": "sampler",
    "_writer": "writer",
    "_sample_unit": "sample_unit",
    "_rng": "rng",
}


def _entry(state: dict[str, Any], key: str) -> Any:
    return state.get(key, state.get(_LEGACY.get(key, key)))


def load_buffer_state(state: dict[str, Any], parts: Parts) -> None:
    """Load :func:`buffer_state`'s output; on any error every component is left as it was.

    The storage is loaded last: it validates its content before writing, so a
    rejected state never reaches it. ``_batch_size`` is not loaded: it is the
    buffer's construction argument.
    """
    rng = _entry(state, "_rng")
    if isinstance(rng, tuple | list):  # torchrl's (state, device)
        rng = rng[0]
    if rng is not None and not isinstance(rng, torch.Tensor):
        raise ValueError(f"state_dict['_rng'] must be a generator state tensor, got {rng!r}.")
    generator = parts.generator
    saved_rng = None if generator is None else generator.get_state()
    components = (parts.writer, parts.sampler, parts.sample_unit, parts.transform, parts.counters)
    with transaction(*components):
        try:
            for key, component in (
                ("_writer", parts.writer),
                ("_sampler", parts.sampler),
                ("_sample_unit", parts.sample_unit),
                ("_transforms", parts.transform),
            ):
                if _entry(state, key) is not None:
                    component.load_state_dict(_entry(state, key))
            parts.counters.load_state_dict(state)
            if rng is not None and generator is not None:
                generator.set_state(rng)
            if _entry(state, "_storage") is not None:
                parts.storage.load_state_dict(_entry(state, "_storage"))
                parts.storage.note_edit()  # caches built from the old content are stale
        except BaseException:
            if saved_rng is not None and generator is not None:
                generator.set_state(saved_rng)
            raise


def sampling_state(sampler: Sampler, generator: torch.Generator | None) -> dict[str, Any]:
    """What decides the next draws: the sampler's state and the generator's."""
    return {
        "sampler": sampler.state_dict(),
        "rng": None if generator is None else generator.get_state(),
    }


def load_sampling_state(
    state: dict[str, Any], sampler: Sampler, generator: torch.Generator | None
) -> None:
    """Load the ``sampler``/``rng`` entries of ``state`` (absent: kept); unchanged on error."""
    rng = state.get("rng")
    if rng is not None and not isinstance(rng, torch.Tensor):
        raise ValueError(f"sampling state 'rng' must be a generator state tensor, got {rng!r}.")
    with transaction(sampler):
        if state.get("sampler") is not None:
            sampler.load_state_dict(state["sampler"])
        if rng is not None and generator is not None:
            generator.set_state(rng)


def _components(rb: _Persistable) -> dict[str, str]:
    return {
        "storage": type(rb.storage).__name__,
        "sampler": type(rb.sampler).__name__,
        "writer": type(rb.writer).__name__,
    }


def _capacities(sd: dict[str, Any], ndim: Any, generator: Any) -> dict[str, Any]:
    """What the state's shapes are checked against: slots, storage ndim, generator device.

    The writer's generations and the sampler's priorities have one entry per slot.
    ``rbdata verify`` checks the state against them (see :mod:`rbdata.checkpoint`).
    """
    rows = {}
    for name, section, key in (
        ("generations", "_writer", "_generation"),
        ("priorities", "_sampler", "leaves"),
    ):
        value = (sd.get(section) or {}).get(key)
        rows[name] = int(value.shape[0]) if isinstance(value, torch.Tensor) and value.ndim else None
    rows["ndim"] = ndim if type(ndim) is int else None
    device = generator.device.type if isinstance(generator, torch.Generator) else None
    return {"capacities": rows, "generator": device}


def dumps(rb: _Persistable, path: str | os.PathLike[str]) -> None:
    """Write ``rb`` atomically to the directory ``path`` (see :mod:`rbdata.checkpoint`)."""
    sd = rb.state_dict()
    storage_sd = rb.storage.apply_save_hooks(sd.pop("_storage"), path)
    objects = None
    if "_storage" in storage_sd:  # list storages hold arbitrary Python objects
        objects = storage_sd["_storage"]
        storage_sd = {k: v for k, v in storage_sd.items() if k != "_storage"}
    sd["_storage"] = storage_sd
    writer = rb.writer
    manifest = {
        "components": _components(rb),
        "max_size": rb.storage.max_size,
        "length": len(rb.storage),
        "cursor": writer.cursor,
        "write_count": writer.write_count,
        "spec": storage_sd.get("spec"),
        **_capacities(sd, rb.storage.ndim, rb.generator),
    }
    write_dump(path, manifest, sd, objects)


def _load_torchrl_dump(rb: _Persistable, path: str | os.PathLike[str], allow_pickle: bool) -> None:
    """Load a directory torchrl's ``dumps`` wrote (everything it holds, or CheckpointError)."""
    state = read_torchrl_dump(path, allow_pickle)
    try:
        rb.load_state_dict(state)
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError) as err:
        if isinstance(err, CheckpointError):
            raise
        raise CheckpointError(f"torchrl dump at {str(path)!r} does not load: {err}") from err


def loads(rb: _Persistable, path: str | os.PathLike[str], allow_pickle: bool) -> None:
    """Read and check a dump, then load it into ``rb``; on any error ``rb`` is unchanged.

    Pickled objects are unpickled only with ``allow_pickle`` and only into a list storage.
    """
    if is_torchrl_dump(path):
        _load_torchrl_dump(rb, path, allow_pickle)
        return
    holds_objects = isinstance(rb.storage, ListStorage)
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
    saved_max = manifest.get("max_size")
    saved_lead = (_entry(sd, "_storage") or {}).get("lead")
    if type(saved_max) is not int or not rb.storage.accepts_max_size(saved_max, saved_lead):
        raise CheckpointError(
            f"dump at {str(path)!r} has storage max_size {manifest.get('max_size')}; this buffer's "
            f"storage has max_size {rb.storage.max_size}."
        )
    if (objects is not None) != holds_objects:
        raise CheckpointError(
            f"dump at {str(path)!r} {'holds' if objects is not None else 'lacks'} list-storage "
            f"objects; this buffer's storage is a {type(rb.storage).__name__}."
        )
    storage_sd = _entry(sd, "_storage") or {}
    if objects is not None:
        storage_sd = {**storage_sd, "_storage": objects}
    sd["_storage"] = rb.storage.apply_load_hooks(storage_sd)
    sd.pop("storage", None)
    try:
        rb.load_state_dict(sd)
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError) as err:
        if isinstance(err, CheckpointError):
            raise
        raise CheckpointError(f"dump at {str(path)!r} does not fit this buffer: {err}") from err


# ------------------------------------------------------------ the buffer's state part


class _BufferState:
    """Saving, restoring and reporting a buffer's state (the format lives in ``_persistence``).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4))
        >>> _ = rb.extend(torch.arange(3))
        >>> copy = ReplayBuffer(storage=LazyTensorStorage(4))
        >>> copy.load_state_dict(rb.state_dict())
        >>> len(copy), copy.stats()["size"]
        (3, 3)
    """

    def __init__(self, components: _Components) -> None:
        self._components = components

    def state_dict(self) -> dict[str, Any]:
        """The buffer's full state (content and prefetched batches included) under fixed keys."""
        c = self._components
        c.init()
        c.prefetcher.settle()  # the batches in flight take the lock
        with c.sync.lock:
            state = buffer_state(self._parts())
            state["_prefetch_state"] = c.prefetcher.state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (validated first; unchanged on error)."""
        c = self._components
        c.init()
        prefetched = state_dict.get("_prefetch_state")
        check_queue_state(prefetched, c.prefetch)
        c.prefetcher.settle()
        with c.sync.cond:
            load_buffer_state(state_dict, self._parts())
            c.feed.skip_to(c.writer.write_count)
            c.prefetcher.restore(() if prefetched is None else prefetched["queue"])
            c.sync.cond.notify_all()

    def _parts(self) -> Parts:
        c = self._components
        return Parts(
            c.storage,
            c.sampler,
            c.writer,
            c.sample_unit,
            c.transform,
            c.generator,
            c.batch_size,
            c.stats,
        )

    def sampling_state(self) -> dict[str, Any]:
        """What decides the next draws: the sampler's and the generator's state."""
        c = self._components
        c.init()
        with c.sync.lock:
            return sampling_state(c.sampler, c.generator)

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`sampling_state`'s output (missing entries kept; unchanged on error)."""
        c = self._components
        c.init()
        with c.sync.lock:
            load_sampling_state(state, c.sampler, c.generator)

    def stats(self) -> dict[str, Any]:
        """A cheap, serializable snapshot of the buffer's operational state."""
        c = self._components
        if not c.initialized:
            out: dict[str, Any] = {
                "size": 0,
                "write_count": 0,
                "prefetch_queue_size": 0,
                "initialized": False,
            }
            storage = c.args["storage"]
            if isinstance(storage, Storage):
                out.update(capacity=storage.max_size, utilization=0.0)
            return out
        size = c.sampleable()
        storage = c.storage
        capacity = storage.max_size
        if isinstance(storage, TensorStorage) and storage.ndim > 1 and storage.initialized:
            capacity = math.prod(storage.shape)  # whole items along dim 0, as torchrl
        return {
            "size": size,
            "write_count": c.writer.write_count,
            "prefetch_queue_size": len(c.prefetcher),
            "initialized": True,
            "capacity": capacity,
            "utilization": size / capacity,
            **storage.memory_stats(),
            **c.stats.snapshot(),
        }
