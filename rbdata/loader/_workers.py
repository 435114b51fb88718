"""ReplayDataset in DataLoader worker processes (``num_workers > 0``).

A worker gathers and transforms batches whose rows the training process
draws (:mod:`rbdata.loader._draw_service`): one sampler, the buffer's own, so
priorities, consumption counts, trajectory indexes and without-replacement
passes are the ones the training process sees, and rows committed after the
workers started reach them. The worker reads the rows itself, from the
storage's memory, which other processes must be able to read: a
LazyMemmapStorage or a storage in shared memory (``shared=True``,
``LazyTensorStorage(..., shared_init=True)``).

Batch ``k`` of a pass is drawn after batches ``0 .. k-1`` and gathered by
worker ``k % num_workers`` (the DataLoader hands batches out round-robin), so
a seeded buffer ``generator`` gives the same batches whatever the timing, and
a ``StatefulDataLoader`` checkpoint resumes exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.connection import Client, Connection
from typing import Any

import torch

from rbdata._generator_pickling import install as _install_generator_pickling
from rbdata.buffers.protocol import Draw, ReadableByWorkers, ServableBuffer, aligned_info
from rbdata.loader._batch import as_replay_batch
from rbdata.loader._draw_service import DrawAccess
from rbdata.loader._settings import DatasetSettings
from rbdata.loader._socket_server import receive, send
from rbdata.samplers import RandomSampler
from rbdata.storages import LazyMemmapStorage, Storage, TensorStorage

_USE_PREFETCH = (
    "use num_workers=0 with ReplayDataset(prefetch=k), which samples on a background thread "
    "of the main process"
)

_install_generator_pickling()

#: this worker process's connection to each draw service it talks to (by address)
_CLIENTS: dict[str, Connection] = {}


def check(ds: DatasetSettings) -> ReadableByWorkers:
    """Raise a RuntimeError/ValueError unless ``ds`` can run in worker processes."""
    buffer = ds.buffer
    if not isinstance(buffer, ReadableByWorkers):
        raise RuntimeError(
            f"num_workers > 0 needs a buffer whose workers each read it through a reader of "
            f"their own (a ReplayBuffer), got {type(buffer).__name__}; {_USE_PREFETCH}."
        )
    storage = buffer.storage
    if not readable_by_workers(storage):
        raise RuntimeError(
            f"num_workers > 0 needs a storage that worker processes can read without copying "
            f"it: a LazyMemmapStorage or a shared-memory storage (shared=True, or "
            f"LazyTensorStorage(..., shared_init=True)); got {type(storage).__name__}; "
            f"{_USE_PREFETCH}."
        )
    main_only = {
        "prefetch": ds.prefetch != 0,
        "pin_memory": ds.pin_memory,
        "device": ds.device is not None,
    }
    used = [name for name, on in main_only.items() if on]
    if used:
        raise ValueError(
            f"ReplayDataset({', '.join(used)}) acts in the main process and cannot be used with "
            "num_workers > 0; use the DataLoader's prefetch_factor and pin_memory instead, or "
            "num_workers=0."
        )
    return buffer


def readable_by_workers(storage: Storage) -> bool:
    if isinstance(storage, LazyMemmapStorage):
        return True
    if not isinstance(storage, TensorStorage):
        return False
    if not storage.initialized:
        return storage.shared_before_write
    return all(storage.get_leaf(key).is_shared() for key in storage.leaf_keys())


def iterate(ds: DatasetSettings, access: DrawAccess | None, info: Any) -> Any:
    """The batches of worker ``info.id``: batches ``id, id + num_workers, ...`` of the pass."""
    buffer = check(ds)
    if access is None:
        raise RuntimeError(
            "this DataLoader worker cannot reach the training process's draws: the dataset was "
            "copied into the worker without them (a DataLoader with the 'fork' start method); "
            "build the loader with ds.dataloader(num_workers=...), or use the 'spawn' start "
            "method (rbdata's default)."
        )
    # The worker's copy of the buffer gathers under its own lock (a lock held by a parent
    # thread at fork time would stay locked in the child forever).
    return _batches(ds, buffer.reader(buffer.sampler), access, info)


def worker_copy(buffer: ServableBuffer) -> ServableBuffer:
    """What a spawned worker gets of ``buffer``: a reader that gathers, and never draws.

    Its sampler is a fresh RandomSampler and it has no generator: the
    training process draws, so the sampler's state (a priority tree) need not
    travel, nor the generator (torch cannot pass a ``torch.Generator`` to a
    spawned process: "unable to resize file ... Invalid argument").
    """
    if not isinstance(buffer, ReadableByWorkers):
        return buffer
    reader = buffer.reader(RandomSampler())
    reader.set_rng(None)
    return reader


def _connection(access: DrawAccess) -> Connection:
    conn = _CLIENTS.get(access.address)
    if conn is None or conn.closed:
        conn = Client(access.address, family="AF_UNIX", authkey=access.key)
        _CLIENTS[access.address] = conn
    return conn


def _request(conn: Connection, message: tuple[Any, ...]) -> tuple[Any, ...]:
    """Send ``message``; the reply (the service's end of file: the training process is gone)."""
    try:
        send(conn, message)
        reply: tuple[Any, ...] = receive(conn)
    except (EOFError, OSError) as error:
        raise RuntimeError(
            "the training process's draw service closed (ReplayDataset.close(), or the "
            "process ended) while a DataLoader worker was running"
        ) from error
    if reply[0] == "error":
        raise RuntimeError(f"the training process could not draw a batch: {reply[1]}")
    return reply


def _drop_rewritten(
    batch: Any, info: dict[str, Any], generations: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[Any, dict[str, Any]]:
    """``batch`` without the rows written again between their draw and this gather.

    Only a writer that tracks generations tells (the draw's
    ``index_generation``; ``generations(index)`` gives the stamps now, after
    the gather): a ring that wrapped, or a consumed slot written again, while
    the batch waited for its worker.
    """
    drawn = info.get("index_generation")
    if not isinstance(drawn, torch.Tensor) or drawn.ndim == 0:
        return batch, info
    keep = (generations(info["index"]) == drawn).reshape(drawn.shape[0], -1).all(-1)
    if bool(keep.all()) or batch.batch_size[0] != keep.shape[0]:
        return batch, info
    kept = {
        key: value[keep]
        if isinstance(value, torch.Tensor) and value.ndim and value.shape[0] == keep.shape[0]
        else value
        for key, value in info.items()
    }
    return as_replay_batch(batch[keep]), kept


def _batches(ds: DatasetSettings, reader: ServableBuffer, access: DrawAccess, info: Any) -> Any:
    position = ds.worker_position
    conn = _connection(access)
    workers, worker = info.num_workers, info.id
    restored, position.restored = position.restored, None
    number = worker
    if restored is not None and position.batch is not None:
        number = position.batch + workers
    _request(conn, ("begin", worker, workers, info.seed - worker, restored))

    def snapshot(batch: int) -> dict[str, Any]:
        state: dict[str, Any] = _request(conn, ("snapshot", batch))[1]
        return state

    def generations(index: torch.Tensor) -> torch.Tensor:
        stamps: torch.Tensor = _request(conn, ("generations", index))[1]
        return stamps

    position.snapshot = snapshot
    while True:
        reply = _request(conn, ("next", number))
        if reply[0] == "end":
            return
        draw = Draw(reply[1], dict(reply[2]))
        batch, info = _drop_rewritten(as_replay_batch(reader.gather(draw)), draw.info, generations)
        draw = Draw(draw.index, info)
        position.batch = number
        number += workers
        yield (batch, aligned_info(batch, draw.info)) if ds.return_info else batch
