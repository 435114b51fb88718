"""``rbdata inspect DIR``: what a replay-buffer dump holds, as text, JSON or histograms."""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the work imports torch on use, so that building the parser stays fast
    import torch
    from tensordict import TensorDictBase

__all__ = ["add_parser", "run", "summarize"]

POLICY_VERSION_KEY = "policy_version"


def add_parser(sub: Any) -> None:
    """Register ``inspect`` on the sub-parsers of the ``rbdata`` parser."""
    parser = sub.add_parser(
        "inspect",
        help="describe a dump: size, components, keys, priorities, policy ages",
        description="Describe a replay-buffer dump: its length and capacity (and the memory "
        "they take: bytes an item, resident for the items held, for the whole capacity), its "
        "storage, "
        "sampler and writer, its keys with shapes and dtypes, and summaries of its priorities "
        "(prioritized samplers), policy versions (a 'policy_version' entry) and trajectory "
        "lengths (('next', 'done') flags or an 'episode' entry).",
    )
    parser.add_argument("path", help="directory written by ReplayBuffer.dumps")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--plot",
        metavar="OUT.png",
        help="also draw histograms of priorities, policy versions and trajectory lengths "
        "(needs matplotlib, in the 'examples' extra)",
    )
    parser.set_defaults(run=run)


def summarize(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A dump's summary (JSON-able) and the series its histograms are drawn from.

    Args:
        path: a directory written by ``ReplayBuffer.dumps``.

    Returns:
        ``(summary, series)``: ``series`` maps ``"priority weights"``,
        ``"policy versions"`` and ``"trajectory lengths"`` to tensors, for those
        the dump has.

    Raises:
        CheckpointError: if the dump is missing, partial or of another format.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictReplayBuffer
        >>> from rbdata.cli.inspect import summarize
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> _ = rb.extend(TensorDict({"obs": torch.zeros(4, 2),
        ...                           "policy_version": torch.tensor([0, 1, 1, 3])}, [4]))
        >>> path = tempfile.mkdtemp() + "/dump"
        >>> rb.dumps(path)
        >>> summary, series = summarize(path)
        >>> summary["length"], summary["capacity"], summary["keys"]["obs"]
        (4, 10, {'shape': [2], 'dtype': 'float32'})
        >>> summary["policy_versions"]["age_max"], sorted(series)
        (3, ['policy versions'])
    """
    import torch

    from rbdata.checkpoint import read_dump

    manifest, state, _ = read_dump(path)
    length = int(manifest.get("length") or 0)
    components = manifest.get("components", {})
    summary: dict[str, Any] = {
        "path": str(path),
        "length": length,
        "capacity": manifest.get("max_size"),
        "write_count": manifest.get("write_count"),
        **{name: components.get(name) for name in ("storage", "sampler", "writer")},
        "keys": {
            key: {"shape": spec.get("shape"), "dtype": spec.get("dtype")}
            for key, spec in (manifest.get("spec") or {}).items()
        },
    }
    item_bytes = _item_bytes(summary["keys"])
    if item_bytes is not None:
        capacity = summary["capacity"]
        summary["bytes"] = {
            "item": item_bytes,
            "resident": length * item_bytes,
            "capacity": None if capacity is None else int(capacity) * item_bytes,
        }
    series: dict[str, torch.Tensor] = {}
    leaves = (state.get("_sampler") or state.get("sampler") or {}).get("leaves")
    if isinstance(leaves, torch.Tensor) and leaves.numel() >= length > 0:
        series["priority weights"] = weights = leaves[:length].double()
        summary["priority_weights"] = _stats(weights)  # (priority + eps) ** alpha
    items = _items(path)
    if items is not None:
        series.update(_item_series(items, summary))
    return summary, series


def run(args: argparse.Namespace) -> int:
    """Print the summary of the dump at ``args.path``; draw it with ``--plot``."""
    summary, series = summarize(args.path)
    if args.plot:
        from rbdata.cli._histograms import draw_histograms

        draw_histograms(series, args.plot, title=f"rbdata inspect {args.path}")
        summary["plot"] = str(args.plot)
    print(json.dumps(summary, indent=2) if args.json else _text(summary))
    return 0


def _items(path: str | os.PathLike[str]) -> TensorDictBase | None:
    """The dump's items oldest first, or None when they are not TensorDicts in a 1-D storage."""
    from rbdata.datasets import load_offline_data

    try:
        return load_offline_data(path, progress=False)
    except ValueError:
        return None


def _item_series(items: TensorDictBase, summary: dict[str, Any]) -> dict[str, torch.Tensor]:
    series: dict[str, torch.Tensor] = {}
    if POLICY_VERSION_KEY in items.keys():
        versions = items[POLICY_VERSION_KEY].reshape(items.shape[0], -1)[:, 0].long()
        series["policy versions"] = versions
        newest = int(versions.max())
        ages = newest - versions
        summary["policy_versions"] = {
            "oldest": int(versions.min()),
            "newest": newest,
            "age_mean": float(ages.double().mean()),
            "age_max": int(ages.max()),
        }
    lengths = _trajectory_lengths(items)
    if lengths is not None and lengths.numel():
        series["trajectory lengths"] = lengths
        summary["trajectories"] = {"count": lengths.numel(), **_stats(lengths.double())}
    return series


def _trajectory_lengths(items: TensorDictBase) -> torch.Tensor | None:
    """Lengths of the trajectories that end in the items (by done flags, else episode ids)."""
    import torch

    keys = items.keys(include_nested=True)
    if ("next", "done") in keys:
        done = items["next", "done"].reshape(items.shape[0], -1).any(-1)
        ends = done.nonzero().squeeze(-1)
        lengths: torch.Tensor = torch.diff(ends, prepend=torch.tensor([-1]))
        return lengths if ends.numel() else None
    if "episode" in keys:
        counts: torch.Tensor = torch.unique_consecutive(
            items["episode"].reshape(-1), return_counts=True
        )[1]
        return counts
    return None


def _item_bytes(keys: dict[str, dict[str, Any]]) -> int | None:
    """Bytes one item's leaves take, from the dump's spec; None without a full spec."""
    import torch

    total = 0
    for spec in keys.values():
        shape, dtype = spec.get("shape"), getattr(torch, str(spec.get("dtype")), None)
        if not isinstance(shape, list) or not isinstance(dtype, torch.dtype):
            return None
        total += math.prod(shape) * dtype.itemsize
    return total or None


def _stats(values: torch.Tensor) -> dict[str, float]:
    return {
        "min": float(values.min()),
        "mean": float(values.mean()),
        "max": float(values.max()),
    }


def _text(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['path']}: {summary['length']} of {summary['capacity']} items, "
        f"{summary['write_count']} written",
        f"storage {summary['storage']}, sampler {summary['sampler']}, writer {summary['writer']}",
    ]
    if "bytes" in summary:
        b = summary["bytes"]
        capacity = "?" if b["capacity"] is None else _size(b["capacity"])
        lines.append(
            f"memory: {_size(b['resident'])} resident of {capacity} capacity "
            f"({b['item']} bytes an item; rows not yet written cost nothing)"
        )
    if summary["keys"]:
        width = max(len(key) for key in summary["keys"])
        lines.append("keys:")
        lines += [
            f"  {key:<{width}}  {spec['dtype']:<8} {spec['shape']}"
            for key, spec in summary["keys"].items()
        ]
    if "priority_weights" in summary:
        lines.append(
            "priority weights ((p + eps) ** alpha): " + _range(summary["priority_weights"])
        )
    if "policy_versions" in summary:
        v = summary["policy_versions"]
        lines.append(
            f"policy versions {v['oldest']} .. {v['newest']}: age mean {v['age_mean']:.2f}, "
            f"max {v['age_max']}"
        )
    if "trajectories" in summary:
        t = summary["trajectories"]
        lines.append(f"trajectories: {t['count']} ending here, length " + _range(t))
    if "plot" in summary:
        lines.append(f"histograms: {summary['plot']}")
    return "\n".join(lines)


def _range(stats: dict[str, float]) -> str:
    return f"min {stats['min']:.4g}, mean {stats['mean']:.4g}, max {stats['max']:.4g}"


def _size(nbytes: int) -> str:
    """``nbytes`` in binary units: ``512 B``, ``1.5 KiB``, ``26.3 GiB``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value, exponent = float(nbytes), 0
    while value >= 1024 and exponent < len(units) - 1:
        value, exponent = value / 1024, exponent + 1
    return f"{nbytes} B" if exponent == 0 else f"{value:.3g} {units[exponent]}"
