"""Where a buffer can live besides this process: the registry of service backends.

A buffer built with ``service_backend="direct"`` (the default) holds its data
in this process. Any other name is looked up here: a service package
registers the factory that hosts a buffer elsewhere and returns the object
that forwards to it (``ReplayBuffer.__new__`` returns it), with the keys its
``service_backend_options`` accept
(``rbdata.service`` registers ``"ray"`` when it is imported, which ``import
rbdata`` does). The buffers never import a service: the service depends on
the buffers, not the other way round.

Examples:
    >>> from rbdata.buffers.backends import backend_option_keys, registered_backends
    >>> "ray" in registered_backends()
    True
    >>> "shards" in backend_option_keys("ray")
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol

__all__ = [
    "ServiceBackend",
    "backend_option_keys",
    "get_service_backend",
    "register_service_backend",
    "ray_actor_class",
    "registered_backends",
]


class ServiceBackend(Protocol):
    """Hosts ``hosted`` elsewhere and returns the buffer that forwards to it: a factory.

    ``ReplayBuffer.__new__`` calls it for ``cls(..., service_backend=name)``:
    ``cls`` is the buffer class asked for, ``hosted`` a direct buffer of that
    class built with the same arguments (no prefetch, components not built
    yet) for the service to host. It returns an instance of a subclass of
    ``cls`` whose members forward to the service; Python then calls that
    instance's ``__init__`` with the caller's arguments, which must change nothing.
    """

    def __call__(
        self,
        cls: type,
        hosted: Any,
        options: dict[str, Any] | None,
        transport: str,
        transport_options: dict[str, Any] | None,
        *,
        prefetch: int = 0,
        delayed_init: bool = False,
    ) -> Any:
        """Start the service and return the buffer forwarding to it."""


class _Backend(NamedTuple):
    """A registered backend: what a buffer calls, and the option keys it accepts (None: any)."""

    attach: ServiceBackend
    option_keys: frozenset[str] | None


_BACKENDS: dict[str, _Backend] = {}

#: backends rbdata ships, by the module that registers each when imported: a buffer asking
#: for one imports it then, so ``import rbdata`` stays light (a plugin's own import registers
#: it the same way)
_PROVIDERS: dict[str, str] = {"ray": "rbdata.service"}


def register_service_backend(
    name: str, attach: ServiceBackend, option_keys: Iterable[str] | None = None
) -> None:
    """Make ``service_backend=name`` host buffers with ``attach``.

    Args:
        name: the ``service_backend`` value.
        attach: the factory ``ReplayBuffer(..., service_backend=name)`` calls
            (see :class:`ServiceBackend`).
        option_keys: the keys its ``service_backend_options`` accept: a buffer
            refuses any other before ``attach`` is called (None: ``attach``
            checks them alone).

    Raises:
        TypeError: if ``name`` is not a str, ``attach`` is not callable or
            ``option_keys`` is not an iterable of str.
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
    _BACKENDS[name] = _Backend(attach, _checked_keys(option_keys))


def _checked_keys(option_keys: Any) -> frozenset[str] | None:
    """``option_keys`` as a frozenset; TypeError unless None or an iterable of str (not a str)."""
    if option_keys is None:
        return None
    iterable = isinstance(option_keys, Iterable) and not isinstance(option_keys, str)
    keys = list(option_keys) if iterable else None
    if keys is None or not all(isinstance(key, str) for key in keys):
        raise TypeError(f"option_keys must be an iterable of str or None, got {option_keys!r}.")
    return frozenset(keys)


def registered_backends() -> tuple[str, ...]:
    """The names of the registered service backends (``"direct"`` is always there too)."""
    return tuple(sorted(set(_BACKENDS) | set(_PROVIDERS)))


def get_service_backend(name: str) -> ServiceBackend:
    """The registered backend called ``name``.

    Raises:
        ValueError: if no backend of that name is registered.
    """
    return _entry(name).attach


def backend_option_keys(name: str) -> frozenset[str] | None:
    """The keys the ``service_backend_options`` of backend ``name`` accept (None: any).

    Raises:
        ValueError: if no backend of that name is registered.
    """
    return _entry(name).option_keys


def _entry(name: str) -> _Backend:
    if name not in _BACKENDS and name in _PROVIDERS:
        importlib.import_module(_PROVIDERS[name])  # registers it
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
