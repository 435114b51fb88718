"""torchrl's ``examples/replay-buffers/*.py`` run unchanged on rbdata's buffers.

Each script (pytorch/rl at :data:`SNAPSHOT`) runs twice in a child process
(``_example_runner.py``): once as is, once with ``torchrl.data``'s buffer,
storage, sampler and writer names pointed at rbdata's (torchrl imported for
everything else), both seeded alike. Where torchrl's run succeeds, rbdata's
must too and print the same thing once what depends on draws, unseeded
environments, timing or the on-disk format is masked (:data:`MASKS`); where
torchrl's run fails (a dependency this venv lacks), rbdata's must fail with
the same exception line.

The scripts are read, never copied into rbdata: from the installed torchrl
package if it ships them (the 0.14.1 wheel does not), else from a pytorch/rl
git mirror (``RBDATA_TORCHRL_MIRROR``, or a ``.mirror/pytorch+rl/repo`` above
this checkout). Without either, the tests skip and say so.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SNAPSHOT = "ae9719f"
FOLDER = "examples/replay-buffers"
ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("_example_runner.py")
TIMEOUT_S = 300


def _drop_file_listing(text: str) -> str:
    """The files a dump holds are each library's own format: drop their listing.

    The script's ``tempfile.TemporaryDirectory()`` names differ from run to run.
    """
    text = re.sub(r"Files created:\n(  .*\n)*", "Files created: <listing>\n", text)
    text = re.sub(r"\S*/tmp[a-z0-9_]{8}/", "<tmpdir>/", text)
    # a sampled batch is torchrl's lazy stack, whose keys come sorted, and rbdata's
    # TensorDict, whose keys keep the written order (docs/torchrl-compat.md): sort them
    return re.sub(
        r"(Sampled data keys: )(\[.*\])",
        lambda m: m.group(1) + str(sorted(ast.literal_eval(m.group(2)))),
        text,
    )


def _mask_ids(text: str) -> str:
    """Unseeded CartPole rollouts: mask the counts and the (non-empty) id tensors."""
    text = re.sub(r"tensor\(\[[\d,\s]+\]\)", "tensor([<ids>])", text)
    return re.sub(r"Incomplete trajectory: \d+", "Incomplete trajectory: <n>", text)


def _mask_collector(text: str) -> str:
    """A background collector: the write counts and slice lengths vary from run to run."""
    text = re.sub(r"write_count=\d+", "write_count=<n>", text)
    return re.sub(r"sample\.shape=\(\d+,\)", "sample.shape=(<n>,)", text)


#: what is compared of each script's stdout (identity: all of it)
MASKS: dict[str, Callable[[str], str]] = {
    "catframes-in-buffer.py": lambda text: text,
    "checkpoint.py": lambda text: text,
    "compressed_replay_buffer.py": lambda text: text,
    "compressed_replay_buffer_checkpoint.py": _drop_file_listing,
    "filter-imcomplete-trajs.py": _mask_ids,
    "recurrent_slice_sampler_pipeline.py": _mask_collector,
}

#: scripts rbdata does not run yet, with the reason (strict: fixing one fails its mark)
GAPS: dict[str, str] = {}


def _mirror() -> Path | None:
    """A pytorch/rl git dir: ``RBDATA_TORCHRL_MIRROR``, or ``.mirror/pytorch+rl/repo`` above."""
    given = os.environ.get("RBDATA_TORCHRL_MIRROR")
    if given:
        return Path(given)
    for parent in ROOT.parents:
        candidate = parent / ".mirror" / "pytorch+rl" / "repo"
        if candidate.is_dir():
            return candidate
    return None


def _git(mirror: Path, *args: str) -> str | None:
    done = subprocess.run(
        ["git", f"--git-dir={mirror}", *args], capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else None


def example_source(name: str) -> str | None:
    """The script ``name`` from the installed torchrl package, else from the mirror."""
    import torchrl

    shipped = Path(torchrl.__file__).resolve().parents[1] / FOLDER / name
    if shipped.is_file():
        return shipped.read_text()
    mirror = _mirror()
    return None if mirror is None else _git(mirror, "show", f"{SNAPSHOT}:{FOLDER}/{name}")


def _source_or_skip(name: str) -> str:
    source = example_source(name)
    if source is None:
        pytest.skip(
            f"torchrl's {FOLDER}/{name} is not available: the torchrl wheel does not ship its "
            f"examples and no pytorch/rl mirror was found (set RBDATA_TORCHRL_MIRROR to a git "
            f"dir holding {SNAPSHOT})"
        )
    return source


def run(lib: str, script: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, str(RUNNER), lib, str(script)],
        capture_output=True,
        text=True,
        cwd=script.parent,
        env=env,
        timeout=TIMEOUT_S,
        check=False,
    )


_LOG_LINE = re.compile(r".*\[(torchrl|tensordict)\]\[[A-Z]+\].*\n?")


def printed(text: str) -> str:
    """What the script printed: the libraries' own log lines (torchrl logs to stdout) dropped."""
    return _LOG_LINE.sub("", text)


def _last_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def test_the_snapshot_holds_exactly_the_scripts_compared():
    mirror = _mirror()
    if mirror is None or _git(mirror, "rev-parse", SNAPSHOT) is None:
        pytest.skip(f"no pytorch/rl mirror holding {SNAPSHOT} (set RBDATA_TORCHRL_MIRROR)")
    listing = _git(mirror, "ls-tree", "--name-only", f"{SNAPSHOT}:{FOLDER}") or ""
    assert sorted(n for n in listing.split() if n.endswith(".py")) == sorted(MASKS)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=GAPS[n])) if n in GAPS else n
        for n in sorted(MASKS)
    ],
)
def test_the_example_runs_on_rbdata_as_on_torchrl(name, tmp_path):
    script = tmp_path / name
    script.write_text(_source_or_skip(name))
    theirs, ours = run("torchrl", script), run("rbdata", script)
    if theirs.returncode != 0:
        assert ours.returncode != 0, f"torchrl's run failed, rbdata's did not:\n{theirs.stderr}"
        assert _last_line(ours.stderr) == _last_line(theirs.stderr), ours.stderr[-3000:]
        return
    assert ours.returncode == 0, ours.stderr[-3000:]
    mask = MASKS[name]
    assert mask(printed(ours.stdout)) == mask(printed(theirs.stdout))
