"""ShardedReplayBuffer: one logical buffer held by N owner actors spread over the cluster.

Each shard is a :class:`~rbdata.service.sharding.owner.ShardOwner` actor
hosting a copy of the buffer it was given (so the capacity is N times that
buffer's), each in a bundle of a SPREAD placement group, so that the shards
land on different nodes. Writes go to one
shard per call: the client's own shard (``routing="sticky"``, a collector
writes to one shard) or the next one in turn (``"round_robin"``). Sampling
is exact over the union: see :mod:`rbdata.service.sharding.routing`. A
shard that is gone (its process died and was not restarted) is skipped: the
other shards keep serving writes and samples; its items are lost unless it
restarts from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata.errors import ServiceUnavailableError
from rbdata.service import runtime
from rbdata.service.client.buffer_client import RayBufferClient
from rbdata.service.lifecycle import RayService
from rbdata.service.server.recovery import RecoveryConfig
from rbdata.service.sharding.owner import RecoveringShardOwner, ShardOwner
from rbdata.service.sharding.routing import split_index
from rbdata.service.sharding.sampling import sample_shards

__all__ = ["ShardedClient", "ShardedReplayBuffer"]

logger = logging.getLogger(__name__)

_ROUTINGS = ("sticky", "round_robin")
_MANIFEST = "sharded.json"
_FORMAT = "rbdata-sharded-1"


def _spread_group(shards: int, remote_config: dict[str, Any]) -> Any:
    """A placement group of one bundle per shard (its actor's CPUs and GPUs), SPREAD.

    Ray places a bundle whose node died again elsewhere, and the shard's actor
    restarts in it.
    """
    runtime.ray_module()
    from ray.util.placement_group import placement_group

    bundle = {"CPU": max(float(remote_config.get("num_cpus", 1)), 0.01)}
    if remote_config.get("num_gpus"):
        bundle["GPU"] = float(remote_config["num_gpus"])
    group = placement_group([bundle] * shards, strategy="SPREAD")
    runtime.get(group.ready(), "placing the shards")
    return group


def _in_bundle(group: Any, index: int) -> Any:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=index
    )


class ShardedClient:
    """A picklable handle on a sharded buffer: writes, samples, priorities, state.

    Get one from :meth:`ShardedReplayBuffer.client`. Each client has its own
    id (a sticky client writes to shard ``id % shards``) and its own generator
    for drawing the shard counts.

    Args:
        shards: a client of each shard.
        capacity: one shard's storage capacity.
        routing: ``"sticky"`` or ``"round_robin"``.
        seed: seeds the generator of the shard counts (None: a random seed).

    Raises:
        ValueError: for an unknown routing, or no shards.
    """

    def __init__(
        self,
        shards: Sequence[RayBufferClient],
        capacity: int,
        routing: str = "sticky",
        seed: int | None = None,
    ) -> None:
        if routing not in _ROUTINGS:
            raise ValueError(f"routing must be one of {_ROUTINGS}, got {routing!r}.")
        if not shards:
            raise ValueError("shards must hold at least one shard's client, got none.")
        self._shards = list(shards)
        self._capacity = int(capacity)
        self._routing = routing
        self._seed = seed
        self._setup_local()

    def _setup_local(self) -> None:
        self._id = uuid.uuid4().int
        seed = self._id % (2**63) if self._seed is None else self._seed
        self._generator = torch.Generator().manual_seed(seed)
        self._turn = self._id % len(self._shards)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "shards": self._shards,
            "capacity": self._capacity,
            "routing": self._routing,
            "seed": self._seed,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._shards = state["shards"]
        self._capacity = state["capacity"]
        self._routing = state["routing"]
        self._seed = state["seed"]
        self._setup_local()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shards={len(self._shards)}, routing={self._routing!r})"

    # ------------------------------------------------------------ shape
    @property
    def num_shards(self) -> int:
        """How many shards hold the buffer."""
        return len(self._shards)

    @property
    def capacity(self) -> int:
        """The capacity of the whole buffer (the shards' capacities summed)."""
        return self._capacity * len(self._shards)

    @property
    def shard_capacity(self) -> int:
        """One shard's capacity (an index is ``shard * shard_capacity + local``)."""
        return self._capacity

    @property
    def batch_size(self) -> int | None:
        """The hosted buffers' default batch size."""
        return self._shards[0].batch_size

    def __len__(self) -> int:
        return sum(self._each(len, 0))

    @property
    def write_count(self) -> int:
        """Items written to the shards that are alive."""
        return sum(self._each(lambda shard: shard.write_count, 0))

    def _each(self, read: Any, missing: Any) -> list[Any]:
        """``read(shard)`` for each shard, ``missing`` for a shard that is gone."""
        out = []
        for number, shard in enumerate(self._shards):
            try:
                out.append(read(shard))
            except ServiceUnavailableError as err:
                logger.warning("shard %d is unavailable: %s", number, err)
                out.append(missing)
        return out

    # ------------------------------------------------------------ writing
    def _route(self) -> int:
        if self._routing == "round_robin":
            self._turn = (self._turn + 1) % len(self._shards)
        return self._turn

    def _write(self, method: str, data: Any, **kwargs: Any) -> torch.Tensor:
        first = self._route()
        last_error: ServiceUnavailableError | None = None
        for step in range(len(self._shards)):  # a shard that is gone: the next one takes the write
            shard = (first + step) % len(self._shards)
            try:
                local = getattr(self._shards[shard], method)(data, **kwargs)
            except ServiceUnavailableError as err:
                logger.warning("shard %d is unavailable, writing to the next one: %s", shard, err)
                last_error = err
                continue
            return torch.as_tensor(local, dtype=torch.long) + shard * self._capacity
        assert last_error is not None
        raise last_error

    def add(self, data: Any) -> int:
        """Add one element to a shard; return its sharded index."""
        return int(self._write("add", data))

    def extend(self, data: Any) -> torch.Tensor:
        """Extend a shard with a batch of elements; return their sharded indices."""
        return self._write("extend", data)

    def update_priority(self, index: Any, priority: torch.Tensor | float) -> None:
        """Update the priorities of sharded ``index``, each part on the shard that owns it.

        Raises:
            ValueError: for an index outside the buffer, or priorities of another length.
        """
        flat = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        value = torch.as_tensor(priority, dtype=torch.float64).reshape(-1)
        if value.numel() == 1:
            value = value.expand(flat.numel())
        if value.numel() != flat.numel():
            raise ValueError(
                f"priority must hold one value or one per index ({flat.numel()}), "
                f"got {value.numel()}."
            )
        for shard, (where, local) in split_index(flat, self._capacity, len(self._shards)).items():
            self._shards[shard].update_priority(local, value.index_select(0, where))

    def update_tensordict_priority(self, data: TensorDictBase, key: str = "td_error") -> None:
        """Update priorities from a sampled batch: its ``"index"`` and its ``key`` entry."""
        self.update_priority(data.get("index"), data.get(key).detach().abs())

    # ------------------------------------------------------------ sampling
    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Draw ``batch_size`` items over all shards, exactly in proportion to their mass.

        Prioritized shards: in proportion to the global priority mass, with importance
        weights normalised by the global smallest priority; uniform shards: in
        proportion to their sizes. A shard that is gone or was emptied between the two
        rounds has its part drawn from the others
        (:func:`~rbdata.service.sharding.sampling.sample_shards`).

        Raises:
            ValueError: without a batch size (here or the buffer's default).
            RuntimeError: when nothing is sampleable.
        """
        size = self.batch_size if batch_size is None else batch_size
        if size is None:
            raise ValueError("batch_size must be given: the buffer has no default batch size.")
        return sample_shards(self._shards, self._capacity, size, self._generator, return_info)

    # ------------------------------------------------------------ state
    def stats(self) -> dict[str, Any]:
        """The counters of the whole buffer, and each shard's own under ``"shards"``."""
        per = self._each(lambda shard: shard.stats(), None)
        alive = [s for s in per if s is not None]
        size = sum(int(s.get("size", 0)) for s in alive)
        return {
            "size": size,
            "write_count": sum(int(s.get("write_count", 0)) for s in alive),
            "capacity": self.capacity,
            "utilization": size / self.capacity,
            "shards_alive": len(alive),
            "shards": per,
        }

    def _manifest(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "shards": len(self._shards),
            "shard_capacity": self._capacity,
            "dirs": [f"shard-{number:03d}" for number in range(len(self._shards))],
        }

    def state_dict(self) -> dict[str, Any]:
        """``{"manifest": ..., "shards": [each shard's state_dict]}``."""
        return {"manifest": self._manifest(), "shards": [s.state_dict() for s in self._shards]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load :meth:`state_dict`'s output into shards of the same number and capacity.

        Raises:
            ValueError: for a state of another number of shards or capacity.
        """
        self._check_manifest(state_dict.get("manifest"), "state_dict['manifest']")
        for shard, state in zip(self._shards, state_dict["shards"], strict=True):
            shard.load_state_dict(state)

    def _check_manifest(self, manifest: Any, name: str) -> None:
        expected = self._manifest()
        if not isinstance(manifest, dict) or any(
            manifest.get(key) != expected[key] for key in ("format", "shards", "shard_capacity")
        ):
            raise ValueError(
                f"{name} must describe {expected['shards']} shards of capacity "
                f"{expected['shard_capacity']} ({_FORMAT}), got {manifest!r}."
            )

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save each shard in ``path/shard-NNN`` (written by its actor) and a manifest.

        The manifest is written last (atomically): a directory without it is incomplete.
        """
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        manifest = self._manifest()
        for shard, name in zip(self._shards, manifest["dirs"], strict=True):
            shard.dumps(str(root / name))
        scratch = root / f".{_MANIFEST}.tmp"
        scratch.write_text(json.dumps(manifest))
        os.replace(scratch, root / _MANIFEST)

    def loads(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Load a :meth:`dumps` directory into shards of the same number and capacity.

        Raises:
            ValueError: for a directory without a manifest, or of other shards.
        """
        root = Path(path)
        try:
            manifest = json.loads((root / _MANIFEST).read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"path {str(root)!r} holds no sharded buffer manifest: {err}") from err
        self._check_manifest(manifest, f"{root / _MANIFEST}")
        for shard, name in zip(self._shards, manifest["dirs"], strict=True):
            shard.loads(str(root / name), allow_pickle=allow_pickle)


class ShardedReplayBuffer(ShardedClient):
    """A buffer sharded over ``shards`` Ray actors (see the module docstring).

    Args:
        buffer: a direct (in-process) buffer: each shard hosts a copy of it, components
            included, so the capacity is ``shards`` times its storage's.
        shards: how many shards.
        routing: ``"sticky"`` (each client writes to its own shard) or ``"round_robin"``.
        placement: ``"spread"`` (each shard in a bundle of a placement group with the
            SPREAD strategy: on different nodes where there are enough; a bundle whose node
            dies is placed again elsewhere, with its shard) or ``"default"`` (Ray's default
            placement).
        remote_config: the actors' Ray options (``{"num_cpus": 1}`` by default).
        seed: seeds this handle's shard draws and each shard's generator (``seed + 1 + i``).
        prefetch: requests each shard's client keeps in flight.
        recovery: each shard checkpoints into ``recovery.directory/shard-NNN`` and is
            restarted from there when its process dies (None: no recovery).

    Raises:
        ValueError: for fewer than one shard, an unknown routing or placement.

    Examples:
        >>> import ray, torch
        >>> from rbdata import LazyTensorStorage, PrioritizedReplayBuffer
        >>> from rbdata.service.sharding.buffer import ShardedReplayBuffer
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        >>> proto = PrioritizedReplayBuffer(alpha=1.0, beta=0.4, storage=LazyTensorStorage(100))
        >>> rb = ShardedReplayBuffer(proto, 2, seed=0, remote_config={"num_cpus": 0})
        >>> index = rb.extend(torch.arange(3))  # sticky: one shard (index // 100) holds them
        >>> rb.capacity, len(index), len({int(i) // 100 for i in index})
        (200, 3, 1)
        >>> rb.sample(4).shape
        torch.Size([4])
        >>> rb.shutdown(); ray.shutdown()
    """

    def __init__(
        self,
        buffer: Any,
        shards: int,
        *,
        routing: str = "sticky",
        placement: str = "spread",
        remote_config: dict[str, Any] | None = None,
        seed: int | None = None,
        prefetch: int = 0,
        recovery: RecoveryConfig | None = None,
    ) -> None:
        if isinstance(shards, bool) or not isinstance(shards, int):
            raise TypeError(f"shards must be an int, got {type(shards).__name__}.")
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}.")
        if routing not in _ROUTINGS:
            raise ValueError(f"routing must be one of {_ROUTINGS}, got {routing!r}.")
        if placement not in ("spread", "default"):
            raise ValueError(f"placement must be 'spread' or 'default', got {placement!r}.")
        self._services: list[RayService] = []
        self._group: Any = None
        try:
            self._group = (
                _spread_group(shards, dict(remote_config or {})) if placement == "spread" else None
            )
            for number in range(shards):
                config = dict(remote_config or {})
                if self._group is not None:  # each shard in its bundle of the spread group
                    config.setdefault("scheduling_strategy", _in_bundle(self._group, number))
                own = None
                if recovery is not None:  # each shard checkpoints into its own directory
                    where = str(Path(recovery.directory) / f"shard-{number:03d}")
                    own = dataclasses.replace(recovery, directory=where)
                service = RayService(
                    buffer,
                    prefetch,
                    remote_config=config,
                    owner=ShardOwner,
                    recovery=own,
                    recovering_owner=RecoveringShardOwner,
                )
                self._services.append(service)
            clients = [service.client() for service in self._services]
            handles = [client.actor() for client in clients]
            if seed is not None:
                runtime.get([h.seed.remote(seed + 1 + i) for i, h in enumerate(handles)], "seed")
            capacity = runtime.get(handles[0].capacity.remote(), "capacity")
        except BaseException:
            self.shutdown()
            raise
        super().__init__(clients, capacity, routing, seed)

    @property
    def nodes(self) -> list[str]:
        """The Ray node each shard runs on."""
        return [shard.address.node_id for shard in self._shards]

    @property
    def services(self) -> list[RayService]:
        """Each shard's service (its lifecycle: ``is_alive``, ``shutdown``)."""
        return list(self._services)

    def client(self) -> ShardedClient:
        """A picklable client of the shards (for collector tasks, learners, other drivers)."""
        return ShardedClient(self._shards, self._capacity, self._routing)

    def shutdown(self) -> None:
        """Stop every shard's actor (idempotent)."""
        for service in self._services:  # both set before anything that may fail
            service.shutdown()
        group, self._group = self._group, None
        if group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(group)

    close = shutdown

    def __enter__(self) -> ShardedReplayBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
