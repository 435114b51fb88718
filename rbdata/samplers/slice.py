"""Slice samplers: batches made of contiguous slices of stored trajectories."""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
import torch
from typing_extensions import Unpack

from rbdata._trajectories import TrajectoryIndex, read_leaf, storage_keys
from rbdata._validation import NestedKey, check_int, check_optional_int, normalize_key
from rbdata.samplers._base import Sampler
from rbdata.samplers._live import _LiveSet

SpanArg = bool | int | tuple[bool | int, bool | int]


class SliceArgs(TypedDict, total=False):
    """The keyword arguments every slice sampler takes (see :class:`SliceSampler`)."""

    num_slices: int | None
    slice_len: int | None
    end_key: NestedKey | None
    traj_key: NestedKey | None
    ends: torch.Tensor | None
    trajectories: torch.Tensor | None
    cache_values: bool
    truncated_key: NestedKey | None
    strict_length: bool
    compile: bool | dict[str, Any]
    span: SpanArg
    use_gpu: bool | torch.device


class _SliceWeight:
    """How many slice starts a trajectory of a given length offers (its sampling weight)."""

    def __init__(self, slice_len: int, strict: bool, left: int, right: int) -> None:
        self.slice_len, self.strict, self.left, self.right = slice_len, strict, left, right
        self._extra = 1 - slice_len + left + right
        self._floor = 0 if strict else 1

    def one(self, length: int) -> int:
        if self.strict and length < self.slice_len:
            return 0
        return max(length + self._extra, self._floor)

    def many(self, lengths: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        if isinstance(lengths, np.ndarray):
            w = np.maximum(lengths + self._extra, self._floor)
            if self.strict:
                w[lengths < self.slice_len] = 0
            return w
        w = (lengths + self._extra).clamp_min_(self._floor)
        if self.strict:
            w.masked_fill_(lengths < self.slice_len, 0)
        return w


def _span_amount(value: bool | int, slice_len: int, name: str) -> int:
    if isinstance(value, bool):
        return slice_len - 1 if value else 0
    if isinstance(value, int) and value >= 0:
        return min(value, slice_len - 1)
    raise ValueError(f"{name} must be a bool or an int >= 0, got {value!r}.")


def _static_markers(ends: Any, trajectories: Any) -> tuple[str, torch.Tensor] | None:
    if ends is not None and trajectories is not None:
        raise ValueError("pass at most one of ends and trajectories, got both.")
    if ends is not None:
        ends = torch.as_tensor(ends)
        if ends.dtype != torch.bool or ends.ndim != 1:
            raise ValueError(
                f"ends must be a 1-D bool tensor, got dtype {ends.dtype} and shape "
                f"{tuple(ends.shape)}."
            )
        return "ends", ends.clone()
    if trajectories is not None:
        trajectories = torch.as_tensor(trajectories)
        if trajectories.is_floating_point() or trajectories.dtype == torch.bool:
            raise ValueError(f"trajectories must hold integer ids, got dtype {trajectories.dtype}.")
        if trajectories.ndim != 1:
            raise ValueError(f"trajectories must be 1-D, got shape {tuple(trajectories.shape)}.")
        return "ids", trajectories.clone()
    return None


def _replace_last(key: NestedKey, name: str) -> NestedKey:
    return name if isinstance(key, str) else (*key[:-1], name)


class SliceSampler(Sampler):
    """Samples batches of contiguous slices, each inside one stored trajectory.

    A batch of ``batch_size`` transitions holds ``num_slices`` slices of
    ``slice_len`` consecutive transitions (give exactly one of the two; the
    batch size must be divisible by it). Slices never cross a trajectory
    boundary nor the write cursor of a full buffer (the newest item is not
    followed by the oldest). A slice start is drawn uniformly among all valid
    starts, i.e. a trajectory is picked with probability proportional to the
    number of slices it offers.

    Trajectories come from per-transition ids (``traj_key``; by default
    ``"episode"``, then ``("collector", "traj_ids")``, then ``"traj_ids"``
    when stored) or from end flags (``end_key``; by default ``("next", "done")``
    and friends), or from fixed ``ends`` / ``trajectories`` tensors describing a
    full, static storage. Boundaries are kept incrementally: a write costs the
    sampler only a note of the written slots, the next sample reads the
    markers of those slots, and a sample costs O(batch), whatever the buffer
    size.

    The returned index is flat, slice after slice (full slices: reshape the
    batch to ``[num_slices, slice_len]``). When slices may be shorter
    (``strict_length=False`` or ``span``), the info holds ``"slice_id"``, the
    slice of each transition (``torch.bincount(info["slice_id"])`` gives the
    slice lengths). Unless ``truncated_key`` is None, the info also holds
    ``truncated_key`` set at the last transition of every slice, the matching
    ``done`` entry (equal to it: a stored done flag can only fall at a slice's
    end) and the stored ``terminated`` entry (False when not stored), so that
    value estimators see where slices stop.

    Args:
        num_slices: slices per batch.
        slice_len: transitions per slice.
        end_key: entry holding end-of-trajectory flags.
        traj_key: entry holding per-transition trajectory ids.
        ends: a 1-D bool tensor of end flags of a full, static storage; if its
            last entry is False the last trajectory continues at slot 0.
        trajectories: a 1-D integer tensor of trajectory ids, same use as ``ends``.
        cache_values: accepted for torchrl compatibility; boundaries are always
            cached and updated incrementally.
        truncated_key: where the end-of-slice marker goes (None: no markers).
        strict_length: only draw full-length slices (trajectories shorter than
            ``slice_len`` are skipped); with False, short trajectories give
            short slices and the batch may be shorter than asked.
        compile: accepted for torchrl compatibility (sampling is already O(batch)).
        span: let slices start before a trajectory's start (left) and end past
            its end (right), truncated to the trajectory: a bool for both sides,
            an int ``i`` (at least ``slice_len - i`` transitions per slice) or a
            ``(left, right)`` pair. Truncated slices make the batch shorter.
        use_gpu: accepted for torchrl compatibility (no effect on CPU storages).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=5), batch_size=20
        ... )
        >>> episode = torch.arange(40) // 10
        >>> _ = rb.extend(TensorDict({"episode": episode, "obs": torch.arange(40)}, [40]))
        >>> batch = rb.sample()
        >>> bool((batch["episode"].view(4, 5) == batch["episode"].view(4, 5)[:, :1]).all())
        True
    """

    def __init__(self, **slice_args: Unpack[SliceArgs]) -> None:
        Sampler.__init__(self)
        self._setup_slices(**slice_args)

    def _setup_slices(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: NestedKey | None = None,
        traj_key: NestedKey | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: NestedKey | None = ("next", "truncated"),
        strict_length: bool = True,
        compile: bool | dict[str, Any] = False,
        span: SpanArg = False,
        use_gpu: bool | torch.device = False,
    ) -> None:
        """Check and store the slice arguments (the one place every slice sampler uses)."""
        if (num_slices is None) == (slice_len is None):
            raise ValueError(
                "pass exactly one of num_slices and slice_len, got "
                f"num_slices={num_slices!r} and slice_len={slice_len!r}."
            )
        check_optional_int(num_slices, "num_slices", minimum=1)
        check_optional_int(slice_len, "slice_len", minimum=1)
        static = _static_markers(ends, trajectories)
        if static is not None and (end_key is not None or traj_key is not None):
            raise ValueError("ends / trajectories cannot be combined with end_key or traj_key.")
        if isinstance(span, list):
            span = tuple(span)
        if not isinstance(span, tuple):
            span = (span, span)
        if len(span) != 2:
            raise ValueError(f"span must be a bool, an int or a pair of them, got {span!r}.")
        for side in span:
            _span_amount(side, 2, "span")
        self.num_slices, self.slice_len = num_slices, slice_len
        self.end_key = None if end_key is None else normalize_key(end_key, "end_key")
        self.traj_key = None if traj_key is None else normalize_key(traj_key, "traj_key")
        self.truncated_key = (
            None if truncated_key is None else normalize_key(truncated_key, "truncated_key")
        )
        self.strict_length = bool(strict_length)
        self.span = span
        self.cache_values, self.compile, self.use_gpu = cache_values, compile, use_gpu
        self._index = TrajectoryIndex(traj_key=self.traj_key, end_key=self.end_key, static=static)
        self._templates: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self._info_keys: tuple[Any, ...] | None = None
        self._shapes: dict[int, tuple[int, int]] = {}

    # ------------------------------------------------------------ writes
    def _on_write(self, index: torch.Tensor) -> None:
        """Note the written slots; boundaries are updated at the next sample."""
        self._index.extend(index)

    def _on_update(self, index: torch.Tensor) -> None:
        """Note slots edited in place (``set_``, ``update_``): boundaries are re-read."""
        self._index.extend(index)

    def _on_empty(self) -> None:
        self._index.clear()
        self._info_keys = None

    def set_consume_after_n(self, n: int | None) -> None:
        """Slice samplers do not support consume-after-n (``n`` must be None)."""
        if n is not None:
            raise ValueError(
                f"{type(self).__name__} does not support consume_after_n_samples "
                f"(got {n!r}): slices overlap, so per-item consumption is undefined."
            )
        super().set_consume_after_n(None)

    # ------------------------------------------------------------ sampling
    def _shape(self, batch_size: int) -> tuple[int, int]:
        """``(num_slices, slice_len)`` for a batch; sets the trajectory weights."""
        shape = self._shapes.get(batch_size) if type(batch_size) is int else None
        if shape is None:
            check_int(batch_size, "batch_size", minimum=1)
            fixed, name = (
                (self.num_slices, "num_slices")
                if self.num_slices is not None
                else (self.slice_len, "slice_len")
            )
            if batch_size % fixed:
                raise ValueError(
                    f"batch_size={batch_size} is not divisible by {name}={fixed}: a batch is "
                    "made of whole slices."
                )
            shape = (self.num_slices or batch_size // fixed, self.slice_len or batch_size // fixed)
            self._shapes[batch_size] = shape
        weight = self._index.weight
        if weight is None or weight.slice_len != shape[1]:
            self._set_weight(self._make_weight(shape[1]))
        return shape

    def _make_weight(self, slice_len: int) -> _SliceWeight:
        left = _span_amount(self.span[0], slice_len, "span")
        right = _span_amount(self.span[1], slice_len, "span")
        return _SliceWeight(slice_len, self.strict_length, left, right)

    def _set_weight(self, weight: _SliceWeight) -> None:
        index = self._index
        index.weight = weight
        if index.n:
            lengths = index.view("lengths")
            starts = index.view("starts")
            w = weight.many(lengths)
            cum = torch.cumsum(w, 0)
            index.view("excl").copy_(cum - w)
            index.view("shift")[1:].copy_(starts - (cum - w))
            index.base, index.total_end = 0, int(cum[-1])
        else:
            index.base = index.total_end = 0

    def _sync(self, storage: Any) -> tuple[bool, int] | None:
        change = self._index.sync(storage)
        if self._index.total_weight <= 0:
            raise self._no_slice_error()
        return change

    def _no_slice_error(self) -> RuntimeError:
        index = self._index
        longest = int(index.view("lengths").max()) if index.n else 0
        return RuntimeError(
            f"no slice of {index.weight.slice_len} transitions can be drawn: the longest of "
            f"the {index.n} stored trajectories has {longest} transitions and "
            f"strict_length={self.strict_length}; use shorter slices or strict_length=False."
        )

    def _sample(
        self, storage: Any, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw ``batch_size // slice_len`` slices (see the class docstring)."""
        num_slices, slice_len = self._shape(batch_size)
        self._sync(storage)
        index = self._index
        x = torch.randint(index.base, index.total_end, (num_slices, 1), generator=self._rng)
        j = torch.searchsorted(index.view("excl"), x, right=True)
        x += torch.take(index.view("shift"), j)
        weight = index.weight
        if self.strict_length and not weight.left and not weight.right:
            return self._gather(storage, x, None, slice_len)
        starts = x.view(-1).sub_(weight.left)
        return self._clip(storage, starts, j.view(-1).sub_(1), slice_len)

    def _clip(
        self, storage: Any, starts: torch.Tensor, k: torch.Tensor, slice_len: int
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Truncate slices starting at virtual ``starts`` to their trajectories ``k``."""
        first = self._index.view("starts").index_select(0, k)
        last = first + self._index.view("lengths").index_select(0, k) - 1
        begin = torch.maximum(starts, first)
        lengths = torch.minimum(starts + (slice_len - 1), last) - begin + 1
        return self._gather(storage, begin, lengths, slice_len)

    def _gather(
        self,
        storage: Any,
        starts: torch.Tensor,
        lengths: torch.Tensor | None,
        slice_len: int,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Flat slot index and info of slices at virtual ``starts``.

        With ``lengths`` None every slice is full and ``starts`` has shape
        ``[num_slices, 1]``; else ``starts`` and ``lengths`` are 1-D.
        """
        if self.truncated_key is not None and self._info_keys is None:
            self._info_keys = self._end_keys(storage)
        modulus = self._index.modulus
        info: dict[str, Any] = {}
        if lengths is None:
            offsets, marks = self._template(starts.shape[0], slice_len)
            flat = torch.add(starts, offsets).view(-1).remainder_(modulus)
            marks = None if marks is None else marks.clone()
        else:
            slice_id = torch.repeat_interleave(lengths)
            ends = torch.cumsum(lengths, 0)
            flat = torch.arange(slice_id.numel()).add_((starts - ends + lengths)[slice_id])
            flat.remainder_(modulus)
            marks = self._marks(flat.numel())
            if marks is not None:
                marks.view(marks.shape[0], -1)[:2, ends - 1] = True
            info["slice_id"] = slice_id
        if marks is not None:
            done_key, terminated_key, _, stored_terminated = self._info_keys
            parts = marks.unbind(0)
            info[self.truncated_key], info[done_key] = parts[0], parts[1]
            info[terminated_key] = (
                read_leaf(storage, terminated_key, flat) if stored_terminated else parts[2]
            )
        return flat, info

    def _marks(self, size: int) -> torch.Tensor | None:
        """Zeroed ``[k, size, *tail]`` end markers: truncated, done (and terminated if unstored)."""
        if self.truncated_key is None:
            return None
        _, _, tail, stored_terminated = self._info_keys
        return torch.zeros(2 if stored_terminated else 3, size, *tail, dtype=torch.bool)

    def _template(self, n: int, slice_len: int) -> tuple[Any, ...]:
        key = (n, slice_len)
        if key not in self._templates:
            self._templates.clear()
            marks = self._marks(n * slice_len)
            if marks is not None:
                marks.view(marks.shape[0], n, slice_len)[:2, :, -1] = True
            self._templates[key] = (torch.arange(slice_len), marks)
        return self._templates[key]

    def _end_keys(self, storage: Any) -> tuple[Any, ...]:
        """The done / terminated keys beside ``truncated_key``, their shape, whether stored.

        A stored done flag can only be set at a slice's last transition (slices
        stay inside trajectories), so ``done`` equals the end-of-slice marker;
        ``terminated`` is read from the storage (False when not stored).
        """
        done_key = _replace_last(self.truncated_key, "done")
        terminated_key = _replace_last(self.truncated_key, "terminated")
        keys = storage_keys(storage)
        tail: tuple[int, ...] = (1,)
        for key in (done_key, self.truncated_key, terminated_key):
            if key in keys:
                shape = read_leaf(storage, key, torch.zeros(1, dtype=torch.long)).shape[1:]
                if shape.numel() == 1:
                    tail = tuple(shape)
                break
        self._templates.clear()
        return done_key, terminated_key, tail, terminated_key in keys

    # ------------------------------------------------------------ state
    def _extra_state(self) -> dict[str, Any]:
        """The write position; trajectory boundaries are rebuilt from the storage on load."""
        return {"trajectories": self._index.state_dict()}

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        if "trajectories" in state_dict:
            self._index.load_state_dict(state_dict["trajectories"])

    def __repr__(self) -> str:
        size = (
            f"num_slices={self.num_slices}"
            if self.num_slices is not None
            else f"slice_len={self.slice_len}"
        )
        return f"{type(self).__name__}({size}, strict_length={self.strict_length})"
