"""Numbers that a chapter's text quotes: ``glue(name, value)`` stores them in the cell's
output so that the book's markdown can show them (``{glue:text}`name:.3g```); the text never
holds a number typed by hand. Outside a Jupyter Book kernel (e.g. on Colab without
``myst-nb``) it does nothing; inside a run of the book's runner it needs ``myst-nb``, since the
committed notebook must carry every glued value."""

from __future__ import annotations

import os


def glue(name: str, value, display: bool = False) -> None:
    """Store ``value`` under ``name`` for the book (via ``myst_nb.glue``). Returns None, so a
    cell that ends with a glue call shows nothing extra. ``name`` must be a non-empty string: the
    text cites it by name, and a glue stored under anything else could never be cited. A NumPy scalar is
    stored as the Python number it holds: its text form under NumPy 2 (``np.float64(0.5)``) is not a
    number a format such as ``:.1f`` can read."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"glue: name must be a non-empty string (the text cites {{glue:text}}`name`); got {name!r} "
                        f"for the value {value!r}.")
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()  # a NumPy scalar (np.float64, np.int64, np.bool_), without importing NumPy here
    try:
        from myst_nb import glue as _glue
    except ImportError:
        from gmlm_lib.book.provenance import ENV_PROFILE

        if os.environ.get(ENV_PROFILE) in ("smoke", "full"):  # a run of the book: its text needs the value
            raise ImportError(f"glue({name!r}): myst-nb is not installed, so the value would be lost and the "
                              "book's text would show nothing; install it (requirements.txt, or the wheels of "
                              "`make gpu-wheels` on a machine without a network).") from None
        return
    _glue(name, value, display=display)
