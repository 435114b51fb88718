"""``rbdata verify`` rejects exactly the dumps ``loads`` rejects, with the same one-line reason.

Hypothesis damages copies of good dumps (bytes flipped, files truncated,
extended or removed, rows dropped or added with the manifest rewritten to match
or not, tensor values rewritten and rehashed, manifest fields rewritten) and
checks that ``verify_dump``, ``rbdata verify`` and ``loads`` into a buffer
built like the one that wrote the dump give one verdict: all accept, or all
reject with the same message. Only what describes the loading buffer (the
manifest's ``components`` and ``max_size``) is left out: ``verify`` has no
buffer to compare them with (``test_damaged_dumps`` covers them).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    CheckpointError,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictRoundRobinWriter,
)
from rbdata.checkpoint import verify_dump
from rbdata.cli import main

EXAMPLES = int(os.environ.get("RBDATA_VERIFY_EXAMPLES", "60"))
DESCRIBES_THE_BUFFER = ("components", "max_size")


def prioritized() -> TensorDictPrioritizedReplayBuffer:
    return TensorDictPrioritizedReplayBuffer(
        alpha=0.7,
        beta=0.5,
        storage=LazyTensorStorage(8),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=3,
        generator=torch.Generator().manual_seed(1),
    )


def fill_prioritized(rb: Any) -> None:
    ids = torch.arange(11)
    rb.extend(TensorDict({"id": ids, "x": ids[:, None].float().expand(11, 2)}, [11]))
    rb.update_priority(torch.arange(8), torch.arange(1, 9).double())


def consumed() -> ReplayBuffer:
    return ReplayBuffer(
        storage=LazyTensorStorage(6),
        sampler=SamplerWithoutReplacement(),
        batch_size=2,
        consume_after_n_samples=2,
        generator=torch.Generator().manual_seed(2),
    )


def fill_consumed(rb: Any) -> None:
    rb.extend(torch.arange(12.0).reshape(6, 2))
    rb.sample()


def listed() -> ReplayBuffer:
    return ReplayBuffer(storage=ListStorage(5), batch_size=2)


def fill_listed(rb: Any) -> None:
    rb.extend([{"a": i, "b": [i, "x"]} for i in range(4)])


BUFFERS: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {
    "prioritized": (prioritized, fill_prioritized),
    "consumed": (consumed, fill_consumed),
    "listed": (listed, fill_listed),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, (build, fill) in BUFFERS.items():
        rb = build()
        fill(rb)
        out[name] = tmp_path_factory.mktemp(name) / "dump"
        rb.dumps(out[name])
    return out


# ---------------------------------------------------------------- damage
def read_manifest(d: Path) -> dict[str, Any]:
    return json.loads((d / "manifest.json").read_text())


def write_manifest(d: Path, m: dict[str, Any]) -> None:
    (d / "manifest.json").write_text(json.dumps(m))


def data_files(d: Path) -> list[Path]:
    m = read_manifest(d)
    return [d / m["data"] / name for name in sorted(m["files"])]


class NothingToDamage(Exception):
    """The damage finds nothing of its kind in this dump (no data file, no tensor)."""


def pick(items: list, k: int) -> Any:
    if not items:
        raise NothingToDamage
    return items[k % len(items)]


def rehash(d: Path, file: Path, shape: list[int] | None = None) -> None:
    m = read_manifest(d)
    raw = file.read_bytes()
    entry = m["files"][file.name]
    entry.update(nbytes=len(raw), xxh3_64=xxhash.xxh3_64_hexdigest(raw))
    if shape is not None:
        entry["shape"] = shape
    write_manifest(d, m)


def flip(d: Path, k: int, at: int, mask: int, fix: bool) -> None:
    files = [d / "manifest.json", *data_files(d)]
    file = pick(files, k)
    raw = bytearray(file.read_bytes())
    if raw:
        raw[at % len(raw)] ^= mask
        file.write_bytes(bytes(raw))
    if fix and file.name != "manifest.json":
        rehash(d, file)


def resize(d: Path, k: int, rows: int, fix: bool) -> None:
    """Drop (rows < 0) or repeat (rows > 0) leading rows of a data file."""
    file = pick(data_files(d), k)
    entry = read_manifest(d)["files"][file.name]
    shape = entry.get("shape")
    if not shape or shape[0] == 0:
        return
    row = entry["nbytes"] // shape[0]
    raw = file.read_bytes()
    raw = raw[: max(0, len(raw) + rows * row)] if rows < 0 else raw + raw[:row] * rows
    file.write_bytes(raw)
    if fix:
        rehash(d, file, [len(raw) // row, *shape[1:]])


def cut(d: Path, k: int, nbytes: int) -> None:
    file = pick([d / "manifest.json", *data_files(d)], k)
    file.write_bytes(file.read_bytes()[:-nbytes] if nbytes else file.read_bytes() + b"\0")


def remove(d: Path, k: int) -> None:
    pick([d / "manifest.json", *data_files(d)], k).unlink()


def set_value(d: Path, k: int, value: float) -> None:
    """Write ``value`` into one element of a float or int data file, then rehash it."""
    m = read_manifest(d)
    files = [
        f
        for f in data_files(d)
        if m["files"][f.name].get("dtype") in ("float32", "float64", "int64")
    ]
    file = pick(files, k)
    entry = m["files"][file.name]
    dtype = getattr(torch, entry["dtype"])
    tensor = torch.frombuffer(bytearray(file.read_bytes()), dtype=dtype).clone()
    if tensor.numel() == 0:
        return
    if not dtype.is_floating_point and value != value:
        return
    tensor[k % tensor.numel()] = value if dtype.is_floating_point else int(max(-9, min(value, 99)))
    file.write_bytes(tensor.numpy().tobytes())
    rehash(d, file)


def leaves_of(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        if len(node) == 1 and next(iter(node)).startswith("$"):
            return [path]  # a tag: rewritten whole
        return [p for key, v in node.items() for p in leaves_of(v, (*path, key))] or [path]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in leaves_of(v, (*path, i))] or [path]
    return [path]


def rewrite_field(d: Path, k: int, value: Any) -> None:
    m = read_manifest(d)
    paths = [p for p in leaves_of(m) if p and p[0] not in DESCRIBES_THE_BUFFER]
    path = pick(paths, k)
    node = m
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value(node[path[-1]]) if callable(value) else value
    write_manifest(d, m)


def shift(old: Any) -> Any:
    return old + 1 if type(old) is int else old


VALUES = st.one_of(
    st.just(shift),
    st.none(),
    st.booleans(),
    st.integers(-2, 20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=2),
)
IDX = st.integers(0, 1000)
DAMAGE = st.one_of(
    st.tuples(st.just(flip), IDX, IDX, st.integers(1, 255), st.booleans()),
    st.tuples(st.just(resize), IDX, st.sampled_from([-2, -1, 1]), st.booleans()),
    st.tuples(st.just(cut), IDX, st.integers(0, 3)),
    st.tuples(st.just(remove), IDX),
    st.tuples(
        st.just(set_value), IDX, st.sampled_from([float("nan"), -1.0, float("inf"), 0.0, 7.0])
    ),
    st.tuples(st.just(rewrite_field), IDX, VALUES),
)


# ---------------------------------------------------------------- verdicts
def describes_the_buffer(message: str) -> bool:
    """Whether ``loads`` refused the dump for naming other components or another max_size."""
    return "was written by a buffer with" in message or "has storage max_size" in message


def verdict(call: Callable[..., Any], *args: Any) -> str:
    try:
        call(*args)
    except CheckpointError as err:
        return str(err)
    return "ok"


def cli_verdict(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    status = main(["verify", str(path)])
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    if status == 0:
        assert lines[0].startswith(f"{path}: ok (")
        return "ok"
    assert status == 1, (status, lines)
    prefix = f"{path}: damaged: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix) :]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.sampled_from(sorted(BUFFERS)), damages=st.lists(DAMAGE, min_size=1, max_size=3))
def test_verify_rejects_exactly_what_loads_rejects(name, damages, good, tmp_path_factory, capsys):
    dump = tmp_path_factory.mktemp("damaged") / "dump"
    shutil.copytree(good[name], dump)
    for damage, *args in damages:
        if (dump / "manifest.json").exists() or damage is not rewrite_field:
            # an earlier damage may have removed or garbled what this one edits
            with contextlib.suppress(NothingToDamage, OSError, ValueError, KeyError, TypeError):
                damage(dump, *args)
    by_function = verdict(verify_dump, dump)
    by_cli = cli_verdict(dump, capsys)
    rb = BUFFERS[name][0]()
    by_loads = verdict(rb.loads, dump)
    if by_function == "ok" and describes_the_buffer(by_loads):
        return  # e.g. a flipped byte renamed "components": verify has no buffer to compare
    assert by_function == by_loads, (damages, by_function, by_loads)
    assert by_cli == " ".join(by_loads.splitlines()), (damages, by_cli, by_loads)


@pytest.mark.parametrize("name", sorted(BUFFERS))
@pytest.mark.parametrize("rows", [-1, 1])
def test_a_row_lost_or_added_with_its_manifest_entry_rewritten(name, rows, good, tmp_path, capsys):
    """The issue's case: the file's entry rewritten to match (shape, size, checksum).

    Every file of the prioritized buffer's dump has a fixed length (content,
    priorities, generations, generator state): each such damage is rejected by
    both. The consume-after-n live set's lists may be shorter: accepted by both.
    """
    rejected = 0
    for k in range(len(data_files(good[name]))):
        dump = tmp_path / f"dump{k}"
        shutil.copytree(good[name], dump)
        resize(dump, k, rows, fix=True)
        by_loads = verdict(BUFFERS[name][0]().loads, dump)
        assert verdict(verify_dump, dump) == by_loads
        assert cli_verdict(dump, capsys) == by_loads
        rejected += by_loads != "ok"
    if name == "prioritized":
        assert rejected == len(data_files(good[name])) == 5
