"""Data the Ray service tests share (importable: ``tests/service`` is on the path)."""

from __future__ import annotations

import torch
from tensordict import TensorDict


def transitions(n: int, start: int = 0, version: int = 0) -> TensorDict:
    """``n`` transitions: ``obs`` counts from ``start``, 4 KiB of pixels each, one version."""
    return TensorDict(
        {
            "obs": torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1),
            "pixels": torch.zeros(n, 64, 64, dtype=torch.uint8),  # batches of 64 KiB and more
            "policy_version": torch.full((n,), version),
        },
        batch_size=[n],
    )
