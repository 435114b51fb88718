"""The sharded draw: read the shards' masses, split the batch over them, ask each for its part.

:func:`sample_shards` is what :meth:`ShardedClient.sample
<rbdata.service.sharding.buffer.ShardedClient.sample>` runs. It reads each
shard's :class:`~rbdata.service.sharding.owner.ShardMass`, draws how many items
each shard gives (:func:`~rbdata.service.sharding.routing.shard_counts`), asks
each shard for its count in parallel and merges the parts in a random order,
with global indices and globally normalised importance weights.

Retries: a shard that fails its part because it is gone
(:class:`~rbdata.errors.ServiceUnavailableError`) or because it became empty
between the two rounds (its mass, read again, is 0) is left out, and its
count is drawn again over the other shards in proportion to their masses. The
draw stays exact over the union of the shards that served: conditioned on
which shards answered, each item's probability is ``p(item) / total`` over
them. Each retry leaves out at least one shard, so there are at most as many
rounds as shards; when none is left, the draw raises.

Examples:
    Without a shard to ask nothing is drawn (a run: ``ShardedReplayBuffer``'s example):

    >>> import torch
    >>> from rbdata.service.sharding.sampling import sample_shards
    >>> sample_shards([], 10, 4, torch.Generator(), False)
    Traceback (most recent call last):
    ...
    RuntimeError: Cannot sample: every shard is empty or has no priority mass; write items first.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata.errors import ServiceUnavailableError
from rbdata.service import runtime
from rbdata.service.client.buffer_client import RayBufferClient
from rbdata.service.sharding.owner import ShardMass
from rbdata.service.sharding.routing import global_weight, merge, shard_counts
from rbdata.service.transport.codec import decode

__all__ = ["read_masses", "sample_shards"]

logger = logging.getLogger(__name__)

_GONE = ShardMass(0.0, float("inf"), 0.0, False)  # a shard left out of the draw


def read_masses(shards: Sequence[RayBufferClient]) -> list[ShardMass]:
    """Every shard's mass, read in parallel (a shard that is gone has none)."""
    asked: dict[int, Any] = {}
    for number, shard in enumerate(shards):
        try:
            asked[number] = shard.actor().mass.remote()
        except ServiceUnavailableError as err:
            logger.warning("shard %d is unavailable, sampling the others: %s", number, err)
    out = [_GONE] * len(shards)
    for number, ref in asked.items():
        try:
            out[number] = ShardMass(*runtime.get(ref, "mass"))
        except ServiceUnavailableError as err:
            logger.warning("shard %d is unavailable, sampling the others: %s", number, err)
    return out


def _emptied(shard: RayBufferClient) -> bool:
    """Whether ``shard`` has no mass now (it was emptied since its mass was read)."""
    try:
        return ShardMass(*runtime.get(shard.actor().mass.remote(), "mass")).total <= 0
    except ServiceUnavailableError:
        return True


def _ask(shards: Sequence[RayBufferClient], counts: list[int]) -> tuple[dict[int, Any], set[int]]:
    """Send each shard its count: the requests sent, and the shards already gone."""
    asked, gone = {}, set()
    for shard, count in enumerate(counts):
        if not count:
            continue
        try:
            asked[shard] = shards[shard].actor().shard_sample.remote(int(count))
        except ServiceUnavailableError as err:
            logger.warning("shard %d is unavailable, drawing its part elsewhere: %s", shard, err)
            gone.add(shard)
    return asked, gone


def sample_shards(
    shards: Sequence[RayBufferClient],
    capacity: int,
    batch_size: int,
    generator: torch.Generator,
    return_info: bool,
) -> Any:
    """Draw ``batch_size`` items over ``shards`` in proportion to their masses (module docstring).

    Args:
        shards: a client of each shard.
        capacity: one shard's capacity (a global index is ``shard * capacity + local``).
        batch_size: the number of items to draw.
        generator: draws the shard counts and the order of the merged batch.
        return_info: return ``(batch, info)`` rather than the batch.

    Raises:
        RuntimeError: when no shard has anything to sample (or none is left to ask).
    """
    masses = read_masses(shards)
    parts: list[tuple[int, Any, dict[str, Any], ShardMass]] = []
    left = batch_size
    while left:
        counts = shard_counts([m.total for m in masses], left, generator).tolist()
        asked, gone = _ask(shards, counts)
        for shard, ref in asked.items():
            try:
                batch, info, mass = decode(runtime.get(ref, "sample"))
            except ServiceUnavailableError as err:
                logger.warning("shard %d is gone, drawing its part elsewhere: %s", shard, err)
                gone.add(shard)
                continue
            except RuntimeError:
                if not _emptied(shards[shard]):
                    raise
                logger.info("shard %d was emptied, drawing its part elsewhere", shard)
                gone.add(shard)
                continue
            masses[shard] = ShardMass(*mass)  # as it was before this draw (the weights' base)
            parts.append((shard, batch, info, masses[shard]))
        for shard in gone:
            masses[shard] = _GONE
        left = sum(counts[shard] for shard in gone)
    smallest = min(m.smallest for m in masses if m.total > 0)
    batches, infos = [], []
    for shard, batch, info, mass in sorted(parts, key=lambda part: part[0]):
        info = _globalise(shard * capacity, info, mass, smallest)
        if isinstance(batch, TensorDictBase):
            for key in ("index", "priority_weight"):
                if key in batch.keys() and key in info:
                    batch.set(key, info[key].reshape(batch.get(key).shape))
        batches.append(batch)
        infos.append(info)
    order = torch.randperm(batch_size, generator=generator)
    batch = merge(batches, order)
    return (batch, merge(infos, order)) if return_info else batch


def _globalise(
    offset: int, info: dict[str, Any], mass: ShardMass, smallest: float
) -> dict[str, Any]:
    """A shard's sample info with global indices and globally normalised weights."""
    out = dict(info)
    out["index"] = torch.as_tensor(info["index"]).long() + offset
    if "priority_weight" in info:
        out["priority_weight"] = global_weight(
            info["priority_weight"], mass.smallest, smallest, mass.beta
        )
    return out
