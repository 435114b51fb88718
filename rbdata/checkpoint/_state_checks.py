"""Checking the components' sections of a buffer dump's state, without the components.

``loads`` and ``rbdata verify`` both run these checks (through
:func:`~rbdata.checkpoint._consistency.check_consistency`), so a dump one of
them rejects for its content the other rejects with the same reason. What a
component's ``load_state_dict`` would refuse for any buffer built like the one
that wrote the dump is checked here, against the summary the manifest records
(``capacities``: the writer's generation slots and the sampler's priority slots;
``generator``: the device of the buffer's generator). What only depends on the
loading buffer (its components, its ``max_size``, its capacities) is ``loads``'
own check.
"""

from __future__ import annotations

from typing import Any

import torch

from rbdata._component.checks import check_number
from rbdata._component.prefetch_state import check_queue_state
from rbdata.errors import CheckpointError

_CPU_RNG_BYTES = torch.Generator().get_state().numel()


def _get(section: Any, key: str) -> Any:
    """``section[key]`` (torchrl's ``_key`` first), None when absent."""
    if not isinstance(section, dict):
        return None
    return section.get(f"_{key}", section.get(key))


def _tensor(value: Any, what: str, where: str, *, ndim: int = 1) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.ndim != ndim:
        given = f"{value.ndim}-d tensor" if isinstance(value, torch.Tensor) else repr(value)
        raise CheckpointError(f"{where}: {what} must be a {ndim}-d tensor, got {given}.")
    return value


def _slots(manifest: dict[str, Any], name: str, where: str) -> int | None:
    capacities = manifest.get("capacities")
    if capacities is None:  # a dump written before capacities were recorded
        return None
    value = capacities.get(name) if isinstance(capacities, dict) else capacities
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise CheckpointError(f"{where}: capacities[{name!r}] must be an int >= 0, got {value!r}.")
    return value


def _check_rows(tensor: torch.Tensor, expected: int | None, what: str, where: str) -> None:
    if expected is not None and tensor.shape[0] != expected:
        raise CheckpointError(
            f"{where}: {what}: {tensor.shape[0]} entries, the manifest's capacities say {expected}."
        )


def check_rng(manifest: dict[str, Any], state: Any, where: str) -> None:
    """The saved generator state must load into a generator of the recorded device."""
    rng = _get(state, "rng")
    if isinstance(rng, tuple | list) and rng:  # torchrl's (state, device)
        rng = rng[0]
    if rng is None:
        return
    rng = _tensor(rng, "the generator state '_rng'", where)
    device = manifest.get("generator", "cpu")
    if device is not None and type(device) is not str:
        raise CheckpointError(f"{where}: generator must be a device name, got {device!r}.")
    if device == "cpu" or (device is None and rng.numel() == _CPU_RNG_BYTES):
        try:
            torch.Generator().set_state(rng.clone())
        except (RuntimeError, TypeError, ValueError) as err:
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise CheckpointError(
                f"{where}: the generator state '_rng' does not load ({message})."
            ) from err


def check_writer(manifest: dict[str, Any], writer: dict[str, Any], where: str) -> None:
    """Generations (when tracked): one int64 stamp per slot of the recorded capacity."""
    generation = _get(writer, "generation")
    if generation is None:
        return
    generation = _tensor(generation, "the writer's generations", where)
    if generation.dtype != torch.int64:
        raise CheckpointError(
            f"{where}: the writer's generations are {generation.dtype}, expected torch.int64."
        )
    _check_rows(
        generation, _slots(manifest, "generations", where), "the writer's generations", where
    )


def _check_scalar(section: Any, key: str, kind: type[int] | type[float], where: str) -> None:
    """``section[key]``, when present, must convert as the component converts it (``int()``...)."""
    if not isinstance(section, dict) or key not in section:
        return
    try:
        kind(section[key])
    except (TypeError, ValueError, OverflowError) as err:
        raise CheckpointError(
            f"{where}: {key} must be {'an int' if kind is int else 'a number'}, "
            f"got {section[key]!r}."
        ) from err


def _check_exponent(value: Any, key: str, where: str) -> None:
    """A prioritized sampler's ``alpha``/``beta``: a real number >= 0."""
    try:
        number = check_number(value, key)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{where}: the sampler's {err}") from err
    if not number >= 0:
        raise CheckpointError(f"{where}: the sampler's {key} must be >= 0, got {number!r}.")


def check_buffer(state: dict[str, Any], where: str) -> None:
    """The buffer's own entries: its counters and its prefetch queue."""
    _check_scalar(state, "skipped_priority_updates", int, where)
    prefetch = state.get("_prefetch_state")
    capacity = prefetch.get("capacity") if isinstance(prefetch, dict) else None
    try:
        check_queue_state(prefetch, capacity if isinstance(capacity, int) else 0)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{where}: {err}") from err


_TENSOR_STORAGES = ("TensorStorage", "LazyTensorStorage", "LazyMemmapStorage")


def check_storage(manifest: dict[str, Any], storage: dict[str, Any], where: str) -> None:
    """A tensor storage's structure, layout and content, checked as an empty storage would."""
    components = manifest.get("components")
    kind = components.get("storage") if isinstance(components, dict) else None
    if kind not in _TENSOR_STORAGES or "content" not in storage:
        return
    from rbdata.storages import LazyTensorStorage
    from rbdata.storages._state import _parse_state

    lead = storage.get("lead")
    ndim = _slots(manifest, "ndim", where)
    if ndim is None:  # a dump written before the storage's ndim was recorded
        ndim = len(lead) + 1 if isinstance(lead, list | tuple) else 1
    max_size = manifest.get("max_size")
    try:
        probe = LazyTensorStorage(  # its checks, not its memory: nothing is allocated
            max_size if type(max_size) is int and max_size > 0 else 1, ndim=ndim
        )
        _parse_state(storage, probe.ndim, probe.max_size, None)
    except (TypeError, ValueError, KeyError, IndexError, RuntimeError) as err:
        raise CheckpointError(f"{where}: the storage state does not load ({err}).") from err


def _check_live_fits(manifest: dict[str, Any], live: dict[str, Any], where: str) -> None:
    """The live set's slots are storage cells, and its live slots fit its counts.

    A storage of ``max_size`` cells has fewer than ``2 * max_size`` of them (an ndim>1
    storage rounds up to whole items), so a slot past that is damage (and would make the
    live set allocate for it).
    """
    max_size = manifest.get("max_size")
    bound = 2 * max_size if type(max_size) is int else 0
    counts, live_slots, freed = (live.get(k) for k in ("counts", "live", "freed"))
    capacity = counts.numel() if isinstance(counts, torch.Tensor) else 0
    for key, value in (("live", live_slots), ("freed", freed)):
        if isinstance(value, torch.Tensor) and value.numel() and int(value.max()) >= bound:
            raise CheckpointError(
                f"{where}: the sampler's live set {key!r} names slot {int(value.max())}, "
                f"past the cells of a storage of max_size {max_size}."
            )
        if key == "live" and isinstance(value, torch.Tensor) and value.numel():
            capacity = max(capacity, int(value.max()) + 1)
    if isinstance(live_slots, torch.Tensor) and live_slots.numel() > capacity:
        raise CheckpointError(
            f"{where}: the sampler's live set holds {live_slots.numel()} live slots, more than "
            f"its {capacity} counts."
        )


def check_sampler(manifest: dict[str, Any], sampler: Any, where: str) -> None:
    """Consume-after-n, the live set and the priorities (finite, >= 0, one per slot)."""
    if not isinstance(sampler, dict):
        return
    n = sampler.get("consume_after_n")
    if n is not None and (type(n) is not int or n < 1):
        raise CheckpointError(f"{where}: the sampler's consume_after_n must be None or >= 1.")
    live = sampler.get("live")
    if live is not None:
        if not isinstance(live, dict):
            raise CheckpointError(f"{where}: the sampler's live set must be an object.")
        for key in ("counts", "live", "freed"):
            if key in live and not (
                isinstance(live[key], torch.Tensor)
                and live[key].ndim == 1
                and not live[key].dtype.is_floating_point
                and (live[key].numel() == 0 or int(live[key].min()) >= 0)
            ):
                raise CheckpointError(
                    f"{where}: the sampler's live set {key!r} must be a 1-d tensor of ints >= 0."
                )
        reuse_at = live.get("reuse_at", 0)
        if type(reuse_at) is not int or reuse_at < 0:
            raise CheckpointError(
                f"{where}: the sampler's live set 'reuse_at' must be an int >= 0, got {reuse_at!r}."
            )
        _check_live_fits(manifest, live, where)
    for key in ("alpha", "beta"):  # as PrioritizedSampler.load_state_dict checks them
        if key in sampler:
            _check_exponent(sampler[key], key, where)
    leaves = sampler.get("leaves")
    if leaves is not None:
        leaves = _tensor(leaves, "the sampler's priorities 'leaves'", where)
        _check_rows(
            leaves, _slots(manifest, "priorities", where), "the sampler's priorities", where
        )
        if leaves.numel() and not bool(torch.isfinite(leaves).all() and (leaves >= 0).all()):
            raise CheckpointError(
                f"{where}: the sampler's priorities hold a negative, NaN or infinite value."
            )
    for key in ("max_priority", "max_raw_priority"):
        _check_scalar(sampler, key, float, where)
    _check_scalar(sampler, "cursor", int, where)
    _check_scalar(live, "n", int, where)
