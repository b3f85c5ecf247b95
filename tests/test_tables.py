"""The book's table style: what a reader sees in each cell and index."""

import re

import numpy as np
import pandas as pd
import pytest

from gmlm_lib.core.tables import present


def _cells(styler):
    return re.findall(r"<t[hd][^>]*>([^<]*)</t[hd]>", styler.to_html())


def test_missing_values_are_words_and_a_bare_index_is_hidden():
    df = pd.DataFrame({"p-value": [np.nan, 0.01234, np.inf], "name": ["a", "b", "c"]})
    cells = _cells(present(df, digits=3, missing="baseline"))
    assert cells.count("baseline") == 2 and "0.012" in cells
    assert not any(c.strip().lower() in ("nan", "inf") for c in cells)
    assert "0" not in cells and "2" not in cells  # the 0..N index is not shown


def test_float_index_levels_print_with_the_decimals_they_need():
    single = pd.DataFrame({"v": [1.0, 2.0]}, index=pd.Index([0.5, 2.0], name="J"))
    assert {"0.5", "2.0"} <= set(_cells(present(single)))
    multi = pd.DataFrame({"v": [1.0, 2.0]}, index=pd.MultiIndex.from_tuples([(2.0, "a"), (1.5, "b")], names=["J", "s"]))
    cells = _cells(present(multi))
    assert {"2.0", "1.5"} <= set(cells) and "2.000000" not in cells
    pivot = pd.DataFrame([[1.0, 2.0]], index=pd.Index([0.3], name="confidence"),
                         columns=pd.Index([0.8, 0.95], name="dependency"))
    cells = _cells(present(pivot))
    assert {"0.3", "0.80", "0.95"} <= set(cells) and "0.800000" not in cells


def test_formats_and_bad_arguments():
    df = pd.DataFrame({"x": [1.23456]})
    assert "1.2x" in _cells(present(df, formats={"x": "{:.1f}x"}))
    with pytest.raises(KeyError, match="formats names column 'y'"):
        present(df, formats={"y": "{}"})
    with pytest.raises(TypeError, match="table must be a pandas DataFrame or Series"):
        present([1, 2])
    with pytest.raises(ValueError, match="digits must be >= 0"):
        present(df, digits=-1)
    assert "1.235" in _cells(present(df["x"]))
