"""Print the API-surface tables of docs/torchrl-compat.md (Appendix B): torchrl vs rbdata.

For each of the core names the differential harness compares (``tests/compat/_libs.py``),
the constructor parameters (following ``**kwargs`` up the MRO) and the public members
torchrl's replay-buffer code defines, against rbdata's, as two GFM tables. It reuses the
harness's own helpers (``tests/compat/_surface.py``), so the tables say what
``tests/compat/test_api_surface.py`` checks. Type annotations are left out.

It needs torchrl and rbdata in one interpreter: run it in the harness venv, from the
checkout's root::

    PYTHONPATH=. ../bench-venvs/torchrl/bin/python scripts/compat_surface.py
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.compat._instances import example  # noqa: E402
from tests.compat._libs import NAMES, load  # noqa: E402
from tests.compat._surface import init_params, public_members  # noqa: E402

_EMPTY = inspect.Parameter.empty


def _code(names: Iterable[str]) -> str:
    """``a``, ``b`` (or "none")."""
    listed = [f"`{n}`" for n in names]
    return ", ".join(listed) if listed else "none"


def _has_default(param: inspect.Parameter) -> bool:
    # a tensorclass field's "default" can be the class's property for it: no real default
    return param.default is not _EMPTY and not isinstance(param.default, property)


def _render(param: inspect.Parameter) -> str:
    return f"{param.name}={param.default!r}" if _has_default(param) else param.name


def torchrl_signature(name: str, obj: Any) -> str:
    """``Name(a, b=1, ...)`` of torchrl's constructor (or what the object is)."""
    if not inspect.isclass(obj):
        return f"a `{type(obj).__name__}` instance"
    params = ", ".join(_render(p) for p in init_params(obj).values())
    return f"`{name}({params})`"


def constructor_row(name: str, theirs: Any, ours: Any) -> list[str]:
    """One row of the constructor table: signature, missing, extra and changed defaults."""
    if not inspect.isclass(theirs):
        return [f"`{name}`", torchrl_signature(name, theirs), "—", "—", "—"]
    their_params, our_params = init_params(theirs), init_params(ours)
    missing = [p for p in their_params if p not in our_params]
    extra = [p for p in our_params if p not in their_params]
    # compared where both sides declare a default (``**kwargs: Unpack[...]`` keys have none)
    defaults = [
        f"`{p}` ({their_params[p].default!r} vs {our_params[p].default!r})"
        for p in their_params
        if p in our_params
        and _has_default(their_params[p])
        and _has_default(our_params[p])
        and repr(their_params[p].default) != repr(our_params[p].default)
    ]
    return [
        f"`{name}`",
        torchrl_signature(name, theirs),
        _code(missing),
        _code(extra),
        ", ".join(defaults) if defaults else "none",
    ]


def _own_public_names(obj: Any) -> set[str]:
    """Public names ``obj``'s class gets from rbdata's code (not from torch or tensordict)."""
    cls = obj if inspect.isclass(obj) else type(obj)
    names: set[str] = set()
    for klass in cls.__mro__:
        if (getattr(klass, "__module__", "") or "").startswith("rbdata"):
            names.update(k for k in vars(klass) if not k.startswith("_"))
    return names - _machinery(cls)


def _machinery(cls: type) -> set[str]:
    """Names a tensorclass gets from the tensorclass decorator itself (from_h5, ...)."""
    from tensordict import is_tensorclass, tensorclass

    if not is_tensorclass(cls):
        return set()

    @tensorclass
    class _Empty:
        pass

    return set(dir(_Empty))


def _parameter_names(fn: Any) -> list[str] | None:
    """The parameter names of a method (without ``self``), or None when it has none to read."""
    if not callable(fn) or inspect.isclass(fn):
        return None
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    return [p for p in params if p != "self"]


def member_row(name: str, theirs: Any, ours: Any) -> list[str]:
    """One row of the member table: compared, missing, only in rbdata, differing methods."""
    compared = public_members(theirs)
    missing = [m for m in compared if not hasattr(ours, m)]
    their_names = set(dir(theirs)) | set(compared)
    extra = sorted(_own_public_names(ours) - their_names)
    their_cls = theirs if inspect.isclass(theirs) else type(theirs)
    our_cls = ours if inspect.isclass(ours) else type(ours)
    differ = []
    for member in compared:
        if member in missing:
            continue
        their_params = _parameter_names(getattr(their_cls, member, None))
        our_params = _parameter_names(getattr(our_cls, member, None))
        if their_params is not None and our_params is not None and their_params != our_params:
            differ.append(f"`{member}({', '.join(their_params)})` vs `({', '.join(our_params)})`")
    return [
        f"`{name}`",
        str(len(compared)),
        _code(missing),
        _code(extra),
        "; ".join(differ) if differ else "none",
    ]


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def surface_tables(names: Iterable[str] = NAMES) -> str:
    """The two markdown tables (constructors, then members) for ``names``."""
    torchrl, rbdata = load("torchrl"), load("rbdata")
    constructors, members = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            theirs = getattr(torchrl, name)
            ours_cls = getattr(rbdata, name)
            constructors.append(constructor_row(name, theirs, ours_cls))
            members.append(member_row(name, theirs, example(rbdata, name, Path(scratch))))
    return (
        _table(
            [
                "name",
                "torchrl 0.14.1 constructor",
                "missing in rbdata",
                "only in rbdata",
                "other defaults (torchrl vs rbdata)",
            ],
            constructors,
        )
        + "\n\n"
        + _table(
            [
                "name",
                "torchrl members compared",
                "missing in rbdata",
                "only in rbdata",
                "method parameters (torchrl vs rbdata)",
            ],
            members,
        )
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    """Write the tables to stdout (or to ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="write the tables to this file instead")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("torchrl") is None:
        sys.stderr.write("compat_surface: torchrl is not importable here; use the harness venv\n")
        return 2
    text = surface_tables()
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
