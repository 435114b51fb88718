"""Slice samplers: batches made of contiguous slices of stored trajectories."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Literal, TypedDict, overload

import numpy as np
import torch
from typing_extensions import Unpack

from rbdata._component.checks import NestedKey, check_int, check_optional_int, normalize_key
from rbdata.errors import (
    BatchSizeError,
    ExclusiveArgumentsError,
    SliceSizeError,
    UnsupportedDataError,
)
from rbdata.samplers._base import Sampler
from rbdata.samplers._live import _LiveSet
from rbdata.samplers._slice_batch import SliceBatcher, Slices
from rbdata.samplers._slice_markers import DEFAULT_END_KEY, MarkerRule
from rbdata.samplers._slice_weight import SliceWeight, span_amount
from rbdata.storages import LazyStackStorage, ListStorage, Storage
from rbdata.trajectories.index import TrajectoryIndex
from rbdata.trajectories.layouts import FragmentedTrajectoryIndex, GridTrajectoryIndex
from rbdata.trajectories.reading import read_leaf

SpanArg = bool | int | tuple[bool | int, bool | int]


class SliceArgs(TypedDict, total=False):
    """The keyword arguments every slice sampler takes (see :class:`SliceSampler`)."""

    num_slices: int | None
    slice_len: int | None
    end_key: NestedKey | None
    end_keys: Sequence[NestedKey] | None
    traj_key: NestedKey | None
    step_key: NestedKey | None
    fragmented: bool
    ends: torch.Tensor | None
    trajectories: torch.Tensor | None
    cache_values: bool
    truncated_key: NestedKey | None
    init_key: NestedKey | None
    strict_length: bool
    pad_output: bool
    compile: bool | dict[str, Any]
    span: SpanArg
    use_gpu: bool | torch.device


def _normalize_span(span: Any) -> tuple[bool | int, bool | int]:
    if isinstance(span, list):
        span = tuple(span)
    if not isinstance(span, tuple):
        span = (span, span)
    if len(span) != 2:
        raise ValueError(f"span must be a bool, an int or a pair of them, got {span!r}.")
    left, right = span
    for side in span:
        span_amount(side, 2, "span")
    return left, right


def _static_markers(ends: Any, trajectories: Any) -> tuple[str, torch.Tensor] | None:
    if ends is not None and trajectories is not None:
        raise ExclusiveArgumentsError("trajectories and ends are exclusive arguments.")
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


def _optional_key(key: NestedKey | None, name: str) -> NestedKey | None:
    return None if key is None else normalize_key(key, name)


def check_reads_tensordicts(storage: Storage) -> None:
    """Refuse a ``ListStorage`` (its reads are lists) as the storage of a slice sampler.

    torchrl's slice samplers read the trajectories from the storage as one TensorDict,
    which a ``ListStorage`` never gives (a ``LazyStackStorage`` does); they refuse it
    when sampling, and so do rbdata's.

    Raises:
        UnsupportedDataError: (a TypeError and a RuntimeError, as torchrl raises) for a
            ``ListStorage`` other than a ``LazyStackStorage``.
    """
    if isinstance(storage, ListStorage) and not isinstance(storage, LazyStackStorage):
        raise UnsupportedDataError(
            f"Could not get a tensordict out of the storage, which is required for "
            f"SliceSampler to compute the trajectories: got a {type(storage).__name__}, whose "
            "reads are lists; use a LazyStackStorage or a tensor storage."
        )


#: the class ``SliceSampler(replacement=False, ...)`` builds: the subclass declared with
#: ``without_replacement_variant=True`` (``SliceSamplerWithoutReplacement``)
_VARIANT: list[type[SliceSampler]] = []


class SliceSampler(Sampler):
    """Samples batches of contiguous slices, each inside one stored trajectory.

    A batch of ``batch_size`` transitions holds ``num_slices`` slices of
    ``slice_len`` consecutive transitions (give exactly one of the two; the
    batch size must be divisible by it). As in torchrl, a slice picks a
    trajectory uniformly among those that can give one, then a start
    uniformly inside it. Slices never cross a trajectory boundary nor the
    write cursor of a full buffer (the newest item is not followed by the
    oldest). With a storage of ``ndim > 1`` (items of several cells, e.g. one
    per environment), trajectories run along the first dimension inside each
    cell.

    Trajectories come from per-transition ids (``traj_key``) or from end flags
    (``end_key``, or ``end_keys`` OR-ed); a missing ``traj_key`` falls back to
    the end flags and missing end flags to the ids. With none given, the ids
    under ``("collector", "traj_ids")``, ``"episode"`` or ``"traj_ids"`` are
    used (``traj_key`` then reports the one found, after the first sample),
    else the done / terminated / truncated flags under ``"next"`` (OR-ed),
    then at the root. Fixed ``ends`` / ``trajectories`` tensors describe a
    full, static storage. Boundaries are kept incrementally: a write costs the
    sampler a note of the written slots, the next sample reads the markers of
    those slots, and a sample costs O(batch) whatever the buffer size
    (multi-dim and fragmented layouts are recomputed once after each write).

    The returned index is flat, slice after slice (full slices: reshape the
    batch to ``[num_slices, slice_len]``). Unless ``truncated_key`` is None
    the info holds ``truncated_key`` (bool ``[N, 1]``, True at the last
    transition of every slice), the ``done`` entry beside it (the stored
    flags OR-ed with it) and the stored ``terminated`` entry (False when not
    stored), so that value estimators see where slices stop. When the
    ``init_key`` entry is stored, the info holds it OR-ed with True at the
    first transition of every slice (recurrent modules restart there).

    Args:
        num_slices: slices per batch.
        slice_len: transitions per slice.
        end_key: entry holding end-of-trajectory flags (exclusive with
            ``end_keys``). Reported as ``("next", "done")`` when no end key is given.
        end_keys: entries whose flags are OR-ed into the end signal; those not
            stored are skipped.
        traj_key: entry holding per-transition trajectory ids.
        step_key: entry holding per-transition step numbers (``fragmented`` only).
        fragmented: rebuild trajectories from ``traj_key`` ids and ``step_key``
            steps wherever they are stored (steps of one trajectory need not be
            adjacent; a missing step splits it). Slices are then drawn with
            replacement (this class only), without ``span``.
        ends: a 1-D bool tensor of end flags of a full, static storage; if its
            last entry is False the last trajectory continues at slot 0.
        trajectories: a 1-D integer tensor of trajectory ids, same use as ``ends``.
        cache_values: accepted for torchrl compatibility; boundaries are always
            cached and updated incrementally.
        truncated_key: where the end-of-slice marker goes (None: no markers).
        init_key: the stored entry marked True at slice starts (None: leave it).
        strict_length: only draw full-length slices (trajectories shorter than
            ``slice_len`` are skipped); with False, short trajectories give
            short slices and the batch may be shorter than asked.
        pad_output: with ``strict_length=False``, when some trajectory is
            shorter than ``slice_len``, pad every short slice to ``slice_len``
            by repeating its last step, so that the batch has ``batch_size``
            transitions, and put a bool ``[N]`` mask of the real steps under
            ``("collector", "mask")``.
        compile: accepted for torchrl compatibility (sampling is already O(batch)).
        span: let slices start before a trajectory's start (left) and end past
            its end (right), truncated to the trajectory: a bool for both sides
            (True: at least one transition), an int ``i`` (at least
            ``slice_len - i`` transitions per slice) or a ``(left, right)``
            pair. Truncated slices make the batch shorter.
        use_gpu: accepted for torchrl compatibility (no effect on CPU storages).
        replacement: True (the default) builds this sampler. False builds a
            :class:`SliceSamplerWithoutReplacement` instead, with the other
            arguments (``drop_last`` and ``shuffle`` too), as torchrl does.
            Subclasses have no such variant and refuse False.

    Raises:
        TypeError: if ``replacement`` is not a bool, or is False for a subclass.
        SliceSizeError: (a TypeError and a ValueError) unless exactly one of
            ``num_slices`` and ``slice_len`` is given.
        ExclusiveArgumentsError: (a RuntimeError and a ValueError) for
            ``end_key`` with ``end_keys``, ``ends`` with ``trajectories``, or
            fixed markers with keys.
        BatchSizeError: (a RuntimeError and a ValueError) at sample time, for
            a batch size that is not a multiple of the slice size.
        ValueError: ``pad_output`` with ``strict_length``, bad sizes or spans.

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
        >>> rb.sampler.traj_key
        'episode'
        >>> type(SliceSampler(slice_len=5, replacement=False, drop_last=True)).__name__
        'SliceSamplerWithoutReplacement'
    """

    #: Whether ``fragmented=True`` is supported (torchrl: with replacement only).
    _fragments_ok = True

    def __init_subclass__(cls, *, without_replacement_variant: bool = False, **kwargs: Any) -> None:
        """A subclass declared with ``without_replacement_variant=True`` is the variant."""
        super().__init_subclass__(**kwargs)
        if without_replacement_variant:
            _VARIANT[:] = [cls]

    def __new__(cls, *args: Any, replacement: bool = True, **kwargs: Any) -> Any:
        """This sampler, or for ``SliceSampler(replacement=False, ...)`` its variant.

        Only the variant's object is made here: it is a ``SliceSampler``, so
        Python then calls its ``__init__`` with the same arguments, once
        (``replacement=False`` is a no-op there). Pickling and copying call
        ``cls.__new__(cls)``: they build the class of the object copied.
        """
        variant = _VARIANT[0] if _VARIANT else None
        if cls is SliceSampler and replacement is False and variant is not None:
            return super().__new__(variant)
        return super().__new__(cls)

    # What a type checker reads: with ``replacement=False`` the variant's keywords too (the
    # object built is a SliceSamplerWithoutReplacement, a SliceSampler). They reach the
    # variant's ``__init__``, never this one, which mypy cannot see (``misc``).
    @overload
    def __init__(
        self, *, replacement: Literal[True] = ..., **slice_args: Unpack[SliceArgs]
    ) -> None: ...
    @overload
    def __init__(
        self,
        *,
        replacement: bool,
        drop_last: bool = ...,
        shuffle: bool = ...,
        **slice_args: Unpack[SliceArgs],
    ) -> None: ...
    def __init__(  # type: ignore[misc]
        self, *, replacement: bool = True, **slice_args: Unpack[SliceArgs]
    ) -> None:
        Sampler.__init__(self, replacement=replacement)
        self._setup_slices(**slice_args)

    def _setup_slices(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: NestedKey | None = None,
        end_keys: Sequence[NestedKey] | None = None,
        traj_key: NestedKey | None = None,
        step_key: NestedKey | None = "step_count",
        fragmented: bool = False,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: NestedKey | None = ("next", "truncated"),
        init_key: NestedKey | None = "is_init",
        strict_length: bool = True,
        pad_output: bool = False,
        compile: bool | dict[str, Any] = False,
        span: SpanArg = False,
        use_gpu: bool | torch.device = False,
    ) -> None:
        """Check and store the slice arguments (the one place every slice sampler uses)."""
        if (num_slices is None) == (slice_len is None):
            raise SliceSizeError(
                "Either num_slices or slice_len must be not None, and not both. Got "
                f"num_slices={num_slices!r} and slice_len={slice_len!r}."
            )
        check_optional_int(num_slices, "num_slices", minimum=1)
        check_optional_int(slice_len, "slice_len", minimum=1)
        if end_key is not None and end_keys is not None:
            raise ExclusiveArgumentsError(
                "`end_key` and `end_keys` are exclusive arguments: pass one boundary key "
                f"through end_key or several to OR through end_keys, got end_key={end_key!r} "
                f"and end_keys={end_keys!r}."
            )
        static = _static_markers(ends, trajectories)
        if static is not None and (end_key or end_keys or traj_key is not None):
            raise ExclusiveArgumentsError(
                "`ends` / `trajectories` and `end_key`, `end_keys` or `traj_key` are exclusive "
                "arguments."
            )
        if pad_output and strict_length:
            raise ValueError(
                "pad_output=True is incompatible with strict_length=True: padding only happens "
                "when short trajectories are kept, which requires strict_length=False."
            )
        span = _normalize_span(span)
        if fragmented:
            self._check_fragmented(step_key, static, span, compile)
        self.num_slices, self.slice_len = num_slices, slice_len
        self.traj_key = _optional_key(traj_key, "traj_key")
        self.end_keys = (
            None if end_keys is None else tuple(normalize_key(k, "end_keys") for k in end_keys)
        )
        given_end = _optional_key(end_key, "end_key")
        defaulted = given_end is None and self.end_keys is None and static is None
        self.end_key = DEFAULT_END_KEY if defaulted else given_end
        self.step_key = _optional_key(step_key, "step_key")
        self.fragmented = bool(fragmented)
        self.truncated_key = _optional_key(truncated_key, "truncated_key")
        self.init_key = _optional_key(init_key, "init_key")
        self.strict_length, self.pad_output = bool(strict_length), bool(pad_output)
        self.span = span
        self.cache_values, self.compile, self.use_gpu = bool(cache_values), bool(compile), use_gpu
        self._rule = MarkerRule(self.traj_key, given_end, self.end_keys)
        self._static = static is not None
        self._index = self._new_index(static)
        self._batcher = SliceBatcher(self.truncated_key, self.init_key)
        self._shapes: dict[int, tuple[int, int]] = {}
        self._short: tuple[int, bool] | None = None
        #: (storage revision, result) of the last _get_stop_and_length
        self._stop_and_length: tuple[int, tuple[torch.Tensor, ...]] | None = None

    def _check_fragmented(
        self, step_key: NestedKey | None, static: Any, span: tuple[Any, Any], compile: Any
    ) -> None:
        if not self._fragments_ok:
            raise NotImplementedError(
                "fragmented=True currently supports SliceSampler with replacement only, not "
                f"{type(self).__name__}."
            )
        if step_key is None:
            raise ValueError("step_key must be provided when fragmented=True.")
        if static is not None:
            raise ValueError(
                "fragmented=True requires trajectory and step identifiers; the static ends / "
                "trajectories arguments cannot reconstruct interleaved trajectories."
            )
        if any(span):
            raise NotImplementedError("span is not supported with fragmented=True.")
        if compile:
            raise NotImplementedError("compile is not supported with fragmented=True.")

    def _new_index(self, static: tuple[str, torch.Tensor] | None) -> TrajectoryIndex:
        if self.fragmented:
            assert self.step_key is not None
            return FragmentedTrajectoryIndex(traj_key=self.traj_key, step_key=self.step_key)
        return TrajectoryIndex(static=static, resolve=self._rule.resolve)

    # ------------------------------------------------------------ writes
    def _on_write(self, index: torch.Tensor) -> None:
        """Note the written slots; boundaries are updated at the next sample."""
        self._index.extend(index)

    def _on_update(self, index: torch.Tensor) -> None:
        """Note slots edited in place (``set_``, ``update_``): boundaries are re-read."""
        self._index.touch(index)

    def _on_empty(self) -> None:
        super()._on_empty()
        self._index.clear()
        self._batcher.forget()
        self._short = None

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
            if self.num_slices is not None:
                fixed, name, what = self.num_slices, "num_slices", "number of slices"
            else:
                assert self.slice_len is not None  # exactly one of them is set
                fixed, name, what = self.slice_len, "slice_len", "slice length"
            if batch_size % fixed:
                raise BatchSizeError(
                    f"The batch-size must be divisible by the {what}, got "
                    f"batch_size={batch_size} and {name}={fixed}: a batch is made of whole "
                    "slices."
                )
            shape = (self.num_slices or batch_size // fixed, self.slice_len or batch_size // fixed)
            self._shapes[batch_size] = shape
        weight = self._index.weight
        if weight is None or weight.slice_len != shape[1]:
            self._set_weight(self._make_weight(shape[1]))
        return shape

    def _make_weight(self, slice_len: int) -> SliceWeight:
        left = span_amount(self.span[0], slice_len, "span")
        right = span_amount(self.span[1], slice_len, "span")
        return SliceWeight(slice_len, self.strict_length, left, right)

    def _set_weight(self, weight: SliceWeight) -> None:
        index = self._index
        index.weight = weight
        if index.n:
            lengths = index.view("lengths")
            starts = index.view("starts")
            w = torch.as_tensor(weight.many(lengths))
            cum = torch.cumsum(w, 0)
            index.view("excl").copy_(cum - w)
            index.view("shift")[1:].copy_(starts - (cum - w))
            index.base, index.total_end = 0, int(cum[-1])
        else:
            index.base = index.total_end = 0

    def _index_for(self, storage: Storage) -> TrajectoryIndex:
        """The trajectory index, switched to a per-cell one for a storage with ``ndim > 1``."""
        index = self._index
        if storage.ndim > 1 and type(index) is TrajectoryIndex:
            if self._static:
                raise ValueError(
                    "ends / trajectories describe a one-dimensional storage, got one with "
                    f"ndim={storage.ndim}."
                )
            grid = GridTrajectoryIndex(
                resolve=self._rule.resolve, weight=index.weight, cell_writes=self.per_cell_writes
            )
            grid.load_state_dict(index.state_dict())
            self._index = index = grid
        return index

    def _sync(self, storage: Storage) -> tuple[bool, int] | None:
        change = self._sync_index(storage)
        if self._index.total_weight <= 0:
            raise self._no_slice_error()
        return change

    def _sync_index(self, storage: Storage) -> tuple[bool, int] | None:
        """Bring the trajectories up to date (see ``TrajectoryIndex.sync``)."""
        index = self._index_for(storage)
        change = index.sync(storage)
        if change is not None:
            self._short = None
        markers = index.markers
        if change is not None and markers is not None:
            if self._rule.traj_key is None and markers.kind == "ids":
                self.traj_key = markers.keys[0] if markers.keys else None
            self._note_dones(storage, change, markers.kind == "ends" and markers.keys)
        return change

    def _get_stop_and_length(
        self, storage: Storage
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The stored trajectories as torchrl's ``(start, stop, lengths)`` (for its tests).

        ``start`` and ``stop`` hold each trajectory's first and last slot as
        ``[N, 1]`` coordinates, ``lengths`` its length (``[N]``), oldest first;
        a trajectory crossing the end of the storage has ``stop < start``.
        The trajectories are re-read when ``storage.revision`` moved since the
        last call (an edit of the stored flags included); the same tensors come
        back while it did not. One-dimensional storages only.

        Raises:
            ValueError: for a storage with ``ndim > 1``.
            RuntimeError: when no trajectory entry is stored (as :meth:`sample`).
        """
        if storage.ndim != 1:
            raise ValueError(
                f"_get_stop_and_length reads one-dimensional storages, got ndim={storage.ndim}."
            )
        revision = storage.revision
        cached = self._stop_and_length
        if cached is not None and cached[0] == revision:
            start, stop, lengths = cached[1]
            return start, stop, lengths
        index = self._index_for(storage)
        if cached is not None and len(storage):  # content changed: read it again
            index.touch(torch.arange(len(storage)))
        self._sync_index(storage)
        starts, lengths = index.trajectories()
        start = index.to_slots(starts.clone())
        stop = index.to_slots(starts + lengths - 1)
        result = (start.reshape(-1, 1), stop.reshape(-1, 1), lengths)
        self._stop_and_length = (revision, result)
        return result

    @property
    def _fetch_traj(self) -> bool:
        """Whether trajectories come from ids (``traj_key``) rather than end flags (read-only).

        For torchrl compatibility (its tests read the flag): before the first
        sample, True unless end flags were given; after it, whether the markers
        found were trajectory ids. ``ends`` / ``trajectories``: True, as torchrl's.
        """
        markers = self._index.markers
        if self._static:
            return True
        if markers is not None:
            return markers.kind == "ids"
        return self._rule.end_key is None and self._rule.end_keys is None

    @property
    def _traj_key_auto(self) -> bool:
        """Whether the trajectory entry is still to be detected at the next sample (read-only).

        For torchrl compatibility: True when neither ``traj_key``, ``end_key``,
        ``end_keys`` nor static boundaries were given, until a sample resolved them.
        """
        rule = self._rule
        given = rule.traj_key is not None or rule.end_key is not None or rule.end_keys is not None
        return not (given or self._static or self._index.markers is not None)

    def _note_dones(self, storage: Storage, change: tuple[bool, int], end_keys: Any) -> None:
        """Track whether a stored done flag falls inside a trajectory (O(written)).

        Until one does, the info's done entry equals the end-of-slice marker
        (slices stay inside trajectories) and is not read from the storage.
        """
        batcher, index = self._batcher, self._index
        done_key = batcher.done_key
        if done_key is None or (end_keys and done_key in end_keys):
            batcher.done_is_truncation = True
            return
        if not batcher.stores_done(storage):
            return
        rebuilt, v_from = change
        if rebuilt:
            lengths = index.view("lengths")
            first = torch.cumsum(lengths, 0) - lengths - index.view("starts")
            v = torch.arange(int(lengths.sum())) - torch.repeat_interleave(first, lengths)
        else:
            v = torch.arange(max(v_from - 1, index.v_end - index.size), index.v_end)
        k = index.locate(v)
        v = v[v != index.view("starts")[k] + index.view("lengths")[k] - 1]  # not a last step
        inside = bool(v.numel()) and bool(read_leaf(storage, done_key, index.to_slots(v)).any())
        batcher.done_is_truncation = not inside and (rebuilt or batcher.done_is_truncation)

    def _no_slice_error(self) -> RuntimeError:
        index = self._index
        longest = int(index.view("lengths").max()) if index.n else 0
        return RuntimeError(
            "Did not find a single trajectory with sufficient length: no slice of "
            f"{index.weight.slice_len} transitions can be drawn, the longest of the {index.n} "
            f"stored trajectories has {longest} transitions and strict_length="
            f"{self.strict_length}; use shorter slices or strict_length=False."
        )

    def _draw(self, num_slices: int) -> tuple[np.ndarray, np.ndarray]:
        """Trajectories (positions in the live columns) and starts of ``num_slices`` slices.

        A trajectory is drawn uniformly among those with room for a slice, then
        a start uniformly inside it (before it under a left span). One random
        62-bit integer per slice gives both (its remainder modulo the number of
        trajectories, then the remainder of its quotient modulo the room; the
        bias is below ``len(storage) / 2**62``), in a few numpy operations.
        """
        index, weight = self._index, self._index.weight
        count = index.total_weight
        r = torch.randint(1 << 62, (num_slices,), generator=self._rng).numpy()
        quotient, rank = np.divmod(r, count)
        if count == index.n:  # every trajectory has room: the rank is the position
            k = rank
        else:
            k = np.searchsorted(index.view("excl").numpy(), rank + index.base, side="right") - 1
        room = index.view("lengths").numpy()[k] + weight.extra
        if not weight.strict:
            np.maximum(room, 1, out=room)
        begin = index.view("starts").numpy()[k] + quotient % room
        if weight.left:
            begin -= weight.left
        return k, begin

    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw ``batch_size // slice_len`` slices (see the class docstring)."""
        num_slices, slice_len = self._shape(batch_size)
        check_reads_tensordicts(storage)
        self._sync(storage)
        k, begin = self._draw(num_slices)
        out = self._emit(storage, begin, k, slice_len)
        return out.index, out.info

    def _emit(self, storage: Storage, begin: np.ndarray, k: np.ndarray, slice_len: int) -> Slices:
        """The slices starting at the virtual positions ``begin`` of the trajectories ``k``."""
        index, weight = self._index, self._index.weight
        if self.strict_length and not weight.left and not weight.right:
            return self._batcher.full(storage, index.to_slots, begin, slice_len)
        k_t = torch.from_numpy(k)
        first = index.view("starts").index_select(0, k_t)
        last = first + index.view("lengths").index_select(0, k_t) - 1
        lo = torch.maximum(torch.from_numpy(begin), first)
        lengths = torch.minimum(torch.from_numpy(begin + (slice_len - 1)), last) - lo + 1
        pad = self.pad_output and self._has_short(slice_len)
        return self._batcher.ragged(storage, index.to_slots, lo, lengths, slice_len, pad)

    def _has_short(self, slice_len: int) -> bool:
        """Whether a live trajectory is shorter than ``slice_len`` (cached until a write)."""
        if self._short is None or self._short[0] != slice_len:
            index = self._index
            short = bool(index.n) and int(index.view("lengths").min()) < slice_len
            self._short = (slice_len, short)
        return self._short[1]

    # ------------------------------------------------------------ state
    def _extra_state(self) -> dict[str, Any]:
        """The write position; trajectory boundaries are rebuilt from the storage on load."""
        return {**super()._extra_state(), "trajectories": self._index.state_dict()}

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        super()._load_extra_state(state_dict)  # first: a sibling's checks may refuse the state
        if "trajectories" in state_dict:
            self._index.load_state_dict(state_dict["trajectories"])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_slices={self.num_slices}, slice_len={self.slice_len}, "
            f"end_key={self.end_key}, end_keys={self.end_keys}, traj_key={self.traj_key}, "
            f"step_key={self.step_key}, fragmented={self.fragmented}, "
            f"truncated_key={self.truncated_key}, strict_length={self.strict_length}, "
            f"pad_output={self.pad_output})"
        )


# ``inspect.signature(SliceSampler)`` reads ``__new__``, which takes the variant's arguments
# too: it shows the constructor's
SliceSampler.__new__.__signature__ = inspect.signature(SliceSampler.__init__)  # type: ignore[attr-defined]
