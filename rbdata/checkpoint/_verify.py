"""Reading a dump (for ``loads``) and checking one without a buffer (``rbdata verify``)."""

from __future__ import annotations

import os
from typing import Any

from rbdata._trust import check_trusted_dir

from ._read import Pickles, open_dump


def read_dump(
    path: str | os.PathLike[str], *, allow_pickle: bool = False
) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Read and check a dump written by :func:`~rbdata.checkpoint.write_dump`.

    Reads only the files the manifest names, inside the dump's directory (no
    symlinks, no other files), and checks their sizes, checksums, dtypes and
    shapes and the manifest's length and counts against the data, before
    returning anything. A directory another user owns or can write (or one
    of its parents) is refused before anything in it is read.

    Args:
        path: the dump's directory.
        allow_pickle: unpickle the objects of a list storage that JSON could not
            describe (unpickling runs code from the file: only for trusted dumps).

    Returns:
        ``(manifest, state, objects)``; ``objects`` is None when none were saved.

    Raises:
        CheckpointError: naming the file and the problem (missing, partial,
            damaged, inconsistent, another format, or pickled objects without
            ``allow_pickle``).
        UntrustedPathError: if another user could have planted files in ``path``.

    Examples:
        >>> from rbdata.checkpoint import CheckpointError, read_dump
        >>> try:
        ...     read_dump("/nonexistent/dump")
        ... except CheckpointError as err:
        ...     print(err)
        no replay-buffer dump at '/nonexistent/dump': directory not found.
    """
    if os.path.isdir(path):
        check_trusted_dir(path, "the dump")
    dump = open_dump(path, Pickles.LOAD if allow_pickle else Pickles.REFUSE)
    return dump.manifest, dump.state, dump.objects


def verify_dump(path: str | os.PathLike[str], *, allow_pickle: bool = False) -> dict[str, Any]:
    """Check a dump as :meth:`ReplayBuffer.loads` does, without a buffer.

    Every file is read and checked (size, checksum, dtype, shape, counts
    against the manifest). Pickled objects of a list storage are checksummed
    but unpickled (and counted) only with ``allow_pickle``, and then only
    from a directory nobody but the user and root can write (as ``loads``);
    without it, nothing runs and a dump from anywhere is checked.

    Args:
        path: the dump's directory.
        allow_pickle: also unpickle pickled objects (runs code from the file).

    Returns:
        A summary: ``length``, ``write_count``, ``components``, ``files``,
        ``bytes`` and ``objects`` (``"none"``, ``"json"``, ``"pickled, unpickled"``
        or ``"pickled, not unpickled"``).

    Raises:
        CheckpointError: naming the file and the problem.
        UntrustedPathError: with ``allow_pickle``, if another user could have planted
            files in ``path``.

    Examples:
        >>> import tempfile
        >>> from rbdata import ReplayBuffer
        >>> from rbdata.checkpoint import verify_dump
        >>> rb = ReplayBuffer()
        >>> _ = rb.extend([1, 2, 3])
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     rb.dumps(f"{tmp}/d")
        ...     summary = verify_dump(f"{tmp}/d")
        >>> summary["length"], summary["objects"]
        (3, 'json')
    """
    if allow_pickle and os.path.isdir(path):
        check_trusted_dir(path, "the dump")
    dump = open_dump(path, Pickles.LOAD if allow_pickle else Pickles.CHECK)
    if dump.pickled:
        objects = "pickled, unpickled" if allow_pickle else "pickled, not unpickled"
    else:
        objects = "none" if dump.manifest.get("objects") is None else "json"
    return {
        "length": dump.manifest["length"],
        "write_count": dump.manifest["write_count"],
        "components": dump.manifest.get("components"),
        "files": dump.files,
        "bytes": dump.nbytes,
        "objects": objects,
    }
