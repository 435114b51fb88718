"""OfflineToOnlineReplayBuffer: a fixed offline dataset mixed with a growing online buffer."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from torch.utils.hooks import RemovableHandle

from rbdata._component.checks import check_number, check_optional_int, key_path
from rbdata._component.stateful import transaction
from rbdata.buffers._init_args import resolve_batch_size
from rbdata.buffers._priority_updates import check_priorities
from rbdata.buffers._stats import _BufferStats
from rbdata.buffers.protocol import INFO_KEYS, Draw, StatsSource
from rbdata.buffers.replay import ReplayBuffer
from rbdata.buffers.tensordict import TensorDictReplayBuffer
from rbdata.samplers import Sampler
from rbdata.storages import LazyTensorStorage, Storage, TensorStorage
from rbdata.transforms import Compose, PolicyAgeFilter, Transform
from rbdata.writers import ImmutableDatasetWriter, Writer

__all__ = ["OfflineToOnlineReplayBuffer", "SOURCE_KEY"]


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


# ------------------------------------------------------------ the mixed draw and batch
#
# draw_parts draws each part's rows of one batch, merge_draws joins them into one
# draw, gather_mixed has each part gather its own rows and joins the batches
# (refilter_mixed re-filters the online rows of a batch drawn ahead);
# route_priority_update sends a mixed batch's priorities back to the parts.
#
# A mixed draw is one (index, info) pair, as a single buffer's is: the offline rows
# first, then the online rows; index and info["index"] hold each row's index in its
# own part, info[SOURCE_KEY] (bool [B]) tells the parts apart, and every other
# per-row info entry is concatenated, the part that lacks it filled with 0 (1 for
# "priority_weight"). Such a draw can be kept (a ReplayDataset's pending batches, a
# checkpoint) and gathered later: split_draw gives each part its own (index, info).

SOURCE_KEY = "is_offline"
"""The batch entry (bool ``[B]``) that is True for the rows drawn from the offline data."""

_FILL_ONES = frozenset({"priority_weight"})  # info entries a part lacks are filled with 1 (else 0)

Rows = tuple[torch.Tensor, dict[str, Any]]


def draw_parts(
    offline: ReplayBuffer, online: ReplayBuffer, batch_size: int, fraction: float
) -> tuple[Rows | None, Rows | None]:
    """Each part's rows of one batch: ``round(fraction * batch_size)`` offline, the rest online.

    While the online part is empty, every row is offline. A part gives None
    for no rows (it may give fewer than asked: consume-after-n, a row filter).

    Raises:
        RuntimeError: if offline rows are due and the offline part is empty.
    """
    n_offline = batch_size if len(online) == 0 else round(fraction * batch_size)
    if n_offline and len(offline) == 0:
        raise RuntimeError(f"cannot sample {n_offline} offline rows: the offline buffer is empty.")
    return _part_draw(offline, n_offline), _part_draw(online, batch_size - n_offline)


def _part_draw(part: ReplayBuffer, n: int) -> Rows | None:
    """``n`` rows drawn from one part (index and info); None for no rows."""
    if not n:
        return None
    draw = part.draw(n)
    return (draw.index, draw.info) if draw.index.numel() else None


def merge_draws(offline: Rows | None, online: Rows | None) -> Draw:
    """One mixed draw from each part's ``(index, info)`` (either may be None)."""
    if offline is None and online is None:
        return Draw.empty()
    parts = [(flag, draw) for flag, draw in ((True, offline), (False, online)) if draw is not None]
    index = torch.cat([draw[0] for _, draw in parts])
    source = torch.cat(
        [torch.full(draw[0].shape[:1], flag, dtype=torch.bool) for flag, draw in parts]
    )
    info: dict[str, Any] = {}
    keys = {key for _, (_, part) in parts for key, value in part.items() if _per_row(value, part)}
    for key in sorted(keys):
        ref = next(part[key] for _, (_, part) in parts if key in part)
        fill = torch.ones if key in _FILL_ONES else torch.zeros
        info[key] = torch.cat(
            [
                part[key]
                if key in part
                else fill(idx.shape[0], *ref.shape[1:], dtype=ref.dtype, device=ref.device)
                for _, (idx, part) in parts
            ]
        )
    info["index"] = index
    info[SOURCE_KEY] = source
    return Draw(index, info)


def split_draw(index: torch.Tensor, info: dict[str, Any]) -> list[tuple[bool, Rows]]:
    """Each part's ``(offline?, (index, info))`` in a mixed draw, offline first."""
    source = info[SOURCE_KEY]
    parts: list[tuple[bool, Rows]] = []
    for offline, rows in ((True, source), (False, ~source)):
        if bool(rows.any()) or (not offline and not parts):  # an empty draw: online, empty
            sub = {
                key: value[rows]
                for key, value in info.items()
                if key != SOURCE_KEY and isinstance(value, torch.Tensor)
            }
            parts.append((offline, (index[rows], sub)))
    return parts


def gather_mixed(offline: ReplayBuffer, online: ReplayBuffer, draw: Draw) -> TensorDictBase:
    """The batch of a mixed draw: each part gathers (and transforms) its own rows."""
    batches = []
    for from_offline, (rows, rows_info) in split_draw(draw.index, draw.info):
        part = offline if from_offline else online
        batches.append(tag(part.gather(Draw(rows, rows_info)), from_offline))
    return batches[0] if len(batches) == 1 else concat(*batches)


def refilter_mixed(online: ReplayBuffer, batch: TensorDictBase) -> TensorDictBase:
    """A mixed batch with the online row filters applied again to its online rows."""
    if not online.transform.filters_rows:
        return batch
    source = batch.get(SOURCE_KEY)
    kept = online.refilter(batch[~source])
    return concat(batch[source], kept) if bool(source.any()) else kept


def _per_row(value: Any, info: dict[str, Any]) -> bool:
    index = info["index"]
    return isinstance(value, torch.Tensor) and value.shape[:1] == index.shape[:1]


def tag(batch: Any, offline: bool) -> TensorDictBase:
    """``batch`` with its ``SOURCE_KEY`` entry set (TypeError unless a TensorDict)."""
    if not isinstance(batch, TensorDictBase):
        raise TypeError(
            f"the {'offline' if offline else 'online'} part returned a "
            f"{type(batch).__name__}; both parts must hold TensorDicts."
        )
    batch.set(SOURCE_KEY, torch.full(batch.shape[:1], offline, dtype=torch.bool))
    return batch


def concat(offline: TensorDictBase, online: TensorDictBase) -> TensorDictBase:
    """The offline rows, then the online rows; KeyError if their entries differ."""
    for key in INFO_KEYS:
        have_off, have_on = key in offline.keys(), key in online.keys()
        if have_off != have_on:
            src, dst = (offline, online) if have_off else (online, offline)
            fill = torch.ones if key in _FILL_ONES else torch.zeros
            ref = src.get(key)
            dst.set(key, fill(dst.shape[0], *ref.shape[1:], dtype=ref.dtype))
    off_keys, on_keys = set(offline.keys(True, True)), set(online.keys(True, True))
    if off_keys != on_keys:
        raise KeyError(
            f"the offline and online samples have different entries: offline only "
            f"{sorted(map(str, off_keys - on_keys))}, online only "
            f"{sorted(map(str, on_keys - off_keys))}."
        )
    # torch types cat as returning a Tensor; TensorDicts dispatch it to their own cat
    return cast(TensorDictBase, torch.cat([offline, online], 0))


def without_content(state: dict[str, Any]) -> dict[str, Any]:
    """A buffer state without its storage content (the offline data is not saved)."""
    return {key: value for key, value in state.items() if key not in ("storage", "_storage")}


def route_priority_update(
    parts: tuple[ReplayBuffer, ReplayBuffer],
    index: torch.Tensor | int,
    priority: torch.Tensor | float,
    generation: torch.Tensor | None,
    is_offline: torch.Tensor | None,
) -> None:
    """Update a mixed batch's priorities, each row in its part (``(offline, online)``).

    Every argument is checked before either part changes, and the two parts'
    samplers change together or not at all.

    Raises:
        ValueError: without ``is_offline``, for one of another length, or for
            a negative, NaN or infinite priority; nothing changes then.
    """
    offline, online = parts
    index = torch.as_tensor(index).reshape(-1)
    priority = check_priorities(priority)
    if priority.numel() == 1 and index.numel() != 1:
        priority = priority.expand(index.numel())
    if priority.numel() != index.numel():
        raise ValueError(
            f"priority has {priority.numel()} entries, expected one per index ({index.numel()})."
        )
    if is_offline is None:
        raise ValueError(
            "update_priority needs is_offline=batch['is_offline']: a mixed batch's index "
            "holds each row's index in its own part."
        )
    source = torch.as_tensor(is_offline, dtype=torch.bool).reshape(-1)
    if source.numel() != index.numel():
        raise ValueError(
            f"is_offline has {source.numel()} entries, expected one per index ({index.numel()})."
        )
    generation = None if generation is None else torch.as_tensor(generation).reshape(-1)
    todo = [(p, rows) for p, rows in ((offline, source), (online, ~source))]
    todo = [(p, rows) for p, rows in todo if p.prioritized and bool(rows.any())]
    with transaction(*(p.sampler for p, _ in todo)):  # both parts, or neither
        for part, rows in todo:
            part.update_priority(
                index[rows],
                priority[rows],
                generation=None if generation is None else generation[rows],
            )


# ------------------------------------------------------------ the checks
#
# check_mixture_args checks the constructor's arguments before anything is built;
# fraction_at the offline fraction of each batch (a constant, or a schedule's
# value); check_online_data the data written to the online part against the offline
# layout; check_count a saved batches_sampled. Each raises TypeError for a wrong type
# and ValueError for a wrong value (KeyError for entries that differ), naming the
# argument.


def check_count(value: Any, name: str) -> int:
    """``value`` if it is an int >= 0 (a count of batches); ValueError naming ``name`` if not."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}.")
    return value


def check_mixture_args(
    offline: Any,
    online_storage: Any,
    online_capacity: Any,
    offline_fraction: Any,
    batch_size: Any,
    generator: Any,
) -> float | Callable[[int], float]:
    """Check :class:`~rbdata.OfflineToOnlineReplayBuffer`'s arguments; the checked fraction.

    Raises:
        TypeError: for an ``offline`` that is neither a TensorDict nor a ReplayBuffer,
            a non-numeric ``offline_fraction``, a bad ``online_storage`` or ``generator``.
        ValueError: for an empty offline TensorDict, an ``offline_fraction``
            outside ``[0, 1]``, a bad ``batch_size`` or ``online_capacity``, or
            when not exactly one of ``online_storage`` and ``online_capacity`` is given.
    """
    if isinstance(offline, TensorDictBase):
        if offline.batch_dims != 1 or offline.shape[0] == 0:
            raise ValueError(
                f"offline must be a non-empty TensorDict with one batch dimension, got "
                f"batch_size {list(offline.shape)}."
            )
    elif not isinstance(offline, ReplayBuffer):
        raise TypeError(
            f"offline must be a TensorDict or a ReplayBuffer holding the offline data, got "
            f"{type(offline).__name__}."
        )
    if (online_storage is None) == (online_capacity is None):
        given = "both" if online_storage is not None else "neither"
        raise ValueError(f"give exactly one of online_storage and online_capacity, got {given}.")
    check_optional_int(online_capacity, "online_capacity", minimum=1)
    if online_storage is not None and not isinstance(online_storage, Storage):
        raise TypeError(f"online_storage must be a Storage, got {type(online_storage).__name__}.")
    fraction: float | Callable[[int], float] = (
        offline_fraction
        if callable(offline_fraction)
        else check_fraction(offline_fraction, "offline_fraction")
    )
    check_optional_int(batch_size, "batch_size", minimum=1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}."
        )
    return fraction


def check_fraction(value: Any, what: str) -> float:
    """``value`` as a float in ``[0, 1]``; TypeError/ValueError naming ``what`` otherwise."""
    return check_number(value, what, minimum=0.0, maximum=1.0)


def fraction_at(fraction: float | Callable[[int], float], step: int) -> float:
    """The offline fraction of batch ``step``: the constant, or the schedule's checked value."""
    if not callable(fraction):
        return fraction
    return check_fraction(fraction(step), f"offline_fraction schedule's value for batch {step}")


def check_online_data(storage: Storage, data: Any, *, batched: bool) -> TensorDictBase:
    """``data`` without sample entries, checked against the offline ``storage``'s layout.

    Raises:
        TypeError: if ``data`` is not a TensorDict or an entry's dtype differs.
        KeyError: if the entries differ from the offline data's.
        ValueError: if an entry's per-item shape differs.
    """
    if not isinstance(data, TensorDictBase):
        raise TypeError(f"data must be a TensorDict, got {type(data).__name__}.")
    extra = [key for key in (*INFO_KEYS, SOURCE_KEY) if key in data.keys()]
    batch: TensorDictBase = data.exclude(*extra) if extra else data
    if not (isinstance(storage, TensorStorage) and storage.initialized):
        return batch
    expected = {key_path(key) for key in storage.leaf_keys()}
    given = {key_path(key) for key in batch.keys(True, True)}
    if given != expected:
        raise KeyError(
            f"online data must have the offline data's entries: missing "
            f"{sorted(expected - given)}, unexpected {sorted(given - expected)}."
        )
    for key in sorted(expected):
        stored, value = storage.get_leaf(key), batch.get(key)
        shape = tuple(value.shape[1:] if batched else value.shape)
        if shape != tuple(stored.shape[1:]):
            raise ValueError(
                f"online data entry {key} has per-item shape {list(shape)}; the offline "
                f"data has {list(stored.shape[1:])}."
            )
        if value.dtype != stored.dtype:
            raise TypeError(
                f"online data entry {key} has dtype {value.dtype}; the offline data has "
                f"{stored.dtype}."
            )
    return batch
