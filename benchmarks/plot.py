"""Bar chart of a benchmark run's ratios: rbdata (and torchrl) throughput / plain-torch limit.

Usage::

    python benchmarks/run.py --rows sample,per,loader --json run.json
    python benchmarks/plot.py run.json ratios.png

Reads the file that ``run.py --json OUT`` writes (``{"rows": ..., "torchrl":
..., "loader": ...}``) or the one JSON line of ``run.py --json`` (its rows
alone). A ratio of 1.0 is as fast as the irreducible work; rows that failed
or have no limit are left out. Needs matplotlib (the ``examples`` extra).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

Bar = tuple[str, float, float | None]  # label, rbdata ratio, torchrl ratio


def ratios(run: dict[str, Any]) -> list[Bar]:
    """One bar per row with a limit (rbdata / limit, torchrl / limit), then the loader's."""
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
    for row in run.get("loader", []) if full else []:
        name = row["name"] if row["name"].startswith("loader") else f"loader: {row['name']}"
        bars.append((name, row["ratio"], None))
    return bars


def plot(run: dict[str, Any], out: str | Path, *, title: str = "") -> None:
    """Draw the ratios of ``run`` as horizontal bars into the image file ``out``."""
    from matplotlib.figure import Figure

    bars = ratios(run)
    if not bars:
        raise ValueError("the run has no row with a limit to compare with; nothing to plot.")
    fig = Figure(figsize=(8, 0.45 * len(bars) + 1.4))
    ax = fig.subplots()
    ys = list(range(len(bars)))[::-1]
    with_torchrl = any(b[2] is not None for b in bars)
    height = 0.4 if with_torchrl else 0.7
    ax.barh(
        [y + (height / 2 if with_torchrl else 0) for y in ys],
        [b[1] for b in bars],
        height=height,
        color="#3b75af",
        label="rbdata",
    )
    if with_torchrl:
        ax.barh(
            [y - height / 2 for y, b in zip(ys, bars, strict=True) if b[2] is not None],
            [b[2] for b in bars if b[2] is not None],
            height=height,
            color="#d9822b",
            label="torchrl",
        )
    for y, (_, ratio, _) in zip(ys, bars, strict=True):
        ax.text(ratio, y + (height / 2 if with_torchrl else 0), f" {ratio:.2f}", va="center")
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlim(0, 1.2 * max(1.0, *(b[1] for b in bars), *(b[2] or 0 for b in bars)))
    if with_torchrl:
        ax.legend(loc="best")
    ax.set_yticks(ys, [b[0] for b in bars])
    ax.set_xlabel("throughput / plain-torch limit (1.0 = as fast as the irreducible work)")
    ax.set_title(title or "rbdata benchmark ratios")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


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
