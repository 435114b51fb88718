"""RecoveringClient: a client that rides out an owner's restart and re-sends unconfirmed writes.

Each mutating call (:data:`~rbdata.service.server.recovery.LOGGED_CALLS`)
gets this client's next sequence number and stays in the client's replay log
until the owner reports a checkpoint holding it. When a call fails because
the owner's process died, the client waits for Ray to restart the owner
(retrying until ``deadline_s``, then raising ``ServiceUnavailableError``),
asks it which of its sequence numbers the restored state holds, and sends
the logged calls after that one again, in order. The owner runs each
``(client, sequence)`` once, so nothing is doubled.

What it guarantees, with the owner restarted from its checkpoint: every
write this client had acknowledged is in the buffer exactly once (the ones
the checkpoint holds from it, the later ones re-sent from the log); re-sent
writes land where the writer puts them then (their indices may differ from
the ones first returned), and after the writes of other clients that were
re-sent first. What it does not keep: the log lives in the client's process
(a client that dies with its owner loses its writes after the checkpoint),
and the sampler's state after the checkpoint (counts, consumed items, the
generator) is rolled back to it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from rbdata.errors import ServiceUnavailableError
from rbdata.service import runtime
from rbdata.service.client.buffer_client import OwnerAddress, RayBufferClient
from rbdata.service.server.recovery import LOGGED_CALLS, RecoveryConfig
from rbdata.service.transport.codec import Payload, decode, encode
from rbdata.service.transport.messages import ReturnsSelf

__all__ = ["RecoveringClient"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)  # waits between retries (the last one repeats)


class _Logged(NamedTuple):
    seq: int
    name: str
    args: Payload
    kwargs: Payload


class RecoveringClient(RayBufferClient):
    """A :class:`RayBufferClient` of a self-healing owner (see the module docstring).

    Args:
        address: where the actor is.
        prefetch: batches requested ahead (see :class:`RayBufferClient`).
        recovery: the owner's recovery policy (its ``deadline_s`` bounds the retries).

    Examples:
        >>> import pickle
        >>> from rbdata.service.client.buffer_client import OwnerAddress
        >>> from rbdata.service.client.retry import RecoveringClient
        >>> from rbdata.service.server.recovery import RecoveryConfig
        >>> address = OwnerAddress("rbdata-buffer-0", "127.0.0.1:6379", "node", batch_size=32)
        >>> client = RecoveringClient(address, recovery=RecoveryConfig("/srv/c", every_writes=10))
        >>> pickle.loads(pickle.dumps(client)).pending
        0
    """

    def __init__(
        self, address: OwnerAddress, *, prefetch: int = 0, recovery: RecoveryConfig
    ) -> None:
        self._recovery = recovery
        super().__init__(address, prefetch=prefetch)
        self._start_log()

    def _start_log(self) -> None:
        self._client_id = uuid.uuid4().hex  # a new id per process: its sequence starts again
        self._seq = 0
        self._log: deque[_Logged] = deque()
        self._resync = False

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "recovery": self._recovery}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._recovery = state["recovery"]
        super().__setstate__(state)
        self._start_log()

    @property
    def pending(self) -> int:
        """Logged calls no checkpoint holds yet (what a restart would re-send)."""
        return len(self._log)

    # ------------------------------------------------------------ retries
    def _retrying(self, attempt: Callable[[], T], what: str) -> T:
        deadline = time.monotonic() + self._recovery.deadline_s
        tries = 0
        while True:
            try:
                return attempt()
            except ServiceUnavailableError:
                if time.monotonic() >= deadline or not self._owner_named():
                    raise
                self._lost_owner(what)
                time.sleep(_BACKOFF_S[min(tries, len(_BACKOFF_S) - 1)])
                tries += 1

    def _owner_named(self) -> bool:
        """Whether the owner's name is still registered (it is while Ray restarts it)."""
        ray = runtime.ray_module()
        try:
            ray.get_actor(self._address.actor_name, namespace=runtime.NAMESPACE)
        except ValueError:
            return False  # shut down, or out of restarts: it will not come back
        return True

    def _lost_owner(self, what: str) -> None:
        """Drop what belonged to the old owner process (handle, slots, requests in flight)."""
        logger.warning("%s: the replay buffer owner is unavailable, retrying", what)
        sources = self._stats_sources
        super()._setup_local()  # RecoveringClient keeps the base's per-process state
        self._stats_sources = sources
        self._ring_tried = True  # the owner may come back on another node: no slots from now on
        self._resync = True

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name not in LOGGED_CALLS:
            call = super()._call
            return self._retrying(lambda: call(name, *args, **kwargs), name)
        self._seq += 1
        entry = _Logged(self._seq, name, encode(args), encode(kwargs))
        self._log.append(entry)
        result = decode(self._retrying(lambda: self._send(entry), name))
        return self if isinstance(result, ReturnsSelf) else result

    def _send(self, entry: _Logged) -> Payload:
        actor = self.actor()
        if self._resync:  # the owner may have restarted: send again what it does not hold
            applied, checkpointed, _ = runtime.get(
                actor.recovery_state.remote(self._client_id), "recovery_state"
            )
            self._trim(checkpointed)
            for earlier in [e for e in self._log if applied < e.seq < entry.seq]:
                runtime.get(self._submit(actor, earlier), earlier.name)
            self._resync = False
        reply, checkpointed = runtime.get(self._submit(actor, entry), entry.name)
        self._trim(checkpointed)
        return reply  # type: ignore[no-any-return]

    def _submit(self, actor: Any, entry: _Logged) -> Any:
        return actor.logged.remote(self._client_id, entry.seq, entry.name, entry.args, entry.kwargs)

    def _trim(self, checkpointed: int) -> None:
        while self._log and self._log[0].seq <= checkpointed:
            self._log.popleft()

    def _read(self, name: str) -> Any:
        read = super()._read
        return self._retrying(lambda: read(name), name)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """``RayBufferClient.sample``, retried while the owner restarts."""
        sample = super().sample
        return self._retrying(lambda: sample(batch_size, return_info), "sample")
