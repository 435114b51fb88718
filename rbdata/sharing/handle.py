"""A shared buffer handed, as bytes, to an unrelated process on the same machine.

``share()`` puts a buffer's rows, counters and lock in shared memory for the
children ``torch.multiprocessing`` starts. A process the owner did not start
(a Ray task beside the Ray actor hosting the buffer) can map them too, given
names rather than file descriptors: :meth:`rbdata.buffers.shared_handle._SharedHandle.export_shared`
shares the buffer with torch's ``file_system`` strategy (memory named in
``/dev/shm``) and pickles it as for a spawned child (the lock travels by its
semaphore's name), and :func:`import_shared` rebuilds it there. The copy
writes into the owner's rows under the owner's lock, the owner's sampler
catches up with those writes before its next draw, and the copy's waits for
the lock end with an error once the owner process is gone
(:meth:`_SharedHandle.guard_lock`).

Only buffers whose state other processes can follow are exported: rows in a
tensor storage, a writer writing in ring order, no ``consume_after_n_samples``
(consumed slots are reused out of order), no prefetch thread, and no
prioritized sampler (priorities given with a write would land in the copy's
own sampler).
"""

from __future__ import annotations

import contextlib
import io
import logging
import pickle
from collections.abc import Callable, Iterator
from multiprocessing import context
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing as mp

__all__ = ["dump_shared", "import_shared", "named_sharing"]

_log = logging.getLogger(__name__)


class _Spawning:
    """Stands for a child being started while the buffer is pickled (locks pickle then)."""


@contextlib.contextmanager
def named_sharing() -> Iterator[None]:
    """Inside the block, torch's ``file_system`` sharing strategy: memory named in ``/dev/shm``.

    Memory shared (``share_memory_()``) and pickled (``ForkingPickler``) in the
    block travels by name, which any process on the machine can open; the
    process's strategy is restored after.
    """
    strategy = mp.get_sharing_strategy()  # type: ignore[no-untyped-call]
    mp.set_sharing_strategy("file_system")  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        mp.set_sharing_strategy(strategy)  # type: ignore[no-untyped-call]


_SHM = "/dev/shm"
_HEADER_BYTES = 64  # torch's file_system files start with a reference-count header


def _named_tensor(
    name: str,
    nbytes: int,
    dtype: torch.dtype,
    offset: int,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
) -> torch.Tensor:
    """A tensor over the shared file ``name`` (what :class:`_NamedPickler` sent)."""
    region = torch.from_file(
        _SHM + name, shared=True, size=_HEADER_BYTES + nbytes, dtype=torch.uint8
    ).view(dtype)
    # as_strided's offset counts from the file's start, header included
    return region.as_strided(shape, stride, _HEADER_BYTES // region.element_size() + offset)


class _NamedPickler(ForkingPickler):
    """Shared CPU tensors by their file's name: the receiver maps the file itself.

    torch's own ``file_system`` reduction registers every receiver with the
    sender's ``torch_shm_manager``, which dies with the sender (Ray kills an
    actor's children with it): a receiver freeing such a tensor after that
    aborts. A plain mapping of the file outlives the sender and needs nobody.
    Shared memory this pickler cannot send by name (a tensor subclass, a bare
    storage) is refused.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.UntypedStorage) and obj.device.type == "cpu" and obj.is_shared():
            raise pickle.PicklingError("shared memory outside a plain tensor cannot be mapped")
        if not isinstance(obj, torch.Tensor) or obj.device.type != "cpu" or not obj.is_shared():
            return NotImplemented
        if type(obj) is not torch.Tensor:
            raise pickle.PicklingError(f"a shared {type(obj).__name__} cannot be mapped")
        _, name, nbytes = obj.untyped_storage()._share_filename_cpu_()
        args = (name.decode(), nbytes, obj.dtype, obj.storage_offset(), tuple(obj.shape))
        return _named_tensor, (*args, obj.stride())


def dump_shared(obj: Any) -> bytes:
    """``obj`` pickled for another process on this machine: shared memory and locks by name.

    Call it inside :func:`named_sharing`, which shares tensors in named files.

    Raises:
        pickle.PicklingError: for shared memory that cannot travel by name.
        RuntimeError: for a tensor shared otherwise (by file descriptor).
    """
    out = io.BytesIO()
    context.set_spawning_popen(_Spawning())  # type: ignore[arg-type]
    try:
        _NamedPickler(out, pickle.HIGHEST_PROTOCOL).dump(obj)
    finally:
        context.set_spawning_popen(None)
    return out.getvalue()


def import_shared(data: bytes, alive: Callable[[], bool], dead: Callable[[], Exception]) -> Any:
    """A buffer ``export_shared()`` pickled (:mod:`rbdata.buffers.shared_handle`), mapped here.

    Args:
        data: ``export_shared()``'s bytes.
        alive: whether the owner process still runs (checked while waiting for its lock).
        dead: builds the error raised when it does not.
    """
    buffer = pickle.loads(data)
    buffer.guard_lock(alive, dead)
    return buffer
