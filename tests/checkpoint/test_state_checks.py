"""Checks of a dump's component states (rbdata/checkpoint/_state_checks.py)."""

from __future__ import annotations

import pytest
import torch

from rbdata.checkpoint._state_checks import check_sampler
from rbdata.errors import CheckpointError


def _sampler_state(reuse_at: object) -> dict:
    live = {"n": 1, "counts": torch.zeros(4, dtype=torch.long), "live": torch.arange(2)}
    live["freed"] = torch.tensor([3])
    live["reuse_at"] = reuse_at
    return {"consume_after_n": 1, "live": live}


def test_a_live_set_reuse_position_is_an_int_from_zero():
    check_sampler({"max_size": 4}, _sampler_state(2), "sampler")
    for bad in (-1, 1.5, "2"):
        with pytest.raises(CheckpointError, match="reuse_at"):
            check_sampler({"max_size": 4}, _sampler_state(bad), "sampler")
