"""Scripted operations run identically through either library, recorded step by step."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from ._data import batch, item
from ._describe import contents, describe, error_type, keys_of
from ._libs import cursor

CAPACITY = 8
STORAGES = ("list", "lazystack", "tensor", "lazytensor", "memmap")
PRIORITIZED_BUFFERS = ("PrioritizedReplayBuffer", "TensorDictPrioritizedReplayBuffer")


def make_storage(ns: Any, kind: str, data_kind: str, scratch: Path) -> Any:
    """A storage of ``kind`` holding ``CAPACITY`` items of ``data_kind``."""
    if kind == "list":
        return ns.ListStorage(CAPACITY)
    if kind == "lazystack":
        return ns.LazyStackStorage(CAPACITY)
    if kind == "lazytensor":
        return ns.LazyTensorStorage(CAPACITY)
    if kind == "memmap":
        return ns.LazyMemmapStorage(CAPACITY, scratch_dir=scratch)
    if kind == "tensor":
        proto = batch(data_kind, CAPACITY)
        if isinstance(proto, torch.Tensor):
            return ns.TensorStorage(torch.zeros_like(proto))
        if isinstance(proto, dict):
            return ns.TensorStorage(torch.utils._pytree.tree_map(torch.zeros_like, proto))
        if isinstance(proto, list):
            return ns.TensorStorage(proto)
        return ns.TensorStorage(proto.clone().zero_())
    raise ValueError(kind)


def make_sampler(ns: Any, kind: str) -> Any:
    """A transition sampler of ``kind``."""
    if kind == "random":
        return ns.RandomSampler()
    if kind == "without_replacement":
        return ns.SamplerWithoutReplacement()
    if kind == "prioritized":
        return ns.PrioritizedSampler(CAPACITY, alpha=0.7, beta=0.5)
    raise ValueError(kind)


def builder(
    ns: Any,
    *,
    buffer: str,
    storage: str,
    sampler: str | None,
    writer: str | None,
    data_kind: str,
    scratch: str | os.PathLike,
) -> Callable[[], Any]:
    """A function building a fresh buffer of this configuration (each in its own scratch dir)."""
    built = []

    def build() -> Any:
        where = Path(scratch) / f"{ns.name}-{len(built)}"
        where.mkdir(parents=True)
        built.append(where)
        kwargs: dict[str, Any] = {
            "storage": make_storage(ns, storage, data_kind, where),
            "batch_size": 4,
        }
        if sampler is not None:
            kwargs["sampler"] = make_sampler(ns, sampler)
        if writer is not None:
            kwargs["writer"] = getattr(ns, writer)()
        if buffer in PRIORITIZED_BUFFERS:
            kwargs.update(alpha=0.7, beta=0.5)
        if data_kind == "objects":
            kwargs["collate_fn"] = _as_list
        return getattr(ns, buffer)(**kwargs)

    return build


class Recorder:
    """Runs steps, recording each outcome (a summary or the exception type) by name."""

    def __init__(self) -> None:
        self.steps: dict[str, Any] = {}

    def step(
        self, name: str, fn: Callable[[], Any], summarize: Callable[[Any], Any] = describe
    ) -> Any:
        """Run ``fn``; record ``summarize(result)`` (or the raised type) under ``name``."""
        try:
            result = fn()
        except Exception as err:  # noqa: BLE001 - the exception type is the outcome
            self.steps[name] = ("raises", error_type(err))
            return None
        self.steps[name] = summarize(result)
        return result


def _with_info(pair: Any) -> Any:
    data, info = pair
    return {"data": describe(data), "info_keys": sorted(info), "info": describe(info)}


def _same(value: Any) -> Any:
    return value


def _indices(index: Any) -> Any:
    return (type(index).__name__, contents(index), str(index.dtype))


def transition_script(build: Callable[[], Any], data_kind: str) -> dict[str, Any]:
    """Construct, fill, sample, read, save, reload and empty a buffer; every step's outcome."""
    rec = Recorder()
    rb = rec.step("construct", build, lambda r: type(r).__name__)
    if rb is None:
        return rec.steps
    rec.step("len_empty", lambda: len(rb), _same)
    rec.step("stats_empty", rb.stats, _same)
    rec.step("sample_empty", rb.sample)
    rec.step("extend", lambda: rb.extend(batch(data_kind, 6)), _indices)
    if isinstance(rec.steps["extend"], tuple) and rec.steps["extend"][0] == "raises":
        return rec.steps  # an unsupported combination: what follows is not comparable
    rec.step("add", lambda: rb.add(item(data_kind, 6)), lambda i: (type(i).__name__, int(i)))
    rec.step("len", lambda: len(rb), _same)
    rec.step("write_count", lambda: rb.write_count, _same)
    rec.step("cursor", lambda: cursor(rb.writer), _same)
    rec.step("stats", rb.stats, _same)
    rec.step("sample", rb.sample)
    rec.step("sample_keys", rb.sample, keys_of)
    rec.step("sample_info", lambda: rb.sample(3, return_info=True), _with_info)
    rec.step("getitem_int", lambda: rb[0])
    rec.step("getitem_slice", lambda: rb[1:3])
    rec.step("getitem_list", lambda: rb[[0, 2]])
    rec.step("contents", lambda: rb[:], contents)
    rec.step("iterate", lambda: _first_batches(rb, 3), lambda bs: [describe(b) for b in bs])
    rec.step("extend_wrap", lambda: rb.extend(batch(data_kind, 5, 7)), contents)
    rec.step("len_wrapped", lambda: len(rb), _same)
    rec.step("write_count_wrapped", lambda: rb.write_count, _same)
    rec.step("cursor_wrapped", lambda: cursor(rb.writer), _same)
    rec.step("contents_wrapped", lambda: rb[:], contents)
    state = rec.step("state_dict", rb.state_dict, lambda sd: isinstance(sd, Mapping))
    if state is not None:
        rec.step(
            "load_state_dict",
            lambda: _reloaded(build, lambda new: new.load_state_dict(state)),
            _same,
        )
    rec.step("dumps_loads", lambda: _dumped_and_loaded(rb, build), _same)
    rec.step("empty", rb.empty, _same)
    rec.step("len_emptied", lambda: len(rb), _same)
    rec.step("write_count_emptied", lambda: rb.write_count, _same)
    rec.step("sample_emptied", rb.sample)
    return rec.steps


def _reloaded(build: Callable[[], Any], load: Callable[[Any], Any]) -> Any:
    new = build()
    load(new)
    return {
        "len": len(new),
        "write_count": new.write_count,
        "cursor": cursor(new.writer),
        "contents": contents(new[:]),
        "sample": describe(new.sample()),
    }


def _dumped_and_loaded(rb: Any, build: Callable[[], Any]) -> Any:
    with tempfile.TemporaryDirectory() as path:
        rb.dumps(path)
        return _reloaded(build, lambda new: new.loads(path))


def _as_list(items: Any) -> Any:
    return items


def _first_batches(rb: Any, n: int) -> list[Any]:
    out = []
    for b in rb:
        out.append(b)
        if len(out) == n:
            break
    return out
