"""The book's table style: every table a chapter shows goes through :func:`present`.

Why: pandas' ``Styler`` writes bare ``<table>`` markup, a float index prints as ``0.500000``, a
0..N index means nothing to a reader, and a missing value printed as ``nan`` does not say why it
is missing. The spacing of the cells is the book's CSS (``book/_static/tables.css``).
"""

from __future__ import annotations

import numbers

import pandas as pd


def present(table: pd.DataFrame | pd.Series, *, digits: int = 3, missing: str = "—", formats: dict | None = None,
            index_digits: int | None = None):
    """``table`` as a ``Styler`` for display.

    ``table`` is a DataFrame, or a Series shown as a one-column table. ``digits`` is the number of
    decimals of every float cell that ``formats`` (``{column: format string or callable}``) does
    not name. ``missing`` is the word shown for NaN, None and infinite cells: say why they are
    missing ("not reached", "no finite minimiser", "baseline"); a dash only when there is nothing
    to say. ``index_digits`` is the number of decimals of a float index and of float column labels
    (by default as many as their values need, at most ``digits``). A plain 0..N index is hidden;
    any other index is kept, since it names the rows.
    """
    if isinstance(table, pd.Series):
        table = table.to_frame()
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"table must be a pandas DataFrame or Series; got {type(table).__name__}.")
    if digits < 0:
        raise ValueError(f"digits must be >= 0; got {digits}.")
    shown = table.copy()
    numeric = shown.select_dtypes("number").columns
    shown[numeric] = shown[numeric].where(~shown[numeric].isin([float("inf"), float("-inf")]))
    styler = shown.style.format(precision=digits, na_rep=missing, thousands=None)
    for column, fmt in (formats or {}).items():
        if column not in shown.columns:
            raise KeyError(f"formats names column {column!r}, which the table does not have; its columns: "
                           f"{list(shown.columns)}.")
        styler = styler.format(fmt, subset=[column], na_rep=missing)
    bare = isinstance(shown.index, pd.RangeIndex) and shown.index.name is None
    if bare:
        styler = styler.hide(axis="index")
    for axis, labels in (("index", shown.index), ("columns", shown.columns)):
        if axis == "index" and bare:
            continue
        for level in range(labels.nlevels):  # a float level prints with the decimals it needs
            values = labels.get_level_values(level)
            if pd.api.types.is_float_dtype(values):
                places = index_digits if index_digits is not None else _places(values, digits)
                styler = styler.format_index(precision=places, axis=axis, level=level)
    return styler


def _places(values, most: int) -> int:
    """The fewest decimals (at most ``most``) that print every value exactly."""
    for places in range(most + 1):
        if all(not isinstance(v, numbers.Real) or round(float(v), places) == float(v) for v in values):
            return places
    return most
