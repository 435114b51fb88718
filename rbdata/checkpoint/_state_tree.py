"""The state tree of a dump as JSON: plain values inline, tensors as references to files.

Encoded nodes are JSON values; a JSON object with a single key starting with
``$`` is a tag:

- ``{"$tensor": "3.bin"}``: the tensor stored in that file;
- ``{"$tuple": [...]}``: a tuple;
- ``{"$dict": [[key, value], ...]}``: a dict whose keys are not all plain
  strings (or start with ``$``);
- ``{"$tensordict": {"batch_size": [...], "items": {...}}}``: a TensorDict.

Every other JSON object is a dict with string keys. Nothing else is encoded:
:func:`encode` raises :class:`Unencodable` for any other type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from rbdata.errors import CheckpointError, Unencodable

_PLAIN = (bool, int, float, str)


def encode(value: Any, leaves: list[torch.Tensor], where: str = "") -> Any:
    """The JSON node of ``value``; its tensors are appended to ``leaves`` (``$tensor``: position).

    Raises:
        Unencodable: naming the place of the first value of another type.
    """
    if value is None or type(value) in _PLAIN:
        return value
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_nested or value.is_quantized:
            raise Unencodable(f"{where or 'the value'} is a {value.layout} tensor")
        leaves.append(value)
        return {"$tensor": len(leaves) - 1}
    if type(value) is list:
        return [encode(v, leaves, f"{where}[{i}]") for i, v in enumerate(value)]
    if type(value) in (tuple, torch.Size):
        return {"$tuple": [encode(v, leaves, f"{where}[{i}]") for i, v in enumerate(value)]}
    if type(value) is dict:
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: encode(v, leaves, f"{where}/{k}") for k, v in value.items()}
        return {
            "$dict": [
                [encode(k, leaves, f"{where}<key>"), encode(v, leaves, f"{where}/{k!r}")]
                for k, v in value.items()
            ]
        }
    if type(value) is TensorDict:
        items = {k: value.get(k) for k in value.keys()}
        return {
            "$tensordict": {
                "batch_size": list(value.batch_size),
                "items": encode(items, leaves, where),
            }
        }
    raise Unencodable(f"{where or 'the value'} is a {type(value).__name__}")


def decode(node: Any, tensor: Callable[[Any, str], torch.Tensor], where: str) -> Any:
    """The value encoded as ``node``; ``tensor(ref, where)`` returns the tensor a reference names.

    Raises:
        CheckpointError: ``where`` and the place in the tree of a malformed node.
    """
    if node is None or type(node) in _PLAIN:
        return node
    if type(node) is list:
        return [decode(v, tensor, f"{where}[{i}]") for i, v in enumerate(node)]
    if type(node) is not dict:
        raise CheckpointError(f"{where}: unexpected {type(node).__name__} in the state tree.")
    tags = [k for k in node if k.startswith("$")]
    if not tags:
        return {k: decode(v, tensor, f"{where}/{k}") for k, v in node.items()}
    if len(node) != 1:
        raise CheckpointError(f"{where}: tag {tags[0]!r} must be an object's only key.")
    tag, body = next(iter(node.items()))
    return _decode_tag(tag, body, tensor, where)


def _decode_tag(tag: str, body: Any, tensor: Callable[[Any, str], torch.Tensor], where: str) -> Any:
    if tag == "$tensor":
        return tensor(body, where)
    if tag == "$tuple" and type(body) is list:
        return tuple(decode(v, tensor, f"{where}[{i}]") for i, v in enumerate(body))
    if tag == "$dict" and type(body) is list:
        pairs = []
        for i, pair in enumerate(body):
            if type(pair) is not list or len(pair) != 2:
                raise CheckpointError(f"{where}: entry {i} of a $dict is not a [key, value] pair.")
            key = decode(pair[0], tensor, f"{where}<key {i}>")
            try:
                hash(key)
            except TypeError as err:
                raise CheckpointError(f"{where}: key {i} of a $dict is unhashable.") from err
            pairs.append((key, decode(pair[1], tensor, f"{where}/{key!r}")))
        return dict(pairs)
    if tag == "$tensordict" and type(body) is dict and set(body) == {"batch_size", "items"}:
        items = decode(body["items"], tensor, where)
        try:
            return TensorDict(items, batch_size=body["batch_size"])
        except (TypeError, ValueError, RuntimeError) as err:
            raise CheckpointError(f"{where}: not a valid TensorDict ({err}).") from err
    raise CheckpointError(f"{where}: malformed or unknown tag {tag!r} in the state tree.")
