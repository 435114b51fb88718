"""OfflineToOnlineReplayBuffer: a fixed offline dataset mixed with a growing online buffer."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDictBase
from torch.utils.hooks import RemovableHandle

from rbdata._component.stateful import transaction
from rbdata.buffers._init_args import resolve_batch_size
from rbdata.buffers._mixture import (
    SOURCE_KEY,
    draw_parts,
    gather_mixed,
    merge_draws,
    refilter_mixed,
    route_priority_update,
    without_content,
)
from rbdata.buffers._mixture_checks import (
    check_count,
    check_mixture_args,
    check_online_data,
    fraction_at,
)
from rbdata.buffers._stats import _BufferStats
from rbdata.buffers.protocol import INFO_KEYS, Draw, StatsSource
from rbdata.buffers.replay import ReplayBuffer
from rbdata.buffers.tensordict import TensorDictReplayBuffer
from rbdata.samplers import Sampler
from rbdata.storages import LazyTensorStorage, Storage, TensorStorage
from rbdata.transforms import Compose, PolicyAgeFilter, Transform
from rbdata.writers import ImmutableDatasetWriter, Writer

__all__ = ["SOURCE_KEY", "OfflineToOnlineReplayBuffer"]


class OfflineToOnlineReplayBuffer:
    """Samples batches that mix a fixed offline dataset with a growing online buffer.

    Offline-to-online fine-tuning keeps training on a fixed dataset while new
    experience streams in from a live policy. Every batch holds exactly
    ``round(f * batch_size)`` rows drawn from the offline data and the rest from
    the online data, where ``f`` is the offline fraction for that batch: a
    constant, or a schedule (a callable taking the number of batches sampled so
    far and returning a float in ``[0, 1]``) so that the share of offline data
    can be annealed. While the online part is empty, every row comes from the
    offline data, whatever ``f``.

    A batch is one TensorDict: the offline rows first, then the online rows,
    with an ``"is_offline"`` entry (bool ``[B]``) telling where each row comes
    from and ``"index"`` holding each row's index *in its own part*. Other
    sample entries (``"index_generation"``, ``"priority_weight"``) are kept; where one
    part provides them and the other does not, the other's rows get 0 (``1``
    for ``"priority_weight"``). Both parts must hold the same entries: ``extend`` and
    ``add`` check the online data against the offline layout (keys, shapes,
    dtypes) before anything is written.

    ``extend`` and ``add`` write to the online part, a
    :class:`~rbdata.TensorDictReplayBuffer`; ``storage``, ``sampler``,
    ``writer``, ``dumps``/``loads`` and ``empty`` are those of the online part.
    The offline part is read-only when built from a TensorDict. Sampling is
    thread-safe: a collector thread may extend while the learner samples.
    A :class:`~rbdata.ReplayDataset` serves it as it serves any buffer
    (prefetch, staleness re-checks of the online rows, rate limiting, exact
    resume, the schedule's position included), in the main process only.

    Args:
        offline: the fixed dataset: a TensorDict with one batch dimension
            (copied into a read-only buffer over ``TensorStorage(offline)`` with
            an :class:`~rbdata.ImmutableDatasetWriter`)
            or a :class:`~rbdata.ReplayBuffer` of TensorDicts already holding it
            (used as is: it keeps its own sampler, transforms and generator).
        online_storage: the storage of the online part.
        online_capacity: build the online storage as ``LazyTensorStorage(online_capacity)``.
            Give exactly one of ``online_storage`` and ``online_capacity``.
        offline_fraction: the share of offline rows per batch, a float in
            ``[0, 1]`` (0 and 1 allowed) or a schedule ``f(batches_sampled) -> float``
            whose value is checked on every batch.

    Keyword Args:
        batch_size: the default batch size of :meth:`sample` and iteration.
        generator: a ``torch.Generator`` used by both parts (the parts built
            here); the same seed gives the same batches for the same data.
        online_sampler: the online part's sampler (default: uniform with replacement).
        online_writer: the online part's writer (default:
            :class:`~rbdata.TensorDictRoundRobinWriter`; pass one with
            ``track_generations=True`` to get ``"index_generation"``).
        online_transform: the online part's transform (e.g. a
            :class:`~rbdata.PolicyAgeFilter`, which may make the online share smaller).

    Raises:
        TypeError: for an ``offline`` that is neither a TensorDict nor a ReplayBuffer,
            a non-numeric ``offline_fraction`` or a bad ``generator``.
        ValueError: for an empty offline TensorDict, an ``offline_fraction``
            outside ``[0, 1]``, a bad ``batch_size`` or ``online_capacity``, or
            when not exactly one of ``online_storage`` and ``online_capacity`` is given.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import OfflineToOnlineReplayBuffer
        >>> offline = TensorDict({"obs": torch.zeros(100, 3)}, batch_size=[100])
        >>> rb = OfflineToOnlineReplayBuffer(
        ...     offline, online_capacity=1000, batch_size=10,
        ...     offline_fraction=lambda n: max(0.1, 0.5 - 0.01 * n),  # anneal 0.5 -> 0.1
        ... )
        >>> int(rb.sample()["is_offline"].sum())  # online part empty: all offline
        10
        >>> _ = rb.extend(TensorDict({"obs": torch.ones(50, 3)}, batch_size=[50]))
        >>> batch = rb.sample()
        >>> int(batch["is_offline"].sum()), len(rb)
        (5, 150)
        >>> rb.stats()["offline_fraction"]
        0.48
    """

    def __init__(
        self,
        offline: TensorDictBase | ReplayBuffer,
        online_storage: Storage | None = None,
        online_capacity: int | None = None,
        offline_fraction: float | Callable[[int], float] = 0.5,
        *,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        online_sampler: Sampler | None = None,
        online_writer: Writer | None = None,
        online_transform: Transform | Callable[[Any], Any] | None = None,
    ) -> None:
        offline_fraction = check_mixture_args(
            offline, online_storage, online_capacity, offline_fraction, batch_size, generator
        )
        if isinstance(offline, TensorDictBase):
            offline = TensorDictReplayBuffer(
                storage=TensorStorage(offline),
                writer=ImmutableDatasetWriter(),
                generator=generator,
            )
        self._offline: ReplayBuffer = offline
        if online_capacity is not None:  # then online_storage is None (checked above)
            online_storage = LazyTensorStorage(online_capacity)
        self._online = TensorDictReplayBuffer(
            storage=online_storage,
            sampler=online_sampler,
            writer=online_writer,
            transform=online_transform,
            batch_size=batch_size,
            generator=generator,
        )
        self._fraction = offline_fraction
        self._batch_size = batch_size
        self._generator = generator
        self._batches_sampled = 0
        self._lock = threading.RLock()  # a ReplayDataset samples under it, then draws
        self._stats = _BufferStats()

    # ------------------------------------------------------------ parts
    @property
    def offline(self) -> ReplayBuffer:
        """The buffer holding the offline data."""
        return self._offline

    @property
    def online(self) -> TensorDictReplayBuffer:
        """The online buffer, which ``extend`` and ``add`` write to."""
        return self._online

    @property
    def storage(self) -> Storage:
        """The online part's storage."""
        return self._online.storage

    @property
    def sampler(self) -> Sampler:
        """The online part's sampler."""
        return self._online.sampler

    @property
    def writer(self) -> Writer:
        """The online part's writer."""
        return self._online.writer

    @property
    def transform(self) -> Compose:
        """The online part's transform chain."""
        return self._online.transform

    @property
    def batch_size(self) -> int | None:
        """The default batch size of :meth:`sample` and iteration."""
        return self._batch_size

    @property
    def write_count(self) -> int:
        """The number of items written to the online part."""
        return self._online.write_count

    @property
    def batches_sampled(self) -> int:
        """The number of batches sampled so far (the schedule's argument)."""
        return self._batches_sampled

    @property
    def offline_fraction(self) -> float:
        """The offline fraction of the next batch (the schedule's current value)."""
        return fraction_at(self._fraction, self._batches_sampled)

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Use ``generator`` for both parts' sampling from now on (None: torch's global RNG)."""
        self._offline.set_rng(generator)
        self._online.set_rng(generator)
        self._generator = generator

    def update_priority(
        self,
        index: torch.Tensor | int,
        priority: torch.Tensor | float,
        *,
        generation: torch.Tensor | None = None,
        is_offline: torch.Tensor | None = None,
    ) -> None:
        """Update the priorities of a mixed batch's rows, each in its own part.

        Args:
            index: the batch's ``"index"`` (each row's index in its own part).
            priority: one priority per row, or one for all.
            generation: the batch's ``"index_generation"``: rows rewritten
                since are skipped.
            is_offline: the batch's ``"is_offline"`` entry, which tells the
                parts apart (the indices alone do not).

        Raises:
            ValueError: without ``is_offline``, for one of another length, or for
                a negative, NaN or infinite priority; nothing changes then.
        """
        route_priority_update(
            (self._offline, self._online), index, priority, generation, is_offline
        )

    @property
    def prioritized(self) -> bool:
        """Whether one of the parts is prioritized."""
        return self._offline.prioritized or self._online.prioritized

    @property
    def lock(self) -> Any:
        """The lock draws happen under (a ReplayDataset takes it to checkpoint consistently)."""
        return self._lock

    def update_batch_priority(self, batch: Any, priority: torch.Tensor) -> None:
        """Apply new priorities to a mixed batch's rows, each in its own part."""
        if not self.prioritized:
            return
        index = batch["index"]
        priority = torch.as_tensor(priority).detach()
        if priority.numel() == index.numel():
            priority = priority.reshape(index.shape)
        self.update_priority(
            index,
            priority,
            generation=batch.get("index_generation", None),
            is_offline=batch[SOURCE_KEY],
        )

    def publish_policy_version(self, version: int) -> None:
        """Make ``version`` the live policy version of the online part's PolicyAgeFilters."""
        self._online.publish_policy_version(version)

    def policy_age_filters(self) -> list[PolicyAgeFilter]:
        """The :class:`~rbdata.PolicyAgeFilter` instances of the online transform chain."""
        return self._online.policy_age_filters()

    def __len__(self) -> int:
        return len(self._offline) + len(self._online)

    # ---------------------------------------------------------- writing
    def extend(self, data: TensorDictBase, *, update_priority: bool | None = None) -> torch.Tensor:
        """Write a batch of transitions to the online part.

        Args:
            data: a TensorDict with the offline data's entries (extra
                ``"index"``, ``"index_generation"``, ``"priority_weight"`` and
                ``"is_offline"`` entries, as in a sampled batch, are dropped).

        Keyword Args:
            update_priority: passed to the online part's ``extend``.

        Returns:
            The indices written in the online part.

        Raises:
            TypeError: if ``data`` is not a TensorDict or an entry's dtype differs
                from the offline data's.
            KeyError: if the entries differ from the offline data's.
            ValueError: if an entry's shape differs from the offline data's.
        """
        data = check_online_data(self._offline.storage, data, batched=True)
        return self._online.extend(data, update_priority=update_priority)

    def add(self, data: TensorDictBase) -> int | torch.Tensor:
        """Write one transition (a TensorDict with no batch dimension) to the online part.

        Args:
            data: the transition, checked as in :meth:`extend`.

        Returns:
            The index written in the online part.
        """
        data = check_online_data(self._offline.storage, data, batched=False)
        return self._online.add(data)

    # --------------------------------------------------------- sampling
    def _batch_size_of(self, batch_size: int | None) -> int:
        """``batch_size`` checked, else the default; ValueError without either (torchrl's)."""
        try:
            return resolve_batch_size(batch_size, self._batch_size)
        except RuntimeError as err:
            raise ValueError(str(err)) from None

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Sample one mixed batch.

        Args:
            batch_size: the number of rows (default: the constructor's ``batch_size``).
            return_info: also return a dict with the batch's ``"index"``,
                ``"is_offline"`` (and ``"index_generation"``/``"priority_weight"`` when present).

        Returns:
            A TensorDict of ``batch_size`` rows (fewer when the online sampler
            returns fewer, e.g. under consume-after-n or a row filter), or
            ``(batch, info)`` with ``return_info``.

        Raises:
            ValueError: for a bad ``batch_size`` or a schedule value outside ``[0, 1]``.
            ValueError: without a ``batch_size`` here or at construction (torchrl's type
                for this class; ``ReplayBuffer`` raises ``RuntimeError`` there).
            RuntimeError: if offline rows are due and the offline buffer is empty.
        """
        draw = self.draw(self._batch_size_of(batch_size))
        batch = self.gather(draw)
        if return_info:
            info_keys = (*INFO_KEYS, SOURCE_KEY)
            return batch, {key: batch.get(key) for key in info_keys if key in batch.keys()}
        return batch

    def draw(self, batch_size: int) -> Draw:
        """Draw one mixed batch: each part's indices and info, merged (see ``_mixture``)."""
        with self._lock:
            fraction = fraction_at(self._fraction, self._batches_sampled)
            parts = draw_parts(self._offline, self._online, batch_size, fraction)
            self._batches_sampled += 1
        return merge_draws(*parts)

    def gather(self, draw: Draw) -> Any:
        """Gather a mixed draw: each part gathers (and transforms) its own rows."""
        return gather_mixed(self._offline, self._online, draw)

    def refilter(self, batch: TensorDictBase) -> TensorDictBase:
        """Re-apply the online row filters to the online rows of a batch sampled ahead."""
        return refilter_mixed(self._online, batch)

    def __iter__(self) -> Iterator[TensorDictBase]:
        """Yield batches of ``batch_size`` rows forever."""
        self._batch_size_of(None)
        while True:
            yield self.sample()

    def wait_for_data(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``predicate()`` holds, woken by online writes, or ``timeout`` seconds pass."""
        return self._online.wait_for_data(predicate, timeout)

    def notify_waiters(self) -> None:
        """Wake the threads inside :meth:`wait_for_data`."""
        self._online.notify_waiters()

    def register_stats_source(self, source: StatsSource) -> RemovableHandle:
        """Merge ``source()``'s counters into :meth:`stats` until the handle is removed."""
        return self._stats.register(source)

    # ------------------------------------------------- state and stats
    def stats(self) -> dict[str, Any]:
        """A snapshot: sizes of both parts, the current offline fraction, the online stats.

        Returns:
            ``size`` (offline + online), ``offline_size``, ``offline_fraction`` (for
            the next batch), ``batches_sampled``, ``write_count`` (online), the
            online part's ``stats()`` entries prefixed with ``online_`` and the
            counters of a ReplayDataset or rate limiter serving this buffer.
        """
        out: dict[str, Any] = {
            "size": len(self),
            "offline_size": len(self._offline),
            "offline_fraction": self.offline_fraction,
            "batches_sampled": self._batches_sampled,
            "write_count": self._online.write_count,
        }
        out.update({f"online_{key}": value for key, value in self._online.stats().items()})
        out.update(self._stats.snapshot())  # a ReplayDataset's or rate limiter's counters
        return out

    def sampling_state(self) -> dict[str, Any]:
        """What decides the next mixed draws: both parts' sampler and RNG, the schedule position."""
        return {
            "offline": self._offline.sampling_state(),
            "online": self._online.sampling_state(),
            "batches_sampled": self._batches_sampled,
        }

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Load :meth:`sampling_state`'s output (absent entries: kept); unchanged on error."""
        count = check_count(state.get("batches_sampled", self._batches_sampled), "batches_sampled")
        with transaction(self._offline.sampler, self._online.sampler):
            self._offline.load_sampling_state(state.get("offline", {}))
            self._online.load_sampling_state(state.get("online", {}))
        self._batches_sampled = count

    def state_dict(self) -> dict[str, Any]:
        """The online part's full state, the offline sampler's state and the schedule position.

        The offline data itself is not included: it is fixed and comes back from
        its source.
        """
        with self._lock:
            return {
                "online": self._online.state_dict(),
                "offline": without_content(self._offline.state_dict()),
                "batches_sampled": self._batches_sampled,
            }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (checked first; unchanged on error).

        Raises:
            ValueError: if ``batches_sampled`` is not an int >= 0.
        """
        count = check_count(
            state_dict.get("batches_sampled", self._batches_sampled),
            "state_dict['batches_sampled']",
        )
        with self._lock, transaction(self._offline.sampler, self._offline.writer):
            if "offline" in state_dict:
                self._offline.load_state_dict(without_content(state_dict["offline"]))
            if "online" in state_dict:
                self._online.load_state_dict(state_dict["online"])
            self._batches_sampled = count

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save the online part atomically in the directory ``path``."""
        self._online.dumps(path)

    def loads(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Load the online part from a :meth:`dumps` directory (see ``ReplayBuffer.loads``)."""
        self._online.loads(path, allow_pickle=allow_pickle)

    dump = dumps

    def load(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Alias for :meth:`loads`."""
        self.loads(path, allow_pickle=allow_pickle)

    def empty(self, empty_write_count: bool = True) -> None:
        """Empty the online part (the offline data stays)."""
        self._online.empty(empty_write_count)

    # -------------------------------------------------------- lifecycle
    def shutdown(self, timeout: float | None = None) -> None:
        """Release both parts' background threads."""
        self._online.shutdown()
        self._offline.shutdown()

    close = shutdown

    def __enter__(self) -> OfflineToOnlineReplayBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        fraction = "schedule" if callable(self._fraction) else self._fraction
        return (
            f"{type(self).__name__}(offline_size={len(self._offline)}, online_size="
            f"{len(self._online)}, offline_fraction={fraction}, batch_size={self._batch_size})"
        )
