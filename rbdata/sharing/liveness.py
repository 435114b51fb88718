"""Whether a process still runs, by an identity a reused pid or a zombie cannot fake.

A pid alone names a process only while it runs: once it exits, the kernel
may give the number to another process, and until its parent reaps it, a
dead process stays in the table as a zombie that ``os.kill(pid, 0)`` still
finds. A process is therefore named here by its pid *and* its start time
(field 22 of ``/proc/<pid>/stat``, in clock ticks since boot), and it runs
when a process with that pid, that start time and a state other than
zombie or dead is found. Without ``/proc`` (not Linux) the start time is 0
and liveness falls back to ``os.kill(pid, 0)``.
"""

from __future__ import annotations

import os
import sys

__all__ = ["alive", "identity", "this_process"]

_PROC = "/proc"


def identity(pid: int) -> int | None:
    """The start time of the running process ``pid`` (0 without ``/proc``); None: none runs.

    A zombie (exited, not reaped) does not run.
    """
    if not os.path.isdir(_PROC):
        return 0 if _signalable(pid) else None
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X", b"x"):
        return None
    return int(fields[19])  # field 22 of the whole line


def alive(pid: int, start: int) -> bool:
    """Whether the process ``(pid, start)`` (see :func:`this_process`) still runs.

    Examples:
        >>> alive(*this_process())
        True
        >>> pid, start = this_process()
        >>> alive(pid, start + 1)  # the same pid, started at another time: another process
        False
    """
    found = identity(pid)
    return found is not None and (found == start or not start or not found)


_SELF: list[tuple[int, int]] = []  # this process's identity, once asked; forgotten by a fork


def this_process() -> tuple[int, int]:
    """``(pid, start time)`` of this process.

    Looked up once (a writer asks on every reservation); a forked child
    forgets its parent's identity (:func:`os.register_at_fork`, registered at
    the first call) and looks up its own.
    """
    if not _SELF:
        if not _FORGETS_ON_FORK:
            _FORGETS_ON_FORK.append(True)
            if sys.platform != "win32":
                os.register_at_fork(after_in_child=_SELF.clear)
        pid = os.getpid()
        _SELF.append((pid, identity(pid) or 0))
    return _SELF[0]


_FORGETS_ON_FORK: list[bool] = []


def _signalable(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
