"""Random programs of public replay-buffer operations (the differential fuzzer's input).

A program is a :class:`Config` (what the buffer is built from) and a tuple of
operations, each a plain tuple ``(name, *arguments)``, so that hypothesis prints
a failing program as code-like data and shrinks it. Only combinations torchrl
0.14.1 accepts at all are drawn; the documented differences the fuzzer still
reaches are recognised by ``_fuzz_known.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from ._libs import torchrl_prioritized_available

TENSOR_STORAGES = ("tensor", "lazytensor", "memmap")
LIST_STORAGES = ("list", "lazystack")

#: data kinds drawn per storage kind (the pairs torchrl supports; others: test_unsupported_data)
DATA_FOR_STORAGE = {
    "default": ("tensor", "tensordict", "objects"),  # no storage given: ListStorage(1000)
    "list": ("tensor", "tensordict", "objects"),
    "lazystack": ("tensor", "tensordict"),
    "tensor": ("tensor", "tensordict", "tensorclass", "pytree", "tuple"),
    "lazytensor": ("tensor", "tensordict", "tensorclass", "pytree", "tuple"),
    "memmap": ("tensor", "tensordict", "tensorclass", "pytree", "tuple"),
}
DTYPES = ("float32", "int64", "float64")


@dataclass(frozen=True)
class Config:
    """How the buffer of one program is built (both libraries build it alike)."""

    buffer: str
    storage: str
    max_size: int
    ndim: int
    width: int  # the second batch dimension of ndim=2 data
    data: str
    dtype: str
    features: int
    sampler: str
    sampler_args: tuple[tuple[str, object], ...]
    writer: str | None
    transform: str | None
    batch_size: int | None
    consume: int | None
    #: components built with their default arguments (``ListStorage()``, no storage at
    #: all, ``SamplerWithoutReplacement()``, ...), the way most scripts build them
    defaults: bool = False


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """A buffer configuration torchrl 0.14.1 can build."""
    defaults = draw(st.booleans())
    storages = LIST_STORAGES + TENSOR_STORAGES + (("default",) if defaults else ())
    storage = draw(st.sampled_from(storages))
    ndim = draw(st.sampled_from((1, 1, 2))) if storage in ("lazytensor", "memmap") else 1
    data = draw(st.sampled_from(DATA_FOR_STORAGE[storage]))
    if ndim == 2:
        data = draw(st.sampled_from(("tensor", "tensordict")))
    buffer = "ReplayBuffer"
    if data == "tensordict":
        buffer = draw(st.sampled_from(("ReplayBuffer", "TensorDictReplayBuffer")))
    samplers = ["random", "without_replacement", "default"]
    if data == "tensordict" and ndim == 1:
        samplers.append("slice")
    if torchrl_prioritized_available() and ndim == 1:
        samplers.append("prioritized")
    sampler = draw(st.sampled_from(samplers))
    sampler_args: dict[str, object] = {}
    if sampler == "without_replacement" and not defaults:
        sampler_args = {"drop_last": draw(st.booleans()), "shuffle": draw(st.booleans())}
    elif sampler == "slice":
        which = draw(st.sampled_from(("num_slices", "slice_len")))
        sampler_args = {
            which: 2,
            "traj_key": "episode",
            "strict_length": draw(st.booleans()),
        }
    elif sampler == "prioritized":
        sampler_args = {"alpha": draw(st.sampled_from((0.0, 0.7, 1.0))), "beta": 0.5}
    writers: list[str | None] = [None, "RoundRobinWriter"]
    if data == "tensordict":
        writers += ["TensorDictRoundRobinWriter", "TensorDictMaxValueWriter"]
    writer = draw(st.sampled_from(writers))
    transforms: list[str | None] = [None]
    if data in ("tensor", "tensordict"):
        transforms.append("double")
    batch_sizes: list[int | None] = [None, 1, 2, 3, 4]
    if sampler == "slice":
        batch_sizes = [2, 4, 6]
    return Config(
        buffer=buffer,
        storage=storage,
        max_size=draw(st.integers(1, 10)),
        ndim=ndim,
        width=draw(st.integers(1, 3)) if ndim == 2 else 1,
        data=data,
        dtype=draw(st.sampled_from(DTYPES)),
        features=draw(st.integers(1, 3)),
        sampler=sampler,
        sampler_args=tuple(sorted(sampler_args.items())),
        writer=writer,
        transform=draw(st.sampled_from(transforms)),
        batch_size=draw(st.sampled_from(batch_sizes)),
        # torchrl consumes with its uniform sampler on ndim=1 storages only (documented)
        consume=draw(st.sampled_from((None, None, 1, 2)))
        if sampler in ("random", "default") and ndim == 1
        else None,
        defaults=defaults,
    )


def _indices(cfg: Config) -> st.SearchStrategy[object]:
    """An index for ``rb[...]``: in range, negative, out of range, slices, lists."""
    bound = cfg.max_size + 2
    ints = st.integers(-bound, bound)
    return st.one_of(
        ints,
        st.tuples(st.just("slice"), st.integers(-bound, bound), st.integers(-bound, bound)),
        st.tuples(st.just("list"), st.lists(st.integers(0, bound), min_size=1, max_size=3)),
        st.just(("slice", None, None)),
    )


def operations(cfg: Config) -> st.SearchStrategy[tuple[object, ...]]:
    """One public operation on a buffer of ``cfg``."""
    sizes = st.sampled_from((None, 1, 2, 3, 5)) if cfg.sampler != "slice" else st.just(None)
    ops: list[st.SearchStrategy[tuple[object, ...]]] = [
        st.tuples(st.just("extend"), st.integers(0, 7), st.sampled_from(("batch", "list"))),
        st.tuples(st.just("extend"), st.integers(1, 4), st.just("batch")),
        st.tuples(st.just("add")),
        st.tuples(st.just("extend_bad"), st.sampled_from(("shape", "dtype"))),
        st.tuples(st.just("sample"), sizes, st.booleans()),
        st.tuples(st.just("sample"), sizes, st.booleans()),
        st.tuples(st.just("getitem"), _indices(cfg)),
        st.tuples(st.just("setitem"), st.integers(0, cfg.max_size), st.just("within")),
        st.tuples(st.just("setitem"), st.integers(-cfg.max_size, cfg.max_size + 1), st.just("raw")),
        st.tuples(
            st.just("update_priority"),
            st.lists(st.integers(0, cfg.max_size), min_size=1, max_size=3),
            st.sampled_from((0.5, 2.0, 0.0)),
        ),
        st.tuples(st.just("empty"), st.booleans()),
        st.tuples(st.just("stats")),
        st.tuples(st.just("state_dict")),
        st.tuples(st.just("dumps")),
        st.tuples(st.just("iterate"), st.integers(1, 3)),
        # past 1,000 items in one call (the default list storages' bound is there)
        st.tuples(st.just("extend"), st.sampled_from((600, 1001, 1100)), st.just("batch")),
        st.tuples(st.just("storage"), st.sampled_from(STORAGE_METHODS), _indices(cfg)),
        st.tuples(st.just("writer"), st.sampled_from(WRITER_METHODS)),
    ]
    return st.one_of(*ops)


#: the public methods of every storage both libraries have, called by the fuzzer directly
#: (``get``/``__getitem__`` at an index, ``set`` of a written slot, ``len``, ``max_size``,
#: ``ndim``, state and dumps round trips into a fresh storage; torchrl's storages have no
#: public ``empty``, its list storages no ``initialized``)
STORAGE_METHODS = ("get", "getitem", "set", "len", "max_size", "ndim", "state_dict", "dumps")

#: the public methods of every writer both libraries have (``add``/``extend`` written
#: straight through the writer, as torchrl's collectors may; state and dumps round trips)
WRITER_METHODS = (
    "add",
    "extend",
    "state_dict",
    "dumps",
    "write_count",
    "generations_of",
    "tracks_generations",
    "write_at",
)


@st.composite
def programs(draw: st.DrawFn) -> tuple[Config, tuple[tuple[object, ...], ...]]:
    """A configuration and up to 12 operations on the buffer it builds."""
    cfg = draw(configs())
    ops = draw(st.lists(operations(cfg), min_size=1, max_size=12))
    return cfg, tuple(ops)
