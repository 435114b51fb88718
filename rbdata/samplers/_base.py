"""The Sampler base class: which slots a batch reads."""

from __future__ import annotations

import os
import warnings
from typing import Any, ClassVar, NamedTuple

import torch

from rbdata._component.checks import check_int
from rbdata._component.state_file import read_state, write_state
from rbdata.samplers._live import _LiveSet
from rbdata.samplers._replacement import check_replacement
from rbdata.samplers._torchrl import sampler_state
from rbdata.storages import Storage

__all__ = ["PriorityMass", "Sampler"]


class PriorityMass(NamedTuple):
    """What a sampler that draws by priority draws from (:meth:`Sampler.priority_mass`).

    Attributes:
        total: the sum of its sampling weights (``(priority + eps) ** alpha``).
        smallest: its smallest positive weight (``inf`` when none is).
        beta: the exponent of its importance weights.
    """

    total: float
    smallest: float
    beta: float


#: what a sampler says of its draws, declared by each class for itself (not inherited)
_OWN_CAPABILITIES = ("reads_only_length", "draws_independent")


class Sampler:
    """Base class of every sampler: it owns the public methods, subclasses fill small hooks.

    A sampler picks the slots a batch reads: ``sample(storage, batch_size)``
    returns ``(index, info)`` where ``index`` is a LongTensor of slots and
    ``info`` a dict of per-item tensors (e.g. ``"priority_weight"``). The
    buffer tells the sampler about writes (``extend`` / ``add``) and in-place
    edits (``mark_edited``), hands it a random generator (``set_rng``; None
    means torch's global RNG) and, for consume-after-n, the number of returns
    after which an item leaves the sampleable set (``set_consume_after_n``).

    The public methods check their arguments and keep the consume-after-n
    bookkeeping (a :class:`_LiveSet`: with it, a batch holds distinct live
    items, fewer than ``batch_size`` when fewer are live; counts go up when
    the batch is sampled; a write makes a slot live again with a count of 0),
    then call the hooks a subclass implements:

    - ``_sample(storage, batch_size, live) -> (index, info)`` (required;
      ``live`` is the live set, or None without consume-after-n);
    - ``_on_write(index)``, ``_on_update(index)``, ``_on_empty()``;
    - ``_extra_state()`` / ``_load_extra_state(state)`` for ``state_dict``.

    A subclass may also override ``sample`` itself, as torchrl samplers do.

    A subclass may mix in :class:`abc.ABC`. No metaclass: torchrl's
    ``replacement=`` keyword is taken by every rbdata sampler's constructor;
    ``RandomSampler(replacement=False, ...)`` and ``SliceSampler(replacement=False, ...)``
    build their without-replacement variant (a plain ``__new__`` on those two
    classes, as ``pathlib.Path(...)`` builds a ``PosixPath``), the
    without-replacement samplers take it as a no-op, the others refuse False
    (``TypeError``). A subclass's own constructor need not take it.

    Examples:
        >>> import torch
        >>> from rbdata.samplers import RandomSampler
        >>> class Slots:
        ...     max_size = 10
        ...     def __len__(self):
        ...         return 10
        >>> sampler = RandomSampler()
        >>> sampler.set_consume_after_n(1)
        >>> sampler.extend(torch.arange(10))
        >>> index, info = sampler.sample(Slots(), 4)
        >>> index.unique().numel()
        4
        >>> sampler.exhausted(Slots())
        False
    """

    #: ``extend`` receives flat cells rather than items along dim 0 for a storage with
    #: ``ndim > 1`` (a sampler keeping per-cell state, such as a priority tree, sets it).
    per_cell_writes: ClassVar[bool] = False

    #: whether the sampler sets consume-after-n itself (:class:`ConsumingSampler`): the
    #: buffer then takes the sampler's count as its ``consume_after_n_samples``
    consumes: ClassVar[bool] = False

    #: whether a pass leaves out a last, short batch (samplers without replacement)
    drop_last: bool = False

    #: whether a draw depends on nothing of the storage but its length: the sampler
    #: keeps no state of the items written (none of its own draws read them either)
    reads_only_length: ClassVar[bool] = False

    #: whether each draw is independent of the others (it moves only the random state)
    draws_independent: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass declares :attr:`reads_only_length` and :attr:`draws_independent` itself.

        Neither is inherited (a subclass may keep state its base does not):
        unless its own body sets them, they are False.
        """
        super().__init_subclass__(**kwargs)
        for name in _OWN_CAPABILITIES:
            if name not in cls.__dict__:
                setattr(cls, name, False)

    @property
    def prioritized(self) -> bool:
        """Whether priority updates change what this sampler draws (False here)."""
        return False

    @property
    def max_capacity(self) -> int | None:
        """The number of cells this sampler keeps state for (None: as many as the storage)."""
        return None

    @property
    def default_priority(self) -> float:
        """The priority new items get: 1.0 for a sampler that does not draw by priority.

        As torchrl's ``Sampler.default_priority``; :class:`PrioritizedSampler`
        reports the largest priority seen (or in the buffer).
        """
        return 1.0

    @property
    def cell_capacity(self) -> int | None:
        """The cells a write may reach (None: any): :attr:`max_capacity`, unless a sampler grows.

        A :class:`PrioritizedSampler` takes writes up to torchrl's tree size,
        the smallest power of two above its ``max_capacity``.
        """
        return self.max_capacity

    def priority_mass(self) -> PriorityMass | None:
        """The weights this sampler draws by, summed (None: it does not draw by priority).

        A sharded buffer splits a batch over its shards by their masses and
        normalises importance weights by the smallest weight over all shards.
        """
        return None

    def __init__(self, *, replacement: bool = True) -> None:
        """Set up the base's state; ``replacement=False`` is refused (see the class docs)."""
        check_replacement(replacement, type(self).__name__)
        self._rng: torch.Generator | None = None
        self._live: _LiveSet | None = None
        self._live_needs_seed = False

    # ------------------------------------------------------------ sampling
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Pick ``batch_size`` slots of ``storage``.

        Args:
            storage: the storage to sample from (``len(storage)`` and
                ``storage.max_size`` are what most samplers use).
            batch_size: the number of items wanted (a positive int).

        Returns:
            ``(index, info)``: a LongTensor of slots and a dict of per-item tensors.

        Raises:
            TypeError: if ``batch_size`` is not an int.
            ValueError: if ``batch_size`` is not positive.
            RuntimeError: if the storage is empty or every item was consumed.
        """
        check_int(batch_size, "batch_size", minimum=1)
        if len(storage) == 0:
            raise RuntimeError(
                "Cannot sample from an empty storage: it holds 0 items "
                f"(max_size={storage.max_size}); extend the buffer first."
            )
        live = None if self._live is None else self._live_set(storage)
        if live is not None and len(live) == 0:
            raise RuntimeError(
                "Cannot sample from an empty storage: every item was consumed "
                f"(consume_after_n_samples={live.n}); write new items first."
            )
        return self._sample(storage, batch_size, live)

    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw the slots (arguments already checked); see :meth:`sample`."""
        raise NotImplementedError(f"{type(self).__name__} implements neither sample nor _sample.")

    @property
    def ran_out(self) -> bool:
        """Whether a pass over the data just ended (samplers with passes only)."""
        return False

    def can_sample(self, storage: Storage, batch_size: int) -> bool:
        """Whether ``sample(storage, batch_size)`` finds something to draw (torchrl's).

        Not :meth:`exhausted`, and with ``drop_last``, at least ``batch_size``
        items stored.

        Raises:
            TypeError, ValueError: for a ``batch_size`` that is not a positive int.
        """
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        if self.exhausted(storage):
            return False
        return not self.drop_last or len(storage) >= batch_size

    def exhausted(self, storage: Storage) -> bool:
        """Whether nothing is left to sample: an empty storage or every item consumed."""
        if len(storage) == 0:
            return True
        live = self._live_set(storage)
        return live is not None and len(live) == 0

    def reusable_slots(self, k: int) -> torch.Tensor:
        """Up to ``k`` consumed slots new items may be written to, in ring order.

        From the reuse position (the slot after the last consumed slot written
        again; slot 0 at first) upwards, wrapping around, skipping the slots
        that are not consumed: after a drain, one run of slots. Without
        consume-after-n there are none. Looking changes nothing: a slot leaves
        the list when it is written.
        """
        if self._live is None:
            return torch.zeros(0, dtype=torch.long)
        return self._live.consumed(k)

    def sampleable(self, storage: Storage) -> int:
        """How many items a sample may still return (all of them without consume-after-n)."""
        live = self._live_set(storage)
        return len(storage) if live is None else len(live)

    # ------------------------------------------------------------ writes
    def extend(self, index: torch.Tensor) -> None:
        """Tell the sampler that the slots ``index`` were (re)written."""
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        self._on_write(index)
        if self._live is not None:
            self._live.add(index, self._rng)

    def add(self, index: int) -> None:
        """Tell the sampler that the slot ``index`` was (re)written."""
        self.extend(torch.tensor([int(index)]))

    def mark_update(self, index: torch.Tensor | int, *, storage: Storage | None = None) -> None:
        """Tell the sampler that the slots ``index`` changed (torchrl's notification).

        Samplers that read the stored data (trajectory boundaries) read it again;
        a :class:`PrioritizedSampler` gives the slots the default priority, as
        torchrl's writers expect when they call it after a write.
        """
        self._on_update(torch.as_tensor(index, dtype=torch.long).reshape(-1))

    def mark_edited(self, index: torch.Tensor | int) -> None:
        """Tell the sampler that the slots ``index`` were edited in place (``set_``, ...).

        Their items stay the same (priorities and counts are kept); samplers that
        read the stored data (trajectory boundaries) read it again.
        """
        self._on_update(torch.as_tensor(index, dtype=torch.long).reshape(-1))

    def update_priority(
        self,
        index: int | torch.Tensor,
        priority: float | torch.Tensor,
        *,
        storage: Storage | None = None,
    ) -> None:
        """Update priorities: a no-op that warns, as this sampler is not prioritized (torchrl's)."""
        warnings.warn(
            f"Calling update_priority() on a sampler {type(self).__name__} that is not "
            "prioritized: the priorities are ignored.",
            UserWarning,
            stacklevel=2,
        )

    def _empty(self) -> None:
        """Forget every item (the storage was emptied)."""
        if self._live is not None:
            self._live.clear()
            self._live_needs_seed = False
        self._on_empty()

    # hooks (no-ops by default)
    def _on_write(self, index: torch.Tensor) -> None:
        """The slots ``index`` (1-D) were written."""

    def _on_update(self, index: torch.Tensor) -> None:
        """The slots ``index`` (1-D) were edited in place."""

    def _on_empty(self) -> None:
        """The storage was emptied."""

    # ------------------------------------------------------------ settings
    def set_rng(self, generator: torch.Generator | None) -> None:
        """Use ``generator`` for every random draw (None: torch's global RNG)."""
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None, got {type(generator).__name__}."
            )
        self._rng = generator

    def set_consume_after_n(self, n: int | None) -> None:
        """Remove items from the sampleable set after they were returned ``n`` times.

        Args:
            n: a positive int, or None to turn consumption off. Items already
                in the storage become live with a count of 0 at the next sample.
        """
        if n is None:
            self._live = None
            self._live_needs_seed = False
            return
        self._live = _LiveSet(check_int(n, "consume_after_n_samples", minimum=1))
        self._live_needs_seed = True

    @property
    def consume_after_n(self) -> int | None:
        """The consume-after-n setting (None when items are never consumed)."""
        return None if self._live is None else self._live.n

    def _live_set(self, storage: Storage) -> _LiveSet | None:
        """The live set (None without consume-after-n), seeded from ``storage`` once."""
        if self._live is not None and self._live_needs_seed:
            self._live.add(torch.arange(len(storage)), self._rng)
            self._live_needs_seed = False
        return self._live

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The sampler's state (plain values and tensors; not the generator)."""
        return {
            "consume_after_n": self.consume_after_n,
            "live": None if self._live is None else self._live.state_dict(),
            "live_needs_seed": self._live_needs_seed,
            **self._extra_state(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; unknown keys are ignored, missing ones kept.

        torchrl's sampler states are read too (see :mod:`rbdata.samplers._torchrl`), or
        refused with a ValueError naming what cannot be read.
        """
        state_dict = sampler_state(state_dict, self)
        if "consume_after_n" in state_dict:
            self.set_consume_after_n(state_dict["consume_after_n"])
        live = state_dict.get("live")
        if self._live is not None and live is not None:
            self._live.load_state_dict(live)
            self._live_needs_seed = bool(state_dict.get("live_needs_seed", False))
        self._load_extra_state(state_dict)  # last: it may overwrite what the lines above reset

    def _extra_state(self) -> dict[str, Any]:
        """A subclass's own state entries."""
        return {}

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        """Restore a subclass's own state entries (validate before changing anything)."""

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save :meth:`state_dict` in the directory ``path``."""
        write_state(self.state_dict(), path, "sampler")

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Load a state saved with :meth:`dumps` (read with ``weights_only=True``)."""
        self.load_state_dict(read_state(path, "sampler"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
