"""The one declaration of the forwarded surface, held against the buffers' public members.

Every public member of the buffer classes a Ray-backed buffer can be built
from is declared with one route (``surface.routes()``):

- CALL (one round trip to the same-named method) and READ (an attribute read
  from the actor), the client's forwarding members written from the declaration;
- CLIENT: implemented by the client itself (requests ahead, slots, local hooks);
- LOCAL: answered in the calling process on purpose (lifecycle, ``lock``,
  ``service_backend``, ``as_remote``);
- REFUSED: ``reader``, ``reading_into``, ``policy_age_filters``, ``share`` and the
  shared-memory export (``export_reason``, ``export_shared``, ``guard_lock``)
  raise NotImplementedError;
- UNSERVED: ``storage``, ``sampler``, ``prioritized_sampler``, ``writer``,
  ``transform``, ``sample_unit`` and ``generator`` raise NotImplementedError (the
  components live in the actor).

A member added to a buffer class fails the first test until it is declared.
The class a Ray-backed buffer takes (``proxy.proxy_class``) overrides every one
of them; the proxy tests drive it with a recording client, no Ray needed.
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
from rbdata.service import RayBufferClient, surface
from rbdata.service.client.buffer_client import OwnerAddress
from rbdata.service.client.proxy import proxy_class, unserved_message
from rbdata.service.server.owner import BufferOwner
from rbdata.service.surface import Route
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
    # Ray adds ``_ray_trace_ctx`` to the methods of a class made an actor in this process
    # (``as_remote`` in test_lifecycle.py, which runs earlier): not a parameter of rbdata's.
    params = inspect.signature(fn).parameters.values()
    return [(p.name, p.kind, p.default) for p in params if p.name != "_ray_trace_ctx"]


def test_every_public_member_of_the_buffers_is_declared_once() -> None:
    declared = surface.routes()
    members = _public_members()
    assert not members - set(declared), f"undeclared members: {sorted(members - set(declared))}"
    assert not set(declared) - members, f"stale declarations: {sorted(set(declared) - members)}"
    by_route = {route: sorted(n for n, r in declared.items() if r is route) for route in Route}
    assert by_route[Route.REFUSED] == [
        "export_reason",
        "export_shared",
        "guard_lock",
        "policy_age_filters",
        "reader",
        "reading_into",
        "share",
    ]
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


class _Service:
    """What a Ray-backed buffer's ``_remote`` offers, with a recording client."""

    def __init__(self) -> None:
        self.driver = _Recorder()
        self.driver._address = OwnerAddress("rbdata-buffer-0", "gcs", "node", None)
        self.driver._prefetch = 0
        self.driver._setup_local()
        self.events: list[str] = []
        self.is_alive = True

    def start(self) -> None:
        self.events.append("start")

    def client(
        self, *, prefetch: int | None = None, write_behind: int = 0, coalesce: int | None = None
    ) -> str:
        return f"a client, prefetch {prefetch}"

    def shutdown(self, timeout: float | None = None) -> None:
        self.events.append(f"shutdown {timeout}")


def _proxied(cls: type) -> Any:
    extra = {"alpha": 0.7, "beta": 0.5} if "Prioritized" in cls.__name__ else {}
    rb = cls(storage=LazyTensorStorage(10), **extra)
    rb._remote, rb._service_backend = _Service(), "ray"
    rb.__class__ = proxy_class(cls)
    return rb


@pytest.mark.parametrize("cls", BUFFER_CLASSES)
def test_the_proxy_class_overrides_every_public_member(cls: type) -> None:
    proxy = proxy_class(cls)
    assert proxy is proxy_class(cls) and proxy.__bases__ == (cls,)
    assert proxy.__name__ == cls.__name__ and type(proxy) is type(cls)  # no metaclass
    members = {n for n in dir(cls) if not n.startswith("_")} | CONTAINER_DUNDERS
    assert {n for n in members if n not in vars(proxy)} == set()
    assert {"__repr__", "__getstate__"} <= set(vars(proxy))


@pytest.mark.parametrize("cls", BUFFER_CLASSES)
def test_each_route_of_the_proxy_goes_where_the_surface_says(cls: type) -> None:
    rb = _proxied(cls)
    client = rb._remote.driver
    assert isinstance(rb, cls)
    for name, route in surface.routes().items():
        if not hasattr(cls, name) or name in ("__iter__", "__len__"):
            continue
        if route is Route.CALL:
            client.calls.clear()
            getattr(rb, name)(*[0] * _required(getattr(cls, name)))
            assert client.calls == [surface._CALLS[name]], name
        elif route in (Route.REFUSED, Route.UNSERVED):
            with pytest.raises(NotImplementedError, match="not available on a Ray-backed buffer"):
                attribute = getattr(rb, name)
                attribute()
    assert rb.lock is client.lock and rb.service_backend == "ray" and rb.is_alive
    assert rb.start() is rb and rb.client(prefetch=2) == "a client, prefetch 2"
    with rb:
        rb.close(2.0)
    assert rb._remote.events == ["start", "shutdown 2.0", "shutdown None"]


def test_the_proxy_reads_and_client_members_go_to_the_client() -> None:
    rb = _proxied(TensorDictReplayBuffer)
    client = rb._remote.driver
    client._cache = {"batch_size": 7}
    client._read = lambda name: {"write_count": 12, "len": 10}[name]  # type: ignore[method-assign]
    assert rb.batch_size == 7 and rb.write_count == 12 and len(rb) == 10
    client._call = lambda name, *a, **k: {"size": 10, "who": name}  # type: ignore[method-assign]
    assert rb.stats() == {"size": 10, "who": "stats"}
    client._call = lambda name, *a, **k: client  # type: ignore[method-assign]
    assert rb.append_transform(lambda x: x) is rb  # the client is the buffer instead


def test_the_components_are_refused_not_the_empty_local_ones() -> None:
    rb = _proxied(TensorDictReplayBuffer)
    members = [n for n in surface.UNSERVED_MEMBERS if hasattr(TensorDictReplayBuffer, n)]
    assert "storage" in members and "prioritized_sampler" not in members  # prioritized only
    for name in members:
        with pytest.raises(NotImplementedError) as raised:
            getattr(rb, name)
        assert str(raised.value) == unserved_message(name)
        assert f"rb.{name}" in str(raised.value) and "rb.client()" in str(raised.value)
    with pytest.raises(TypeError, match="pickle rb.client"):
        pickle.dumps(rb)
    assert TensorDictReplayBuffer.as_remote.__func__ is not None
    assert "service_backend='ray'" in repr(rb)


def _required(fn: Any) -> int:
    """How many positional arguments ``fn`` needs (self excluded)."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    empty = inspect.Parameter.empty
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in params if p.default is empty and p.kind in kinds)
