import h5py
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import MemoryMappedTensor, TensorDict

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata.datasets import hdf5 as hdf5_module
from rbdata.datasets import load_d4rl_hdf5, load_offline_data


def write_d4rl(
    path, n=7, obs_dim=3, act_dim=2, *, reward_shape=None, timeouts=True, seed=0, drop=()
):
    rng = np.random.default_rng(seed)
    arrays = {
        "observations": rng.standard_normal((n, obs_dim)).astype(np.float32),
        "next_observations": rng.standard_normal((n, obs_dim)).astype(np.float32),
        "actions": rng.standard_normal((n, act_dim)).astype(np.float32),
        "rewards": rng.standard_normal(reward_shape or (n,)).astype(np.float32),
        "terminals": (rng.random(n) < 0.3).astype(np.float32),  # D4RL stores floats or bools
    }
    if timeouts:
        arrays["timeouts"] = rng.random(n) < 0.3
    with h5py.File(path, "w") as f:
        for name, value in arrays.items():
            if name not in drop:
                f[name] = value
        f["infos/qpos"] = np.zeros((n, 2))  # extra groups are ignored
    return arrays


def test_d4rl_hdf5_loads_into_the_ted_layout_in_file_order(tmp_path):
    path = tmp_path / "data.hdf5"
    a = write_d4rl(path)
    td = load_d4rl_hdf5(path)
    assert td.batch_size == torch.Size([7])
    assert set(td.keys(True, True)) == {
        "observation",
        "action",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "terminated"),
        ("next", "truncated"),
        ("next", "done"),
    }
    assert torch.equal(td["observation"], torch.from_numpy(a["observations"]))
    assert torch.equal(td["next", "observation"], torch.from_numpy(a["next_observations"]))
    assert torch.equal(td["action"], torch.from_numpy(a["actions"]))
    assert td["next", "reward"].shape == (7, 1) and td["next", "reward"].dtype == torch.float32
    assert torch.equal(td["next", "reward"].squeeze(-1), torch.from_numpy(a["rewards"]))
    term = torch.from_numpy(a["terminals"] != 0).unsqueeze(-1)
    trunc = torch.from_numpy(a["timeouts"]).unsqueeze(-1)
    for key, expected in [("terminated", term), ("truncated", trunc), ("done", term | trunc)]:
        assert td["next", key].dtype == torch.bool and td["next", key].shape == (7, 1)
        assert torch.equal(td["next", key], expected)


def test_d4rl_hdf5_accepts_column_rewards_and_missing_timeouts(tmp_path):
    path = tmp_path / "data.h5"
    a = write_d4rl(path, reward_shape=(7, 1), timeouts=False)
    td = load_d4rl_hdf5(path)
    assert torch.equal(td["next", "reward"], torch.from_numpy(a["rewards"]))
    assert not td["next", "truncated"].any()
    assert torch.equal(td["next", "done"], td["next", "terminated"])


def test_d4rl_hdf5_errors_name_the_problem(tmp_path):
    write_d4rl(tmp_path / "a.hdf5", drop=("next_observations",))
    with pytest.raises(KeyError, match="next_observations"):
        load_d4rl_hdf5(tmp_path / "a.hdf5")
    write_d4rl(tmp_path / "b.hdf5", reward_shape=(7, 2))
    with pytest.raises(ValueError, match="'rewards' has shape \\(7, 2\\)"):
        load_d4rl_hdf5(tmp_path / "b.hdf5")
    write_d4rl(tmp_path / "c.hdf5", reward_shape=(6,))
    with pytest.raises(ValueError, match="'rewards' has shape \\(6,\\); expected a first dim"):
        load_d4rl_hdf5(tmp_path / "c.hdf5")
    with pytest.raises(FileNotFoundError, match="no such HDF5 file"):
        load_d4rl_hdf5(tmp_path / "missing.hdf5")


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 40), chunk_rows=st.integers(1, 50), seed=st.integers(0, 100))
def test_chunked_reads_equal_the_file(tmp_path, monkeypatch, n, chunk_rows, seed):
    path = tmp_path / f"p{n}_{chunk_rows}_{seed}.hdf5"
    a = write_d4rl(path, n=n, seed=seed)
    monkeypatch.setattr(hdf5_module, "_CHUNK_BYTES", chunk_rows * 12)  # 12 bytes: one obs row
    td = load_d4rl_hdf5(path, progress=False)
    assert torch.equal(td["observation"], torch.from_numpy(a["observations"]))
    assert torch.equal(td["next", "terminated"].squeeze(-1), torch.from_numpy(a["terminals"] != 0))
    assert torch.equal(td["next", "reward"].squeeze(-1), torch.from_numpy(a["rewards"]))


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 20), start=st.integers(-25, 25), stop=st.integers(-25, 25))
def test_a_row_range_reads_those_rows(tmp_path, n, start, stop):
    path = tmp_path / f"rows{n}.hdf5"
    if not path.exists():
        write_d4rl(path, n=n)
    full = load_d4rl_hdf5(path, progress=False)
    part = load_d4rl_hdf5(path, progress=False, rows=slice(start, stop))
    assert (part == full[start:stop]).all() and part.shape == full[start:stop].shape


def test_a_row_range_must_be_contiguous(tmp_path):
    write_d4rl(tmp_path / "d.hdf5")
    with pytest.raises(ValueError, match="step 1"):
        load_d4rl_hdf5(tmp_path / "d.hdf5", rows=slice(0, 4, 2))


def test_long_loads_show_a_progress_bar(tmp_path, monkeypatch, capsys):
    path = tmp_path / "d.hdf5"
    write_d4rl(path)
    monkeypatch.setattr(hdf5_module, "_PROGRESS_DELAY_S", 0)
    load_d4rl_hdf5(path)
    assert "reading d.hdf5" in capsys.readouterr().err
    load_d4rl_hdf5(path, progress=False)
    assert capsys.readouterr().err == ""


def test_load_offline_data_dispatches_on_the_source(tmp_path):
    td = TensorDict({"observation": torch.arange(12.0).reshape(6, 2)}, batch_size=[6])
    assert load_offline_data(td) is td

    td.memmap(tmp_path / "memmap")
    loaded = load_offline_data(tmp_path / "memmap")
    assert isinstance(loaded["observation"], MemoryMappedTensor)  # not read into memory
    assert torch.equal(loaded["observation"], td["observation"])

    a = write_d4rl(tmp_path / "d4rl.hdf5")
    assert torch.equal(
        load_offline_data(str(tmp_path / "d4rl.hdf5"))["action"], torch.from_numpy(a["actions"])
    )


@pytest.mark.parametrize("storage", [LazyTensorStorage, LazyMemmapStorage])
def test_load_offline_data_reads_a_dump_oldest_first(tmp_path, storage):
    rb = TensorDictReplayBuffer(storage=storage(8))
    rb.extend(TensorDict({"x": torch.arange(11), ("next", "y"): -torch.arange(11.0)}, [11]))
    rb.dumps(tmp_path / "dump")
    td = load_offline_data(tmp_path / "dump")
    assert td["x"].tolist() == list(range(3, 11))  # slots 0..2 were overwritten: wrap order
    assert td["next", "y"].tolist() == [-float(i) for i in range(3, 11)]

    short = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
    short.extend(TensorDict({"x": torch.arange(5)}, [5]))
    short.dumps(tmp_path / "short")
    assert load_offline_data(tmp_path / "short")["x"].tolist() == [0, 1, 2, 3, 4]


def test_load_offline_data_rejects_what_it_cannot_read(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_offline_data(tmp_path / "nothing")
    (tmp_path / "data.npz").write_bytes(b"")
    with pytest.raises(ValueError, match="suffix '.npz'"):
        load_offline_data(tmp_path / "data.npz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="neither a replay-buffer dump"):
        load_offline_data(tmp_path / "empty")
    with pytest.raises(TypeError, match="got int"):
        load_offline_data(3)
    with pytest.raises(ValueError, match="leading item dimension"):
        load_offline_data(TensorDict({"x": torch.zeros(())}, batch_size=[]))
    rb = ReplayBuffer(storage=ListStorage(4))
    rb.extend(["a", "b"])
    rb.dumps(tmp_path / "objects")
    with pytest.raises(ValueError, match="Python objects"):
        load_offline_data(tmp_path / "objects")
