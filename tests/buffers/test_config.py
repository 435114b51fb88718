"""ReplayBufferConfig: plain values that build a buffer, from Hydra-style dicts and jsonargparse."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    ConsumingSampler,
    LazyMemmapStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    ReplayBufferConfig,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)


def test_every_field_is_a_plain_type() -> None:
    plain = {"str", "int", "float", "bool", "Optional[str]", "Optional[int]"}
    assert {str(f.type) for f in dataclasses.fields(ReplayBufferConfig)} <= plain


def test_defaults_build_a_replay_buffer() -> None:
    rb = ReplayBufferConfig().build()
    assert type(rb) is ReplayBuffer and rb.storage.max_size == 1000
    rb.extend(torch.arange(5))
    assert rb.sample(3).shape == (3,)


@pytest.mark.parametrize(
    "values,check",
    [
        ({"storage": "ListStorage", "max_size": 7}, lambda rb: type(rb.storage) is ListStorage),
        (
            {"sampler": "SamplerWithoutReplacement", "drop_last": True, "batch_size": 2},
            lambda rb: isinstance(rb.sampler, SamplerWithoutReplacement) and rb.sampler.drop_last,
        ),
        (
            {"sampler": "PrioritizedSampler", "alpha": 0.7},
            lambda rb: isinstance(rb.sampler, PrioritizedSampler) and rb.sampler.alpha == 0.7,
        ),
        (
            {"sampler": "ConsumingSampler", "max_sample_count": 3},
            lambda rb: (
                isinstance(rb.sampler, ConsumingSampler) and rb.sampler.max_sample_count == 3
            ),
        ),
        (
            {"sampler": "SliceSampler", "slice_len": 4, "traj_key": "episode"},
            lambda rb: isinstance(rb.sampler, SliceSampler),
        ),
        (
            {"buffer": "TensorDictPrioritizedReplayBuffer", "beta": 0.5, "priority_key": "p"},
            lambda rb: isinstance(rb, TensorDictPrioritizedReplayBuffer) and rb.priority_key == "p",
        ),
        (
            {"buffer": "TensorDictReplayBuffer", "writer": "TensorDictMaxValueWriter"},
            lambda rb: (
                isinstance(rb, TensorDictReplayBuffer)
                and isinstance(rb.writer, TensorDictMaxValueWriter)
            ),
        ),
    ],
)
def test_components_by_name(values: dict[str, Any], check: Any) -> None:
    assert check(ReplayBufferConfig.from_dict(values).build())


def test_memmap_storage_in_a_scratch_dir_and_a_seed(tmp_path: Path) -> None:
    config = ReplayBufferConfig(
        buffer="TensorDictReplayBuffer",
        storage="LazyMemmapStorage",
        scratch_dir=str(tmp_path / "rows"),
        max_size=16,
        batch_size=4,
        seed=3,
    )
    draws = []
    for i in range(2):
        rb = dataclasses.replace(config, scratch_dir=str(tmp_path / f"rows{i}")).build()
        assert isinstance(rb.storage, LazyMemmapStorage)
        rb.extend(TensorDict({"obs": torch.arange(16)}, [16]))
        draws.append(rb.sample()["obs"].tolist())
    assert draws[0] == draws[1]  # the seed gives the buffer its own generator


def test_a_hydra_node_with_target_builds_without_instantiate() -> None:
    node = {"_target_": "rbdata.ReplayBufferConfig", "storage": "ListStorage", "batch_size": 2}
    rb = ReplayBufferConfig.from_dict(node).build()
    assert rb.extend([1, 2, 3]).tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "values,error,match",
    [
        ({"storage": "NoStorage"}, ValueError, "storage='NoStorage'"),
        ({"sampler": 3}, TypeError, "sampler must be a str"),
        ({"writer": "Nope"}, ValueError, "writer='Nope'"),
        ({"buffer": "Buffer"}, ValueError, "buffer='Buffer'"),
    ],
)
def test_bad_names_are_refused(values: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ReplayBufferConfig.from_dict(values).build()


def test_unknown_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown ReplayBufferConfig fields \\['capacity'\\]"):
        ReplayBufferConfig.from_dict({"capacity": 3})
    with pytest.raises(TypeError, match="mapping"):
        ReplayBufferConfig.from_dict([("storage", "ListStorage")])  # type: ignore[arg-type]


def test_jsonargparse_reads_it_as_lightning_cli_does() -> None:
    jsonargparse = pytest.importorskip("jsonargparse")
    parser = jsonargparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--buffer", type=ReplayBufferConfig, default=ReplayBufferConfig())
    cfg = parser.parse_args(
        ["--buffer.storage", "ListStorage", "--buffer.max_size", "12", "--buffer.batch_size", "3"]
    )
    config = parser.instantiate(cfg).buffer
    assert isinstance(config, ReplayBufferConfig)
    rb = config.build()
    assert rb.storage.max_size == 12
    rb.extend(list(range(5)))
    assert len(rb.sample()) == 3
