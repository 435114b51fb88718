"""The public buffer protocol: what ReplayDataset, ReplayDataModule and ReplayCallback serve.

Any object that implements :class:`ServableBuffer` can be served by
:class:`~rbdata.ReplayDataset` (and so by ``ReplayDataModule`` and
``ReplayCallback``): :class:`~rbdata.ReplayBuffer` and its variants,
:class:`~rbdata.OfflineToOnlineReplayBuffer` and the Ray client do. The loader
splits sampling into two steps so that a checkpoint can record what was drawn
but not handed out yet:

1. :meth:`ServableBuffer.draw` picks the rows of one batch (indices and
   per-row info, no data), under :attr:`ServableBuffer.lock`;
2. :meth:`ServableBuffer.gather` reads those rows (a copy), attaches the info
   and runs the sample-path transforms.

A batch gathered ahead of its hand-out (prefetch) goes through
:meth:`ServableBuffer.refilter` when it is handed out, so that row filters
such as :class:`~rbdata.PolicyAgeFilter` see the policy version of that
moment.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase
from torch.utils.hooks import RemovableHandle

if TYPE_CHECKING:
    from rbdata.samplers import Sampler
    from rbdata.storages import Storage

__all__ = [
    "INFO_KEYS",
    "Draw",
    "ReadableByWorkers",
    "ServableBuffer",
    "StatsSource",
    "aligned_info",
]

#: A callable returning extra counters merged into ``buffer.stats()``.
StatsSource = Callable[[], dict[str, Any]]

#: The per-row info entries a buffer adds to a draw (and TensorDict buffers to a batch).
INFO_KEYS = ("index", "index_generation", "priority_weight")


class Draw(NamedTuple):
    """The rows of one batch, drawn but not gathered.

    Attributes:
        index: the rows (a LongTensor; a Sequence unit's windows come flat, window after window).
        info: per-row tensors whose leading shape is ``index.shape``:
            ``"index"``, and where the buffer has them ``"index_generation"``,
            ``"priority_weight"``, ``"is_offline"``... Only tensors, so that a
            draw can be saved with ``torch.save`` and loaded with
            ``weights_only=True``.
        ends_pass: this batch is the last one of a sampler-driven pass (the end
            of a without-replacement epoch).

    Examples:
        >>> import torch
        >>> from rbdata.buffers.protocol import Draw
        >>> draw = Draw(torch.tensor([3, 1]), {"index": torch.tensor([3, 1])})
        >>> draw.rows, draw.ends_pass
        (2, False)
    """

    # The field shadows tuple.index on purpose (it is the draw's rows); mypy checks a
    # NamedTuple field against the tuple method of that name.
    index: torch.Tensor  # type: ignore[assignment]
    info: dict[str, torch.Tensor]
    ends_pass: bool = False

    @property
    def rows(self) -> int:
        """The number of rows (anchors) drawn."""
        return int(self.index.shape[0]) if self.index.ndim else 1

    @classmethod
    def empty(cls) -> Draw:
        """A draw of no rows (nothing was sampleable)."""
        index = torch.empty(0, dtype=torch.long)
        return cls(index, {"index": index})


def aligned_info(batch: Any, info: Mapping[str, Any]) -> dict[str, Any]:
    """The info of a gathered batch, as ``sample(return_info=True)`` returns it.

    A row filter may have dropped rows of a TensorDict batch; the batch's own
    info entries are then the aligned ones, so they win.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"index": torch.tensor([4])}, [1])
        >>> aligned_info(batch, {"index": torch.tensor([4, 7])})
        {'index': tensor([4])}
    """
    if isinstance(batch, TensorDictBase) and "index" in batch.keys():
        keys = batch.keys(include_nested=True)
        return {key: batch.get(key) for key in info if key in keys}
    return dict(info)


@runtime_checkable
class ServableBuffer(Protocol):
    """What a replay buffer provides so that the data-loading layer can serve it.

    Thread safety: a collector thread may write, a prefetch thread may call
    :meth:`draw` and :meth:`gather`, and the training loop may update
    priorities, all at once.

    Examples:
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> from rbdata.buffers.protocol import ServableBuffer
        >>> isinstance(ReplayBuffer(storage=LazyTensorStorage(10)), ServableBuffer)
        True
    """

    @property
    def batch_size(self) -> int | None:
        """The default batch size (None when the buffer has none)."""
        ...

    @property
    def write_count(self) -> int:
        """Items written so far; a change wakes :meth:`wait_for_data` waiters."""
        ...

    @property
    def prioritized(self) -> bool:
        """Whether priority updates change what is drawn."""
        ...

    @property
    def lock(self) -> Any:
        """A reentrant lock: draws, and reading or loading the sampling state, happen under it."""
        ...

    def __len__(self) -> int: ...

    def draw(self, batch_size: int) -> Draw:
        """Draw the rows of one batch; an empty draw when nothing is sampleable."""
        ...

    def gather(self, draw: Draw) -> Any:
        """Read the rows of ``draw`` (a copy) with its info attached, transforms applied."""
        ...

    def refilter(self, batch: Any) -> Any:
        """Re-apply the sample-path row filters to a batch gathered ahead of its hand-out."""
        ...

    def sampling_state(self) -> dict[str, Any]:
        """What decides the next draws (sampler and RNG state), as tensors and plain values."""
        ...

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`sampling_state`'s output (missing entries kept; unchanged on error)."""
        ...

    def wait_for_data(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Sleep until ``predicate()`` holds (re-checked on every write) or ``timeout`` passes."""
        ...

    def notify_waiters(self) -> None:
        """Wake the threads inside :meth:`wait_for_data` so they re-check their predicate."""
        ...

    def register_stats_source(self, source: StatsSource) -> RemovableHandle:
        """Merge ``source()``'s counters into :meth:`stats` until the handle is removed."""
        ...

    def stats(self) -> dict[str, Any]:
        """A cheap snapshot of scalar counters (``size``, ``write_count``, ...)."""
        ...

    def update_batch_priority(self, batch: Any, priority: torch.Tensor) -> None:
        """Apply new priorities to the rows of a batch this buffer handed out.

        The buffer reads what it needs from ``batch`` (``"index"``, and
        ``"index_generation"`` so that rewritten rows are skipped); a buffer
        that is not prioritized ignores the call.
        """
        ...

    def publish_policy_version(self, version: int) -> None:
        """Make ``version`` the live policy version of every PolicyAgeFilter of the buffer."""
        ...

    def extend(self, data: Any) -> torch.Tensor:
        """Write a batch of items (``ReplayDataModule`` loads ``offline_data`` with it)."""
        ...

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Draw with ``generator`` from now on (``ReplayDataModule`` seeds each rank's buffer)."""
        ...

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save the buffer in the directory ``path`` (Lightning checkpoints do)."""
        ...

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Load a buffer saved by :meth:`dumps` (a resumed ``Trainer.fit`` does)."""
        ...


@runtime_checkable
class ReadableByWorkers(Protocol):
    """A buffer that DataLoader worker processes (``num_workers > 0``) can read.

    The training process draws every batch with the buffer's own sampler
    (``sampler``); each worker gathers the rows it is told, through its own
    reader (a buffer over the same storage, with a lock of its own). The
    loader asks the storage whether workers read its memory.

    Examples:
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> from rbdata.buffers.protocol import ReadableByWorkers
        >>> isinstance(ReplayBuffer(storage=LazyTensorStorage(10)), ReadableByWorkers)
        True
    """

    @property
    def sampler(self) -> Sampler:
        """The sampler that draws the workers' batches (in the training process)."""
        ...

    @property
    def storage(self) -> Storage:
        """The storage every worker reads."""
        ...

    def __len__(self) -> int: ...

    def reader(self, sampler: Sampler) -> ServableBuffer:
        """A buffer over the same storage that draws with ``sampler`` under a lock of its own."""
        ...
