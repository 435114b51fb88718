"""The data kinds a replay buffer accepts, built the same way for both libraries."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, tensorclass

DATA_KINDS = ("tensor", "tensordict", "tensorclass", "pytree", "objects")


@tensorclass
class Step:
    """A tensorclass of transitions (the ``tensorclass`` data kind)."""

    obs: torch.Tensor
    reward: torch.Tensor


def batch(kind: str, n: int, start: int = 0) -> Any:
    """``n`` items of ``kind`` whose values are a deterministic function of their position."""
    pos = torch.arange(start, start + n)
    if kind == "tensor":
        return (pos[:, None] * 10 + torch.arange(3)).float()
    if kind == "tensordict":
        return TensorDict(
            {
                "obs": (pos[:, None] * 10 + torch.arange(3)).float(),
                "action": pos % 2,
                "next": {"obs": (pos[:, None] * 10 + torch.arange(3) + 1).float()},
                "done": (pos % 3 == 0)[:, None],
            },
            batch_size=[n],
        )
    if kind == "tensorclass":
        return Step(
            obs=(pos[:, None] * 10 + torch.arange(3)).float(), reward=pos.double(), batch_size=[n]
        )
    if kind == "pytree":
        return {
            "a": (pos[:, None] * 10 + torch.arange(3)).float(),
            "b": (pos.clone(), [pos[:, None] * 2]),
        }
    if kind == "objects":
        return [f"item{i}" if i % 2 else {"i": int(i)} for i in pos.tolist()]
    raise ValueError(kind)


def item(kind: str, position: int) -> Any:
    """One item of ``kind`` (what ``add`` takes)."""
    data = batch(kind, 1, position)
    if kind == "objects":
        return data[0]
    if kind == "pytree":
        return {"a": data["a"][0], "b": (data["b"][0][0], [data["b"][1][0][0]])}
    return data[0]
