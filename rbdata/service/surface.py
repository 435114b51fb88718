"""The forwarded surface: how each public member of a replay buffer reaches a Ray-hosted one.

This module is the one declaration of it; everything else derives from it:

- :class:`ForwardedMethods` holds the members that are one round trip each:
  typed stubs whose bodies :func:`forwarded` writes (a call of the hosted
  buffer's method of that name), and the attributes read from the actor
  (:class:`RemoteAttribute`). :class:`~rbdata.service.RayBufferClient` inherits them.
- :data:`CLIENT_MEMBERS`: what the client implements itself (requests kept in
  flight, shared-memory slots, hooks that stay in the calling process).
- :data:`FORWARDED_METHODS`: the methods a Ray-backed buffer binds to its client.
- :data:`OWNER_CALLS` and :data:`OWNER_READS`: the owner's dispatch tables
  (it refuses any other name); :data:`WRITE_CALLS`: the forwarded calls whose
  arguments may travel in a write slot.
- :data:`LOCAL_MEMBERS`, :data:`REFUSED_MEMBERS`, :data:`UNSERVED_MEMBERS`:
  the public members that are not forwarded, and why.
- :func:`~rbdata.service.client.proxy.proxy_class` builds from :func:`routes` the
  class a Ray-backed buffer takes.

Both sides import it (``server/`` never imports ``client/``).
``tests/service/test_surface.py`` holds the declaration equal to the
public members of the buffer classes.
"""

# The stubs below have no bodies: @forwarded supplies them.
# mypy: disable-error-code="empty-body"

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, overload

import torch
from tensordict import TensorDictBase

from rbdata.buffers._conditional_update import ConditionalUpdateResult
from rbdata.storages import Storage

__all__ = [
    "CLIENT_MEMBERS",
    "FORWARDED_METHODS",
    "LOCAL_MEMBERS",
    "OWNER_CALLS",
    "OWNER_READS",
    "REFUSED_MEMBERS",
    "UNSERVED_MEMBERS",
    "WRITE_CALLS",
    "ForwardedMethods",
    "RemoteAttribute",
    "Route",
    "forwarded",
    "routes",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_CALLS: dict[str, str] = {}  # forwarded member -> the hosted-buffer method it calls
_READS: list[str] = []  # attributes read from the actor, in declaration order


class Route(enum.Enum):
    """How a public member of a Ray-backed buffer is answered."""

    CALL = "one round trip: the hosted buffer's method of that name"
    READ = "one round trip: the hosted buffer's attribute of that name"
    CLIENT = "the client's own protocol (requests ahead, slots, hooks kept in this process)"
    LOCAL = "answered in the calling process, on purpose"
    REFUSED = "raises NotImplementedError on a Ray-backed buffer"
    UNSERVED = "raises NotImplementedError: the component lives in the actor"


def forwarded(stub: F) -> F:
    """Make ``stub`` (a typed signature with a docstring) a call of the hosted buffer's method.

    Examples:
        >>> class Echo:
        ...     def _call(self, name, *args, **kwargs):
        ...         return name, args, kwargs
        ...     @forwarded
        ...     def add(self, data: int) -> int:
        ...         "Add one element."
        >>> Echo().add(3)
        ('add', (3,), {})
    """
    return _forwarding(stub, stub.__name__)


def forwarded_as(target: str) -> Callable[[F], F]:
    """Like :func:`forwarded`, for an alias: the call runs the hosted buffer's ``target``."""
    return lambda stub: _forwarding(stub, target)


def _forwarding(stub: F, target: str) -> F:
    _CALLS[stub.__name__] = target

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._call(target, *args, **kwargs)

    functools.update_wrapper(forward, stub)  # name, docstring and signature of the stub
    return forward  # type: ignore[return-value]


class RemoteAttribute(Generic[T]):
    """An attribute of the hosted buffer, read from the actor (once, with ``cached``).

    Args:
        convert: turns the value read into the attribute's type.
        doc: the attribute's docstring.
        cached: read once per client (the value never changes).
    """

    def __init__(self, convert: Callable[[Any], T], doc: str, *, cached: bool = False) -> None:
        self._convert = convert
        self._cached = cached
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        _READS.append(name)

    @overload
    def __get__(self, obj: None, owner: type) -> RemoteAttribute[T]: ...
    @overload
    def __get__(self, obj: ForwardedMethods, owner: type) -> T: ...
    def __get__(self, obj: ForwardedMethods | None, owner: type) -> RemoteAttribute[T] | T:
        if obj is None:
            return self
        return self._convert(obj.read_hosted(self.name, cached=self._cached))


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


class ForwardedMethods:
    """The members a client answers with one round trip each (mixed into the client)."""

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError  # the client provides it

    def _read(self, name: str) -> Any:
        raise NotImplementedError  # the client provides it

    def _cached(self, name: str) -> Any:
        raise NotImplementedError  # the client provides it

    def read_hosted(self, name: str, *, cached: bool = False) -> Any:
        """The hosted buffer's attribute ``name``, read once per client with ``cached``."""
        return self._cached(name) if cached else self._read(name)

    # ----------------------------------------------------------- attributes
    batch_size = RemoteAttribute(
        _int_or_none, "The hosted buffer's default batch size.", cached=True
    )
    write_count = RemoteAttribute(int, "Items written so far through add and extend.")
    dim_extend = RemoteAttribute(int, "The dimension ``extend`` iterates over.")
    initialized = RemoteAttribute(bool, "Whether the hosted buffer's components are built.")
    prioritized = RemoteAttribute(
        bool, "Whether priority updates change what the hosted buffer draws.", cached=True
    )

    # -------------------------------------------------------------- writing
    @forwarded
    def add(self, data: Any) -> int:
        """Add one element; return the index where it lives."""

    @forwarded
    def extend(self, data: Any, *, update_priority: bool | None = None) -> torch.Tensor:
        """Extend the buffer with a batch of elements; return their indices."""

    @forwarded
    def __setitem__(self, index: Any, data: Any) -> None: ...

    @forwarded
    def write_all(self, data: Any, end: int | None = None) -> None:
        """Write ``data`` back to storage in physical order (``rb[:end] = data``)."""

    @forwarded
    def empty(self, empty_write_count: bool = True) -> None:
        """Empty the buffer and reset the cursor to 0."""

    # -------------------------------------------------------------- reading
    @forwarded
    def __getitem__(self, index: Any) -> Any: ...

    @forwarded
    def next(self) -> Any:
        """The next batch of the hosted buffer's iterator (None when a pass ends)."""

    @forwarded
    def can_sample(self, batch_size: int | None = None) -> bool:
        """Whether the hosted buffer can serve a batch of ``batch_size`` (its default if None)."""

    @forwarded
    def read_all_in_order(self, end: int | None = None) -> Any:
        """Read storage contents in physical order (``rb[:end]``)."""

    @forwarded
    def query(
        self, predicate: Callable[..., bool] | None = None, *, trajectory_key: Any = None
    ) -> list[Any]:
        """The stored trajectories matching ``predicate`` (the predicate runs in the actor)."""

    # -------------------------------------------------------------- updates
    @forwarded
    def update_priority(
        self,
        index: torch.Tensor | tuple[torch.Tensor, ...] | int,
        priority: torch.Tensor | float,
        *,
        generation: torch.Tensor | None = None,
    ) -> None:
        """Update priorities of ``index`` (skipping slots rewritten since ``generation``)."""

    @forwarded
    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update priorities from a sampled batch (``index``, priority key, generations)."""

    @forwarded
    def update_if_present(
        self,
        *,
        index: torch.Tensor,
        generation: torch.Tensor,
        patch: Mapping[Any, torch.Tensor] | TensorDictBase,
        version_key: Any = None,
        version: int | torch.Tensor | None = None,
        require_newer: bool = False,
    ) -> ConditionalUpdateResult:
        """Patch the records whose (index, generation) is still live."""

    @forwarded
    def update_(
        self,
        input_dict_or_td: Mapping[Any, torch.Tensor] | TensorDictBase,
        clone: bool = False,
        *,
        keys_to_update: Any = None,
    ) -> Any:
        """Update stored entries in place from a dict or TensorDict covering the buffer."""

    @forwarded
    def set_(self, key: Any, value: torch.Tensor) -> Any:
        """Set the value of ``key`` across the whole buffer in place."""

    @forwarded
    def set_at_(self, key: Any, value: torch.Tensor, index: Any) -> Any:
        """Set the value of ``key`` at ``index`` in place."""

    @forwarded
    def publish_policy_version(self, version: int) -> None:
        """Make ``version`` the live version of every PolicyAgeFilter of the hosted buffer."""

    # ------------------------------------------------------- state and disk
    @forwarded
    def state_dict(self) -> dict[str, Any]:
        """The hosted buffer's full state (content included)."""

    @forwarded
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (validated first; unchanged on error)."""

    @forwarded
    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save the hosted buffer in ``path`` (a path on the actor's node)."""

    @forwarded
    def loads(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Load a dump at ``path`` (a path on the actor's node) into the hosted buffer."""

    @forwarded_as("dumps")
    def dump(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""

    @forwarded_as("dumps")
    def save(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""

    @forwarded_as("loads")
    def load(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Alias for :meth:`loads`."""

    # ----------------------------------------------------------- components
    @forwarded
    def append_transform(self, transform: Any, *, invert: bool = False) -> Any:
        """Append a transform to the hosted buffer's chain."""

    @forwarded
    def insert_transform(self, index: int, transform: Any, *, invert: bool = False) -> Any:
        """Insert a transform at ``index`` of the hosted buffer's chain."""

    @forwarded
    def set_storage(self, storage: Storage, collate_fn: Callable[[Any], Any] | None = None) -> Any:
        """Set a new storage in the hosted buffer; return (a copy of) the previous one."""

    @forwarded
    def set_sampler(self, sampler: Any) -> Any:
        """Set a new sampler in the hosted buffer; return (a copy of) the previous one."""

    @forwarded
    def set_writer(self, writer: Any) -> Any:
        """Set a new writer in the hosted buffer; return (a copy of) the previous one."""

    @forwarded
    def set_rng(self, generator: torch.Generator | None) -> None:
        """Use ``generator`` (a copy of it, in the actor) for sampling from now on."""

    @forwarded
    def register_save_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a storage save hook in the hosted buffer."""

    @forwarded
    def register_load_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a storage load hook in the hosted buffer."""


#: Members the client implements itself -> the hosted-buffer method it runs through the
#: owner's ``call`` (None: an owner method of its own, or nothing in the actor).
CLIENT_MEMBERS: dict[str, str | None] = {
    "sample": "sample",  # requests ahead and slots (owner.sample_many); one call when distributed
    "draw": None,  # owner.draw_gather: the batch comes with the draw
    "gather": None,  # the batch received with the draw, else owner.gather
    "refilter": None,  # owner.refilter, with only the entries the filters read
    "stats": "stats",  # with this client's stats sources merged in
    "register_stats_source": None,  # the source runs in the calling process
    "sampling_state": "sampling_state",  # with the draws made ahead
    "load_sampling_state": "load_sampling_state",
    "wait_for_data": None,  # owner.wait_for_write, in the actor's wait group
    "notify_waiters": None,  # wakes this process's waiting threads
    "update_batch_priority": "update_batch_priority",  # only the index entries travel
    "__len__": None,  # owner.read("len")
    "__iter__": None,  # batches of next()
}

#: Public members answered in the calling process, on purpose -> why.
LOCAL_MEMBERS: dict[str, str] = {
    "service_backend": "the calling buffer's own setting",
    "lock": "the client's lock: in the actor, the hosted buffer's own lock guards its state",
    "is_alive": "the service asks Ray whether the actor lives",
    "start": "lifecycle: only the buffer that started the actor controls it",
    "shutdown": "lifecycle",
    "close": "lifecycle",
    "client": "lifecycle: a new picklable client",
    "as_remote": "a class method: a plain Ray actor class, not this service",
    "__enter__": "lifecycle",
    "__exit__": "lifecycle",
}

#: Public methods a Ray-backed buffer refuses -> the error's message.
REFUSED_MEMBERS: dict[str, str] = {
    **{
        name: (
            f"{name}() is not available on a Ray-backed buffer (service_backend='ray'): the "
            "actor exports its buffer to the clients on its node itself (same_node_maps)."
        )
        for name in ("export_reason", "export_shared", "guard_lock")
    },
    "reader": (
        "reader() is not available on a Ray-backed buffer (service_backend='ray'): the reader's "
        "sampler would run in this process, over an empty local storage. Build the reader on a "
        "direct buffer, or sample through rb.client()."
    ),
    "reading_into": (
        "reading_into() is not available on a Ray-backed buffer (service_backend='ray'): it "
        "directs reads of the buffer in this process; the actor fills its slots with it."
    ),
    "policy_age_filters": (
        "policy_age_filters() is not available on a Ray-backed buffer (service_backend='ray'): "
        "the filters live in the actor; set their version with publish_policy_version()."
    ),
    "share": (
        "share() is not available on a Ray-backed buffer (service_backend='ray'): the buffer "
        "lives in its actor, which every process reaches through rb.client(); share() puts a "
        "direct buffer in shared memory for torch.multiprocessing children."
    ),
}

#: Public properties a Ray-backed buffer refuses (the components live in the actor; this
#: process's own are empty) -> what they are (see :func:`~rbdata.service.client.proxy.proxy_class`).
UNSERVED_MEMBERS: dict[str, str] = {
    "storage": "the storage",
    "sampler": "the sampler",
    "writer": "the writer",
    "transform": "the sample-path transforms",
    "sample_unit": "the sample unit",
    "generator": "the sampling generator",
    "prioritized_sampler": "the prioritized sampler (torchrl's sync=False name for it)",
}

#: The methods a Ray-backed buffer binds to its client (forwarded ones and the client's own).
FORWARDED_METHODS: tuple[str, ...] = tuple(
    name for name in (*_CALLS, *CLIENT_MEMBERS) if not name.startswith("_")
)

#: The hosted-buffer methods the owner's ``call`` runs (any other name is refused).
OWNER_CALLS: frozenset[str] = frozenset(_CALLS.values()) | frozenset(
    target for target in CLIENT_MEMBERS.values() if target is not None
)

#: The hosted-buffer attributes the owner's ``read`` returns (``len``: ``len(buffer)``;
#: ``filters_rows``: whether its transforms drop rows, for ``refilter``).
OWNER_READS: frozenset[str] = frozenset({*_READS, "len", "filters_rows"})


#: The forwarded calls whose arguments may travel in a write slot
#: (:mod:`rbdata.service.client.write_slots`, :mod:`rbdata.service.server.write_slots`).
WRITE_CALLS: frozenset[str] = frozenset({"extend", "add"})


def routes() -> dict[str, Route]:
    """Every declared member and its route.

    Examples:
        >>> routes()["extend"], routes()["sample"], routes()["storage"]
        (<Route.CALL: ...>, <Route.CLIENT: ...>, <Route.UNSERVED: ...>)
    """
    out = dict.fromkeys(_CALLS, Route.CALL)
    out.update(dict.fromkeys(_READS, Route.READ))
    out.update(dict.fromkeys(CLIENT_MEMBERS, Route.CLIENT))
    out.update(dict.fromkeys(LOCAL_MEMBERS, Route.LOCAL))
    out.update(dict.fromkeys(REFUSED_MEMBERS, Route.REFUSED))
    out.update(dict.fromkeys(UNSERVED_MEMBERS, Route.UNSERVED))
    return out
