"""Bar chart of a benchmark run's ratios: rbdata (and torchrl) throughput / plain-torch limit.

Usage::

    python benchmarks/run.py --rows sample,per,loader --json run.json
    python benchmarks/plot.py run.json ratios.png

Reads the file that ``run.py --json OUT`` writes (``{"rows": ..., "torchrl":
..., "loader": ...}``) or the one JSON line of ``run.py --json`` (its rows
alone). Buffer rows are drawn as throughput / plain-torch limit (1.0 is as fast
as the irreducible work; rows that failed or have no limit are left out), the
loader rows, in a panel of their own, as training steps per second. Needs
matplotlib (the ``examples`` extra).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

Bar = tuple[str, float, float | None]  # label, rbdata ratio, torchrl ratio
Step = tuple[str, float]  # label, training steps per second


def ratios(run: dict[str, Any]) -> list[Bar]:
    """One bar per buffer row with a limit: (label, rbdata / limit, torchrl / limit)."""
    full = "rows" in run  # written by run.py --json OUT, else run.py --json's line
    rows = run["rows"] if full else run
    theirs = run.get("torchrl", {}) if full else {}
    bars: list[Bar] = []
    for name, row in rows.items():
        if "error" in row or not row.get("limit"):
            continue
        other = theirs.get(name, {}).get("lib")
        label = f"{name} (vs {row['limit_name']})" if "limit_name" in row else name
        bars.append((label, row["lib"] / row["limit"], other / row["limit"] if other else None))
    return bars


def loader_steps(run: dict[str, Any]) -> list[Step]:
    """The loader rows as training steps per second (each measured once: repeats dropped).

    run.py's loader table also lists ratios between its rows ("loader prefetch=2 vs
    plain-torch prefetch limit"), rows that repeat another row's steps/s; a chart draws
    one measure per axis, so only the steps/s are kept, labelled without the "(vs ...)"
    that named the row each ratio divided by.
    """
    steps: list[Step] = []
    seen: set[float] = set()
    for row in run.get("loader", []) if "rows" in run else []:
        if row["steps_per_s"] in seen:
            continue
        seen.add(row["steps_per_s"])
        label = row["name"].split(" (vs ")[0]
        steps.append((label.removeprefix("loader: "), row["steps_per_s"]))
    return steps


def plot(run: dict[str, Any], out: str | Path, *, title: str = "") -> None:
    """Draw ``run`` into the image file ``out``: one panel per measure.

    The buffer rows as throughput / plain-torch limit (rbdata and torchrl), and the
    loader rows, when the run has them, as training steps per second.
    """
    from matplotlib.figure import Figure

    bars, steps = ratios(run), loader_steps(run)
    if not bars and not steps:
        raise ValueError("the run has no row with a limit to compare with; nothing to plot.")
    heights = [0.42 * len(b) + 1.0 for b in (bars, steps) if b]
    fig = Figure(figsize=(9, sum(heights) + 0.6), layout="constrained")
    axes = fig.subplots(len(heights), 1, height_ratios=heights, squeeze=False)[:, 0]
    if bars:
        _ratio_panel(axes[0], bars)
    if steps:
        _steps_panel(axes[-1], steps)
    if title:
        fig.suptitle(title)
    fig.savefig(out, dpi=100, bbox_inches="tight")


def _ratio_panel(ax: Any, bars: list[Bar]) -> None:
    ys = list(range(len(bars)))[::-1]
    with_torchrl = any(b[2] is not None for b in bars)
    height = 0.4 if with_torchrl else 0.7
    shift = height / 2 if with_torchrl else 0.0
    ax.barh(
        [y + shift for y in ys],
        [b[1] for b in bars],
        height=height,
        color="#3b75af",
        label="rbdata",
    )
    if with_torchrl:
        ax.barh(
            [y - shift for y, b in zip(ys, bars, strict=True) if b[2] is not None],
            [b[2] for b in bars if b[2] is not None],
            height=height,
            color="#d9822b",
            label="torchrl 0.14.1",
        )
    for y, (_, ratio, _) in zip(ys, bars, strict=True):
        ax.text(ratio, y + shift, f" {ratio:.2f}", va="center", fontsize=9)
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlim(0, 1.25 * max(1.0, *(b[1] for b in bars), *(b[2] or 0 for b in bars)))
    ax.set_yticks(ys, [b[0] for b in bars])
    ax.set_xlabel("throughput / plain-torch limit (dashed line: as fast as the limit)")
    ax.set_title("Buffer operations", loc="left")
    if with_torchrl:
        ax.legend(loc="lower right")


def _steps_panel(ax: Any, steps: list[Step]) -> None:
    ys = list(range(len(steps)))[::-1]
    ax.barh(ys, [s[1] for s in steps], height=0.7, color="#5a9e6f")
    for y, (_, value) in zip(ys, steps, strict=True):
        ax.text(value, y, f" {value:,.0f}", va="center", fontsize=9)
    ax.set_xlim(0, 1.2 * max(s[1] for s in steps))
    ax.set_yticks(ys, [s[0] for s in steps])
    ax.set_xlabel("training steps per second (a simulated step; higher is faster)")
    ax.set_title("Training loop: sampling beside a training step", loc="left")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="JSON written by run.py --json OUT")
    parser.add_argument("out", type=Path, help="image file to write (.png, .svg, ...)")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    plot(json.loads(args.run.read_text()), args.out, title=args.title)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
