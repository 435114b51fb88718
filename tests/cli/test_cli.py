"""The ``rbdata`` command line: inspect, verify, convert, bench, --version, python -m rbdata."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import rbdata
from rbdata import LazyTensorStorage, ListStorage, ReplayBuffer, TensorDictPrioritizedReplayBuffer
from rbdata.cli import _sources, main
from rbdata.cli import convert as convert_module
from rbdata.cli.inspect import summarize
from rbdata.datasets import load_minari, load_offline_data

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("inspect", "verify", "convert", "bench")


@pytest.fixture(autouse=True)
def datasets_path(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def prioritized_dump(path, n=60):
    """A dump with priorities, policy versions and episodes ending at known rows."""
    rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(100))
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[[9, 24, 30, n - 1]] = True
    versions = torch.arange(n) // 10
    rb.extend(
        TensorDict(
            {"obs": torch.randn(n, 3), "policy_version": versions, "next": {"done": done}}, [n]
        )
    )
    priorities = torch.rand(n)
    rb.update_priority(torch.arange(n), priorities)
    rb.dumps(path)
    return versions, priorities


def minari_dataset(dataset_id, lengths, obs_dim=3, seed=0):
    """A Minari dataset written by the minari package; episode ``i`` truncated if i is odd."""
    minari = pytest.importorskip("minari")
    gym = pytest.importorskip("gymnasium")
    from minari.data_collector import EpisodeBuffer

    rng = np.random.default_rng(seed)
    episodes = []
    for i, t in enumerate(lengths):
        end = np.arange(t) == t - 1
        episodes.append(
            EpisodeBuffer(
                observations=rng.normal(size=(t + 1, obs_dim)).astype(np.float32),
                actions=rng.integers(2, size=t),
                rewards=rng.normal(size=t),
                terminations=end & (i % 2 == 0),
                truncations=end & (i % 2 == 1),
            )
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(
            dataset_id,
            episodes,
            observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
            action_space=gym.spaces.Discrete(2),
        )


def one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


# ------------------------------------------------------------------ inspect and verify
def test_inspect_prints_sizes_components_keys_and_summaries(tmp_path, capsys):
    versions, _ = prioritized_dump(tmp_path / "dump")
    assert main(["inspect", str(tmp_path / "dump")]) == 0
    out = capsys.readouterr().out
    assert "60 of 100 items" in out and "sampler PrioritizedSampler" in out
    assert "obs             float32  [3]" in out
    assert "memory: " in out and " resident of " in out
    assert "policy versions 0 .. 5: age mean 2.50, max 5" in out
    assert "trajectories: 4 ending here, length min 6, mean 15, max 29" in out

    assert main(["inspect", str(tmp_path / "dump"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["length"] == 60 and summary["capacity"] == 100
    assert summary["writer"] == "TensorDictRoundRobinWriter"
    assert summary["keys"]["next.done"] == {"shape": [1], "dtype": "bool"}
    ages = versions.max() - versions
    assert summary["policy_versions"]["age_mean"] == pytest.approx(float(ages.double().mean()))
    assert summary["trajectories"]["count"] == 4
    item = summary["bytes"]["item"]
    assert summary["bytes"] == {"item": item, "resident": 60 * item, "capacity": 100 * item}


def test_inspect_series_hold_the_dumps_values(tmp_path):
    versions, priorities = prioritized_dump(tmp_path / "dump")
    _, series = summarize(tmp_path / "dump")
    assert torch.equal(series["policy versions"], versions)
    assert series["trajectory lengths"].tolist() == [10, 15, 6, 29]
    # the sampler keeps (priority + eps) ** alpha: the order of the priorities is kept
    weights = series["priority weights"]
    assert torch.equal(weights.argsort(), priorities.double().argsort())


def test_inspect_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    prioritized_dump(tmp_path / "dump")
    out = tmp_path / "hist.png"
    assert main(["inspect", str(tmp_path / "dump"), "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert f"histograms: {out}" in capsys.readouterr().out


def test_inspect_a_list_storage_dump_has_no_item_summaries(tmp_path, capsys):
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend(["a", "b", "c"])
    rb.dumps(tmp_path / "objects")
    assert main(["inspect", str(tmp_path / "objects"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["length"] == 3 and summary["storage"] == "ListStorage"
    assert "policy_versions" not in summary and "trajectories" not in summary


def test_verify_accepts_a_sound_dump_and_flags_short_entries(tmp_path, capsys):
    prioritized_dump(tmp_path / "dump")
    assert main(["verify", str(tmp_path / "dump")]) == 0
    assert "ok (60 items" in capsys.readouterr().out
    data = next(p for p in (tmp_path / "dump").iterdir() if p.is_dir())
    victim = max(data.iterdir(), key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[:-8])  # a truncated tensor file
    assert main(["verify", str(tmp_path / "dump")]) == 1
    err = capsys.readouterr().err
    assert "damaged" in err and victim.name in err and len(err.splitlines()) == 1


def test_bad_paths_and_formats_get_one_line_and_status_2(tmp_path, capsys):
    (tmp_path / "data.npz").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    (tmp_path / "taken.hdf5").write_bytes(b"")
    prioritized_dump(tmp_path / "dump")
    for argv, message in (
        (["inspect", str(tmp_path / "missing")], "directory not found"),
        (["verify", str(tmp_path / "empty")], "manifest.json: missing"),
        (["convert", str(tmp_path / "missing"), "x.hdf5"], "does not exist"),
        (["convert", str(tmp_path / "data.npz"), "x.hdf5"], "suffix '.npz'"),
        (["convert", str(tmp_path / "empty"), "x.hdf5"], "neither a replay-buffer dump"),
        (["convert", str(tmp_path / "dump"), str(tmp_path / "out")], "pass --to"),
        (["convert", str(tmp_path / "dump"), str(tmp_path / "taken.hdf5")], "already exists"),
        (["convert", str(tmp_path / "dump"), str(tmp_path / "d.hdf5")], "lacks observation"),
        (["convert", str(tmp_path / "dump"), str(tmp_path / "bad"), "--to", "minari"], "-v"),
        (["bench", "--benchmarks", str(tmp_path / "empty")], "run.py' not found"),
    ):
        assert message in one_line_error(capsys, argv), argv
    assert not list(tmp_path.glob(".*rbdata-tmp*"))  # failed conversions leave nothing behind
    assert not (tmp_path / "bad").exists() and not (tmp_path / "d.hdf5").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["convert", "a", "b", "--to", "parquet"], "invalid choice: 'parquet'"),
        (["nonsense"], "invalid choice: 'nonsense'"),
        (["inspect"], "the following arguments are required: path"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert message in err and "--help" in err


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: rbdata {command}" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out == f"rbdata {rbdata.__version__}\n"


def test_python_dash_m_rbdata(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "rbdata", "inspect", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr.startswith("rbdata inspect: no replay-buffer dump")
        and proc.stderr.count("\n") == 1
    )


# ------------------------------------------------------------------ convert
def test_convert_round_trips_through_every_format(tmp_path, capsys):
    minari_dataset("test/source-v0", [5, 8, 3, 6])
    original = load_minari("test/source-v0")
    steps = [
        ("test/source-v0", tmp_path / "a.hdf5", []),
        (tmp_path / "a.hdf5", tmp_path / "b", ["--to", "memmap"]),
        (tmp_path / "b", tmp_path / "c", ["--to", "dumps"]),
        (tmp_path / "c", tmp_path / "back-v0", ["--to", "minari"]),
    ]
    without_episode = original.exclude("episode")
    for src, dst, extra in steps:
        assert main(["convert", str(src), str(dst), "--chunk-rows", "4", *extra]) == 0
        out = capsys.readouterr()
        assert "22 transitions" in out.out
        converted = load_offline_data(dst)
        assert (converted.select(*without_episode.keys(True, True)) == without_episode).all()
    assert (load_minari(tmp_path / "back-v0") == original).all()  # episodes found again


def test_a_converted_minari_dataset_reads_back_with_minari(tmp_path):
    minari = pytest.importorskip("minari")
    minari_dataset("test/m-v0", [4, 2])
    assert main(["convert", "test/m-v0", str(tmp_path / "copy-v0"), "--to", "minari"]) == 0
    copy = minari.MinariDataset(tmp_path / "copy-v0" / "data")
    ours = [ep.observations for ep in minari.load_dataset("test/m-v0").iterate_episodes()]
    theirs = [ep.observations for ep in copy.iterate_episodes()]
    assert copy.total_episodes == 2 and copy.total_steps == 6
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_convert_reports_the_keys_a_format_cannot_hold(tmp_path, capsys):
    minari_dataset("test/keys-v0", [3])
    assert main(["convert", "test/keys-v0", str(tmp_path / "x.hdf5")]) == 0
    assert "d4rl has no place for ['episode']: not written" in capsys.readouterr().err


def _recording(monkeypatch):
    """Record the size of every chunk a conversion reads."""
    sizes: list[int] = []
    open_source = _sources.open_source

    def recording_open(path, fmt):
        source = open_source(path, fmt)

        class Recorded:
            row_bytes = source.row_bytes

            def __len__(self):
                return len(source)

            def chunks(self, max_rows):
                for chunk in source.chunks(max_rows):
                    sizes.append(chunk.shape[0])
                    yield chunk

        return Recorded()

    monkeypatch.setattr(_sources, "open_source", recording_open)  # convert() imports it on use
    return sizes


@pytest.mark.parametrize("src_format", ["minari", "d4rl", "memmap"])
@pytest.mark.parametrize("dst", ["out.hdf5", "mm"])
def test_convert_streams_in_bounded_chunks(tmp_path, monkeypatch, src_format, dst):
    minari_dataset("test/big-v0", [50] * 20, obs_dim=256)  # 1,000 steps, ~2 MB as TED
    sources = {"minari": "test/big-v0"}
    if src_format != "minari":
        target = tmp_path / ("src.hdf5" if src_format == "d4rl" else "src")
        to = [] if src_format == "d4rl" else ["--to", "memmap"]
        assert main(["convert", "test/big-v0", str(target), "--no-progress", *to]) == 0
        sources[src_format] = str(target)
    total_bytes = load_offline_data(sources[src_format]).bytes()
    sizes = _recording(monkeypatch)
    to = ["--to", "memmap"] if dst == "mm" else []
    tracemalloc.start()
    try:
        argv = ["convert", sources[src_format], str(tmp_path / dst), "--chunk-rows", "32", *to]
        assert main([*argv, "--no-progress"]) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sizes == [32] * 31 + [8]  # read chunk by chunk, never whole
    assert peak < total_bytes / 6, (peak, total_bytes)  # a few chunks at most
    converted = load_offline_data(tmp_path / dst)  # a d4rl file has no "episode"
    expected = load_offline_data(sources[src_format]).select(*converted.keys(True, True))
    assert (converted == expected).all()


def test_convert_default_chunks_are_about_64_mib(tmp_path, monkeypatch):
    minari_dataset("test/rows-v0", [6, 6])
    sizes = _recording(monkeypatch)
    monkeypatch.setattr(convert_module, "_CHUNK_BYTES", 5 * load_minari("test/rows-v0")[:1].bytes())
    assert main(["convert", "test/rows-v0", str(tmp_path / "x"), "--to", "memmap"]) == 0
    assert sizes == [5, 5, 2]


# ------------------------------------------------------------------ bench
STUB_RUN = """
import argparse, json
parser = argparse.ArgumentParser()
parser.add_argument("--rows", default="sample,per")
parser.add_argument("--json")
parser.add_argument("--vs-torchrl", action="store_true")
args = parser.parse_args()
rows = {name: {"unit": "items/s", "lib": 50.0 + i, "limit": 100.0}
        for i, name in enumerate(args.rows.split(","))}
print("table of", sorted(rows))
with open(args.json, "w") as f:
    json.dump({"rows": rows, "torchrl": {}, "loader": []}, f)
"""


def test_bench_runs_the_named_scenarios_and_plots_them(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "run.py").write_text(textwrap.dedent(STUB_RUN))
    shutil.copy(ROOT / "benchmarks" / "plot.py", tmp_path / "bench" / "plot.py")
    argv = ["bench", "sample", "slice", "--benchmarks", str(tmp_path / "bench")]
    argv += ["--json", str(tmp_path / "run.json"), "--plot", str(tmp_path / "bench.png")]
    assert main(argv) == 0
    assert sorted(json.loads((tmp_path / "run.json").read_text())["rows"]) == ["sample", "slice"]
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_finds_the_checkouts_benchmarks():
    from rbdata.cli.bench import benchmarks_dir

    assert (benchmarks_dir() / "run.py").is_file() and (benchmarks_dir() / "plot.py").is_file()
