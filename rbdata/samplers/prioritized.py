"""PrioritizedSampler: sampling proportional to priority**alpha (Schaul et al., 2015)."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch

from rbdata._component.checks import check_int, check_number
from rbdata.samplers._base import PriorityMass, Sampler
from rbdata.samplers._device_sumtree import _canonical
from rbdata.samplers._live import _LiveSet
from rbdata.samplers._max_priority import MaxPriority
from rbdata.samplers._priority_checks import (
    CheckedUpdate,
    check_slots,
    check_update,
    checked_leaves,
    priority_arguments,
)
from rbdata.samplers._priority_merge import LEAF_REDUCTIONS, check_reduction, merge_duplicates
from rbdata.samplers._priority_store import (
    _NumpyStore,
    _TorchStore,
    index_top,
    priority_store,
)
from rbdata.sharing.counters import spawning
from rbdata.storages import Storage


def _check_exponent(value: Any, name: str) -> float:
    """``value`` as a float >= 0 (``alpha``, ``beta``), with torchrl's wording on error.

    Raises:
        TypeError: if it is not a real number.
        ValueError: if it is negative or NaN.
    """
    number = check_number(value, name)
    if not number >= 0:
        raise ValueError(f"{name} must be greater or equal than 0 (>= 0), got {name}={number!r}.")
    return number


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
        device: where the priorities, the tree, sampled indices and weights live.
            None (as torchrl's): the CPU, until the sampler meets a storage on a
            CUDA device (at ``sample`` or ``update_priority(..., storage=...)``),
            where the priorities move, kept. On a device every per-batch step is
            a torch op there, with no host round trip but the one fused check of
            an update's arguments (see ``_priority_store``); on the CPU the
            bookkeeping runs in numpy.
        replacement: accepted for torchrl compatibility: True changes nothing;
            False raises ``TypeError`` (this sampler has no without-replacement variant).

    Examples:
        >>> import torch
        >>> from rbdata.samplers import PrioritizedSampler
        >>> class Slots:  # what a sampler reads of a storage (a Storage declares these)
        ...     max_size, device = 4, None
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
        *,
        replacement: bool = True,
    ) -> None:
        super().__init__(replacement=replacement)
        self._max_capacity = check_int(max_capacity, "max_capacity", minimum=1)
        self._alpha = _check_exponent(alpha, "alpha")
        self._beta = _check_exponent(beta, "beta")
        self._eps = check_number(eps, "eps", minimum=0.0)
        self.reduction = check_reduction(reduction)
        self.dtype = dtype
        self._max_priority_within_buffer = bool(max_priority_within_buffer)
        self._requested_device = None if device is None else _canonical(device)
        self._leaf_count = self._max_capacity  # grows to cell_capacity on a write past it
        self._store: _NumpyStore | _TorchStore = priority_store(
            max_capacity, dtype, self._max_priority_within_buffer, self._requested_device
        )
        self._max = MaxPriority(self._alpha, self._eps)  # what new items get

    def __getstate__(self) -> dict[str, Any]:
        if spawning():
            raise RuntimeError(
                f"Samplers of type {type(self).__name__} cannot be shared between processes: "
                "the priority tree is this process's. Use TensorDictPrioritizedReplayBuffer("
                "sync=False) (or PrioritizedReplayBuffer(sync=False)) instead: writer processes "
                "get a uniform sampler and the learner keeps the prioritized one."
            )
        return self.__dict__.copy()

    # ------------------------------------------------------------ settings
    @property
    def prioritized(self) -> bool:
        """True: priority updates change what this sampler draws."""
        return True

    @property
    def max_capacity(self) -> int:
        """Number of slots."""
        return self._max_capacity

    max_size = max_capacity

    @property
    def cell_capacity(self) -> int:
        """The cells this sampler holds priorities for: a power of two above ``max_capacity``.

        The smallest such power: torchrl 0.14.1's compiled segment tree is that large (8 slots for
        ``max_capacity=5``, 16 for 8), so a small sampler over a larger storage
        takes, and samples, writes up to it. rbdata's tree holds
        ``max_capacity`` leaves and grows to this size at the first write or
        update past them. A write past it raises ``ValueError`` before anything is
        written (torchrl's tree would store its priority over another slot's).
        """
        return 1 << self._max_capacity.bit_length()

    def _ensure_leaves(self, top: int) -> None:
        """Grow the tree to :attr:`cell_capacity` leaves if slot ``top`` lies past its leaves."""
        if top < self._leaf_count:
            return
        self._resize_leaves(self.cell_capacity)

    def _resize_leaves(self, count: int) -> None:
        """Hold ``count`` leaves, the current ones kept (new ones 0)."""
        old = self._store.tree.leaves
        store = priority_store(
            count,
            self.dtype,
            self._max_priority_within_buffer,
            self._store.device,
            isinstance(self._store, _TorchStore),
        )
        leaves = torch.zeros(count, dtype=old.dtype, device=old.device)
        kept = min(count, old.numel())
        leaves[:kept] = old[:kept]
        store.set_leaves(leaves)
        self._store = store
        self._leaf_count = count

    def priority_mass(self) -> PriorityMass:
        """The sum and smallest positive value of the weights drawn by, and ``beta``.

        Examples:
            >>> import torch
            >>> sampler = PrioritizedSampler(4, alpha=1.0, beta=0.5)
            >>> sampler.extend(torch.arange(2))
            >>> sampler.priority_mass()
            PriorityMass(total=2.0, smallest=1.0, beta=0.5)
        """
        tree = self._tree
        return PriorityMass(float(tree.total), float(tree.min), self._beta)

    @property
    def device(self) -> torch.device:
        """Where the priorities live (with ``device=None``, the CPU until a CUDA storage is met)."""
        return self._store.device

    @property
    def _tree(self) -> Any:
        """The sum tree of ``(priority + eps) ** alpha`` values (the torch API of both trees)."""
        return self._store.tree

    #: whether ``device=None`` follows a CUDA storage (subclasses with CPU-side state opt out)
    _follows_storage_device = True

    def _move_to(self, device: torch.device | str, *, torch_tree: bool = False) -> None:
        """Keep the priorities on ``device`` from now on (the values are kept).

        Args:
            device: where the tree goes.
            torch_tree: use the pure-torch store even on the CPU: the hook the
                tests use to run the device path on a machine without an accelerator.
        """
        store = priority_store(
            self._leaf_count, self.dtype, self._max_priority_within_buffer, device, torch_tree
        )
        store.set_leaves(self._store.tree.leaves)
        self._store = store

    def _follow_storage(self, storage: Storage) -> None:
        """With ``device=None``, move the priorities to a CUDA storage's device (as torchrl)."""
        if self._requested_device is not None or not self._follows_storage_device:
            return
        device: Any = storage.device
        if type(device) is not torch.device:
            if device is None or device == "auto":
                return
            device = torch.device(device)
        if device.type == "cuda" and _canonical(device) != self.device:
            self._move_to(device)

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
        value = _check_exponent(value, "alpha")
        old, self._alpha = self._alpha, value
        if value == old:
            return
        self._max.rescale(old, value, self._eps)
        if old == 0.0:
            # every written leaf holds (p + eps) ** 0 == 1: the raw priorities are gone
            if self._store.has_mass():
                warnings.warn(
                    "PrioritizedSampler.alpha changed away from 0 on a sampler that holds "
                    "priorities: they cannot be recovered (alpha=0 stores 1.0 for every "
                    "written item), so those items keep uniform weights until their "
                    "priority is next updated.",
                    UserWarning,
                    stacklevel=2,
                )
            return
        leaves = self._tree.leaves
        written = leaves > 0  # slots never written stay 0 (0 ** 0 would make them 1)
        self._store.set_leaves(torch.where(written, leaves.pow(value / old), leaves))

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
        """The raw priority new items get (as torchrl's): the largest seen, 1.0 at first.

        With ``max_priority_within_buffer``, the largest in the buffer. The tree
        holds ``(default_priority + eps) ** alpha`` for them.
        """
        return float(self._max_priority[0])

    def _default_value(self) -> float | torch.Tensor:
        """:attr:`default_priority`, as a 0-d tensor on a device where reading it would sync."""
        if self._max_priority_within_buffer:
            return self._store.top_or(self._max.initial)
        return self._max.seen

    @property
    def _max_priority(self) -> tuple[float, int | None]:
        """The raw max priority and its slot (torchrl's ``_max_priority``): what new items get.

        The slot is where the largest priority was first written; with
        ``max_priority_within_buffer``, the first slot holding the largest value
        in the tree (an O(capacity) read). With ``alpha=0`` the tree cannot give
        raw values back: the largest ever written is kept.
        """
        if self._alpha == 0 or not self._max_priority_within_buffer:
            return (self._max.raw, self._max.index)
        if not self._store.has_mass():
            return (1.0, None)  # nothing in the buffer: new items get 1.0
        top = float(self._default_value())
        raw = max(top ** (1.0 / self._alpha) - self._eps, 0.0)
        return (raw, int(self._tree.leaves.argmax()))

    @property
    def _min_tree(self) -> Any:
        """The tree read as torchrl's min tree: ``tree[i]`` is slot ``i``'s value.

        rbdata keeps one tree (its smallest positive leaf is :attr:`_tree`'s
        ``min``); slots never written read 0 here, where torchrl's min tree holds
        the largest float.
        """
        return self._tree

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
        self._store.fill(consumed, self._default_value())

    def mark_update(self, index: torch.Tensor | int, *, storage: Storage | None = None) -> None:
        """Give the slots ``index`` the default priority (torchrl's writers call it on writes)."""
        self._on_write(torch.as_tensor(index, dtype=torch.long).reshape(-1))

    def _on_write(self, index: torch.Tensor) -> None:
        """Give the (re)written slots ``index`` the default priority."""
        self._check_index(index, self.cell_capacity)
        self._grow_for(index)
        self._store.fill(index, self._default_value())
        self._max.written(index)

    def _grow_for(self, index: torch.Tensor) -> None:
        """Grow the tree if the (checked) slots ``index`` reach past its leaves."""
        if self._leaf_count < self.cell_capacity and index.numel():
            self._ensure_leaves(int(index_top(index)))

    def _check_index(self, index: torch.Tensor, bound: int) -> None:
        """ValueError unless the 1-D int64 ``index`` lies in ``[0, bound)`` (a sync off the CPU)."""
        if index.numel():
            check_slots(index, index_top(index), bound)

    def update_priority(
        self,
        index: int | torch.Tensor,
        priority: float | torch.Tensor,
        *,
        storage: Storage | None = None,
    ) -> None:
        """Set the priorities of ``index`` (validated first; nothing changes on error).

        Duplicate indices are merged with ``reduction``. With consume-after-n,
        consumed items keep a zero weight until they are rewritten.

        Args:
            index: an int or a 1-D integer tensor of slots.
            priority: a scalar or one value per index (finite, >= 0).
            storage: when given, indices must be below ``len(storage)`` (and, with
                ``device=None``, a CUDA storage moves the priorities to its device).
        """
        if storage is not None:
            self._follow_storage(storage)
        index, priority = priority_arguments(index, priority)
        if not index.numel():
            return
        bound = self.cell_capacity if storage is None else len(storage)
        checked = self._checked(index, priority, bound)
        self._grow_for(checked.slots)
        self._set_priorities(*checked)

    def _checked(
        self, index: torch.Tensor, priority: torch.Tensor, bound: int, values_first: bool = True
    ) -> CheckedUpdate:
        """A non-empty 1-D update aligned with the tree and validated (see ``check_update``)."""
        tree = self._store.tree
        return check_update(index, priority, bound, tree.device, tree.dtype, values_first)

    def checked_update(
        self, index: int | torch.Tensor, priority: float | torch.Tensor, storage: Storage
    ) -> CheckedUpdate | None:
        """Validate an update of the slots of ``storage`` once; None when it is empty.

        A buffer's priority update: it may drop entries (slots rewritten since
        the handle was taken) before :meth:`apply_update` stores the rest.

        Raises:
            TypeError: for an index that does not hold integers.
            ValueError: for lengths that differ, a slot outside ``[0, len(storage))``
                or a priority that is negative, NaN or infinite.
        """
        self._follow_storage(storage)
        index, priority = priority_arguments(index, priority, non_integer=TypeError)
        if not index.numel():
            return None
        return self._checked(index, priority, len(storage), values_first=False)

    def apply_update(self, update: CheckedUpdate, storage: Storage | None = None) -> None:
        """Store an update :meth:`checked_update` validated (entries may have been dropped since).

        A subclass that overrides :meth:`update_priority` gets it called, so
        that its extra work is never skipped (its arguments are checked again then).
        """
        if type(self).update_priority is not PrioritizedSampler.update_priority:
            self.update_priority(update.slots, update.priority, storage=storage)
        elif update.slots.numel():
            self._grow_for(update.slots)
            self._set_priorities(*update)

    def _update_priority_validated(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """``update_priority`` for a caller that already normalized the arguments.

        ``index`` is a 1-D integer tensor and ``priority`` a 1-D floating
        tensor of the same length (no scalar broadcasting, no shape checks
        here). Values and indices are checked once (a priority that is not
        finite or < 0, also after conversion to the tree's dtype, or an index
        outside ``[0, max_capacity)`` raises ``ValueError`` before anything
        changes). A subclass that overrides :meth:`update_priority` gets its
        own method called, so its extra work is never skipped.

        Args:
            index: 1-D integer tensor of slots.
            priority: 1-D floating tensor, one value per index.
        """
        if type(self).update_priority is not PrioritizedSampler.update_priority:
            self.update_priority(index, priority)
            return
        if index.numel():
            checked = self._checked(index, priority.detach(), self.cell_capacity, False)
            self._grow_for(checked.slots)
            self._set_priorities(*checked)

    def _set_priorities(
        self, index: torch.Tensor, priority: torch.Tensor, low: float, high: float
    ) -> None:
        """Store validated priorities (``low``/``high``: their smallest and largest value).

        With ``reduction="max"`` and no consume-after-n this reads nothing back
        from a device; other reductions read the largest merged value, and
        consume-after-n the consumed mask (its counts live on the CPU).
        """
        store: Any = self._store  # its array type (numpy or torch) is the store's own
        slots, raw = store.index_array(index), store.value_array(priority)
        reduce = LEAF_REDUCTIONS.get(self.reduction)
        raw_top = high
        if reduce is None:
            merged = merge_duplicates(store.tensor(slots), store.tensor(raw), self.reduction)
            slots, raw = store.index_array(merged[0]), store.value_array(merged[1])
            raw_top = store.largest(raw)
        self._max.updated(slots, raw, raw_top)
        values = store.powered(raw, self._eps, self._alpha)  # the caller's priorities stay as given
        positive = (low + self._eps) ** self._alpha > 0
        if self._live is not None and store.zero_where(
            values, self._live.is_consumed(store.tensor(slots))
        ):
            positive = False
        store.write(slots, values, reduce, positive)
        if self._max_priority_within_buffer:
            return
        if self._live is None and self.reduction == "max":
            top = (high + self._eps) ** self._alpha  # the largest stored value, without a reduction
        else:
            top = store.max_at(slots)
        self._max.stored(top)

    # ------------------------------------------------------------ sampling
    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw slots proportionally to their priority (IS weights in ``"priority_weight"``)."""
        self._follow_storage(storage)
        store: Any = self._store  # its array type (numpy or torch) is the store's own
        if not store.has_mass():
            raise RuntimeError(
                "Cannot sample: every priority is 0 (nothing has a positive probability); "
                "update priorities or write new items first."
            )
        if live is None:
            index, values = store.draw(batch_size, self._rng)
        else:
            index, drawn = store.draw_distinct(batch_size, self._rng)
            values = store.value_array(drawn)
        # Importance weights (P(i) / P_min) ** -beta, i.e. (value / min) ** -beta.
        weight = store.weights(values, self._beta)
        if live is not None:
            done = live.consume(index.cpu())  # the live set's counts live on the CPU
            store.update(done, torch.zeros(done.shape, dtype=self._tree.dtype))
        return index, {"priority_weight": weight}

    def exhausted(self, storage: Storage) -> bool:
        """Whether nothing is sampleable: empty storage, all consumed or all priorities 0."""
        self._follow_storage(storage)
        return super().exhausted(storage) or not self._store.has_mass()

    def _on_empty(self) -> None:
        self._store.set_leaves(torch.zeros(self._leaf_count, dtype=self._tree.dtype))
        self._max.reset()

    # ------------------------------------------------------------ state
    def _extra_state(self) -> dict[str, Any]:
        """The tree leaves (a CPU copy, loadable on any device), the max priority, the exponents."""
        return {
            "leaves": self._store.leaves_on_cpu(),
            **self._max.state(),
            "alpha": self._alpha,
            "beta": self._beta,
            "eps": self._eps,
        }

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        """Restore the tree from its leaves (checked first)."""
        leaves = checked_leaves(
            state_dict.get("leaves"), (self._max_capacity, self.cell_capacity), self._tree.dtype
        )
        alpha = _check_exponent(state_dict.get("alpha", self._alpha), "state_dict['alpha']")
        beta = _check_exponent(state_dict.get("beta", self._beta), "state_dict['beta']")
        eps = check_number(state_dict.get("eps", self._eps), "state_dict['eps']", minimum=0.0)
        if leaves is not None:
            if leaves.numel() != self._leaf_count:
                self._resize_leaves(leaves.numel())
            self._store.set_leaves(leaves)
        # the saved exponents come back with the leaves they produced (as torchrl's)
        self._alpha, self._beta, self._eps = alpha, beta, eps
        self._max.load(state_dict, alpha, eps)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(alpha={self._alpha}, beta={self._beta}, eps={self._eps}, "
            f"reduction={self.reduction!r})"
        )
