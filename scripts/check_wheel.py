"""Check a built rbdata wheel: every source module, the typing marker and the licence, nothing else.

Usage: ``python scripts/check_wheel.py dist/rbdata-*.whl`` (``scripts/wheel.sh`` runs it).
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def problems(wheel: Path) -> list[str]:
    """What is wrong with ``wheel``'s contents (empty when nothing is)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {p.relative_to(ROOT).as_posix() for p in (ROOT / "rbdata").rglob("*.py")}
    out = [f"missing module {name}" for name in sorted(expected - names)]
    if "rbdata/py.typed" not in names:
        out.append("missing rbdata/py.typed (the package's typing marker)")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        out.append("missing the LICENSE file in the wheel's metadata")
    stray = sorted(n for n in names if not n.startswith("rbdata/") and ".dist-info/" not in n)
    out += [f"file outside the package: {name}" for name in stray]
    out += [f"compiled or cached file: {n}" for n in sorted(names) if "__pycache__" in n]
    return out


def main() -> int:
    """Print the problems of the wheel given on the command line; exit 1 if there are any."""
    wheel = Path(sys.argv[1])
    found = problems(wheel)
    for line in found:
        print(f"[wheel] {wheel.name}: {line}", file=sys.stderr)
    if not found:
        count = sum(1 for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".py"))
        print(f"[wheel] {wheel.name}: {count} modules, py.typed and LICENSE present")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
