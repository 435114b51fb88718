"""Sample units: what a sampled anchor expands into (one transition, or a window of records)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, overload

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key
from rbdata.storages import Storage, TensorStorage, shape_of
from rbdata.trajectories.edges import scan_edges
from rbdata.trajectories.index import TrajectoryIndex
from rbdata.trajectories.reading import storage_keys
from rbdata.trajectories.ring import RingLayout

__all__ = ["SampleUnit", "Sequence", "Transition"]

_BOUNDARIES = ("pad", "stop", "include_reset")


class SampleUnit:
    """Base class: turns the anchors drawn by the sampler into the records read.

    ``expand(anchors, info, storage)`` returns ``(index, info)``: the slots to
    read and the info dict, with per-anchor entries (a tensor whose first
    dimension is the number of anchors) made to match the index. Units that
    track trajectories are told about writes like samplers are (``extend`` /
    ``add`` after each write, ``_empty`` when the buffer is emptied).

    Examples:
        >>> import torch
        >>> from rbdata import Transition
        >>> index, info = Transition().expand(torch.tensor([3, 1]), {}, None)
        >>> index
        tensor([3, 1])
    """

    def expand(
        self, anchors: torch.Tensor, info: dict[str, Any], storage: Storage
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return the slots to read for ``anchors`` and the matching info."""
        raise NotImplementedError

    def anchors_of(self, batch: Any, storage: Storage) -> torch.Tensor | None:
        """The slot of the anchor of each record of ``batch``; None when records are anchors.

        Priority updates of a sampled batch go to these slots (see
        :meth:`~rbdata.ReplayBuffer.update_batch_priority`).
        """
        return None

    @property
    def tracks_trajectories(self) -> bool:
        """Whether the unit keeps state of the data written: it overrides :meth:`extend`.

        A unit that does not is told of writes for nothing; a shared buffer
        then copies a batch's rows outside its lock (:mod:`rbdata.sharing`).
        """
        return type(self).extend is not SampleUnit.extend

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
        self, anchors: torch.Tensor, info: dict[str, Any], storage: Storage
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return ``anchors`` and ``info`` unchanged."""
        return anchors, info


class Sequence(SampleUnit):
    """A window of ``burn_in + length + bootstrap`` records around each anchor.

    Anchor ``a`` becomes the records at ``a + (j - burn_in) * dilation`` for
    ``j = 0 .. burn_in + length + bootstrap - 1`` in time order: ``burn_in``
    records before it (e.g. to warm up a recurrent state), the ``length``
    records learned on, starting at the anchor, then ``bootstrap`` records
    of future context. ``B`` anchors give a flat batch of ``B * window``
    records, anchor after anchor.

    A window stays inside the anchor's episode, which ends at a ``done_key``
    flag, at the newest record (the write seam of a full ring) and begins
    after the previous flag or at the oldest record. Where it would leave it,
    ``episode_boundary`` decides:

    * ``"pad"``: the records past the edge repeat the edge record and are
      marked invalid;
    * ``"stop"``: the window moves back so that it ends at the episode's end
      (all valid), as far as the episode's start allows, then pads;
    * ``"include_reset"``: the window crosses episode ends; only the write
      seam and unwritten slots are never crossed (clamped, invalid).

    The info (and a TensorDict sample) gets, per record: ``"anchor_index"``
    (the drawn anchor; with ``"stop"`` it may lie outside the moved window),
    ``"sequence_id"`` (which anchor of the batch), ``"step_in_sequence"``
    (``j``), ``"learning_mask"`` (True on the ``length`` records) and
    ``"validity_mask"`` (True where the record is the one asked for).
    Per-anchor entries (``"priority_weight"``...) are repeated along the
    window; priority updates of a sampled batch go to the anchors (the max
    over each window's valid records).

    For a storage with ``ndim > 1``, time is the first dimension and the
    others are lanes: a window runs along time in its anchor's lane. Anchors
    given as a tuple of coordinate tensors give coordinates back (and
    ``"anchor_index"`` as ``[records, ndim]``); flat cell indices (what the
    buffer's samplers draw) give flat cell indices.

    Episodes are tracked from the writes the buffer reports (``extend``):
    sampling costs O(batch), never a pass over the storage. A unit used on
    a storage it was not told about reads the done flags around its anchors
    and the write seam from the storage (``storage.newest_slot``, which a
    round-robin writer reports); without a ring writer, a full storage is
    taken as written from slot 0.

    Args:
        length: records learned on per window (>= 1).
        episode_boundary: ``"pad"``, ``"stop"`` or ``"include_reset"``.
        done_key: the end-of-episode flag entry; None treats the written data
            as one episode, bounded only by the write seam.
        burn_in: records before the anchor (>= 0), never learned on.
        bootstrap: records after the learned ones (>= 0), never learned on.
        dilation: storage records between consecutive records of a window (>= 1).

    Raises:
        TypeError: for arguments of the wrong type.
        ValueError: for a length < 1, a negative burn_in or bootstrap, a
            dilation < 1 or an unknown episode_boundary.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, ReplayBuffer, Sequence
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2,
        ...                   sample_unit=Sequence(length=3))
        >>> done = torch.zeros(10, 1, dtype=torch.bool)
        >>> done[4] = done[9] = True
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(10), ("next", "done"): done}, [10]))
        >>> batch, info = rb.sample(return_info=True)
        >>> batch.shape, sorted(info)
        (torch.Size([6]), ['anchor_index', 'index', 'learning_mask', 'sequence_id', \
'step_in_sequence', 'validity_mask'])
        >>> unit = Sequence(length=2, burn_in=1, bootstrap=1)
        >>> index, info = unit.expand(torch.tensor([5]), {}, rb.storage)
        >>> index.tolist(), info["validity_mask"].tolist()  # the episode starts at 5
        ([5, 5, 6, 7], [False, True, True, True])
    """

    def __init__(
        self,
        length: int,
        episode_boundary: str = "pad",
        done_key: NestedKey | list[str] | None = ("next", "done"),
        burn_in: int = 0,
        bootstrap: int = 0,
        dilation: int = 1,
    ) -> None:
        for name, value, low in (
            ("length", length, 1),
            ("burn_in", burn_in, 0),
            ("bootstrap", bootstrap, 0),
            ("dilation", dilation, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}.")
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}.")
        if episode_boundary not in _BOUNDARIES:
            raise ValueError(
                f"episode_boundary must be one of {_BOUNDARIES}, got {episode_boundary!r}."
            )
        if isinstance(done_key, list):
            done_key = tuple(done_key)
        self.length, self.episode_boundary = length, episode_boundary
        self.burn_in, self.bootstrap, self.dilation = burn_in, bootstrap, dilation
        self.done_key = None if done_key is None else normalize_key(done_key, "done_key")
        self._index = TrajectoryIndex(end_key=self.done_key, traj_candidates=())
        #: whether episodes come from the index fed by ``extend`` (1-D storages, done flags)
        self._tracks = self.done_key is not None and episode_boundary != "include_reset"
        self._newest: int | None = None
        steps = torch.arange(self.window)
        self._steps = steps
        self._offsets = (steps - burn_in) * dilation
        self._learning = (steps >= burn_in) & (steps < burn_in + length)
        #: the per-record entries that depend only on the batch size, for the last one seen
        self._step_entries: tuple[tuple[int, torch.device], dict[str, torch.Tensor]] | None = None
        #: how far back / ahead of an anchor its episode's edges matter
        ahead = dilation * (length + bootstrap - 1)
        back = dilation * burn_in + (ahead if episode_boundary == "stop" else 0)
        self._reach = (back, ahead)

    @property
    def window(self) -> int:
        """Records per anchor: ``burn_in + length + bootstrap``."""
        return self.burn_in + self.length + self.bootstrap

    # ------------------------------------------------------------ writes
    def extend(self, index: torch.Tensor) -> None:
        """Note the written slots, in write order (episodes are updated at the next ``expand``)."""
        index = torch.as_tensor(index).reshape(-1)
        if index.numel():
            self._newest = int(index[-1])
            if self._tracks:
                self._index.extend(index)

    def _empty(self) -> None:
        self._newest = None
        self._index.clear()

    def state_dict(self) -> dict[str, Any]:
        """The write position (episodes are rebuilt from the storage on load)."""
        newest = -1 if self._newest is None else self._newest
        return {"newest": newest, "trajectories": self._index.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        if "trajectories" in state_dict:
            self._index.load_state_dict(state_dict["trajectories"])
        newest = int(state_dict.get("newest", state_dict.get("trajectories", {}).get("newest", -1)))
        self._newest = None if newest < 0 else newest

    # ------------------------------------------------------------ sampling
    @overload
    def expand(
        self, anchors: torch.Tensor, info: dict[str, Any], storage: Storage
    ) -> tuple[torch.Tensor, dict[str, Any]]: ...

    @overload
    def expand(
        self, anchors: tuple[torch.Tensor, ...], info: dict[str, Any], storage: Storage
    ) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]: ...

    def expand(
        self,
        anchors: torch.Tensor | tuple[torch.Tensor, ...],
        info: dict[str, Any],
        storage: Storage,
    ) -> tuple[torch.Tensor | tuple[torch.Tensor, ...], dict[str, Any]]:
        """Return the flat windows of ``anchors`` and their info (see the class).

        Args:
            anchors: a 1-D tensor of slots (flat cells for ``ndim > 1``), or a
                tuple of ``storage.ndim`` coordinate tensors.
            info: the sampler's info; per-anchor tensors are repeated along the window.
            storage: the tensor storage of TensorDict items the anchors index.

        Raises:
            TypeError: if ``storage`` is not a TensorStorage of TensorDicts.
            ValueError: for anchors of the wrong shape.
            KeyError: if ``done_key`` is not stored.
        """
        self._check_storage(storage)
        newest = self._newest if self._newest is not None else storage.newest_slot
        layout = RingLayout.of(storage, newest)
        time, lane, lanes = _split_anchors(anchors, storage, layout)
        pos, lo, hi = self._span(storage, layout, time, lane)
        if self.episode_boundary == "stop":  # end at the episode's end, as its start allows
            pos = torch.minimum(torch.clamp(hi - self._reach[1], min=lo), pos)
        b, t = time.numel(), self.window
        target = pos.unsqueeze(1) + self._offsets.to(pos.device)
        clamped = torch.clamp(target, lo.unsqueeze(1), hi.unsqueeze(1))
        out = self._window_info(info, b, time.device)
        out["validity_mask"] = clamped.eq(target).view(-1).to(time.device)
        slots = clamped.remainder_(layout.capacity).view(-1).to(time.device)
        if isinstance(anchors, tuple):
            coords = torch.stack([time, *lanes], -1)
            out["anchor_index"] = _repeat(coords, t)
            return (slots, *(_repeat(c, t) for c in lanes)), out
        out["anchor_index"] = _repeat(anchors, t)
        if layout.cells > 1:
            slots = slots.mul_(layout.cells).add_(_repeat(lane, t))
        return slots, out

    def anchors_of(self, batch: Any, storage: Storage) -> torch.Tensor | None:
        """The flat anchor slot of each record of a batch this unit expanded.

        Reads ``batch["anchor_index"]`` (coordinates ``[records, ndim]`` are
        turned into flat cells); None when the batch has no such entry.
        """
        if not isinstance(batch, Mapping | TensorDictBase):
            return None
        anchor = batch.get("anchor_index", None)
        if anchor is None:
            return None
        anchor = torch.as_tensor(anchor, dtype=torch.long)
        ndim = storage.ndim
        if ndim > 1 and anchor.ndim >= 2 and anchor.shape[-1] == ndim:
            shape = shape_of(storage)
            strides = [math.prod(shape[d + 1 :]) for d in range(ndim)]
            anchor = (anchor * torch.tensor(strides, device=anchor.device)).sum(-1)
        return anchor.reshape(-1)

    def _check_storage(self, storage: Storage) -> None:
        if not isinstance(storage, TensorStorage):
            raise TypeError(
                f"Sequence needs a TensorStorage (LazyTensorStorage, LazyMemmapStorage) of "
                f"TensorDict items to read episode ends from; got {type(storage).__name__}."
            )
        if not len(storage):
            raise RuntimeError("Sequence cannot expand anchors of an empty storage.")
        keys = storage_keys(storage)
        if self.done_key is not None and self.done_key not in keys:
            raise KeyError(
                f"done_key={self.done_key!r} is not stored; stored keys are "
                f"{sorted(map(str, keys))}. Pass the entry holding episode ends, or "
                "done_key=None to treat the written data as one episode."
            )

    def _span(
        self, storage: Storage, layout: RingLayout, time: torch.Tensor, lane: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(pos, lo, hi)``: each anchor and its episode's first and last record, on one line.

        Positions count records along time (``% capacity`` gives the slot).
        """
        if self.done_key is None or self.episode_boundary == "include_reset":
            return (time, *layout.seam_span(time))
        if storage.ndim > 1 and self._tracks:  # lanes: the 1-D index does not apply
            self._tracks = False
            self._index.clear()
        if self._tracks and self._index.fed:
            return self._tracked_span(storage, time)
        seam = layout.seam_span(time)
        lo, hi = scan_edges(storage, self.done_key, layout, (time, lane), seam, self._reach)
        return time, lo, hi

    def _tracked_span(
        self, storage: Storage, time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The span from the episodes kept up to date from the reported writes."""
        index = self._index
        index.sync(storage)
        v = index.slots_to_v(time.cpu())
        k = index.locate(v)
        first = index.view("starts").index_select(0, k)
        return v, first, index.view("lengths").index_select(0, k).add_(first).sub_(1)

    def _window_info(self, info: dict[str, Any], b: int, device: torch.device) -> dict[str, Any]:
        """``info`` with per-anchor tensors repeated along the window, and the step entries."""
        t = self.window
        out: dict[str, Any] = {}
        for key, value in info.items():
            if isinstance(value, torch.Tensor) and value.ndim and value.shape[0] == b:
                value = _repeat(value, t)
            out[key] = value
        cached = self._step_entries
        if cached is None or cached[0] != (b, device):
            entries = {
                "sequence_id": _repeat(torch.arange(b, device=device), t),
                "step_in_sequence": self._steps.to(device).repeat(b),
                "learning_mask": self._learning.to(device).repeat(b),
            }
            cached = self._step_entries = ((b, device), entries)
        out.update({key: value.clone() for key, value in cached[1].items()})
        return out


def _repeat(value: torch.Tensor, t: int) -> torch.Tensor:
    """Each entry of ``value`` (along dim 0) ``t`` times in a row."""
    b = value.shape[0]
    return value.unsqueeze(1).expand(b, t, *value.shape[1:]).reshape(b * t, *value.shape[1:])


def _split_anchors(
    anchors: torch.Tensor | tuple[torch.Tensor, ...], storage: Storage, layout: RingLayout
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """``(time, lane, lane coordinates)`` of each anchor (flat lane: ``0`` for ``ndim == 1``)."""
    ndim = storage.ndim
    if isinstance(anchors, tuple):
        if len(anchors) != ndim or ndim == 1:
            raise ValueError(
                f"anchors given as coordinates need one tensor per storage dim of a storage "
                f"with ndim > 1; got {len(anchors)} for ndim={ndim}."
            )
        coords = [torch.as_tensor(c, dtype=torch.long).reshape(-1) for c in anchors]
        lead = shape_of(storage)[1:]
        lane = torch.zeros_like(coords[0])
        for c, size in zip(coords[1:], lead, strict=True):
            lane = lane * size + c
        return coords[0], lane, tuple(coords[1:])
    anchors = torch.as_tensor(anchors, dtype=torch.long)
    if anchors.ndim != 1:
        raise ValueError(
            f"anchors must be a 1-D tensor of slots (or a tuple of coordinate tensors), got "
            f"shape {tuple(anchors.shape)}: use Sequence with a per-item sampler."
        )
    if layout.cells == 1:
        return anchors, torch.zeros_like(anchors), ()
    return anchors.div(layout.cells, rounding_mode="floor"), anchors.remainder(layout.cells), ()
