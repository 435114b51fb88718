"""The one declaration of the forwarded surface, held against the buffers' public members.

Every public member of the buffer classes a Ray-backed buffer can be built
from is declared with one route (``surface.routes()``):

- CALL (one round trip to the same-named method) and READ (an attribute read
  from the actor), the client's forwarding members written from the declaration;
- CLIENT: implemented by the client itself (requests ahead, slots, local hooks);
- LOCAL: answered in the calling process on purpose (lifecycle, ``lock``,
  ``service_backend``, ``as_remote``);
- REFUSED: ``reader``, ``reading_into``, ``policy_age_filters`` and ``share``
  raise NotImplementedError;
- UNSERVED: ``storage``, ``sampler``, ``prioritized_sampler``, ``writer``,
  ``transform``, ``sample_unit`` and ``generator`` are still the calling
  process's own components (properties: the buffer-side dispatch will forward
  or refuse them).

A member added to a buffer class fails the first test until it is declared.
"""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest
import torch

from rbdata import (
    LazyTensorStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata.buffers.protocol import ServableBuffer
from rbdata.service import RayBufferClient
from rbdata.service.client import surface
from rbdata.service.client.surface import Route
from rbdata.service.server.owner import BufferOwner
from rbdata.service.transport.codec import encode

BUFFER_CLASSES = (
    ReplayBuffer,
    TensorDictReplayBuffer,
    PrioritizedReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
)
CONTAINER_DUNDERS = {"__len__", "__getitem__", "__setitem__", "__iter__", "__enter__", "__exit__"}


def _public_members() -> set[str]:
    names = {n for cls in BUFFER_CLASSES for n in dir(cls) if not n.startswith("_")}
    return names | CONTAINER_DUNDERS


def _defining_class(name: str) -> type:
    """The most basic buffer class that has ``name`` (its signature is the reference)."""
    return next(cls for cls in BUFFER_CLASSES if hasattr(cls, name))


def _parameters(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_every_public_member_of_the_buffers_is_declared_once() -> None:
    declared = surface.routes()
    members = _public_members()
    assert not members - set(declared), f"undeclared members: {sorted(members - set(declared))}"
    assert not set(declared) - members, f"stale declarations: {sorted(set(declared) - members)}"
    by_route = {route: sorted(n for n, r in declared.items() if r is route) for route in Route}
    assert by_route[Route.REFUSED] == ["policy_age_filters", "reader", "reading_into", "share"]
    assert by_route[Route.UNSERVED] == [
        "generator",
        "prioritized_sampler",
        "sample_unit",
        "sampler",
        "storage",
        "transform",
        "writer",
    ]
    assert by_route[Route.READ] == [
        "batch_size",
        "dim_extend",
        "initialized",
        "prioritized",
        "write_count",
    ]


def test_the_clients_members_take_the_buffers_arguments() -> None:
    for name, route in surface.routes().items():
        if route not in (Route.CALL, Route.CLIENT) or name == "__iter__":
            continue
        ours, theirs = getattr(RayBufferClient, name), getattr(_defining_class(name), name)
        assert _parameters(ours) == _parameters(theirs), name


def test_forwarded_methods_and_the_owners_tables_derive_from_the_declaration() -> None:
    routes = surface.routes()
    forwarded = [n for n, r in routes.items() if r in (Route.CALL, Route.CLIENT)]
    assert set(surface.FORWARDED_METHODS) == {n for n in forwarded if not n.startswith("_")}
    assert all(callable(getattr(RayBufferClient, n)) for n in surface.FORWARDED_METHODS)
    hosted = TensorDictReplayBuffer  # the richest surface
    assert all(callable(getattr(hosted, n)) for n in surface.OWNER_CALLS)
    reads = [n for n, r in routes.items() if r is Route.READ]
    assert {*reads, "len", "filters_rows"} == surface.OWNER_READS


def test_the_servable_protocol_lies_inside_the_served_surface() -> None:
    members = {n for n in vars(ServableBuffer) if not n.startswith("_") or n == "__len__"}
    members |= set(ServableBuffer.__annotations__)
    routes = surface.routes()
    served = (Route.CALL, Route.READ, Route.CLIENT, Route.LOCAL)
    assert {n: routes.get(n) for n in members if routes.get(n) not in served} == {}


class _Recorder(RayBufferClient):
    """A client whose round trips are recorded, not sent."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(name)
        return None


@pytest.mark.parametrize(("alias", "target"), [("dump", "dumps"), ("save", "dumps")])
def test_each_forwarded_stub_runs_its_target(alias: str, target: str) -> None:
    client = _Recorder()
    getattr(client, alias)("/tmp/x")
    client.load("/tmp/x", allow_pickle=True)
    client.extend(torch.zeros(2))
    assert client.calls == [target, "loads", "extend"]


def test_the_owner_refuses_names_the_surface_does_not_declare() -> None:
    owner = BufferOwner()
    owner.build(pickle.dumps(ReplayBuffer(storage=LazyTensorStorage(10))), True, node=False)
    owner.call("extend", encode((torch.arange(4),)), encode({}))
    for name in ("shutdown", "_init", "reader", "storage"):
        with pytest.raises(ValueError, match=f"runs only the forwarded methods.*got '{name}'"):
            owner.call(name, encode(()), encode({}))
    with pytest.raises(ValueError, match="reads only .* got 'storage'"):
        owner.read("storage")
    assert owner.read("write_count") == 4 and owner.read("len") == 4
