"""Ray itself: importing it, connecting to a cluster, and turning its errors into ours."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from rbdata.errors import ServiceUnavailableError

NAMESPACE = "rbdata"


def ray_module() -> ModuleType:
    """``import ray``, or an ImportError naming the ``ray`` extra."""
    try:
        return importlib.import_module("ray")
    except ImportError as err:
        raise ImportError(
            f"the Ray service backend needs the 'ray' extra: pip install 'rbdata[ray]' ({err})."
        ) from err


class Lease:
    """This process's use of Ray on behalf of one Ray-backed buffer.

    Ray is started (``ray.init(**init_config)``) by the first lease when this
    process is not attached to a cluster yet, and shut down when the last of
    the leases that started it is released; Ray started by the user is left
    running.
    """

    _holders = 0  # leases alive that share the Ray instance some lease started
    _started = False

    def __init__(self, init_config: dict[str, Any] | None) -> None:
        ray = ray_module()
        if not ray.is_initialized():
            ray.init(**(init_config or {}))
            Lease._started = True
        self._shares = Lease._started
        if self._shares:
            Lease._holders += 1
        self._released = False

    def release(self) -> None:
        """Give the lease back (idempotent); the last one shuts down the Ray it started."""
        if self._released:
            return
        self._released = True
        if not self._shares:
            return
        Lease._holders -= 1
        if Lease._holders == 0:
            Lease._started = False
            ray = ray_module()
            if ray.is_initialized():
                ray.shutdown()


def join(address: str) -> None:
    """Attach this process to the cluster at ``address`` if it is not attached to one."""
    ray = ray_module()
    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)


def get(refs: Any, what: str, timeout: float | None = None) -> Any:
    """``ray.get(refs)`` with the actor's exceptions re-raised as they were raised there.

    An exception raised inside the actor reaches the caller with its own type
    and message (the remote traceback is attached as a note); a dead actor
    raises :class:`ServiceUnavailableError` naming ``what``.
    """
    ray = ray_module()
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.RayTaskError as err:
        cause = err.cause
        if not isinstance(cause, BaseException) or isinstance(cause, ray.exceptions.RayError):
            raise
        note = getattr(cause, "add_note", None)
        if note is not None:
            note(f"raised in the replay buffer's Ray actor:\n{err}")
        raise cause from None
    except ray.exceptions.RayActorError as err:
        raise ServiceUnavailableError(
            f"{what}: the Ray actor hosting the replay buffer is no longer alive (it was shut "
            "down, or its process died); build a new Ray-backed buffer and use its client()."
        ) from err
