"""The Sampler base class: which slots a batch reads."""

from __future__ import annotations

import abc
from typing import Any

import torch

from rbdata.samplers._live import _LiveSet


class Sampler(abc.ABC):
    """Base class of every sampler.

    A sampler picks the slots a batch reads: ``sample(storage, batch_size)``
    returns ``(index, info)`` where ``index`` is a 1-D LongTensor of slots and
    ``info`` a dict of per-item tensors (e.g. ``"priority_weight"``). The buffer tells
    the sampler about writes (``extend`` / ``add``), hands it a random
    generator (``set_rng``; None means torch's global RNG) and, for
    consume-after-n, the number of returns after which an item leaves the
    sampleable set (``set_consume_after_n``).

    Consume-after-n is shared by every sampler through a :class:`_LiveSet`:
    with it, a batch holds distinct live items (fewer than ``batch_size`` when
    fewer are live), counts go up when the batch is sampled, and a write makes
    a slot live again with a count of 0. Subclasses get the synchronized live
    set with :meth:`_live_set` and count a batch with ``live.consume(index)`` (or draw
    and count at once with ``live.take(batch_size, rng)``).

    Subclasses implement :meth:`sample` and call ``super()`` in ``extend``,
    ``add``, ``_empty``, ``state_dict`` and ``load_state_dict``.

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

    def __init__(self) -> None:
        self._rng: torch.Generator | None = None
        self._live: _LiveSet | None = None
        self._live_needs_seed = False

    # ------------------------------------------------------------ sampling
    @abc.abstractmethod
    def sample(self, storage: Any, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Pick ``batch_size`` slots of ``storage``.

        Args:
            storage: the storage to sample from (only ``len(storage)`` and
                ``storage.max_size`` are used).
            batch_size: the number of items wanted (a positive int).

        Returns:
            ``(index, info)``: a 1-D LongTensor of slots and a dict of
            per-item tensors.
        """

    @property
    def ran_out(self) -> bool:
        """Whether a pass over the data just ended (samplers with passes only)."""
        return False

    def exhausted(self, storage: Any) -> bool:
        """Whether nothing is left to sample: an empty storage or every item consumed."""
        if len(storage) == 0:
            return True
        live = self._live_set(storage)
        return live is not None and len(live) == 0

    # ------------------------------------------------------------ writes
    def extend(self, index: torch.Tensor) -> None:
        """Tell the sampler that the slots ``index`` were (re)written."""
        if self._live is not None:
            self._live.add(torch.as_tensor(index, dtype=torch.long), self._rng)

    def add(self, index: int) -> None:
        """Tell the sampler that the slot ``index`` was (re)written."""
        self.extend(torch.tensor([int(index)]))

    def update_priority(
        self, index: int | torch.Tensor, priority: float | torch.Tensor, *, storage: Any = None
    ) -> None:
        """Update priorities (prioritized samplers only; this one raises RuntimeError)."""
        raise RuntimeError(
            f"{type(self).__name__} is not prioritized: update_priority needs a "
            "PrioritizedSampler (or another prioritized sampler)."
        )

    def _empty(self) -> None:
        """Forget every item (the storage was emptied)."""
        if self._live is not None:
            self._live.clear()
            self._live_needs_seed = False

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
        self._live = _LiveSet(n)
        self._live_needs_seed = True

    @property
    def consume_after_n(self) -> int | None:
        """The consume-after-n setting (None when items are never consumed)."""
        return None if self._live is None else self._live.n

    # ------------------------------------------------------------ helpers
    def _live_set(self, storage: Any) -> _LiveSet | None:
        """Return the live set (None without consume-after-n), seeded from ``storage`` once."""
        if self._live is not None and self._live_needs_seed:
            self._live.add(torch.arange(len(storage)), self._rng)
            self._live_needs_seed = False
        return self._live

    @staticmethod
    def _check_batch_size(batch_size: int) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}.")

    @staticmethod
    def _check_storage(storage: Any) -> int:
        n = len(storage)
        if n == 0:
            raise RuntimeError(
                "cannot sample from an empty buffer: the storage holds 0 items "
                f"(max_size={getattr(storage, 'max_size', '?')})."
            )
        return n

    @staticmethod
    def _check_live(live: _LiveSet) -> None:
        if len(live) == 0:
            raise RuntimeError(
                "cannot sample: every item was consumed "
                f"(consume_after_n_samples={live.n}); write new items first."
            )

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Return the sampler's state (plain values and tensors; not the generator)."""
        return {
            "consume_after_n": self.consume_after_n,
            "live": None if self._live is None else self._live.state_dict(),
            "live_needs_seed": self._live_needs_seed,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; unknown keys are ignored, missing ones kept."""
        if "consume_after_n" in state_dict:
            self.set_consume_after_n(state_dict["consume_after_n"])
        live = state_dict.get("live")
        if self._live is not None and live is not None:
            self._live.load_state_dict(live)
            self._live_needs_seed = bool(state_dict.get("live_needs_seed", False))
