"""The book's table and figure style: what a reader sees in each cell and index, and how sharp a figure is."""

import re
import types

import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest
import seaborn as sns

from gmlm_lib.core import plotting
from gmlm_lib.core.tables import FORMATS, column_format, present
from browser import MIN_DENSITY


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
    with pytest.raises(ValueError, match=r"digits must be an integer in \[0, 4\]"):
        present(df, digits=-1)
    with pytest.raises(ValueError, match=r"digits must be an integer in \[0, 4\]"):
        present(df, digits=6)
    with pytest.raises(ValueError, match="shows more than 4 decimals"):
        present(df, formats={"x": "{:.6f}"})
    assert "1.23" in _cells(present(df["x"]))


def test_a_column_keeps_its_decimals_and_never_shows_more_than_four():
    """Three significant digits of a column's smallest value, at most 4 decimals; a column of tiny
    values in scientific notation; whole numbers without decimals; a value the decimals would round
    to zero in scientific notation (never 0.000)."""
    df = pd.DataFrame({"near one": [1.000024, 1.0027], "tiny": [0.00312, 0.0007], "counts": [13518.0, 20.0],
                       "mixed": [1411.006051, 7.69], "small": [0.5, 0.00004], "p": [0.0004, 0.2],
                       "bleu": [27.7834, 24.06]})
    cells = _cells(present(df, formats={"p": "p", "bleu": "bleu", "small": "{:.3f}"}))
    assert cells[len(df.columns):] == ["1.00", "3.12e-03", "13,518", "1,411.01", "0.500", "&lt; 0.001", "27.8",
                                       "1.00", "7.00e-04", "20", "7.69", "0.000", "0.200", "24.1"]
    assert all(not re.search(r"\d\.\d{5,}", c) for c in cells)
    assert _cells(present(pd.DataFrame({"x": [0.5, 0.00004]}), digits=3))[1:] == ["0.500", "4.0e-05"]
    assert _cells(present(pd.DataFrame({"x": [0.0123, 0.5]})))[1:] == ["0.0123", "0.5000"]


def test_large_values_get_no_decimals_and_a_label_never_more_than_four():
    """Three significant digits of a column whose smallest value has four integer digits leave no decimals;
    a float label exact at five decimals is shown with four (at most :data:`MAX_DECIMALS`)."""
    assert _cells(present(pd.DataFrame({"x": [1411.006051, 2500.7]})))[1:] == ["1,411", "2,501"]
    cells = _cells(present(pd.DataFrame({"x": [1.0, 2.0]}, index=pd.Index([0.12345, 0.5], name="J"))))
    assert "0.5000" in cells and not any(re.search(r"\d\.\d{5,}", c) for c in cells)


def test_a_transposed_table_and_an_object_index_still_get_the_rule():
    cost = pd.DataFrame({"a": {"steps": 120, "final loss": 4.690732, "commit": "abc"},
                         "b": {"steps": 120, "final loss": 0.327017, "commit": "def"}}).T  # every column object dtype
    cells = _cells(present(cost))
    assert "4.691" in cells and "0.327" in cells and "abc" in cells
    mixed = pd.DataFrame({"J": [2.0, 2.0, 0.5], "s": ["x", "y", "x"], "v": [1.0, 2.0, 3.0]}).astype({"J": object})
    cells = _cells(present(mixed.set_index(["J", "s"])))
    assert "2.0" in cells and "0.5" in cells and "2.000000" not in cells


def test_the_rules_at_their_edges():
    """Each rule at the value where it switches: a p-value of exactly 0.001 is shown, not "< 0.001";
    a column whose smallest value is 1e-3 keeps decimals and one at 1e6 turns scientific; a value of
    exactly half the last decimal is rounded, not written in scientific notation; zeros and NaN do not
    set a column's decimals; 0 and 4 decimals are allowed, and a format with 4."""
    assert [FORMATS["p"](v) for v in (0.000999, 0.001, 0.0012)] == ["&lt; 0.001", "0.001", "0.001"]
    df = pd.DataFrame({"at 1e-3": [0.001, 0.5], "above": [0.0015, 0.5], "at 1e6": [1e6, 2e6], "above 1e6": [1.5e6, 2e6],
                       "zero": [0.0, 0.25]})
    assert _cells(present(df))[len(df.columns):] == ["0.0010", "0.0015", "1.00e+06", "1.50e+06", "0.000",
                                                     "0.5000", "0.5000", "2.00e+06", "2.00e+06", "0.250"]
    assert _cells(present(pd.DataFrame({"x": [0.0, 0.25, np.nan]})))[1:] == ["0.000", "0.250", "—"]
    assert _cells(present(pd.DataFrame({"x": [0.0, np.nan]})))[1:] == ["0", "—"]  # nothing non-zero: whole numbers
    # just past each switch: 0.0012 keeps decimals, 1.2e6 is scientific
    assert _cells(present(pd.DataFrame({"x": [0.0012, 0.5], "y": [1.2e6, 2e6]})))[2:] == ["0.0012", "1.20e+06",
                                                                                          "0.5000", "2.00e+06"]
    fmt = column_format([0.5, 0.0007], digits=3)
    assert [fmt(v) for v in (0.0007, 0.0005, 0.00049)] == ["0.001", "0.001", "4.9e-04"]
    one = pd.DataFrame({"x": [1.23456]})
    assert _cells(present(one, digits=0))[1:] == ["1"] and _cells(present(one, digits=4))[1:] == ["1.2346"]
    assert _cells(present(one, formats={"x": "{:.4f}"}))[1:] == ["1.2346"]


def test_float_labels_get_their_decimals_whatever_their_dtype():
    """Float column labels of a table with a hidden index, float labels held as objects (one or
    several), and an index level that needs three decimals."""
    assert _cells(present(pd.DataFrame([[1.0, 2.0]], columns=pd.Index([0.8, 0.95]))))[:2] == ["0.80", "0.95"]
    as_objects = pd.Index([0.8, 0.95], dtype=object)
    assert _cells(present(pd.DataFrame([[1.0, 2.0]], columns=as_objects)))[:2] == ["0.80", "0.95"]
    assert _cells(present(pd.DataFrame([[1.0]], columns=pd.Index([0.8], dtype=object))))[0] == "0.8"
    cells = _cells(present(pd.DataFrame({"x": [1.0, 2.0]}, index=pd.Index([0.125, 2.0], name="J"))))
    assert "0.125" in cells and "2.000" in cells and "0.1250" not in cells


def test_an_object_column_of_floats_follows_the_column_rule_not_the_default_precision():
    cost = pd.DataFrame({"a": dict(loss=0.0327, commit="abc"), "b": dict(loss=0.5, commit="d")}).T  # object dtype
    cells = _cells(present(cost))
    assert "0.0327" in cells and "0.5000" in cells and "0.033" not in cells


def test_a_column_of_words_and_numbers_shows_its_numbers_with_three_decimals():
    cells = _cells(present(pd.DataFrame({"x": ["not reached", 0.1234567]})))
    assert cells[1:] == ["not reached", "0.123"]


def test_labels_show_words_for_the_names_the_code_reads_a_table_by():
    """The headers a reader sees, at any column level, escaped; the table keeps its names (and the
    formats keyed by them); a label for a column the table lacks is refused, naming the columns."""
    speed = pd.DataFrame({"median_ms": [1.234], "p<x": [0.1]}, index=pd.Index(["AR"], name="system"))
    cells = _cells(present(speed, formats={"median_ms": "ms"}, labels={"median_ms": "median", "p<x": "p < 0.05"}))
    assert cells[:3] == ["&nbsp;", "median", "p &lt; 0.05"] and "1.2 ms" in cells and "median_ms" not in cells
    assert list(speed.columns) == ["median_ms", "p<x"]
    steps = pd.DataFrame([[1.0, 2.0]], columns=pd.MultiIndex.from_tuples([("word_stutter", "raw"), ("BLEU", "raw")]))
    cells = _cells(present(steps, labels={"word_stutter": "stutter /100 words", "raw": "PaDIR raw"}))
    assert cells[:4] == ["stutter /100 words", "BLEU", "PaDIR raw", "PaDIR raw"]
    with pytest.raises(KeyError, match=r"labels names column 'median'.*\['median_ms', 'p<x'\]"):
        present(speed, labels={"median": "m"})
    widths = pd.DataFrame([[1.0, 2.0, 3.0]], columns=pd.Index([0.5, 0.75, 1.0]))  # a float level keeps its decimals
    assert _cells(present(widths, labels={1.0: "all"}))[:3] == ["0.50", "0.75", "all"]


def test_figure_style_asks_a_notebook_for_retina_pngs_and_nothing_elsewhere(monkeypatch):
    """``set_style``: in IPython the inline backend draws "retina" PNGs, so a figure carries the browser
    check's MIN_DENSITY image pixels per displayed pixel (saved at that multiple of its dpi); outside IPython
    it asks the backend nothing."""
    import IPython
    import matplotlib_inline.backend_inline as inline

    from IPython.core.formatters import PNGFormatter

    asked, png = [], PNGFormatter()
    monkeypatch.setattr(inline, "set_matplotlib_formats", lambda *formats: asked.append(formats))
    with mpl.rc_context():
        mpl.rcdefaults()  # matplotlib's own style, whatever an earlier test set (the context restores it)
        monkeypatch.setattr(IPython, "get_ipython", lambda: None)
        plotting.set_style()
        assert asked == []
        shell = types.SimpleNamespace(display_formatter=types.SimpleNamespace(formatters={"image/png": png}))
        monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
        plotting.set_style()
        assert asked == [("retina",)]
        # and figures go through plotting.retina_png, which records their smallest text in the PNG
        fig = mpl.figure.Figure()
        fig.add_subplot().set_title("t", fontsize=12)
        png_bytes, meta = png.lookup_by_type(mpl.figure.Figure)(fig)
        assert isinstance(png_bytes, str) and set(meta) == {"width", "height"}  # base64, as IPython shows it
        assert mpl.rcParams["savefig.dpi"] / mpl.rcParams["figure.dpi"] >= MIN_DENSITY
        # seaborn's whitegrid theme with the colour-blind-safe palette, lines told apart by colour
        assert mpl.rcParams["axes.grid"] and mpl.rcParams["axes.facecolor"] == "white"
        cycle = [mpl.colors.to_hex(c["color"]) for c in mpl.rcParams["axes.prop_cycle"]]
        assert cycle[:7] == [mpl.colors.to_hex(c) for c in sns.color_palette(plotting.PALETTE, 7)]
    assert len(plotting.colors(7)) == 7


def test_digits_are_grouped_by_thousands_in_every_kind_of_cell():
    """A reader counts the digits of 106566672: floats under the column rule, integers, and the named formats
    of times and ratios all group them, as does column_format alone; NaN is still the missing word, and small
    values and scientific notation are untouched."""
    df = pd.DataFrame({"TFLOP": [2593.4, 13518.0, np.nan], "updates": [106566672, 2640, 3],
                       "latency": [1234.56, 3.2, 0.5], "speed-up": [1019.2, 1.5, 2.0], "tiny": [0.0046, 0.0091, 1e-5]})
    cells = _cells(present(df, formats={"latency": "ms", "speed-up": "ratio"}, missing="none"))[len(df.columns):]
    assert cells == ["2,593", "106,566,672", "1,234.6 ms", "1,019.20x", "4.60e-03",
                     "13,518", "2,640", "3.2 ms", "1.50x", "9.10e-03",
                     "none", "3", "0.5 ms", "2.00x", "1.00e-05"]
    small = [0.0046, 0.0091]
    assert [column_format(small)(v) for v in small] == ["0.0046", "0.0091"]
    assert column_format([1411.006, 2500.7], digits=1)(1411.006) == "1,411.0"
    assert column_format([2e6, 3e6])(2e6) == "2.00e+06"


def test_text_in_cells_and_row_names_shows_as_text_not_as_html():
    """A SentencePiece control token (``<unk>``) in a row name or a cell would be read as a tag and vanish;
    the p-value format's own ``&lt;`` is not escaped twice."""
    table = pd.DataFrame({"piece": ["<unk>", "a&b"], "p": [0.0001, 0.2], "note": ["x<y", "ok"]}).set_index("piece")
    html = present(table, formats={"p": "p"}).to_html()
    cells = _cells(present(table, formats={"p": "p"}))
    assert "&lt;unk&gt;" in cells and "a&amp;b" in cells and "x&lt;y" in cells
    assert "&lt; 0.001" in cells and "<unk>" not in html


def test_numeric_row_and_column_names_group_their_digits_as_the_cells_do():
    """A sample size in the index reads 30,000 as it would in a cell: integer and float levels, a level
    held as objects, column names with and without labels; small numbers, words and bools are as they were."""
    sizes = pd.DataFrame({"TV": [0.5, 0.25]}, index=pd.Index([1000, 30000], name="N"))
    assert {"1,000", "30,000"} <= set(_cells(present(sizes)))
    multi = pd.DataFrame({"v": [1.0, 2.0, 3.0]},
                         index=pd.MultiIndex.from_tuples([("a", 300), ("a", 9000), ("b", 12500)], names=["s", "N"]))
    cells = _cells(present(multi))
    assert {"300", "9,000", "12,500", "a", "b"} <= set(cells) and "9000" not in cells
    as_objects = pd.DataFrame({"v": [1.0, 2.0]}, index=pd.Index([4000, 5], dtype=object, name="N"))
    assert {"4,000", "5"} <= set(_cells(present(as_objects)))
    floats = pd.DataFrame({"v": [1.0, 2.0]}, index=pd.Index([1500.5, 0.25], name="x"))
    assert {"1,500.50", "0.25"} <= set(_cells(present(floats)))
    columns = pd.DataFrame([[1.0, 2.0, 3.0]], columns=pd.Index([1000, 20000, 7]))
    assert _cells(present(columns))[:3] == ["1,000", "20,000", "7"]
    assert _cells(present(columns, labels={7: "seven"}))[:3] == ["1,000", "20,000", "seven"]
    flags = pd.DataFrame({"v": [1.0, 2.0]}, index=pd.Index([True, False], dtype=object, name="converged"))
    assert {"True", "False"} <= set(_cells(present(flags)))


def test_a_code_name_as_a_header_is_refused_and_labels_give_words_to_every_level():
    """[The browser check of the first-minute issue] no table shows a header a reader sees as an identifier:
    an underscore in a column label or in an index or column level's name is refused with the fix; labels
    give words to all of them, and the caller's table keeps its names."""
    table = pd.DataFrame({"kl_floor": [0.5], "J": [1.0]}).set_index("J")
    with pytest.raises(ValueError, match=r"header 'kl_floor', a code name.*labels="):
        present(table)
    named = pd.DataFrame({"x": [1.0]}, index=pd.Index([3], name="num_models"))
    with pytest.raises(ValueError, match="header 'num_models'"):
        present(named)
    cells = _cells(present(named, labels={"num_models": "models"}))
    assert "models" in cells and "num_models" not in cells and named.index.name == "num_models"
