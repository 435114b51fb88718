"""SamplerWithoutReplacement: passes over the data, each item once per pass."""

from __future__ import annotations

from abc import ABCMeta
from typing import Any

import torch

from rbdata.samplers._base import Sampler
from rbdata.samplers._live import _LiveSet
from rbdata.samplers._replacement import check_replacement
from rbdata.storages import Storage


# an ABCMeta only so that SliceSamplerWithoutReplacement registers as a virtual subclass
# (torchrl's is a SamplerWithoutReplacement); it declares no abstract method
class SamplerWithoutReplacement(Sampler, metaclass=ABCMeta):  # noqa: B024
    """Sample every filled slot once per pass, in chunks of ``batch_size``.

    A pass is a random permutation (``shuffle=True``) or the ordered range
    (``shuffle=False``) of the slots filled when the pass starts, handed out
    in order. The last batch of a pass is shorter than ``batch_size`` unless
    ``drop_last``, which skips it. ``ran_out`` is True right after the last
    batch of a pass, and the next pass is drawn then, as torchrl draws it (the
    same draws for a seed); it is drawn again if the storage grew before its
    first batch. Items written during a pass are picked up in the next one.

    With consume-after-n, a pass covers the live items only, and each batch
    counts towards their consumption.

    Args:
        drop_last: skip the last batch of a pass when it is short.
        shuffle: permute each pass (else slots come in increasing order).

    Keyword Args:
        replacement: accepted for torchrl compatibility; either value builds this
            sampler (``RandomSampler(replacement=False, ...)`` builds one too).

    Raises:
        TypeError: if ``replacement`` is not a bool.

    Examples:
        >>> import torch
        >>> from rbdata.samplers import SamplerWithoutReplacement
        >>> class Slots:
        ...     max_size = 10
        ...     def __len__(self):
        ...         return 5
        >>> sampler = SamplerWithoutReplacement(shuffle=False)
        >>> sampler.sample(Slots(), 3)[0]
        tensor([0, 1, 2])
        >>> sampler.sample(Slots(), 3)[0], sampler.ran_out
        (tensor([3, 4]), True)
    """

    reads_only_length = True

    def __init__(
        self, drop_last: bool = False, shuffle: bool = True, *, replacement: bool = True
    ) -> None:
        check_replacement(replacement, type(self).__name__, without=True)
        super().__init__()
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self._perm: torch.Tensor | None = None
        self._cursor = 0
        self._ran_out = False
        self._drawn_ahead: int | None = None  # len(storage) when the next pass was drawn ahead

    @property
    def ran_out(self) -> bool:
        """Whether the last ``sample`` returned the last batch of a pass."""
        return self._ran_out

    def _new_pass(self, n: int, candidates: torch.Tensor | None) -> None:
        if candidates is None:
            order = torch.randperm(n, generator=self._rng) if self.shuffle else torch.arange(n)
        elif self.shuffle:
            order = candidates[torch.randperm(candidates.numel(), generator=self._rng)]
        else:
            order = candidates.sort().values
        self._perm = order
        self._cursor = 0
        self._ran_out = False

    @property
    def _sample_list(self) -> torch.Tensor | None:
        """The slots the current pass has still to hand out (None between passes)."""
        return None if self._perm is None else self._perm[self._cursor :]

    def _remaining(self) -> int:
        return 0 if self._perm is None else self._perm.numel() - self._cursor

    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(storage)
        sampleable = n if live is None else len(live)
        if self.drop_last and sampleable < batch_size:
            # checked before a pass is drawn: the refused call leaves the pass as it was
            raise ValueError(
                f"The batch size {batch_size} is greater than the storage capacity of "
                f"{sampleable} sampleable item(s): with drop_last=True no batch can be made."
            )
        remaining = self._remaining()
        stale = self._drawn_ahead is not None and self._drawn_ahead != n
        self._drawn_ahead = None
        if remaining == 0 or (self.drop_last and remaining < batch_size) or stale:
            # (a pass drawn at the end of the last one, before the storage grew: drawn again)
            self._new_pass(n, None if live is None else live.live.clone())
        assert self._perm is not None
        parts = []
        taken = 0
        while taken < batch_size and self._cursor < self._perm.numel():
            chunk = self._perm[self._cursor : self._cursor + batch_size - taken]
            self._cursor += chunk.numel()
            keep = chunk < n
            if live is not None:
                keep &= live.is_live(chunk)
            chunk = chunk[keep]
            parts.append(chunk)
            taken += chunk.numel()
        index = parts[0] if len(parts) == 1 else torch.cat(parts)
        if live is not None:
            live.consume(index)
        remaining = self._remaining()
        self._ran_out = remaining == 0 or (self.drop_last and remaining < batch_size)
        if self._ran_out and live is None:
            # the next pass is drawn now, as torchrl does: the same draws for a seed
            self._new_pass(n, None)
            self._ran_out = True
            self._drawn_ahead = n
        elif self._ran_out:  # the live items are known when the next pass starts
            self._perm = None
            self._cursor = 0
        return index, {}

    def _on_empty(self) -> None:
        self._drawn_ahead = None
        self._perm = None
        self._cursor = 0
        self._ran_out = False

    def _extra_state(self) -> dict[str, Any]:
        """The pass (permutation and position), so a resumed sampler continues it.

        ``drawn_ahead`` is the storage length a pass drawn at the end of the last one was
        drawn for (None otherwise): a resumed sampler draws that pass again if the storage
        has grown since, as the original would.
        """
        return {
            "perm": None if self._perm is None else self._perm.clone(),
            "cursor": self._cursor,
            "ran_out": self._ran_out,
            "drawn_ahead": self._drawn_ahead,
        }

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        drawn_ahead = state_dict.get("drawn_ahead")
        self._drawn_ahead = None if drawn_ahead is None else int(drawn_ahead)
        if "perm" in state_dict:
            perm = state_dict["perm"]
            self._perm = None if perm is None else torch.as_tensor(perm, dtype=torch.long).clone()
        self._cursor = int(state_dict.get("cursor", self._cursor))
        self._ran_out = bool(state_dict.get("ran_out", self._ran_out))
