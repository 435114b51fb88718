"""load_minari on datasets written here by the real minari package (no download, no jax)."""

from __future__ import annotations

import json
import warnings

import h5py
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rbdata
from rbdata import LazyMemmapStorage, LazyTensorStorage, OfflineToOnlineReplayBuffer
from rbdata.datasets import MinariReader, load_minari, load_offline_data, minari_data_dir
from rbdata.datasets import minari as minari_module

minari = pytest.importorskip("minari")
gym = pytest.importorskip("gymnasium")
from minari.data_collector import EpisodeBuffer  # noqa: E402

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


@pytest.fixture(autouse=True)
def datasets_path(tmp_path, monkeypatch):
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def sample(space, n, rng):
    """``n`` stacked samples of ``space`` as minari's EpisodeBuffer holds them."""
    if isinstance(space, gym.spaces.Dict):
        return {k: sample(s, n, rng) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(sample(s, n, rng) for s in space.spaces)
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(space.n, size=n)
    if space.dtype == np.uint8:
        return rng.integers(0, 256, size=(n, *space.shape), dtype=np.uint8)
    return rng.uniform(-1, 1, size=(n, *space.shape)).astype(space.dtype)


def make_dataset(dataset_id, lengths, obs_space=BOX, act_space=BOX, truncated=(), seed=0):
    """Episodes of the given lengths; each ends terminated unless its index is in ``truncated``."""
    rng = np.random.default_rng(seed)
    episodes = []
    for i, t in enumerate(lengths):
        end = np.zeros(t, bool)
        end[-1] = True
        episodes.append(
            EpisodeBuffer(
                id=i,
                observations=sample(obs_space, t + 1, rng),
                actions=sample(act_space, t, rng),
                rewards=rng.normal(size=t),
                terminations=end if i not in truncated else np.zeros(t, bool),
                truncations=end if i in truncated else np.zeros(t, bool),
            )
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # minari asks for authors, permalinks, ...
        minari.create_dataset_from_buffers(
            dataset_id, episodes, observation_space=obs_space, action_space=act_space
        )
    return minari_data_dir(dataset_id)


def leaves(value, key=()):
    """(key, array) pairs of minari's decoded (possibly nested) observations or actions."""
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in leaves(v, (*key, k))]
    if isinstance(value, tuple):
        return [kv for i, v in enumerate(value) for kv in leaves(v, (*key, str(i)))]
    return [(key, np.asarray(value))]


def assert_matches_minari(td, dataset_id):
    """Every row of ``td`` equals what minari's own reader gives for that step."""
    start = 0
    for ep in minari.load_dataset(dataset_id).iterate_episodes():
        stop = start + len(ep.rewards)
        rows = td[start:stop]
        assert rows["episode"].tolist() == [ep.id] * len(ep.rewards)
        for key, array in leaves(ep.observations):
            assert rows[("observation", *key)].numpy().dtype == array.dtype
            np.testing.assert_array_equal(rows[("observation", *key)].numpy(), array[:-1])
            np.testing.assert_array_equal(rows[("next", "observation", *key)].numpy(), array[1:])
        for key, array in leaves(ep.actions):
            assert rows[("action", *key)].numpy().dtype == array.dtype
            np.testing.assert_array_equal(rows[("action", *key)].numpy(), array)
        np.testing.assert_array_equal(rows["next", "reward"].numpy(), ep.rewards[:, None])
        np.testing.assert_array_equal(rows["next", "terminated"].numpy(), ep.terminations[:, None])
        np.testing.assert_array_equal(rows["next", "truncated"].numpy(), ep.truncations[:, None])
        start = stop
    assert start == td.shape[0]


def test_box_spaces_with_terminated_and_truncated_episodes():
    make_dataset("test/box-v0", [5, 3, 7], truncated={1})
    td = load_minari("test/box-v0")
    assert td.batch_size == (15,)
    assert_matches_minari(td, "test/box-v0")
    for key in ("terminated", "truncated", "done"):
        assert td["next", key].dtype == torch.bool and td["next", key].shape == (15, 1)
    assert td["next", "reward"].shape == (15, 1) and td["next", "reward"].dtype == torch.float64
    assert td["episode"].dtype == torch.int64
    ends = td["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist()
    assert ends == [4, 7, 14]
    assert td["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [7]


def test_discrete_actions_and_episodes_in_numeric_order():
    lengths = [2 + i % 4 for i in range(12)]
    make_dataset("test/discrete-v0", lengths, act_space=gym.spaces.Discrete(3))
    td = load_minari("test/discrete-v0")
    assert td["action"].shape == (sum(lengths),) and td["action"].dtype == torch.int64
    expected = [i for i, t in enumerate(lengths) for _ in range(t)]
    assert td["episode"].tolist() == expected  # episode_2 before episode_10
    assert_matches_minari(td, "test/discrete-v0")


def test_dict_and_tuple_observations_become_nested_keys():
    obs = gym.spaces.Dict(
        {
            "pos": BOX,
            "inner": gym.spaces.Dict({"id": gym.spaces.Discrete(5)}),
            "pair": gym.spaces.Tuple((gym.spaces.Discrete(2), BOX)),
        }
    )
    make_dataset("test/dict-v0", [4, 6], obs_space=obs, act_space=gym.spaces.Discrete(2))
    td = load_minari("test/dict-v0")
    assert td["observation", "inner", "id"].shape == (10,)
    assert td["observation", "pair", "1"].shape == (10, 3)
    assert td["next", "observation", "pos"].dtype == torch.float32
    assert_matches_minari(td, "test/dict-v0")


def test_jpeg_encoded_images_decode_as_minari_decodes_them():
    image = gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)
    path = make_dataset("test/pixels-v0", [3, 2], obs_space=image, act_space=gym.spaces.Discrete(2))
    with h5py.File(path / "main_data.hdf5") as f:  # stored as JPEG bytes, not as the images
        assert f["episode_0/observations"].shape[1:] != (32, 32, 3)
    td = load_minari("test/pixels-v0")
    assert td["observation"].shape == (5, 32, 32, 3) and td["observation"].dtype == torch.uint8
    assert_matches_minari(td, "test/pixels-v0")


def test_ids_paths_and_data_directories_name_the_same_dataset(datasets_path):
    data = make_dataset("test/where-v0", [3, 4])
    assert data == datasets_path / "test" / "where-v0" / "data"
    by_id = load_minari("test/where-v0")
    for other in (data, data.parent, str(data.parent)):
        assert (load_minari(other) == by_id).all()
    assert len(MinariReader("test/where-v0")) == 7


def test_the_default_root_is_home_minari_datasets(tmp_path, monkeypatch, datasets_path):
    make_dataset("test/home-v0", [2])
    monkeypatch.delenv("MINARI_DATASETS_PATH")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / ".minari").mkdir(parents=True)
    (datasets_path).rename(tmp_path / "home" / ".minari" / "datasets")
    assert load_minari("test/home-v0").shape == (2,)


def test_unknown_ids_and_missing_files_are_named(datasets_path):
    with pytest.raises(FileNotFoundError, match="'test/nothing-v0'.*MINARI_DATASETS_PATH"):
        load_minari("test/nothing-v0")
    data = make_dataset("test/files-v0", [2])
    (data / "main_data.hdf5").rename(data / "moved.hdf5")
    with pytest.raises(FileNotFoundError, match="main_data.hdf5"):
        load_minari("test/files-v0")
    (data / "metadata.json").unlink()
    with pytest.raises(FileNotFoundError, match="metadata.json"):
        load_minari(data)
    with pytest.raises(TypeError, match="got int"):
        load_minari(3)


def edit(data, fn):
    with h5py.File(data / "main_data.hdf5", "a") as f:
        fn(f)


def test_malformed_files_get_errors_naming_what_is_wrong():
    data = make_dataset("test/bad-v0", [3, 4, 2])
    edit(data, lambda f: f.move("episode_1", "renamed"))
    with pytest.raises(KeyError, match="'episode_1'"):
        load_minari(data)
    edit(data, lambda f: f.move("renamed", "episode_1"))

    edit(data, lambda f: f.move("episode_2/rewards", "episode_2/r"))
    with pytest.raises(KeyError, match="episode_2/rewards is missing"):
        load_minari(data)
    edit(data, lambda f: f.move("episode_2/r", "episode_2/rewards"))

    def replace(f, name, values):
        del f[name]
        f[name] = values

    with h5py.File(data / "main_data.hdf5") as f:
        rewards, observations = f["episode_1/rewards"][:], f["episode_1/observations"][:]
    edit(data, lambda f: replace(f, "episode_1/rewards", rewards[:3]))
    with pytest.raises(ValueError, match="episode_1/rewards has 3 rows; expected T rows.*T = 4"):
        load_minari(data)
    edit(data, lambda f: replace(f, "episode_1/rewards", rewards))
    edit(data, lambda f: replace(f, "episode_1/observations", observations[:4]))
    with pytest.raises(ValueError, match="episode_1/observations has 4 rows; expected T \\+ 1"):
        load_minari(data)
    edit(data, lambda f: replace(f, "episode_1/observations", observations))
    assert load_minari(data).shape == (9,)  # restored: the file reads again


def test_fields_that_disagree_between_episodes_are_named():
    data = make_dataset("test/dtype-v0", [3, 3])

    def retype(f):
        values = f["episode_1/actions"][:].astype(np.float64)
        del f["episode_1/actions"]
        f["episode_1/actions"] = values

    edit(data, retype)
    with pytest.raises(ValueError, match="episode_1/actions has per-step shape \\(3,\\) and dtype"):
        load_minari(data)


def test_metadata_problems_are_named():
    data = make_dataset("test/meta-v0", [2])
    metadata = json.loads((data / "metadata.json").read_text())
    (data / "metadata.json").write_text(json.dumps({**metadata, "data_format": "arrow"}))
    with pytest.raises(ValueError, match="data_format 'arrow' is not supported"):
        load_minari(data)
    without_space = {k: v for k, v in metadata.items() if k != "observation_space"}
    (data / "metadata.json").write_text(json.dumps(without_space))
    with pytest.raises(KeyError, match="observation_space"):
        load_minari(data)
    (data / "metadata.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_minari(data)
    (data / "metadata.json").write_text(json.dumps({**metadata, "total_episodes": 2}))
    with pytest.raises(KeyError, match="episode_1"):  # metadata counts more than the file has
        load_minari(data)


def test_into_a_memmap_storage(tmp_path):
    make_dataset("test/memmap-v0", [5, 6])
    td = load_minari("test/memmap-v0")
    storage = load_minari(
        "test/memmap-v0", storage=lambda n: LazyMemmapStorage(n, scratch_dir=tmp_path / "mm")
    )
    assert isinstance(storage, LazyMemmapStorage) and len(storage) == 11
    assert (tmp_path / "mm" / "packed.memmap").is_file()
    assert (storage.get(torch.arange(11)) == td).all()

    small = LazyTensorStorage(10)
    with pytest.raises(ValueError, match="room for the dataset's 11 transitions"):
        load_minari("test/memmap-v0", storage=small)
    assert len(small) == 0 and not small.initialized


def test_chunks_concatenate_to_the_dataset():
    data = make_dataset("test/chunks-v0", [7, 1, 12, 4], truncated={2})
    full = load_minari(data)

    @settings(max_examples=20)
    @given(max_rows=st.integers(1, 30))
    def check(max_rows):
        chunks = list(MinariReader(data).chunks(max_rows=max_rows))
        assert all(c.shape[0] == max_rows for c in chunks[:-1])
        assert 0 < chunks[-1].shape[0] <= max_rows
        assert (torch.cat(chunks) == full).all()

    check()


def test_long_loads_show_a_progress_bar(monkeypatch, capsys):
    make_dataset("test/bar-v0", [3])
    monkeypatch.setattr(minari_module, "_PROGRESS_DELAY_S", 0)
    load_minari("test/bar-v0")
    assert "reading bar-v0" in capsys.readouterr().err
    load_minari("test/bar-v0", progress=False)
    assert capsys.readouterr().err == ""


def test_a_source_of_offline_data():
    data = make_dataset("test/offline-v0", [4, 4])
    expected = load_minari(data)
    for source in ("test/offline-v0", data, data.parent):
        assert (load_offline_data(source) == expected).all()
    rb = OfflineToOnlineReplayBuffer(
        load_offline_data("test/offline-v0"), online_capacity=16, batch_size=4
    )
    assert rb.sample()["is_offline"].all() and len(rb) == 8


def test_offline_data_of_a_replay_data_module():
    pytest.importorskip("lightning")
    from rbdata import TensorDictReplayBuffer
    from rbdata.lightning import ReplayDataModule

    make_dataset("test/module-v0", [5, 5, 5])
    dm = ReplayDataModule(
        lambda: TensorDictReplayBuffer(storage=LazyTensorStorage(100)),
        batch_size=4,
        batches_per_epoch=2,
        offline_data="test/module-v0",
        seed=0,
    )
    dm.setup("fit")
    assert len(dm.buffer) == 15
    assert next(iter(dm.train_dataloader()))["observation"].shape == (4, 3)


def test_public_names():
    assert rbdata.load_minari is load_minari and "load_minari" in rbdata.__all__
    assert "load_minari" in rbdata.datasets.__all__
