"""Small helpers shared by the buffer classes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from torch.utils._pytree import tree_map
from torch.utils.data._utils.collate import default_collate

INFO_KEYS = ("index", "index_generation", "priority_weight")


def _build(obj: Any, kind: type, default: Callable[[], Any], argname: str) -> Any:
    if obj is None:
        return default()
    if isinstance(obj, kind):
        return obj
    if callable(obj):
        built = obj()
        if isinstance(built, kind):
            return built
        raise TypeError(
            f"{argname} factory returned {type(built).__name__}, expected a {kind.__name__}."
        )
    raise TypeError(
        f"{argname} must be a {kind.__name__} or a callable building one, got {type(obj).__name__}."
    )


def _check_batch_size(batch_size: Any, argname: str = "batch_size") -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"{argname} must be a positive int, got {batch_size!r}.")
    return batch_size


def _resolve_batch_size(batch_size: Any, default: int | None) -> int:
    """``batch_size`` checked, or the buffer's ``default`` when it is None."""
    if batch_size is not None:
        return _check_batch_size(batch_size)
    if default is None:
        raise ValueError(
            "batch_size was not given to sample() and the buffer has no default; pass "
            "batch_size=... to sample() or to the constructor."
        )
    return default


def _identity(x: Any) -> Any:
    return x


def _unsqueeze(data: Any) -> Any:
    if isinstance(data, (torch.Tensor, TensorDictBase)):
        return data.unsqueeze(0)
    return tree_map(lambda t: torch.as_tensor(t).unsqueeze(0), data)


def _is_empty(data: Any) -> bool:
    if isinstance(data, (torch.Tensor, TensorDictBase)):
        return data.shape[0] == 0 if data.ndim else False
    if isinstance(data, list):
        return len(data) == 0
    return False


def _collate_list(items: list[Any]) -> Any:
    if items and isinstance(items[0], TensorDictBase):
        return torch.stack(items)
    return default_collate(items)


_PRIORITIZED: tuple[type, ...] = ()


def _prioritized_types() -> tuple[type, ...]:
    global _PRIORITIZED
    if not _PRIORITIZED:
        from rbdata.samplers import PrioritizedSampler, PrioritizedSliceSampler

        _PRIORITIZED = (PrioritizedSampler, PrioritizedSliceSampler)
    return _PRIORITIZED


def _check_init_args(
    *,
    service_backend: str | None,
    transform: Any,
    transform_factory: Any,
    batch_size: Any,
    prefetch: Any,
    consume_after_n_samples: Any,
    generator: Any,
) -> str:
    """Validate the buffer constructor's arguments; return the backend name."""
    backend = service_backend or "direct"
    if backend not in ("direct", "ray"):
        raise ValueError(f'service_backend must be "direct" or "ray", got {service_backend!r}.')
    if transform is not None and transform_factory is not None:
        raise TypeError("pass either transform or transform_factory, not both.")
    if batch_size is not None:
        _check_batch_size(batch_size)
    if prefetch is not None and (
        isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0
    ):
        raise ValueError(f"prefetch must be an int >= 0 or None, got {prefetch!r}.")
    n = consume_after_n_samples
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
        raise ValueError(f"consume_after_n_samples must be a positive int or None, got {n!r}.")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}.")
    return backend


def _with_prioritized_sampler(
    owner: str, kwargs: dict[str, Any], storage: Any, **sampler_args: Any
) -> tuple[Any, dict[str, Any]]:
    """Default the storage and add the PrioritizedSampler a prioritized buffer builds itself."""
    from rbdata.samplers import PrioritizedSampler
    from rbdata.storages import ListStorage

    if kwargs.pop("sampler", None) is not None:
        raise TypeError(f"{owner} builds its own PrioritizedSampler; do not pass sampler.")
    storage = storage if storage is not None else ListStorage(1000)
    kwargs["sampler"] = PrioritizedSampler(storage.max_size, **sampler_args)
    return storage, kwargs
