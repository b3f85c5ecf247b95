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


TEXT_SIZE_KEY = "gmlm:smallest-text-px"
"""The PNG text chunk in which a figure shown in a notebook records its smallest text, in image pixels
(the font size in points times the image's dots per inch over 72): the book's browser check divides it
by the image's width and multiplies by the width the page shows it at, so it reads the text size a reader
sees (``tests/browser.py``, ``MIN_TEXT_PT``)."""


def smallest_text_pt(fig) -> float | None:
    """The smallest font size, in points, of the visible non-empty text of ``fig`` (titles, labels, tick
    labels, legends, annotations); ``None`` when it holds no text."""
    from matplotlib.text import Text

    fig.draw_without_rendering()  # tick labels and legends get their text when the figure is drawn
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
             and (t.axes is None or t.axes.get_visible())]
    return min(sizes) if sizes else None


def retina_png(fig, base64: bool = False):
    """``fig`` as IPython's retina PNG (drawn at twice ``fig.dpi``, shown at half its pixel size), with its
    smallest text recorded in the PNG (:data:`TEXT_SIZE_KEY`): ``(png, {"width", "height"})`` as
    IPython's ``retina_figure`` returns it, ``None`` for an empty figure."""
    from IPython.core.pylabtools import retina_figure

    smallest = smallest_text_pt(fig)
    metadata = {} if smallest is None else {TEXT_SIZE_KEY: f"{smallest * 2 * fig.dpi / 72:.3f}"}
    return retina_figure(fig, base64=base64, metadata=metadata)


def _retina_inline() -> None:
    """Ask IPython's inline backend for retina PNGs that record their smallest text (:func:`retina_png`),
    when this runs in IPython (a notebook); elsewhere nothing."""
    try:
        from IPython import get_ipython
        from matplotlib.figure import Figure
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        set_matplotlib_formats("retina")
        shell.display_formatter.formatters["image/png"].for_type(Figure, lambda fig: retina_png(fig, base64=True))


def colors(k: int) -> list:
    """The first ``k`` colours of the book's palette."""
    return sns.color_palette(PALETTE, k)
