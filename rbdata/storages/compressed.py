"""CompressedListStorage: every item kept compressed, for image observations that do not fit in RAM.

Each leaf of each item is one compressed frame (one ``bytes`` per leaf, a
tuple per item). A read decompresses the frames of the whole batch leaf by
leaf and joins them straight into one contiguous tensor per leaf, which is
then viewed as ``[batch, *shape]``: no per-item tensors, no stacking.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch

from ._base import Index, Storage, _as_index, _get_index, _set_index
from ._compression import _Codec, _default_codec
from ._pytree import _Structure
from ._recycle import _GatherPool
from ._torchrl import refuse_compressed
from .checkpointers import CompressedListStorageCheckpointer

Frame = bytes  # one compressed leaf of one item (the class's bytes() method shadows the name)
Frames = tuple[Frame, ...]
CompressFn = Callable[[torch.Tensor], Any]
DecompressFn = Callable[[torch.Tensor, dict[str, Any]], torch.Tensor]
_CUSTOM = "custom"
_ALIGN = 64  # byte alignment of each leaf in a decoded block


class _Schema:
    """What every item holds: the container structure and each leaf's per-item shape and dtype.

    Args:
        structure: the container structure (from the first write).
        shapes: per-item shape of each leaf.
        dtypes: dtype of each leaf.
    """

    def __init__(
        self, structure: _Structure, shapes: list[torch.Size], dtypes: list[torch.dtype]
    ) -> None:
        self.structure = structure
        self.shapes = shapes
        self.dtypes = dtypes
        self.nbytes = [math.prod(s) * d.itemsize for s, d in zip(shapes, dtypes, strict=True)]

    @classmethod
    def infer(cls, data: Any, batched: bool) -> _Schema:
        lead = 1 if batched else 0
        structure, leaves = _Structure.infer(data, lead)
        for i, leaf in enumerate(leaves):
            if batched and leaf.ndim == 0:
                raise ValueError(
                    f"{structure.key_repr(i)}: a batch needs a leading items dim, got a 0-d tensor."
                )
        return cls(structure, [t.shape[lead:] for t in leaves], [t.dtype for t in leaves])

    def state(self) -> dict[str, Any]:
        """Plain values describing the schema (what :func:`_parse_schema` reads)."""
        return {"structure": self.structure.state(), "spec": self.spec()}

    def spec(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"shape": list(shape), "dtype": str(dtype).removeprefix("torch.")}
            for name, shape, dtype in zip(
                self.structure.names, self.shapes, self.dtypes, strict=True
            )
        }

    def leaves(self, data: Any, batched: bool) -> tuple[list[torch.Tensor], int]:
        """The leaves of ``data`` and its item count; raises if it does not match."""
        leaves = self.structure.flatten(data)
        n = leaves[0].shape[0] if batched and leaves[0].ndim else 1
        for i, (leaf, shape, dtype) in enumerate(
            zip(leaves, self.shapes, self.dtypes, strict=True)
        ):
            if leaf.dtype != dtype:
                raise TypeError(
                    f"{self.structure.key_repr(i)}: got dtype {leaf.dtype}, expected {dtype} "
                    "(the storage does not cast)."
                )
            expected = torch.Size((n, *shape)) if batched else shape
            if leaf.shape != expected:
                raise ValueError(
                    f"{self.structure.key_repr(i)}: got shape {list(leaf.shape)}, expected "
                    f"{list(expected)}."
                )
        return leaves, n


class CompressedListStorage(Storage):
    """A storage that compresses every item on write and decompresses batches on read.

    Meant for raw sensory observations (image frames) that compress well: an
    Atari-like transition of two ``uint8[4, 84, 84]`` frames takes a few KB
    instead of 56 KB. Every leaf of every item is compressed on its own with
    zstandard (the ``compression`` extra) or, when it is not installed, with
    the standard library's zlib; or with ``compression_fn`` /
    ``decompression_fn``, called once per leaf and item as torchrl does.

    Items are tensors, TensorDicts (non-tensor entries included) or PyTrees of
    tensors (dicts, lists, tuples), of any structure: as torchrl's, one slot
    may hold a tensor and the next a TensorDict (nothing is cast). Reads
    return copies in one piece: ``get(LongTensor[B])`` gives data of the
    stored kind with a leading batch dim ``B`` (a ``TensorDict`` of
    ``batch_size=[B]``, not torchrl's lazy stack), ``get(int)`` one item,
    ``storage[a:b]`` the filled items of that slice; a batch read of items of
    different structures (or shapes, dtypes, non-tensor values) raises
    ``TypeError``: read them one at a time. :meth:`bytes` is the compressed
    size held.

    ``state_dict()`` holds the compressed frames as one ``uint8`` tensor
    with their sizes (no pickle); :meth:`empty` forgets the items and their
    structure.

    Args:
        max_size: number of slots.
        compression_fn: ``fn(tensor) -> uint8 tensor`` (or bytes), applied to each
            leaf of each item; defaults to the codec named above.
        decompression_fn: ``fn(uint8 tensor, metadata) -> tensor``, the inverse;
            ``metadata`` holds ``"type"`` (``"tensor"``), ``"shape"``, ``"dtype"``
            and ``"device"`` of the item's leaf.
        compression_level: level of the default codec (zstd: up to 22, zlib:
            up to 9). Defaults to 3.
        device: device of the read batches. Defaults to ``"cpu"``.
        compilable: accepted for torchrl compatibility; the length here is a
            plain int, which torchrl keeps with ``compilable=True``, so both
            values behave alike.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import CompressedListStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=CompressedListStorage(1000), batch_size=4)
        >>> frames = torch.zeros(10, 4, 84, 84, dtype=torch.uint8)
        >>> _ = rb.extend(TensorDict({"pixels": frames, "action": torch.arange(10)}, [10]))
        >>> rb.sample()["pixels"].shape
        torch.Size([4, 4, 84, 84])
        >>> rb.storage.bytes() < frames.numel() // 100
        True
    """

    _default_checkpointer = CompressedListStorageCheckpointer

    def __init__(
        self,
        max_size: int,
        *,
        compression_fn: CompressFn | None = None,
        decompression_fn: DecompressFn | None = None,
        compression_level: int = 3,
        device: torch.device | str = "cpu",
        compilable: bool = False,
    ) -> None:
        super().__init__(max_size)
        for name, fn in (
            ("compression_fn", compression_fn),
            ("decompression_fn", decompression_fn),
        ):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}.")
        if not isinstance(compilable, bool):
            raise TypeError(f"compilable must be a bool, got {compilable!r}.")
        self.compression_level = compression_level
        self.compression_fn = compression_fn
        self.decompression_fn = decompression_fn
        self._codec: _Codec = _default_codec(compression_level)
        self._device = torch.device(device)
        self._frames: list[Frames | None] = []  # grows with the slots written
        self._kinds: list[int] = []  # each slot's schema, an index of _schemas (-1: none)
        self._schemas: list[_Schema | None] = []  # None: a freed entry, reused
        self._schema_ids: dict[str, int] = {}  # the key of a schema -> its index
        self._schema_refs: list[int] = []  # how many slots hold each schema
        self._nbytes = 0
        self._pool = _GatherPool(torch.uint8, torch.device("cpu"))

    # ----------------------------------------------------------- properties
    @property
    def initialized(self) -> bool:
        """Always True: compressed items need no allocation."""
        return True

    @property
    def device(self) -> torch.device:
        """Device of the read batches."""
        return self._device

    @property
    def codec(self) -> str:
        """How items are compressed: ``"zstd"``, ``"zlib"`` or ``"custom"`` (compression_fn)."""
        return _CUSTOM if self.compression_fn is not None else self._codec.name

    def _holds(self, slot: int) -> bool:
        """A slot below the length that was never written holds nothing."""
        return slot < len(self._frames) and self._frames[slot] is not None

    def bytes(self) -> int:
        """Compressed bytes held by the stored items."""
        return self._nbytes

    def memory_stats(self) -> dict[str, int]:
        """``resident_bytes``: the compressed frames held (no capacity is set aside)."""
        return {"resident_bytes": self._nbytes}

    @property
    def _schema(self) -> _Schema | None:
        """The schema of the lowest filled slot (None when nothing is stored)."""
        for slot, kind in enumerate(self._kinds):
            if kind >= 0 and self._frames[slot] is not None:
                return self._schemas[kind]
        return None

    def __repr__(self) -> str:
        schema = self._schema
        keys = [] if schema is None else schema.structure.leaf_keys()
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, "
            f"codec={self.codec!r}, bytes={self._nbytes}, keys={keys})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # recycled memory (and its lock) stays with this process; codecs and the schema's
        # compiled builders are rebuilt from plain values
        del state["_pool"], state["_codec"], state["_schema_ids"]
        schemas = state.pop("_schemas")
        state["_schema_states"] = [None if s is None else s.state() for s in schemas]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        schemas = state.pop("_schema_states")
        self.__dict__.update(state)
        self._schemas = [None if s is None else _parse_schema(s) for s in schemas]
        self._schema_ids = {_schema_key(s): i for i, s in enumerate(self._schemas) if s is not None}
        self._pool = _GatherPool(torch.uint8, torch.device("cpu"))
        self._codec = _default_codec(self.compression_level)

    # ---------------------------------------------------------------- write
    def _set(self, index: Index, data: Any) -> int:
        index = _as_index(index)
        batched = not isinstance(index, int)
        schema, leaves, n = self._schema_of(data, batched)
        slots, stop = _set_index(index, self._len, self.max_size)
        positions = _positions(slots)
        if len(positions) != n:
            raise ValueError(f"index selects {len(positions)} item(s) but data holds {n}.")
        items = self._compress(leaves, n, batched)  # before any write: a failure changes nothing
        kind = self._register(schema)
        frames, kinds = self._frames, self._kinds
        missing = max(positions, default=-1) + 1 - len(frames)
        if missing > 0:
            frames.extend([None] * missing)
            kinds.extend([-1] * missing)
        for position, item in zip(positions, items, strict=True):
            old = frames[position]
            self._schema_refs[kind] += 1  # before the old item lets go of it (the same one)
            if old is not None:
                self._nbytes -= sum(map(len, old))
                self._release(kinds[position])
            frames[position] = item
            kinds[position] = kind
            self._nbytes += sum(map(len, item))
        if not self._schema_refs[kind]:  # an empty write: the schema stays unheld
            self._schema_refs[kind] = 1
            self._release(kind)
        return stop

    def _schema_of(self, data: Any, batched: bool) -> tuple[_Schema, list[torch.Tensor], int]:
        """The schema of ``data`` (one already held when it matches), its leaves and item count.

        The schema of the newest slot is tried first (no inference); a
        structure with non-tensor entries is inferred again, as their values
        are part of it.
        """
        last = self._schemas[self._kinds[-1]] if self._kinds and self._kinds[-1] >= 0 else None
        if last is not None and not last.structure.has_constants:
            try:
                leaves, n = last.leaves(data, batched)
                return last, leaves, n
            except (TypeError, ValueError, KeyError):
                pass  # another structure: inferred below
        schema = _Schema.infer(data, batched)
        held = self._schema_ids.get(_schema_key(schema))
        if held is not None:
            schema = cast(_Schema, self._schemas[held])
        leaves, n = schema.leaves(data, batched)
        return schema, leaves, n

    def _register(self, schema: _Schema) -> int:
        """The index of ``schema`` among the schemas held (added if new)."""
        key = _schema_key(schema)
        held = self._schema_ids.get(key)
        if held is not None:
            return held
        free = [i for i, s in enumerate(self._schemas) if s is None]
        if free:
            kind = free[0]
            self._schemas[kind], self._schema_refs[kind] = schema, 0
        else:
            kind = len(self._schemas)
            self._schemas.append(schema)
            self._schema_refs.append(0)
        self._schema_ids[key] = kind
        return kind

    def _release(self, kind: int) -> None:
        """One slot fewer holds schema ``kind``; forget it when none does."""
        self._schema_refs[kind] -= 1
        if not self._schema_refs[kind]:
            schema = self._schemas[kind]
            assert schema is not None
            del self._schema_ids[_schema_key(schema)]
            self._schemas[kind] = None

    def _compress(self, leaves: list[torch.Tensor], n: int, batched: bool) -> list[Frames]:
        """One tuple of frames (one per leaf) for each of the ``n`` items."""
        if not batched:
            leaves = [leaf.unsqueeze(0) for leaf in leaves]
        columns = [self._compress_leaf(leaf) for leaf in leaves]
        return list(zip(*columns, strict=True)) if columns else [() for _ in range(n)]

    def _compress_leaf(self, leaf: torch.Tensor) -> list[Frame]:
        fn = self.compression_fn
        if fn is not None:
            return [_as_bytes(fn(item)) for item in leaf.detach()]
        rows = (
            leaf.detach().to("cpu").contiguous().reshape(leaf.shape[0], math.prod(leaf.shape[1:]))
        )
        compress = self._codec.compress
        return [compress(row) for row in rows.view(torch.uint8).numpy()]

    # ----------------------------------------------------------------- read
    def _get(self, index: Index) -> Any:
        slots = _get_index(index, self._len)
        if isinstance(slots, int):
            return self._decode([slots], torch.Size([]))
        if isinstance(slots, range):
            return self._decode(list(slots), torch.Size([len(slots)]))
        return self._decode(slots.reshape(-1).tolist(), slots.shape)

    def _decode(self, positions: list[int], batch: torch.Size) -> Any:
        """Decompress the items at ``positions`` into a batch of shape ``batch``."""
        if not any(kind >= 0 for kind in self._kinds):
            raise RuntimeError("the storage holds no item yet: nothing to read.")
        found = [self._frames[p] for p in positions]
        if None in found:
            hole = positions[found.index(None)]
            raise IndexError(f"slot {hole} was never written: nothing to read there.")
        items = cast(list[Frames], found)
        kinds = sorted({self._kinds[p] for p in positions})
        if len(kinds) > 1:
            first = {
                kind: positions[[self._kinds[p] for p in positions].index(kind)] for kind in kinds
            }
            raise TypeError(
                f"the slots read hold items of {len(kinds)} different structures (slots "
                f"{sorted(first.values())} differ in structure, shapes, dtypes or non-tensor "
                "values): they cannot be read as one batch; read them one at a time."
            )
        if not kinds:  # an empty read: the lowest filled slot's kind
            kinds = [next(kind for kind in self._kinds if kind >= 0)]
        schema = cast(_Schema, self._schemas[kinds[0]])
        if self.decompression_fn is None:
            leaves = self._decode_block(items, schema, batch)
        else:
            leaves = [
                self._decode_custom([item[i] for item in items], shape, dtype, batch)
                for i, (shape, dtype) in enumerate(zip(schema.shapes, schema.dtypes, strict=True))
            ]
        if self._device.type != "cpu":
            leaves = [leaf.to(self._device) for leaf in leaves]
        return schema.structure.build(leaves, batch, self._device)

    def _decode_block(
        self, items: list[Frames], schema: _Schema, batch: torch.Size
    ) -> list[torch.Tensor]:
        """Decompress every frame straight into one recycled block, leaf after leaf.

        Each leaf's frames land one after the other, so the leaf is a
        contiguous piece of the block; the block comes from a pool that reuses
        it once nothing references the previous batch (no fresh pages to
        fault in per batch, see ``_recycle``).
        """
        n = len(items)
        starts = [0]
        for nbytes in schema.nbytes:
            starts.append(starts[-1] + -(-n * nbytes // _ALIGN) * _ALIGN)
        flat = self._pool.take((1, starts[-1])).view(-1)
        block = flat.numpy().data  # a writable memoryview of the block
        decompress = self._codec.decompress
        leaves = []
        for i, (start, nbytes) in enumerate(zip(starts, schema.nbytes, strict=False)):
            pos = start
            try:
                for item in items:
                    block[pos : pos + nbytes] = decompress(item[i])
                    pos += nbytes
            except ValueError:  # a frame of another size than the leaf's
                raise RuntimeError(
                    f"a frame of {schema.structure.key_repr(i)} does not decompress to "
                    f"{nbytes} bytes (shape {list(schema.shapes[i])}, dtype "
                    f"{schema.dtypes[i]}): the frames do not match the storage."
                ) from None
            piece = flat[start:pos].view(schema.dtypes[i])
            leaves.append(piece.view(torch.Size((*batch, *schema.shapes[i]))))
        return leaves

    def _decode_custom(
        self, frames: list[Frame], shape: torch.Size, dtype: torch.dtype, batch: torch.Size
    ) -> torch.Tensor:
        """One leaf of the batch through ``decompression_fn``, one call per item."""
        assert self.decompression_fn is not None
        meta = {"type": "tensor", "shape": shape, "dtype": dtype, "device": self._device}
        parts = [self.decompression_fn(_as_uint8(frame), meta).cpu() for frame in frames]
        out = torch.stack(parts) if parts else torch.empty(0, *shape, dtype=dtype)
        return out.reshape(torch.Size((*batch, *shape)))

    def _empty(self) -> None:
        self._frames, self._kinds = [], []
        self._schemas, self._schema_ids, self._schema_refs = [], {}, []
        self._nbytes = 0

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Compressed content as tensors and plain values (``torch.load(weights_only=True)``-safe).

        Returns:
            ``{"len": filled slots, "codec": how frames were compressed, "structure":
            container description, "spec": {flat key: {"shape", "dtype"}}, "frames": every
            frame of slots ``0 .. len - 1`` joined (uint8), "frame_sizes": int64 [len, leaves]}``.
            When the slots hold items of several structures, ``"schemas"`` lists them
            (each ``{"structure", "spec"}``; the first is also ``"structure"``/``"spec"``),
            ``"kinds"`` (int64 [len]) gives each slot's, and ``"frame_sizes"`` is
            [len, most leaves], -1 past an item's leaves (and in a hole).
        """
        filled = self._len
        items = self._frames[:filled]
        used: dict[int, int] = {}  # schema index -> position in the saved list
        kinds = []
        for slot, item in enumerate(items):
            kind = self._kinds[slot] if item is not None else -1
            if kind >= 0 and kind not in used:
                used[kind] = len(used)
            kinds.append(-1 if kind < 0 else used[kind])
        if not used:
            return {"len": 0, "codec": self.codec, "structure": None, "spec": {}}
        schemas = [cast(_Schema, self._schemas[kind]) for kind in used]
        width = max(len(schema.shapes) for schema in schemas)
        sizes = [
            [-1] * width if item is None else [len(f) for f in item] + [-1] * (width - len(item))
            for item in items
        ]
        joined = bytearray().join(f for item in items if item is not None for f in item)
        state = {
            "len": filled,
            "codec": self.codec,
            **schemas[0].state(),
            "frames": _as_uint8(joined),
            "frame_sizes": torch.tensor(sizes, dtype=torch.int64).reshape(filled, width),
        }
        if len(schemas) > 1:
            state["schemas"] = [schema.state() for schema in schemas]
            state["kinds"] = torch.tensor(kinds, dtype=torch.int64)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (on a misfit: ValueError, storage unchanged)."""
        refuse_compressed(state_dict)
        filled = state_dict.get("len", 0)
        if not isinstance(filled, int) or not 0 <= filled <= self.max_size:
            raise ValueError(
                f"saved len {filled!r} does not fit: expected an int in [0, {self.max_size}]."
            )
        codec = state_dict.get("codec")
        if filled and codec != self.codec:
            raise ValueError(
                f"saved frames were compressed with {codec!r}; this storage decompresses "
                f"{self.codec!r} frames."
            )
        if not filled:
            self.empty()
            return
        if "schemas" in state_dict:
            schemas, kinds = _parse_mixed(state_dict, filled)
            items = _parse_frames(state_dict, filled, [len(schemas[k].shapes) for k in kinds])
            if any((kind < 0) != (item is None) for kind, item in zip(kinds, items, strict=True)):
                raise ValueError("saved 'kinds' must be -1 exactly at the holes of 'frame_sizes'.")
        else:
            schemas = [_parse_schema(state_dict)]
            items = _parse_frames(state_dict, filled, len(schemas[0].shapes))
            kinds = [0] * filled
        kinds = [kind if item is not None else -1 for kind, item in zip(kinds, items, strict=True)]
        self._empty()
        for schema in schemas:
            self._register(schema)  # distinct saved schemas: indices 0, 1, ... in order
        for kind in kinds:
            if kind >= 0:
                self._schema_refs[kind] += 1
        for kind, count in enumerate(list(self._schema_refs)):
            if not count:  # a saved schema no slot holds
                self._schema_refs[kind] = 1
                self._release(kind)
        self._frames, self._kinds = items, kinds
        self._nbytes = sum(sum(map(len, item)) for item in items if item is not None)
        self._len = filled


# --------------------------------------------------------------- helpers
def _positions(slots: int | range | tuple[range, range] | torch.Tensor) -> list[int]:
    """The slots a normalized write index addresses, in order."""
    if isinstance(slots, int):
        return [slots]
    if isinstance(slots, tuple):
        return [*slots[0], *slots[1]]
    if isinstance(slots, range):
        return list(slots)
    return slots.tolist()


def _as_bytes(frame: Any) -> bytes:
    """A compression_fn result (a uint8 tensor or bytes-like) as bytes."""
    if isinstance(frame, torch.Tensor):
        if frame.dtype != torch.uint8:
            raise TypeError(
                f"compression_fn must return a uint8 tensor or bytes, got a {frame.dtype} tensor."
            )
        return frame.detach().to("cpu").contiguous().numpy().tobytes()
    if isinstance(frame, (bytes, bytearray, memoryview)):
        return bytes(frame)
    raise TypeError(
        f"compression_fn must return a uint8 tensor or bytes, got {type(frame).__name__}."
    )


def _as_uint8(frame: bytes | bytearray) -> torch.Tensor:
    """A writable uint8 tensor over ``frame`` (copied unless it is a bytearray)."""
    if not frame:
        return torch.empty(0, dtype=torch.uint8)
    if isinstance(frame, bytes):
        frame = bytearray(frame)
    return torch.frombuffer(frame, dtype=torch.uint8)


def _parse_dtype(name: Any, key: str) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"saved spec of {key!r} names an unknown dtype {name!r}.")
    return dtype


def _parse_schema(state_dict: dict[str, Any]) -> _Schema:
    structure = _Structure.from_state(state_dict.get("structure"))
    spec = state_dict.get("spec") or {}
    shapes, dtypes = [], []
    for name in structure.names:
        entry = spec.get(name)
        if not isinstance(entry, dict) or "shape" not in entry or "dtype" not in entry:
            raise ValueError(f"saved spec lacks key {name!r} (spec keys: {list(spec)}).")
        shapes.append(torch.Size(int(x) for x in entry["shape"]))
        dtypes.append(_parse_dtype(entry["dtype"], name))
    return _Schema(structure, shapes, dtypes)


def _parse_mixed(state_dict: dict[str, Any], filled: int) -> tuple[list[_Schema], list[int]]:
    """The saved schemas and each slot's (a state of items of several structures)."""
    saved = state_dict.get("schemas")
    if not isinstance(saved, list) or not saved:
        raise ValueError("saved 'schemas' must be a non-empty list of {'structure', 'spec'}.")
    schemas = [_parse_schema(entry) for entry in saved]
    keys = [_schema_key(schema) for schema in schemas]
    if len(set(keys)) != len(keys):
        raise ValueError("saved 'schemas' must be distinct.")
    kinds = state_dict.get("kinds")
    if (
        not isinstance(kinds, torch.Tensor)
        or kinds.dtype != torch.int64
        or tuple(kinds.shape) != (filled,)
        or bool(((kinds < -1) | (kinds >= len(schemas))).any())
    ):
        raise ValueError(
            f"saved 'kinds' must be an int64 tensor of shape [{filled}] holding -1 (a hole) "
            f"or an index of 'schemas' (0 .. {len(schemas) - 1})."
        )
    return schemas, kinds.tolist()


def _parse_frames(
    state_dict: dict[str, Any], filled: int, leaves: int | list[int]
) -> list[Frames | None]:
    """Split the saved frames back into one tuple per item, None for a hole (checked first).

    ``leaves``: the leaves of every item, or of each (items of several structures;
    -1 in a slot's kind marks a hole there, and the sizes past its leaves are -1).
    """
    counts = [leaves] * filled if isinstance(leaves, int) else leaves
    frames, sizes = state_dict.get("frames"), state_dict.get("frame_sizes")
    if not isinstance(frames, torch.Tensor) or frames.dtype != torch.uint8 or frames.ndim != 1:
        raise ValueError("saved 'frames' must be a 1-D uint8 tensor.")
    width = max(counts, default=0)
    if (
        not isinstance(sizes, torch.Tensor)
        or sizes.dtype != torch.int64
        or tuple(sizes.shape) != (filled, width)
    ):
        raise ValueError(
            f"saved 'frame_sizes' must be an int64 tensor of shape [{filled}, {width}]."
        )
    rows = sizes.tolist()
    holes = [
        bool(count) and all(size < 0 for size in row)
        for row, count in zip(rows, counts, strict=True)
    ]
    kept = [
        size
        for row, count, hole in zip(rows, counts, holes, strict=True)
        if not hole
        for size in row[:count]
    ]
    padding_ok = all(
        all(size == -1 for size in row[count:]) for row, count in zip(rows, counts, strict=True)
    )
    if min(kept, default=0) < 0 or sum(kept) != frames.numel() or not padding_ok:
        raise ValueError(
            f"saved 'frame_sizes' must be >= 0 (-1 for a whole hole, and past an item's "
            f"leaves) and add up to the {frames.numel()} bytes of 'frames', got a total of "
            f"{sum(size for size in kept if size > 0)}."
        )
    blob = frames.contiguous().numpy().tobytes()
    out: list[Frames | None] = []
    position = 0
    for row, count, hole in zip(rows, counts, holes, strict=True):
        if hole:
            out.append(None)
            continue
        item = []
        for size in row[:count]:
            item.append(blob[position : position + size])
            position += size
        out.append(tuple(item))
    return out


def _schema_key(schema: _Schema) -> str:
    """What identifies a schema: its structure (non-tensor values included), shapes, dtypes."""
    return repr(schema.state())
