"""Runs one fuzzer program through one library, recording every step's outcome and state."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, is_tensorclass

from ._data import Step
from ._describe import contents, describe, error_type
from ._fuzz_program import Config
from ._libs import cursor


def _double(data: Any) -> Any:
    """The ``"double"`` transform: every leaf times two (module level: it pickles)."""
    if isinstance(data, TensorDictBase):
        return data.apply(lambda t: t * 2)
    return data * 2


def batch(cfg: Config, n: int, start: int) -> Any:
    """``n`` items of ``cfg.data`` (``[width, n]`` on ndim=2), values set by their position."""
    # ndim=2: dim_extend defaults to 1, so items run along dim 1 and each has ``width`` cells
    pos = torch.arange(start * cfg.width, (start + n) * cfg.width).reshape(n, cfg.width)
    shape = (cfg.width, n) if cfg.ndim == 2 else (n,)
    pos = pos.T.contiguous() if cfg.ndim == 2 else pos[:, 0]
    dtype = getattr(torch, cfg.dtype)
    obs = (pos[..., None] * 10 + torch.arange(cfg.features)).to(dtype)
    if cfg.data == "tensor":
        return obs
    if cfg.data == "tensordict":
        return TensorDict(
            {
                "obs": obs,
                "reward": (pos % 5).float(),
                "episode": pos // 3,
                "next": {"obs": obs + 1, "done": (pos % 3 == 2)[..., None]},
            },
            batch_size=shape,
        )
    if cfg.data == "tensorclass":
        return Step(obs=obs, reward=pos.double(), batch_size=shape)
    if cfg.data == "pytree":
        return {"a": obs, "b": (pos.clone(), [pos[..., None] * 2])}
    if cfg.data == "tuple":
        return (obs, pos.clone())
    if cfg.data == "objects":
        return [{"i": i, "s": f"item{i}"} for i in pos.tolist()]
    raise ValueError(cfg.data)


def item(cfg: Config, start: int) -> Any:
    """One item of ``cfg.data`` (what ``add`` takes)."""
    data = batch(cfg, 1, start)
    if cfg.data == "objects":
        return data[0]
    if cfg.ndim == 2:  # one item along the extend dim: its ``width`` cells
        return data[:, 0]
    if cfg.data in ("pytree", "tuple"):
        return torch.utils._pytree.tree_map(lambda t: t[0], data)
    return data[0]


def as_list(cfg: Config, data: Any) -> Any:
    """``data`` as a list of items (``extend``'s list form)."""
    if cfg.data == "objects":
        return data
    if cfg.ndim == 2:
        return data  # ndim=2 batches (items along dim 1): the batch form stands
    if cfg.data in ("pytree", "tuple"):
        return [torch.utils._pytree.tree_map(lambda t, i=i: t[i], data) for i in range(n_of(data))]
    return [data[i] for i in range(data.shape[0])]


def n_of(data: Any) -> int:
    """The number of items of a PyTree batch (its first leaf's first dim)."""
    return int(torch.utils._pytree.tree_leaves(data)[0].shape[0])


def bad_batch(cfg: Config, how: str, start: int) -> Any:
    """A batch whose items do not match what the buffer holds (``how``: shape or dtype)."""
    good = batch(cfg, 2, start)
    if cfg.data == "objects":
        return torch.zeros(2, 3) if how == "shape" else [None, None]

    def damage(t: torch.Tensor) -> torch.Tensor:
        if how == "shape":
            return torch.cat([t, t[..., -1:]], dim=-1) if t.ndim > 1 else t[..., None].repeat(1, 2)
        return t.to(torch.complex64) if t.dtype.is_floating_point else t.to(torch.float16)

    if is_tensorclass(good) or isinstance(good, TensorDictBase):
        return good.apply(damage)
    return torch.utils._pytree.tree_map(damage, good)


def build(ns: Any, cfg: Config, scratch: Path) -> Any:
    """A buffer of ``cfg`` from the library ``ns``."""
    storage: Any = None
    if cfg.storage == "default":
        pass  # no storage given: the buffer's default (ListStorage(1000))
    elif cfg.storage == "list":
        storage = ns.ListStorage() if cfg.defaults else ns.ListStorage(cfg.max_size)
    elif cfg.storage == "lazystack":
        storage = ns.LazyStackStorage() if cfg.defaults else ns.LazyStackStorage(cfg.max_size)
    elif cfg.storage == "lazytensor":
        storage = ns.LazyTensorStorage(cfg.max_size, ndim=cfg.ndim)
    elif cfg.storage == "memmap":
        storage = ns.LazyMemmapStorage(cfg.max_size, scratch_dir=scratch, ndim=cfg.ndim)
    else:
        proto = batch(cfg, cfg.max_size, 0)
        storage = ns.TensorStorage(torch.utils._pytree.tree_map(torch.zeros_like, proto))
    kwargs: dict[str, Any] = {} if storage is None else {"storage": storage}
    args = dict(cfg.sampler_args)
    if cfg.sampler == "random":
        kwargs["sampler"] = ns.RandomSampler()
    elif cfg.sampler == "without_replacement":
        kwargs["sampler"] = ns.SamplerWithoutReplacement(**args)
    elif cfg.sampler == "slice":
        kwargs["sampler"] = ns.SliceSampler(**args)
    elif cfg.sampler == "prioritized":
        kwargs["sampler"] = ns.PrioritizedSampler(cfg.max_size * cfg.width, **args)
    if cfg.writer == "TensorDictMaxValueWriter":
        kwargs["writer"] = ns.TensorDictMaxValueWriter(rank_key="reward")
    elif cfg.writer is not None:
        kwargs["writer"] = getattr(ns, cfg.writer)()
    if cfg.transform == "double":
        kwargs["transform"] = _double
    if cfg.batch_size is not None:
        kwargs["batch_size"] = cfg.batch_size
    if cfg.consume is not None:
        kwargs["consume_after_n_samples"] = cfg.consume
    if cfg.data == "objects":
        kwargs["collate_fn"] = _as_is
    return getattr(ns, cfg.buffer)(**kwargs)


def _as_is(items: Any) -> Any:
    return items


def _index(spec: Any) -> Any:
    if isinstance(spec, tuple) and spec[0] == "slice":
        return slice(spec[1], spec[2])
    if isinstance(spec, tuple) and spec[0] == "list":
        return list(spec[1])
    return spec


def summary(value: Any, drop_index: bool = False) -> Any:
    """Kinds, shapes, dtypes and the full contents of ``value``."""
    if drop_index and isinstance(value, TensorDictBase):
        value = value.exclude("index")
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
        data, info = value  # a (sample, info) pair
        return ("with_info", summary(data), sorted(info), contents(info))
    return (describe(value), contents(value))


def stores_index(cfg: Config) -> bool:
    """Whether torchrl stores an ``"index"`` entry with every row (a documented gap)."""
    writer = cfg.writer or ""
    return cfg.buffer == "TensorDictReplayBuffer" or writer.startswith("TensorDict")


def state(rb: Any, cfg: Config) -> Any:
    """What is observable of the buffer between operations."""
    try:
        size = len(rb)
        held = summary(rb[:], drop_index=stores_index(cfg)) if size else None
    except Exception as err:  # noqa: BLE001 - the failure is part of the state
        return ("raises", error_type(err))
    return {"len": size, "write_count": rb.write_count, "cursor": cursor(rb.writer), "rows": held}


class Program:
    """One program's run through one library: outcome and state after every step."""

    def __init__(self, ns: Any, cfg: Config, scratch: Path) -> None:
        self.ns, self.cfg, self.scratch = ns, cfg, scratch
        self.position = 0  # items written so far (identical data for both libraries)
        self.builds = 0
        self.steps: list[tuple[Any, Any, Any]] = []

    def fresh(self) -> Any:
        """Another buffer of the program's configuration, in its own scratch directory."""
        self.builds += 1
        where = self.scratch / f"{self.ns.name}-{self.builds}"
        where.mkdir(parents=True)
        torch.manual_seed(10_000 + self.builds)
        return build(self.ns, self.cfg, where)

    def run(self, ops: tuple[tuple[Any, ...], ...]) -> list[tuple[Any, Any, Any]]:
        """Every step's ``(operation, outcome, state)``; the construction is step 0."""
        try:
            rb = self.fresh()
        except Exception as err:  # noqa: BLE001 - the exception type is the outcome
            self.steps.append((("construct",), ("raises", error_type(err)), None))
            return self.steps
        self.steps.append((("construct",), type(rb).__name__, state(rb, self.cfg)))
        for seed, op in enumerate(ops):
            torch.manual_seed(seed)
            try:
                outcome = self.apply(rb, op)
            except Exception as err:  # noqa: BLE001 - the exception type is the outcome
                outcome = ("raises", error_type(err))
            self.steps.append((op, outcome, state(rb, self.cfg)))
        return self.steps

    def _next(self, n: int) -> int:
        start, self.position = self.position, self.position + n
        return start

    def apply(self, rb: Any, op: tuple[Any, ...]) -> Any:
        """Run one operation on ``rb``; its comparable outcome."""
        cfg, name = self.cfg, op[0]
        if name == "extend":
            data = batch(cfg, op[1], self._next(op[1]))
            if op[2] == "list":
                data = as_list(cfg, data)
            return summary(rb.extend(data))
        if name == "add":
            return summary(rb.add(item(cfg, self._next(1))))
        if name == "extend_bad":
            return summary(rb.extend(bad_batch(cfg, op[1], self._next(2))))
        # a plain ReplayBuffer's samples carry the "index" torchrl's TensorDict writers store
        drop = stores_index(cfg) and cfg.buffer != "TensorDictReplayBuffer"
        if name == "sample":
            got = rb.sample(op[1], return_info=op[2])
            if op[2]:
                return ("with_info", summary(got[0], drop), sorted(got[1]), contents(got[1]))
            return summary(got, drop)
        if name == "getitem":
            return summary(rb[_index(op[1])], drop_index=stores_index(cfg))
        if name == "setitem":
            index = op[1]
            if op[2] == "within":  # a written slot (none: nothing to do)
                if len(rb) == 0:
                    return "skipped"
                index %= len(rb)
            rb[index] = item(cfg, self._next(1))
            return None
        if name == "update_priority":
            return summary(
                rb.update_priority(torch.tensor(op[1]), torch.full((len(op[1]),), op[2]))
            )
        if name == "empty":
            return summary(rb.empty(empty_write_count=op[1]))
        if name == "stats":
            return dict(rb.stats())
        if name == "state_dict":
            new = self.fresh()
            new.load_state_dict(rb.state_dict())
            return state(new, cfg)
        if name == "dumps":
            with tempfile.TemporaryDirectory() as path:
                rb.dumps(path)
                new = self.fresh()
                new.loads(path)
                return state(new, cfg)
        if name == "storage":
            return self._storage_call(rb, op[1], op[2])
        if name == "writer":
            return self._writer_call(rb, op[1])
        if name == "iterate":
            out = []
            for got in rb:
                out.append(summary(got, drop))
                if len(out) == op[1]:
                    break
            return out
        raise ValueError(name)

    def _storage_call(self, rb: Any, method: str, spec: Any) -> Any:
        """One public storage method, called on the buffer's storage directly."""
        storage, cfg = rb.storage, self.cfg
        if method == "get":
            return summary(storage.get(_index(spec)), drop_index=stores_index(cfg))
        if method == "getitem":
            return summary(storage[_index(spec)], drop_index=stores_index(cfg))
        if method == "set":
            if len(storage) == 0 or cfg.ndim != 1 or not isinstance(spec, int):
                return "skipped"
            storage.set(spec % len(storage), item(cfg, self._next(1)))
            return None
        if method in ("len", "max_size", "ndim", "initialized"):
            value = len(storage) if method == "len" else getattr(storage, method)
            return int(value) if not isinstance(value, bool) else value
        if method == "empty":
            storage.empty()
            return len(storage)
        new = self.fresh().storage
        if method == "state_dict":
            new.load_state_dict(storage.state_dict())
        else:  # dumps
            with tempfile.TemporaryDirectory() as path:
                storage.dumps(path)
                new.loads(path)
        return (len(new), summary(new[:], drop_index=stores_index(cfg)) if len(new) else None)

    def _writer_call(self, rb: Any, method: str) -> Any:
        """One public writer method, called on the buffer's writer directly."""
        writer, cfg = rb.writer, self.cfg
        if method == "add":
            return summary(writer.add(item(cfg, self._next(1))))
        if method == "extend":
            return summary(writer.extend(batch(cfg, 3, self._next(3))))
        if method == "write_count":
            return rb.write_count
        if method == "generations_of":
            return summary(writer.generations_of(torch.arange(max(len(rb), 1))))
        if method == "tracks_generations":
            return bool(writer.tracks_generations)
        if method == "write_at":
            if len(rb) == 0 or cfg.ndim != 1:
                return "skipped"
            return summary(writer.write_at(torch.tensor([0]), batch(cfg, 1, self._next(1))))
        new = self.fresh()
        if method == "state_dict":
            new.writer.load_state_dict(writer.state_dict())
        else:  # dumps
            with tempfile.TemporaryDirectory() as path:
                writer.dumps(path)
                new.writer.loads(path)
        return (cursor(new.writer), new.write_count)
