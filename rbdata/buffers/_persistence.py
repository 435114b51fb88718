"""A buffer's state: ``state_dict``/``load_state_dict``, ``dumps``/``loads`` and pickling.

The functions here work on a buffer's public interface (its components and
``state_dict``), so that any buffer class can use them.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import torch

from rbdata._validation import transaction
from rbdata.checkpoint import CheckpointError, read_dump, write_dump
from rbdata.sample_units import SampleUnit
from rbdata.samplers import Sampler
from rbdata.storages import Storage
from rbdata.writers import Writer


class _Persistable(Protocol):
    """What saving and loading need from a buffer."""

    @property
    def storage(self) -> Storage: ...

    @property
    def sampler(self) -> Sampler: ...

    @property
    def writer(self) -> Writer: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class _Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def buffer_state(
    storage: Storage,
    sampler: Sampler,
    writer: Writer,
    sample_unit: SampleUnit,
    generator: torch.Generator | None,
    counters: _Stateful,
) -> dict[str, Any]:
    """The buffer's state under fixed keys: storage, sampler, writer, rng, counters."""
    return {
        "storage": storage.state_dict(),
        "sampler": sampler.state_dict(),
        "writer": writer.state_dict(),
        "sample_unit": sample_unit.state_dict(),
        "rng": None if generator is None else generator.get_state(),
        **counters.state_dict(),
    }


def load_buffer_state(
    state: dict[str, Any],
    storage: Storage,
    sampler: Sampler,
    writer: Writer,
    sample_unit: SampleUnit,
    generator: torch.Generator | None,
    counters: _Stateful,
) -> None:
    """Load :func:`buffer_state`'s output; on any error every component is left as it was.

    The storage is loaded last: it validates its content before writing, so a
    rejected state never reaches it.
    """
    rng = state.get("rng")
    if rng is not None and not isinstance(rng, torch.Tensor):
        raise ValueError(f"state_dict['rng'] must be a generator state tensor, got {rng!r}.")
    saved_rng = None if generator is None else generator.get_state()
    with transaction(writer, sampler, sample_unit, counters):
        try:
            for key, component in (
                ("writer", writer),
                ("sampler", sampler),
                ("sample_unit", sample_unit),
            ):
                if key in state:
                    component.load_state_dict(state[key])
            counters.load_state_dict(state)
            if rng is not None and generator is not None:
                generator.set_state(rng)
            if "storage" in state:
                storage.load_state_dict(state["storage"])
        except BaseException:
            if saved_rng is not None and generator is not None:
                generator.set_state(saved_rng)
            raise


def sampling_state(sampler: Sampler, generator: torch.Generator | None) -> dict[str, Any]:
    """What decides the next draws: the sampler's state and the generator's."""
    return {
        "sampler": sampler.state_dict(),
        "rng": None if generator is None else generator.get_state(),
    }


def load_sampling_state(
    state: dict[str, Any], sampler: Sampler, generator: torch.Generator | None
) -> None:
    """Load the ``sampler``/``rng`` entries of ``state`` (absent: kept); unchanged on error."""
    rng = state.get("rng")
    if rng is not None and not isinstance(rng, torch.Tensor):
        raise ValueError(f"sampling state 'rng' must be a generator state tensor, got {rng!r}.")
    with transaction(sampler):
        if state.get("sampler") is not None:
            sampler.load_state_dict(state["sampler"])
        if rng is not None and generator is not None:
            generator.set_state(rng)


def _components(rb: _Persistable) -> dict[str, str]:
    return {
        "storage": type(rb.storage).__name__,
        "sampler": type(rb.sampler).__name__,
        "writer": type(rb.writer).__name__,
    }


def _dumps(rb: _Persistable, path: str | os.PathLike[str]) -> None:
    """Write ``rb`` atomically to the directory ``path`` (see :mod:`rbdata.checkpoint`)."""
    sd = rb.state_dict()
    storage_sd = rb.storage.apply_save_hooks(sd["storage"])
    objects = None
    if "items" in storage_sd:  # list storages hold arbitrary Python objects
        objects = storage_sd["items"]
        storage_sd = {k: v for k, v in storage_sd.items() if k != "items"}
    sd["storage"] = storage_sd
    writer = rb.writer
    manifest = {
        "components": _components(rb),
        "max_size": rb.storage.max_size,
        "length": len(rb.storage),
        "cursor": int(getattr(writer, "cursor", 0)),
        "write_count": writer.write_count,
        "spec": storage_sd.get("spec"),
    }
    write_dump(path, manifest, sd, objects)


def _loads(rb: _Persistable, path: str | os.PathLike[str]) -> None:
    """Read a dump into ``rb`` after checking it matches the buffer's components."""
    manifest, sd, objects = read_dump(path)
    expected = _components(rb)
    found = manifest.get("components", {})
    for name, cls in expected.items():
        if found.get(name) != cls:
            raise CheckpointError(
                f"dump at {str(path)!r} was written by a buffer with {name} {found.get(name)!r}; "
                f"this buffer's {name} is {cls!r}. Build the buffer with matching components."
            )
    if manifest.get("max_size") != rb.storage.max_size:
        raise CheckpointError(
            f"dump at {str(path)!r} has storage max_size {manifest.get('max_size')}; this buffer's "
            f"storage has max_size {rb.storage.max_size}."
        )
    if objects is not None:
        sd["storage"] = {**sd["storage"], "items": objects}
    sd["storage"] = rb.storage.apply_load_hooks(sd["storage"])
    rb.load_state_dict(sd)
