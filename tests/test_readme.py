"""The README's and the quickstart page's Python blocks run as written, in order, in one process.

A new user copies them one after the other; so does this test, in a fresh interpreter
whose working directory is a temporary one (what the blocks write stays there).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# ```python blocks (the README) and MyST {testcode} blocks (the docs' pages)
_BLOCK = re.compile(r"^```(?:python|\{testcode\})[^\n]*\n(.*?)^```", re.M | re.S)
# a fresh user's session, far below a minute here when the machine is not shared
_BUDGET_S = 120.0


def python_blocks(path: Path) -> list[str]:
    """The Python blocks of a Markdown file, in order."""
    return _BLOCK.findall(path.read_text(encoding="utf-8"))


def run_blocks(path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = "\n\n".join(
        f"# --- block {i} of {path.name}\n{block}" for i, block in enumerate(python_blocks(path), 1)
    )
    (tmp_path / "blocks.py").write_text(script, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MINARI_DATASETS_PATH": str(tmp_path / "m")}
    return subprocess.run(
        [sys.executable, "blocks.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_readme_has_python_blocks_and_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(python_blocks(ROOT / "README.md")) >= 4
    commands = re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)[:2]
    assert commands == ["bash scripts/main.sh\n", "bash scripts/test.sh\n"]
    assert text.index("bash scripts/test.sh") < text.index("## ")  # before any section
    assert "constraints.txt" in text and "existing environment" in text.lower()


@pytest.mark.parametrize("page", ["README.md", "docs/quickstart.md"])
def test_every_python_block_runs_in_order(page, tmp_path):
    pytest.importorskip("lightning")
    start = time.monotonic()
    proc = run_blocks(ROOT / page, tmp_path)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "Traceback" not in proc.stderr
    assert "has `__len__` defined" not in proc.stderr  # no Lightning warning on a plain fit
    assert elapsed < _BUDGET_S, f"{page}'s blocks took {elapsed:.0f} s"
