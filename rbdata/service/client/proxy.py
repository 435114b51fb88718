"""The class a Ray-backed buffer takes: one dispatch, generated from the surface's declaration.

``ReplayBuffer(..., service_backend="ray")`` returns an instance of
:func:`proxy_class` of the class asked for (``ReplayBuffer.__new__`` calls the
backend's factory, :func:`~rbdata.service.attach.attach_ray_service`): a subclass (so
``isinstance(rb, TensorDictReplayBuffer)`` still holds) generated once per
buffer class from :func:`~rbdata.service.surface.routes`, that
overrides every declared member:

- CALL and CLIENT members delegate to the service's client (a result that is
  the client is the buffer instead);
- READ members are properties read through the client;
- LOCAL members are the lifecycle (the service's), ``lock`` (the client's),
  ``service_backend`` and ``as_remote`` (the plain class's);
- REFUSED and UNSERVED members raise NotImplementedError saying what to use
  instead: nothing falls through to the calling process's own, empty
  components.

The buffer's ``_remote`` is the service: any object with ``driver`` (the
client), ``is_alive``, ``start()``, ``client()`` and ``shutdown()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from rbdata.errors import ServiceUnavailableError
from rbdata.service.client.buffer_client import RayBufferClient
from rbdata.service.surface import (
    REFUSED_MEMBERS,
    UNSERVED_MEMBERS,
    Route,
    routes,
)

__all__ = ["proxy_class", "unserved_message"]

_PROXIES: dict[type, type] = {}


def unserved_message(name: str) -> str:
    """The error a Ray-backed buffer raises for the unserved property ``name``."""
    return (
        f"rb.{name} is not available on a Ray-backed buffer (service_backend='ray'): "
        f"{UNSERVED_MEMBERS[name]} lives in the actor, and this process's own is empty. "
        "Read sizes and counters with rb.stats(), sample in tasks through rb.client(), or "
        "build a direct buffer to work with the components."
    )


def proxy_class(cls: type) -> type:
    """The Ray-backed variant of the buffer class ``cls`` (made once per class).

    Examples:
        >>> from rbdata import TensorDictReplayBuffer
        >>> proxy = proxy_class(TensorDictReplayBuffer)
        >>> issubclass(proxy, TensorDictReplayBuffer), proxy is proxy_class(TensorDictReplayBuffer)
        (True, True)
        >>> proxy.__name__, "sample" in vars(proxy), "storage" in vars(proxy)
        ('TensorDictReplayBuffer', True, True)
    """
    if cls not in _PROXIES:
        namespace: dict[str, Any] = {
            name: _member(cls, name, route)
            for name, route in routes().items()
            if hasattr(cls, name)
        }
        namespace.update(
            __init__=_init,
            __module__=cls.__module__,
            __qualname__=cls.__qualname__,
            __doc__=cls.__doc__,
            __repr__=_repr,
            __getstate__=_getstate,
        )
        _PROXIES[cls] = type(cls.__name__, (cls,), namespace)
    return _PROXIES[cls]


def _member(cls: type, name: str, route: Route) -> Any:
    if route in (Route.CALL, Route.CLIENT):
        return _delegating(name)
    if route is Route.READ:
        return property(lambda self: getattr(self._remote.driver, name), doc=_doc(name))
    if route is Route.REFUSED:
        return _raising(name, REFUSED_MEMBERS[name])
    if route is Route.UNSERVED:
        message = unserved_message(name)

        def unserved(self: Any) -> Any:
            raise NotImplementedError(message)

        return property(unserved, doc=message)
    return _LOCAL[name](cls)


def _doc(name: str) -> str | None:
    member = getattr(RayBufferClient, name, None)
    return None if member is None else member.__doc__


def _delegating(name: str) -> Callable[..., Any]:
    def delegate(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = self._remote.driver
        result = getattr(client, name)(*args, **kwargs)
        return self if result is client else result

    reference = getattr(RayBufferClient, name)
    functools.update_wrapper(delegate, reference)  # name, docstring and signature
    return delegate


def _raising(name: str, message: str) -> Callable[..., Any]:
    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(message)

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = message
    return refuse


# ------------------------------------------------------------- local members
def _init(self: Any, *args: Any, _service: Any = None, **kwargs: Any) -> None:
    """Forward to ``_service``; the caller's buffer arguments change nothing.

    The backend's factory builds the buffer with ``_service`` (the service it
    started); Python then calls ``__init__`` again with the arguments given to
    ``ReplayBuffer(...)``, which the hosted buffer took already.
    """
    if _service is not None:
        self._remote, self._service_backend = _service, "ray"


def _start(self: Any) -> Any:
    """Check that the service is running; return this buffer."""
    self._remote.start()
    return self


def _shutdown(self: Any, timeout: float | None = None) -> None:
    """Stop the actor and release Ray (idempotent)."""
    self._remote.shutdown(timeout)


def _client(
    self: Any, *, prefetch: int | None = None, write_behind: int = 0, coalesce: int | None = None
) -> Any:
    """A picklable client of the actor, for tasks, actors and other processes.

    Args:
        self: the Ray-backed buffer.
        prefetch: requests the client keeps in flight; None: the buffer's ``prefetch``.
        write_behind: writes the client keeps in flight (``add``/``extend`` return None;
            see :class:`~rbdata.service.RayBufferClient`).
        coalesce: ``add``/``extend`` calls of fewer rows are queued (they return None) and
            sent as one ``extend`` (0: off; None: the buffer's ``coalesce`` option; see
            :mod:`rbdata.service.client.coalesce`).
    """
    return self._remote.client(prefetch=prefetch, write_behind=write_behind, coalesce=coalesce)


def _enter(self: Any) -> Any:
    return self


def _exit(self: Any, *exc: object) -> None:
    self._remote.shutdown()


def _as_remote(cls: type) -> Any:
    plain = cls.as_remote.__func__  # type: ignore[attr-defined]

    def as_remote(proxy: type, remote_config: dict[str, Any] | None = None) -> Any:
        return plain(cls, remote_config)  # a Ray class of the plain buffer class

    functools.update_wrapper(as_remote, plain)
    return classmethod(as_remote)


_LOCAL: dict[str, Callable[[type], Any]] = {
    "service_backend": lambda cls: property(
        lambda self: self._service_backend, doc="The deployment backend: ``'ray'``."
    ),
    "lock": lambda cls: property(
        lambda self: self._remote.driver.lock, doc=RayBufferClient.lock.__doc__
    ),
    "is_alive": lambda cls: property(
        lambda self: bool(self._remote.is_alive), doc="Whether the actor is running."
    ),
    "start": lambda cls: _start,
    "shutdown": lambda cls: _shutdown,
    "close": lambda cls: _shutdown,
    "client": lambda cls: _client,
    "as_remote": _as_remote,
    "__enter__": lambda cls: _enter,
    "__exit__": lambda cls: _exit,
}


def _repr(self: Any) -> str:
    try:
        client = self._remote.driver
    except ServiceUnavailableError:
        return f"{type(self).__name__}(service_backend='ray', shut down)"
    return f"{type(self).__name__}(service_backend='ray', client={client!r})"


def _getstate(self: Any) -> dict[str, Any]:
    raise TypeError(
        f"a Ray-backed {type(self).__name__} does not pickle (it owns its actor): pickle "
        "rb.client() instead, a handle on the same actor for tasks and other processes."
    )
