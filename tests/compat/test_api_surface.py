"""API surface of the 32 core names: torchrl's constructor parameters and public members.

Each torchrl 0.14.1 constructor parameter and public method/property of a core
class is one test: rbdata must accept the parameter (same name) and have the
member. Missing ones are parity gaps (strict xfail, so a fix flips them);
deliberate omissions carry their reason and are asserted absent.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from ._instances import example
from ._libs import NAMES, load
from ._surface import init_params, public_members

#: constructor parameters of torchrl that rbdata lacks (class -> parameters)
MISSING_PARAMS = {
    "ConditionalUpdateResult": {"batch_size", "device", "names"},
    "Transform": {"in_keys_inv", "out_keys_inv"},
    "Compose": {"in_keys", "out_keys", "in_keys_inv", "out_keys_inv"},
    "OfflineToOnlineReplayBuffer": {"offline_dataset", "transform"},
}

_BUFFER = {"mark_update", "submit_update_if_present", "synchronize"}
_STORAGE = {"attach", "flatten", "supports_conditional_update"}
_SAMPLER: set[str] = set()
_SLICE = _SAMPLER

#: public members of torchrl that rbdata lacks (class -> members)
MISSING_MEMBERS = {
    "ReplayBuffer": _BUFFER,
    "TensorDictReplayBuffer": _BUFFER,
    "PrioritizedReplayBuffer": _BUFFER,
    "TensorDictPrioritizedReplayBuffer": _BUFFER,
    "ListStorage": _STORAGE,
    "LazyStackStorage": _STORAGE,
    "TensorStorage": _STORAGE,
    "LazyTensorStorage": _STORAGE,
    "LazyMemmapStorage": _STORAGE,
    "Storage": _STORAGE,
    "Sampler": _SAMPLER,
    "RandomSampler": _SAMPLER,
    "SamplerWithoutReplacement": _SAMPLER,
    "SliceSampler": _SLICE,
    "SliceSamplerWithoutReplacement": _SLICE,
    "TensorDictMaxValueWriter": {"get_insert_index"},
    "ImmutableDatasetWriter": {"WRITING_ERR"},
    "ConditionalUpdateResult": {"batch_size"},
    "Transform": {"in_keys_inv", "out_keys_inv", "clone"},
    "Compose": {"pop", "clone"},
    "OfflineToOnlineReplayBuffer": {"anneal", "offline_buffer", "online_buffer"},
    "ConsumingSampler": _SAMPLER,
    "StalenessAwareSampler": _SAMPLER,
    "StreamingSliceSampler": _SLICE,
    "PromptGroupSampler": _SAMPLER,
    "StoreStorage": _STORAGE,
    # a Ray-hosted buffer forwards what its hosted class has (update_tensordict_priority:
    # a TensorDict prioritized class hosted; torchrl's Ray buffer always has the name)
    "RayReplayBuffer": _BUFFER | {"update_tensordict_priority"},
    "RemoteTensorDictReplayBuffer": _BUFFER,
}


def _xfail_if(missing: bool, what: str) -> list:
    return [pytest.mark.xfail(strict=True, reason=f"parity gap: {what} missing")] if missing else []


def _param_cases() -> list:
    torchrl = load("torchrl")
    cases = []
    for name in NAMES:
        obj = getattr(torchrl, name)
        if not inspect.isclass(obj):
            continue
        for param in init_params(obj):
            gap = param in MISSING_PARAMS.get(name, ())
            cases.append(
                pytest.param(
                    name, param, marks=_xfail_if(gap, f"{name}({param}=...)"), id=f"{name}-{param}"
                )
            )
    return cases


def _member_cases() -> list:
    torchrl = load("torchrl")
    cases = []
    for name in NAMES:
        for member in public_members(getattr(torchrl, name)):
            gap = member in MISSING_MEMBERS.get(name, ())
            cases.append(
                pytest.param(
                    name, member, marks=_xfail_if(gap, f"{name}.{member}"), id=f"{name}-{member}"
                )
            )
    return cases


def test_every_core_name_is_exported():
    rbdata = load("rbdata")
    assert [n for n in NAMES if getattr(rbdata, n) is None] == []


@pytest.mark.parametrize("name,param", _param_cases())
def test_constructor_accepts_torchrl_parameter(name, param):
    rb_params = init_params(getattr(load("rbdata"), name))
    assert param in rb_params
    torchrl_param = init_params(getattr(load("torchrl"), name))[param]
    # keyword-only in torchrl must stay passable by keyword in rbdata
    assert (
        rb_params[param].kind
        in (
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
        or torchrl_param.kind == rb_params[param].kind
    )


@pytest.mark.parametrize("name,member", _member_cases())
def test_has_torchrl_member(name, member, tmp_path):
    assert hasattr(example(load("rbdata"), name, tmp_path), member)


#: calls torchrl users make with positional arguments (name, args); gaps flagged
POSITIONAL_CALLS = [
    ("ListStorage", (100,), None),
    ("LazyStackStorage", (100,), None),
    ("LazyTensorStorage", (100,), None),
    ("LazyMemmapStorage", (100,), None),
    ("PrioritizedSampler", (8, 0.7, 0.9), None),
    ("PrioritizedSampler", (8, 0.7, 0.9, 1e-6, torch.float64, "mean"), None),
    ("RoundRobinWriter", (False,), None),
    ("TensorDictMaxValueWriter", ("reward", "max"), None),
    ("Writer", (False,), "Writer(compilable) positional: rbdata's Writer takes no positional"),
    ("ImmutableDatasetWriter", (False,), None),
    ("Sequence", (4, "pad"), None),
    ("Sequence", (4,), None),
]


@pytest.mark.parametrize(
    "name,args",
    [
        pytest.param(n, a, marks=_xfail_if(bool(g), g or ""), id=f"{n}{len(a)}")
        for n, a, g in POSITIONAL_CALLS
    ],
)
def test_positional_call(name, args):
    cls = getattr(load("rbdata"), name)
    if name == "Writer":
        cls = type("W", (cls,), {})  # torchrl's Writer is abstract; any subclass will do
    assert isinstance(cls(*args), getattr(load("rbdata"), name))
