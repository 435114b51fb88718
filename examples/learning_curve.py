"""The learning curve of offline_to_online.py: saved as CSV, drawn as PNG (matplotlib)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


class Curve:
    """The learning curve: one row per progress point, saved as CSV and drawn as PNG."""

    FIELDS = ("update", "phase", "eval_return", "collector_return", "offline_share", "loss")

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, **row: Any) -> None:
        self.rows.append({field: row.get(field, float("nan")) for field in self.FIELDS})

    def write_csv(self, path: Path) -> None:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.FIELDS)
            writer.writeheader()
            writer.writerows(self.rows)

    def plot(self, path: Path, title: str) -> bool:
        """Return and offline share against updates; False when matplotlib is missing."""
        try:
            from matplotlib.figure import Figure
        except ImportError:
            return False
        fig = Figure(figsize=(8, 5.5))
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(2, 1))
        updates = [r["update"] for r in self.rows]
        top.plot(updates, [r["eval_return"] for r in self.rows], "o-", label="greedy eval return")
        online = [r for r in self.rows if r["phase"] == "online"]
        top.plot(
            [r["update"] for r in online],
            [r["collector_return"] for r in online],
            "s--",
            label="collector return (last 10 episodes)",
        )
        top.set_ylabel("return")
        top.legend(loc="best")
        bottom.plot(updates, [r["offline_share"] for r in self.rows], "o-", color="#d9822b")
        bottom.set_ylabel("offline share")
        bottom.set_ylim(0, 1.05)
        bottom.set_xlabel("learner updates")
        offline_end = max(r["update"] for r in self.rows if r["phase"] == "offline")
        for ax in (top, bottom):
            ax.axvline(offline_end, color="gray", linestyle=":", linewidth=1)
        top.annotate(
            "fine-tuning starts",
            (offline_end, 0),
            xytext=(4, 4),
            textcoords="offset points",
            xycoords=("data", "axes fraction"),
            fontsize=8,
        )
        top.set_title(title)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        return True


def plot_lightning_log(metrics_csv: str | Path, path: Path, title: str) -> bool:
    """Draw a Lightning ``CSVLogger``'s ``metrics.csv``: loss, offline share and buffer size.

    Returns False when matplotlib is missing.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return False
    with open(metrics_csv, newline="") as f:
        rows = list(csv.DictReader(f))

    def series(name: str) -> tuple[list[float], list[float]]:
        points = [(float(r["step"]), float(r[name])) for r in rows if r.get(name)]
        return [p[0] for p in points], [p[1] for p in points]

    panels = [
        (name, label)
        for name, label in (
            ("loss", "TD loss"),
            ("offline_share", "offline share"),
            ("replay/size", "buffer size (replay/size)"),
        )
        if series(name)[0]
    ]
    if not panels:
        return False
    fig = Figure(figsize=(8, 2.2 * len(panels) + 0.8))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (name, label) in zip(axes, panels, strict=True):
        ax.plot(*series(name), ".-")
        ax.set_ylabel(label)
    axes[-1].set_xlabel("learner updates (trainer.global_step)")
    axes[0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True
