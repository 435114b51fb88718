"""Every ReplayBuffer keyword argument and method of the reference document (000_*.txt).

Where the reference and torchrl 0.14.1 disagree the reference wins (marked so);
where rbdata deliberately differs the test says so and asserts rbdata's behaviour.
"""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from tensordict import TensorDict

from ._describe import contents, describe, keys_of, outcome
from ._libs import load, parity_gap


def _filled(ns, n=4, **kwargs):
    rb = ns.ReplayBuffer(storage=ns.LazyTensorStorage(n), batch_size=2, **kwargs)
    rb.extend(torch.arange(n))
    return rb


def _torchrl_disagrees(request, ns, reason):
    if ns.name == "torchrl":
        request.applymarker(
            pytest.mark.xfail(strict=True, reason="torchrl disagrees with the reference: " + reason)
        )


# --- components: storage, sampler, writer, sample_unit -------------------------------


def test_defaults(lib):
    rb = lib.ReplayBuffer()
    assert (type(rb.storage).__name__, rb.storage.max_size) == ("ListStorage", 1000)
    assert (type(rb.sampler).__name__, type(rb.writer).__name__) == (
        "RandomSampler",
        "RoundRobinWriter",
    )
    assert type(lib.TensorDictReplayBuffer().writer).__name__ == "TensorDictRoundRobinWriter"


@pytest.mark.parametrize("component", ["storage", "sampler", "writer"])
def test_component_factories(lib, component):
    factory = {
        "storage": lambda: lib.LazyTensorStorage(5),
        "sampler": lib.SamplerWithoutReplacement,
        "writer": lib.RoundRobinWriter,
    }[component]
    rb = lib.ReplayBuffer(**{component: factory})
    assert (
        type(getattr(rb, component)).__name__
        == {
            "storage": "LazyTensorStorage",
            "sampler": "SamplerWithoutReplacement",
            "writer": "RoundRobinWriter",
        }[component]
    )


@pytest.mark.parametrize("component,value", [("storage", 5), ("sampler", "x")])
def test_bad_component_is_a_type_error(lib, component, value):
    assert outcome(lambda: lib.ReplayBuffer(**{component: value})) == ("raises", "TypeError")


def test_sample_unit_argument(lib):
    rb = lib.TensorDictReplayBuffer(
        storage=lib.LazyTensorStorage(8), sample_unit=lib.Transition(), batch_size=2
    )
    rb.extend(TensorDict({"a": torch.arange(8)}, [8]))
    assert tuple(rb.sample().batch_size) == (2,)


# --- collate_fn, pin_memory, prefetch, batch_size ------------------------------------


def test_collate_fn(lib):
    rb = lib.ReplayBuffer(collate_fn=lambda items: ("collated", len(items)))
    rb.extend([1, 2, 3])
    assert rb.sample(2) == ("collated", 2)


def test_reference_example_python_objects(lib):
    torch.manual_seed(0)
    rb = lib.ReplayBuffer(storage=lib.ListStorage(100), collate_fn=lambda x: x)
    rb.extend(["a", 1, None])
    assert set(map(repr, rb.sample(3))) <= {"'a'", "1", "None"}


def test_pin_memory_without_an_accelerator():
    """Deliberate: rbdata skips pinning without CUDA (torchrl raises RuntimeError)."""
    assert _filled(load("rbdata"), pin_memory=True).sample().shape == (2,)
    assert outcome(lambda: _filled(load("torchrl"), pin_memory=True).sample()) == (
        "raises",
        "RuntimeError",
    )


def test_prefetch(lib):
    rb = _filled(lib, prefetch=2)
    assert [tuple(rb.sample().shape) for _ in range(3)] == [(2,)] * 3
    assert rb.stats()["prefetch_queue_size"] == 2


def test_prefetch_needs_a_batch_size(lib):
    def sample_without_default():
        rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4), prefetch=2)
        rb.extend(torch.arange(4))
        return rb.sample(3)

    assert outcome(sample_without_default) == ("raises", "ValueError")


def test_prefetch_with_another_sample_batch_size(lib, request):
    """The reference: a sample-time batch size is incompatible with prefetching."""
    _torchrl_disagrees(request, lib, "sample(3) with prefetch and batch_size=2 returns 3 items")
    assert outcome(lambda: _filled(lib, prefetch=2).sample(3)) == ("raises", "ValueError")


def test_bad_prefetch(lib):
    assert outcome(lambda: lib.ReplayBuffer(prefetch=-1)) == ("raises", "ValueError")


def test_batch_size_property_and_override(lib):
    rb = _filled(lib)
    assert rb.batch_size == 2
    assert tuple(rb.sample(3).shape) == (3,)


# --- dim_extend, ndim ------------------------------------------------------------------


def test_dim_extend_add_and_extend_are_equivalent(lib):
    """The reference example: add() of data.unbind(1) == extend(data) with dim_extend=1."""
    data = torch.arange(12.0).reshape(3, 4)
    added = lib.ReplayBuffer(storage=lib.LazyTensorStorage(12, ndim=2), dim_extend=1)
    for d in data.unbind(1):
        added.add(d)
    extended = lib.ReplayBuffer(storage=lib.LazyTensorStorage(12, ndim=2), dim_extend=1)
    extended.extend(data)
    assert contents(added[:]) == contents(extended[:])
    assert len(added) == len(extended) == 12


def test_ndim2_extend_returns_coordinates(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(12, ndim=2), dim_extend=1)
    index = rb.extend(torch.arange(12.0).reshape(3, 4))
    assert tuple(index.shape) == (12, 2)


def test_ndim2_sample_info_index_is_a_coordinate_tuple(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(12, ndim=2), batch_size=4)
    rb.extend(torch.arange(12).reshape(3, 4))
    _, info = rb.sample(return_info=True)
    assert describe(info["index"]) == ("tuple", [("Tensor", (4,), "torch.int64")] * 2)


# --- generator, shared, compilable, delayed_init -------------------------------------


def test_generator_makes_draws_reproducible(lib):
    draws = []
    for _ in range(2):
        rb = lib.ReplayBuffer(
            storage=lib.LazyTensorStorage(100),
            batch_size=5,
            generator=torch.Generator().manual_seed(7),
        )
        rb.extend(torch.arange(100))
        draws.append(rb.sample().tolist())
    assert draws[0] == draws[1]


def test_bad_generator_is_a_type_error():
    """Deliberate: rbdata checks the generator's type (torchrl accepts 3 and fails later)."""
    assert outcome(lambda: load("rbdata").ReplayBuffer(generator=3)) == ("raises", "TypeError")


@pytest.mark.parametrize("flag", ["shared", "compilable"])
def test_flags(lib, flag):
    rb = _filled(lib, **{flag: True})
    assert (len(rb), tuple(rb.sample().shape)) == (4, (2,))


def test_delayed_init(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4), delayed_init=True)
    assert rb.initialized is False
    assert rb.stats() == {
        "size": 0, "write_count": 0, "prefetch_queue_size": 0, "initialized": False,
        "capacity": 4, "utilization": 0.0,
    }  # fmt: skip
    rb.extend(torch.arange(2))
    assert rb.initialized is True


def test_stats_of_an_uninitialized_buffer_with_a_storage_factory(lib):
    rb = lib.ReplayBuffer(storage=lambda: lib.LazyTensorStorage(4), delayed_init=True)
    assert rb.stats() == {
        "size": 0,
        "write_count": 0,
        "prefetch_queue_size": 0,
        "initialized": False,
    }


# --- service backend and transport ---------------------------------------------------


def test_direct_backend(lib):
    rb = _filled(lib, service_backend="direct")
    assert rb.service_backend == "direct"
    assert rb.client() is rb and rb.start() is rb and rb.is_alive
    rb.shutdown()
    assert rb.is_alive is False


def test_unknown_backend_is_a_value_error(lib):
    assert outcome(lambda: lib.ReplayBuffer(service_backend="bogus")) == ("raises", "ValueError")


def test_ray_backend(lib):
    ray = pytest.importorskip("ray")  # torchrl needs ray installed for this backend too
    if lib.name == "torchrl":  # it ray.remote()s its buffer class, adding _ray_trace_ctx to the
        pytest.skip("methods whose signatures the surface tests read, for the whole session")
    rb = lib.ReplayBuffer(service_backend="ray")
    try:
        assert rb.service_backend == "ray"
    finally:
        getattr(rb, "shutdown", lambda: None)()
        ray.shutdown()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"transport": "bogus"},
        {"transport_options": {"backend": "gloo"}},
        {"service_backend_options": {"ray_init_config": {}}},
    ],
    ids=["transport", "transport_options", "service_backend_options"],
)
def test_transport_arguments_are_validated(lib, kwargs):
    assert outcome(lambda: lib.ReplayBuffer(**kwargs)) == ("raises", "ValueError")


def test_as_remote_without_ray(lib):
    if importlib.util.find_spec("ray") is not None:
        pytest.skip("ray is installed in this virtualenv: as_remote works")
    assert outcome(lambda: lib.ReplayBuffer.as_remote())[0] == "raises"


# --- methods -----------------------------------------------------------------------


def test_next(lib, request):
    _torchrl_disagrees(request, lib, "ReplayBuffer.next() raises AttributeError")
    assert describe(_filled(lib).next()) == ("Tensor", (2,), "torch.int64")


def test_read_all_in_order(lib):
    rb = _filled(lib)
    assert (contents(rb.read_all_in_order()), contents(rb.read_all_in_order(2))) == (
        [0, 1, 2, 3],
        [0, 1],
    )


def test_write_all(lib, request):
    _torchrl_disagrees(request, lib, "write_all(data) on a LazyTensorStorage raises RuntimeError")
    rb = _filled(lib)
    rb.write_all(torch.tensor([9, 8]))
    assert rb[:].tolist() == [9, 8, 2, 3]


def test_setitem(lib):
    rb = _filled(lib)
    rb[0:2] = torch.tensor([5, 6])
    assert rb[:].tolist() == [5, 6, 2, 3]


def test_empty_keeps_write_count_on_request(lib):
    rb = _filled(lib)
    rb.empty(empty_write_count=False)
    assert (len(rb), rb.write_count) == (0, 4)
    rb.empty()
    assert rb.write_count == 0


def test_extend_update_priority_keyword(lib, request):
    """The reference: update_priority is without effect in this (non-prioritized) class."""
    _torchrl_disagrees(
        request, lib, "extend(..., update_priority=False) raises NotImplementedError"
    )
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4))
    assert rb.extend(torch.arange(2), update_priority=False).tolist() == [0, 1]


def test_extend_list_is_a_stack_tuple_is_a_pytree(lib):
    """The reference: a list at the root is a stack of items, a tuple a PyTree."""
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4))
    rb.extend([torch.zeros(2), torch.ones(2)])
    assert (len(rb), describe(rb[:])) == (2, ("Tensor", (2, 2), "torch.float32"))
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4))
    rb.extend((torch.arange(3), torch.zeros(3, 2)))
    assert len(rb) == 3
    assert describe(rb.sample(2)) == (
        "tuple",
        [("Tensor", (2,), "torch.int64"), ("Tensor", (2, 2), "torch.float32")],
    )


def test_reference_example_pytree_with_transform(lib, tmp_path):
    from torch.utils._pytree import tree_map

    rb = lib.ReplayBuffer(
        storage=lib.LazyMemmapStorage(100, scratch_dir=tmp_path),
        transform=lambda x: tree_map(lambda y: y * 0, x),
    )
    rb.add(
        {"a": torch.randn(3), "b": {"c": (torch.zeros(2), [torch.ones(1)])}, 30: -torch.ones(())}
    )
    sample = rb.sample(10)
    assert all((leaf == 0).all() for leaf in torch.utils._pytree.tree_leaves(sample))
    assert describe(sample["b"]["c"][1][0]) == ("Tensor", (10, 1), "torch.float32")


def test_add_returns_an_int(lib):
    index = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4)).add(torch.zeros(2))
    assert (type(index).__name__, index) == ("int", 0)


def test_extend_with_an_empty_batch():
    """Deliberate: extending with zero items is a no-op (torchrl raises on a fresh lazy storage)."""
    rb = load("rbdata").ReplayBuffer(storage=load("rbdata").LazyTensorStorage(4))
    assert describe(rb.extend(torch.zeros(0, 2))) == ("Tensor", (0,), "torch.int64")


def test_extend_beyond_capacity_wraps(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4))
    assert rb.extend(torch.arange(10)).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert (rb[:].tolist(), rb.write_count) == ([8, 9, 6, 7], 10)


def test_indexing(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(8))
    rb.extend(torch.arange(3))
    assert rb[-1].item() == 2
    assert outcome(lambda: rb[5]) == ("raises", "IndexError")


def test_unbounded_list_storage(lib):
    rb = lib.ReplayBuffer(storage=lib.ListStorage())
    rb.extend(list(range(1500)))
    assert len(rb) == 1500


def test_save_and_load_hooks(lib, request, tmp_path):
    parity_gap(
        request,
        lib,
        "save/load hooks get rbdata's storage state (a dict of leaves) with path=/out=; "
        "torchrl passes the storage's TensorDict",
    )
    seen = []

    def hook(data, **kwargs):
        seen.append((type(data).__name__, sorted(kwargs)))
        return data

    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4), batch_size=2)
    rb.register_save_hook(hook)
    rb.extend(TensorDict({"a": torch.arange(4)}, [4]))
    rb.dumps(tmp_path)
    other = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4))
    other.register_load_hook(hook)
    other.loads(tmp_path)
    assert len(other) == 4
    assert seen == [("TensorDict", ["path"]), ("TensorDict", ["out"])]


@pytest.mark.parametrize("save,load_", [("dumps", "loads"), ("dump", "load"), ("save", "load")])
def test_persistence_aliases(lib, tmp_path, save, load_):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4), batch_size=2)
    rb.extend(TensorDict({"a": torch.arange(4)}, [4]))
    getattr(rb, save)(tmp_path)
    other = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4))
    getattr(other, load_)(tmp_path)
    assert (len(other), other.write_count, other[:]["a"].tolist()) == (4, 4, [0, 1, 2, 3])


# --- bad input: same exception type as torchrl, or rbdata's deliberate clearer one -------


def test_extend_scalar(lib, request):
    parity_gap(request, lib, "extend(0-d tensor) raises ValueError; torchrl TypeError")
    assert outcome(
        lambda: lib.ReplayBuffer(storage=lib.LazyTensorStorage(8)).extend(torch.tensor(3.0))
    ) == (
        "raises",
        "TypeError",
    )


@pytest.mark.parametrize(
    "second,error",
    [
        (torch.zeros(2, 4), "ValueError"),
        (torch.zeros(2, 3, dtype=torch.long), "TypeError"),
    ],
    ids=["shape", "dtype"],
)
def test_mismatched_extend_is_refused_before_writing(second, error):
    """Deliberate: named errors (torchrl: RuntimeError from the copy), nothing written."""
    for name, expected in (("rbdata", error), ("torchrl", "RuntimeError")):
        ns = load(name)
        rb = ns.ReplayBuffer(storage=ns.LazyTensorStorage(8))
        rb.extend(torch.zeros(2, 3))
        assert outcome(lambda: rb.extend(second)) == ("raises", expected)  # noqa: B023
    assert (len(rb), rb.write_count) == (4, 4)  # torchrl counts the failed write
    rb = load("rbdata").ReplayBuffer(storage=load("rbdata").LazyTensorStorage(8))
    rb.extend(torch.zeros(2, 3))
    outcome(lambda: rb.extend(second))
    assert (len(rb), rb.write_count) == (2, 2)


@pytest.mark.parametrize("storage", ["LazyTensorStorage", "LazyMemmapStorage"])
def test_an_extra_key_is_added(storage):
    """Both add a key a written TensorDict brings (the rows written before read zeros in it),
    except torchrl's LazyMemmapStorage, which drops it silently: rbdata keeps it (deliberate)."""
    first = {"a": torch.ones(2), "b": torch.ones(2)}
    second = {"a": torch.full((2,), 2.0), "b": torch.full((2,), 2.0), "c": torch.full((2,), 3.0)}
    got = {}
    for name in ("rbdata", "torchrl"):
        ns = load(name)
        rb = ns.ReplayBuffer(storage=getattr(ns, storage)(8))
        rb.extend(TensorDict(first, [2]))
        rb.extend(TensorDict(second, [2]))
        got[name] = (len(rb), rb.write_count, contents(rb[:]), keys_of(rb.sample(4)))
    expected = (
        4,
        4,
        {"a": [1.0, 1.0, 2.0, 2.0], "b": [1.0, 1.0, 2.0, 2.0], "c": [0.0, 0.0, 3.0, 3.0]},
        ["a", "b", "c"],
    )
    assert got["rbdata"] == expected
    if storage == "LazyTensorStorage":
        assert got["torchrl"] == expected
    else:  # torchrl's memmap storage drops "c"
        assert got["torchrl"][2] == {"a": [1.0, 1.0, 2.0, 2.0], "b": [1.0, 1.0, 2.0, 2.0]}


@pytest.mark.parametrize("storage", ["LazyTensorStorage", "LazyMemmapStorage"])
def test_a_missing_key_is_written_as_zeros(storage):
    """Deliberate: both write a batch lacking a stored key; torchrl leaves the rows' old values
    of the missing entry (a reused slot: an older transition's), rbdata writes zeros (warned)."""
    got = {}
    for name in ("rbdata", "torchrl"):
        ns = load(name)
        rb = ns.ReplayBuffer(storage=getattr(ns, storage)(2))
        rb.extend(TensorDict({"a": torch.ones(2), "b": torch.ones(2)}, [2]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            index = rb.extend(TensorDict({"a": torch.full((2,), 2.0)}, [2]))
        stored = rb[:]
        got[name] = (index.tolist(), len(rb), rb.write_count, contents(stored["a"]))
        got[name] += (contents(stored["b"]),)
    assert got["torchrl"] == ([0, 1], 2, 4, [2.0, 2.0], [1.0, 1.0])
    assert got["rbdata"] == ([0, 1], 2, 4, [2.0, 2.0], [0.0, 0.0])
