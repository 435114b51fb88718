"""scripts/check_wheel.py: a wheel missing a module, the typing marker or the licence is refused."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_wheel", ROOT / "scripts" / "check_wheel.py")
assert _spec is not None and _spec.loader is not None
check_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_wheel)


def _wheel(tmp_path: Path, drop: str = "", extra: str = "") -> Path:
    path = tmp_path / "rbdata-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for module in (ROOT / "rbdata").rglob("*.py"):
            name = module.relative_to(ROOT).as_posix()
            if name != drop:
                wheel.writestr(name, "")
        for name in ("rbdata/py.typed", "rbdata-0.1.0.dist-info/licenses/LICENSE", extra):
            if name and name != drop:
                wheel.writestr(name, "")
    return path


def test_a_complete_wheel_passes(tmp_path):
    assert check_wheel.problems(_wheel(tmp_path)) == []


def test_a_missing_module_marker_or_licence_is_reported(tmp_path):
    assert check_wheel.problems(_wheel(tmp_path, drop="rbdata/errors.py")) == [
        "missing module rbdata/errors.py"
    ]
    assert "py.typed" in check_wheel.problems(_wheel(tmp_path, drop="rbdata/py.typed"))[0]
    licence = "rbdata-0.1.0.dist-info/licenses/LICENSE"
    assert "LICENSE" in check_wheel.problems(_wheel(tmp_path, drop=licence))[0]


def test_stray_files_are_reported(tmp_path):
    assert check_wheel.problems(_wheel(tmp_path, extra="tests/test_x.py")) == [
        "file outside the package: tests/test_x.py"
    ]
