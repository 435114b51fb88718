"""The compressed pixel row: CompressedListStorage beside the uncompressed LazyTensorStorage.

Frames are structured like a game screen, so that they compress as real ones
do (pure noise would not compress at all): a smooth vertical gradient, a
score bar and a few sprites moving across it, stacked 4 at a time as
frame-stacking wrappers do (the next observation shares 3 frames with the
observation).
"""

from __future__ import annotations

from types import ModuleType

import torch
from _common import fill, timeit_pair
from tensordict import TensorDict

Row = dict[str, object]
CAPACITY, BATCH, STACK, SIDE = 10_000, 256, 4, 84


def game_frames(count: int, seed: int = 0) -> torch.Tensor:
    """``count`` uint8[84, 84] screens: gradient background, score bar, three moving sprites."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.linspace(30, 90, SIDE).round().to(torch.uint8)
    frames = rows.view(1, SIDE, 1).expand(count, SIDE, SIDE).clone()
    frames[:, :6] = 0
    t = torch.arange(count)
    for k, (vx, vy, value) in enumerate(((3, 1, 200), (2, 3, 150), (5, 2, 110))):
        xs = (t * vx + 23 * k) % (SIDE - 8)
        ys = 8 + (t * vy + 17 * k) % (SIDE - 16)
        for i in range(count):
            frames[i, ys[i] : ys[i] + 8, xs[i] : xs[i] + 8] = value
    digits = torch.randint(0, 10, (count, 4), generator=gen)  # the score changes now and then
    for d in range(4):
        frames[:, 1:5, 2 + 5 * d : 5 + 5 * d] = (
            (100 + 15 * digits[:, d]).to(torch.uint8).view(-1, 1, 1)
        )
    return frames


def pixel_game_transitions(n: int) -> TensorDict:
    """``n`` frame-stacked transitions: uint8[4, 84, 84] observation and next observation."""
    screens = game_frames(n + STACK)
    stacks = screens.unfold(0, STACK, 1).permute(0, 3, 1, 2)  # [n + 1, 4, 84, 84]
    return TensorDict(
        {
            "observation": stacks[:n].contiguous(),
            "action": torch.zeros(n, 1, dtype=torch.long),
            "next": {
                "observation": stacks[1 : n + 1].contiguous(),
                "reward": torch.zeros(n, 1),
                "done": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        [n],
    )


def row_compressed(lib: ModuleType) -> Row:
    """Sample 256 pixel transitions from CompressedListStorage(10k) vs LazyTensorStorage(10k)."""
    compressed = lib.ReplayBuffer(storage=lib.CompressedListStorage(CAPACITY))
    plain = lib.ReplayBuffer(storage=lib.LazyTensorStorage(CAPACITY))
    fill(compressed, CAPACITY, pixel_game_transitions)
    fill(plain, CAPACITY, pixel_game_transitions)
    t_lib, t_plain = timeit_pair(lambda: compressed.sample(BATCH), lambda: plain.sample(BATCH))
    example = pixel_game_transitions(1)
    raw = sum(v.numel() * v.dtype.itemsize for v in example.values(True, True))
    return {
        "unit": "items/s",
        "lib": BATCH / t_lib,
        "limit": BATCH / t_plain,
        "limit_name": "uncompressed LazyTensorStorage",
        "note": (
            f"{compressed.storage.bytes() / CAPACITY:,.0f} bytes per transition compressed, "
            f"{raw:,} raw"
        ),
    }
