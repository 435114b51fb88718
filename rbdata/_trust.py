"""Which local directories rbdata trusts: none that another user can plant files in.

rbdata reads what it finds in its scratch, rendezvous and recovery
directories and in dump directories. A file there that another local user
planted would be read as rbdata's own, so a directory is used only if
nobody but the user and root can create, replace or rename entries in it
(OpenSSH's ``StrictModes`` rule for key files):

- the directory and each of its parents, up to ``/``, is owned by the user
  or by root;
- the directory is not writable by its group or by others;
- a parent is not writable by its group or others unless it has the sticky
  bit (as ``/tmp`` and ``/dev/shm`` have: others may add entries there but
  not rename or remove the user's).

A path is checked where its symlinks lead (and a symlink given as the path
itself must be the user's or root's). Directories rbdata creates are made
with mode 0700. :func:`check_contained` refuses a symlink inside a directory
tree that leads out of it (a dump that would read another user's files; the
dump readers raise their ``CheckpointError`` for it).

This module imports nothing from rbdata but its errors.

Examples:
    >>> import os, tempfile
    >>> base = tempfile.mkdtemp()
    >>> made = private_dir(os.path.join(base, "scratch"), "scratch_dir")
    >>> oct(os.stat(made).st_mode & 0o777)
    '0o700'
    >>> os.chmod(made, 0o777)
    >>> try:
    ...     check_trusted_dir(made, "scratch_dir")
    ... except UntrustedPathError as err:
    ...     print("refused")
    refused
    >>> import shutil; shutil.rmtree(base)
"""

from __future__ import annotations

import os
import stat
import sys

from rbdata.errors import UntrustedPathError

__all__ = ["check_contained", "check_trusted_dir", "private_dir"]

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def _describe(path: str, st: os.stat_result) -> str:
    kind = "symlink" if stat.S_ISLNK(st.st_mode) else "directory"
    return (
        f"{kind} {path} (owner {_owner_name(st.st_uid)}, uid {st.st_uid}; "
        f"mode {stat.filemode(st.st_mode)}, {oct(stat.S_IMODE(st.st_mode))})"
    )


def _refuse(what: str, given: str, culprit: str, st: os.stat_result, why: str) -> None:
    raise UntrustedPathError(
        f"{what} {given!r}: refused: {_describe(culprit, st)} {why}, so another user could "
        "plant or replace files rbdata would read. Use a directory that you own, that only "
        "you can write (chmod 700), under parents owned by you or root that others cannot "
        "write (or that have the sticky bit, like /tmp)."
    )


def _trusted_owner(uid: int) -> bool:
    return uid in (0, os.geteuid())


def check_trusted_dir(path: str | os.PathLike[str], what: str, *, sticky_ok: bool = False) -> None:
    """Raise unless only the user and root can plant files in the directory ``path``.

    Args:
        path: an existing directory.
        what: how the caller's argument is named in the message (``"scratch_dir"``).
        sticky_ok: accept ``path`` itself writable by others if it has the sticky bit,
            as its parents are (for the directory a new entry is made in, like ``/tmp``,
            where others cannot rename or remove the user's entries).

    Raises:
        UntrustedPathError: naming the path, the owner and the mode of the first
            directory (or symlink) that breaks the rule (module docstring).
        FileNotFoundError: if ``path`` does not exist.
    """
    if sys.platform == "win32":  # no POSIX owners and modes to check
        return
    given = os.fspath(path)
    link = os.lstat(given)
    if stat.S_ISLNK(link.st_mode) and not _trusted_owner(link.st_uid):
        _refuse(what, given, os.path.abspath(given), link, "is owned by another user")
    current = os.path.realpath(given)
    leaf = True
    while True:
        st = os.stat(current)
        if not _trusted_owner(st.st_uid):
            _refuse(what, given, current, st, "is owned by another user")
        writable = st.st_mode & _OTHERS_WRITE
        if writable and ((leaf and not sticky_ok) or not st.st_mode & stat.S_ISVTX):
            where = "is" if leaf else "is a parent that is"
            _refuse(what, given, current, st, f"{where} writable by its group or others")
        parent = os.path.dirname(current)
        if parent == current:
            return
        current, leaf = parent, False


def private_dir(path: str | os.PathLike[str], what: str) -> str:
    """``path`` as a directory only the user can write: made with mode 0700, or checked.

    Missing parents are made with mode 0700 too. An existing directory is kept
    as it is if :func:`check_trusted_dir` accepts it.

    Args:
        path: the directory.
        what: how the caller's argument is named in messages.

    Returns:
        ``path`` (as a string).

    Raises:
        UntrustedPathError: if the directory, or one of its parents, is not trusted.
    """
    given = os.fspath(path)
    missing = []
    current = os.path.abspath(given)
    while not os.path.isdir(current) and os.path.dirname(current) != current:
        missing.append(current)
        current = os.path.dirname(current)
    for directory in reversed(missing):  # os.makedirs gives its mode to the leaf only
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
    check_trusted_dir(given, what)
    return given


def check_contained(
    root: str | os.PathLike[str], what: str, error: type[Exception] = UntrustedPathError
) -> None:
    """Raise if a symlink in the tree under ``root`` leads out of it.

    Every entry is looked at without following symlinks; each symlink is
    resolved and must stay inside ``root`` (resolved too).

    Args:
        root: the directory tree (a dump).
        what: how the tree is named in the message.
        error: the exception class raised (a dump reader raises its own).

    Raises:
        UntrustedPathError: (or ``error``) naming the symlink and where it leads.
    """
    top = os.path.realpath(root)
    for folder, dirs, files in os.walk(top, followlinks=False):
        for name in [*dirs, *files]:
            entry = os.path.join(folder, name)
            if not os.path.islink(entry):
                continue
            target = os.path.realpath(entry)
            if os.path.commonpath([top, target]) != top:
                raise error(
                    f"{what} {os.fspath(root)!r}: refused: the symlink {entry} leads out of it, "
                    f"to {target}; rbdata reads only files inside the directory."
                )
