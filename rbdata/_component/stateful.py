"""The one state protocol every rbdata component follows, and transactions built on it.

Storages, samplers, writers, transforms, sample units and buffers all implement
:class:`Stateful`; :func:`transaction` uses it to roll a multi-step change back
when it fails half-way, so that a call that raised leaves no component changed.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["Stateful", "load_members_state", "members_state", "transaction"]


@runtime_checkable
class Stateful(Protocol):
    """Something whose state can be saved and restored.

    ``state_dict()`` returns plain Python containers and tensors only (never
    arbitrary objects), so that it can be saved with ``torch.save`` and loaded
    with ``torch.load(weights_only=True)``. ``load_state_dict`` must tolerate
    keys it does not know (fields added by later versions) and keys that are
    missing (fields that did not exist yet), keeping its defaults for those.

    Examples:
        >>> from rbdata import LazyTensorStorage, RandomSampler, RoundRobinWriter
        >>> all(isinstance(c, Stateful) for c in (LazyTensorStorage(4), RandomSampler(),
        ...                                        RoundRobinWriter()))
        True
    """

    def state_dict(self) -> dict[str, Any]:
        """Return the component's state."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the component's state from :meth:`state_dict`'s output."""


def _snapshot(component: Stateful) -> dict[str, Any]:
    """A state of ``component`` that later changes to the component cannot alter."""
    state = component.state_dict()
    return copy.deepcopy(state) if _aliases_tensors(state) else state


def _aliases_tensors(state: Any) -> bool:
    if isinstance(state, torch.Tensor):
        return True
    if isinstance(state, dict):
        return any(_aliases_tensors(v) for v in state.values())
    if isinstance(state, list | tuple):
        return any(_aliases_tensors(v) for v in state)
    return False


@contextlib.contextmanager
def transaction(*components: Stateful) -> Iterator[None]:
    """Validate, apply, roll back on error: restore ``components`` if the block raises.

    The state of each component is copied on entry (tensors cloned, so that
    the copy never aliases live state); if the block raises, every component
    gets its copy back and the exception propagates.

    Examples:
        >>> import torch
        >>> from rbdata import RandomSampler
        >>> sampler = RandomSampler()
        >>> sampler.set_consume_after_n(2)
        >>> try:
        ...     with transaction(sampler):
        ...         sampler.set_consume_after_n(None)
        ...         raise ValueError("bad input")
        ... except ValueError:
        ...     pass
        >>> sampler.consume_after_n
        2
    """
    saved = [_snapshot(component) for component in components]
    try:
        yield
    except BaseException:  # also KeyboardInterrupt: never leave a half-applied change behind
        for component, state in zip(components, saved, strict=True):
            component.load_state_dict(state)
        raise


def members_state(members: Sequence[Stateful]) -> dict[str, Any]:
    """The state of an ensemble's members, ``{"0": member 0's state_dict, ...}``.

    Examples:
        >>> from rbdata import RandomSampler
        >>> sorted(members_state([RandomSampler(), RandomSampler()]))
        ['0', '1']
    """
    return {str(i): member.state_dict() for i, member in enumerate(members)}


def load_members_state(
    members: Sequence[Stateful], state_dict: dict[str, Any], *, strict: bool
) -> None:
    """Load each member's state from ``state_dict[str(i)]`` (see :func:`members_state`).

    Args:
        members: the ensemble's members, in order.
        state_dict: what :func:`members_state` returned.
        strict: raise for a member whose state is missing (else that member keeps its own).

    Raises:
        KeyError: with ``strict``, naming the members whose states are missing; no member
            is changed then.
    """
    if strict:
        missing = [str(i) for i in range(len(members)) if str(i) not in state_dict]
        if missing:
            raise KeyError(f"state_dict lacks the states of members {missing}.")
    for i, member in enumerate(members):
        if str(i) in state_dict:
            member.load_state_dict(state_dict[str(i)])
