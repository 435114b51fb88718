"""The registry of service backends: each backend's accepted option keys, checked by the buffers."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rbdata import ReplayBuffer
from rbdata.buffers import backends
from rbdata.service.options import OPTION_KEYS


class Reached(Exception):
    """Raised by the fake backends below: the buffer called ``attach`` with these options."""


def _attach(buffer: Any, hosted: Any, options: Any, *args: Any, **kwargs: Any) -> Any:
    raise Reached(options)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A copy of the registry, put back after the test."""
    copy = dict(backends._BACKENDS)
    monkeypatch.setattr(backends, "_BACKENDS", copy)
    return copy


def test_the_ray_backend_is_registered_with_the_one_declaration_of_its_keys():
    assert backends.backend_option_keys("ray") == OPTION_KEYS
    assert "shards" in OPTION_KEYS and "remote_config" in OPTION_KEYS


def test_a_buffer_refuses_an_unknown_ray_option_before_anything_starts():
    expected = f"service_backend_options accepts {sorted(OPTION_KEYS)}, got ['bogus', 'zzz']."
    with pytest.raises(TypeError, match=re.escape(expected)):
        ReplayBuffer(service_backend="ray", service_backend_options={"zzz": 1, "bogus": 2})


def test_each_backend_gets_its_own_keys_checked(registry):
    backends.register_service_backend("fake", _attach, option_keys=["alpha"])
    backends.register_service_backend("open", _attach)
    assert backends.backend_option_keys("fake") == frozenset({"alpha"})
    assert backends.backend_option_keys("open") is None
    with pytest.raises(TypeError, match=re.escape("accepts ['alpha'], got ['shards'].")):
        ReplayBuffer(service_backend="fake", service_backend_options={"shards": 2})
    with pytest.raises(Reached) as reached:
        ReplayBuffer(service_backend="fake", service_backend_options={"alpha": 1})
    assert reached.value.args == ({"alpha": 1},)
    with pytest.raises(Reached) as reached:  # None: the backend checks its options alone
        ReplayBuffer(service_backend="open", service_backend_options={"anything": 1})
    assert reached.value.args == ({"anything": 1},)


@pytest.mark.parametrize("keys", ["shards", 3, ["a", 1], [("a",)]])
def test_bad_option_keys_are_refused_and_nothing_is_registered(registry, keys):
    before = dict(registry)
    with pytest.raises(TypeError, match="option_keys must be an iterable of str or None"):
        backends.register_service_backend("fake", _attach, option_keys=keys)
    assert registry == before


def test_an_unregistered_backend_has_no_keys():
    with pytest.raises(ValueError, match="service_backend='grpc' is not registered"):
        backends.backend_option_keys("grpc")


def _client_factory(
    cls: type, hosted: Any, options: Any, transport: Any, transport_options: Any, **kwargs: Any
) -> Any:
    """A backend factory: an instance of a subclass of ``cls`` forwarding to ``hosted``."""

    class Client(cls):  # type: ignore[misc, valid-type]
        inits: list[dict[str, Any]] = []

        def __init__(self, **caller_args: Any) -> None:
            Client.inits.append(caller_args)  # Python calls it: it changes nothing

        def __len__(self) -> int:
            return len(hosted)

    client = object.__new__(Client)
    client.factory_args = kwargs
    return client


def test_the_backend_factory_builds_the_object_and_no_class_is_swapped(registry):
    from rbdata import LazyTensorStorage, TensorDictReplayBuffer

    backends.register_service_backend("factory", _client_factory)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(4), priority_key="err", prefetch=3, service_backend="factory"
    )
    assert isinstance(rb, TensorDictReplayBuffer) and type(rb).__name__ == "Client"
    assert type(rb).__bases__ == (TensorDictReplayBuffer,)
    assert [sorted(args) for args in type(rb).inits] == [  # once, with the caller's arguments
        ["prefetch", "priority_key", "service_backend", "storage"]
    ]
    assert rb.factory_args == {"prefetch": 3, "delayed_init": False}  # its clients prefetch
    assert rb.priority_key == "err" and len(rb) == 0  # the hosted buffer's settings


def test_the_hosted_buffer_is_direct_and_unbuilt(registry):
    from rbdata import LazyTensorStorage

    seen = {}

    def factory(cls: type, hosted: Any, *args: Any, **kwargs: Any) -> Any:
        seen.update(hosted=hosted, kwargs=kwargs)
        raise Reached(args)

    backends.register_service_backend("factory", factory)
    with pytest.raises(Reached):
        ReplayBuffer(storage=LazyTensorStorage(4), prefetch=2, service_backend="factory")
    hosted = seen["hosted"]
    assert type(hosted) is ReplayBuffer and hosted.service_backend == "direct"
    assert not hosted.initialized and seen["kwargs"] == {"prefetch": 2, "delayed_init": False}
    with pytest.raises(ValueError, match="prefetch"):  # checked as for a direct buffer
        ReplayBuffer(storage=LazyTensorStorage(4), prefetch=-1, service_backend="factory")
