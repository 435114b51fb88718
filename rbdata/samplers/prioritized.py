"""PrioritizedSampler: sampling proportional to priority**alpha (Schaul et al., 2015)."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np
import torch

from rbdata._validation import check_int, check_number
from rbdata.samplers._base import Sampler
from rbdata.samplers._live import _LiveSet, first_unique
from rbdata.samplers._sumtree import _SumTree

_REDUCTIONS = {"max": "amax", "min": "amin", "sum": "sum", "mean": "mean", "median": "median"}
# Reductions that commute with the increasing (p + eps) ** alpha: the tree's leaves merge
# duplicate indices themselves, no torch.unique needed.
_LEAF_REDUCTIONS = {"max": "amax", "min": "amin"}


def _describe_bad(values: torch.Tensor, bad: torch.Tensor, limit: int = 5) -> str:
    where = bad.nonzero().reshape(-1)[:limit]
    return ", ".join(f"[{int(i)}]={values[i].item()}" for i in where)


def _checked_values(priority: torch.Tensor) -> tuple[np.ndarray, float, float]:
    """A numpy view of 1-D CPU priorities and their bounds; ValueError unless finite and >= 0."""
    values = priority.numpy()
    low, high = float(np.minimum.reduce(values)), float(np.maximum.reduce(values))
    if not (low >= 0 and high < float("inf")):  # NaN fails both comparisons
        bad = ~torch.isfinite(priority) | (priority < 0)
        raise ValueError(f"priority must be finite and >= 0, got {_describe_bad(priority, bad)}.")
    return values, low, high


class PrioritizedSampler(Sampler):
    """Prioritized sampling: item ``i`` is drawn with probability ``p_i**alpha / sum_j p_j**alpha``.

    The sample's info holds ``"priority_weight"``, the importance-sampling weights
    ``(N * P(i)) ** -beta`` divided by their maximum over the whole buffer,
    i.e. ``(P(i) / P_min) ** -beta``. New (and rewritten) items get the
    current maximum priority (1.0 at first). ``update_priority`` stores
    ``(priority + eps) ** alpha``; priorities must be finite and >= 0.

    With consume-after-n, a batch holds distinct items and an item that was
    returned ``n`` times gets a zero weight in the tree until it is rewritten.

    Args:
        max_capacity: number of slots (the storage's ``max_size``).
        alpha: how strongly priorities skew sampling (>= 0; 0 samples uniformly).
            Assigning :attr:`alpha` later re-transforms the stored values.
        beta: importance-sampling correction exponent (>= 0).
        eps: added to priorities before the power.
        dtype: floating dtype of the priority tree (float32 or float64; other floating
            dtypes are stored as float32).
        reduction: how duplicate indices of one ``update_priority`` call are
            merged: ``"max"``, ``"min"``, ``"sum"``, ``"mean"`` or ``"median"``.
        max_priority_within_buffer: the default priority of new items is the
            maximum over the items in the buffer (else: the maximum ever seen).
        device: where the priorities live (None: the CPU).

    Examples:
        >>> import torch
        >>> from rbdata.samplers import PrioritizedSampler
        >>> class Slots:
        ...     max_size = 4
        ...     def __len__(self):
        ...         return 4
        >>> sampler = PrioritizedSampler(max_capacity=4, alpha=1.0, beta=1.0)
        >>> sampler.extend(torch.arange(4))
        >>> sampler.update_priority(torch.arange(4), torch.tensor([0.0, 0.0, 1.0, 3.0]))
        >>> index, info = sampler.sample(Slots(), 8)
        >>> sorted(set(index.tolist())) in ([2, 3], [3])
        True
        >>> info["priority_weight"].shape
        torch.Size([8])
    """

    per_cell_writes: ClassVar[bool] = True  # the priority tree holds one leaf per cell

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        max_priority_within_buffer: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self._max_capacity = check_int(max_capacity, "max_capacity", minimum=1)
        self._alpha = check_number(alpha, "alpha", minimum=0.0)
        self._beta = check_number(beta, "beta", minimum=0.0)
        self._eps = check_number(eps, "eps", minimum=0.0)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {sorted(_REDUCTIONS)}, got {reduction!r}.")
        self.dtype = dtype
        self.reduction = reduction
        self._max_priority_within_buffer = bool(max_priority_within_buffer)
        self._device = torch.device("cpu") if device is None else torch.device(device)
        self._tree = _SumTree(max_capacity, dtype, track_max=self._max_priority_within_buffer)
        self._initial_priority: float = (1.0 + self._eps) ** self._alpha
        self._max_seen: float = self._initial_priority
        self._max_raw = 1.0  # the largest raw priority written (alpha = 0 cannot recover it)

    # ------------------------------------------------------------ settings
    @property
    def max_capacity(self) -> int:
        """Number of slots."""
        return self._max_capacity

    max_size = max_capacity

    @property
    def device(self) -> torch.device:
        """Where the priorities live."""
        return self._device

    @property
    def eps(self) -> float:
        """Added to every priority before the power."""
        return self._eps

    @property
    def max_priority_within_buffer(self) -> bool:
        """Whether new items get the largest priority in the buffer (else the largest seen)."""
        return self._max_priority_within_buffer

    @property
    def alpha(self) -> float:
        """The priority exponent; assigning it re-transforms the stored values at once."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        value = check_number(value, "alpha", minimum=0.0)
        old, self._alpha = self._alpha, value
        if value == old:
            return
        if old == 0.0:
            warnings.warn(
                "PrioritizedSampler.alpha changed from 0: the stored priorities cannot be "
                "recovered, so items keep uniform weights until their priority is updated.",
                UserWarning,
                stacklevel=2,
            )
        else:
            leaves = self._tree.leaves.clone()
            self._tree.set_leaves(leaves.pow_(value / old))
            self._max_seen = self._max_seen ** (value / old)
        self._initial_priority = (1.0 + self._eps) ** value

    @property
    def beta(self) -> float:
        """The importance-sampling exponent."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = check_number(value, "beta", minimum=0.0)

    # ------------------------------------------------------------ priorities
    @property
    def default_priority(self) -> float:
        """The tree value given to new items: ``(max_priority + eps) ** alpha``."""
        if self._max_priority_within_buffer:
            top = self._tree.max
            return top if top > 0 else self._initial_priority
        return self._max_seen

    @property
    def _max_priority(self) -> tuple[float, None]:
        """The raw priority new items get, as torchrl's ``(raw max priority, index)``."""
        if self._alpha > 0:
            raw = self.default_priority ** (1.0 / self._alpha) - self._eps
            return (raw, None)
        return (self._max_raw, None)

    @property
    def _sum_tree(self) -> Any:
        """The tree of ``(priority + eps) ** alpha`` values (``tree[i]`` reads leaf ``i``)."""
        return self._tree

    def set_consume_after_n(self, n: int | None) -> None:
        """Change consume-after-n; items consumed so far get the default priority back."""
        consumed = torch.zeros(0, dtype=torch.long)
        if self._live is not None:
            consumed = (self._live.counts >= self._live.n).nonzero().reshape(-1)
        super().set_consume_after_n(n)
        if consumed.numel():
            values = torch.full(consumed.shape, self.default_priority, dtype=self.dtype)
            self._tree.update(consumed, values, positive=True)

    def mark_update(self, index: torch.Tensor | int, *, storage: Any = None) -> None:
        """Give the slots ``index`` the default priority (torchrl's writers call it on writes)."""
        self._on_write(torch.as_tensor(index, dtype=torch.long).reshape(-1))

    def _on_write(self, index: torch.Tensor) -> None:
        """Give the (re)written slots ``index`` the default priority."""
        self._check_index(index, self._max_capacity)
        values = torch.full(index.shape, self.default_priority, dtype=self.dtype)
        self._tree.update(index, values, positive=True)

    def _check_index(self, index: torch.Tensor, bound: int) -> None:
        if not index.numel():
            return
        # Viewed as unsigned, a negative index is huge: one reduction checks both ends.
        if int(np.maximum.reduce(index.numpy().view(np.uint64))) >= bound:
            bad = (index < 0) | (index >= bound)
            raise ValueError(
                f"index must lie in [0, {bound}), got out-of-range entries "
                f"{_describe_bad(index, bad)}."
            )

    def update_priority(
        self, index: int | torch.Tensor, priority: float | torch.Tensor, *, storage: Any = None
    ) -> None:
        """Set the priorities of ``index`` (validated first; nothing changes on error).

        Duplicate indices are merged with ``reduction``. With consume-after-n,
        consumed items keep a zero weight until they are rewritten.

        Args:
            index: an int or a 1-D integer tensor of slots.
            priority: a scalar or one value per index (finite, >= 0).
            storage: when given, indices must be below ``len(storage)``.
        """
        index = torch.as_tensor(index)
        if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
            raise ValueError(f"index must hold integers, got dtype {index.dtype}.")
        if not index.is_cpu or index.dtype != torch.long:
            index = index.to(device="cpu", dtype=torch.long)
        priority = torch.as_tensor(priority).detach()
        if not priority.is_cpu or priority.dtype != self._tree.dtype:
            priority = priority.to(device="cpu", dtype=self._tree.dtype)
        n = index.numel()
        if priority.numel() == 1 and n != 1:
            priority = priority.reshape(()).expand(n)
        elif priority.numel() != n:
            raise ValueError(
                f"priority has shape {tuple(priority.shape)} but index has shape "
                f"{tuple(index.shape)}: expected one priority per index, or a scalar."
            )
        if n == 0:
            return
        if index.dim() != 1:
            index = index.reshape(-1)
        if priority.dim() != 1:
            priority = priority.reshape(-1)
        values, low, high = _checked_values(priority)
        self._check_index(index, self._max_capacity if storage is None else len(storage))
        self._set_priorities(index.numpy(), values, low, high)

    def _update_priority_validated(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """``update_priority`` for a caller that already normalized the arguments.

        The buffer's fast path: ``index`` is a 1-D integer tensor and
        ``priority`` a 1-D floating tensor of the same length (no scalar
        broadcasting, no shape checks here). Values and indices are still
        checked, at almost no cost (the bounds are needed anyway): a priority
        that is not finite or < 0 (also after conversion to the tree's dtype)
        or an index outside ``[0, max_capacity)`` raises ``ValueError`` before
        anything changes. A subclass that overrides :meth:`update_priority`
        gets its own method called, so its extra work is never skipped.

        Args:
            index: 1-D integer tensor of slots.
            priority: 1-D floating tensor, one value per index.
        """
        if type(self).update_priority is not PrioritizedSampler.update_priority:
            self.update_priority(index, priority)
            return
        if not index.numel():
            return
        if not index.is_cpu or index.dtype != torch.long:
            index = index.to(device="cpu", dtype=torch.long)
        self._check_index(index, self._max_capacity)
        if priority.requires_grad:
            priority = priority.detach()
        if not priority.is_cpu or priority.dtype != self._tree.dtype:
            priority = priority.to(device="cpu", dtype=self._tree.dtype)
        values, low, high = _checked_values(priority)
        self._set_priorities(index.numpy(), values, low, high)

    def _set_priorities(
        self, index: np.ndarray, priority: np.ndarray, low: float, high: float
    ) -> None:
        """Store validated priorities (``low``/``high``: their smallest and largest value)."""
        reduce = _LEAF_REDUCTIONS.get(self.reduction)
        if reduce is None:
            merged_index, merged = self._merge_duplicates(
                torch.from_numpy(index), torch.from_numpy(priority)
            )
            index, priority = merged_index.numpy(), merged.numpy()
        raw_top = high if reduce is not None else float(priority.max())
        if raw_top > self._max_raw:
            self._max_raw = raw_top
        values = priority + self._eps  # a new array: the caller's priorities stay untouched
        if self._alpha != 1.0:
            np.power(values, self._alpha, out=values)
        positive = (low + self._eps) ** self._alpha > 0
        if self._live is not None:
            consumed = self._consumed(torch.from_numpy(index)).numpy()
            if consumed.any():
                values[consumed] = 0
                positive = False
        self._tree.update_np(index, values, reduce, positive)
        if self._max_priority_within_buffer:
            return
        if self._live is None and self.reduction == "max":
            top = (high + self._eps) ** self._alpha  # the largest stored value, without a reduction
        else:
            top = float(self._tree.leaves.numpy().take(index).max())
        if top > self._max_seen:
            self._max_seen = top

    def _merge_duplicates(
        self, index: torch.Tensor, priority: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reduce the priorities of repeated indices with ``reduction``."""
        uniq, inverse = torch.unique(index, return_inverse=True)
        if uniq.numel() == index.numel():
            return index, priority
        if self.reduction == "median":  # the lower median of each slot's values, as torch's
            by_value = torch.argsort(priority, stable=True)
            order = by_value[torch.argsort(inverse[by_value], stable=True)]
            counts = torch.bincount(inverse, minlength=uniq.numel())
            starts = torch.cumsum(counts, 0) - counts
            return uniq, priority[order[starts + (counts - 1) // 2]]
        merged = torch.zeros(uniq.numel(), dtype=priority.dtype)
        reduce = _REDUCTIONS[self.reduction]
        return uniq, merged.scatter_reduce_(0, inverse, priority, reduce, include_self=False)

    def _consumed(self, index: torch.Tensor) -> torch.Tensor:
        """Mask of the slots of ``index`` that were returned n times since their last write."""
        assert self._live is not None
        counts = self._live.counts
        inside = index < counts.numel()
        consumed = torch.zeros(index.shape, dtype=torch.bool)
        consumed[inside] = counts[index[inside]] >= self._live.n
        return consumed

    # ------------------------------------------------------------ sampling
    def _sample(
        self, storage: Any, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw slots proportionally to their priority (IS weights in ``"priority_weight"``)."""
        if not self._tree.total > 0:
            raise RuntimeError(
                "Cannot sample: every priority is 0 (nothing has a positive probability); "
                "update priorities or write new items first."
            )
        if live is None:
            slots, values = self._tree.sample_np(batch_size, self._rng)
        else:
            drawn, drawn_values = self._sample_distinct(batch_size)
            slots, values = drawn.numpy(), drawn_values.numpy()
        # Importance weights (P(i) / P_min) ** -beta, i.e. (value / min) ** -beta.
        weight = values / self._tree.min
        np.power(weight, -self._beta, out=weight)
        index = torch.from_numpy(slots)
        if live is not None:
            done = live.consume(index)
            self._tree.update(done, torch.zeros(done.shape, dtype=self.dtype))
        return index, {"priority_weight": torch.from_numpy(weight)}

    def _sample_distinct(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw up to ``k`` distinct slots, removing drawn ones from the tree between rounds."""
        index = first_unique(self._tree.sample(k, self._rng))
        if index.numel() == k:
            return index, self._tree.leaves.index_select(0, index)
        parts = [index]
        saved = [self._tree.leaves.index_select(0, index)]
        taken = index.numel()
        try:
            self._tree.update(index, torch.zeros_like(saved[0]))
            while taken < k and self._tree.total > 0:
                more = first_unique(self._tree.sample(k - taken, self._rng))
                parts.append(more)
                saved.append(self._tree.leaves.index_select(0, more))
                self._tree.update(more, torch.zeros_like(saved[-1]))
                taken += more.numel()
        finally:
            index, values = torch.cat(parts), torch.cat(saved)
            self._tree.update(index, values)
        return index, values

    def exhausted(self, storage: Any) -> bool:
        """Whether nothing is sampleable: empty storage, all consumed or all priorities 0."""
        return super().exhausted(storage) or not self._tree.total > 0

    def _on_empty(self) -> None:
        self._tree.set_leaves(torch.zeros(self._max_capacity, dtype=self.dtype))
        self._max_seen = self._initial_priority
        self._max_raw = 1.0

    # ------------------------------------------------------------ state
    def _extra_state(self) -> dict[str, Any]:
        """The tree leaves and the max priority."""
        return {
            "leaves": self._tree.leaves.clone(),
            "max_priority": self._max_seen,
            "max_raw_priority": self._max_raw,
        }

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        """Restore the tree from its leaves (checked first)."""
        leaves = state_dict.get("leaves")
        if leaves is not None and tuple(leaves.shape) != (self._max_capacity,):
            raise ValueError(
                f"state_dict['leaves'] has shape {tuple(leaves.shape)}, expected "
                f"({self._max_capacity},) (max_capacity)."
            )
        if leaves is not None:
            _checked_values(torch.as_tensor(leaves).to(self._tree.dtype))  # finite and >= 0
            self._tree.set_leaves(leaves)
        self._max_seen = float(state_dict.get("max_priority", self._max_seen))
        self._max_raw = float(state_dict.get("max_raw_priority", self._max_raw))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(alpha={self._alpha}, beta={self._beta}, eps={self._eps}, "
            f"reduction={self.reduction!r})"
        )
