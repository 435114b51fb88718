"""RayService: starting, serving and stopping the actor behind a Ray-backed buffer.

:func:`~rbdata.service.attach.attach_ray_service` (what
``ReplayBuffer(..., service_backend="ray")`` calls) builds a :class:`RayService`: it
starts a :class:`~rbdata.service.server.owner.BufferOwner` actor hosting a direct
copy of the buffer being built; the calling buffer's members then go to the
service's :attr:`RayService.driver` client.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from rbdata.errors import ServiceUnavailableError
from rbdata.service import runtime
from rbdata.service.client.buffer_client import OwnerAddress, RayBufferClient
from rbdata.service.client.distributed_client import DistributedBufferClient
from rbdata.service.client.retry import RecoveringClient
from rbdata.service.server.owner import BufferOwner
from rbdata.service.server.rate_limit import ServiceRateLimiter
from rbdata.service.server.recovery import RecoveringOwner, RecoveryConfig
from rbdata.service.transport.channel import BACKENDS
from rbdata.service.transport.messages import DRAW_GROUP, WAIT_GROUP, WRITE_GROUP

__all__ = ["RayService"]

logger = logging.getLogger(__name__)

_TRANSPORTS = ("auto", "ray", "distributed")
_WAITERS = 8  # clients that may wait for data at once (threads of the actor's wait group)
_SERVERS = 8  # calls the actor serves at once (the hosted buffer's locks guard its state)


class RayService:
    """Starts the actor hosting a buffer and owns its lifecycle.

    Args:
        hosted: the direct buffer the actor hosts (pickled to it, components included).
        prefetch: batches the clients request ahead (see :class:`RayBufferClient`).
        delayed_init: let the hosted buffer build its components on first use (else the
            actor builds them at once, and a bad component fails the construction).
        ray_init_config: ``ray.init`` arguments, used when this process is not attached to
            Ray yet (Ray started here is shut down with the last buffer that started it).
        remote_config: the actor's Ray options (``num_cpus``, ``num_gpus``, ``resources``...);
            default ``{"num_cpus": 1}``.
        transport: ``"auto"`` or ``"ray"`` (the Ray object store and shared-memory slots),
            or ``"distributed"`` (torch.distributed process groups for tensor payloads).
        transport_options: for ``"distributed"``: ``{"backend": "gloo" | "nccl"}``.
        owner: the actor's class (a :class:`BufferOwner`; sharding extends it).
        recovery: checkpoint the actor and restart it from its checkpoint when its process
            dies, its clients retrying (:mod:`rbdata.service.server.recovery`); None: off.
        recovering_owner: the actor's class with ``recovery`` (a :class:`RecoveringOwner`;
            sharding extends it too).
        same_node_maps: let clients on the actor's node write (and sample uniformly) through
            a shared-memory map of the buffer (:mod:`rbdata.service.server.direct`); off
            with a ``rate_limiter`` (every sample and insert then goes through the actor).
        coalesce: the default ``coalesce`` of the clients, the buffer's own included
            (:mod:`rbdata.service.client.coalesce`; 0: off).
        rate_limiter: the rate limiter the actor enforces on every client
            (:mod:`rbdata.service.server.rate_limit`); None: none.

    Raises:
        ValueError: for an unknown transport, or transport options without ``"distributed"``;
            for ``coalesce`` or ``rate_limiter`` with ``recovery``, or ``coalesce`` with
            ``"distributed"``.
        TypeError: for an unknown transport option.

    Examples:
        Arguments are checked before anything starts (a run: :func:`attach_ray_service`):

        >>> from rbdata import ReplayBuffer
        >>> from rbdata.service import RayService
        >>> RayService(ReplayBuffer(), 0, transport="tcp")
        Traceback (most recent call last):
        ...
        ValueError: transport must be one of ('auto', 'ray', 'distributed'), got 'tcp'.
    """

    def __init__(
        self,
        hosted: Any,
        prefetch: int,
        *,
        delayed_init: bool = False,
        ray_init_config: dict[str, Any] | None = None,
        remote_config: dict[str, Any] | None = None,
        transport: str = "auto",
        transport_options: dict[str, Any] | None = None,
        owner: type[BufferOwner] = BufferOwner,
        recovery: RecoveryConfig | None = None,
        recovering_owner: type[RecoveringOwner] = RecoveringOwner,
        same_node_maps: bool = True,
        coalesce: int = 0,
        rate_limiter: ServiceRateLimiter | None = None,
    ) -> None:
        if transport not in _TRANSPORTS:
            raise ValueError(f"transport must be one of {_TRANSPORTS}, got {transport!r}.")
        _check_combination(transport, recovery, coalesce, rate_limiter)
        if transport != "distributed" and transport_options:
            raise ValueError(
                f"transport_options are used by transport='distributed' only; got "
                f"{transport_options!r} with transport={transport!r}."
            )
        self._prefetch = prefetch
        self._recovery = recovery
        self._coalesce = coalesce
        if not isinstance(same_node_maps, bool):
            raise TypeError(
                "service_backend_options['same_node_maps'] must be a bool, got "
                f"{type(same_node_maps).__name__}."
            )
        self._transport = "ray" if transport == "auto" else transport
        self._backend = str((transport_options or {}).get("backend", "gloo"))
        unknown = set(transport_options or {}) - {"backend"}
        if unknown:
            raise TypeError(f"transport_options accepts only 'backend', got {sorted(unknown)}.")
        if self._backend not in BACKENDS:
            raise ValueError(
                f"transport_options['backend'] must be one of {BACKENDS}, got {self._backend!r}."
            )
        ray = runtime.ray_module()
        self._lease = runtime.Lease(ray_init_config)
        self._actor: Any = None
        self._hosted: Any = None  # the hosted buffer's object while a restart may need it
        self._client: RayBufferClient | None = None  # set once the actor runs
        try:
            name = f"rbdata-buffer-{uuid.uuid4().hex}"
            options = {"num_cpus": 1, **(remote_config or {})}
            restarts = 0 if recovery is None else recovery.max_restarts
            options.update(name=name, namespace=runtime.NAMESPACE, max_restarts=restarts)
            if recovery is not None:
                owner = recovering_owner
            # a recovering owner replays its log one call at a time; a plain one serves 8 at once
            servers = _SERVERS if recovery is None else 1
            remote = ray.remote(
                max_concurrency=servers,
                concurrency_groups={WAIT_GROUP: _WAITERS, DRAW_GROUP: 1, WRITE_GROUP: servers},
            )(owner)
            # as bytes: arrays pickled with it would arrive as read-only object-store views
            pickled = ray.put(ray.cloudpickle.dumps(hosted))
            # a recovering owner gets it as a constructor argument too: Ray gives it again
            # to a restart (kept in scope here), so nothing pickled is read from its directory
            self._hosted = None if recovery is None else pickled
            args = () if recovery is None else (recovery, pickled)
            self._actor = remote.options(**options).remote(*args)
            node, batch_size = runtime.get(
                self._actor.build.remote(pickled, not delayed_init), "starting the hosted buffer"
            )
            if rate_limiter is not None:
                runtime.get(self._actor.limit_rate.remote(rate_limiter), "rate_limiter")
            cluster = ray.get_runtime_context().gcs_address
            maps = same_node_maps and rate_limiter is None  # a map would bypass the limiter
            self._address = OwnerAddress(name, cluster, node, batch_size, maps)
            self._client = self._make_client(self._prefetch, coalesce=coalesce)
        except BaseException:
            self.shutdown()
            raise

    def _make_client(
        self, prefetch: int, write_behind: int = 0, coalesce: int = 0
    ) -> RayBufferClient:
        if self._transport == "distributed":
            return DistributedBufferClient(self._address, backend=self._backend)
        if self._recovery is not None:
            return RecoveringClient(self._address, prefetch=prefetch, recovery=self._recovery)
        return RayBufferClient(
            self._address, prefetch=prefetch, write_behind=write_behind, coalesce=coalesce
        )

    # ------------------------------------------------------------ lifecycle
    @property
    def is_alive(self) -> bool:
        """Whether the actor is running (not shut down, and its process alive)."""
        if self._actor is None:
            return False
        try:
            runtime.get(self._actor.node_id.remote(), "is_alive")
        except ServiceUnavailableError:
            return False
        return True

    def start(self) -> None:
        """Check that the service is running (it starts at construction).

        Raises:
            RuntimeError: after :meth:`shutdown`: a stopped service cannot be restarted.
        """
        if self._actor is None:
            raise RuntimeError(
                "this Ray-backed buffer was shut down; a stopped service cannot be restarted: "
                "build a new buffer."
            )

    def client(
        self, *, prefetch: int | None = None, write_behind: int = 0, coalesce: int | None = None
    ) -> RayBufferClient:
        """A picklable client (no lifecycle methods) for tasks, actors and other processes.

        Args:
            prefetch: requests the client keeps in flight; None: the buffer's ``prefetch``.
            write_behind: writes the client keeps in flight (see :class:`RayBufferClient`).
            coalesce: small writes queued and sent as one ``extend``; None: the buffer's.

        Raises:
            RuntimeError: after :meth:`shutdown`.
            ValueError: for ``coalesce`` with ``recovery`` or ``transport="distributed"``.
        """
        self.start()
        coalesce = self._coalesce if coalesce is None else coalesce
        _check_combination(self._transport, self._recovery, coalesce, None)
        prefetch = self._prefetch if prefetch is None else prefetch
        return self._make_client(prefetch, write_behind, coalesce)

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the actor (its rings and threads first) and release Ray (idempotent).

        Ray is shut down only when this buffer's construction started it and no
        other buffer still uses it; Ray started by the user keeps running.

        Args:
            timeout: seconds to wait for the actor's orderly stop before it is killed.
        """
        actor, self._actor = self._actor, None
        self._hosted = None
        client = self._client
        try:  # the buffer's own queued writes go first (their error is raised after the stop)
            if actor is not None and client is not None:
                client.flush()
        finally:
            if actor is not None:
                _stop(actor, timeout)
            self._lease.release()

    @property
    def driver(self) -> RayBufferClient:
        """The client the Ray-backed buffer itself forwards to (in this process).

        Raises:
            ServiceUnavailableError: after :meth:`shutdown` (no call reaches Ray then: a
                call on a stopped actor would start a new local Ray to fail in).
        """
        if self._actor is None:
            raise ServiceUnavailableError(
                "this Ray-backed buffer was shut down: its actor is gone and a stopped "
                "service cannot be restarted; build a new buffer."
            )
        if self._client is None:
            raise RuntimeError("the Ray service did not start: it has no client.")
        return self._client


def _stop(actor: Any, timeout: float | None) -> None:
    """Stop ``actor`` in order (its rings and threads), then kill it."""
    ray = runtime.ray_module()
    try:
        ray.get(actor.stop.remote(), timeout=timeout)
    except Exception as err:  # noqa: BLE001 - the actor is killed whatever happened
        logger.debug("the replay buffer actor did not stop cleanly: %s", err)
    ray.kill(actor, no_restart=True)


def _check_combination(
    transport: str,
    recovery: RecoveryConfig | None,
    coalesce: int,
    rate_limiter: ServiceRateLimiter | None,
) -> None:
    """Refuse the options that do not work together yet (ValueError naming them)."""
    if recovery is not None and (coalesce or rate_limiter is not None):
        raise ValueError(
            "service_backend_options['recovery'] does not combine with 'coalesce' or "
            f"'rate_limiter' yet; got coalesce={coalesce!r}, rate_limiter={rate_limiter!r}."
        )
    if transport == "distributed" and coalesce:
        raise ValueError(
            f"coalesce applies to transport='ray' clients, got coalesce={coalesce!r} with "
            "transport='distributed'."
        )
