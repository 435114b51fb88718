"""RandomSampler: uniform sampling with replacement."""

from __future__ import annotations

import inspect
from typing import Any, Literal, overload

import torch
from typing_extensions import Self

from rbdata.samplers._base import Sampler
from rbdata.samplers._live import _LiveSet
from rbdata.samplers.without_replacement import SamplerWithoutReplacement
from rbdata.storages import Storage

_is_compiling = torch.compiler.is_compiling


class RandomSampler(Sampler):
    """Uniform sampling with replacement over the filled slots.

    A batch is ``torch.randint(len(storage), (batch_size,), generator=rng)``.
    With consume-after-n, a batch holds distinct live items drawn uniformly
    (fewer than ``batch_size`` when fewer are live). The sampler never runs
    out. In a buffer that other processes write (``share()``), a batch
    holding rows still being copied is drawn again (up to a few times): the
    rows are then uniform over those whose write is complete.

    Keyword Args:
        replacement: True (the default) builds this sampler. False builds a
            :class:`SamplerWithoutReplacement` instead, with the other arguments
            (``drop_last``, ``shuffle``), as torchrl does: ``RandomSampler(replacement=False)``
            is ``SamplerWithoutReplacement()``. Subclasses have no such variant
            and refuse False.

    Raises:
        TypeError: if ``replacement`` is not a bool, or is False for a subclass.

    Examples:
        >>> import torch
        >>> from rbdata.samplers import RandomSampler
        >>> class Slots:
        ...     max_size = 100
        ...     def __len__(self):
        ...         return 10
        >>> _ = torch.manual_seed(0)
        >>> index, info = RandomSampler().sample(Slots(), 5)
        >>> index
        tensor([4, 9, 3, 0, 3])
        >>> type(RandomSampler(replacement=False, drop_last=True)).__name__
        'SamplerWithoutReplacement'
    """

    reads_only_length = True
    draws_independent = True

    # What a type checker reads (RandomSampler has no ``__init__`` of its own): the class
    # called, or with ``replacement=False`` the variant. mypy wants ``__new__`` to return the
    # class (``misc``); the variant is the point of the keyword.
    @overload
    def __new__(cls, *, replacement: Literal[True] = ...) -> Self: ...
    @overload
    def __new__(  # type: ignore[misc]
        cls, *, replacement: Literal[False], drop_last: bool = ..., shuffle: bool = ...
    ) -> SamplerWithoutReplacement: ...
    @overload
    def __new__(  # type: ignore[misc]
        cls, *, replacement: bool, drop_last: bool = ..., shuffle: bool = ...
    ) -> RandomSampler | SamplerWithoutReplacement: ...
    def __new__(cls, *args: Any, replacement: bool = True, **kwargs: Any) -> Any:
        """This sampler, or for ``RandomSampler(replacement=False, ...)`` its variant.

        The variant is built here, whole: it is no ``RandomSampler``, so Python
        calls no ``__init__`` on what this returns. Otherwise ``Sampler.__init__``
        (or a subclass's) then checks ``replacement``. Pickling and copying call
        ``cls.__new__(cls)``: they build the class of the object copied.
        """
        if cls is RandomSampler and replacement is False:
            return SamplerWithoutReplacement(*args, **kwargs)
        return super().__new__(cls)

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Pick ``batch_size`` slots uniformly (see :meth:`Sampler.sample`)."""
        if (
            type(self) is RandomSampler  # a subclass may draw otherwise (its own ``_sample``)
            and self._live is None
            and type(batch_size) is int
            and batch_size > 0
            and not _is_compiling()
        ):  # the checked path's outcome, without its calls: it runs on every batch
            filled, rng = len(storage), self._rng
            if filled:  # no ``generator=None`` for the global RNG: parsing it costs 0.2 us
                if rng is None:
                    return torch.randint(filled, (batch_size,)), {}
                return torch.randint(filled, (batch_size,), generator=rng), {}
        return super().sample(storage, batch_size)

    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        if live is None:
            if torch.compiler.is_compiling():  # not traced: len would be guarded (torchrl's way)
                return storage.random_slots(batch_size, self._rng), {}
            return torch.randint(len(storage), (batch_size,), generator=self._rng), {}
        return live.take(batch_size, self._rng), {}


# ``inspect.signature(RandomSampler)`` reads ``__new__``, which takes the variant's arguments
# too: it shows the constructor's
RandomSampler.__new__.__signature__ = inspect.signature(Sampler.__init__)  # type: ignore[attr-defined]
