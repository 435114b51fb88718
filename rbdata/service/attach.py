"""attach_ray_service: what ``ReplayBuffer(..., service_backend="ray")`` calls.

It reads ``service_backend_options``, starts the service (one owner actor, a
:class:`~rbdata.service.lifecycle.RayService`, or N shard actors, a
:class:`~rbdata.service.sharding.service.ShardedService`) and returns the
Ray-backed buffer: an instance of the Ray-backed variant of the class asked for
(:func:`~rbdata.service.client.proxy.proxy_class`, a subclass generated from the
surface's declaration), whose members go to the service's ``driver``.
``ReplayBuffer.__new__`` returns it, so ``ReplayBuffer(..., service_backend="ray")``
builds it directly.

The options:

- ``ray_init_config``: ``ray.init`` arguments, used when this process is not
  attached to Ray yet;
- ``remote_config``: the actor's Ray options (``{"num_cpus": 1}`` by default);
- ``recovery``: checkpoints and restarts (a
  :class:`~rbdata.service.server.recovery.RecoveryConfig` or its arguments as a dict);
- ``same_node_maps``: clients on the actor's node write (and sample uniformly) through a
  shared-memory map of the buffer (True by default; off with a ``rate_limiter``);
- ``coalesce``: rows of small writes queued and sent as one ``extend``, by the
  buffer itself and, by default, by its clients (:mod:`rbdata.service.client.coalesce`);
- ``rate_limiter`` (a :class:`~rbdata.loader.SampleToInsertRatio`) and
  ``rate_limiter_timeout`` (seconds, default 60; None: no limit): enforced by the
  owner across all clients (:mod:`rbdata.service.server.rate_limit`);
- ``shards``: how many owner actors hold the buffer (an int >= 1; 1: unsharded).
"""

from __future__ import annotations

from typing import Any

from rbdata.service.client.proxy import proxy_class
from rbdata.service.lifecycle import RayService
from rbdata.service.options import OPTION_KEYS
from rbdata.service.server.rate_limit import ServiceRateLimiter, check_rate_limit
from rbdata.service.server.recovery import RecoveryConfig
from rbdata.service.sharding.service import ShardedService, check_shards

__all__ = ["OPTION_KEYS", "attach_ray_service"]

_RATE_LIMITER_TIMEOUT_S = 60.0


def attach_ray_service(
    cls: type,
    hosted: Any,
    options: dict[str, Any] | None,
    transport: str,
    transport_options: dict[str, Any] | None,
    *,
    prefetch: int = 0,
    delayed_init: bool = False,
) -> Any:
    """Host ``hosted`` in Ray actors and return the buffer of class ``cls`` forwarding to them.

    Args:
        cls: the buffer class asked for (the result is an instance of its Ray-backed subclass).
        hosted: a direct buffer of that class, built with the same arguments, for the
            actors to host.
        options: ``service_backend_options`` (see the module docstring).
        transport: ``"auto"``, ``"ray"`` or ``"distributed"``.
        transport_options: the transport's options (``{"backend": "gloo"}``).
        prefetch: batches the buffer's clients request ahead (its ``prefetch`` argument).
        delayed_init: build the hosted buffer's components on first use, not now.

    Returns:
        The Ray-backed buffer (its ``_remote`` is the service).

    Raises:
        TypeError: for an unknown key of ``options``, or an option of the wrong type.
        ValueError: for an option of the wrong value, or options that do not combine
            (``shards`` > 1 with ``coalesce``, ``rate_limiter`` or ``transport="distributed"``).
        ImportError: if Ray is not installed (the ``ray`` extra).

    Examples:
        >>> import ray, torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), service_backend="ray",
        ...                   service_backend_options={"remote_config": {"num_cpus": 0}})
        >>> isinstance(rb, ReplayBuffer), rb.service_backend
        (True, 'ray')
        >>> _ = rb.extend(torch.arange(3)); len(rb)
        3
        >>> rb.shutdown(); ray.shutdown()
    """
    options = dict(options or {})
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise TypeError(
            f"service_backend_options accepts only {sorted(OPTION_KEYS)}, got {sorted(unknown)}."
        )
    if "recovery" in options:
        options["recovery"] = RecoveryConfig.from_options(options["recovery"])
    shards = check_shards(options.pop("shards", 1))
    timeout = options.pop("rate_limiter_timeout", _RATE_LIMITER_TIMEOUT_S)
    if "rate_limiter" in options:
        options["rate_limiter"] = ServiceRateLimiter(
            *check_rate_limit(options["rate_limiter"], timeout)
        )
    service: RayService | ShardedService
    if shards > 1:
        extra = sorted({"coalesce", "rate_limiter"} & set(options))
        if extra or transport == "distributed":
            raise ValueError(
                f"service_backend_options['shards']={shards} does not combine with {extra} or "
                f"transport='distributed' yet; got transport={transport!r}."
            )
        service = ShardedService(hosted, shards, prefetch=prefetch, **options)
    else:
        service = RayService(
            hosted,
            prefetch,
            delayed_init=delayed_init,
            **options,
            transport=transport,
            transport_options=transport_options,
        )
    return proxy_class(cls)(_service=service)
