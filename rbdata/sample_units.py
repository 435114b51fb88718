"""Sample units: what a sampled anchor slot expands into (one transition, or a window)."""

from __future__ import annotations

from typing import Any

import torch

from rbdata._trajectories import TrajectoryIndex
from rbdata._validation import NestedKey, normalize_key


class SampleUnit:
    """Base class: turns the anchors drawn by the sampler into the records read.

    ``expand(anchors, info, storage)`` returns ``(index, info)``: the slots to
    read (any shape; the buffer reshapes the batch to it) and the info dict,
    with per-anchor entries broadcast to the index's shape. Units that track
    trajectories are told about writes like samplers are (``extend`` / ``add``
    after each write, ``_empty`` when the buffer is emptied).

    Examples:
        >>> import torch
        >>> from rbdata import Transition
        >>> index, info = Transition().expand(torch.tensor([3, 1]), {}, None)
        >>> index
        tensor([3, 1])
    """

    def expand(
        self, anchors: torch.Tensor, info: dict[str, Any], storage: Any
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return the slots to read for ``anchors`` and the matching info."""
        raise NotImplementedError

    def extend(self, index: torch.Tensor) -> None:
        """Note that the slots ``index`` were written (no-op unless the unit tracks writes)."""

    def add(self, index: int) -> None:
        """Note that the slot ``index`` was written."""
        self.extend(torch.tensor([int(index)]))

    def _empty(self) -> None:
        """Forget everything about the stored data (the buffer was emptied)."""

    def state_dict(self) -> dict[str, Any]:
        """Return the unit's state (plain values and tensors)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""


class Transition(SampleUnit):
    """One record per anchor: the anchors are the index (the default unit).

    Examples:
        >>> import torch
        >>> from rbdata import Transition
        >>> Transition().expand(torch.tensor([0, 5]), {"priority_weight": torch.ones(2)}, None)[0]
        tensor([0, 5])
    """

    def expand(
        self, anchors: torch.Tensor, info: dict[str, Any], storage: Any
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return ``anchors`` and ``info`` unchanged."""
        return anchors, info


class Sequence(SampleUnit):
    """A window of ``burn_in + length + bootstrap`` records around each anchor.

    Anchor ``a`` becomes the records at ``a + (j - burn_in) * dilation`` for
    ``j = 0 .. burn_in + length + bootstrap - 1``: ``burn_in`` records before
    it (e.g. to warm up a recurrent state), the ``length`` records trained on
    starting at the anchor, then ``bootstrap`` records after them. The index
    has shape ``[B, T]``. Positions that fall outside the anchor's trajectory
    (before its start, after its end, or across the write cursor of a full
    buffer) are clamped to the trajectory's first / last record and flagged
    in the info:

    * ``"mask"``: bool ``[B, T]``, True where the record belongs to the
      anchor's trajectory;
    * ``"burn_in_mask"``: True at the burn-in positions (``j < burn_in``);
    * ``"bootstrap_mask"``: True at the bootstrap positions
      (``j >= burn_in + length``).

    Per-anchor info entries (e.g. ``"priority_weight"``) are repeated along ``T``.
    Trajectories come from ``traj_key`` ids or ``end_key`` flags, detected as
    in :class:`~rbdata.SliceSampler` when not given; they are kept
    incrementally from the writes the buffer reports (``extend``).

    Args:
        length: records per window starting at the anchor (>= 1).
        burn_in: records before the anchor (>= 0).
        bootstrap: records after the ``length`` ones (>= 0).
        dilation: stride between consecutive records of a window (>= 1).
        traj_key: entry holding per-transition trajectory ids.
        end_key: entry holding end-of-trajectory flags.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, ReplayBuffer, Sequence
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100),
        ...                   sample_unit=Sequence(3, burn_in=1), batch_size=4)
        >>> _ = rb.extend(TensorDict({"episode": torch.arange(20) // 10}, [20]))
        >>> batch, info = rb.sample(return_info=True)
        >>> batch.shape, info["mask"].shape
        (torch.Size([4, 4]), torch.Size([4, 4]))
    """

    def __init__(
        self,
        length: int,
        *,
        burn_in: int = 0,
        bootstrap: int = 0,
        dilation: int = 1,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
    ) -> None:
        for name, value, low in (
            ("length", length, 1),
            ("burn_in", burn_in, 0),
            ("bootstrap", bootstrap, 0),
            ("dilation", dilation, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}.")
        if traj_key is not None and end_key is not None:
            raise ValueError(
                f"pass at most one of traj_key and end_key, got traj_key={traj_key!r} "
                f"and end_key={end_key!r}."
            )
        self.length, self.burn_in, self.bootstrap, self.dilation = (
            length,
            burn_in,
            bootstrap,
            dilation,
        )
        self.traj_key = None if traj_key is None else normalize_key(traj_key, "traj_key")
        self.end_key = None if end_key is None else normalize_key(end_key, "end_key")
        self._index = TrajectoryIndex(traj_key=self.traj_key, end_key=self.end_key)
        steps = torch.arange(self.window)
        self._offsets = (steps - burn_in) * dilation
        self._burn_in = steps < burn_in
        self._bootstrap = steps >= burn_in + length

    @property
    def window(self) -> int:
        """Records per anchor: ``burn_in + length + bootstrap``."""
        return self.burn_in + self.length + self.bootstrap

    def extend(self, index: torch.Tensor) -> None:
        """Note the written slots (trajectories are updated at the next ``expand``)."""
        self._index.extend(index)

    def _empty(self) -> None:
        self._index.clear()

    def expand(
        self, anchors: torch.Tensor, info: dict[str, Any], storage: Any
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return the ``[B, T]`` windows of ``anchors`` and their masks (see the class)."""
        anchors = torch.as_tensor(anchors, dtype=torch.long)
        if anchors.ndim != 1:
            raise ValueError(
                f"Sequence expands a 1-D batch of anchors, got shape {tuple(anchors.shape)}: "
                "use it with a per-item sampler, not a slice sampler."
            )
        index = self._index
        if not index.fed and len(storage) >= storage.max_size:
            raise RuntimeError(
                "Sequence was not told about the writes of a full storage, so it cannot tell "
                "where the write cursor is: call sample_unit.extend(index) after each write."
            )
        index.sync(storage)
        b, t = anchors.numel(), self.window
        v = index.slots_to_v(anchors)
        k = index.locate(v)
        first = index.view("starts").index_select(0, k).unsqueeze(1)
        last = first + index.view("lengths").index_select(0, k).unsqueeze(1) - 1
        pos = v.unsqueeze(1) + self._offsets
        mask = (pos >= first) & (pos <= last)
        slots = torch.maximum(torch.minimum(pos, last), first).remainder_(index.modulus)
        out: dict[str, Any] = {}
        for key, value in info.items():
            if isinstance(value, torch.Tensor) and value.ndim and value.shape[0] == b:
                value = value.unsqueeze(1).expand(b, t, *value.shape[1:]).clone()
            out[key] = value
        out["mask"] = mask
        out["burn_in_mask"] = self._burn_in.expand(b, t).clone()
        out["bootstrap_mask"] = self._bootstrap.expand(b, t).clone()
        return slots, out

    def state_dict(self) -> dict[str, Any]:
        """The write position (trajectories are rebuilt from the storage on load)."""
        return {"trajectories": self._index.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        if "trajectories" in state_dict:
            self._index.load_state_dict(state_dict["trajectories"])
