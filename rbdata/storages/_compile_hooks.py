"""What a storage does under ``torch.compile`` (``compilable=True``): traced writes, eager draws.

:class:`~rbdata.storages.Storage` inherits these hooks; tensor storages fill
``_set_traced`` (``_tensor_traced``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rbdata._component.compiling import not_traced
from rbdata.sharing.counters import Counters


class _CompileHooks:
    """The compile half of a storage's ``set`` and the uniform draw samplers use under compile.

    Examples:
        >>> from rbdata import LazyTensorStorage
        >>> issubclass(LazyTensorStorage, _CompileHooks)
        True
    """

    _counters: Counters

    if TYPE_CHECKING:

        @property
        def max_size_along_dim0(self) -> int: ...

        def set(self, index: Any, data: Any, *, set_cursor: bool = True) -> None: ...

        def __len__(self) -> int: ...

    def _set_compiling(self, index: Any, data: Any, set_cursor: bool) -> None:
        """:meth:`set` under ``torch.compile`` (``compilable=True``): a write dynamo traces.

        The storage's :meth:`_set_traced` writes where it can (no data-dependent
        check: a tensor index is not bounds-checked) and ``len`` grows by the
        items written, capped at the capacity, as torchrl counts it; any other
        write runs eagerly (a graph break).
        """
        n = self._set_traced(index, data)
        if n is None:
            _set_eagerly(self, index, data, set_cursor)
            return
        cells: list[Any] = self._counters.cells  # the last slot may be a 0-d tensor here
        cells[1] += 1
        if not set_cursor or not n:
            return
        cells[0] = min(cells[0] + n, self.max_size_along_dim0)
        if isinstance(index, torch.Tensor):
            cells[2] = index[-1]
        elif type(index) is slice:
            cells[2] = index.stop - 1
        else:
            cells[2] = index

    def _set_traced(self, index: Any, data: Any) -> int | None:
        """Write under ``torch.compile`` if this storage can trace it; return the items written.

        None (the base: always) leaves the write to the eager path.
        """
        return None

    def random_slots(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``batch_size`` uniform slots (flat cells on ndim>1 storages) among the filled ones.

        Samplers draw here under ``torch.compile``; the draw itself
        (:meth:`_rand_given_ndim_impl`) is never traced: traced, it depends on
        ``len(self)``, which dynamo guards on, and a compiled sample would
        recompile as the storage fills (torchrl's reason for the same hooks).
        """
        return self._rand_given_ndim_impl(batch_size, generator)

    def _rand_given_ndim(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """:meth:`random_slots` under torchrl's name (torchrl's samplers call it)."""
        return self.random_slots(batch_size, generator)

    @not_traced
    def _rand_given_ndim_impl(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The draw of :meth:`random_slots`, outside the graph (a graph break)."""
        return torch.randint(len(self), (batch_size,), generator=generator)


@not_traced
def _set_eagerly(storage: _CompileHooks, index: Any, data: Any, set_cursor: bool) -> None:
    """A write ``torch.compile`` does not trace (a graph break), as outside it."""
    storage.set(index, data, set_cursor=set_cursor)
