"""Datasets as a new user meets them: download=True, convert errors that say what to add,
round trips that keep shapes."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, TensorDictReplayBuffer
from rbdata.cli import main
from rbdata.cli.convert import convert
from rbdata.datasets import load_d4rl_hdf5, load_minari, load_offline_data


@pytest.fixture(autouse=True)
def datasets_path(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def ted(n: int = 10, reward_shape=()) -> TensorDict:
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[-1] = True
    return TensorDict(
        {
            "observation": torch.randn(n, 3),
            "action": torch.randn(n, 2),
            "next": {
                "observation": torch.randn(n, 3),
                "reward": torch.randn(n, *reward_shape),
                "terminated": done.clone(),
                "truncated": torch.zeros(n, 1, dtype=torch.bool),
                "done": done,
            },
        },
        batch_size=[n],
    )


def dump(path, data: TensorDict) -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    rb.extend(data)
    rb.dumps(path)


def test_download_true_names_the_command_to_run():
    with pytest.raises(FileNotFoundError, match=r"never downloads.*`minari download D4RL/x-v0`"):
        load_minari("D4RL/x-v0", download=True)
    with pytest.raises(TypeError, match="download must be a bool"):
        load_minari("D4RL/x-v0", download="yes")


def test_download_true_loads_a_local_dataset(tmp_path):
    pytest.importorskip("minari")
    dump(tmp_path / "dump", ted())
    convert(tmp_path / "dump", tmp_path / "copy-v0", to="minari", progress=False)
    td = load_minari(tmp_path / "copy-v0", download=True)
    assert td.shape[0] == 10


def test_a_done_only_dump_to_d4rl_says_what_to_add(tmp_path, capsys):
    data = TensorDict(
        {"obs": torch.randn(5, 3), "next": {"done": torch.zeros(5, 1, dtype=torch.bool)}}, [5]
    )
    dump(tmp_path / "dump", data)
    assert main(["convert", str(tmp_path / "dump"), str(tmp_path / "x.hdf5")]) == 2
    err = capsys.readouterr().err
    assert "lacks observation, action, next.observation, next.reward, next.terminated" in err
    assert "the source has next.done, obs" in err and "add them" in err
    assert "memmap or dumps" in err
    assert not (tmp_path / "x.hdf5").exists()


@pytest.mark.parametrize("reward_shape", [(), (1,)])
def test_dump_to_d4rl_to_memmap_to_dumps_keeps_shapes(tmp_path, reward_shape):
    data = ted(reward_shape=reward_shape)
    dump(tmp_path / "a", data)
    for src, dst, to in (
        ("a", "b.hdf5", None),
        ("b.hdf5", "c", "memmap"),
        ("c", "d", "dumps"),
    ):
        convert(tmp_path / src, tmp_path / dst, to=to, progress=False)
    back = load_offline_data(tmp_path / "d")
    for key in data.keys(include_nested=True, leaves_only=True):
        assert back[key].shape == data[key].shape, key
        torch.testing.assert_close(back[key], data[key])


def test_a_plain_d4rl_file_still_loads_rewards_as_n_by_1(tmp_path):
    path = tmp_path / "d4rl.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"] = np.zeros((4, 3), np.float32)
        f["next_observations"] = np.zeros((4, 3), np.float32)
        f["actions"] = np.zeros((4, 2), np.float32)
        f["rewards"] = np.arange(4, dtype=np.float32)
        f["terminals"] = np.array([0, 0, 0, 1], bool)
    td = load_d4rl_hdf5(path)
    assert td["next", "reward"].shape == (4, 1) and td["next", "done"].shape == (4, 1)
