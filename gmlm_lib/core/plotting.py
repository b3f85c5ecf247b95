"""The book's figure style, applied once per notebook with :func:`set_style`."""

from __future__ import annotations

import matplotlib as mpl
import seaborn as sns

PALETTE = "colorblind"


def set_style() -> None:
    """Seaborn ``whitegrid`` theme, colour-blind-safe palette, readable sizes, crisp output.

    In a notebook (IPython), figures are shown as "retina" PNGs: drawn at twice ``figure.dpi`` and
    displayed at half their pixel size, so every displayed pixel has at least two image pixels and the
    figures stay sharp on high-density screens and when the page scales them down to its column (the
    book's browser check, ``MIN_DENSITY`` of ``tests/browser.py``)."""
    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE, font_scale=1.0)
    mpl.rcParams.update({
        "figure.dpi": 110,
        "savefig.dpi": 220,
        "figure.constrained_layout.use": True,
        "axes.titlesize": "medium",
        "legend.frameon": False,
    })
    _retina_inline()


def _retina_inline() -> None:
    """Ask IPython's inline backend for retina PNGs, when this runs in IPython (a notebook); elsewhere nothing."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


def colors(k: int) -> list:
    """The first ``k`` colours of the book's palette."""
    return sns.color_palette(PALETTE, k)
