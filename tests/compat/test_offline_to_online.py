"""OfflineToOnlineReplayBuffer: exact offline share per batch, routing of writes, arguments.

Deliberate (DESIGN.md): offline_fraction may be 0, 1 or a schedule; samples carry
``index`` and ``is_offline``. torchrl 0.14.1 takes offline_fraction in (0, 1) only.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from ._describe import keys_of, outcome
from ._libs import load, parity_gap


def _offline(ns, n=100):
    rb = ns.ReplayBuffer(storage=ns.LazyTensorStorage(n))
    rb.extend(TensorDict({"obs": torch.zeros(n, 2), "src": torch.zeros(n)}, [n]))
    return rb


def _online(n):
    return TensorDict({"obs": torch.ones(n, 2), "src": torch.ones(n)}, [n])


def _mixed(ns, **kwargs):
    kwargs.setdefault("online_capacity", 50)
    return ns.OfflineToOnlineReplayBuffer(_offline(ns), batch_size=8, **kwargs)


def test_exact_offline_share_per_batch(lib):
    rb = _mixed(lib, offline_fraction=0.25)
    assert tuple(rb.sample().batch_size) == (8,)  # online part empty: all offline
    assert rb.extend(_online(10)).tolist() == list(range(10))
    assert len(rb) == 110
    for _ in range(5):
        assert int(rb.sample()["src"].sum()) == 6  # round(0.75 * 8) online rows
    assert int(rb.sample(10)["src"].sum()) == 8


def test_online_storage_argument(lib):
    rb = lib.OfflineToOnlineReplayBuffer(
        _offline(lib), online_storage=lib.LazyTensorStorage(5), batch_size=4
    )
    rb.extend(_online(3))
    assert len(rb) == 103


@pytest.mark.parametrize(
    "kwargs", [{"online_capacity": 5, "online_storage": None}, {}], ids=["both", "neither"]
)
def test_online_storage_xor_capacity(lib, kwargs):
    if "online_storage" in kwargs:
        kwargs = {**kwargs, "online_storage": lib.LazyTensorStorage(5)}
    assert outcome(lambda: lib.OfflineToOnlineReplayBuffer(_offline(lib), **kwargs)) == (
        "raises",
        "ValueError",
    )


def test_fraction_out_of_range(lib):
    def make():
        return lib.OfflineToOnlineReplayBuffer(
            _offline(lib), online_capacity=5, offline_fraction=1.5
        )

    assert outcome(make) == ("raises", "ValueError")


@pytest.mark.parametrize(
    "fraction", [0.0, 1.0, lambda batches: 0.5], ids=["zero", "one", "schedule"]
)
def test_fraction_bounds_and_schedules(fraction):
    """Deliberate: 0, 1 and schedules are allowed (torchrl: ValueError / TypeError)."""

    def make(ns):
        return ns.OfflineToOnlineReplayBuffer(
            _offline(ns), online_capacity=5, offline_fraction=fraction
        )

    assert outcome(lambda: make(load("rbdata")), lambda rb: "ok") == "ok"
    assert outcome(lambda: make(load("torchrl")))[0] == "raises"


def test_samples_carry_index_and_source():
    """Deliberate: rbdata's batches carry index and is_offline (torchrl's only the data)."""
    keys = {name: keys_of(_mixed(load(name)).sample()) for name in ("torchrl", "rbdata")}
    assert keys == {"torchrl": ["obs", "src"], "rbdata": ["index", "is_offline", "obs", "src"]}


def test_sample_needs_a_batch_size(lib):
    rb = lib.OfflineToOnlineReplayBuffer(_offline(lib), online_capacity=5)
    assert outcome(rb.sample) == ("raises", "ValueError")


def test_offline_fraction_property(lib):
    assert _mixed(lib, offline_fraction=0.3).offline_fraction == 0.3


def test_anneal(lib, request):
    parity_gap(request, lib, "OfflineToOnlineReplayBuffer.anneal(step, total_steps) missing")
    rb = _mixed(lib, offline_fraction=0.5)
    rb.anneal(5, 10)
    assert rb.offline_fraction == pytest.approx(0.25)


def test_offline_and_online_buffers(lib, request):
    parity_gap(request, lib, "offline_buffer/online_buffer missing (rbdata: offline/online)")
    rb = _mixed(lib)
    assert (len(rb.offline_buffer), len(rb.online_buffer)) == (100, 0)


def test_transform_argument(lib, request):
    parity_gap(
        request,
        lib,
        "OfflineToOnlineReplayBuffer(transform=...) missing (rbdata: online_transform)",
    )
    rb = lib.OfflineToOnlineReplayBuffer(
        _offline(lib), online_capacity=5, batch_size=4, transform=lambda d: d.exclude("src")
    )
    rb.extend(_online(4))
    assert keys_of(rb.sample()) == ["obs"]


def test_offline_dataset_keyword(lib, request):
    parity_gap(request, lib, "first argument is named offline; torchrl offline_dataset")
    rb = lib.OfflineToOnlineReplayBuffer(
        offline_dataset=_offline(lib), online_capacity=5, batch_size=4
    )
    assert tuple(rb.sample().batch_size) == (4,)
