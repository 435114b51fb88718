import pickle
import threading

import pytest
import torch
import torch.multiprocessing as mp
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import LazyTensorStorage, PolicyAgeFilter, PolicyVersion, TensorDictReplayBuffer


def test_starts_at_zero_and_counts():
    v = PolicyVersion()
    assert v() == 0 and int(v) == 0
    assert v.increment() == 1
    assert v.increment(5) == 6
    v.set(42)
    assert v() == 42
    assert repr(v) == "PolicyVersion(42)"
    assert PolicyVersion(7)() == 7


@pytest.mark.parametrize("bad", [1.5, "3", None, True])
def test_rejects_non_ints_and_keeps_value(bad):
    v = PolicyVersion(3)
    with pytest.raises(TypeError, match="must be an int"):
        v.set(bad)
    with pytest.raises(TypeError, match="must be an int"):
        v.increment(bad)
    assert v() == 3
    with pytest.raises(TypeError, match="value must be an int"):
        PolicyVersion(bad)


def test_accepts_integer_like_values():
    v = PolicyVersion()
    v.set(torch.tensor(4))  # anything with __index__
    assert v() == 4


@given(st.lists(st.tuples(st.sampled_from(["set", "inc"]), st.integers(-1000, 1000)), max_size=30))
def test_matches_a_plain_int(ops):
    v, model = PolicyVersion(), 0
    for op, n in ops:
        if op == "set":
            v.set(n)
            model = n
        else:
            model += n
            assert v.increment(n) == model
        assert v() == model


def test_increments_are_atomic_across_threads():
    v = PolicyVersion()

    def work():
        for _ in range(2000):
            v.increment()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert v() == 8000


def test_pickled_copy_in_this_process_is_independent_of_locks():
    v = PolicyVersion(3)
    clone = pickle.loads(pickle.dumps(v))
    assert clone() == 3
    assert clone.increment() == 4


def _child(version, queue_in, queue_out):
    queue_out.put(version())  # sees the parent's value
    version.set(100)  # the parent must see this
    other = queue_in.get()  # a PolicyVersion sent through a queue is shared too
    other.increment(5)
    queue_out.put("done")


def test_shared_with_a_child_process():
    # fork: no copy-on-write page is shared, so the parent only sees the child's writes if
    # the counter really lives in shared memory; ``w`` goes through a queue (pickled).
    ctx = mp.get_context("fork")
    v, w = PolicyVersion(), PolicyVersion()
    v.set(17)
    q_in, q_out = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_child, args=(v, q_in, q_out))
    proc.start()
    try:
        assert q_out.get(timeout=120) == 17
        q_in.put(w)
        assert q_out.get(timeout=60) == "done"
    finally:
        proc.join(timeout=60)
    assert proc.exitcode == 0
    assert v() == 100
    assert w() == 5


def test_drives_a_policy_age_filter():
    v = PolicyVersion()
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), transform=PolicyAgeFilter(v, max_policy_lag=1)
    )
    rb.extend(TensorDict({"policy_version": torch.tensor([0, 1, 2, 3])}, batch_size=[4]))
    assert len(rb) == 4  # current version 0: nothing is stale yet
    v.set(3)
    kept = rb.sample(50)["policy_version"]
    assert kept.numel() > 0 and bool((kept >= 2).all())
