"""The structure of what a tensor storage holds: a Tensor, a TensorDict or a PyTree of tensors.

A :class:`_Structure` is inferred from the first write. It flattens later
data into its list of leaf tensors (checking the container kinds and keys on
the way), rebuilds a sample of the same kind from leaf tensors, and describes
itself as plain JSON-able values so that a saved storage can be rebuilt.

A ragged lazy stack (a ``LazyStackedTensorDict`` stacked along an item dim whose
members differ in shapes or keys, as torchrl's storages keep) is a node of its own:
each member is stored as a TensorDict of its own leaves (named by the member's
position), and reads stack the members again lazily along the same dim.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

import torch
from tensordict import (
    LazyStackedTensorDict,
    NonTensorData,
    TensorDict,
    TensorDictBase,
    is_non_tensor,
    is_tensorclass,
)

from rbdata.errors import _PytreeMismatch
from rbdata.storages._td_unsafe import new_td

_LEAF = "tensor"
_TD = "tensordict"
_DICT = "dict"
_LIST = "list"
_TUPLE = "tuple"
_TC = "tensorclass"  # one child: the TensorDict the tensorclass wraps
_CONST = "const"  # a non-tensor entry of a TensorDict: one value for every item
# a ragged lazy stack: one child per member; extra = [stack dim among the item dims, item dims]
_LAZY = "lazystack"
_KINDS = (_LEAF, _TD, _DICT, _LIST, _TUPLE, _TC, _CONST, _LAZY)
# Tensorclasses seen in this process, by "module:qualname": a saved structure names its class
# and loading only looks it up here or among modules already imported (it never imports one).
_TENSORCLASSES: dict[str, type[Any]] = {}
_SINGLE_TENSOR_NAME = "data"

PathKey = tuple[str | int, ...]
_Builder = Callable[[list[torch.Tensor], torch.Size, torch.device], Any]


class _Node:
    """One container (or leaf) of the structure."""

    __slots__ = ("kind", "keys", "children", "batch", "extra")

    def __init__(
        self,
        kind: str,
        keys: list[str | int] | None = None,
        children: list[_Node] | None = None,
        batch: tuple[int, ...] = (),
        extra: Any = None,
    ) -> None:
        self.kind = kind
        self.keys = keys
        self.children = children or []
        self.batch = batch
        self.extra = extra  # a tensorclass's class name, a constant's value, a lazy stack's dims

    @property
    def mapping_keys(self) -> list[str | int]:
        """The keys of a TensorDict or dict node (in order)."""
        if self.keys is None:
            raise TypeError(f"a {self.kind} node has no keys.")
        return self.keys

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.keys is not None:
            out["keys"] = list(self.keys)
        if self.kind != _LEAF:
            out["children"] = [child.state() for child in self.children]
        if self.kind == _TD:
            out["batch"] = list(self.batch)
        if self.kind in (_TC, _CONST):
            out["extra"] = self.extra
        if self.kind == _LAZY:
            out["extra"] = list(self.extra)
        return out


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _tensorclass(name: Any) -> type[Any]:
    """The tensorclass a saved structure names (never imported: known or already loaded)."""
    if not isinstance(name, str) or ":" not in name:
        raise ValueError(f"malformed tensorclass name in a storage structure: {name!r}.")
    cls = _TENSORCLASSES.get(name)
    if cls is None:
        module_name, qualname = name.split(":", 1)
        module = sys.modules.get(module_name)
        found: Any = module
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is None or not is_tensorclass(found):
            raise ValueError(
                f"the saved data holds tensorclass {name}, which is not loaded: import the module "
                "defining it before loading (rbdata never imports a module a file names)."
            )
        cls = _TENSORCLASSES[name] = found
    return cls


def _constant(value: Any, path: PathKey) -> _Node:
    """The node of a non-tensor entry (one JSON-able value for the whole batch)."""
    data = value.tolist() if hasattr(value, "tolist") else value.data
    if isinstance(data, list):
        distinct = {repr(d) for d in data}
        if len(distinct) > 1:
            raise TypeError(
                f"non-tensor entry at {_key_repr(path)} holds different values per item; a "
                "tensor storage keeps one value for all items (use a ListStorage)."
            )
        data = data[0] if data else None
    if not isinstance(data, str | int | float | bool | type(None)):
        raise TypeError(
            f"non-tensor entry at {_key_repr(path)} holds a {type(data).__name__}; a tensor "
            "storage keeps str, int, float, bool or None values only."
        )
    return _Node(_CONST, extra=data)


def _key_repr(path: PathKey) -> str:
    if not path:
        return "the data"
    return repr(path[0]) if len(path) == 1 else repr(path)


def _infer(data: Any, lead: int, path: PathKey, paths: list[PathKey]) -> _Node:
    """Build the node of ``data``; ``lead`` leading dims of every tensor are storage dims."""
    if isinstance(data, torch.Tensor):
        paths.append(path)
        return _Node(_LEAF)
    if is_non_tensor(data):  # (NonTensorData is a tensorclass too: check it first)
        return _constant(data, path)
    if is_tensorclass(data):
        name = _class_name(type(data))
        _TENSORCLASSES[name] = type(data)
        return _Node(_TC, children=[_infer(data._tensordict, lead, path, paths)], extra=name)
    if isinstance(data, LazyStackedTensorDict) and data.stack_dim >= lead and _ragged(data):
        children = [
            _infer(member, lead, (*path, i), paths) for i, member in enumerate(data.tensordicts)
        ]
        return _Node(_LAZY, None, children, extra=(data.stack_dim - lead, data.batch_dims - lead))
    if isinstance(data, TensorDictBase):
        if data.batch_dims < lead:
            raise ValueError(
                f"TensorDict at {_key_repr(path)} has batch_size {list(data.batch_size)}; "
                f"expected at least {lead} leading batch dim(s) (the storage dims)."
            )
        keys: list[str | int] = []
        children = []
        for name, value in data.items():
            keys.append(name)
            children.append(_infer(value, lead, (*path, name), paths))
        return _Node(_TD, keys, children, tuple(data.batch_size[lead:]))
    if isinstance(data, Mapping):
        keys = list(data.keys())
        for key in keys:
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise TypeError(f"dict keys must be str or int, got {key!r} at {_key_repr(path)}.")
        children = [_infer(data[key], lead, (*path, key), paths) for key in keys]
        return _Node(_DICT, keys, children)
    if isinstance(data, (list, tuple)):
        kind = _TUPLE if isinstance(data, tuple) else _LIST
        children = [_infer(value, lead, (*path, i), paths) for i, value in enumerate(data)]
        return _Node(kind, None, children)
    raise TypeError(
        f"a tensor storage holds tensors, TensorDicts, dicts, lists and tuples; got "
        f"{type(data).__name__} at {_key_repr(path)}."
    )


def _ragged(data: LazyStackedTensorDict) -> bool:
    """Whether the members of a lazy stack differ in keys or shapes (no dense view exists)."""
    members = data.tensordicts
    try:
        keys = set(members[0].keys(True, True))
        for member in members[1:]:
            if set(member.keys(True, True)) != keys:
                return True
        return any(len({member.get(key).shape for member in members}) > 1 for key in keys)
    except RuntimeError:  # a member is itself a ragged lazy stack
        return True


def _stack_dims(state: Mapping[str, Any]) -> tuple[int, int]:
    """The ``extra`` of a saved lazy-stack node: (stack dim among the item dims, item dims)."""
    extra = state.get("extra")
    if (
        not isinstance(extra, list | tuple)
        or len(extra) != 2
        or not all(type(v) is int for v in extra)
        or not 0 <= extra[0] < extra[1]
    ):
        raise ValueError(f"malformed storage structure description: {state!r}.")
    return int(extra[0]), int(extra[1])


def _lazy_members(node: _Node, data: Any) -> list[TensorDictBase] | None:
    """The members of ``data`` if it is a lazy stack laid out as ``node``, else None."""
    rel, item_dims = node.extra
    if (
        not isinstance(data, LazyStackedTensorDict)
        or len(data.tensordicts) != len(node.children)
        or data.stack_dim - (data.batch_dims - item_dims) != rel
    ):
        return None
    return list(data.tensordicts)


def _from_state(state: Any) -> _Node:
    if not isinstance(state, Mapping) or state.get("kind") not in _KINDS:
        raise ValueError(f"malformed storage structure description: {state!r}.")
    kind = state["kind"]
    if kind == _LEAF:
        return _Node(_LEAF)
    if kind == _CONST:
        return _Node(_CONST, extra=state.get("extra"))
    children = [_from_state(child) for child in state.get("children", [])]
    if kind == _LAZY:
        if not children or any(child.kind not in (_TD, _LAZY) for child in children):
            raise ValueError(f"malformed storage structure description: {state!r}.")
        return _Node(_LAZY, None, children, extra=_stack_dims(state))
    keys = state.get("keys")
    if kind in (_TD, _DICT) and (keys is None or len(keys) != len(children)):
        raise ValueError(f"malformed storage structure description: {state!r}.")
    if kind == _TC:
        if len(children) != 1 or children[0].kind != _TD:
            raise ValueError(f"malformed storage structure description: {state!r}.")
        _tensorclass(state.get("extra"))  # the class must be known before anything is built
        return _Node(_TC, children=children, extra=state["extra"])
    return _Node(
        kind, list(keys) if keys is not None else None, children, tuple(state.get("batch", ()))
    )


def _collect_paths(node: _Node, path: PathKey, out: list[PathKey]) -> None:
    if node.kind == _LEAF:
        out.append(path)
    elif node.kind == _TC:
        _collect_paths(node.children[0], path, out)
    elif node.kind == _CONST:
        return
    elif node.kind in (_TD, _DICT):
        for key, child in zip(node.mapping_keys, node.children, strict=True):
            _collect_paths(child, (*path, key), out)
    else:
        for i, child in enumerate(node.children):
            _collect_paths(child, (*path, i), out)


def _holds_constants(node: _Node) -> bool:
    """Whether a non-tensor entry (one value for every item) lies in ``node``."""
    return node.kind == _CONST or any(_holds_constants(child) for child in node.children)


class _Structure:
    """The container structure of the stored data and its leaf order.

    Args:
        root: the root node.
    """

    def __init__(self, root: _Node) -> None:
        self.root = root
        self.paths: list[PathKey] = []
        _collect_paths(root, (), self.paths)
        if not self.paths:
            raise ValueError("the data holds no tensor: a tensor storage needs at least one.")
        self.names = [
            ".".join(str(part) for part in path) or _SINGLE_TENSOR_NAME for path in self.paths
        ]
        if len(set(self.names)) != len(self.names):
            raise ValueError(
                f"leaf keys {self.paths} give clashing flat names {self.names}; rename the keys "
                "that contain '.'."
            )
        self._index = {path: i for i, path in enumerate(self.paths)}
        self.has_constants = _holds_constants(root)
        counter = iter(range(len(self.paths)))
        #: ``build(leaves, batch, device)``: data of the stored kind rebuilt from ``leaves``
        #: with leading batch shape ``batch`` (the compiled builder itself: no call between)
        self.build: _Builder = _compile(root, counter)
        self._fast_flatten = _compile_flatten(root)

    @classmethod
    def infer(cls, data: Any, lead: int) -> tuple[_Structure, list[torch.Tensor]]:
        """Infer the structure of ``data`` and return it with the leaves of ``data``."""
        paths: list[PathKey] = []
        structure = cls(_infer(data, lead, (), paths))
        return structure, structure.flatten(data)

    @classmethod
    def from_state(cls, state: Any) -> _Structure:
        """Rebuild a structure from :meth:`state`'s output (ValueError if malformed)."""
        return cls(_from_state(state))

    def state(self) -> dict[str, Any]:
        """JSON-able description of the structure (container kinds, keys, batch dims)."""
        return self.root.state()

    @property
    def is_tensordict(self) -> bool:
        """Whether the root is a TensorDict."""
        return self.root.kind == _TD

    def leaf_keys(self) -> list[Any]:
        """Leaf keys: a top-level key as is, a nested key as a tuple, ``()`` for a single tensor."""
        return [path[0] if len(path) == 1 else path for path in self.paths]

    def leaf_index(self, key: Any) -> int:
        """Position of the leaf named ``key`` (a key, a tuple of keys or ``()``)."""
        path = key if isinstance(key, tuple) else (key,)
        try:
            return self._index[path]
        except (KeyError, TypeError):
            raise KeyError(
                f"key {key!r} is not in the storage; stored keys: {self.leaf_keys()}."
            ) from None

    def key_repr(self, i: int) -> str:
        """How error messages name leaf ``i``."""
        return _key_repr(self.paths[i])

    def flatten(self, data: Any) -> list[torch.Tensor]:
        """Leaves of ``data``, in storage order; TypeError/KeyError if its structure differs."""
        out: list[torch.Tensor] = []
        try:
            self._fast_flatten(data, out)
        except (_PytreeMismatch, KeyError):
            out = []
            _flatten(self.root, data, (), out)
        return out


def _mismatch(path: PathKey, expected: str, data: Any) -> TypeError:
    return TypeError(
        f"data does not match the stored structure at {_key_repr(path)}: expected {expected}, "
        f"got {type(data).__name__}."
    )


def _check_keys(node: _Node, path: PathKey, given: Any) -> None:
    """Raise the KeyError that names the missing and extra (full, nested) keys."""
    expected = set(node.mapping_keys)
    missing: list[PathKey] = []
    for key, child in zip(node.mapping_keys, node.children, strict=True):
        if key not in given:
            _collect_paths(child, (*path, key), missing)
    extra = [(*path, key) for key in given if key not in expected]
    leaves: list[PathKey] = []
    _collect_paths(node, path, leaves)

    def show(paths: list[PathKey]) -> list[Any]:
        return [p[0] if len(p) == 1 else p for p in paths]

    raise KeyError(
        f"data keys do not match the storage: missing {show(missing)}, extra {show(extra)}; "
        f"expected keys {show(leaves)}."
    )


def _flatten(node: _Node, data: Any, path: PathKey, out: list[torch.Tensor]) -> None:
    kind = node.kind
    if kind == _LEAF:
        if not isinstance(data, torch.Tensor):
            raise _mismatch(path, "a tensor", data)
        out.append(data)
        return
    if kind == _CONST:
        return
    if kind == _TC:
        if is_non_tensor(data) or _class_name(type(data)) != node.extra:
            raise _mismatch(path, f"a {node.extra} tensorclass", data)
        _flatten(node.children[0], data._tensordict, path, out)
        return
    if kind in (_TD, _DICT):
        if kind == _TD and not isinstance(data, TensorDictBase):
            raise _mismatch(path, "a TensorDict", data)
        if kind == _DICT and (not isinstance(data, Mapping) or isinstance(data, TensorDictBase)):
            raise _mismatch(path, "a dict", data)
        items = dict(data.items())
        keys = node.mapping_keys
        if len(items) != len(keys) or any(k not in items for k in keys):
            _check_keys(node, path, items)
        for key, child in zip(keys, node.children, strict=True):
            _flatten(child, items[key], (*path, key), out)
        return
    if kind == _LAZY:
        members = _lazy_members(node, data)
        if members is None:
            raise _mismatch(
                path,
                f"a LazyStackedTensorDict of {len(node.children)} TensorDicts stacked along "
                f"item dim {node.extra[0]}",
                data,
            )
        for i, (member, child) in enumerate(zip(members, node.children, strict=True)):
            _flatten(child, member, (*path, i), out)
        return
    if not isinstance(data, tuple if kind == _TUPLE else list):
        raise _mismatch(path, f"a {kind}", data)
    if len(data) != len(node.children):
        raise TypeError(
            f"data does not match the stored structure at {_key_repr(path)}: expected a {kind} "
            f"of {len(node.children)} elements, got {len(data)}."
        )
    for i, (value, child) in enumerate(zip(data, node.children, strict=True)):
        _flatten(child, value, (*path, i), out)


def _compile_flatten(node: _Node) -> Callable[[Any, list[torch.Tensor]], None]:
    """Return a fast flattener of ``node``: appends the leaves, raises _PytreeMismatch/KeyError."""
    tensor = torch.Tensor
    if node.kind == _LEAF:

        def flatten_leaf(data: Any, out: list[torch.Tensor]) -> None:
            if not isinstance(data, tensor):
                raise _PytreeMismatch
            out.append(data)

        return flatten_leaf
    if node.kind == _CONST:
        return lambda data, out: None
    if node.kind == _TC:
        inner = _compile_flatten(node.children[0])
        name = node.extra

        def flatten_tensorclass(data: Any, out: list[torch.Tensor]) -> None:
            if _class_name(type(data)) != name:
                raise _PytreeMismatch
            inner(data._tensordict, out)

        return flatten_tensorclass
    if node.kind == _LAZY:
        members_of = [_compile_flatten(child) for child in node.children]

        def flatten_lazy(data: Any, out: list[torch.Tensor]) -> None:
            members = _lazy_members(node, data)
            if members is None:
                raise _PytreeMismatch
            for member, sub in zip(members, members_of, strict=True):
                sub(member, out)

        return flatten_lazy
    # children that are leaves are inlined (None) to save a call per leaf
    subs = [None if c.kind == _LEAF else _compile_flatten(c) for c in node.children]
    count = len(subs)
    if node.kind in (_TD, _DICT):
        pairs = list(zip(node.mapping_keys, subs, strict=True))
        is_td = node.kind == _TD

        def flatten_mapping(data: Any, out: list[torch.Tensor]) -> None:
            if is_td and type(data) is TensorDict:
                items = data._tensordict
            elif isinstance(data, TensorDictBase if is_td else dict):
                items = dict(data.items())
            else:
                raise _PytreeMismatch
            if len(items) != count:
                raise _PytreeMismatch
            for key, sub in pairs:
                value = items[key]
                if sub is not None:
                    sub(value, out)
                elif isinstance(value, tensor):
                    out.append(value)
                else:
                    raise _PytreeMismatch

        return flatten_mapping
    container = tuple if node.kind == _TUPLE else list

    def flatten_sequence(data: Any, out: list[torch.Tensor]) -> None:
        if not isinstance(data, container) or len(data) != count:
            raise _PytreeMismatch
        for value, sub in zip(data, subs, strict=True):
            if sub is not None:
                sub(value, out)
            elif isinstance(value, tensor):
                out.append(value)
            else:
                raise _PytreeMismatch

    return flatten_sequence


def _compile(node: _Node, counter: Any) -> _Builder:
    """Return a function building ``node`` from the leaves (leaf order = depth-first order)."""
    kind = node.kind
    if kind == _LEAF:
        i = next(counter)
        build_leaf: Any = lambda leaves, batch, device: leaves[i]  # noqa: E731
        build_leaf.leaf_index = i  # what a TensorDict builder picks directly
        return build_leaf  # type: ignore[no-any-return]
    if kind == _CONST:
        value = node.extra
        return lambda leaves, batch, device: NonTensorData(value, batch_size=batch, device=device)
    parts = [_compile(child, counter) for child in node.children]
    if kind == _TC:
        cls, build_inner = _tensorclass(node.extra), parts[0]
        return lambda leaves, batch, device: cls._from_tensordict(
            build_inner(leaves, batch, device)
        )
    if kind == _TD:
        return _compile_td(node, parts)
    if kind == _LAZY:
        rel = node.extra[0]
        return lambda leaves, batch, device: LazyStackedTensorDict(
            *[p(leaves, batch, device) for p in parts], stack_dim=len(batch) + rel
        )
    if kind == _DICT:
        pairs = list(zip(node.mapping_keys, parts, strict=True))
        return lambda leaves, batch, device: {k: p(leaves, batch, device) for k, p in pairs}
    container = tuple if kind == _TUPLE else list
    return lambda leaves, batch, device: container(p(leaves, batch, device) for p in parts)


def _compile_td(node: _Node, parts: list[_Builder]) -> _Builder:
    """The builder of a TensorDict node: its leaf children taken straight from the leaves.

    The storage guarantees what a TensorDict would check (every leaf has the
    batch shape, one device), so the TensorDict is made without validation
    (``_td_unsafe.new_td``). The children that are leaves come first in
    the key order, as data stored from a TensorDict usually has them (nested
    TensorDicts last): they are picked out of the leaf list with one
    ``itemgetter`` call, the nested ones built after them. Any other order is
    built child by child, so that the keys keep their order.
    """
    keys, children = node.mapping_keys, node.children
    extra = node.batch
    flat = [child.kind == _LEAF for child in children]
    n_flat = sum(flat)

    def size_of(batch: torch.Size) -> torch.Size:
        return torch.Size((*batch, *extra))

    if flat != [True] * n_flat + [False] * (len(flat) - n_flat) or n_flat < 2:
        pairs = list(zip(keys, parts, strict=True))

        def build_td(leaves: list[torch.Tensor], batch: torch.Size, device: torch.device) -> Any:
            source: dict[Any, Any] = {key: part(leaves, batch, device) for key, part in pairs}
            return new_td(source, size_of(batch) if extra else batch, device)

        return build_td
    leaf_keys = keys[:n_flat]
    pick = itemgetter(*[getattr(part, "leaf_index") for part in parts[:n_flat]])  # noqa: B009
    nested = list(zip(keys[n_flat:], parts[n_flat:], strict=True))
    if not nested and not extra:

        def build_leaves(
            leaves: list[torch.Tensor], batch: torch.Size, device: torch.device
        ) -> Any:
            # no strict=True: pick returns one leaf per key (strict costs 0.2 us a batch)
            source: dict[Any, Any] = dict(zip(leaf_keys, pick(leaves)))  # noqa: B905
            return new_td(source, batch, device)

        return build_leaves

    def build_flat_first(
        leaves: list[torch.Tensor], batch: torch.Size, device: torch.device
    ) -> Any:
        source: dict[Any, Any] = dict(zip(leaf_keys, pick(leaves)))  # noqa: B905 (as above)
        for key, part in nested:
            source[key] = part(leaves, batch, device)
        return new_td(source, size_of(batch) if extra else batch, device)

    return build_flat_first
