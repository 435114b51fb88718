"""OwnerAddress: where a client finds the actor hosting its buffer (what a client pickles as)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OwnerAddress"]


@dataclass(frozen=True)
class OwnerAddress:
    """Where a client finds its actor.

    Attributes:
        actor_name: the actor's name (in the ``rbdata`` namespace).
        cluster: the Ray cluster's address (GCS), for processes outside Ray.
        node_id: the Ray node the actor runs on.
        batch_size: the hosted buffer's default batch size.
        maps: whether clients on the actor's node map the buffer
            (see :mod:`rbdata.service.client.direct`).

    Examples:
        >>> from rbdata.service.client.address import OwnerAddress
        >>> OwnerAddress("rbdata-buffer-0", "127.0.0.1:6379", "node", None).batch_size is None
        True
    """

    actor_name: str
    cluster: str
    node_id: str
    batch_size: int | None
    maps: bool = True
