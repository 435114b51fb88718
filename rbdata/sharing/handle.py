"""A shared buffer handed, as bytes, to an unrelated process on the same machine.

``share()`` puts a buffer's rows, counters and lock in shared memory for the
children ``torch.multiprocessing`` starts. A process the owner did not start
(a Ray task beside the Ray actor hosting the buffer) can map them too, given
paths rather than inherited descriptors:
:meth:`rbdata.buffers.shared_handle._SharedHandle.export_shared` shares
the buffer by file descriptor (torch's ``file_descriptor`` strategy,
or rbdata's ``memfd`` segments) and pickles each shared tensor as the path
``/proc/<owner pid>/fd/<fd>`` of the owner's descriptor (the lock travels by
its file's path), and :func:`import_shared` opens those paths and maps them
there. No memory is named in ``/dev/shm``: the kernel frees it with the last
process that maps it, so nothing is left behind however the owner or a
client ends (killed by Ray included). torch's ``file_system`` strategy, which
this used, leaves a ``torch_*`` file for every shared tensor when the
owner's ``torch_shm_manager`` is killed with it, as Ray does. The copy
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
import os
import pickle
from collections.abc import Callable, Iterator
from multiprocessing import context
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing as mp

from rbdata.sharing.liveness import identity, this_process

__all__ = ["dump_shared", "import_shared", "named_sharing", "pickled_while_spawning"]

_log = logging.getLogger(__name__)


class _Spawning:
    """Stands for a child being started while the buffer is pickled (locks pickle then)."""


@contextlib.contextmanager
def named_sharing() -> Iterator[None]:
    """Inside the block, memory is shared by file descriptor, which other processes open by path.

    Memory shared (``share_memory_()``) in the block is torch's
    ``file_descriptor`` kind (an unlinked shared-memory file) or rbdata's
    ``memfd`` segment; :func:`dump_shared` sends it as the path
    ``/proc/<pid>/fd/<fd>``, which any process of the same user on the
    machine can open while this process runs. The process's strategy is
    restored after.
    """
    strategy = mp.get_sharing_strategy()  # type: ignore[no-untyped-call]
    mp.set_sharing_strategy("file_descriptor")  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        mp.set_sharing_strategy(strategy)  # type: ignore[no-untyped-call]


def _mapped_tensor(
    owner: tuple[int, int],
    fd: int,
    nbytes: int,
    dtype: torch.dtype,
    offset: int,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
) -> torch.Tensor:
    """A tensor over the owner's shared memory ``fd`` (what :class:`_NamedPickler` sent).

    Raises:
        OSError: the owner process is gone (or another process has its pid now),
            or its descriptor cannot be opened from here.
    """
    pid, start = owner
    if identity(pid) != start:
        raise ProcessLookupError(
            f"the process {pid} that shared this buffer is gone: its memory cannot be mapped"
        )
    local = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
    try:
        if os.fstat(local).st_size < nbytes:
            raise OSError(f"/proc/{pid}/fd/{fd} is not the shared memory it was ({nbytes} bytes)")
        # torch maps the descriptor and keeps a duplicate of its own
        storage = torch.UntypedStorage._new_shared_fd_cpu(local, nbytes)  # type: ignore[attr-defined]
    finally:
        os.close(local)
    region = torch.empty(0, dtype=torch.uint8).set_(storage).view(dtype)
    return region.as_strided(shape, stride, offset)


def _local_storage(payload: bytes) -> torch.UntypedStorage:
    """A storage of its own holding ``payload`` (process-local memory sent by value)."""
    if not payload:
        return torch.empty(0, dtype=torch.uint8).untyped_storage()
    return torch.frombuffer(bytearray(payload), dtype=torch.uint8).clone().untyped_storage()


class _NamedPickler(ForkingPickler):
    """Shared CPU tensors by the path of the owner's descriptor: the receiver opens it itself.

    torch's own reductions hand a descriptor over a socket (only to a child
    it starts) or register every receiver with the sender's
    ``torch_shm_manager``, which dies with the sender (Ray kills an actor's
    children with it) and leaves the files behind. ``/proc/<pid>/fd/<fd>``
    is opened by the receiver while the owner runs, and the memory lives as
    long as someone maps it. Shared memory this pickler cannot send (a
    tensor subclass, a bare storage) is refused; memory that is not shared
    (state of this process only) is copied into the pickle.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.UntypedStorage) and obj.device.type == "cpu":
            if obj.is_shared():
                raise pickle.PicklingError("shared memory outside a plain tensor cannot be mapped")
            # process-local memory (a sampler's pass order, say) travels by value, as a
            # plain pickle sends it: torch's reduction would share it by a descriptor
            # that only a child this process starts can receive
            raw = torch.empty(0, dtype=torch.uint8).set_(obj)
            return _local_storage, (raw.numpy().tobytes(),)
        if not isinstance(obj, torch.Tensor) or obj.device.type != "cpu" or not obj.is_shared():
            return NotImplemented
        if type(obj) is not torch.Tensor:
            raise pickle.PicklingError(f"a shared {type(obj).__name__} cannot be mapped")
        fd, nbytes = obj.untyped_storage()._share_fd_cpu_()
        args = (this_process(), fd, nbytes, obj.dtype, obj.storage_offset(), tuple(obj.shape))
        return _mapped_tensor, (*args, obj.stride())


def dump_shared(obj: Any) -> bytes:
    """``obj`` pickled for another process on this machine: shared memory and locks by name.

    Call it inside :func:`named_sharing`, which shares tensors by file descriptor.

    Raises:
        pickle.PicklingError: for shared memory that cannot travel by path.
    """
    return pickled_while_spawning(obj, _Spawning(), _NamedPickler)


def pickled_while_spawning(obj: Any, popen: object, pickler: type[ForkingPickler]) -> bytes:
    """``obj`` pickled by ``pickler`` while ``popen`` stands for a child being started.

    multiprocessing pickles locks and descriptors only for a child being
    started (its "spawning popen"); ``popen`` says what becomes of them here.
    """
    out = io.BytesIO()
    context.set_spawning_popen(popen)  # type: ignore[arg-type]
    try:
        pickler(out, pickle.HIGHEST_PROTOCOL).dump(obj)
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
