"""Conditional updates through a ReplayBufferEnsemble: ``update_if_present``, ``end_streams``.

Both act on the member buffers through their public methods. Everything that
can be checked is checked for every member before the first member is
patched, so a call that raises leaves every member as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key
from rbdata.buffers._conditional_update import ConditionalUpdateResult
from rbdata.buffers.replay import ReplayBuffer
from rbdata.samplers import SliceSampler
from rbdata.storages import TensorStorage
from rbdata.writers import RoundRobinWriter

__all__ = ["end_member_streams", "routed_update"]


def _check_members_can_update(members: Sequence[ReplayBuffer]) -> None:
    for i, member in enumerate(members):
        if not isinstance(member.storage, TensorStorage):
            raise RuntimeError(
                f"conditional updates need every member to use a tensor storage; member {i} "
                f"has a {type(member.storage).__name__}."
            )
        if not member.writer.tracks_generations:
            raise RuntimeError(
                f"conditional updates need every member writer to track slot generations; "
                f"member {i}'s {type(member.writer).__name__} does not (pass "
                "track_generations=True)."
            )


def _flat_patch(
    patch: Mapping[Any, torch.Tensor] | TensorDictBase, leading: torch.Size, n: int
) -> dict[NestedKey, torch.Tensor]:
    """The patch as ``{key: [n, ...] tensor}``, one row per record (in the routed order)."""
    if isinstance(patch, TensorDictBase):
        if patch.batch_size != leading:
            raise ValueError(
                f"patch has batch size {list(patch.batch_size)}; the routed index has "
                f"{list(leading)}: they must match."
            )
        items = list(patch.items(True, True))
    elif isinstance(patch, Mapping):
        items = list(patch.items())
    else:
        raise TypeError(f"patch must be a mapping or a TensorDict, got {type(patch).__name__}.")
    out: dict[NestedKey, torch.Tensor] = {}
    for key, value in items:
        value = torch.as_tensor(value)
        if tuple(value.shape[: len(leading)]) != tuple(leading):
            raise ValueError(
                f"patch[{key!r}] has shape {list(value.shape)}; it must start with the routed "
                f"index's shape {list(leading)}."
            )
        out[normalize_key(key, "patch key")] = value.reshape(n, *value.shape[len(leading) :])
    return out


def _check_member_patch(
    member: ReplayBuffer, i: int, patch: dict[NestedKey, torch.Tensor], slots: torch.Tensor
) -> None:
    """KeyError/ValueError for a patch member ``i`` would refuse (before any member is patched)."""
    storage = member.storage
    assert isinstance(storage, TensorStorage)
    known = set(storage.leaf_keys())
    for key, value in patch.items():
        if key not in known:
            raise KeyError(
                f"patch key {key!r} is not stored in member {i}; its keys are "
                f"{sorted(map(str, known))}."
            )
        leaf = storage.get_leaf(key)
        if value.dtype != leaf.dtype:
            raise ValueError(
                f"patch[{key!r}] has dtype {value.dtype}; member {i} stores {leaf.dtype}."
            )
    if storage.ndim == 1 and slots.numel():
        bad = (slots < 0) | (slots >= len(storage))
        if bool(bad.any()):
            raise ValueError(
                f"index holds slots {slots[bad][:5].tolist()} outside member {i}'s "
                f"{len(storage)} written slots."
            )


@dataclass(frozen=True)
class _Routed:
    """An ensemble update split by member: the records' positions, slots and generations."""

    member: int
    rows: torch.Tensor
    slots: torch.Tensor
    generation: torch.Tensor


def routed_update(
    members: Sequence[ReplayBuffer],
    *,
    index: TensorDictBase,
    generation: torch.Tensor,
    patch: Mapping[Any, torch.Tensor] | TensorDictBase,
    version_key: NestedKey | None,
    version: int | torch.Tensor | None,
    require_newer: bool,
) -> ConditionalUpdateResult:
    """``update_if_present`` of the members named by ``index["buffer_ids"]`` (see the ensemble)."""
    if not isinstance(index, TensorDictBase):
        raise TypeError(
            "index must be the routed metadata of an ensemble write or sample (a TensorDict "
            f"holding 'buffer_ids' and 'index'), got {type(index).__name__}."
        )
    buffer_ids, local = index.get("buffer_ids", None), index.get("index", None)
    if buffer_ids is None or local is None:
        raise KeyError(
            f"index must hold 'buffer_ids' and 'index' entries, got keys {list(index.keys())}."
        )
    if buffer_ids.dtype == torch.bool or buffer_ids.is_floating_point():
        raise TypeError(f"index['buffer_ids'] must hold integers, got dtype {buffer_ids.dtype}.")
    leading = buffer_ids.shape
    if tuple(local.shape[: len(leading)]) != tuple(leading):
        raise ValueError(
            f"index['index'] has shape {list(local.shape)}; it must start with "
            f"index['buffer_ids']'s shape {list(leading)}."
        )
    n = buffer_ids.numel()
    ids = buffer_ids.reshape(-1).to(torch.long)
    if n and (bool((ids < 0).any()) or bool((ids >= len(members)).any())):
        raise ValueError(
            f"index['buffer_ids'] must lie in [0, {len(members) - 1}], got "
            f"{ids[(ids < 0) | (ids >= len(members))][:5].tolist()}."
        )
    if (version_key is None) != (version is None):
        raise ValueError(
            "version_key and version must be passed together, got "
            f"version_key={version_key!r} and version={version!r}."
        )
    _check_members_can_update(members)
    generation = torch.as_tensor(generation)
    if generation.is_floating_point() or generation.dtype == torch.bool:
        raise TypeError(f"generation must hold integers, got dtype {generation.dtype}.")
    generation = generation.reshape(-1).to(torch.long)
    if generation.numel() != n:
        raise ValueError(
            f"generation has {generation.numel()} entries; the routed index addresses {n} records."
        )
    flat_local = local.reshape(n, *local.shape[len(leading) :])
    flat_patch = _flat_patch(patch, leading, n)
    versions = None
    if isinstance(version, torch.Tensor) and version.numel() > 1:
        if version.numel() != n:
            raise ValueError(f"version has {version.numel()} entries, expected 1 or {n}.")
        versions = version.reshape(-1)
    groups = []
    for member in range(len(members)):
        rows = (ids == member).nonzero().reshape(-1)  # the records' order is kept
        if not rows.numel():
            continue
        routed = _Routed(member, rows, flat_local[rows], generation[rows])
        _check_member_patch(members[member], member, flat_patch, routed.slots)
        groups.append(routed)
    updated = torch.zeros(n, dtype=torch.bool)
    stale = torch.zeros(n, dtype=torch.bool)
    rejected = None if version_key is None else torch.zeros(n, dtype=torch.bool)
    for routed in groups:
        result = members[routed.member].update_if_present(
            index=routed.slots,
            generation=routed.generation,
            patch={key: value[routed.rows] for key, value in flat_patch.items()},
            version_key=version_key,
            version=version if versions is None else versions[routed.rows],
            require_newer=require_newer,
        )
        updated[routed.rows] = result.updated.cpu().reshape(-1)
        stale[routed.rows] = result.stale.cpu().reshape(-1)
        if rejected is not None and result.version_rejected is not None:
            rejected[routed.rows] = result.version_rejected.cpu().reshape(-1)
    return ConditionalUpdateResult(
        updated=updated.reshape(leading),
        stale=stale.reshape(leading),
        version_rejected=None if rejected is None else rejected.reshape(leading),
    )


def end_member_streams(
    members: Sequence[ReplayBuffer],
    *,
    end_key: NestedKey,
    terminated_key: NestedKey | None,
    truncated_key: NestedKey | None,
) -> None:
    """Mark each member's last record as the end of its stream (see ``ReplayBufferEnsemble``)."""
    end_key = normalize_key(end_key, "end_key")
    terminated = None if terminated_key is None else normalize_key(terminated_key, "terminated_key")
    truncated = None if truncated_key is None else normalize_key(truncated_key, "truncated_key")
    keys = [k for k in (end_key, terminated, truncated) if k is not None]
    if len(set(keys)) != len(keys):
        raise ValueError(
            f"end_key, terminated_key and truncated_key must be distinct, got {end_key!r}, "
            f"{terminated_key!r} and {truncated_key!r}."
        )
    plans = []
    for i, member in enumerate(members):
        storage, writer, sampler = member.storage, member.writer, member.sampler
        sampler_keys = (
            list(sampler.end_keys or [sampler.end_key]) if isinstance(sampler, SliceSampler) else []
        )
        if (
            not isinstance(storage, TensorStorage)
            or storage.ndim != 1
            or not isinstance(writer, RoundRobinWriter)
            or not writer.tracks_generations
            or end_key not in sampler_keys
        ):
            raise RuntimeError(
                "end_streams needs every member to hold one stream in a one-dimensional "
                "tensor storage, with a generation-tracking round-robin writer and a slice "
                f"sampler reading end_key={end_key!r}; member {i} has a "
                f"{type(storage).__name__}(ndim={storage.ndim}), a {type(writer).__name__} "
                f"and a {type(sampler).__name__}."
            )
        assert isinstance(sampler, SliceSampler) and isinstance(writer, RoundRobinWriter)
        size = len(member)
        if not size:
            continue
        traj_key = sampler.traj_key
        if traj_key is not None:
            ids = storage.get_leaf(traj_key)[:size] if traj_key in storage.leaf_keys() else None
            if ids is None or not bool((ids == ids[0]).all()):
                raise RuntimeError(
                    f"end_streams takes a slice sampler with traj_key={traj_key!r} only when "
                    f"every record of a member holds the same trajectory id (a per-stream "
                    f"key); member {i}'s records do not: restarted producers could reuse them."
                )
        slot = torch.tensor([(writer.cursor - 1) % size])
        last = storage.get(slot)
        done = last.get(end_key)
        if done.dtype != torch.bool:
            raise TypeError(
                f"end_streams needs a boolean {end_key!r} entry; member {i} stores {done.dtype}."
            )
        patch = {end_key: torch.ones_like(done)}
        stored = set(last.keys(True, True))
        if truncated is not None and truncated in stored:
            unfinished = ~done
            if terminated is not None and terminated in stored:
                unfinished = unfinished & ~last.get(terminated).to(torch.bool)
            patch[truncated] = last.get(truncated) | unfinished
        plans.append((member, slot, writer.generations_of(slot), patch))
    for member, slot, generation, patch in plans:
        member.update_if_present(index=slot, generation=generation, patch=patch)
