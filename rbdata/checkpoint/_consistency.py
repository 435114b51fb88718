"""Checking a buffer dump's summary (length, counts, spec) against the state it holds."""

from __future__ import annotations

from typing import Any

import torch

from rbdata.errors import CheckpointError

from ._files import dtype_name
from ._state_checks import check_buffer, check_rng, check_sampler, check_storage, check_writer


def _section(state: Any, name: str, where: str) -> dict[str, Any]:
    """``state[name]`` (torchrl's ``_name`` key first, then rbdata's former ``name``)."""
    section = None
    if isinstance(state, dict):
        section = state.get(f"_{name}", state.get(name))
    if not isinstance(section, dict):
        raise CheckpointError(f"{where}: the state has no {name!r} section.")
    return section


def _count(manifest: dict[str, Any], key: str, where: str) -> int:
    value = manifest.get(key)
    if type(value) is not int or value < 0:
        raise CheckpointError(f"{where}: {key} must be an int >= 0, got {value!r}.")
    return value


def check_consistency(manifest: dict[str, Any], state: Any, objects: Any, where: str) -> None:
    """Check that the manifest's summary describes ``state`` (and ``objects``) exactly.

    Args:
        manifest: the parsed manifest (``length``, ``max_size``, ``write_count``,
            ``cursor``, ``spec``).
        state: the decoded state tree (``storage``, ``writer``, ...).
        objects: the decoded objects of a list storage, or None (none, or not unpickled).
        where: the manifest's path, for messages.

    Raises:
        CheckpointError: naming the first disagreement.

    The components' sections are checked too (:mod:`._state_checks`): ``loads``
    and ``rbdata verify`` both come here, so they reject the same dumps.
    """
    storage, writer = _section(state, "storage", where), _section(state, "writer", where)
    length, max_size = _count(manifest, "length", where), _count(manifest, "max_size", where)
    if storage.get("len") != length:
        raise CheckpointError(
            f"{where}: length {length}, but the storage state holds {storage.get('len')!r} items."
        )
    if length > max_size:
        raise CheckpointError(f"{where}: length {length} exceeds max_size {max_size}.")
    write_count = _count(manifest, "write_count", where)
    saved_count = writer.get("_write_count", writer.get("write_count"))
    if saved_count != write_count:
        raise CheckpointError(
            f"{where}: write_count {write_count}, but the writer state says {saved_count!r}."
        )
    cursor = _count(manifest, "cursor", where)
    saved_cursor = writer.get("_cursor", writer.get("cursor", cursor))
    if saved_cursor != cursor or cursor > max_size:
        raise CheckpointError(
            f"{where}: cursor {cursor} disagrees with the writer state "
            f"({saved_cursor!r}) or exceeds max_size {max_size}."
        )
    if objects is not None and "content" in storage:
        raise CheckpointError(f"{where}: objects stored beside a tensor storage's content.")
    if isinstance(objects, list) and len(objects) != length:
        raise CheckpointError(f"{where}: length {length}, but {len(objects)} objects are stored.")
    _check_content(manifest, storage, length, where)
    check_writer(manifest, writer, where)
    check_sampler(manifest, state.get("_sampler", state.get("sampler")), where)
    check_rng(manifest, state, where)
    check_buffer(state, where)
    check_storage(manifest, storage, where)


def _check_content(
    manifest: dict[str, Any], storage: dict[str, Any], length: int, where: str
) -> None:
    if "content" not in storage:
        return
    content, spec = storage["content"], storage.get("spec")
    if manifest.get("spec") != spec or not isinstance(content, dict) or not isinstance(spec, dict):
        raise CheckpointError(f"{where}: the spec disagrees with the storage state's.")
    if set(content) != set(spec):
        raise CheckpointError(
            f"{where}: content keys {sorted(content)} differ from the spec's {sorted(spec)}."
        )
    for key, leaf in content.items():
        entry = spec[key]
        expected = [length, *entry.get("shape", [])] if isinstance(entry, dict) else None
        if (
            not isinstance(leaf, torch.Tensor)
            or expected is None
            or list(leaf.shape) != expected
            or dtype_name(leaf.dtype) != entry.get("dtype")
        ):
            given = (
                f"{dtype_name(leaf.dtype)}{list(leaf.shape)}"
                if isinstance(leaf, torch.Tensor)
                else type(leaf).__name__
            )
            raise CheckpointError(
                f"{where}: content {key!r} is {given}, the spec says {entry!r} for {length} items."
            )
