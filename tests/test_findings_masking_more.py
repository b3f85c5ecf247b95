"""The Theorem 2 chapter's verdicts (gmlm_lib.book.findings.masking_more) on small hand-made tables:
each bar met and missed by a hair, the k = n rows (NaN by design) ignored, nothing graded from nothing."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from gmlm_lib.book.findings import masking_more as theorem2


ENV = theorem2.EPS * 1e4 * 2.0  # the rounding envelope of a row with cond(H_k) = 1e4 and tr Gamma_k = 2


def _checks(equality=(1e-12, 5e-11), order=(1e-3, 0.0, np.nan), gen_eig=(0.9, 1.0, np.nan)):
    n = max(len(equality), len(order), len(gen_eig))
    pad = lambda xs: list(xs) + [np.nan] * (n - len(xs))  # noqa: E731
    return pd.DataFrame({theorem2.COLUMNS["equality"]: pad(equality), theorem2.COLUMNS["order"]: pad(order),
                         theorem2.COLUMNS["gen_eig"]: pad(gen_eig), theorem2.COLUMNS["cond"]: [1e4] * n,
                         theorem2.COLUMNS["trace"]: [2.0] * n})


def test_every_bar_met():
    got = theorem2.findings(_checks())
    assert (got["equality_verdict"], got["order_verdict"], got["gen_eig_verdict"]) == ("met", "met", "met")
    assert got["max_h_minus_sigma"] == 5e-11 and got["min_lambda"] == 0.0 and got["max_gen_eig"] == 1.0
    assert (got["equality_bar"], got["order_slack"]) == (theorem2.EQUALITY_BAR, theorem2.ORDER_SLACK)
    assert got["min_envelopes"] == 0.0


@pytest.mark.parametrize("field, table, want", [
    ("equality_verdict", _checks(equality=(1.001e-10,)), "missed"),
    ("equality_verdict", _checks(equality=(0.999e-10,)), "met"),
    ("order_verdict", _checks(order=(-10.001 * ENV, 1.0)), "missed"),
    ("order_verdict", _checks(order=(-9.999 * ENV, 1.0)), "met"),
    ("gen_eig_verdict", _checks(gen_eig=(1 + 2e-10,)), "missed"),
    ("gen_eig_verdict", _checks(gen_eig=(1 + 0.5e-10,)), "met"),
])
def test_a_bar_met_or_missed_by_a_hair(field, table, want):
    assert theorem2.findings(table)[field] == want


def test_the_order_bar_scales_with_the_rounding_of_each_row():
    # the same eigenvalue is rounding for an ill-conditioned H_k and a violation for a well-conditioned one
    table = _checks(order=(-5e-11, 1.0))
    table[theorem2.COLUMNS["cond"]] = [1e6] * 3
    assert theorem2.findings(table)["order_verdict"] == "met"
    table[theorem2.COLUMNS["cond"]] = [10.0] * 3
    assert theorem2.findings(table)["order_verdict"] == "missed"
    assert theorem2.findings(table)["min_envelopes"] == pytest.approx(-5e-11 / (theorem2.EPS * 10 * 2))
    table[theorem2.COLUMNS["trace"]] = [0.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="tr Gamma_k > 0"):
        theorem2.findings(table)
    # the edges: cond(H_k) = 1 (a perfectly conditioned Hessian) and a trace below 1 are valid; cond < 1 is not
    table[theorem2.COLUMNS["cond"]], table[theorem2.COLUMNS["trace"]] = [1.0] * 3, [0.5] * 3
    assert theorem2.findings(table)["min_envelopes"] == pytest.approx(-5e-11 / (theorem2.EPS * 1.0 * 0.5))
    table[theorem2.COLUMNS["cond"]] = [0.99, 1.0, 1.0]
    with pytest.raises(ValueError, match="must be >= 1"):
        theorem2.findings(table)


def test_nothing_is_graded_from_a_missing_column_or_an_empty_one():
    with pytest.raises(KeyError, match="no column"):
        theorem2.findings(_checks().drop(columns=theorem2.COLUMNS["order"]))
    with pytest.raises(ValueError, match="holds no value to grade"):
        theorem2.findings(_checks(order=(np.nan, np.nan)))
    for key in ("cond", "trace"):  # the envelope's own columns, named as the table names them
        with pytest.raises(KeyError, match=f"the checks table has no column '{re.escape(theorem2.COLUMNS[key])}'"):
            theorem2.envelopes(_checks().drop(columns=theorem2.COLUMNS[key]))
    # order values, but no row with a rounding envelope (cond unknown): nothing is graded in envelopes
    with pytest.raises(ValueError, match="holds no value to grade"):
        theorem2.findings(_checks().assign(**{theorem2.COLUMNS["cond"]: np.nan}))


def _mc(mild=((1.0, 0.8, 0.7), (0.5, 0.45, 0.46)), peaky=((2.0, np.nan, 1.5), (1.0, 0.9, 0.95))):
    """(truth, N, k) rows for k = 1, 2, 3 out of 10 fits each: mild at N = 100, 1000; peaky at N = 500, 2000.
    A NaN MSE is a cell where no fit converged; ``N x MSE / tr Gamma_k`` is ``N * MSE / 100``."""
    rows = []
    for truth, table, sizes in (("mild", mild, (100, 1000)), ("peaky", peaky, (500, 2000))):
        for N, mses in zip(sizes, table):
            for k, mse in enumerate(mses, start=1):
                rows.append(dict(truth=truth, N=N, k=k, converged=10 if np.isfinite(mse) else 0, MSE=mse,
                                 **{"N x MSE / tr Gamma_k": mse * N / 100}))
    return pd.DataFrame(rows)


def test_the_monte_carlo_findings_count_steps_ratios_and_convergence():
    got = theorem2.monte_carlo(_mc(), 10)
    assert got["mc_monotone_mild"] == 75.0  # 3 of its 4 steps decrease
    assert got["mc_monotone_peaky"] == 50.0  # the two steps through the NaN cell are not counted: 1 of 2
    assert (got["ratio_largest_min"], got["ratio_largest_max"]) == (4.5, 20.0)  # mild N = 1000, peaky N = 2000
    assert (got["nonconverged"], got["fits_total"]) == (10, 120)
    assert (got["worst_converged"], got["worst_truth"], got["worst_N"], got["worst_k"]) == (0, "peaky", 500, 2)


def test_a_step_that_does_not_decrease_by_a_hair_is_not_counted():
    assert theorem2.monte_carlo(_mc(mild=((1.0, 1.0, 0.999999),)), 10)["mc_monotone_mild"] == 50.0


def test_the_monte_carlo_findings_refuse_what_they_cannot_count():
    with pytest.raises(ValueError, match="'peaky' truth has no step"):
        theorem2.monte_carlo(_mc(peaky=((np.nan, 1.0, np.nan),)), 10)
    with pytest.raises(ValueError, match="repeats = 5"):
        theorem2.monte_carlo(_mc(), 5)  # a cell with 10 converged of 5 fits
    with pytest.raises(ValueError, match="lacks"):
        theorem2.monte_carlo(_mc().drop(columns="MSE"), 10)
    with pytest.raises(ValueError, match="non-empty table"):
        theorem2.monte_carlo(_mc().iloc[:0], 10)
    for bad in (0, 10.0, True):  # not an integer >= 1 (True is a bool, not a count)
        with pytest.raises(ValueError, match="must be an integer >= 1"):
            theorem2.monte_carlo(_mc().assign(converged=0), bad)
    one = _mc().assign(converged=1)  # a single fit per cell is a valid (if small) sweep
    assert theorem2.monte_carlo(one, 1)["fits_total"] == 12


def test_the_all_masks_gain_at_one_and_at_n_minus_one():
    regimes = pd.DataFrame([dict(truth=t, k=k, **{"one / all": r}) for t, rs in (("mild", (2.0, 1.5, 1.2, 1.0)),
                                                                                   ("peaky", (3.0, 2.0, 1.4, 1.0)))
                            for k, r in zip((1, 2, 3, 4), rs)])
    got = theorem2.all_masks_gain(regimes, 4)
    assert got == dict(all_masks_kn=3, all_masks_gain_mild_k1=2.0, all_masks_gain_mild_kn=1.2,
                       all_masks_gain_peaky_k1=3.0, all_masks_gain_peaky_kn=1.4)
    with pytest.raises(ValueError, match=r"no row at k = \[5\]"):
        theorem2.all_masks_gain(regimes, 6)
    with pytest.raises(ValueError, match=r"'mild' has no row at k = \[1\]"):
        theorem2.all_masks_gain(regimes[(regimes.truth == "peaky") | (regimes.k > 1)], 4)
    with pytest.raises(ValueError, match="lacks the columns"):
        theorem2.all_masks_gain(regimes.drop(columns="one / all"), 4)


def test_the_all_masks_order_exercise():
    eig, ratio = "max gen. eig (Gamma_k+1, Gamma_k)", "tr Gamma_k / tr Gamma_MLE"
    order = pd.DataFrame([dict(truth=t, k=k, **{eig: e, ratio: r}) for t, k, e, r in [
        ("mild", 1, 0.9, 1.5), ("mild", 2, 1.0 + 1e-12, 1.0 + 1e-12), ("mild", 3, 0.99, 1.0),
        ("peaky", 1, 1.02, 1.4), ("peaky", 2, 0.98, 1.0 + 1e-8), ("peaky", 3, 0.97, 1.0)]])
    got = theorem2.all_masks_order(order)
    assert got == dict(ex_order_worst=1.02, ex_order_worst_truth="peaky", ex_order_worst_k=1,
                       ex_order_worst_k_next=2, ex_order_efficient="3")  # k = 2: the peaky truth is 1e-8 off
    assert theorem2.all_masks_order(order, rtol=1e-7)["ex_order_efficient"] == "2 and 3"
    assert theorem2.all_masks_order(order[order.k == 1])["ex_order_efficient"] == "none"
    with pytest.raises(ValueError, match="not NaN"):
        theorem2.all_masks_order(order.assign(**{eig: np.nan}))
