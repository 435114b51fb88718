"""LazyTensorStorage: a tensor storage whose rows are laid out by the first write."""

from __future__ import annotations

import torch

from .tensor import TensorStorage

__all__ = ["LazyTensorStorage"]


class LazyTensorStorage(TensorStorage):
    """A tensor storage allocated at its first write, from the first data's structure.

    Holds a Tensor, a TensorDict or a PyTree of tensors, in packed rows (see
    :class:`TensorStorage`). With ``ndim > 1`` the first write fixes the
    leading shape ``lead`` of each item (e.g. ``data[n, 3, ...]`` with
    ``ndim=2`` gives ``lead=[3]``): cells are stored flat (``len`` counts
    cells, ``get(LongTensor)`` takes flat cell indices, the capacity is
    ``ceil(max_size / prod(lead))`` items, as in torchrl) and ``storage[:]`` returns the items
    shaped ``[*lead, n_items]``.

    On CPU the rows are reserved, not filled: memory is committed page by page
    as rows are written (unwritten rows read as zeros), so a buffer sized for a
    whole run, even past the machine's memory, costs what it holds;
    ``memory_stats()`` (and a buffer's ``stats()``) report ``capacity_bytes``
    and ``resident_bytes``.

    Args:
        max_size: number of slots (cells).
        device: where the rows live. Defaults to ``"cpu"``.
        ndim: number of storage dims. Defaults to 1.
        compilable: accepted as torchrl's argument (see :class:`~rbdata.Storage`).
        consolidated: accepted as torchrl's argument: an item's leaves are
            always stored consolidated, in one packed row.
        shared_init: allocate the rows in shared memory at the first write, as
            :meth:`share_memory_` does, so that the storage can be sent to
            ``torch.multiprocessing`` children once initialized.
        cleanup_memmap: accepted as torchrl's argument (this storage keeps no
            memory-mapped files).

    Examples:
        >>> import torch
        >>> from rbdata.storages import LazyTensorStorage
        >>> storage = LazyTensorStorage(100)
        >>> storage.set(slice(0, 3), {"a": torch.ones(3, 2), "b": (torch.arange(3),)})
        >>> sample = storage.get(torch.tensor([0, 2]))
        >>> sample["a"].shape, sample["b"][0]
        (torch.Size([2, 2]), tensor([0, 2]))
        >>> from tensordict import TensorDict
        >>> steps = LazyTensorStorage(10)
        >>> steps.set(slice(0, 2), TensorDict({"obs": torch.ones(2)}, [2]))
        >>> steps.set(slice(2, 3), TensorDict({"obs": torch.ones(1), "value": torch.ones(1)}, [1]))
        >>> steps[:]["value"]  # a new key: the rows written before read zeros in it
        tensor([0., 0., 1.])
        >>> grid = LazyTensorStorage(12, ndim=2)
        >>> grid.set(slice(0, 4), torch.zeros(4, 3))
        >>> len(grid), grid[:].shape
        (12, torch.Size([3, 4]))
    """

    def __init__(
        self,
        max_size: int,
        *,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        compilable: bool = False,
        consolidated: bool = False,
        shared_init: bool = False,
        cleanup_memmap: bool = True,
    ) -> None:
        self._setup(max_size, device, ndim, compilable)
        self.consolidated = bool(consolidated)
        self.shared_init = bool(shared_init)
        self.cleanup_memmap = bool(cleanup_memmap)
        if self.shared_init:
            self.share_memory_()
