"""Histograms drawn by ``rbdata inspect --plot`` (matplotlib, from the ``examples`` extra)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch


def draw_histograms(
    series: dict[str, torch.Tensor], out: str | os.PathLike[str], *, title: str
) -> None:
    """Save one histogram per series side by side in the image file ``out``.

    A series the dump lacks is not drawn; with none at all, the figure says so.

    Raises:
        ImportError: if matplotlib is not installed.
    """
    figure = _figure_class()
    panels = max(1, len(series))
    fig = figure(figsize=(4.5 * panels, 3.6))
    axes = fig.subplots(1, panels, squeeze=False)
    for ax, (name, values) in zip(axes[0], series.items(), strict=False):
        data = values.double().numpy()
        integral = not values.is_floating_point()
        bins: Any = _integer_bins(data) if integral else min(50, max(5, data.size // 10))
        ax.hist(data, bins=bins, color="#3b75af", edgecolor="white", linewidth=0.5)
        ax.set_title(f"{name} (n = {data.size})", fontsize=10)
        ax.set_xlabel(name)
        ax.set_ylabel("count")
    if not series:
        axes[0][0].text(0.5, 0.5, "no priorities, policy versions\nor trajectories", ha="center")
        axes[0][0].set_axis_off()
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def _integer_bins(data: Any) -> Any:
    """One bin per integer value, or 50 bins over a wide range."""
    low, high = float(data.min()), float(data.max())
    if high - low <= 50:
        return np.arange(low - 0.5, high + 1.5)
    return 50


def _figure_class() -> Any:
    """The Figure class of matplotlib (drawn without pyplot: no backend or global state touched)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            f"--plot needs matplotlib: pip install 'rbdata[examples]' ({err})."
        ) from err
    return Figure
