"""The command line as a new user meets it: relative paths, tracebacks on demand, clean help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, TensorDictReplayBuffer
from rbdata.cli import main
from rbdata.datasets import load_offline_data

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("inspect", "verify", "convert", "bench")


def transitions(n: int = 12) -> TensorDict:
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[[4, n - 1]] = True
    return TensorDict(
        {
            "observation": torch.randn(n, 3),
            "action": torch.randn(n, 2),
            "next": {
                "observation": torch.randn(n, 3),
                "reward": torch.randn(n),
                "done": done,
                "terminated": done.clone(),
                "truncated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def test_relative_destinations_work_for_every_format(tmp_path, monkeypatch, capsys):
    pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.chdir(tmp_path)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    rb.extend(transitions())
    rb.dumps("door-dump")
    for argv in (
        ["convert", "door-dump", "door-copy-v0", "--to", "minari"],
        ["convert", "door-dump", "out/door.hdf5"],
        ["convert", "out/door.hdf5", "out/mm", "--to", "memmap"],
        ["convert", "out/mm", "./out/dump", "--to", "dumps"],
    ):
        assert main([*argv, "--no-progress"]) == 0, capsys.readouterr().err
    for path in ("door-copy-v0", "out/door.hdf5", "out/mm", "out/dump"):
        assert load_offline_data(path).shape[0] == 12, path
    assert not list(tmp_path.rglob(".*rbdata-tmp*"))


def test_errors_are_one_line_and_traceback_shows_the_whole_error(tmp_path, capsys):
    argv = ["convert", str(tmp_path / "missing"), str(tmp_path / "x"), "--to", "memmap"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "does not exist" in err and "FileNotFoundError" in err and "--traceback" in err
    for flag in ("--traceback", "-v"):
        assert main([flag, *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("Traceback (most recent call last)")
        assert "offline_data_format" in err and "FileNotFoundError: " in err


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_text_is_plain(command, capsys):
    with pytest.raises(SystemExit):
        main(["--help"] if command is None else [command, "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and ":class:" not in out and ":func:" not in out
    assert ".." not in out.replace("...", "")
    if command is None:
        assert "--traceback" in out


def test_an_unknown_bench_scenario_is_rbdatas_own_error(capsys):
    assert main(["bench", "bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rbdata bench: unknown scenario bogus: choose from")
    assert "sample" in err and "usage" not in err and len(err.strip().splitlines()) == 1


def test_scenario_names_are_read_without_running_run_py(tmp_path):
    from rbdata.cli.bench import scenario_names

    script = tmp_path / "run.py"
    script.write_text('import torch\nROWS: dict = {"a": f, "b": g}\n_SEPARATE = ("c",)\n')
    assert scenario_names(script) == ["a", "b", "c"]
    script.write_text("print('no rows here')\n")
    assert scenario_names(script) is None  # unknown layout: run.py checks its own names


def test_help_runs_in_a_fresh_process():
    proc = subprocess.run(
        [sys.executable, "-m", "rbdata", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("usage: rbdata")


@pytest.mark.parametrize(
    "code",
    [
        "import rbdata",
        "import rbdata.cli; rbdata.cli.build_parser().format_help()",
        "import rbdata.cli; rbdata.cli.build_parser().parse_args(['verify', 'x'])",
    ],
)
def test_import_and_help_do_not_import_torch(code):
    """``import rbdata`` and ``rbdata --help`` stay light: torch is imported on first use."""
    check = f"{code}; import sys; sys.exit('torch' in sys.modules or 'tensordict' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_every_public_name_loads_on_first_use():
    code = (
        "import rbdata, sys; missing = [n for n in rbdata.__all__ if getattr(rbdata, n, None) is "
        "None]; sys.exit(f'{missing}' if missing else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
