"""A corpus of damaged dumps: each is one CheckpointError naming the file, the buffer untouched.

Every damage is applied to a copy of one good dump. ``loads`` must raise one
CheckpointError whose message names the damaged file (or the dump), leave
the buffer exactly as an identical witness buffer (state_dict and a seeded
sample), and ``verify_dump`` / ``rbdata verify`` must report the same
damage in one line, without a traceback. Damages only a buffer can see (its
components, its max_size) pass ``verify`` and fail ``loads``.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import xxhash
from tensordict import TensorDict

from rbdata import (
    CheckpointError,
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictRoundRobinWriter,
)
from rbdata.checkpoint import verify_dump
from rbdata.cli import main

ROWS = 16


def make_buffer(seed: int = 0) -> TensorDictPrioritizedReplayBuffer:
    return TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        storage=LazyTensorStorage(ROWS),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
        generator=torch.Generator().manual_seed(seed),
    )


def fill(rb: TensorDictPrioritizedReplayBuffer, start: int, n: int) -> None:
    ids = torch.arange(start, start + n)
    rb.extend(
        TensorDict({"id": ids, "x": ids[:, None].float().expand(n, 3), "done": ids % 3 == 0}, [n])
    )
    rb.update_priority(torch.arange(n) % ROWS, (ids % 5 + 1).double())


# ---------------------------------------------------------------- editing a dump
def manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def save(d: Path, m: dict) -> None:
    (d / "manifest.json").write_text(json.dumps(m))


def edit(d: Path, change: Callable[[dict], None]) -> Path:
    m = manifest(d)
    change(m)
    save(d, m)
    return d / "manifest.json"


def leaf(d: Path, *where: str) -> Path:
    """The file of the tensor at ``state/where...`` of the dump ``d``."""
    node = manifest(d)["state"]
    for key in where:
        node = node[key]
    return d / manifest(d)["data"] / f"{node['$tensor']}.bin"


def rehash(d: Path, file: Path) -> None:
    m = manifest(d)
    m["files"][file.name]["xxh3_64"] = xxhash.xxh3_64_hexdigest(file.read_bytes())
    save(d, m)


def x_file(d: Path) -> Path:
    return leaf(d, "_storage", "content", "x")


def rewrite_tensor(d: Path, where: tuple[str, ...], tensor: torch.Tensor) -> Path:
    file = leaf(d, *where)
    file.write_bytes(tensor.numpy().tobytes())
    m = manifest(d)
    m["files"][file.name].update(
        shape=list(tensor.shape), nbytes=tensor.numel() * tensor.element_size()
    )
    save(d, m)
    rehash(d, file)
    return file


class Planted:
    """A pickle payload that leaves a mark if it is ever unpickled."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self):
        return (Path.touch, (self.mark,))


def plant_pickle(d: Path, declare: bool) -> Path:
    file = d / manifest(d)["data"] / "objects.pkl"
    file.write_bytes(pickle.dumps(Planted(d.parent / f"{d.name}.MARK")))
    if declare:
        m = manifest(d)
        m["objects"] = {"$pickle": "objects.pkl"}
        m["files"]["objects.pkl"] = {
            "nbytes": file.stat().st_size,
            "xxh3_64": xxhash.xxh3_64_hexdigest(file.read_bytes()),
        }
        save(d, m)
    return file


def flip(file: Path, at: int) -> Path:
    raw = bytearray(file.read_bytes())
    raw[at] ^= 0x5A
    file.write_bytes(bytes(raw))
    return file


def truncate(file: Path, by: int) -> Path:
    file.write_bytes(file.read_bytes()[:-by])
    return file


def set_key(key: str, value) -> Callable[[Path], Path]:
    return lambda d: edit(d, lambda m: m.__setitem__(key, value))


def bump(key: str) -> Callable[[Path], Path]:
    return lambda d: edit(d, lambda m: m.__setitem__(key, m[key] + 1))


def in_state(change: Callable[[dict], None]) -> Callable[[Path], Path]:
    return lambda d: edit(d, lambda m: change(m["state"]))


def files_entry(change: Callable[[dict], None], names_file: bool = False) -> Callable[[Path], Path]:
    def damage(d: Path) -> Path:
        named = edit(d, lambda m: change(m["files"][x_file(d).name]))
        return x_file(d) if names_file else named

    return damage


def replace_by_symlink(d: Path) -> Path:
    file = x_file(d)
    outside = d.parent / f"{d.name}-outside.bin"
    shutil.copy(file, outside)
    file.unlink()
    file.symlink_to(outside)
    return file


def data_dir_symlink(d: Path) -> Path:
    data = d / manifest(d)["data"]
    outside = d.parent / f"{d.name}-outside"
    shutil.move(data, outside)
    data.symlink_to(outside, target_is_directory=True)
    return data


def manifest_symlink(d: Path) -> Path:
    outside = d.parent / f"{d.name}-manifest.json"
    shutil.move(d / "manifest.json", outside)
    (d / "manifest.json").symlink_to(outside)
    return d / "manifest.json"


def touch(relative: str, directory: bool = False) -> Callable[[Path], Path]:
    def damage(d: Path) -> Path:
        target = d / relative.replace("DATA", manifest(d)["data"])
        target.mkdir() if directory else target.write_bytes(b"extra")
        return target

    return damage


def fifo_instead_of_file(d: Path) -> Path:
    file = x_file(d)
    file.unlink()
    os.mkfifo(file)
    return file


def dir_instead_of_file(d: Path) -> Path:
    file = x_file(d)
    file.unlink()
    file.mkdir()
    return file


def nested(depth: int) -> Callable[[Path], Path]:
    def damage(d: Path) -> Path:
        (d / "manifest.json").write_text(
            json.dumps(manifest(d))[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
        )
        return d / "manifest.json"

    return damage


def deep_state(d: Path) -> Path:
    m = manifest(d)
    node: list = []
    m["state"]["_storage"]["extra"] = node
    for _ in range(900):
        node.append([])
        node = node[0]
    save(d, m)
    return d / "manifest.json"


def priorities(bad: float) -> torch.Tensor:
    leaves = torch.ones(ROWS)
    leaves[3] = bad
    return leaves


def swap_ref(d: Path) -> Path:
    def change(state: dict) -> None:
        state["_storage"]["content"]["id"] = state["_storage"]["content"]["x"]

    return in_state(change)(d)


# name: (damage(dump) -> the path the error must name, seen by verify too)
DAMAGES: dict[str, tuple[Callable[[Path], Path], bool]] = {
    "truncated tensor file": (lambda d: truncate(x_file(d), 4), True),
    "tensor file one byte longer": (
        lambda d: x_file(d).open("ab").write(b"\0") and x_file(d),
        True,
    ),
    "flipped byte in a float file": (lambda d: flip(x_file(d), 5), True),
    "flipped byte in the id file": (lambda d: flip(leaf(d, "_storage", "content", "id"), 0), True),
    "flipped byte in the priorities": (lambda d: flip(leaf(d, "_sampler", "leaves"), 9), True),
    "empty manifest": (
        lambda d: (d / "manifest.json").write_bytes(b"") and d / "manifest.json",
        True,
    ),
    "manifest not JSON": (
        lambda d: (d / "manifest.json").write_text("{not json") and d / "manifest.json",
        True,
    ),
    "manifest a JSON list": (
        lambda d: (d / "manifest.json").write_text("[1, 2]") and d / "manifest.json",
        True,
    ),
    "manifest a JSON string": (
        lambda d: (d / "manifest.json").write_text('"dump"') and d / "manifest.json",
        True,
    ),
    "manifest not UTF-8": (
        lambda d: (d / "manifest.json").write_bytes(b"\xff\xfe{}") and d / "manifest.json",
        True,
    ),
    "manifest with a duplicate key": (
        lambda d: (
            (d / "manifest.json").write_text(
                (d / "manifest.json").read_text().replace('"length"', '"length": 0, "length"', 1)
            )
            and d / "manifest.json"
        ),
        True,
    ),
    "manifest nested too deeply": (nested(100_000), True),
    "state nested too deeply": (deep_state, True),
    "format_version 1": (set_key("format_version", 1), True),
    "format_version true": (set_key("format_version", True), True),
    "big-endian byte order": (set_key("byteorder", "big"), True),
    "data dir outside the dump": (set_key("data", "../elsewhere"), True),
    "data dir that does not exist": (
        lambda d: set_key("data", "data-0000000000000000")(d) and d / "data-0000000000000000",
        True,
    ),
    "length one more": (bump("length"), True),
    "length negative": (set_key("length", -1), True),
    "write_count one more": (bump("write_count"), True),
    "write_count a string": (set_key("write_count", "16"), True),
    "cursor past max_size": (set_key("cursor", 99), True),
    "spec says another shape": (
        lambda d: edit(d, lambda m: m["spec"]["x"].__setitem__("shape", [4])),
        True,
    ),
    "shape changed, same byte count": (files_entry(lambda e: e.update(shape=[12, 4])), True),
    "dtype changed, same item size": (files_entry(lambda e: e.update(dtype="int32")), True),
    "unknown dtype": (files_entry(lambda e: e.update(dtype="object")), True),
    "huge declared size": (
        files_entry(lambda e: e.update(shape=[2**40, 3], nbytes=2**40 * 12), names_file=True),
        True,
    ),
    "nbytes disagrees with the shape": (files_entry(lambda e: e.update(nbytes=7)), True),
    "checksum changed": (
        files_entry(lambda e: e.update(xxh3_64="0" * 16), names_file=True),
        True,
    ),
    "files entry with an extra key": (files_entry(lambda e: e.update(path="/etc/passwd")), True),
    "file name outside the data dir": (
        lambda d: edit(d, lambda m: m["files"].__setitem__("../x.bin", m["files"]["0.bin"])),
        True,
    ),
    "symlink instead of a tensor file": (replace_by_symlink, True),
    "data dir is a symlink": (data_dir_symlink, True),
    "manifest is a symlink": (manifest_symlink, True),
    "FIFO instead of a tensor file": (fifo_instead_of_file, True),
    "directory instead of a tensor file": (dir_instead_of_file, True),
    "extra file in the data dir": (touch("DATA/notes.txt"), True),
    "extra directory in the data dir": (touch("DATA/more", directory=True), True),
    "extra file beside the manifest": (touch("README"), True),
    "planted pickle file": (lambda d: plant_pickle(d, declare=False), True),
    "planted pickle declared as objects": (lambda d: plant_pickle(d, declare=True), True),
    "tensor file missing": (lambda d: x_file(d).unlink() or x_file(d), True),
    "data dir missing": (
        lambda d: shutil.rmtree(d / manifest(d)["data"]) or d / manifest(d)["data"],
        True,
    ),
    "manifest missing": (lambda d: (d / "manifest.json").unlink() or d / "manifest.json", True),
    "reference to no file": (
        in_state(lambda s: s["_storage"]["content"].__setitem__("x", {"$tensor": 99})),
        True,
    ),
    "reference that is not a number": (
        in_state(lambda s: s["_storage"]["content"].__setitem__("x", {"$tensor": "0.bin"})),
        True,
    ),
    "one file used twice": (swap_ref, True),
    "unknown tag": (in_state(lambda s: s.__setitem__("rng", {"$evil": "os.system"})), True),
    "tag beside other keys": (
        in_state(lambda s: s["_storage"]["content"]["x"].__setitem__("more", 1)),
        True,
    ),
    "state not an object": (lambda d: edit(d, lambda m: m.__setitem__("state", 5)), True),
    "writer section missing": (in_state(lambda s: s.pop("_writer")), True),
    "objects in a tensor-storage dump": (set_key("objects", [1] * ROWS), True),
    "bool tensor holding 2": (
        lambda d: rewrite_tensor(
            d, ("_storage", "content", "done"), torch.full((ROWS,), 2, dtype=torch.uint8)
        ),
        True,
    ),
    "generations of another length": (
        lambda d: (
            rewrite_tensor(d, ("_writer", "_generation"), torch.zeros(ROWS // 2).long()) and d
        ),
        True,
    ),
    "NaN priority": (
        lambda d: rewrite_tensor(d, ("_sampler", "leaves"), priorities(float("nan"))) and d,
        True,
    ),
    "negative priority": (
        lambda d: rewrite_tensor(d, ("_sampler", "leaves"), priorities(-1.0)) and d,
        True,
    ),
    "components of another buffer": (
        lambda d: edit(d, lambda m: m["components"].__setitem__("sampler", "RandomSampler")) and d,
        False,
    ),
    "another max_size": (lambda d: set_key("max_size", 2 * ROWS)(d) and d, False),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rb = make_buffer()
    fill(rb, 100, ROWS + 5)  # wrapped: cursor 5, generations 2 for slots 0..4
    path = tmp_path_factory.mktemp("good") / "dump"
    rb.dumps(path)
    return path


@pytest.fixture
def victim_and_witness():
    pair = []
    for _ in range(2):
        rb = make_buffer(seed=7)
        fill(rb, 0, 9)
        pair.append(rb)
    return pair


def same_state(a, b) -> bool:
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
        )
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    return text


@pytest.mark.parametrize("name", list(DAMAGES))
def test_a_damaged_dump_is_one_error_naming_the_file(
    name, good, tmp_path, victim_and_witness, capsys
):
    damage, verify_sees_it = DAMAGES[name]
    dump = tmp_path / "dump"
    shutil.copytree(good, dump, symlinks=True)
    named = damage(dump)
    victim, witness = victim_and_witness
    for allow_pickle in (False, True):
        with pytest.raises(CheckpointError) as err:
            victim.loads(dump, allow_pickle=allow_pickle)
        assert str(named) in str(err.value) or str(dump) in str(err.value), str(err.value)
        if named != dump:
            assert str(named) in str(err.value), str(err.value)
    assert not (tmp_path / "dump.MARK").exists()  # no pickle from the dump ever ran
    assert same_state(victim.state_dict(), witness.state_dict())
    assert torch.equal(victim.sample()["id"], witness.sample()["id"])
    if verify_sees_it:
        with pytest.raises(CheckpointError, match=str(named).replace(".", r"\.")):
            verify_dump(dump, allow_pickle=True)
    status = main(["verify", str(dump)])
    line = one_line(capsys)
    assert status == (1 if verify_sees_it else 0)
    assert (str(named) in line) if verify_sees_it else ": ok (" in line
    assert not (tmp_path / "dump.MARK").exists()


def test_the_good_dump_loads_and_verifies(good, capsys):
    rb = make_buffer()
    rb.loads(good)
    assert rb.write_count == ROWS + 5 and len(rb) == ROWS
    assert main(["verify", str(good)]) == 0
    assert "ok (16 items, write_count 21" in one_line(capsys)


def test_rbdata_verify_on_a_bad_path_exits_2_in_one_line(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "missing")]) == 2
    assert "not found" in one_line(capsys)
    (tmp_path / "file").write_text("x")
    assert main(["verify", str(tmp_path / "file")]) == 2
    assert "not a directory" in one_line(capsys)


def test_dumps_refuses_to_replace_what_is_not_a_dump(tmp_path):
    rb = make_buffer()
    fill(rb, 0, 3)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "thesis.tex").write_text("years of work")
    with pytest.raises(CheckpointError, match="not a dump"):
        rb.dumps(tmp_path / "home")
    assert (tmp_path / "home" / "thesis.tex").read_text() == "years of work"
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="not a dump"):
        rb.dumps(tmp_path / "file")


def test_corpus_size():
    assert len(DAMAGES) >= 50
