"""Numbers that a chapter's text quotes: ``glue(name, value)`` stores them in the cell's
output so that the book's markdown can show them (``{glue:text}`name:.3g```); the text never
holds a number typed by hand. Outside a Jupyter Book kernel (e.g. on Colab without
``myst-nb``) it does nothing."""

from __future__ import annotations


def glue(name: str, value, display: bool = False) -> None:
    """Store ``value`` under ``name`` for the book (via ``myst_nb.glue``). Returns None, so a
    cell that ends with a glue call shows nothing extra."""
    try:
        from myst_nb import glue as _glue
    except ImportError:
        return
    _glue(name, value, display=display)
