"""consume_after_n_samples: items leave the sampleable set after n draws.

torchrl 0.14.1 (the reference) allows it with the uniform sampler only and
refuses prefetch; ``len(rb)`` and ``stats()["size"]`` count what is still
sampleable, a drained buffer raises on ``sample`` and new writes go to consumed
slots first. rbdata deliberately supports every sampler and prefetch.
"""

from __future__ import annotations

import pytest
import torch

from ._describe import outcome


def _consuming(ns, n=8, per_item=1, storage=None, **kwargs):
    rb = ns.ReplayBuffer(
        storage=storage if storage is not None else ns.LazyTensorStorage(8),
        batch_size=3,
        consume_after_n_samples=per_item,
        **kwargs,
    )
    rb.extend(torch.arange(n))
    return rb


@pytest.mark.parametrize("per_item", [1, 2])
def test_iteration_drains_every_item_n_times(lib, per_item):
    rb = _consuming(lib, n=5, per_item=per_item)
    seen = []
    for batch in rb:
        seen += batch.tolist()
        assert len(seen) <= 5 * per_item
    assert sorted(seen) == sorted(list(range(5)) * per_item)


def test_len_counts_what_is_still_sampleable(lib):
    rb = _consuming(lib)
    rb.sample()
    assert (len(rb), rb.stats()["size"], rb.write_count) == (5, 5, 8)


def test_while_len_loop_terminates(lib):
    rb = _consuming(lib)
    sizes = []
    while len(rb) > 0 and len(sizes) < 10:
        sizes.append(rb.sample().shape[0])
    assert sizes == [3, 3, 2]


def test_sampling_a_drained_buffer(lib):
    rb = _consuming(lib)
    list(rb)
    assert outcome(rb.sample) == ("raises", "RuntimeError")


def test_writes_reuse_consumed_slots_first(lib, request):
    rb = _consuming(lib)
    consumed = rb.sample(return_info=True)[1]["index"]
    index = rb.extend(torch.arange(100, 103))
    assert sorted(index.tolist()) == sorted(consumed.tolist())


def test_last_batch_is_short(lib):
    rb = _consuming(lib, storage=lib.ListStorage(8), n=4)
    assert [b.shape[0] for b in rb] == [3, 1]


@pytest.mark.parametrize("value,error", [(0, "ValueError"), (-1, "ValueError")])
def test_bad_count_is_a_value_error(lib, value, error):
    assert outcome(lambda: lib.ReplayBuffer(consume_after_n_samples=value)) == ("raises", error)


@pytest.mark.parametrize("value", [1.5, True])
def test_non_int_count_is_a_type_error(lib, value):
    assert outcome(lambda: lib.ReplayBuffer(consume_after_n_samples=value)) == (
        "raises",
        "TypeError",
    )


# --- deliberate: rbdata consumes with every sampler and with prefetch -------------------


@pytest.mark.parametrize("sampler", ["without_replacement", "prioritized"])
def test_torchrl_refuses_other_samplers(sampler):
    from ._libs import load

    ns = load("torchrl")
    make = {
        "without_replacement": lambda: ns.SamplerWithoutReplacement(),
        "prioritized": lambda: ns.PrioritizedSampler(8, 0.7, 0.5),
    }[sampler]
    err = outcome(lambda: ns.ReplayBuffer(sampler=make(), consume_after_n_samples=1))
    assert err[0] == "raises"


@pytest.mark.parametrize("sampler", ["without_replacement", "prioritized"])
def test_rbdata_consumes_with_every_sampler(sampler):
    from ._instances import episodes
    from ._libs import load

    ns = load("rbdata")
    make = {
        "without_replacement": lambda: ns.SamplerWithoutReplacement(),
        "prioritized": lambda: ns.PrioritizedSampler(12, 0.7, 0.5),
    }[sampler]
    rb = ns.TensorDictReplayBuffer(
        storage=ns.LazyTensorStorage(12), sampler=make(), batch_size=4, consume_after_n_samples=1
    )
    rb.extend(episodes())
    seen = [int(i) for b in rb for i in b["index"].reshape(-1)]
    assert sorted(seen) == list(range(12))


def test_rbdata_refuses_consumption_with_slice_samplers():
    """Slices overlap, so per-item consumption is undefined: a ValueError at construction."""
    from ._libs import load

    ns = load("rbdata")
    sampler = ns.SliceSampler(slice_len=4, traj_key="episode")
    err = outcome(lambda: ns.ReplayBuffer(sampler=sampler, consume_after_n_samples=1))
    assert err == ("raises", "ValueError")


def test_rbdata_consumes_with_prefetch():
    from ._libs import load

    ns = load("rbdata")
    rb = _consuming(ns, prefetch=2)
    seen = [int(i) for b in rb for i in b]
    assert sorted(seen) == list(range(8))
    torchrl = load("torchrl")
    assert outcome(lambda: _consuming(torchrl, prefetch=2)) == ("raises", "ValueError")
