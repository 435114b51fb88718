"""PrioritizedSliceSampler: slices whose start is drawn proportionally to its priority."""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import torch
from typing_extensions import Unpack

from rbdata.samplers._base import Sampler
from rbdata.samplers._live import _LiveSet
from rbdata.samplers._replacement import check_replacement
from rbdata.samplers._slice_weight import SliceWeight, span_amount
from rbdata.samplers.prioritized import PrioritizedSampler
from rbdata.samplers.slice import SliceArgs, SliceSampler, check_reads_tensordicts
from rbdata.storages import Storage, shape_of


class PrioritizedSliceSampler(SliceSampler, PrioritizedSampler):
    """Slices of trajectories whose first transition is drawn ∝ ``priority ** alpha``.

    Every transition has a priority (new ones get the current maximum); only
    transitions that can start a slice (see :class:`SliceSampler`: far enough
    from their trajectory's end, unless ``span`` lets slices be truncated on
    the right) have a non-zero probability. As in torchrl, ``strict_length``
    drops only the starts too close to a trajectory's end: with a right
    ``span``, trajectories shorter than ``slice_len`` still give (short)
    slices. The info holds ``"priority_weight"``, the importance-sampling
    weight of each slice's start repeated over its transitions, and the slice
    markers of :class:`SliceSampler`.
    ``update_priority(index, priority)`` sets per-transition priorities
    (duplicates merged with ``reduction``), typically with the flat index and
    per-transition TD errors of a sampled batch.

    With a storage of ``ndim > 1`` (e.g. ``[steps, envs]``), every stored cell
    is a transition with its own priority (flat cells, as
    :class:`PrioritizedSampler`; the buffer shows and takes coordinates) and a
    slice runs along dim 0 inside one cell's lane, as torchrl's.

    Args:
        max_capacity: number of slots (the storage's ``max_size``; for
            ``ndim > 1``, its number of cells).
        alpha: how strongly priorities skew sampling (> 0).
        beta: importance-sampling correction exponent (>= 0).
        eps: added to priorities before the power.
        dtype: floating dtype of the priority tree.
        reduction: how duplicate indices of one ``update_priority`` are merged
            (``"max"``, ``"min"``, ``"sum"`` or ``"mean"``).
        num_slices: slices per batch.
        slice_len: transitions per slice.
        end_key: entry holding end-of-trajectory flags.
        end_keys: entries whose flags are OR-ed into the end signal.
        traj_key: entry holding per-transition trajectory ids.
        ends: fixed end flags of a full, static storage.
        trajectories: fixed trajectory ids of a full, static storage.
        cache_values: accepted for torchrl compatibility.
        truncated_key: where the end-of-slice marker goes (None: no markers).
        init_key: the stored entry marked True at slice starts (None: leave it).
        strict_length: only draw full-length slices (see above for ``span``).
        pad_output: pad short slices to ``slice_len`` (see :class:`SliceSampler`).
        compile: accepted for torchrl compatibility.
        span: let slices end past their trajectory's end, truncated (the right
            side only, as in torchrl: a start must be a stored transition to
            carry a priority; a left span warns and is turned off).
        use_gpu: accepted for torchrl compatibility.
        max_priority_within_buffer: new items get the maximum priority among the
            items in the buffer (else: the maximum ever seen).
        replacement: accepted for torchrl compatibility: True changes nothing;
            False raises ``TypeError`` (this sampler has no without-replacement variant).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, PrioritizedSliceSampler, TensorDictReplayBuffer
        >>> sampler = PrioritizedSliceSampler(100, alpha=1.0, beta=0.5, slice_len=4)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler,
        ...                             batch_size=8)
        >>> _ = rb.extend(TensorDict({"episode": torch.arange(40) // 10}, [40]))
        >>> priority = torch.zeros(40)
        >>> priority[23] = 1.0  # only transition 23 can start a slice
        >>> rb.update_priority(torch.arange(40), priority)
        >>> rb.sample()["index"].tolist()
        [23, 24, 25, 26, 23, 24, 25, 26]
    """

    _fragments_ok = False
    # The per-transition priorities and validity (``_raw``, ``_valid``) live on the CPU.
    _follows_storage_device = False
    per_cell_writes: ClassVar[bool] = True  # one priority per cell; trajectories follow dim 0

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        *,
        max_priority_within_buffer: bool = False,
        replacement: bool = True,
        **slice_args: Unpack[SliceArgs],
    ) -> None:
        check_replacement(replacement, type(self).__name__)
        span = slice_args.get("span", False)
        right = span[1] if isinstance(span, tuple | list) else span
        left = span[0] if isinstance(span, tuple | list) else span
        if left is not False and left != 0:
            warnings.warn(
                "Left spanning is disabled for PrioritizedSliceSampler and will be automatically "
                "turned off (a slice start is drawn by the priority of its first stored "
                f"transition): span={span!r} is used as (False, {right!r}).",
                UserWarning,
                stacklevel=2,
            )
            slice_args["span"] = (False, right)
        PrioritizedSampler.__init__(
            self,
            max_capacity,
            alpha,
            beta,
            eps,
            dtype,
            reduction,
            max_priority_within_buffer=max_priority_within_buffer,
        )
        self._setup_slices(**slice_args)
        self._raw = torch.zeros(max_capacity, dtype=dtype)
        self._valid = torch.zeros(max_capacity, dtype=torch.bool)
        self._refresh_all = True

    # ------------------------------------------------------------ writes
    def _resize_leaves(self, count: int) -> None:
        """Hold ``count`` leaves, with the per-cell priorities and validity alongside."""
        PrioritizedSampler._resize_leaves(self, count)
        kept = min(count, self._raw.numel())
        raw = torch.zeros(count, dtype=self._raw.dtype)
        raw[:kept] = self._raw[:kept]
        valid = torch.zeros(count, dtype=torch.bool)
        valid[:kept] = self._valid[:kept]
        self._raw, self._valid = raw, valid

    def _on_write(self, index: torch.Tensor) -> None:
        """Give the written slots the default priority; boundaries update at the next sample."""
        self._check_index(index, self.cell_capacity)
        self._grow_for(index)
        self._raw.index_fill_(0, index, float(self._default_value()))
        self._index.extend(index)

    # torchrl's slice samplers come first: mark_update re-reads boundaries, priorities stay
    mark_update = Sampler.mark_update

    def _on_update(self, index: torch.Tensor) -> None:
        """Slots edited in place keep their priorities; boundaries are re-read."""
        self._check_index(index, self._leaf_count)
        self._index.touch(index)

    def update_priority(
        self,
        index: int | torch.Tensor,
        priority: float | torch.Tensor,
        *,
        storage: Storage | None = None,
    ) -> None:
        """Set per-transition priorities (validated first; nothing changes on error)."""
        PrioritizedSampler.update_priority(self, index, priority, storage=storage)
        slots = torch.unique(torch.as_tensor(index).to(torch.long).reshape(-1))
        if slots.numel():
            values = self._tree.leaves.index_select(0, slots)
            self._raw.index_copy_(0, slots, values)
            self._tree.update(slots, values * self._valid.index_select(0, slots))

    def _on_empty(self) -> None:
        super()._on_empty()  # the slice sampler's, then the prioritized sampler's
        self._raw.zero_()
        self._valid.zero_()
        self._refresh_all = True

    @property
    def _cache(self) -> dict[str, Any]:
        """The boundary cache torchrl's tests read: empty until a sample, again after a write.

        With ``cache_values``, the trajectories the last sample read (their start
        positions and lengths); without it, always empty (as torchrl's).
        """
        index = self._index
        if not self.cache_values or index.pending or not index.n:
            return {}
        return {"stop-and-length": index.trajectories()}

    def exhausted(self, storage: Storage) -> bool:
        """Whether the storage is empty (an unsampleable buffer raises at ``sample``)."""
        return Sampler.exhausted(self, storage)

    # ------------------------------------------------------------ validity
    def _make_weight(self, slice_len: int) -> SliceWeight:
        right = span_amount(self.span[1], slice_len, "span")
        return SliceWeight(slice_len, self.strict_length, 0, right, keep_short=True)

    def _set_weight(self, weight: SliceWeight) -> None:
        super()._set_weight(weight)
        self._refresh_all = True

    def _sync(self, storage: Storage) -> tuple[bool, int] | None:
        if storage.ndim == 1:
            cells, what = storage.max_size, f"max_size={storage.max_size}"
        else:
            shape = shape_of(storage)
            cells, what = math.prod(shape), f"{math.prod(shape)} cells (shape {list(shape)})"
        if not self._max_capacity <= cells <= self.cell_capacity:
            raise ValueError(
                f"the storage has {what} but the sampler was built with "
                f"max_capacity={self._max_capacity}: they must match (up to "
                f"{self.cell_capacity} cells, torchrl's tree size, are taken)."
            )
        self._ensure_leaves(cells - 1)
        change = self._sync_index(storage)
        index = self._index
        v_begin = index.v_end - index.size
        if change is not None and not change[0] and not self._refresh_all:
            slice_len = index.weight.slice_len
            lo = max(change[1] - slice_len, v_begin)
            if index.v_end - lo < index.modulus:
                self._refresh(v_begin, min(max(slice_len - 1, 1), lo - v_begin), lo)
                change = None
        if change is not None or self._refresh_all:
            self._refresh_everything()
        if index.total_weight <= 0:
            raise self._no_slice_error()
        return change

    def _refresh(self, v_begin: int, head: int, lo: int) -> None:
        """Recompute which slots can start a slice: the ``head`` oldest positions and ``lo..v_end``.

        After an append at the cursor, validity can change only at the new
        positions, at the last ``slice_len`` positions before them (the newest
        trajectory grew), and at the first ``slice_len - 1`` live positions (the
        oldest trajectory was trimmed: with a right span, a trimmed trajectory
        shorter than ``slice_len`` loses every start under ``strict_length``).
        """
        index = self._index
        v = torch.arange(lo, index.v_end)
        if head > 0:
            v = torch.cat([torch.arange(v_begin, v_begin + head), v])
        k = index.locate(v)
        offset = v - index.view("starts").index_select(0, k)
        ok = offset < index.weight.rooms(index.view("lengths").index_select(0, k))
        slots = index.to_slots(v)
        self._valid.index_copy_(0, slots, ok)
        self._tree.update(slots, self._raw.index_select(0, slots) * ok)

    def _refresh_everything(self) -> None:
        index = self._index
        valid = torch.zeros(self._leaf_count, dtype=torch.bool)
        if index.n:
            room = index.weight.rooms(index.view("lengths"))
            slice_id = torch.repeat_interleave(room)
            first = torch.cumsum(room, 0) - room - index.view("starts")
            v = torch.arange(slice_id.numel()) - first[slice_id]
            valid[index.to_slots(v)] = True
        self._valid = valid
        self._tree.set_leaves(self._raw * valid)
        self._refresh_all = False

    # ------------------------------------------------------------ sampling
    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw slices whose starts follow the priorities (``"priority_weight"`` per step)."""
        num_slices, slice_len = self._shape(batch_size)
        check_reads_tensordicts(storage)
        self._sync(storage)
        if not self._tree.total > 0:
            raise RuntimeError(
                "cannot sample: every transition that can start a slice has priority 0."
            )
        slots = self._tree.sample(num_slices, self._rng)
        weight = (self._tree.leaves.index_select(0, slots) / self._tree.min).pow(-self._beta)
        starts = self._index.slots_to_v(slots)
        out = self._emit(storage, starts.numpy(), self._index.locate(starts).numpy(), slice_len)
        info = out.info
        if out.slice_id is None:
            info["priority_weight"] = weight.repeat_interleave(slice_len)
        else:
            info["priority_weight"] = weight.index_select(0, out.slice_id)
        return out.index, info

    # ------------------------------------------------------------ state
    def _extra_state(self) -> dict[str, Any]:
        """Priorities and trajectory positions (boundaries are rebuilt at the next sample)."""
        return {
            **super()._extra_state(),  # the slice sampler's and the prioritized sampler's
            "raw": self._raw.clone(),
        }

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        raw = state_dict.get("raw")
        leaves = state_dict.get("leaves")
        count = self._leaf_count if leaves is None else int(leaves.shape[0])
        if raw is not None and tuple(raw.shape) != (count,):
            raise ValueError(
                f"state_dict['raw'] has shape {tuple(raw.shape)}, expected "
                f"({count},) (one per leaf of the tree)."
            )
        super()._load_extra_state(state_dict)  # the prioritized sampler's first, then the slices'
        if raw is not None:
            self._raw = raw.to(self.dtype).clone()
        self._refresh_all = True
