"""ShardOwner: a :class:`BufferOwner` that also reports its share of the sampling mass.

A sharded buffer samples in two rounds: it reads every shard's mass
(:meth:`ShardOwner.mass`: the total priority of its sum tree, or its length
for a uniform sampler), draws how many items each shard gives from those
masses, then asks each shard for its count (:meth:`ShardOwner.shard_sample`),
whose reply carries the shard's smallest priority so that the importance
weights can be normalised over the whole buffer.

A shard that checkpoints itself is a :class:`RecoveringShardOwner`: the
server's :class:`~rbdata.service.server.recovery.RecoveringOwner` with the
shard's members (sharding is built over the server, never under it).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from rbdata.service.server.owner import BufferOwner
from rbdata.service.server.recovery import RecoveringOwner
from rbdata.service.transport.codec import Payload, encode

__all__ = ["RecoveringShardOwner", "ShardMass", "ShardOwner"]


class ShardMass(NamedTuple):
    """One shard's sampling mass.

    Attributes:
        total: the sum of its priorities (``(p + eps) ** alpha``), or its length when uniform.
        smallest: its smallest positive priority (``inf`` when none is; 1.0 when uniform).
        beta: its sampler's importance exponent (0.0 when uniform).
        prioritized: whether the shard samples by priority.
    """

    total: float
    smallest: float
    beta: float
    prioritized: bool


class ShardOwner(BufferOwner):
    """The actor of one shard (see the module docstring).

    Examples:
        >>> import pickle, torch
        >>> from rbdata import LazyTensorStorage, PrioritizedReplayBuffer
        >>> from rbdata.service.sharding.owner import ShardOwner
        >>> owner = ShardOwner()
        >>> rb = PrioritizedReplayBuffer(alpha=1.0, beta=0.5, storage=LazyTensorStorage(8))
        >>> _ = owner.build(pickle.dumps(rb), True, node=False)
        >>> _ = owner.call("extend", encode((torch.arange(4),)), encode({}))
        >>> owner.mass()
        ShardMass(total=4.0, smallest=1.0, beta=0.5, prioritized=True)
    """

    def seed(self, seed: int) -> None:
        """Give the hosted buffer a generator seeded with ``seed`` (each shard its own)."""
        self._buffer.set_rng(torch.Generator().manual_seed(seed))

    def capacity(self) -> int:
        """The hosted storage's capacity (a sharded index is ``shard * capacity + local``)."""
        return int(self._buffer.storage.max_size)

    def mass(self) -> ShardMass:
        """This shard's sampling mass (see :class:`ShardMass`)."""
        mass = self._buffer.sampler.priority_mass()
        if mass is None or not len(self._buffer):
            return ShardMass(float(len(self._buffer)), 1.0, 0.0, mass is not None)
        return ShardMass(mass.total, mass.smallest, mass.beta, True)

    def shard_sample(self, batch_size: int) -> Payload:
        """``buffer.sample(batch_size, return_info=True)`` and this shard's mass, encoded."""
        mass = self.mass()  # the weights are computed with the tree as it is before the draw
        batch, info = self._buffer.sample(batch_size, return_info=True)
        out: tuple[Any, ...] = (batch, info, tuple(mass))
        return encode(out)


class RecoveringShardOwner(RecoveringOwner, ShardOwner):
    """The actor of one shard that checkpoints itself (see :class:`RecoveringOwner`).

    Examples:
        >>> import pickle, tempfile, torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> from rbdata.service.server.recovery import RecoveryConfig
        >>> owner = RecoveringShardOwner(RecoveryConfig(tempfile.mkdtemp(), every_writes=2))
        >>> _ = owner.build(pickle.dumps(ReplayBuffer(storage=LazyTensorStorage(8))), True, False)
        >>> _ = owner.logged("c", 1, "extend", encode((torch.arange(3),)), encode({}))
        >>> owner.mass()
        ShardMass(total=3.0, smallest=1.0, beta=0.0, prioritized=False)
    """
