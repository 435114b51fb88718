"""Where a PrioritizedSampler keeps its priorities: numpy over the CPU tree, or torch on a device.

:class:`~rbdata.samplers.PrioritizedSampler` is written once against
:class:`_PriorityStore`. A store owns the sum tree and does the per-batch
array work in the fastest form for where the tree lives:

- :class:`_NumpyStore`: the CPU tree (:class:`_SumTree`); arrays are numpy
  arrays sharing the tensors' memory (on a few hundred entries a numpy call
  costs a fraction of a torch call);
- :class:`_TorchStore`: a :class:`_DeviceSumTree` on any device; arrays are
  torch tensors on that device, and nothing is read back to the host per
  batch (the exceptions are listed on the class).

The bounds helpers (:func:`index_top`, :func:`priority_bounds`,
:func:`update_bounds`) read a few numbers back to validate arguments: with
numpy on CPU tensors, with one fused device-to-host read otherwise.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import numpy as np
import torch

from rbdata.samplers._device_sumtree import _canonical, _DeviceSumTree
from rbdata.samplers._live import first_unique
from rbdata.samplers._sumtree import _SumTree

A = TypeVar("A", np.ndarray, torch.Tensor)

#: what :func:`index_top` returns for an index holding a negative slot (above any bound)
_NEGATIVE_TOP = 2**64 - 1


def index_top(index: torch.Tensor) -> int:
    """The largest slot of a non-empty 1-D int64 ``index``; a negative slot counts as 2**64 - 1.

    So ``index_top(index) < bound`` checks both ends of ``[0, bound)``. On the
    CPU it is one numpy reduction (viewed as unsigned, a negative slot is
    huge); elsewhere one device-to-host read of the index's minimum and maximum.
    """
    if index.is_cpu:
        return int(np.maximum.reduce(index.numpy().view(np.uint64)))
    low, high = (int(v) for v in torch.stack(torch.aminmax(index)).tolist())  # one sync
    return high if low >= 0 else _NEGATIVE_TOP


def priority_bounds(priority: torch.Tensor) -> tuple[float, float]:
    """The smallest and largest value of a non-empty 1-D floating ``priority`` (NaN if any is).

    On the CPU two numpy reductions; elsewhere one device-to-host read.
    """
    if priority.is_cpu:
        values = priority.numpy()
        return float(np.minimum.reduce(values)), float(np.maximum.reduce(values))
    low, high = torch.stack(torch.aminmax(priority)).tolist()  # one sync
    return float(low), float(high)


def update_bounds(index: torch.Tensor, priority: torch.Tensor) -> tuple[int, float, float]:
    """:func:`index_top` and :func:`priority_bounds` of one update (same device, non-empty).

    Off the CPU the four numbers come back in one fused read (one sync per
    update: the validation cannot be asynchronous, since a bad update must
    raise before anything changes). Slots are read as float64, exact below
    2**53.
    """
    if index.is_cpu:
        return (index_top(index), *priority_bounds(priority))
    i_low, i_high = torch.aminmax(index)
    p_low, p_high = torch.aminmax(priority)
    read = torch.stack([i_low.double(), i_high.double(), p_low.double(), p_high.double()])
    low_i, high_i, low, high = read.tolist()  # the one sync of a validated update
    return (int(high_i) if low_i >= 0 else _NEGATIVE_TOP), low, high


class _PriorityStore(Generic[A]):
    """The sum tree of ``(priority + eps) ** alpha`` values and the array work around it.

    ``A`` is the store's array type: arguments and results named ``*_array``
    are of it, the rest are torch tensors (as the sampler's callers see them).

    Args:
        tree: the sum tree the store owns.
    """

    def __init__(self, tree: _DeviceSumTree) -> None:
        self.tree = tree

    @property
    def device(self) -> torch.device:
        """Where the tree lives."""
        return self.tree.device

    # ------------------------------------------------------------ conversions
    def index_array(self, index: torch.Tensor) -> A:
        """A 1-D int64 slot tensor (on any device) as the store's array."""
        raise NotImplementedError

    def value_array(self, values: torch.Tensor) -> A:
        """A 1-D tensor of the tree's dtype (on any device) as the store's array."""
        raise NotImplementedError

    def tensor(self, array: A) -> torch.Tensor:
        """The store's array as a tensor (sharing memory where it can)."""
        raise NotImplementedError

    # ------------------------------------------------------------ arithmetic
    def powered(self, priority: A, eps: float, alpha: float) -> A:
        """``(priority + eps) ** alpha`` as a new array (``priority`` is left untouched)."""
        raise NotImplementedError

    def zero_where(self, values: A, mask: torch.Tensor) -> bool:
        """Set ``values[mask] = 0`` (``mask``: a CPU bool tensor); return whether any was set."""
        raise NotImplementedError

    def largest(self, values: A) -> float:
        """The largest entry of a non-empty array (a read back to the host off the CPU)."""
        raise NotImplementedError

    def weights(self, values: A, beta: float) -> torch.Tensor:
        """Importance weights ``(values / min) ** -beta`` (``min``: the smallest positive leaf)."""
        raise NotImplementedError

    # ------------------------------------------------------------ tree
    def write(self, index: A, values: A, reduce: str | None, positive: bool) -> None:
        """Set the leaves ``index`` to ``values`` (see :meth:`_DeviceSumTree.update`)."""
        raise NotImplementedError

    def update(self, index: torch.Tensor, values: torch.Tensor, positive: bool = False) -> None:
        """:meth:`write` from tensors (any device), with no duplicate-merging reduction."""
        self.tree.update(index, values, positive=positive)

    def fill(self, index: torch.Tensor, value: float | torch.Tensor) -> None:
        """Set the leaves ``index`` (a tensor) to ``value`` (> 0; a float or a 0-d tensor)."""
        if not index.numel():
            return
        if isinstance(value, torch.Tensor):
            values = value.to(self.tree.dtype).expand(index.shape)
        else:
            values = torch.full(index.shape, value, dtype=self.tree.dtype, device=self.device)
        self.update(index, values, positive=True)

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace every leaf (``values`` on any device) and rebuild the tree."""
        self.tree.set_leaves(values)

    def max_at(self, index: A) -> float:
        """The largest leaf among ``index`` (a read back to the host off the CPU)."""
        raise NotImplementedError

    def top_or(self, initial: float) -> float | torch.Tensor:
        """The largest leaf, or ``initial`` when none is positive (needs ``track_max``)."""
        top = self.tree.max
        return top if top > 0 else initial

    def has_mass(self) -> bool:
        """Whether some leaf is positive (something can be drawn)."""
        return self.tree.total > 0

    def generator(self, rng: torch.Generator | None) -> torch.Generator | None:
        """The generator that draws on the tree's device for the sampler's ``rng``."""
        return rng

    def draw(self, k: int, rng: torch.Generator | None) -> tuple[torch.Tensor, A]:
        """``k`` slots drawn proportionally to their leaf (stratified), and their leaves."""
        raise NotImplementedError

    def draw_distinct(
        self, k: int, rng: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Up to ``k`` distinct slots drawn by their leaf, and their leaves (consume-after-n).

        Drawn slots are taken out of the tree between rounds and put back at
        the end; on a device each round reads back how many distinct slots it drew.
        """
        leaves = self.tree.leaves
        index = first_unique(self.tree.sample(k, self.generator(rng)))
        if index.numel() == k:
            return index, leaves.index_select(0, index)
        parts = [index]
        saved = [leaves.index_select(0, index)]
        taken = index.numel()
        try:
            self.update(index, torch.zeros_like(saved[0]))
            while taken < k and self.has_mass():
                more = first_unique(self.tree.sample(k - taken, self.generator(rng)))
                parts.append(more)
                saved.append(leaves.index_select(0, more))
                self.update(more, torch.zeros_like(saved[-1]))
                taken += more.numel()
        finally:
            index, values = torch.cat(parts), torch.cat(saved)
            self.update(index, values)
        return index, values

    def leaves_on_cpu(self) -> torch.Tensor:
        """A CPU copy of the leaves (what a state dict saves, loadable on any device)."""
        return self.tree.leaves.to("cpu", copy=True)


class _NumpyStore(_PriorityStore[np.ndarray]):
    """The CPU store: numpy arrays over :class:`_SumTree`'s numpy views.

    Args:
        tree: the CPU tree.
    """

    def __init__(self, tree: _SumTree) -> None:
        super().__init__(tree)
        self._tree = tree

    def index_array(self, index: torch.Tensor) -> np.ndarray:
        """The numpy view of the slots, on the CPU."""
        return (index if index.is_cpu else index.cpu()).numpy()

    def value_array(self, values: torch.Tensor) -> np.ndarray:
        """The numpy view of the values, on the CPU."""
        return (values if values.is_cpu else values.cpu()).numpy()

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        """A tensor sharing the array's memory."""
        return torch.from_numpy(array)

    def powered(self, priority: np.ndarray, eps: float, alpha: float) -> np.ndarray:
        """``(priority + eps) ** alpha``, in place on a new array."""
        values = priority + eps
        if alpha != 1.0:
            np.power(values, alpha, out=values)
        return values

    def zero_where(self, values: np.ndarray, mask: torch.Tensor) -> bool:
        """Zero the masked entries."""
        flags = mask.numpy()
        if not flags.any():
            return False
        values[flags] = 0
        return True

    def largest(self, values: np.ndarray) -> float:
        """``values.max()``."""
        return float(values.max())

    def weights(self, values: np.ndarray, beta: float) -> torch.Tensor:
        """The weights in numpy, as a tensor sharing their memory."""
        weight = values / self._tree.min
        np.power(weight, -beta, out=weight)
        return torch.from_numpy(weight)

    def write(
        self, index: np.ndarray, values: np.ndarray, reduce: str | None, positive: bool
    ) -> None:
        """Numpy scatters into the leaves, then the parents."""
        self._tree.update_np(index, values, reduce, positive)

    def max_at(self, index: np.ndarray) -> float:
        """The largest of the leaves ``index``."""
        return float(self._tree.leaves.numpy().take(index).max())

    def draw(self, k: int, rng: torch.Generator | None) -> tuple[torch.Tensor, np.ndarray]:
        """The tree's numpy draw."""
        slots, values = self._tree.sample_np(k, rng)
        return torch.from_numpy(slots), values


class _TorchStore(_PriorityStore[torch.Tensor]):
    """A store of torch tensors on the tree's device: no host round trip per batch.

    What still reads back to the host on this path, each once per call at most:

    - a validated update (:func:`update_bounds`): one fused read of the bounds;
    - :meth:`has_mass` until a positive write proves the tree holds some mass
      (then no read, until a write that may hold zeros);
    - :meth:`largest` and :meth:`max_at`, used for reductions other than
      ``"max"`` and under consume-after-n (keeping the max priority seen);
    - the float summaries of the tree (``default_priority`` with
      ``max_priority_within_buffer``), which the write path avoids through
      :meth:`top_or`.

    Args:
        tree: the pure-torch tree (on any device, the CPU included).
    """

    def __init__(self, tree: _DeviceSumTree) -> None:
        super().__init__(tree)
        self._surely_positive = False  # a positive write happened and no zero since
        # Draws on a device with a generator living elsewhere (the buffer's CPU generator) use
        # this one, reseeded from the sampler's generator per batch.
        self._twin: torch.Generator | None = None

    def index_array(self, index: torch.Tensor) -> torch.Tensor:
        """The slots on the tree's device."""
        return index if index.device == self.device else index.to(self.device)

    def value_array(self, values: torch.Tensor) -> torch.Tensor:
        """The values on the tree's device."""
        return values if values.device == self.device else values.to(self.device)

    def tensor(self, array: torch.Tensor) -> torch.Tensor:
        """The tensor itself."""
        return array

    def powered(self, priority: torch.Tensor, eps: float, alpha: float) -> torch.Tensor:
        """``(priority + eps) ** alpha`` on the device."""
        values = priority + eps
        return values if alpha == 1.0 else values.pow_(alpha)

    def zero_where(self, values: torch.Tensor, mask: torch.Tensor) -> bool:
        """Zero the masked entries (``mask`` lives on the CPU: the test reads no device)."""
        if not bool(mask.any()):
            return False
        values.masked_fill_(mask.to(self.device), 0)
        return True

    def largest(self, values: torch.Tensor) -> float:
        """``values.max()``, read back (one sync)."""
        return float(values.amax())

    def weights(self, values: torch.Tensor, beta: float) -> torch.Tensor:
        """The weights on the device (the minimum stays a 0-d device tensor)."""
        return (values / self.tree.min_tensor).pow_(-beta)

    def write(
        self, index: torch.Tensor, values: torch.Tensor, reduce: str | None, positive: bool
    ) -> None:
        """Torch scatters into the leaves, then the parents."""
        self.tree.update(index, values, reduce, positive)
        self._note_write(index.numel(), positive)

    def update(self, index: torch.Tensor, values: torch.Tensor, positive: bool = False) -> None:
        """:meth:`write` from tensors (any device), with no duplicate-merging reduction."""
        self.tree.update(index, values, positive=positive)
        self._note_write(index.numel(), positive)

    def _note_write(self, count: int, positive: bool) -> None:
        if count:
            # Positive values give the tree mass; a write that may hold zeros may take it all.
            self._surely_positive = positive

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace every leaf and rebuild the tree (its mass is unknown until checked)."""
        self.tree.set_leaves(values)
        self._surely_positive = False

    def max_at(self, index: torch.Tensor) -> float:
        """The largest of the leaves ``index``, read back (one sync)."""
        return float(self.tree.leaves.index_select(0, index).amax())

    def top_or(self, initial: float) -> float | torch.Tensor:
        """A 0-d tensor on the device: no read back."""
        top = self.tree.max_tensor
        return torch.where(top > 0, top, torch.full_like(top, initial))

    def has_mass(self) -> bool:
        """Known without a read after a positive write; else one read of the total."""
        if not self._surely_positive:
            self._surely_positive = self.tree.total > 0
        return self._surely_positive

    def generator(self, rng: torch.Generator | None) -> torch.Generator | None:
        """``rng`` when it lives on the tree's device (or is None: the device's default).

        Otherwise a generator on the tree's device, seeded from one draw of
        ``rng`` (a host-side draw for a CPU ``rng``: it waits for no device),
        so the draws still follow ``rng``'s state.
        """
        if rng is None or _canonical(rng.device) == self.device:
            return rng
        if self._twin is None:
            self._twin = torch.Generator(device=self.device)
        self._twin.manual_seed(int(torch.randint(2**62, (), generator=rng, device=rng.device)))
        return self._twin

    def draw(self, k: int, rng: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The tree's torch draw, on the device."""
        return self.tree.sample_with_values(k, self.generator(rng))


def priority_store(
    capacity: int,
    dtype: torch.dtype,
    track_max: bool,
    device: torch.device | str | None,
    torch_tree: bool = False,
) -> _NumpyStore | _TorchStore:
    """The store for ``device``: numpy over the CPU tree, torch elsewhere.

    Args:
        capacity: number of slots.
        dtype: the tree's floating dtype.
        track_max: maintain the maximum leaf.
        device: where the tree lives (None: the CPU).
        torch_tree: use the pure-torch store even on the CPU (how the tests run
            the device path on a machine without an accelerator).
    """
    device = _canonical(device)
    if device.type == "cpu" and not torch_tree:
        return _NumpyStore(_SumTree(capacity, dtype, track_max))
    return _TorchStore(_DeviceSumTree(capacity, dtype, track_max, device))
