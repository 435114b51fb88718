"""ReplayBufferEnsemble: sample from several replay buffers at once (torchrl's class)."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import (
    LazyStackedTensorDict,
    TensorDict,
    TensorDictBase,
    is_tensor_collection,
    lazy_stack,
)
from torch.utils._pytree import tree_map

from rbdata._component.checks import check_optional_int, normalize_key
from rbdata._component.members import select_members
from rbdata._component.stateful import load_members_state, members_state
from rbdata.samplers.ensemble import SamplerEnsemble
from rbdata.storages.ensemble import StorageEnsemble
from rbdata.transforms import Compose
from rbdata.writers.ensemble import WriterEnsemble

from ._conditional_update import ConditionalUpdateResult
from ._ensemble_updates import end_member_streams, routed_update
from .replay import ReplayBuffer

__all__ = ["ReplayBufferEnsemble"]

Collate = Callable[[Any], Any]


def stack_anything(samples: list[Any]) -> Any:
    """Stack the members' collated parts: tensors, TensorDicts (lazily if ragged), PyTrees."""
    first = samples[0]
    if is_tensor_collection(first):
        if all(sample.shape == first.shape for sample in samples[1:]):
            try:
                return torch.stack(list(samples))
            except (RuntimeError, KeyError, ValueError):
                pass
        return lazy_stack(list(samples))
    if isinstance(first, torch.Tensor):
        if all(sample.shape == first.shape for sample in samples[1:]):
            return torch.stack(list(samples))
        return torch.nested.nested_tensor(list(samples))
    return tree_map(lambda *leaves: torch.stack(list(leaves)), *samples)


class ReplayBufferEnsemble:
    """An ensemble of replay buffers, sampled together (torchrl's ``ReplayBufferEnsemble``).

    Built from buffers (``ReplayBufferEnsemble(rb0, rb1, p=...)``) or from the
    ensemble components (``storages=``, ``samplers=``, ``writers=``). A sample
    of ``batch_size`` draws ``batch_size // num_buffer_sampled`` items from
    each of ``num_buffer_sampled`` members (picked with the weights ``p``, or
    every member with ``sample_from_all=True``); each member's items pass
    through its collate function and transform, then the parts are stacked
    (``collate_fn``, by default a stack, lazy for ragged TensorDicts) and the
    ensemble's ``transform`` runs. A TensorDict sample carries
    ``("index", "buffer_ids")`` and ``("index", "index")``.

    ``rb[i]`` is member ``i`` (a buffer), ``rb[:2]`` / ``rb[[0, 2]]`` a
    sub-ensemble, ``rb[:, idx]`` the items ``idx`` of every member, stacked.
    Writes go to the members (``rb[0].extend(...)``), or, with ``routing_key``
    (a key holding each record's member id) or ``routing_dim`` (a batch
    dimension along members), through :meth:`extend` here.

    Deliberate difference: this class composes buffers and is not a subclass
    of :class:`~rbdata.ReplayBuffer` (``isinstance(rb, ReplayBuffer)`` is
    False); a member's own ``collate_fn`` is not known to the ensemble (give
    ``collate_fns=`` when a member uses one its storage's default does not
    match).

    Args:
        *rbs: the member buffers.
        storages: a :class:`~rbdata.StorageEnsemble` (without ``rbs``).
        samplers: a :class:`~rbdata.SamplerEnsemble` (without ``rbs``).
        writers: a :class:`~rbdata.WriterEnsemble` (without ``rbs``).
        transform: applied to the stacked sample.
        batch_size: the default sample size.
        collate_fn: stacks the members' parts (default: a stack).
        collate_fns: one per member (default: each storage's default).
        p: relative weights of the members, or ``"sampleable"`` (weights from the
            items each member can return at each draw).
        sample_from_all: draw from every member (not with ``p``).
        num_buffer_sampled: how many members a sample draws from.
        routing_key: enables :meth:`extend`: the member id of each record.
        routing_dim: enables :meth:`extend`: the batch dimension along members.
        generator: the generator of the draws (members' samplers included).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, ReplayBufferEnsemble, TensorDictReplayBuffer
        >>> rb0 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> rb1 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> _ = rb0.extend(TensorDict(obs=torch.zeros(10, 2), batch_size=[10]))
        >>> _ = rb1.extend(TensorDict(obs=torch.ones(10, 2), batch_size=[10]))
        >>> rb = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True, batch_size=6)
        >>> sample = rb.sample()
        >>> sample.shape, sample["obs"][:, :, 0].tolist()
        (torch.Size([2, 3]), [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
        >>> sample["index", "buffer_ids"].tolist()
        [[0, 0, 0], [1, 1, 1]]
        >>> rb[1] is rb1
        True
    """

    def __init__(
        self,
        *rbs: ReplayBuffer,
        storages: StorageEnsemble | None = None,
        samplers: SamplerEnsemble | None = None,
        writers: WriterEnsemble | None = None,
        transform: Callable[[Any], Any] | None = None,
        batch_size: int | None = None,
        collate_fn: Collate | None = None,
        collate_fns: list[Collate] | None = None,
        p: list[float] | torch.Tensor | str | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
        routing_key: Any = None,
        routing_dim: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if routing_key is not None and routing_dim is not None:
            raise ValueError("routing_key and routing_dim are mutually exclusive.")
        if routing_dim is not None and (type(routing_dim) is not int):
            raise TypeError(f"routing_dim must be an integer, got {type(routing_dim).__name__}.")
        if rbs:
            if storages is not None or samplers is not None or writers is not None:
                raise RuntimeError(
                    "Pass either replay buffers or storages/samplers/writers to "
                    "ReplayBufferEnsemble, not both."
                )
            for i, rb in enumerate(rbs):
                if not isinstance(rb, ReplayBuffer):
                    raise TypeError(f"rbs[{i}] must be a ReplayBuffer, got {type(rb).__name__}.")
            storages = StorageEnsemble(
                *(rb.storage for rb in rbs), transforms=[rb.transform for rb in rbs]
            )
            samplers = SamplerEnsemble(
                *(rb.sampler for rb in rbs),
                p=p,
                sample_from_all=sample_from_all,
                num_buffer_sampled=num_buffer_sampled,
            )
            writers = WriterEnsemble(*(rb.writer for rb in rbs))
            members = tuple(rbs)
        else:
            if not isinstance(storages, StorageEnsemble):
                raise TypeError(
                    f"storages must be a StorageEnsemble when no buffer is given, got "
                    f"{type(storages).__name__}."
                )
            if not isinstance(samplers, SamplerEnsemble):
                raise TypeError(
                    f"samplers must be a SamplerEnsemble, got {type(samplers).__name__}."
                )
            if not isinstance(writers, WriterEnsemble):
                raise TypeError(f"writers must be a WriterEnsemble, got {type(writers).__name__}.")
            if not len(storages) == len(samplers) == len(writers):
                raise ValueError(
                    f"storages, samplers and writers must have as many members: got "
                    f"{len(storages)}, {len(samplers)} and {len(writers)}."
                )
            transforms = storages.transforms or [None] * len(storages)
            members = tuple(
                ReplayBuffer(storage=storage, sampler=sampler, writer=writer, transform=t)
                for storage, sampler, writer, t in zip(
                    storages.members, samplers.samplers, writers.writers, transforms, strict=True
                )
            )
        if collate_fns is None:
            collate_fns = [storage.default_collate_fn() for storage in storages.members]
        if len(collate_fns) != len(members):
            raise ValueError(
                f"collate_fns must hold one function per member ({len(members)}), got "
                f"{len(collate_fns)}."
            )
        self._rbs = members
        self._storage = storages
        self._sampler = samplers
        self._writer = writers
        self._collate_fns = list(collate_fns)
        self._collate_fn = collate_fn or stack_anything
        self._transform = (
            transform
            if isinstance(transform, Compose)
            else (Compose() if transform is None else Compose(transform))
        )
        self._batch_size = check_optional_int(batch_size, "batch_size", minimum=1)
        self.routing_key = (
            None if routing_key is None else normalize_key(routing_key, "routing_key")
        )
        self.routing_dim = routing_dim
        self._generator = generator
        if generator is not None:
            samplers.set_rng(generator)

    # ------------------------------------------------------------ components
    @property
    def storage(self) -> StorageEnsemble:
        """The members' storages, as a StorageEnsemble."""
        return self._storage

    @property
    def sampler(self) -> SamplerEnsemble:
        """The members' samplers and the draw settings, as a SamplerEnsemble."""
        return self._sampler

    @property
    def writer(self) -> WriterEnsemble:
        """The members' writers, as a WriterEnsemble."""
        return self._writer

    @property
    def transform(self) -> Compose:
        """The transform applied to the stacked sample."""
        return self._transform

    @property
    def batch_size(self) -> int | None:
        """The default sample size."""
        return self._batch_size

    @property
    def write_count(self) -> int:
        """The items written into all members."""
        return self._writer.write_count

    def __len__(self) -> int:
        """The number of members (torchrl's ``len`` of an ensemble)."""
        return len(self._rbs)

    # ------------------------------------------------------------ sampling
    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Draw ``batch_size`` items across the members (see the class docstring)."""
        if batch_size is None:
            batch_size = self._batch_size
        if batch_size is None:
            raise RuntimeError(
                "batch_size not specified. You can specify the batch_size when constructing "
                "the replay buffer, or pass it to the sample method. Refer to the ReplayBuffer "
                "documentation for a proper usage of the batch-size arguments."
            )
        index, info = self._sampler.sample(self._storage, batch_size)
        parts = [self._collate_fns[i](items) for i, items in self._storage.get(index)]
        data = self._collate_fn(parts)
        if len(self._transform):
            data = self._transform(data)
        info.set("index", index)
        if isinstance(data, TensorDictBase):
            ids = index.get("buffer_ids")
            ids = ids.reshape(*ids.shape, *([1] * (data.ndim - 1))).expand(data.batch_size)
            rows = index.get("index")
            index_td = TensorDict({"index": rows, "buffer_ids": ids}, batch_size=data.batch_size)
            data.set("index", index_td)
            info = _with_batch(info, data.batch_size)
            info.set("index", index_td)
        return (data, info) if return_info else data

    def __iter__(self) -> Iterator[Any]:
        if self._batch_size is None:
            raise RuntimeError(
                "Cannot iterate over the replay buffer. Batch_size was not specified during "
                "construction: pass batch_size=... to the constructor."
            )
        while True:
            yield self.sample()

    # -------------------------------------------------------------- writing
    def extend(self, data: TensorDictBase) -> TensorDictBase:
        """Write ``data`` into the members named by ``routing_key``/``routing_dim``.

        Returns a flat TensorDict aligned with ``data.reshape(-1)``: ``"buffer_ids"``,
        each record's member-local ``"index"`` and, when every member writer tracks
        generations, its ``"index_generation"``.

        Raises:
            RuntimeError: without ``routing_key`` or ``routing_dim``.
            TypeError: for data that is not a TensorDict, or member ids that are not integers.
            ValueError: for member ids out of range or a misshaped routing entry.
        """
        flat, buffer_ids = self._route(data)
        local = torch.empty(buffer_ids.numel(), dtype=torch.long)
        stamps = torch.empty(buffer_ids.numel(), dtype=torch.long)
        tracked = self._writer.tracks_generations
        for member, rb in enumerate(self._rbs):
            positions = (buffer_ids == member).nonzero().flatten()
            if positions.numel():
                written = torch.as_tensor(rb.extend(flat[positions])).reshape(-1).to(torch.long)
                local[positions] = written
                if tracked:
                    stamps[positions] = _own_stamps(written, rb.writer.generations_of(written))
        out = TensorDict(
            {"buffer_ids": buffer_ids, "index": local}, batch_size=[buffer_ids.numel()]
        )
        if tracked:
            out.set("index_generation", stamps)
        return out

    def add(self, data: TensorDictBase) -> TensorDictBase:
        """Write one record (a TensorDict with no batch dims) into the member it names."""
        if self.routing_dim is not None:
            raise RuntimeError("Use extend() for routing_dim writes.")
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"data must be a TensorDict, got {type(data).__name__}.")
        if data.ndim:
            raise ValueError(
                f"add() expects a scalar TensorDict record, got batch {data.batch_size}."
            )
        return self.extend(data.unsqueeze(0))[0]

    def update_if_present(
        self,
        *,
        index: TensorDictBase,
        generation: torch.Tensor,
        patch: Mapping[Any, torch.Tensor] | TensorDictBase,
        version_key: Any = None,
        version: int | torch.Tensor | None = None,
        require_newer: bool = False,
    ) -> ConditionalUpdateResult:
        """Patch the live records, each in the member its ``buffer_ids`` entry names.

        ``index`` is the routed metadata an :meth:`extend` returns (or a
        sample's ``"index"`` entry): ``"buffer_ids"`` and member-local
        ``"index"``; ``generation`` and every patch entry hold one row per
        record (patches start with ``index``'s batch shape). Each member's
        :meth:`ReplayBuffer.update_if_present` runs on its records, in their
        order; the result's masks have ``index``'s batch shape. Every member
        must use a tensor storage and a writer that tracks generations.

        Raises:
            TypeError: for an ``index`` that is not a TensorDict, or member ids
                or generations that are not integers.
            KeyError: for an ``index`` without ``"buffer_ids"``/``"index"``, or
                a patch key a member does not store.
            ValueError: for member ids out of range, misshaped entries, a
                dtype a member does not store, or ``version_key`` without
                ``version`` (or the reverse).
            RuntimeError: for a member whose storage or writer cannot take
                conditional updates.

        Nothing is patched when it raises.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from rbdata import (LazyTensorStorage, ReplayBufferEnsemble,
            ...                     RoundRobinWriter, TensorDictReplayBuffer)
            >>> def member():
            ...     writer = RoundRobinWriter(track_generations=True)
            ...     return TensorDictReplayBuffer(storage=LazyTensorStorage(4), writer=writer)
            >>> rb = ReplayBufferEnsemble(member(), member(), routing_key="member")
            >>> meta = rb.extend(TensorDict(member=torch.tensor([0, 1, 1]), x=torch.zeros(3),
            ...                             batch_size=[3]))
            >>> result = rb.update_if_present(index=meta, generation=meta["index_generation"],
            ...                               patch={"x": torch.tensor([1.0, 2.0, 3.0])})
            >>> result.updated.tolist(), rb[1][:]["x"].tolist()
            ([True, True, True], [2.0, 3.0])
        """
        return routed_update(
            self._rbs,
            index=index,
            generation=generation,
            patch=patch,
            version_key=version_key,
            version=version,
            require_newer=require_newer,
        )

    def end_streams(
        self,
        *,
        end_key: Any = ("next", "done"),
        terminated_key: Any = ("next", "terminated"),
        truncated_key: Any = ("next", "truncated"),
    ) -> None:
        """Close each member's stream at its last record, before restarted producers append.

        Each member must hold one chronological stream in a one-dimensional
        tensor storage, with a round-robin writer that tracks generations and
        a slice sampler (:class:`~rbdata.StreamingSliceSampler` included)
        reading ``end_key``; with a ``traj_key``, every record of a member
        must hold the same trajectory id. The last record written to each
        non-empty member gets ``end_key`` set and, when it stores
        ``truncated_key``, that flag set too unless the record ended
        (``end_key``) or terminated (``terminated_key``) already. Write counts
        and generations do not move; the samplers re-read the trajectories.
        Stop the producers while it runs.

        Raises:
            RuntimeError: for a member that does not fit the above (nothing is
                patched then).
            TypeError: for an ``end_key`` entry that is not boolean.
            ValueError: for keys that are not distinct.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from rbdata import (LazyTensorStorage, ReplayBufferEnsemble, SliceSampler,
            ...                     TensorDictReplayBuffer, TensorDictRoundRobinWriter)
            >>> member = TensorDictReplayBuffer(
            ...     storage=LazyTensorStorage(8),
            ...     sampler=SliceSampler(slice_len=2, end_key=("next", "done")),
            ...     writer=TensorDictRoundRobinWriter(track_generations=True))
            >>> done = torch.zeros(3, 1, dtype=torch.bool)
            >>> _ = member.extend(TensorDict({("next", "done"): done}, [3]))
            >>> ReplayBufferEnsemble(member).end_streams()
            >>> member[:]["next", "done"].flatten().tolist()
            [False, False, True]
        """
        end_member_streams(
            self._rbs, end_key=end_key, terminated_key=terminated_key, truncated_key=truncated_key
        )

    def _route(self, data: Any) -> tuple[TensorDictBase, torch.Tensor]:
        if self.routing_key is None and self.routing_dim is None:
            raise RuntimeError(
                "ReplayBufferEnsemble writes are disabled. Configure routing_key or routing_dim "
                "to enable routed writes."
            )
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"Routed replay writes require a TensorDict input, got {type(data).__name__}."
            )
        if len(self._transform):
            data = self._transform.inv(data)
        flat = data.reshape(-1)
        count = len(self._rbs)
        if self.routing_key is not None:
            ids = flat.get(self.routing_key)
            while ids.ndim > 1 and ids.shape[-1] == 1:
                ids = ids.squeeze(-1)
            if ids.shape != flat.batch_size:
                raise ValueError(
                    f"routing_key {self.routing_key!r} must contain one member id per record, "
                    f"got shape {tuple(ids.shape)} for batch size {tuple(flat.batch_size)}."
                )
        else:
            assert self.routing_dim is not None
            if not data.ndim:
                raise ValueError("routing_dim requires batched input.")
            dim = self.routing_dim % data.ndim
            if data.shape[dim] != count:
                raise ValueError(
                    f"routing_dim {self.routing_dim} has size {data.shape[dim]}, expected "
                    f"{count} ensemble members."
                )
            shape = [1] * data.ndim
            shape[dim] = count
            ids = torch.arange(count).reshape(shape).expand(data.batch_size).reshape(-1)
        if ids.dtype == torch.bool or ids.is_floating_point():
            raise TypeError("ReplayBufferEnsemble member ids must be integers.")
        ids = ids.to(torch.long)
        if ids.numel() and ((ids < 0).any() or (ids >= count).any()):
            raise ValueError(f"ReplayBufferEnsemble member ids must lie in [0, {count - 1}].")
        return flat, ids

    # ------------------------------------------------------------- indexing
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, tuple):
            head, rest = index[0], index[1:]
            chosen = self[slice(None) if head is Ellipsis else head]
            if not rest:
                return chosen
            inner = rest[0] if len(rest) == 1 else rest
            if chosen is self:
                parts = [
                    self._collate_fns[i](storage[inner])
                    for i, storage in enumerate(self._storage.members)
                ]
                return self._collate_fn(parts)
            if isinstance(chosen, ReplayBufferEnsemble):
                return chosen[(slice(None),) + rest]
            return chosen[inner]
        members = select_members(index, len(self._rbs))
        if members is None:
            return self
        if isinstance(members, int):
            return self._rbs[members]
        p = self._sampler.p
        return ReplayBufferEnsemble(
            *(self._rbs[i] for i in members),
            transform=self._transform,
            batch_size=self._batch_size,
            collate_fn=self._collate_fn,
            collate_fns=[self._collate_fns[i] for i in members],
            sample_from_all=self._sampler.sample_from_all,
            num_buffer_sampled=self._sampler.num_buffer_sampled,
            p=p if p is None or isinstance(p, str) else p[members],
            generator=self._generator,
        )

    # ---------------------------------------------------------------- state
    def empty(self, empty_write_count: bool = True) -> None:
        """Empty every member buffer."""
        for rb in self._rbs:
            rb.empty(empty_write_count=empty_write_count)

    def state_dict(self) -> dict[str, Any]:
        """``{"0": member 0's state_dict, ...}``."""
        return members_state(self._rbs)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load each member's state from ``state_dict[str(i)]``."""
        load_members_state(self._rbs, state_dict, strict=True)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save every member buffer in the sub-folder ``<i>`` of ``path`` (each atomically)."""
        root = Path(path).absolute()
        root.mkdir(parents=True, exist_ok=True)
        for i, rb in enumerate(self._rbs):
            rb.dumps(root / str(i))

    def loads(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Load what :meth:`dumps` wrote under ``path`` into the members."""
        root = Path(path).absolute()
        for i, rb in enumerate(self._rbs):
            rb.loads(root / str(i), allow_pickle=allow_pickle)

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def load(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Alias for :meth:`loads`."""
        self.loads(path, allow_pickle=allow_pickle)

    def stats(self) -> dict[str, int | float | bool]:
        """Totals across the members: ``size``, ``write_count``, ``capacity``, ..."""
        size = sum(len(rb) for rb in self._rbs)
        capacity = sum(storage.max_size for storage in self._storage.members)
        return {
            "size": size,
            "write_count": self.write_count,
            "prefetch_queue_size": 0,
            "initialized": True,
            "capacity": capacity,
            "utilization": size / capacity if capacity else 0.0,
            "num_buffers": len(self._rbs),
        }

    def __repr__(self) -> str:
        body = textwrap.indent(
            f"storages={self._storage}, \nsamplers={self._sampler}, \nwriters={self._writer}, "
            f"\nbatch_size={self._batch_size}, \ntransform={self._transform}, "
            f"\ncollate_fn={self._collate_fn})",
            " " * 4,
        )
        return f"ReplayBufferEnsemble(\n{body}"


def _own_stamps(slots: torch.Tensor, stamps: torch.Tensor) -> torch.Tensor:
    """Each record's generation: a slot written twice in one batch gave the earlier one less."""
    stamps = stamps.reshape(-1).to(torch.long).clone()
    if slots.unique().numel() != slots.numel():
        later: dict[int, int] = {}
        for position in range(slots.numel() - 1, -1, -1):
            slot = int(slots[position])
            stamps[position] -= later.get(slot, 0)
            later[slot] = later.get(slot, 0) + 1
    return stamps


def _with_batch(info: TensorDictBase, batch_size: torch.Size) -> TensorDictBase:
    """``info`` (member infos stacked, batch ``[members]``) given the sample's batch size."""
    if isinstance(info, LazyStackedTensorDict) or tuple(info.batch_size) == tuple(batch_size):
        return info
    out = TensorDict(batch_size=batch_size)
    for key, value in info.items(include_nested=True, leaves_only=True):
        if key == "index" or (isinstance(key, tuple) and key[0] == "index"):
            continue
        if value.shape[: len(batch_size)] == batch_size:
            out.set(key, value)
    return out
