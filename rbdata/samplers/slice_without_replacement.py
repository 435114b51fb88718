"""SliceSamplerWithoutReplacement: one slice per trajectory and pass."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from typing_extensions import Unpack

from rbdata.samplers._replacement import check_replacement
from rbdata.samplers.slice import SliceArgs, SliceSampler


class SliceSamplerWithoutReplacement(SliceSampler, without_replacement_variant=True):
    """Slices drawn without replacement: each trajectory gives at most one slice per pass.

    A pass visits the trajectories that can give a slice (in random order with
    ``shuffle``, else oldest first); each visited trajectory contributes one
    slice at a uniformly drawn offset. The pass ends when every trajectory was
    visited (``ran_out`` is then True for the batch that ended it); the last
    batch of a pass holds fewer slices unless ``drop_last``, which leaves out
    the trajectories that cannot fill a whole batch. Trajectories written
    during a pass wait for the next one; trajectories overwritten meanwhile are
    skipped.

    Keyword Args:
        drop_last: leave out the trajectories that cannot fill a last full batch.
        shuffle: visit trajectories in random order (else oldest first).
        **slice_args: the :class:`SliceSampler` arguments (``fragmented=True``
            excepted, as in torchrl):
        num_slices: slices per batch.
        slice_len: transitions per slice.
        end_key: entry holding end-of-trajectory flags.
        end_keys: entries whose flags are OR-ed into the end signal.
        traj_key: entry holding per-transition trajectory ids.
        ends: fixed end flags of a full, static storage (see :class:`SliceSampler`).
        trajectories: fixed trajectory ids of a full, static storage.
        truncated_key: where the end-of-slice marker goes (None: no markers).
        init_key: the stored entry marked True at slice starts (None: leave it).
        strict_length: skip trajectories shorter than ``slice_len`` (else they
            give short slices).
        pad_output: pad short slices to ``slice_len`` (see :class:`SliceSampler`).
        compile: accepted for torchrl compatibility.
        use_gpu: accepted for torchrl compatibility.
        replacement: accepted for torchrl compatibility; either value builds this
            sampler (``SliceSampler(replacement=False, ...)`` builds one too).

    Raises:
        TypeError: if ``replacement`` is not a bool.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import (
        ...     LazyTensorStorage, SliceSamplerWithoutReplacement, TensorDictReplayBuffer
        ... )
        >>> sampler = SliceSamplerWithoutReplacement(num_slices=2)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler,
        ...                             batch_size=8)
        >>> _ = rb.extend(TensorDict({"episode": torch.arange(40) // 10}, [40]))
        >>> seen = [rb.sample()["episode"].view(2, 4)[:, 0] for _ in range(2)]
        >>> sorted(torch.cat(seen).tolist()), sampler.ran_out
        ([0, 1, 2, 3], True)
    """

    _fragments_ok = False

    def __init__(
        self,
        *,
        drop_last: bool = False,
        shuffle: bool = True,
        replacement: bool = True,
        **slice_args: Unpack[SliceArgs],
    ) -> None:
        check_replacement(replacement, type(self).__name__, without=True)
        super().__init__(**slice_args)
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self._order: torch.Tensor | None = None
        self._pos = 0
        self._ran_out = False

    @property
    def ran_out(self) -> bool:
        """Whether the last batch ended a pass."""
        return self._ran_out

    def _new_pass(self, num_slices: int) -> torch.Tensor:
        index = self._index
        starts = index.view("starts")[index.weight.many(index.view("lengths")) > 0]
        if self.drop_last and starts.numel() < num_slices:
            raise ValueError(
                f"drop_last=True but only {starts.numel()} trajectories can give a slice, "
                f"fewer than num_slices={num_slices}: no full batch can be made."
            )
        if self.shuffle:
            starts = starts[torch.randperm(starts.numel(), generator=self._rng)]
        self._pos = 0
        return starts.clone()

    @property
    def _sample_list(self) -> torch.Tensor | None:
        """The trajectories the current pass has still to visit (None between passes).

        Read-only, for torchrl compatibility (its tests read the name).
        """
        return None if self._order is None else self._order[self._pos :]

    def _take(self, num_slices: int) -> torch.Tensor:
        """Positions (in the live columns) of the next trajectories of the pass."""
        index = self._index
        parts: list[torch.Tensor] = []
        need = num_slices
        for _ in range(2):
            if self._order is None:
                self._order = self._new_pass(num_slices)
            order = self._order
            while need and self._pos < order.numel():
                ids = order[self._pos : self._pos + need]
                self._pos += ids.numel()
                k = index.locate(ids).clamp_min_(0)
                alive = (index.view("starts")[k] == ids) & (
                    index.weight.many(index.view("lengths")[k]) > 0
                )
                parts.append(k[alive])
                need -= int(alive.sum())
            left = order.numel() - self._pos
            self._ran_out = left == 0 or (self.drop_last and left < num_slices)
            if self._ran_out:
                self._order = None
            if need < num_slices:
                break
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)

    def _draw(self, num_slices: int) -> tuple[np.ndarray, np.ndarray]:
        """The next trajectories of the pass, and a uniform start in each."""
        k = self._take(num_slices)
        index, weight = self._index, self._index.weight
        room = weight.rooms(index.view("lengths").index_select(0, k))
        offset = torch.rand(k.numel(), dtype=torch.float64, generator=self._rng).mul_(room)
        begin = index.view("starts").index_select(0, k).add_(offset.long()).sub_(weight.left)
        return k.numpy(), begin.numpy()

    def _on_empty(self) -> None:
        super()._on_empty()
        self._order, self._pos, self._ran_out = None, 0, False

    def _extra_state(self) -> dict[str, Any]:
        """The pass (trajectories left, by start position) and the write position."""
        return {
            **super()._extra_state(),
            "order": None if self._order is None else self._order.clone(),
            "pos": self._pos,
            "ran_out": self._ran_out,
        }

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        super()._load_extra_state(state_dict)
        if "order" in state_dict:
            order = state_dict["order"]
            self._order = None if order is None else torch.as_tensor(order, dtype=torch.long)
        self._pos = int(state_dict.get("pos", self._pos))
        self._ran_out = bool(state_dict.get("ran_out", self._ran_out))
