"""FrameDedupStorage: each frame stored once (next observations and frame stacks rebuilt).

In torchrl's TED layout a transition holds ``X`` and ``("next", X)``; inside a
trajectory ``("next", X)`` of step ``t`` is ``X`` of step ``t + 1``, so a buffer
written in order stores every observation twice. And a frame-stacked
observation (``uint8[4, 84, 84]``) shares three of its four frames with the
previous step's. This storage keeps each frame once, in a
:class:`LazyTensorStorage`, and rebuilds both at read time (see
``_frame_chain``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import key_path
from rbdata.sharing.counters import spawning

from ._base import Index, Storage, _get_index, _set_index
from ._frame_chain import _FrameChain
from .lazy_tensor import LazyTensorStorage

Key = str | tuple[str, ...]


class FrameDedupStorage(Storage):
    """A tensor storage of TED transitions that stores each observation frame once.

    The memory option known as SB3's ``optimize_memory_usage``, cpprb's
    ``next_of`` / ``stack_compress`` and DQN Zoo's frame storage:

    - ``("next", X)`` is not stored where it equals ``X`` of the following slot
      (a trajectory that continues): the read takes it from there. Where it does
      not (a trajectory's end: done, terminated or truncated, or the newest
      slot, whose successor is not written yet) it is kept in a small side store.
    - with ``frame_stack=K``, ``X`` (shape ``[K, *frame]``, newest frame last, as
      torchrl's ``CatFrames`` builds it) is stored as its newest frame; the
      older ``K - 1`` are read from the previous slots where the stack
      continues them, else the stack is kept whole in the side store.

    Which slots continue is found by comparing the written values (nothing is
    assumed from ``done``), and a slot whose neighbour a write changes is first
    copied aside: reads return exactly what a :class:`LazyTensorStorage` fed
    the same writes returns, whatever the write order (wrap-around, several
    trajectories per batch, writes at any index). A 1M-transition Atari buffer
    (``uint8[4, 84, 84]`` stacks) costs about 7 GB instead of 56 GB.

    Data must be TensorDicts (one item or a batch along dim 0, ``ndim=1``);
    the other keys are stored as in :class:`LazyTensorStorage`, on the CPU.
    The storage stays in one process: :meth:`share_memory_` and sending it to
    a process being started raise ``RuntimeError``. Sampling costs
    ``2 * K`` frame gathers per row instead of one gather of both stacks.

    Args:
        max_size: number of slots.
        keys: the keys ``X`` whose ``("next", X)`` is deduplicated. Defaults to
            every key (outside ``"next"``) with a ``("next", X)`` partner of the
            same shape and dtype, found at the first write.
        frame_stack: depth ``K`` of the frame stacks along dim 0 of each ``X``,
            stored as single frames; None (the default) stores ``X`` whole.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata.storages import FrameDedupStorage
        >>> frames = torch.arange(8, dtype=torch.uint8).view(8, 1, 1).expand(8, 2, 2)
        >>> stacks = torch.stack([frames[:6], frames[1:7]], 1)  # [6, 2, 2, 2], newest last
        >>> data = TensorDict({"pixels": stacks[:5], "next": {"pixels": stacks[1:]}}, [5])
        >>> storage = FrameDedupStorage(100, frame_stack=2)
        >>> storage.set(slice(0, 5), data)
        >>> storage.get(torch.tensor([4]))["next", "pixels"].equal(stacks[5:6])
        True
        >>> storage.side_bytes()  # the first stack (no slot before) and the newest next stack
        16
    """

    def __init__(
        self,
        max_size: int,
        *,
        keys: Sequence[Key] | None = None,
        frame_stack: int | None = None,
    ) -> None:
        super().__init__(max_size)
        if frame_stack is not None and (
            not isinstance(frame_stack, int) or isinstance(frame_stack, bool) or frame_stack < 2
        ):
            raise ValueError(f"frame_stack must be None or an int >= 2, got {frame_stack!r}.")
        if keys is not None and (isinstance(keys, str) or not keys):
            raise ValueError(f"keys must be a non-empty sequence of keys, got {keys!r}.")
        self.frame_stack = frame_stack
        self._keys: list[Key] | None = None if keys is None else [_key(k) for k in keys]
        self._inner = LazyTensorStorage(max_size)
        self._chain = _FrameChain(max_size, frame_stack)

    # ----------------------------------------------------------- properties
    @property
    def initialized(self) -> bool:
        """Whether the rows are allocated (after the first write)."""
        return self._inner.initialized

    @property
    def device(self) -> torch.device:
        """Device of the samples."""
        return self._inner.device

    @property
    def keys(self) -> list[Key] | None:
        """The deduplicated keys (None until the first write when inferred)."""
        return None if self._keys is None else list(self._keys)

    def side_bytes(self) -> int:
        """Bytes kept apart: next values at trajectory ends, stacks that do not continue."""
        return self._chain.side_bytes()

    def memory_stats(self) -> dict[str, int]:
        """The rows' ``capacity_bytes`` / ``resident_bytes``, plus ``side_bytes``."""
        stats = dict(self._inner.memory_stats())
        if stats:
            stats["side_bytes"] = self.side_bytes()
            stats["resident_bytes"] = stats.get("resident_bytes", 0) + stats["side_bytes"]
        return stats

    @property
    def has_tensordict_leaves(self) -> bool:
        """True: the items are TensorDicts, read by leaf (:meth:`get_leaf`)."""
        return True

    def leaf_keys(self) -> list[Any]:
        """Stored leaf keys, as a plain storage lists them (deduplicated ones included)."""
        inner = self._inner.leaf_keys()
        return inner + [_next(k) for k in self._keys or [] if _next(k) not in inner]

    def get_leaf(self, key: Any) -> torch.Tensor:
        """A view ``[capacity, *shape]`` of a leaf that is stored whole (KeyError otherwise)."""
        key = _key(key)
        if self._keys is not None and any(
            key == _next(k) or (self.frame_stack is not None and key == k) for k in self._keys
        ):
            raise KeyError(f"{key!r} is rebuilt at read time: no stored view of it exists.")
        return self._inner.get_leaf(key)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, "
            f"keys={self._keys}, frame_stack={self.frame_stack}, side_bytes={self.side_bytes()})"
        )

    # ------------------------------------------------- what the buffer asks
    def as_batch(self, data: Any, dim: int) -> Any:
        """As :meth:`LazyTensorStorage.as_batch`."""
        return self._inner.as_batch(data, dim)

    def item_as_batch(self, item: Any) -> Any:
        """As :meth:`LazyTensorStorage.item_as_batch`."""
        return self._inner.item_as_batch(item)

    def validate(self, data: Any, batched: bool) -> None:
        """Check ``data``: a TensorDict holding ``X`` and ``("next", X)`` for each key."""
        self._split(data if batched else self._inner.item_as_batch(data))

    # ---------------------------------------------------------------- write
    def _split(self, data: Any) -> tuple[list[Key], Any, list[torch.Tensor], list[torch.Tensor]]:
        """The keys, what the rows store, and each key's ``X`` and ``("next", X)`` batch."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                "FrameDedupStorage stores TensorDicts (TED transitions), got "
                f"{type(data).__name__}."
            )
        keys = self._keys if self._keys is not None else _partners(data)
        if not keys:
            raise ValueError(
                "FrameDedupStorage found no key X with a ('next', X) of the same shape and dtype "
                f"in {sorted(map(str, data.keys(True, True)))}; pass keys=."
            )
        values, nexts = [], []
        for key in keys:
            if key not in data.keys(True, True) or _next(key) not in data.keys(True, True):
                raise KeyError(f"the data lacks {key!r} or {_next(key)!r}.")
            value, after = data.get(key), data.get(_next(key))
            if value.shape != after.shape or value.dtype != after.dtype:
                raise ValueError(
                    f"{key!r} and {_next(key)!r} must have one shape and dtype; got "
                    f"{list(value.shape)} {value.dtype} and {list(after.shape)} {after.dtype}."
                )
            if self.frame_stack is not None and (
                value.ndim < 2 or value.shape[1] != self.frame_stack
            ):
                raise ValueError(
                    f"{key!r}: frame_stack={self.frame_stack} expects items of shape "
                    f"[{self.frame_stack}, ...], got {list(value.shape[1:])}."
                )
            values.append(value)
            nexts.append(after)
        stored = data.exclude(*[_next(k) for k in keys])
        if self.frame_stack is not None:
            for key, value in zip(keys, values, strict=True):
                stored.set(key, value[:, -1])
        self._inner.validate(stored, True)
        return keys, stored, values, nexts

    def _set(self, index: Index, data: Any) -> int:
        batched = not isinstance(index, int)
        if not batched:
            data = self._inner.item_as_batch(data)
        keys, stored, values, nexts = self._split(data)
        slots = _slots(_set_index(index, self._len, self.max_size)[0])
        if slots.shape[0] != values[0].shape[0]:
            raise ValueError(
                f"index selects {slots.shape[0]} item(s) but data holds {values[0].shape[0]}."
            )
        filled = self._len
        if slots.unique().shape[0] != slots.shape[0]:
            raise ValueError("FrameDedupStorage writes each slot at most once per write.")
        if self._keys is None:
            self._keys = keys
        views = self._views() if filled else []
        self._chain.before_write(views, slots, filled)
        self._inner.set(slots, stored)
        after = len(self._inner)  # ndim=1: items are cells
        self._chain.after_write(self._views(), slots, values, nexts, after)
        return after

    def _views(self) -> list[torch.Tensor]:
        return [self._inner.get_leaf(k) for k in self._keys or []]

    # ----------------------------------------------------------------- read
    def _get(self, index: Index) -> Any:
        resolved = _get_index(index, self._len)
        if isinstance(resolved, int):
            return self._read(torch.tensor([resolved]))[0]
        if isinstance(resolved, range):
            return self._read(torch.arange(resolved.start, resolved.stop, resolved.step))
        flat = resolved.reshape(-1).to(device="cpu", dtype=torch.long)
        out = self._read(flat)
        return out if resolved.ndim == 1 else out.reshape(resolved.shape)

    def _read(self, slots: torch.Tensor) -> Any:
        out = self._inner.get(slots)
        views = self._views()
        stacked = self.frame_stack is not None
        values, nexts = self._chain.read(views, slots, with_values=stacked)
        for i, key in enumerate(self._keys or []):
            if stacked:
                out.set(key, values[i].to(out.device))
            out.set(_next(key), nexts[i].to(out.device))
        return out

    # ------------------------------------------------------------ lifecycle
    def _empty(self) -> None:
        self._inner.empty()
        self._chain.clear()

    def share_memory_(self) -> FrameDedupStorage:
        """Refused: the side store lives in this process (RuntimeError)."""
        raise RuntimeError(
            "FrameDedupStorage cannot be shared between processes (its side store is a "
            "per-process dict); use LazyTensorStorage(shared_init=True) for shared buffers."
        )

    def __getstate__(self) -> dict[str, Any]:
        if spawning():  # the side store would not follow the child's writes
            self.share_memory_()
        return self.__dict__.copy()

    def state_dict(self) -> dict[str, Any]:
        """The deduplicated content: the rows' state plus ``"frame_dedup"`` (flags, side store).

        Only tensors and plain values (``torch.load(weights_only=True)``-safe); it loads
        into a ``FrameDedupStorage`` of the same ``frame_stack``.
        """
        state = self._inner.state_dict()
        state["frame_dedup"] = {
            "keys": [list(key_path(k)) for k in self._keys or []],
            **self._chain.state(self._len, self._specs()),
        }
        return state

    def _specs(self) -> list[tuple[torch.Size, torch.dtype]]:
        """Per-item shape and dtype of each deduplicated ``X`` (whole stacks)."""
        specs: list[tuple[torch.Size, torch.dtype]] = []
        for view in self._views() if self.initialized else []:
            frame = view.shape[1:]
            shape = frame if self.frame_stack is None else torch.Size([self.frame_stack, *frame])
            specs.append((shape, view.dtype))
        return specs

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, or a plain tensor storage's state (deduplicated here).

        Raises ValueError (the storage unchanged) when the state does not fit.
        """
        rest = {k: v for k, v in state_dict.items() if k != "frame_dedup"}
        dedup = state_dict.get("frame_dedup")
        if dedup is None:
            self._load_plain(rest)
            return
        keys = [_key(tuple(k)) for k in dedup["keys"]]
        if dedup.get("stack") != self.frame_stack or (
            self._keys is not None and keys != self._keys
        ):
            raise ValueError(
                f"the state holds keys={keys}, frame_stack={dedup.get('stack')}; this storage "
                f"has keys={self._keys}, frame_stack={self.frame_stack}."
            )
        filled = int(rest["len"])
        if dedup["next_follows"].shape != (filled,) or dedup["stack_follows"].shape != (filled,):
            raise ValueError(f"the state's follow flags do not cover its {filled} filled slots.")
        self._inner.load_state_dict(rest)
        self._keys = keys
        self._chain.load(dedup, filled)
        self._len = len(self._inner)

    def _load_plain(self, state: dict[str, Any]) -> None:
        plain = LazyTensorStorage(self.max_size)
        plain.load_state_dict(state)
        filled = len(plain)
        data = plain.get(torch.arange(filled)) if filled else None
        if data is not None:
            self._split(data)  # refuse before forgetting anything
        self.empty()
        if data is not None:
            self.set(slice(0, filled), data)


# --------------------------------------------------------------- helpers
def _key(key: Any) -> Key:
    if isinstance(key, str):
        return key
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return key[0] if len(key) == 1 else key
    raise TypeError(f"a key must be a str or a tuple of str, got {key!r}.")


def _next(key: Key) -> tuple[str, ...]:
    return ("next", *key_path(key))


def _partners(data: TensorDictBase) -> list[Key]:
    """Keys ``X`` outside ``"next"`` with a ``("next", X)`` of the same shape and dtype."""
    found: list[Key] = []
    for key in data.keys(True, True):
        parts = key_path(key)
        if parts[0] == "next" or _next(key) not in data.keys(True, True):
            continue
        value, after = data.get(key), data.get(_next(key))
        if value.shape == after.shape and value.dtype == after.dtype:
            found.append(key)
    return found


def _slots(index: int | range | tuple[range, range] | torch.Tensor) -> torch.Tensor:
    """A normalized write index as a 1-D LongTensor of slots."""
    if isinstance(index, int):
        return torch.tensor([index])
    if isinstance(index, range):
        return torch.arange(index.start, index.stop, index.step)
    if isinstance(index, tuple):
        return torch.cat([torch.arange(r.start, r.stop) for r in index])
    return index.to(device="cpu", dtype=torch.long)
