"""The payload codec: tensors and TensorDicts as a few numpy buffers, for Ray's object store.

Ray pickles a torch tensor by value (a copy into the pickle stream, another
out of it) but hands numpy arrays over out of band: written once into the
object store and read back without a copy. :func:`encode` therefore turns a
value into a :class:`Payload`: its structure, with every tensor replaced by a
:class:`_Leaf` (dtype, shape, strides, where its bytes are), and a short list
of uint8 numpy buffers holding those bytes.

- Leaves that view one large storage (a batch gathered as packed rows, all
  its keys views of one block) travel as that storage, whole, without a copy.
- Other leaves, small ones in particular, are copied side by side into one
  packed buffer, so a batch of many small leaves is one buffer, not many.

:func:`decode` rebuilds the value with tensors that view the buffers (no
copy). :func:`pack_into` writes a payload's buffers into caller-provided
memory, :func:`encode_into` lays a value out in a shared-memory slot (leaving
in place the tensors already read into it), and :func:`unpack` reads either
from there.
Values that hold no tensor go through unchanged; so do tensors Ray cannot
view as bytes (sparse, nested, quantized), which are pickled by value.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["Packed", "Payload", "decode", "encode", "encode_into", "pack_into", "unpack"]

_ALIGN = 64  # byte alignment of every leaf in the packed buffer and of every buffer in a slot
_WHOLE_MIN_BYTES = 64 * 1024  # storages at least this big may travel whole...
_WHOLE_MAX_WASTE = 2.0  # ...when at most this many times the bytes their leaves use


class _Leaf(NamedTuple):  # a NamedTuple: cheap to build (a reply holds one per tensor)
    """A tensor of the encoded value: ``buffer``'s bytes from ``offset`` viewed as dtype/shape."""

    buffer: int
    offset: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]


@dataclass(frozen=True)
class _Dict:
    """A TensorDict of the encoded value (its entries encoded, nested ones included)."""

    batch_size: tuple[int, ...]
    entries: dict[str, Any]


@dataclass(frozen=True)
class Payload:
    """An encoded value: its structure and the bytes of its tensors.

    Attributes:
        tree: the value with :class:`_Leaf` / :class:`_Dict` placeholders.
        buffers: uint8 numpy arrays holding the tensors' bytes.

    Examples:
        >>> import torch
        >>> from rbdata.service.transport.codec import decode, encode
        >>> payload = encode({"a": torch.arange(3), "b": (torch.ones(2), "text")})
        >>> len(payload.buffers)
        1
        >>> out = decode(payload)
        >>> out["a"].tolist(), out["b"][0].tolist(), out["b"][1]
        ([0, 1, 2], [1.0, 1.0], 'text')
    """

    tree: Any
    buffers: list[np.ndarray]

    @property
    def nbytes(self) -> int:
        """Bytes in the buffers (what a shared-memory slot must hold, alignment included)."""
        return sum(_aligned(b.nbytes) for b in self.buffers)


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _viewable(t: torch.Tensor) -> bool:
    return t.layout is torch.strided and not t.is_quantized and not t.is_nested


class _Encoder:
    """Collects the leaves of one value, then lays their bytes out in buffers."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []

    def walk(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if not _viewable(value):
                return value
            self.tensors.append(value.detach().cpu())
            return len(self.tensors) - 1  # an int placeholder, turned into a _Leaf in layout()
        if isinstance(value, TensorDictBase):
            entries = {key: self.walk(item) for key, item in value.items()}
            return _Dict(tuple(value.batch_size), entries)
        if type(value) in (list, tuple):
            return type(value)(self.walk(v) for v in value)
        if type(value) is dict:
            return {k: self.walk(v) for k, v in value.items()}
        return _Opaque(value)

    def layout(self) -> tuple[list[_Leaf], list[np.ndarray]]:
        buffers: list[np.ndarray] = []
        leaves: list[_Leaf | None] = [None] * len(self.tensors)
        groups: dict[int, list[int]] = {}
        for i, t in enumerate(self.tensors):
            groups.setdefault(t.untyped_storage().data_ptr(), []).append(i)
        packed: list[int] = []
        for members in groups.values():
            storage = self.tensors[members[0]].untyped_storage()
            used = sum(self.tensors[i].numel() * self.tensors[i].element_size() for i in members)
            whole = storage.nbytes()
            if whole >= _WHOLE_MIN_BYTES and whole <= _WHOLE_MAX_WASTE * used:
                buffers.append(_storage_array(storage))
                for i in members:
                    t = self.tensors[i]
                    leaves[i] = _Leaf(
                        len(buffers) - 1,
                        int(t.storage_offset()) * t.element_size(),
                        t.dtype,
                        tuple(t.shape),
                        tuple(t.stride()),
                    )
            else:
                packed.extend(members)
        if packed:
            offsets, total = [], 0
            for i in packed:
                offsets.append(total)
                t = self.tensors[i]
                total += _aligned(t.numel() * t.element_size())
            pack = np.empty(total, dtype=np.uint8)
            base = torch.from_numpy(pack)
            for i, offset in zip(packed, offsets, strict=True):
                t = self.tensors[i]
                shape = tuple(t.shape)
                out = _view(base, offset, t.dtype, shape, _contiguous_stride(shape))
                out.copy_(t)
                leaves[i] = _Leaf(len(buffers), offset, t.dtype, shape, _contiguous_stride(shape))
            buffers.append(pack)
        return [leaf for leaf in leaves if leaf is not None], buffers


@dataclass(frozen=True)
class _Opaque:
    """A non-tensor value of the encoded structure, carried as it is."""

    value: Any


def _storage_array(storage: torch.UntypedStorage) -> np.ndarray:
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy()


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(shape):
        stride.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(stride))


def _view(
    base: torch.Tensor, offset: int, dtype: torch.dtype, shape: tuple[int, ...], stride: Any
) -> torch.Tensor:
    """``base``'s bytes from ``offset`` viewed as a ``dtype`` tensor (no copy)."""
    size = torch.empty((), dtype=dtype).element_size()
    start = base.storage_offset() + offset
    return torch.empty(0, dtype=dtype).set_(base.untyped_storage(), start // size, shape, stride)


def encode(value: Any) -> Payload:
    """Encode ``value`` (tensors, TensorDicts, and lists/tuples/dicts of them) as a Payload.

    Tensors are moved to CPU and detached; the payload's buffers may view
    their memory (no copy), so do not write into them until the payload is sent.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata.service.transport.codec import decode, encode
        >>> td = TensorDict({"obs": torch.zeros(4, 3), "next": {"r": torch.ones(4)}}, [4])
        >>> back = decode(encode(td))
        >>> back.batch_size, back["next", "r"].tolist()
        (torch.Size([4]), [1.0, 1.0, 1.0, 1.0])
    """
    encoder = _Encoder()
    tree = encoder.walk(value)
    if not encoder.tensors:
        return Payload(tree, [])
    leaves, buffers = encoder.layout()
    return Payload(_place(tree, leaves), buffers)


def _place(tree: Any, leaves: list[_Leaf]) -> Any:
    if type(tree) is int:
        return leaves[tree]
    if isinstance(tree, _Dict):
        return _Dict(tree.batch_size, {k: _place(v, leaves) for k, v in tree.entries.items()})
    if type(tree) in (list, tuple):
        return type(tree)(_place(v, leaves) for v in tree)
    if type(tree) is dict:
        return {k: _place(v, leaves) for k, v in tree.items()}
    return tree


@dataclass(frozen=True)
class Packed:
    """A payload whose buffers were copied into one block of memory (a shared-memory slot).

    Attributes:
        tree: the payload's structure.
        offsets: where each buffer starts in the block.
        sizes: each buffer's length in bytes.
    """

    tree: Any
    offsets: list[int]
    sizes: list[int]


def pack_into(payload: Payload, memory: torch.Tensor) -> Packed:
    """Copy ``payload``'s buffers into ``memory`` (a uint8 tensor); read it with :func:`unpack`.

    Raises:
        ValueError: if ``memory`` holds fewer than ``payload.nbytes`` bytes.

    Examples:
        >>> import torch
        >>> from rbdata.service.transport.codec import encode, pack_into, unpack
        >>> payload = encode(torch.arange(4))
        >>> slot = torch.empty(payload.nbytes, dtype=torch.uint8)
        >>> unpack(pack_into(payload, slot), slot).tolist()
        [0, 1, 2, 3]
    """
    if memory.numel() < payload.nbytes:
        raise ValueError(
            f"memory holds {memory.numel()} bytes, the payload needs {payload.nbytes}."
        )
    offsets, sizes, at = [], [], 0
    for buffer in payload.buffers:
        n = buffer.nbytes
        memory[at : at + n].copy_(torch.from_numpy(buffer))
        offsets.append(at)
        sizes.append(n)
        at += _aligned(n)
    return Packed(payload.tree, offsets, sizes)


def encode_into(value: Any, memory: torch.Tensor) -> Packed | None:
    """Lay ``value`` out in ``memory`` (a uint8 tensor, a slot); read it with :func:`unpack`.

    Tensors that already view ``memory`` (a batch read into the slot) stay
    where they are; the others are copied after the last of those. One
    tensor met twice (a batch entry that is also an info entry) is laid out once.

    Returns:
        The value's layout in ``memory``; None if it does not fit.

    Examples:
        >>> import torch
        >>> from rbdata.service.transport.codec import encode_into, unpack
        >>> slot = torch.zeros(1024, dtype=torch.uint8)
        >>> in_place = slot[:16].view(torch.float32)  # written by the caller
        >>> _ = in_place.copy_(torch.arange(4.0))
        >>> packed = encode_into({"a": in_place, "b": torch.tensor([7, 8])}, slot)
        >>> out = unpack(packed, slot)
        >>> out["a"].tolist(), out["b"].tolist(), packed.tree["a"].offset
        ([0.0, 1.0, 2.0, 3.0], [7, 8], 0)
    """
    layout = _SlotLayout(memory)
    tree = layout.walk(value)
    return layout.finish(tree)


class _SlotLayout:
    """One walk over a value for :func:`encode_into`: tensors in the slot become leaves at once.

    The others get an int placeholder; :meth:`finish` copies them after the
    last byte used in place and puts their leaves in the tree.
    """

    def __init__(self, memory: torch.Tensor) -> None:
        self.memory = memory
        self.start = memory.data_ptr()
        self.size = memory.numel()
        self.used = 0
        self.copies: list[torch.Tensor] = []

    def walk(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.layout is not torch.strided or value.is_quantized or value.is_nested:
                return value  # pickled by value, as encode() does
            offset = value.data_ptr() - self.start  # (no CUDA pointer lies in a CPU mapping)
            if 0 <= offset < self.size and value.numel():
                shape, stride = value.shape, value.stride()
                end = offset + _span_bytes(shape, stride, value.element_size())
                if end <= self.size:
                    self.used = max(self.used, end)
                    return _Leaf(0, offset, value.dtype, tuple(shape), stride)
            self.copies.append(value)
            return len(self.copies) - 1
        if isinstance(value, TensorDictBase):
            entries = {key: self.walk(item) for key, item in value.items()}
            return _Dict(tuple(value.batch_size), entries)
        kind = type(value)
        if kind is tuple or kind is list:
            return kind(self.walk(v) for v in value)
        if kind is dict:
            return {k: self.walk(v) for k, v in value.items()}
        return _Opaque(value)

    def finish(self, tree: Any) -> Packed | None:
        """Copy the tensors not in the slot after the others; None if they do not fit."""
        memory, at = self.memory, _aligned(self.used)
        leaves: list[_Leaf] = []
        seen: dict[tuple[Any, ...], _Leaf] = {}
        for t in self.copies:
            shape = tuple(t.shape)
            key = (t.data_ptr(), t.dtype, shape, t.stride())
            leaf = seen.get(key)
            if leaf is None:
                n = t.numel() * t.element_size()
                if at + n > self.size:
                    return None
                memory[at : at + n].view(t.dtype).view(shape).copy_(t.detach())
                leaf = seen[key] = _Leaf(0, at, t.dtype, shape, _contiguous_stride(shape))
                at += _aligned(n)
            leaves.append(leaf)
        return Packed(_place(tree, leaves) if leaves else tree, [0], [at])


@functools.lru_cache(maxsize=256)  # a stream of same-shaped batches: a few keys
def _span_bytes(shape: tuple[int, ...], stride: tuple[int, ...], itemsize: int) -> int:
    """Bytes from a non-empty tensor's first element to just past its last one."""
    return (1 + sum((n - 1) * st for n, st in zip(shape, stride, strict=True))) * itemsize


def decode(payload: Payload) -> Any:
    """Rebuild the value of ``payload``; its tensors view the payload's buffers (no copy)."""
    if any(not b.flags.writeable for b in payload.buffers):
        # Arrays read out of Ray's object store are flagged read-only, though the memory
        # is the caller's alone: torch warns (once per process) about the flag.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return _build(payload.tree, payload.buffers)
    return _build(payload.tree, payload.buffers)


def unpack(packed: Packed, memory: torch.Tensor) -> Any:
    """Rebuild the value :func:`pack_into` wrote into ``memory``; its tensors view ``memory``."""
    whole = memory.numpy()
    bases = [whole[o : o + n] for o, n in zip(packed.offsets, packed.sizes, strict=True)]
    return _build(packed.tree, bases)


def _leaf_view(base: np.ndarray, leaf: _Leaf) -> torch.Tensor:
    """The tensor ``leaf`` of ``base``, in a storage of its own that starts at its first byte.

    (A storage offset is never left for the consumer: some torch functions ignore it,
    ``Generator.set_state`` for one.)
    """
    size = torch.empty((), dtype=leaf.dtype).element_size()
    if 0 in leaf.shape:
        return torch.empty(leaf.shape, dtype=leaf.dtype)
    span = 1 + sum((n - 1) * st for n, st in zip(leaf.shape, leaf.stride, strict=True))
    flat = torch.frombuffer(base, dtype=torch.uint8, count=span * size, offset=leaf.offset)
    return flat.view(leaf.dtype).as_strided(leaf.shape, leaf.stride)


def _build(tree: Any, bases: list[np.ndarray]) -> Any:
    kind = type(tree)
    if kind is _Leaf:
        return _leaf_view(bases[tree.buffer], tree)
    if kind is _Dict:
        entries = {k: _build(v, bases) for k, v in tree.entries.items()}
        return TensorDict(entries, batch_size=tree.batch_size)
    if kind is _Opaque:
        return tree.value
    if kind in (list, tuple):
        return kind(_build(v, bases) for v in tree)
    if kind is dict:
        return {k: _build(v, bases) for k, v in tree.items()}
    return tree
