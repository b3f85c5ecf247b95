"""The book's table style: every table a chapter shows goes through :func:`present`.

Why: pandas' ``Styler`` writes bare ``<table>`` markup, a float index prints as ``0.500000``, a
0..N index means nothing to a reader, and a missing value printed as ``nan`` does not say why it
is missing. Numbers get one rule (:func:`column_format`): a column's decimals are fixed, three
significant digits of its smallest value and never more than :data:`MAX_DECIMALS`, a value
too small for them is written in scientific notation, never as ``0.000``, and digits are grouped
by thousands (``106,566,672``, not ``106566672``), integers too, in the cells and in numeric row and
column names (a sample size ``30,000``). The spacing of the cells
is the book's CSS (``book/_static/book.css``).
"""

from __future__ import annotations

import functools
import html
import math
import numbers
import re

import numpy as np
import pandas as pd

__all__ = ["MAX_DECIMALS", "FORMATS", "column_format", "p_text", "present"]

MAX_DECIMALS = 4
"""The most digits after the decimal point a table cell shows (the browser check fails a page with more)."""


def _p_value(v: float) -> str:
    return "&lt; 0.001" if v < 0.001 else f"{v:.3f}"  # HTML: the Styler writes cells unescaped


def p_text(p: float) -> str:
    """A p-value for prose, as the tables show it: ``"p < 0.001"`` below 0.001, else ``"p = 0.012"`` (three
    decimals), so that a sentence never says ``p = 0.000`` where its table says ``< 0.001``."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p_text takes a p-value in [0, 1]; got {p!r}.")
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


FORMATS = {
    "bleu": "{:.1f}",
    "p": _p_value,
    "ms": "{:,.1f} ms",
    "s": "{:,.1f} s",
    "min": "{:,.1f} min",
    "count": "{:,.0f}",
    "ratio": "{:,.2f}x",
    "sci": "{:.1e}",
}
"""Named formats of the book's quantities, usable as values of :func:`present`'s ``formats``: BLEU with
one decimal, p-values with three (``< 0.001`` below), times with their unit, counts, ratios as ``1.23x``
(these three with thousands separators), and scientific notation with two significant digits."""


def column_format(values, digits: int | None = None):
    """The formatter of one float column: ``digits`` decimals, or (``None``) the decimals that show
    three significant digits of the smallest magnitude among its finite non-zero values, at most
    :data:`MAX_DECIMALS` (none when every value is a whole number); a column whose smallest value is
    below 1e-3 or at least 1e6 is in scientific notation. A non-zero value that the decimals would
    show as zero is written in scientific notation. Digits are grouped by thousands (``2,593.4``: a
    reader would have to count the digits of ``106566672``)."""
    finite = np.abs(np.asarray([v for v in values if isinstance(v, numbers.Real) and math.isfinite(v) and v != 0],
                               dtype=float))
    if digits is None:
        if finite.size == 0:
            digits = 0
        else:
            typical = float(finite.min())
            if typical < 1e-3 or typical >= 1e6:
                return lambda v: f"{v:.2e}"
            digits = int(min(MAX_DECIMALS, max(0, 2 - math.floor(math.log10(typical)))))
            if all(float(v).is_integer() for v in finite):
                digits = 0

    def fmt(v):
        if v != 0 and abs(v) < 0.5 * 10.0 ** -digits:
            return f"{v:.1e}"
        return f"{v:,.{digits}f}"

    return fmt


_DECIMALS_IN = re.compile(r"\.(\d+)[fe%]")


def present(table: pd.DataFrame | pd.Series, *, digits: int | None = None, missing: str = "—",
            formats: dict | None = None, index_digits: int | None = None, labels: dict | None = None):
    """``table`` as a ``Styler`` for display.

    ``table`` is a DataFrame, or a Series shown as a one-column table. Every float cell that
    ``formats`` does not name follows :func:`column_format` (``digits``: fixed decimals for all
    of them, at most :data:`MAX_DECIMALS`; ``None``: chosen per column). ``formats`` maps a column to
    a format string, a callable, or a name of :data:`FORMATS` (``"bleu"``, ``"p"``, ``"ms"``, ...); a
    format string with more than :data:`MAX_DECIMALS` decimals is refused. ``missing`` is the word
    shown for NaN, None and infinite cells: say why they are missing ("not reached", "no finite
    minimiser", "baseline"); a dash only when there is nothing to say. ``index_digits`` is the number
    of decimals of a float index and of float column labels (by default as many as their values
    need, at most :data:`MAX_DECIMALS`). A plain 0..N index is hidden; any other index is kept, since
    it names the rows. ``labels`` maps column labels (of any level) to the headers a reader sees,
    such as ``{"median_ms": "median"}``: the table keeps the names the code reads it by (and that
    ``formats`` uses), the page shows words. A header with an underscore that ``labels`` does not map
    (a code name such as ``kl_floor``, in a column label or an index name) is refused.
    """
    if isinstance(table, pd.Series):
        table = table.to_frame()
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"table must be a pandas DataFrame or Series; got {type(table).__name__}.")
    if digits is not None and (isinstance(digits, bool) or not isinstance(digits, int)
                               or not 0 <= digits <= MAX_DECIMALS):
        raise ValueError(f"digits must be an integer in [0, {MAX_DECIMALS}] (or None: chosen per column); got {digits!r}.")
    shown = table.copy()
    for column in shown.columns:  # a transposed table keeps numbers as objects: they are floats to a reader
        values = shown[column]
        if values.dtype == object and values.notna().any() and all(
                isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values.dropna()):
            shown[column] = values.astype(float)
    labels = dict(labels or {})
    levels = [set(shown.columns.get_level_values(level)) for level in range(shown.columns.nlevels)]
    _name_axes(shown, labels, levels)
    numeric = shown.select_dtypes("number").columns
    shown[numeric] = shown[numeric].where(~shown[numeric].isin([float("inf"), float("-inf")]))
    # text cells and row names escaped for HTML: a SentencePiece control token such as <unk> in a cell would
    # otherwise be read as a tag and vanish from the page (the Styler writes cells as they are)
    styler = shown.style.format(precision=digits if digits is not None else 3, na_rep=missing, thousands=",",
                                escape="html")
    formats = dict(formats or {})
    for column, fmt in formats.items():
        if column not in shown.columns:
            raise KeyError(f"formats names column {column!r}, which the table does not have; its columns: "
                           f"{list(shown.columns)}.")
        if isinstance(fmt, str) and fmt in FORMATS:
            fmt = FORMATS[fmt]
        if isinstance(fmt, str) and any(int(d) > MAX_DECIMALS for d in _DECIMALS_IN.findall(fmt)):
            raise ValueError(f"formats[{column!r}] = {fmt!r} shows more than {MAX_DECIMALS} decimals; a reader cannot "
                             "compare such numbers: use fewer, or scientific notation ('sci').")
        styler = styler.format(fmt, subset=[column], na_rep=missing, escape="html")
    for column in shown.columns:
        if column not in formats and pd.api.types.is_float_dtype(shown[column]):
            styler = styler.format(column_format(shown[column].tolist(), digits), subset=[column], na_rep=missing)
    bare = isinstance(shown.index, pd.RangeIndex) and shown.index.name is None
    if bare:
        styler = styler.hide(axis="index")
    for axis, names in (("index", shown.index), ("columns", shown.columns)):
        if axis == "index" and bare:
            continue
        for level in range(names.nlevels):  # a float level prints with the decimals it needs
            values = names.get_level_values(level)
            floats = pd.api.types.is_float_dtype(values) or (values.dtype == object and len(values) > 0 and all(
                isinstance(v, float) for v in values))
            integers = not floats and (pd.api.types.is_integer_dtype(values) or (
                values.dtype == object and len(values) > 0 and all(_integer(v) for v in values)))
            places = None
            if floats:
                places = index_digits if index_digits is not None else _places(values, MAX_DECIMALS)
                styler = styler.format_index(precision=places, thousands=",", axis=axis, level=level)
            elif integers:  # row names such as sample sizes group their digits as the cells do (30,000)
                styler = styler.format_index("{:,}", axis=axis, level=level)
            if axis == "columns" and labels.keys() & levels[level]:  # words for the names labels gives
                styler = styler.format_index(functools.partial(_header, labels, places), axis=axis, level=level)
            elif not floats and not integers:
                styler = styler.format_index(escape="html", axis=axis, level=level)
    return styler


def _name_axes(shown: pd.DataFrame, labels: dict, levels: list[set]) -> None:
    """Check ``labels`` against the table's columns and axis names, refuse a code name as a header
    (:func:`_check_words`), and give the index and column levels the reader's words (a pivot's "k", a row
    name's "truth"); ``set_names`` makes new indexes, so the caller's table keeps its own."""
    axis_names = {n for n in (*shown.index.names, *shown.columns.names) if n is not None}
    unknown = [name for name in labels if not any(name in values for values in levels) and name not in axis_names]
    if unknown:
        raise KeyError(f"labels names column {unknown[0]!r}, which the table does not have; its columns: "
                       f"{list(shown.columns)}.")
    _check_words(shown, labels)
    shown.index = shown.index.set_names([labels.get(n, n) for n in shown.index.names])
    shown.columns = shown.columns.set_names([labels.get(n, n) for n in shown.columns.names])


def _check_words(table: pd.DataFrame, labels: dict) -> None:
    """Refuse a header a reader would see as a code name (a word joined by ``_``, such as ``kl_floor``):
    the columns' labels of every level and the names of the index and column levels. Why: a table is
    read by people; ``labels`` maps the names code uses to words."""
    names = [n for level in range(table.columns.nlevels) for n in table.columns.get_level_values(level)]
    names += [n for n in (*table.index.names, *table.columns.names) if n is not None]
    for name in names:
        if isinstance(name, str) and "_" in name and name not in labels:
            raise ValueError(f"the table has a header {name!r}, a code name: give the reader words, e.g. "
                             f"present(..., labels={{{name!r}: {name.replace('_', ' ')!r}}}), or rename the column.")


def _header(labels: dict, places: int | None, name) -> str:
    """A column header as :func:`present` shows it: ``labels``' words for ``name``, else ``name`` itself
    (a float with ``places`` decimals), escaped for HTML."""
    if name in labels:
        return html.escape(str(labels[name]))
    if places is not None and isinstance(name, numbers.Real):
        return f"{name:,.{places}f}"
    return f"{name:,}" if _integer(name) else html.escape(str(name))


def _integer(value) -> bool:
    """A whole number of a table's labels (not a bool, which reads as a word)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _places(values, most: int) -> int:
    """The fewest decimals (at most ``most``) that print every value exactly."""
    for places in range(most + 1):
        if all(not isinstance(v, numbers.Real) or round(float(v), places) == float(v) for v in values):
            return places
    return most
