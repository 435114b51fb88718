"""Self-healing owners: periodic checkpoints, restart from the last one, deduplicated writes.

A :class:`RecoveringOwner` checkpoints its buffer with ``dumps`` (atomic:
a checkpoint is complete or absent) every ``every_writes`` writes or, at the
first write after ``every_seconds`` seconds, into ``directory``. Ray restarts
the actor when its process dies (``max_restarts``) by running its constructor
again, with the arguments it was first given: the hosted buffer's pickle
among them (Ray keeps it; nothing pickled is ever read from ``directory``).
The constructor rebuilds the buffer from it and loads the last checkpoint.

``directory`` holds only JSON (``owner.json``: the buffer was built;
``checkpoint.json``: which checkpoint counts) and ``dumps`` directories,
loaded without unpickling anything. It is made with mode 0700, or used only
if nobody but the user and root can plant files in it
(:mod:`rbdata._trust`).

Every mutating call of a recovering client carries the client's id and a
sequence number. The owner applies each (client, sequence) once, and tells
the client, with each reply, the last of its sequence numbers that a
checkpoint holds: the client keeps the calls after it (its replay log) and,
when the owner was restarted, sends again those the restored owner has not
applied (:mod:`rbdata.service.client.retry`). The applied numbers are part of
the checkpoint, so a write is in the restored buffer exactly once.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rbdata._trust import check_trusted_dir, private_dir
from rbdata.service.server.owner import BufferOwner
from rbdata.service.transport.codec import Payload, encode

__all__ = ["LOGGED_CALLS", "RecoveringOwner", "RecoveryConfig"]

logger = logging.getLogger(__name__)

#: the calls a recovering client sends with a sequence number and keeps until checkpointed
LOGGED_CALLS = frozenset({"add", "extend", "update_priority", "update_tensordict_priority"})
_BUILT = "owner.json"
_POINTER = "checkpoint.json"
_CHECKPOINT = re.compile(r"ckpt-\d{8}")


@dataclass(frozen=True)
class RecoveryConfig:
    """How a Ray-backed buffer checkpoints itself and how its clients retry.

    Args:
        directory: where the owner keeps its checkpoints (a path the actor's node sees;
            on a restart on another node, a shared filesystem). Made with mode 0700;
            refused if another user owns it or can write it (or one of its parents).
        every_writes: checkpoint after this many logged calls (None: not by count).
        every_seconds: checkpoint at the first logged call this long after the last one
            (None: not by time).
        deadline_s: how long a client retries a call while the owner restarts before it
            raises ``ServiceUnavailableError``.
        max_restarts: how often Ray restarts the owner (-1: without limit).

    Raises:
        ValueError: for a non-positive period or deadline, or no period at all.
        UntrustedPathError: for an existing ``directory`` another user owns or can write
            (or under such a parent).

    Examples:
        >>> from rbdata.service.server.recovery import RecoveryConfig
        >>> RecoveryConfig("/srv/replay/ckpt", every_writes=100).deadline_s
        30.0
        >>> RecoveryConfig("/srv/replay/ckpt")
        Traceback (most recent call last):
        ...
        ValueError: every_writes or every_seconds must be given (when to checkpoint), got neither.
    """

    directory: str
    every_writes: int | None = None
    every_seconds: float | None = None
    deadline_s: float = 30.0
    max_restarts: int = -1

    def __post_init__(self) -> None:
        if self.every_writes is None and self.every_seconds is None:
            raise ValueError(
                "every_writes or every_seconds must be given (when to checkpoint), got neither."
            )
        for name in ("every_writes", "every_seconds", "deadline_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}.")
        if os.path.isdir(self.directory):  # refused here, before an actor starts, too
            check_trusted_dir(self.directory, "RecoveryConfig.directory")

    @classmethod
    def from_options(cls, options: Any) -> RecoveryConfig:
        """Build one from ``service_backend_options["recovery"]`` (a dict or a config).

        Raises:
            TypeError: for another type, or unknown keys.
        """
        if isinstance(options, cls):
            return options
        if not isinstance(options, dict):
            raise TypeError(
                f"service_backend_options['recovery'] must be a dict or a RecoveryConfig, "
                f"got {type(options).__name__}."
            )
        unknown = set(options) - set(cls.__dataclass_fields__)
        if unknown:
            raise TypeError(
                f"service_backend_options['recovery'] accepts {sorted(cls.__dataclass_fields__)}, "
                f"got {sorted(unknown)}."
            )
        return cls(**options)


class RecoveringOwner(BufferOwner):
    """An owner that checkpoints itself and restores from its last checkpoint on a restart.

    Args:
        config: the checkpoint policy (see :class:`RecoveryConfig`).
        hosted: the pickled buffer :meth:`build` is given. Ray runs the constructor
            again with it when it restarts the actor; the owner then rebuilds the buffer
            from it if ``config.directory`` says it was built, and loads its last
            checkpoint. None: nothing to restore (build it with :meth:`build`).

    Raises:
        UntrustedPathError: if another user could plant files in ``config.directory``.
        CheckpointError: if the checkpoint a restart loads is damaged.
        ValueError: if ``checkpoint.json`` is not what :meth:`checkpoint` writes.

    Examples:
        >>> import pickle, shutil, tempfile, torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> from rbdata.service.server.recovery import RecoveringOwner, RecoveryConfig
        >>> config = RecoveryConfig(tempfile.mkdtemp(), every_writes=2)
        >>> hosted = pickle.dumps(ReplayBuffer(storage=LazyTensorStorage(10)))
        >>> owner = RecoveringOwner(config, hosted)
        >>> _ = owner.build(hosted, True, False)
        >>> for seq in (1, 2, 3):
        ...     _ = owner.logged("c", seq, "extend", encode((torch.arange(2),)), encode({}))
        >>> owner.recovery_state("c")
        (3, 2, 0)
        >>> len(RecoveringOwner(config, hosted)._buffer)  # a restart: the checkpoint of 2 writes
        4
        >>> shutil.rmtree(config.directory)
    """

    def __init__(self, config: RecoveryConfig, hosted: bytes | None = None) -> None:
        super().__init__()
        self._config = config
        self._root = Path(private_dir(config.directory, "RecoveryConfig.directory"))
        self._applied: dict[str, int] = {}  # client -> last sequence number applied
        self._results: dict[str, tuple[int, Payload]] = {}  # client -> (sequence, its reply)
        self._checkpointed: dict[str, int] = {}  # client -> last sequence in the checkpoint
        self._since = 0  # logged calls since the last checkpoint
        self._last = time.monotonic()
        self._generation = 0
        self._restarts = 0
        self._guard = threading.Lock()  # one logged call or checkpoint at a time
        if hosted is not None and (self._root / _BUILT).exists():
            self._restore(hosted)

    def _offers_direct(self) -> bool:
        """No writes around this owner: it logs every write for its replay after a restart."""
        return False

    def _restore(self, hosted: bytes) -> None:
        """Rebuild the buffer Ray gave again, then load the last checkpoint (if any)."""
        self._buffer = pickle.loads(hosted)  # the constructor's argument: from the cluster
        pointer = self._root / _POINTER
        if pointer.exists():
            state = _read_pointer(pointer)
            self._buffer.loads(str(self._root / state["dir"]))
            self._generation = state["generation"]
            self._applied = dict(state["applied"])
            self._restarts = state["restarts"] + 1
        else:
            _ = self._buffer.storage  # no checkpoint yet: the buffer as it was built
            self._restarts = 1
        self._checkpointed = dict(self._applied)
        logger.warning(
            "replay buffer owner restarted from checkpoint %d (%d items)",
            self._generation,
            len(self._buffer),
        )

    def build(
        self, buffer: bytes, initialize: bool, node: bool = True
    ) -> tuple[str | None, int | None]:
        """Host ``buffer`` (see :meth:`BufferOwner.build`); a restart rebuilds it from now on.

        The restarted actor gets ``buffer`` again as its constructor's ``hosted``
        argument (from Ray); ``owner.json`` only records that it was built.
        """
        out = super().build(buffer, initialize, node)
        private_dir(self._root, "RecoveryConfig.directory")
        _write_json(self._root / _BUILT, {"built": True})
        return out

    def logged(
        self, client: str, seq: int, name: str, args: Payload, kwargs: Payload
    ) -> tuple[Payload, int]:
        """Run a logged call once per ``(client, seq)``; return its reply and the checkpointed seq.

        A call whose sequence number was applied already is not run again: the
        reply is the one it got (or None for one older than the client's last).
        """
        with self._guard:
            return self._logged(client, seq, name, args, kwargs)

    def _logged(
        self, client: str, seq: int, name: str, args: Payload, kwargs: Payload
    ) -> tuple[Payload, int]:
        applied = self._applied.get(client, 0)
        if seq <= applied:
            last = self._results.get(client)
            reply = last[1] if last is not None and last[0] == seq else encode(None)
            return reply, self._checkpointed.get(client, 0)
        reply = self.call(name, args, kwargs)
        self._applied[client] = seq
        self._results[client] = (seq, reply)
        self._since += 1
        if self._due():
            self.checkpoint()
        return reply, self._checkpointed.get(client, 0)

    def _due(self) -> bool:
        every, period = self._config.every_writes, self._config.every_seconds
        if every is not None and self._since >= every:
            return True
        return period is not None and time.monotonic() - self._last >= period

    def checkpoint(self) -> int:
        """Write a checkpoint now; return its generation."""
        generation = self._generation + 1
        name = f"ckpt-{generation:08d}"
        self._buffer.dumps(str(self._root / name))
        state = {
            "generation": generation,
            "dir": name,
            "applied": self._applied,
            "restarts": self._restarts,
        }
        _write_json(self._root / _POINTER, state)  # the checkpoint counts from here
        old = self._root / f"ckpt-{self._generation:08d}"
        if self._generation and old.exists():
            shutil.rmtree(old, ignore_errors=True)
        self._generation, self._since, self._last = generation, 0, time.monotonic()
        self._checkpointed = dict(self._applied)
        return generation

    def recovery_state(self, client: str) -> tuple[int, int, int]:
        """``(applied seq, checkpointed seq, restarts)`` for ``client``."""
        return (
            self._applied.get(client, 0),
            self._checkpointed.get(client, 0),
            self._restarts,
        )

    def recovery_config(self) -> dict[str, Any]:
        """The policy, as a dict (for stats and tests)."""
        return asdict(self._config)


def _write_json(path: Path, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` atomically (beside it, then renamed), mode 0600."""
    scratch = path.with_name(f".{path.name}.tmp")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w") as f:
        f.write(json.dumps(value))
    os.replace(scratch, path)


def _read_pointer(path: Path) -> dict[str, Any]:
    """``checkpoint.json``, checked: the checkpoint's name, generation, applied numbers.

    Raises:
        ValueError: naming the file, if it is not what :meth:`RecoveringOwner.checkpoint`
            writes (a ``dir`` outside ``ckpt-NNNNNNNN`` would read a dump elsewhere).
    """
    try:
        state = json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"{path}: not a recovery checkpoint pointer ({err}).") from err
    valid = (
        isinstance(state, dict)
        and isinstance(state.get("dir"), str)
        and _CHECKPOINT.fullmatch(state["dir"]) is not None
        and type(state.get("generation")) is int
        and type(state.get("restarts", 0)) is int
        and isinstance(state.get("applied"), dict)
        and all(type(seq) is int for seq in state["applied"].values())
    )
    if not valid:
        raise ValueError(
            f"{path}: not a recovery checkpoint pointer (expected 'dir': 'ckpt-NNNNNNNN', "
            "'generation' and 'restarts' integers, 'applied': client -> integer)."
        )
    return {
        "dir": state["dir"],
        "generation": state["generation"],
        "applied": state["applied"],
        "restarts": state.get("restarts", 0),
    }
