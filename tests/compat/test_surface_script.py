"""scripts/compat_surface.py: the API-surface tables of the migration page (Appendix B)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ._libs import NAMES
from .test_api_surface import MISSING_MEMBERS, MISSING_PARAMS

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compat_surface.py"


def _script():
    spec = importlib.util.spec_from_file_location("compat_surface", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(text: str, name: str, table: int) -> list[str]:
    rows = [
        line for line in text.split("\n\n")[table].splitlines() if line.startswith(f"| `{name}`")
    ]
    assert len(rows) == 1
    return [cell.strip() for cell in rows[0].strip("|").split(" | ")]


def test_tables_agree_with_the_harness():
    text = _script().surface_tables(["ReplayBuffer", "PrioritizedReplayBuffer", "traj"])
    constructors, members = text.split("\n\n")
    for table in (constructors, members):
        lines = table.splitlines()
        assert lines[1].count("---") == lines[0].count("|") - 1 == 5
        assert len(lines) == 2 + 3
    for name in ("ReplayBuffer", "PrioritizedReplayBuffer"):
        for table, expected in ((0, MISSING_PARAMS), (1, MISSING_MEMBERS)):
            cell = _row(text, name, table)[2]
            found = set() if cell == "none" else {m.strip("`") for m in cell.split(", ")}
            assert found == expected.get(name, set())
    assert _row(text, "traj", 0)[1] == "a `_TrajectoryRef` instance"


def test_main_writes_the_tables(tmp_path):
    out = tmp_path / "surface.md"
    assert _script().main(["--out", str(out)]) == 0
    text = out.read_text()
    assert text.count("| `ReplayBuffer` |") == 2
    assert text.count("\n| `") == 2 * len(NAMES)
