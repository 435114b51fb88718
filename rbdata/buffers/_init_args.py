"""The checks of a buffer's constructor arguments, and building its components."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

from rbdata._component.checks import check_int, check_optional_int
from rbdata.buffers.backends import backend_option_keys, registered_backends

T = TypeVar("T")


def build_component(obj: Any, kind: type[T], default: Callable[[], T], name: str) -> T:
    """``obj`` if it is a ``kind``, what it builds if it is a factory, else ``default()``.

    Raises:
        TypeError: for anything else, or a factory returning something else.
    """
    if obj is None:
        return default()
    if isinstance(obj, kind):
        return obj
    if callable(obj):
        built = obj()
        if isinstance(built, kind):
            return built
        raise TypeError(
            f"the {name} factory returned {type(built).__name__}, expected a {kind.__name__}."
        )
    raise TypeError(
        f"{name} must be a {kind.__name__} or a callable building one, got {type(obj).__name__}."
    )


def resolve_batch_size(batch_size: Any, default: int | None) -> int:
    """``batch_size`` checked, or the buffer's ``default`` when it is None.

    Raises:
        TypeError: if ``batch_size`` is not an int.
        ValueError: if it is not positive.
        RuntimeError: if neither it nor a default is given (torchrl's error: the buffer
            was built without one).
    """
    if batch_size is not None:
        return check_int(batch_size, "batch_size", minimum=1)
    if default is None:
        raise RuntimeError(
            "batch_size not specified: it was not given to sample() and the buffer has no "
            "default; pass batch_size=... to sample() or to the constructor."
        )
    return default


def check_backend(
    service_backend: Any,
    use_ray_service: bool,
    service_backend_options: Any,
    transport: Any,
    transport_options: Any,
) -> str:
    """The deployment backend (``"direct"`` or ``"ray"``) after checking the backend arguments.

    Raises:
        TypeError: for options that are not dicts, or unknown option keys.
        ValueError: for an unknown backend or transport, conflicting spellings, or
            options given to a direct buffer.
    """
    if use_ray_service:
        import warnings

        warnings.warn(
            'use_ray_service=True is deprecated; pass service_backend="ray".',
            FutureWarning,
            stacklevel=4,
        )
        if service_backend not in (None, "ray"):
            raise ValueError(
                f"use_ray_service=True conflicts with service_backend={service_backend!r}."
            )
        service_backend = "ray"
    backend = "direct" if service_backend is None else service_backend
    known = ("direct", *registered_backends())
    if backend not in known:
        raise ValueError(
            f"service_backend must be one of {' or '.join(map(repr, known))}, "
            f"got {service_backend!r}."
        )
    if transport not in ("auto", "direct", "ray", "distributed"):
        raise ValueError(f'transport must be "auto", "ray" or "distributed", got {transport!r}.')
    for name, options in (
        ("service_backend_options", service_backend_options),
        ("transport_options", transport_options),
    ):
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"{name} must be a dict or None, got {type(options).__name__}.")
    if backend == "direct":
        if service_backend_options:
            raise ValueError(
                "service_backend_options only apply to service_backend='ray'; got "
                f"{sorted(service_backend_options)} for a direct buffer."
            )
        if transport not in ("auto", "direct") or transport_options:
            raise ValueError(
                f"transport={transport!r} and transport_options apply to a remote buffer "
                "(service_backend='ray'), not to a direct one."
            )
        return backend
    accepted = backend_option_keys(backend)
    if accepted is not None:  # None: the backend checks its options alone
        unknown = sorted(set(service_backend_options or {}) - accepted)
        if unknown:
            raise TypeError(f"service_backend_options accepts {sorted(accepted)}, got {unknown}.")
    return backend


def check_buffer_args(
    *,
    transform: Any,
    transform_factory: Any,
    batch_size: Any,
    prefetch: Any,
    consume_after_n_samples: Any,
    generator: Any,
    dim_extend: Any,
) -> None:
    """Check the plain arguments of a buffer's constructor (nothing is built yet).

    Raises:
        TypeError: for a value of the wrong type, or both ``transform`` and
            ``transform_factory``.
        ValueError: for a value out of range.
    """
    if transform is not None and transform_factory is not None:
        raise TypeError("pass either transform or transform_factory, not both.")
    check_optional_int(batch_size, "batch_size", minimum=1)
    check_optional_int(prefetch, "prefetch", minimum=0)
    check_optional_int(consume_after_n_samples, "consume_after_n_samples", minimum=1)
    check_optional_int(dim_extend, "dim_extend", minimum=0)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}.")
