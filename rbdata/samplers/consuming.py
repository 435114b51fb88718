"""ConsumingSampler: uniform sampling where an item leaves after n returns (torchrl's name)."""

from __future__ import annotations

from typing import ClassVar

from rbdata._component.checks import check_int
from rbdata.samplers.random import RandomSampler

__all__ = ["ConsumingSampler"]


class ConsumingSampler(RandomSampler):
    """A random sampler whose items leave the sampleable set after ``max_sample_count`` returns.

    It is :class:`RandomSampler` with consume-after-n set by the sampler rather
    than by the buffer: a buffer built with it behaves as one built with
    ``consume_after_n_samples=max_sample_count`` (a batch holds distinct live
    items, ``len(rb)`` counts the live ones, new items are written into the
    consumed slots first). A buffer given both refuses different counts.

    Args:
        max_sample_count: the number of returns after which an item is consumed
            (a positive int; default 1).

    Keyword Args:
        replacement: accepted for torchrl compatibility: True changes nothing; this
            sampler has no without-replacement variant.

    Raises:
        TypeError: if ``max_sample_count`` is not an int, or ``replacement`` is not
            True.
        ValueError: if it is below 1.

    Examples:
        >>> import torch
        >>> from rbdata import ConsumingSampler, ListStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=ListStorage(10), sampler=ConsumingSampler(), batch_size=3)
        >>> rb.extend([torch.tensor(i) for i in range(4)])
        tensor([0, 1, 2, 3])
        >>> sample = rb.sample()
        >>> len(sample)
        3
        >>> len(rb)
        1
    """

    #: a buffer takes its consume-after-n setting from this sampler
    consumes: ClassVar[bool] = True

    def __init__(self, max_sample_count: int = 1, *, replacement: bool = True) -> None:
        super().__init__(replacement=replacement)
        count = check_int(max_sample_count, "max_sample_count", minimum=1)
        super().set_consume_after_n(count)

    @property
    def max_sample_count(self) -> int:
        """The number of returns after which an item is consumed."""
        count = self.consume_after_n
        assert count is not None  # set at construction, never cleared
        return count

    def set_consume_after_n(self, n: int | None) -> None:
        """Keep ``max_sample_count`` (None, or the same count, changes nothing).

        Raises:
            ValueError: if ``n`` is another count (a buffer's ``consume_after_n_samples``
                that conflicts with this sampler's ``max_sample_count``).
        """
        if n is None or n == self.max_sample_count:
            return
        raise ValueError(
            f"consume_after_n_samples={n!r} conflicts with the ConsumingSampler's "
            f"max_sample_count={self.max_sample_count}; pass one of them, or the same count."
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_sample_count={self.max_sample_count})"
