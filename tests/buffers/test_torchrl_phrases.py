"""Error texts that torchrl's own tests match: rbdata's messages contain torchrl's phrase."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, ListStorage, ReplayBuffer, TensorDictReplayBuffer


def test_sampling_after_everything_was_consumed():
    rb = ReplayBuffer(storage=ListStorage(4), batch_size=2, consume_after_n_samples=1)
    rb.extend(torch.arange(2))
    rb.sample()
    with pytest.raises(RuntimeError, match="Cannot sample from an empty storage") as err:
        rb.sample()
    assert "consume_after_n_samples=1" in str(err.value)  # and why it is empty


def test_update_if_present_without_generations_names_the_conditional_update():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(TensorDict({"x": torch.zeros(2, 2)}, [2]))
    with pytest.raises(RuntimeError, match="(?i)conditional") as err:
        rb.update_if_present(
            index=torch.tensor([0]),
            generation=torch.tensor([1]),
            patch={"x": torch.ones(1, 2)},
        )
    assert "track_generations=True" in str(err.value)


def test_a_dotted_key_is_refused_with_torchrls_phrase():
    from rbdata._component.checks import normalize_key

    with pytest.raises(ValueError, match="Dotted-string") as err:
        normalize_key("nested.version", "version_key", dotted=False)
    assert "('nested', 'version')" in str(err.value)
