"""The book's figure style, applied once per notebook with :func:`set_style`."""

from __future__ import annotations

import matplotlib as mpl
import seaborn as sns

PALETTE = "colorblind"


def set_style() -> None:
    """Seaborn ``whitegrid`` theme, colour-blind-safe palette, readable sizes, crisp output."""
    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE, font_scale=1.0)
    mpl.rcParams.update({
        "figure.dpi": 110,
        "savefig.dpi": 150,
        "figure.constrained_layout.use": True,
        "axes.titlesize": "medium",
        "legend.frameon": False,
    })


def colors(k: int) -> list:
    """The first ``k`` colours of the book's palette."""
    return sns.color_palette(PALETTE, k)
