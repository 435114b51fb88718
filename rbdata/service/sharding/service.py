"""``service_backend_options={"shards": N}``: a Ray-backed buffer held by N shard actors.

``ReplayBuffer(..., service_backend="ray", service_backend_options={"shards": 4})``
builds a :class:`~rbdata.service.sharding.buffer.ShardedReplayBuffer` of the
buffer being constructed and gives the buffer a :class:`ShardedService` as its
``_remote``: the Ray-backed class forwards its members to the sharded buffer
(writes routed per client, sticky; global sampling; priorities back to their
shard; ``stats``, ``state_dict``, ``dumps``/``loads`` across shards). The members
a sharded buffer does not serve yet (indexing, ``query``, ``update_if_present``,
component swaps, ...) raise NotImplementedError naming the option. ``shards=1``
is the unsharded service.
"""

from __future__ import annotations

import threading
from typing import Any

from rbdata.service import runtime
from rbdata.service.server.recovery import RecoveryConfig
from rbdata.service.sharding.buffer import ShardedClient, ShardedReplayBuffer

__all__ = ["ShardedService", "check_shards"]


def check_shards(shards: Any) -> int:
    """``service_backend_options["shards"]`` checked: an int >= 1 (1: unsharded).

    Raises:
        TypeError: if it is not an int.
        ValueError: if it is below 1.

    Examples:
        >>> check_shards(4)
        4
        >>> check_shards(0)
        Traceback (most recent call last):
        ...
        ValueError: service_backend_options['shards'] must be an int >= 1 (1: unsharded), got 0.
    """
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise TypeError(
            f"service_backend_options['shards'] must be an int, got {type(shards).__name__}."
        )
    if shards < 1:
        raise ValueError(
            f"service_backend_options['shards'] must be an int >= 1 (1: unsharded), got {shards}."
        )
    return shards


class _ShardedDriver:
    """What a sharded Ray-backed buffer forwards to: the sharded buffer, or a clear error."""

    def __init__(self, sharded: ShardedReplayBuffer) -> None:
        self._sharded = sharded
        self.lock = threading.RLock()  # the buffer's ``lock``: each shard locks its own state

    def __getattr__(self, name: str) -> Any:
        sharded = self.__dict__.get("_sharded")
        if sharded is not None and hasattr(sharded, name):
            return getattr(sharded, name)
        if name.startswith("_") and not name.endswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(
            f"rb.{name} is not available on a sharded Ray-backed buffer "
            "(service_backend_options={'shards': N}): it serves add, extend, sample, "
            "update_priority, update_tensordict_priority, stats, state_dict, load_state_dict, "
            "dumps and loads across its shards. Build it with shards=1 for the whole surface."
        )


class ShardedService:
    """The ``_remote`` of a sharded Ray-backed buffer (see the module docstring).

    Args:
        hosted: the direct buffer each shard hosts a copy of.
        shards: how many shards (>= 2; 1 is the unsharded :class:`~rbdata.service.RayService`).
        prefetch: requests each shard's client keeps in flight.
        ray_init_config: ``ray.init`` arguments, used when this process is not attached yet.
        remote_config: each shard actor's Ray options.
        recovery: each shard checkpoints into ``recovery.directory/shard-NNN``.

    Examples:
        >>> import ray, torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, service_backend="ray",
        ...                   service_backend_options={"shards": 2,
        ...                                            "remote_config": {"num_cpus": 0}})
        >>> type(rb._remote).__name__, rb.stats()["capacity"]
        ('ShardedService', 20)
        >>> _ = rb.extend(torch.arange(6)); len(rb), rb.sample().shape
        (6, torch.Size([4]))
        >>> rb.shutdown(); ray.shutdown()
    """

    def __init__(
        self,
        hosted: Any,
        shards: int,
        *,
        prefetch: int = 0,
        ray_init_config: dict[str, Any] | None = None,
        remote_config: dict[str, Any] | None = None,
        recovery: RecoveryConfig | None = None,
    ) -> None:
        self._lease = runtime.Lease(ray_init_config)
        try:
            self._sharded: ShardedReplayBuffer | None = ShardedReplayBuffer(
                hosted, shards, remote_config=remote_config, prefetch=prefetch, recovery=recovery
            )
        except BaseException:
            self._lease.release()
            raise
        self.driver = _ShardedDriver(self._sharded)

    @property
    def is_alive(self) -> bool:
        """Whether a shard still serves (a shard that died is skipped by the others)."""
        return self._sharded is not None and any(s.is_alive for s in self._sharded.services)

    def start(self) -> None:
        """Check that the shards run (they start at construction).

        Raises:
            RuntimeError: after :meth:`shutdown`.
        """
        if self._sharded is None:
            raise RuntimeError("this sharded Ray-backed buffer was shut down; build a new buffer.")

    def client(
        self, *, prefetch: int | None = None, write_behind: int = 0, coalesce: int | None = None
    ) -> ShardedClient:
        """A picklable client of the shards (sticky: it writes to its own shard).

        Raises:
            RuntimeError: after :meth:`shutdown`.
            ValueError: for ``prefetch``, ``write_behind`` or ``coalesce`` (a sharded
                client sends each call at once).
        """
        self.start()
        if prefetch or write_behind or coalesce:
            raise ValueError(
                "a sharded buffer's client() takes no prefetch, write_behind or coalesce yet; "
                f"got prefetch={prefetch}, write_behind={write_behind}, coalesce={coalesce}."
            )
        assert self._sharded is not None
        return self._sharded.client()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop every shard's actor and release Ray (idempotent)."""
        sharded, self._sharded = self._sharded, None
        if sharded is not None:
            sharded.shutdown()
        self._lease.release()
