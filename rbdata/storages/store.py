"""StoreStorage: items kept in a Redis-compatible key-value server (torchrl's name).

The rows live in the server through tensordict's ``TensorDictStore`` (one key
per leaf, rows addressed by index), so the data outlives the process and any
process that can reach the server can read it. Needs the ``store`` extra (the
``redis`` client) and a running server.
"""

from __future__ import annotations

import importlib.util
import uuid
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, is_tensorclass

from rbdata._component.checks import check_int

from ._base import Index, Storage, _as_index, _get_index, _set_index

__all__ = ["StoreStorage"]

_TENSOR = "_tensor"  # the key a storage of plain tensors keeps them under


class StoreStorage(Storage):
    """A storage whose items live in a Redis-compatible server (Redis, Dragonfly, KeyDB, ...).

    Items are TensorDicts, tensorclasses or plain tensors, all of the structure
    of the first write (the server keeps one key per leaf, laid out at the first
    write). ``get`` returns a TensorDict batch (a tensor for a storage of plain
    tensors). ``state_dict()`` holds the server's address and the store's id,
    not the rows: loading it reconnects to the same rows, as torchrl's.

    Args:
        max_size: number of slots.

    Keyword Args:
        backend: the server kind (``"redis"``, ``"dragonfly"``, ``"keydb"``, ...).
        host: the server's host name. Defaults to ``"localhost"``.
        port: the server's port. Defaults to 6379.
        db: the database number. Defaults to 0.
        compilable: accepted for torchrl compatibility (records the choice).
        **store_kwargs: passed on to ``tensordict.store.TensorDictStore``.

    Raises:
        ImportError: if the ``redis`` client is not installed (the ``store`` extra).
        TypeError / ValueError: for arguments of the wrong type / value.

    Example (it needs a server; ``tests/storages/test_store.py`` starts one)::

        from rbdata import ReplayBuffer, StoreStorage

        storage = StoreStorage(1000, host="127.0.0.1", port=6379)
        rb = ReplayBuffer(storage=storage, batch_size=32)
        rb.extend(TensorDict({"obs": torch.randn(10, 4)}, [10]))
        assert rb.sample()["obs"].shape == (32, 4)
    """

    def __init__(
        self,
        max_size: int,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        compilable: bool = False,
        **store_kwargs: Any,
    ) -> None:
        if importlib.util.find_spec("redis") is None:
            raise ImportError("StoreStorage needs the 'redis' client: pip install 'rbdata[store]'.")
        super().__init__(max_size, compilable=compilable)
        for name, value in (("backend", backend), ("host", host)):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, got {type(value).__name__}.")
        self._backend = backend
        self._host = host
        self._port = check_int(port, "port", minimum=1)
        self._db = check_int(db, "db", minimum=0)
        self._store_kwargs = dict(store_kwargs)
        self._store: Any = None
        self._td_id: str | None = None  # the store's id in the server (set when laid out)
        self._is_tensor = False
        self._tensorclass: type | None = None

    @property
    def initialized(self) -> bool:
        """Whether the store was laid out (at the first write, or by ``load_state_dict``)."""
        return self._store is not None

    # -------------------------------------------------------------- writes
    def _set(self, index: Index, data: Any) -> int:
        slots, stop = _set_index(index, self._len, self.max_size)
        if isinstance(slots, int):
            positions = torch.tensor([slots])
            batch = self._as_rows(data, one=True)
        else:
            if isinstance(slots, torch.Tensor):
                positions = slots
            elif isinstance(slots, tuple):
                positions = torch.cat([torch.arange(r.start, r.stop) for r in slots])
            else:
                positions = torch.arange(slots.start, slots.stop)
            batch = self._as_rows(data, one=False)
            if batch.shape[0] != positions.numel():
                raise ValueError(
                    f"index selects {positions.numel()} item(s) but data holds {batch.shape[0]}."
                )
        if self._store is None:
            self._lay_out()
        self._store[positions] = batch
        return stop

    def _as_rows(self, data: Any, *, one: bool) -> TensorDictBase:
        """``data`` as a TensorDict of rows (a batch of one for ``one``); TypeError if unfit."""
        if isinstance(data, list) and not one:
            data = (
                torch.stack(data)
                if all(isinstance(d, torch.Tensor) for d in data)
                else (torch.stack([self._as_rows(d, one=True)[0] for d in data]))
            )
        if is_tensorclass(data):
            kind: type | None = type(data)
            data = data.to_tensordict()
        else:
            kind = None
        if isinstance(data, TensorDictBase):
            is_tensor = False
            rows = data.unsqueeze(0) if one else data
        elif isinstance(data, torch.Tensor):
            is_tensor = True
            tensor = data.unsqueeze(0) if one else data
            if tensor.ndim == 0:
                raise ValueError("a batch of tensors needs a leading items dim, got a 0-d tensor.")
            rows = TensorDict({_TENSOR: tensor}, batch_size=tensor.shape[:1])
        else:
            raise TypeError(
                f"StoreStorage holds TensorDicts, tensorclasses or tensors, got "
                f"{type(data).__name__}."
            )
        if self._store is not None and (is_tensor, kind) != (self._is_tensor, self._tensorclass):
            raise TypeError(f"StoreStorage holds {self._kind()}: got {type(data).__name__} data.")
        if self._store is None:
            self._is_tensor, self._tensorclass = is_tensor, kind
        if rows.batch_dims == 0:
            raise ValueError("a batch needs a leading items dim.")
        return rows

    def _kind(self) -> str:
        if self._is_tensor:
            return "tensors"
        return "TensorDicts" if self._tensorclass is None else self._tensorclass.__name__

    def _lay_out(self, td_id: str | None = None) -> None:
        from tensordict.store import TensorDictStore

        where: dict[str, Any] = {
            "backend": self._backend,
            "host": self._host,
            "port": self._port,
            "db": self._db,
        }
        if td_id is None:
            td_id = str(uuid.uuid4())
            self._store = TensorDictStore(
                batch_size=[self.max_size], td_id=td_id, **where, **self._store_kwargs
            )
        else:
            self._store = TensorDictStore.from_store(td_id=td_id, **where, **self._store_kwargs)
        self._td_id = td_id

    # -------------------------------------------------------------- reads
    def _get(self, index: Index) -> Any:
        if self._store is None:
            raise RuntimeError("Cannot get elements out of a non-initialized storage.")
        index = _as_index(index)
        if isinstance(index, slice):
            slots: int | range | torch.Tensor = range(*index.indices(self._len))
        else:
            slots = _get_index(index, self._len)
        if isinstance(slots, range):
            slots = torch.arange(slots.start, slots.stop, slots.step, dtype=torch.long)
        if isinstance(slots, int):
            rows = self._store[slots]
        else:
            rows = self._store[slots.reshape(-1)].reshape(slots.shape)
        if self._is_tensor:
            return rows[_TENSOR]
        if self._tensorclass is not None:
            return self._tensorclass.from_tensordict(rows)  # type: ignore[attr-defined]
        return rows.to_tensordict()

    # -------------------------------------------------------------- state
    def _empty(self) -> None:
        """The rows stay in the server (overwritten by later writes); the length goes to 0."""

    def state_dict(self) -> dict[str, Any]:
        """The server's address and the store's id (torchrl's keys), not the rows."""
        return {
            "initialized": self.initialized,
            "_len": self._len,
            "_backend": self._backend,
            "_host": self._host,
            "_port": self._port,
            "_db": self._db,
            "_td_id": self._td_id,
            "_is_tensor": self._is_tensor,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Reconnect to the rows :meth:`state_dict` names; ValueError (unchanged) if unfit."""
        length = state_dict.get("_len")
        if type(length) is not int or not 0 <= length <= self.max_size:
            raise ValueError(
                f"saved StoreStorage state has _len={length!r}; expected an int in "
                f"[0, {self.max_size}]."
            )
        td_id = state_dict.get("_td_id")
        if length and td_id is None:
            raise ValueError("saved StoreStorage state holds items but no _td_id to find them.")
        self._backend = str(state_dict.get("_backend", self._backend))
        self._host = str(state_dict.get("_host", self._host))
        self._port = check_int(state_dict.get("_port", self._port), "_port", minimum=1)
        self._db = check_int(state_dict.get("_db", self._db), "_db", minimum=0)
        self._is_tensor = bool(state_dict.get("_is_tensor", False))
        self._store, self._td_id = None, None
        if td_id is not None:
            self._lay_out(str(td_id))
        self._len = length
        self._note_mutation()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, "
            f"backend={self._backend!r}, host={self._host!r}, port={self._port})"
        )
