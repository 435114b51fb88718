"""Where a buffer can live besides this process: the registry of service backends.

A buffer built with ``service_backend="direct"`` (the default) holds its data
in this process. Any other name is looked up here: a service package
registers the function that hosts a buffer elsewhere and makes the local
object forward to it (``rbdata.service`` registers ``"ray"`` when it is
imported, which ``import rbdata`` does). The buffers never import a service:
the service depends on the buffers, not the other way round.

Examples:
    >>> from rbdata.buffers.backends import registered_backends
    >>> "ray" in registered_backends()
    True
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = [
    "ServiceBackend",
    "get_service_backend",
    "register_service_backend",
    "ray_actor_class",
    "registered_backends",
]


class ServiceBackend(Protocol):
    """Hosts ``hosted`` elsewhere and makes ``buffer`` forward to it; returns the remote handle.

    ``buffer`` is the buffer being constructed (the backend may give it a subclass of
    its class whose members forward; it stays an instance of its class); ``hosted``
    is a direct copy of it (same class and components) for the service to host.
    """

    def __call__(
        self,
        buffer: Any,
        hosted: Any,
        options: dict[str, Any] | None,
        transport: str,
        transport_options: dict[str, Any] | None,
        *,
        prefetch: int = 0,
        delayed_init: bool = False,
    ) -> Any:
        """Start the service and return the handle the buffer forwards to."""


_BACKENDS: dict[str, ServiceBackend] = {}


def register_service_backend(name: str, attach: ServiceBackend) -> None:
    """Make ``service_backend=name`` host buffers with ``attach``.

    Raises:
        TypeError: if ``name`` is not a str or ``attach`` is not callable.
        ValueError: for ``"direct"`` (the in-process buffer) or an empty name.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}.")
    if not name or name == "direct":
        raise ValueError(
            f'name must be a non-empty backend name other than "direct", got {name!r}.'
        )
    if not callable(attach):
        raise TypeError(f"attach must be callable, got {type(attach).__name__}.")
    _BACKENDS[name] = attach


def registered_backends() -> tuple[str, ...]:
    """The names of the registered service backends (``"direct"`` is always there too)."""
    return tuple(sorted(_BACKENDS))


def get_service_backend(name: str) -> ServiceBackend:
    """The registered backend called ``name``.

    Raises:
        ValueError: if no backend of that name is registered.
    """
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"service_backend={name!r} is not registered; registered: "
            f"{['direct', *registered_backends()]}."
        ) from None


def ray_actor_class(cls: type, remote_config: dict[str, Any] | None = None) -> Any:
    """A Ray actor class hosting buffers of class ``cls`` (``ReplayBuffer.as_remote``).

    Raises:
        ImportError: if Ray is not installed (the ``ray`` extra).
    """
    try:
        import ray
    except ImportError as err:
        raise ImportError("as_remote needs Ray: pip install 'rbdata[ray]'.") from err
    return ray.remote(**(remote_config or {"num_cpus": 1}))(cls)
