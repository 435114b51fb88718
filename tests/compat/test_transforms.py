"""Transforms: PolicyAgeFilter (every argument of the reference), chains, inversion, factories."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from ._describe import contents, outcome
from ._libs import load

STORAGES = ("LazyStackStorage", "LazyTensorStorage")


def _stamped():
    return TensorDict(
        {"observation": torch.randn(4, 3), "policy_version": torch.tensor([0, 2, 2, 3])},
        batch_size=[4],
    )


@pytest.mark.parametrize("storage", STORAGES)
def test_policy_age_filter_reference_example(lib, storage):
    current = {"version": 3}
    rb = lib.ReplayBuffer(
        storage=getattr(lib, storage)(100),
        transform=lib.PolicyAgeFilter(lambda: current["version"], max_policy_lag=1),
    )
    rb.extend(_stamped())  # version 0 is filtered out on write
    assert len(rb) == 3
    assert rb.sample(3).batch_size[0] == 3
    current["version"] = 4  # the two version-2 items become stale: dropped on sample
    torch.manual_seed(0)
    batch = rb.sample(6)
    assert set(batch["policy_version"].tolist()) == {3}


@pytest.mark.parametrize("storage", STORAGES)
def test_policy_age_filter_in_a_tensordict_buffer(storage):
    """Deliberate: rbdata drops stale rows of TensorDict samples (torchrl raises RuntimeError)."""
    results = {}
    for name in ("torchrl", "rbdata"):
        ns = load(name)
        current = {"version": 3}
        rb = ns.TensorDictReplayBuffer(
            storage=getattr(ns, storage)(100),
            transform=ns.PolicyAgeFilter(lambda: current["version"], max_policy_lag=1),  # noqa: B023
        )
        rb.extend(_stamped())
        current["version"] = 4
        results[name] = outcome(
            lambda: rb.sample(6),  # noqa: B023
            lambda d: sorted(set(d["policy_version"].tolist())),
        )
    assert results == {"torchrl": ("raises", "RuntimeError"), "rbdata": [3]}


def test_policy_age_filter_int_version_and_key(lib):
    rb = lib.ReplayBuffer(
        storage=lib.LazyStackStorage(100), transform=lib.PolicyAgeFilter(3, max_policy_lag=0)
    )
    rb.extend(_stamped())
    assert len(rb) == 1
    keyed = lib.PolicyAgeFilter(3, max_policy_lag=0, policy_version_key="pv")
    rb = lib.ReplayBuffer(storage=lib.LazyStackStorage(100), transform=keyed)
    rb.extend(_stamped().rename_key_("policy_version", "pv"))
    assert len(rb) == 1


def test_policy_age_filter_strict(lib):
    unstamped = TensorDict({"x": torch.zeros(4)}, [4])
    strict = lib.ReplayBuffer(
        storage=lib.LazyStackStorage(100),
        transform=lib.PolicyAgeFilter(3, max_policy_lag=0, strict=True),
    )
    assert outcome(lambda: strict.extend(unstamped)) == ("raises", "KeyError")
    assert len(strict) == 0
    lenient = lib.ReplayBuffer(
        storage=lib.LazyStackStorage(100), transform=lib.PolicyAgeFilter(3, max_policy_lag=0)
    )
    assert contents(lenient.extend(unstamped)) == [0, 1, 2, 3]


def test_policy_age_filter_argument_errors(lib):
    assert outcome(lambda: lib.PolicyAgeFilter(3, max_policy_lag=-1)) == ("raises", "ValueError")
    # strict and policy_version_key are keyword-only, as in the reference
    assert outcome(lambda: lib.PolicyAgeFilter(3, 1, "pv")) == ("raises", "TypeError")


def test_policy_age_filter_validates_its_version_source():
    """Deliberate: a non-int, non-callable version is a TypeError (torchrl accepts "3")."""
    assert outcome(lambda: load("rbdata").PolicyAgeFilter("3", max_policy_lag=1)) == (
        "raises",
        "TypeError",
    )
    assert (
        outcome(lambda: load("torchrl").PolicyAgeFilter("3", max_policy_lag=1), lambda f: "ok")
        == "ok"
    )


def test_append_transform_invert(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(10), batch_size=4)

    def plus_one(data):
        data["a"] += 1
        return data

    assert rb.append_transform(plus_one, invert=True) is rb
    rb.extend(TensorDict({"a": torch.zeros(4)}, [4]))
    assert rb[:]["a"].tolist() == [1.0] * 4


def test_callable_transform_and_factory(lib):
    rb = lib.ReplayBuffer(
        storage=lib.LazyTensorStorage(10), batch_size=4, transform=lambda d: d * 0
    )
    rb.extend(torch.ones(4))
    assert rb.sample().tolist() == [0.0] * 4
    rb = lib.ReplayBuffer(
        storage=lib.LazyTensorStorage(10), batch_size=4, transform_factory=lambda: lambda d: d * 2
    )
    assert rb.initialized is False  # delayed_init defaults to True with a factory
    rb.extend(torch.ones(4))
    assert rb.initialized is True
    assert rb.sample().tolist() == [2.0] * 4


def test_transform_and_factory_are_exclusive(lib):
    err = outcome(
        lambda: lib.ReplayBuffer(transform=lambda d: d, transform_factory=lambda: lambda d: d)
    )
    assert err == ("raises", "TypeError")


def test_transform_property_is_a_compose(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(10))
    assert (type(rb.transform).__name__, len(rb.transform)) == ("Compose", 0)


def test_a_torchrl_transform_in_an_rbdata_buffer():
    """Migration: torchrl's own env transforms keep working inside an rbdata buffer."""
    from torchrl.envs.transforms import ExcludeTransform

    ns = load("rbdata")
    rb = ns.TensorDictReplayBuffer(
        storage=ns.LazyTensorStorage(10), batch_size=2, transform=ExcludeTransform("policy_version")
    )
    rb.extend(_stamped())
    assert sorted(rb.sample().keys()) == ["index", "observation"]


def test_transform_is_an_nn_module(lib, request):
    from ._libs import parity_gap

    parity_gap(
        request,
        lib,
        "rbdata's Transform is not a torch.nn.Module (torchrl's is: .to(), parameters(), ...)",
    )
    assert isinstance(lib.Compose(), torch.nn.Module)
