"""The Ray service backend: a buffer hosted by a Ray actor, served to any process of the cluster.

Importing this package registers it as the buffers' ``"ray"`` backend
(:mod:`rbdata.buffers.backends`): ``ReplayBuffer(..., service_backend="ray")``
then calls :func:`attach_ray_service`;
``rb.client()`` returns a picklable :class:`RayBufferClient`. Importing this
package does not import Ray; starting a service needs the ``ray`` extra.

The package is organised by side:

- ``attach`` (:func:`attach_ray_service`: the options), ``options`` (the keys it
  accepts, registered with the backend), ``lifecycle`` (:class:`RayService`) and ``runtime``
  (importing Ray, the lease on it, its errors as ours);
- ``server/``: the owner actor (``owner``), its slot replies filled by the
  buffer's own read path (``slot_fill``), its torch.distributed channels (``channels``),
  its checkpoints and restarts (``recovery``);
- ``client/``: the forwarded surface, declared once (``surface``), the client
  (``buffer_client``), its torch.distributed variant (``distributed_client``) and its
  retrying, deduplicating variant for recovering owners (``retry``);
- ``sharding/``: one buffer over several owners (``buffer``: :class:`ShardedReplayBuffer`;
  ``owner``: the shard actor; ``routing``: sharded indices and the global draw);
- ``transport/``: what both sides share: the payload codec, shared-memory slots,
  the channel's wire format, the reply kinds (``messages``).
"""

from __future__ import annotations

import importlib
from typing import Any

from rbdata.buffers.backends import register_service_backend
from rbdata.errors import ServiceUnavailableError
from rbdata.service.options import OPTION_KEYS

__all__ = [
    "RayBufferClient",
    "RayService",
    "RecoveringClient",
    "RecoveryConfig",
    "ServiceUnavailableError",
    "ShardedClient",
    "ShardedReplayBuffer",
    "attach_ray_service",
]

_NAMES = {
    "RayBufferClient": "rbdata.service.client.buffer_client",
    "RecoveringClient": "rbdata.service.client.retry",
    "RecoveryConfig": "rbdata.service.server.recovery",
    "ShardedClient": "rbdata.service.sharding.buffer",
    "ShardedReplayBuffer": "rbdata.service.sharding.buffer",
    "RayService": "rbdata.service.lifecycle",
    "attach_ray_service": "rbdata.service.attach",
}


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'rbdata.service' has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)


def _attach_ray_service(*args: Any, **kwargs: Any) -> Any:
    """:func:`attach_ray_service`, imported when a Ray-backed buffer is first built."""
    from rbdata.service.attach import attach_ray_service

    return attach_ray_service(*args, **kwargs)


register_service_backend("ray", _attach_ray_service, OPTION_KEYS)
