"""Removing what crashed rbdata processes left in shared memory and the temp directory.

Every file or directory rbdata names in ``/dev/shm`` (or the temp directory)
starts with ``rbdata-<pid>-<start>-``: the pid and start time of the process
that created it (:mod:`.liveness`). Its creator removes it when done (the
lock file when the lock is collected or the process exits, a rendezvous
directory when its storage is collected); a process killed before that
leaves it. :func:`sweep`, run whenever a buffer is shared or a rendezvous
made, removes the entries of this user whose creator no longer runs (a
reused pid does not keep them: the start time differs).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import tempfile

from rbdata.sharing.liveness import alive, this_process

__all__ = ["creator_prefix", "sweep"]

_log = logging.getLogger(__name__)
_NAME = re.compile(r"rbdata-(\d+)-(\d+)-")


def creator_prefix(kind: str) -> str:
    """The name prefix of an entry this process creates: ``rbdata-<pid>-<start>-<kind>-``.

    Examples:
        >>> import os
        >>> creator_prefix("lock").startswith(f"rbdata-{os.getpid()}-")
        True
    """
    pid, start = this_process()
    return f"rbdata-{pid}-{start}-{kind}-"


def _places() -> list[str]:
    places = [tempfile.gettempdir()]
    if os.path.isdir("/dev/shm"):
        places.insert(0, "/dev/shm")
    return places


def sweep() -> int:
    """Remove this user's rbdata entries whose creator process is gone; how many went.

    Examples:
        >>> sweep() >= 0
        True
    """
    uid = None if sys.platform == "win32" else os.getuid()
    removed = 0
    for place in _places():
        try:
            names = os.listdir(place)
        except OSError:
            continue
        for name in names:
            found = _NAME.match(name)
            if found is None or alive(int(found.group(1)), int(found.group(2))):
                continue
            path = os.path.join(place, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if uid is not None and info.st_uid != uid:
                continue
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except OSError:
                continue
            removed += 1
            _log.info("removed %s, left by the crashed rbdata process %s", path, found.group(1))
    return removed
