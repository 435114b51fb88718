"""Nothing planted runs: files and directories another local user prepared are never trusted.

Each test reproduces one row of issue 33's planted-files table: another user
(``nobody``, uid 65534) prepares a directory, or a file in one, and the
trainer (root here) points rbdata at it. A planted pickle's ``__reduce__``
creates a marker file: the marker must never appear, and the right error
must be raised, with the buffer unchanged. The rules (``rbdata._trust``): a
directory rbdata creates is made 0700; one it reuses or reads must be owned
by the user or root, like its parents, and writable by nobody else (a parent
may be if it has the sticky bit); nothing read from a directory is unpickled;
a torchrl-format dump may not lead out of itself through a symlink.
"""

from __future__ import annotations

import json
import os
import pickle
import stat
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    CheckpointError,
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata._trust import check_contained, check_trusted_dir, private_dir
from rbdata.errors import UntrustedPathError

NOBODY = 65534
as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="planting as another user needs root (os.chown to nobody)",
)


class _Plant:
    """A pickle that, once unpickled, has run code: it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def _planted_pickle(marker: Path) -> bytes:
    return pickle.dumps(_Plant(marker))


def _give_to_nobody(*paths: Path) -> None:
    for path in paths:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    path = tmp_path / "marker-the-pickle-ran"
    yield path
    assert not path.exists(), "a planted pickle ran"


# ------------------------------------------------------------------ the trust rule
def test_private_dir_is_made_0700_with_its_parents(tmp_path: Path) -> None:
    made = Path(private_dir(tmp_path / "a" / "b", "scratch_dir"))
    for path in (made, made.parent):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777, 0o722])
def test_a_directory_others_can_write_is_refused_naming_path_owner_and_mode(
    tmp_path: Path, mode: int
) -> None:
    target = tmp_path / "open"
    target.mkdir()
    target.chmod(mode)
    with pytest.raises(UntrustedPathError) as err:
        check_trusted_dir(target, "scratch_dir")
    message = str(err.value)
    assert str(target) in message and "owner root" in message and oct(mode) in message


def test_a_parent_others_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    (parent / "child").mkdir(parents=True)
    parent.chmod(0o777)
    with pytest.raises(UntrustedPathError, match="a parent"):
        check_trusted_dir(parent / "child", "scratch_dir")
    parent.chmod(0o1777)  # like /tmp: others cannot rename or remove the child
    check_trusted_dir(parent / "child", "scratch_dir")


def test_a_sticky_directory_is_accepted_as_a_parent_only(tmp_path: Path) -> None:
    tmp_path.chmod(0o1777)
    with pytest.raises(UntrustedPathError):
        check_trusted_dir(tmp_path, "scratch_dir")
    check_trusted_dir(tmp_path, "the dumps path's parent", sticky_ok=True)
    tmp_path.chmod(0o700)


@as_root
def test_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "theirs"
    target.mkdir(mode=0o700)
    _give_to_nobody(target)
    with pytest.raises(UntrustedPathError, match=r"owned by another user") as err:
        private_dir(target, "scratch_dir")
    assert "nobody" in str(err.value) or str(NOBODY) in str(err.value)


@as_root
def test_a_parent_another_user_owns_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    (theirs / "mine").mkdir(parents=True, mode=0o700)
    _give_to_nobody(theirs)  # nobody can rename "mine" away and put their own there
    with pytest.raises(UntrustedPathError, match="theirs"):
        check_trusted_dir(theirs / "mine", "scratch_dir")


@as_root
def test_a_symlink_another_user_owns_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(mine)
    _give_to_nobody(link)
    with pytest.raises(UntrustedPathError, match="symlink"):
        check_trusted_dir(link, "scratch_dir")


def test_a_symlink_out_of_a_tree_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tree" / "a").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "tree" / "a" / "inside").symlink_to("..")
    check_contained(tmp_path / "tree", "the dump")
    (tmp_path / "tree" / "a" / "out").symlink_to("../../outside")
    with pytest.raises(UntrustedPathError, match="leads out"):
        check_contained(tmp_path / "tree", "the dump")


# ------------------------------------------------------------------ shared_init rendezvous
def _fill(storage: LazyMemmapStorage) -> None:
    storage.set(slice(0, 2), TensorDict({"obs": torch.ones(2, 3)}, [2]))


@as_root
def test_a_scratch_dir_another_user_planted_a_layout_in_is_refused(
    tmp_path: Path, marker: Path
) -> None:
    planted = tmp_path / "scratch"
    planted.mkdir(mode=0o755)
    for name in ("layout.pkl", "layout.json"):
        (planted / name).write_bytes(_planted_pickle(marker))
    _give_to_nobody(planted, planted / "layout.pkl", planted / "layout.json")
    with pytest.raises(UntrustedPathError, match="owned by another user"):
        storage = LazyMemmapStorage(10, scratch_dir=planted, shared_init=True)
        _fill(storage)


def test_an_unshared_scratch_file_is_private(tmp_path: Path) -> None:
    scratch = tmp_path / "new"
    _fill(LazyMemmapStorage(10, scratch_dir=scratch))
    assert stat.S_IMODE(scratch.stat().st_mode) == 0o700
    assert stat.S_IMODE((scratch / "packed.memmap").stat().st_mode) == 0o600


def test_a_world_writable_scratch_dir_is_refused(tmp_path: Path, marker: Path) -> None:
    planted = tmp_path / "scratch"
    planted.mkdir()
    (planted / "layout.pkl").write_bytes(_planted_pickle(marker))
    planted.chmod(0o777)
    with pytest.raises(UntrustedPathError, match="writable by its group or others"):
        _fill(LazyMemmapStorage(10, scratch_dir=planted, shared_init=True))
    storage = LazyMemmapStorage(10, scratch_dir=planted)  # unshared: refused at the first write
    with pytest.raises(UntrustedPathError):
        _fill(storage)


def test_the_rendezvous_reads_no_pickle_even_in_a_trusted_dir(tmp_path: Path, marker: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o700)
    (scratch / "layout.pkl").write_bytes(_planted_pickle(marker))
    storage = LazyMemmapStorage(10, scratch_dir=scratch, shared_init=True)
    _fill(storage)
    assert len(storage) == 2


def test_the_rendezvous_layout_is_json_and_private(tmp_path: Path) -> None:
    scratch = tmp_path / "new" / "scratch"
    storage = LazyMemmapStorage(10, scratch_dir=scratch, shared_init=True)
    _fill(storage)
    assert stat.S_IMODE(scratch.stat().st_mode) == 0o700
    layout = json.loads((scratch / "layout.json").read_text())
    assert layout["rows"] == 10 and layout["layout"]["dtypes"] == ["float32"]
    assert not list(scratch.glob("*.pkl"))
    for name in ("layout.json", "packed.memmap", ".lock"):
        assert stat.S_IMODE((scratch / name).stat().st_mode) == 0o600, name


def test_a_damaged_layout_is_a_value_error_naming_it(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o700)
    (scratch / "layout.json").write_text('{"layout": {}, "rows": -1, "width": 4}')
    storage = LazyMemmapStorage(10, scratch_dir=scratch, shared_init=True)
    with pytest.raises(ValueError, match="layout.json"):
        _fill(storage)


# ------------------------------------------------------------------ recovery directory
@pytest.fixture
def recovery():
    pytest.importorskip("ray", reason="the recovering owner is part of the 'ray' extra")
    from rbdata.service.server import recovery

    return recovery


@as_root
def test_a_recovery_directory_another_user_planted_in_is_refused(
    tmp_path: Path, marker: Path, recovery
) -> None:
    planted = tmp_path / "ckpt"
    planted.mkdir(mode=0o755)
    (planted / "hosted.pkl").write_bytes(_planted_pickle(marker))
    (planted / "owner.json").write_text('{"built": true}')
    _give_to_nobody(planted, planted / "hosted.pkl", planted / "owner.json")
    with pytest.raises(UntrustedPathError, match="owned by another user"):
        recovery.RecoveryConfig(str(planted), every_writes=2)  # on the driver, before Ray
    with pytest.raises(UntrustedPathError, match="owned by another user"):
        ReplayBuffer(
            storage=LazyTensorStorage(10),
            service_backend="ray",
            service_backend_options={"recovery": {"directory": str(planted), "every_writes": 2}},
        )
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    config = recovery.RecoveryConfig(str(mine), every_writes=2)
    os.chown(mine, NOBODY, NOBODY)  # given away after the config was made: the owner refuses
    (mine / "hosted.pkl").write_bytes(_planted_pickle(marker))
    (mine / "owner.json").write_text('{"built": true}')
    hosted = pickle.dumps(ReplayBuffer(storage=LazyTensorStorage(10)))
    with pytest.raises(UntrustedPathError, match="owned by another user"):
        recovery.RecoveringOwner(config)
    with pytest.raises(UntrustedPathError):
        recovery.RecoveringOwner(config, hosted)


def test_a_restarted_owner_reads_no_pickle_from_its_directory(
    tmp_path: Path, marker: Path, recovery
) -> None:
    from rbdata.service.transport.codec import encode

    config = recovery.RecoveryConfig(str(tmp_path / "ckpt"), every_writes=1)
    hosted = pickle.dumps(ReplayBuffer(storage=LazyTensorStorage(10)))
    owner = recovery.RecoveringOwner(config, hosted)
    owner.build(hosted, True, False)
    owner.logged("c", 1, "extend", encode((torch.arange(3),)), encode({}))
    root = Path(config.directory)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert not list(root.rglob("*.pkl"))
    (root / "hosted.pkl").write_bytes(_planted_pickle(marker))  # as the old format had it
    restarted = recovery.RecoveringOwner(config, hosted)
    assert restarted.recovery_state("c") == (1, 1, 1)
    assert len(restarted._buffer) == 3  # noqa: SLF001 - what the restart restored


def test_a_checkpoint_pointer_leading_elsewhere_is_refused(tmp_path: Path, recovery) -> None:
    elsewhere = tmp_path / "elsewhere"
    ReplayBuffer(storage=LazyTensorStorage(10)).dumps(elsewhere)
    root = tmp_path / "ckpt"
    root.mkdir(mode=0o700)
    (root / "owner.json").write_text('{"built": true}')
    pointer = {"generation": 1, "dir": "../elsewhere", "applied": {}, "restarts": 0}
    (root / "checkpoint.json").write_text(json.dumps(pointer))
    config = recovery.RecoveryConfig(str(root), every_writes=1)
    hosted = pickle.dumps(ReplayBuffer(storage=LazyTensorStorage(10)))
    with pytest.raises(ValueError, match="checkpoint.json"):
        recovery.RecoveringOwner(config, hosted)


# ------------------------------------------------------------------ dumps
@as_root
def test_a_dump_another_user_owns_is_not_loaded(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(4))
    rb.dumps(dump)
    _give_to_nobody(dump)
    fresh = ReplayBuffer(storage=LazyTensorStorage(10))
    with pytest.raises(UntrustedPathError, match="owned by another user"):
        fresh.loads(dump)
    assert len(fresh) == 0
    with pytest.raises(UntrustedPathError):
        rb.dumps(dump)  # nor written into


def test_a_dump_is_written_0700(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    ReplayBuffer(storage=LazyTensorStorage(10)).dumps(dump)
    assert stat.S_IMODE(dump.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in dump.iterdir() if p.is_dir())


def test_a_dump_under_a_world_writable_parent_is_not_written(tmp_path: Path) -> None:
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    with pytest.raises(UntrustedPathError):
        ReplayBuffer(storage=LazyTensorStorage(10)).dumps(parent / "dump")
    assert list(parent.iterdir()) == []


# ------------------------------------------------------------------ torchrl-format dumps
def _rows(n: int) -> TensorDict:
    ids = torch.arange(n)
    return TensorDict({"id": ids, "obs": ids[:, None].float().expand(n, 3).clone()}, [n])


def _torchrl_dump(root: Path) -> Path:
    """A directory laid out as torchrl 0.14's ``dumps`` writes a TensorDict buffer."""
    root.mkdir(mode=0o700)
    (root / "buffer_metadata.json").write_text('{"batch_size": 2}')
    _rows(4).memmap(root / "storage")
    (root / "storage" / "storage_metadata.json").write_text('{"len": 4}')
    (root / "writer").mkdir()
    (root / "writer" / "metadata.json").write_text('{"cursor": 4, "write_count": 4}')
    return root


def _plant_non_tensor(root: Path, folder: Path, marker: Path) -> None:
    """``storage/ev``: an entry tensordict reads by unpickling ``<folder>/other.pickle``."""
    folder.mkdir(parents=True)
    (folder / "other.pickle").write_bytes(_planted_pickle(marker))
    (folder / "meta.json").write_text(
        json.dumps(
            {
                "_type": "<class 'tensordict.tensorclass.NonTensorData'>",
                "_metadata": None,
                "_is_non_tensor": True,
            }
        )
    )
    meta_file = root / "storage" / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["ev"] = {"type": "NonTensorData"}
    meta_file.write_text(json.dumps(meta))


def _buffer() -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), batch_size=2)
    rb.extend(TensorDict({"id": torch.arange(2) + 100, "obs": torch.zeros(2, 3)}, [2]))
    return rb


def _assert_unchanged(rb: TensorDictReplayBuffer) -> None:
    assert len(rb) == 2 and rb.write_count == 2
    assert rb[:]["id"].tolist() == [100, 101]


def test_a_torchrl_dump_loads_without_tensordict_unpickling(tmp_path: Path) -> None:
    rb = _buffer()
    rb.loads(_torchrl_dump(tmp_path / "dump"))
    assert rb[:]["id"].tolist() == [0, 1, 2, 3]
    assert torch.equal(rb[:]["obs"], _rows(4)["obs"])


def test_a_symlinked_storage_entry_to_a_planted_pickle_does_not_run(
    tmp_path: Path, marker: Path
) -> None:
    root = _torchrl_dump(tmp_path / "dump")
    _plant_non_tensor(root, root / "writer" / "ev", marker)
    (root / "storage" / "ev").symlink_to("../writer/ev")
    rb = _buffer()
    with pytest.raises(CheckpointError, match="other.pickle"):
        rb.loads(root)  # allow_pickle=False by default
    _assert_unchanged(rb)


def test_a_planted_pickle_in_the_storage_does_not_run(tmp_path: Path, marker: Path) -> None:
    root = _torchrl_dump(tmp_path / "dump")
    _plant_non_tensor(root, root / "storage" / "ev", marker)
    rb = _buffer()
    with pytest.raises(CheckpointError, match="other.pickle"):
        rb.loads(root)
    _assert_unchanged(rb)


def test_a_symlink_leading_out_of_a_torchrl_dump_is_refused(tmp_path: Path, marker: Path) -> None:
    root = _torchrl_dump(tmp_path / "dump")
    outside = tmp_path / "outside" / "ev"
    _plant_non_tensor(root, outside, marker)
    (outside / "other.pickle").rename(outside / "other.data")  # no pickle suffix in reach
    (root / "storage" / "ev").symlink_to(outside)
    rb = _buffer()
    with pytest.raises(CheckpointError, match="leads out"):
        rb.loads(root)
    _assert_unchanged(rb)


def test_a_non_tensor_entry_is_never_unpickled_by_tensordict(
    tmp_path: Path, marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a pickle the suffix scan misses is handed to tensordict with allow_pickle=False."""
    from rbdata.buffers import _torchrl_dump as reader
    from rbdata.checkpoint import _tensordict_dir

    root = _torchrl_dump(tmp_path / "dump")
    _plant_non_tensor(root, root / "storage" / "ev", marker)
    for module in (reader, _tensordict_dir):
        monkeypatch.setattr(module, "refuse_pickles", lambda root, allowed=(): None)
    rb = _buffer()
    with pytest.raises(CheckpointError, match="pickle"):
        rb.loads(root)
    _assert_unchanged(rb)


def test_an_offline_memmap_directory_is_opened_without_unpickling(
    tmp_path: Path, marker: Path
) -> None:
    from rbdata import load_offline_data

    root = tmp_path / "data"
    _rows(4).memmap(root)
    assert load_offline_data(root)["id"].tolist() == [0, 1, 2, 3]
    (root / "ev").mkdir()
    (root / "ev" / "other.pickle").write_bytes(_planted_pickle(marker))
    with pytest.raises(CheckpointError, match="other.pickle"):
        load_offline_data(root)


def test_an_offline_memmap_directory_leading_out_of_itself_is_refused(tmp_path: Path) -> None:
    from rbdata import load_offline_data

    root = tmp_path / "data"
    _rows(4).memmap(root)
    (tmp_path / "elsewhere").mkdir()
    (root / "ev").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CheckpointError, match="leads out"):
        load_offline_data(root)


@as_root
def test_a_component_state_folder_another_user_owns_is_refused(tmp_path: Path) -> None:
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 2), torch.arange(2))
    folder = tmp_path / "storage"
    storage.dumps(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    _give_to_nobody(folder)
    with pytest.raises(UntrustedPathError, match="owned by another user"):
        LazyTensorStorage(10).loads(folder)
    with pytest.raises(UntrustedPathError):
        storage.dumps(folder)


@as_root
def test_a_torchrl_dump_another_user_owns_is_refused(tmp_path: Path) -> None:
    root = _torchrl_dump(tmp_path / "dump")
    _give_to_nobody(root)
    rb = _buffer()
    with pytest.raises(UntrustedPathError, match="owned by another user"):
        rb.loads(root)
    _assert_unchanged(rb)
