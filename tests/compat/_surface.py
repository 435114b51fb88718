"""The public surface of a class: constructor parameters and members, for both libraries."""

from __future__ import annotations

import inspect
import re
import sys
import typing
from typing import Any

#: members of torchrl's tensorclass-based results that matter to users (the rest is
#: tensorclass machinery: from_h5, lazy_stack, ...)
TENSORCLASS_MEMBERS = {
    "Trajectory": ("batch_size", "data", "get", "keys", "length", "total_reward"),
    "ConditionalUpdateResult": (
        "batch_size",
        "stale_count",
        "updated",
        "updated_count",
        "version_rejected",
        "version_rejected_count",
    ),
}
#: members of torchrl's Transform classes (torch.nn.Module subclasses built for envs
#: too) that a replay-buffer transform is used through
TRANSFORM_MEMBERS = {
    "Transform": ("forward", "inv", "in_keys", "out_keys", "in_keys_inv", "out_keys_inv", "clone"),
    "Compose": ("forward", "inv", "append", "insert", "pop", "clone"),
    "PolicyAgeFilter": ("forward", "inv"),
}


def init_params(cls: type) -> dict[str, inspect.Parameter]:
    """Constructor parameters, following ``**kwargs`` up the MRO (and through metaclasses)."""
    params: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        forwards = False
        for p in inspect.signature(init).parameters.values():
            if p.name == "self" or p.kind == p.VAR_POSITIONAL:
                continue
            if p.kind == p.VAR_KEYWORD:
                unpacked = _unpacked_keywords(init, p)
                if unpacked is None:
                    forwards = True
                for name in unpacked or ():
                    params.setdefault(name, inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY))
                continue
            params.setdefault(p.name, p)
        if not forwards:
            break
    return params


def _unpacked_keywords(init: Any, param: inspect.Parameter) -> list[str] | None:
    """The keys of ``**kwargs: Unpack[SomeTypedDict]`` (None for a plain ``**kwargs``)."""
    annotation = param.annotation
    if isinstance(annotation, str):
        match = re.fullmatch(r"(?:typing\.|typing_extensions\.)?Unpack\[(\w+)\]", annotation)
        if match is None:
            return None
        annotation = getattr(sys.modules[init.__module__], match.group(1), None)
    elif typing.get_origin(annotation) is typing.Unpack:
        annotation = typing.get_args(annotation)[0]
    else:
        return None
    if annotation is None or not typing.is_typeddict(annotation):
        return None
    return list(annotation.__annotations__)


def public_members(torchrl_obj: Any) -> list[str]:
    """The public members torchrl defines on ``torchrl_obj``'s class (replay-buffer code only)."""
    cls = torchrl_obj if inspect.isclass(torchrl_obj) else type(torchrl_obj)
    name = cls.__name__ if inspect.isclass(torchrl_obj) else type(torchrl_obj).__name__
    if name in TENSORCLASS_MEMBERS:
        return list(TENSORCLASS_MEMBERS[name])
    if name in TRANSFORM_MEMBERS:
        return list(TRANSFORM_MEMBERS[name])
    found = set()
    for klass in cls.__mro__:
        if (getattr(klass, "__module__", "") or "").startswith("torchrl.data"):
            found.update(k for k in vars(klass) if not k.startswith("_"))
    return sorted(found)
