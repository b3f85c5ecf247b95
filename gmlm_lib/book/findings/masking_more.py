"""The verdicts of the chapter on Theorem 2 (masking more never hurts), from its table of exact checks.

The chapter computes, for each model and mask size k, the exact Hessian and score covariance of the
k-pseudolikelihood and the asymptotic covariances Gamma_k. Three statements are graded by
:func:`gmlm_lib.book.findings.rules.grade` against bars that allow only floating-point rounding:

* the information equality ``H_k = Sigma_k`` (Hessian = score covariance at the truth): ``max |H - Sigma| <= EQUALITY_BAR``;
* the order ``Gamma_k >= Gamma_{k+1}`` [Theorem 2]: every ``lambda_min(Gamma_k - Gamma_{k+1})`` at least
  ``-ORDER_SLACK`` rounding envelopes, the envelope of a row being ``eps * cond(H_k) * tr(Gamma_k)``: the
  error that inverting ``H_k`` in float64 can leave in ``Gamma_k`` (a bar in the units of the computation,
  not a fixed number that a model of another scale or another BLAS could cross by rounding alone);
* the same order read as generalised eigenvalues: ``max eig(Gamma_{k+1}, Gamma_k) <= 1 + EQUALITY_BAR``.
"""

from __future__ import annotations

import dataclasses
import numpy as np
import pandas as pd

from gmlm_lib.book.findings.rules import grade, listed
from gmlm_lib.book.validate import ChapterParams, count
from gmlm_lib.ising.fisher import MAX_EXACT_N

__all__ = ["EQUALITY_BAR", "ORDER_SLACK", "EPS", "COLUMNS", "Params", "all_masks_gain", "all_masks_order", "envelopes",
           "findings", "monte_carlo"]

EQUALITY_BAR = 1e-10
"""The largest entry of ``|H - Sigma|`` (and excess of a generalised eigenvalue over 1) that still counts as equal."""
ORDER_SLACK = 10.0
"""How many rounding envelopes (:func:`envelopes`) below zero the smallest eigenvalue of
``Gamma_k - Gamma_{k+1}`` may fall and still count as positive semi-definite."""
EPS = float(np.finfo(np.float64).eps)
"""float64's machine epsilon, the unit of the rounding envelope."""
COLUMNS = {"equality": "|H - Sigma| (autodiff)", "order": "lambda_min(Gamma_k - Gamma_k+1)",
           "gen_eig": "max gen. eig (Gamma_k+1, Gamma_k)", "cond": "cond(H_k)", "trace": "tr Gamma_k"}
"""The columns of the chapter's checks table that the verdicts read."""


def _extreme(checks: pd.DataFrame, column: str, how: str) -> float:
    if column not in checks.columns:
        raise KeyError(f"the checks table has no column {column!r}; its columns: {list(checks.columns)}.")
    values = pd.to_numeric(checks[column], errors="coerce").to_numpy(dtype=float)
    values = values[~np.isnan(values)]  # k = n has no Gamma_{k+1}: those rows are NaN by design
    if values.size == 0:
        raise ValueError(f"the checks table's column {column!r} holds no value to grade.")
    return float(values.max() if how == "max" else values.min())


def envelopes(checks: pd.DataFrame) -> pd.Series:
    """Each row's ``lambda_min(Gamma_k - Gamma_{k+1})`` in units of its rounding envelope
    ``EPS * cond(H_k) * tr(Gamma_k)`` (NaN for the rows k = n, which have no ``Gamma_{k+1}``)."""
    for key in ("order", "cond", "trace"):
        if COLUMNS[key] not in checks.columns:
            raise KeyError(f"the checks table has no column {COLUMNS[key]!r}; its columns: {list(checks.columns)}.")
    cond, trace = (pd.to_numeric(checks[COLUMNS[k]], errors="coerce") for k in ("cond", "trace"))
    if ((cond < 1) | (trace <= 0)).any():
        raise ValueError("envelopes: cond(H_k) must be >= 1 and tr Gamma_k > 0 in every row (a covariance of a "
                         "positive definite Hessian); the checks table holds other values.")
    return pd.to_numeric(checks[COLUMNS["order"]], errors="coerce") / (EPS * cond * trace)


def findings(checks: pd.DataFrame) -> dict:
    """Every value and verdict the chapter glues from its ``checks`` table (one row per model and k):
    the bars, ``max_h_minus_sigma``, ``min_lambda``, ``min_envelopes`` (the smallest eigenvalue of
    ``Gamma_k - Gamma_{k+1}`` in rounding envelopes, the graded number), ``max_gen_eig`` and the three
    verdicts ``equality_verdict``, ``order_verdict``, ``gen_eig_verdict`` ("met" or "missed")."""
    max_eq = _extreme(checks, COLUMNS["equality"], "max")
    min_order = _extreme(checks, COLUMNS["order"], "min")
    max_gen = _extreme(checks, COLUMNS["gen_eig"], "max")
    ratio = envelopes(checks).dropna()
    if ratio.empty:
        raise ValueError(f"the checks table's column {COLUMNS['order']!r} holds no value to grade.")
    min_env = float(ratio.min())
    return dict(
        equality_bar=EQUALITY_BAR, order_slack=ORDER_SLACK, eps=EPS,
        max_h_minus_sigma=max_eq, min_lambda=min_order, min_envelopes=min_env, max_gen_eig=max_gen,
        equality_verdict=grade(max_eq, EQUALITY_BAR, at_least=False),
        order_verdict=grade(min_env, -ORDER_SLACK, at_least=True),
        gen_eig_verdict=grade(max_gen, 1 + EQUALITY_BAR, at_least=False),
    )


def monte_carlo(mc: pd.DataFrame, repeats: int) -> dict:
    """The glued findings of the Monte Carlo table (paper Figures 1-2). ``mc``: one row per (truth, N, k)
    with ``truth``, ``N``, ``k``, ``converged`` (fits of the ``repeats`` with a finite minimiser), ``MSE``
    (mean over the converged fits; NaN when none) and ``N x MSE / tr Gamma_k``. Returns, per truth in
    ``mc_monotone_<truth>``, the percent of steps from k to k+1 (over its N) where the mean error decreases,
    among the steps with both errors finite; the range of ``N x MSE / tr Gamma_k`` at each truth's largest
    N (``ratio_largest_min``, ``ratio_largest_max``); the fits without a finite minimiser
    (``nonconverged`` of ``fits_total``) and the cell with the fewest converged (``worst_converged``,
    ``worst_truth``, ``worst_N``, ``worst_k``)."""
    needed = ("truth", "N", "k", "converged", "MSE", "N x MSE / tr Gamma_k")
    missing = [c for c in needed if c not in mc.columns]
    if missing or len(mc) == 0:
        raise ValueError(f"mc must be a non-empty table with the columns {list(needed)}; it lacks {missing}.")
    if not count(repeats, 1) or not mc.converged.between(0, repeats).all():
        raise ValueError(f"repeats = {repeats!r} must be an integer >= 1 and at least every cell's converged count.")
    found = {}
    for truth, rows in mc.groupby("truth", sort=False):
        steps = np.concatenate([np.diff(g.sort_values("k").MSE.to_numpy(dtype=float)) for _, g in rows.groupby("N")])
        steps = steps[np.isfinite(steps)]
        if steps.size == 0:
            raise ValueError(f"the {truth!r} truth has no step from k to k+1 with both errors finite: "
                             "nothing to count.")
        found[f"mc_monotone_{truth}"] = 100 * float(np.mean(steps < 0))
    largest = mc[mc.N == mc.groupby("truth").N.transform("max")]["N x MSE / tr Gamma_k"].to_numpy(dtype=float)
    largest = largest[np.isfinite(largest)]
    nan = float("nan")
    worst = mc.loc[mc.converged.idxmin()]
    return dict(found, ratio_largest_min=float(largest.min()) if largest.size else nan,
                ratio_largest_max=float(largest.max()) if largest.size else nan,
                nonconverged=int((repeats - mc.converged).sum()), fits_total=repeats * len(mc),
                worst_converged=int(worst.converged), worst_truth=str(worst.truth), worst_N=int(worst.N),
                worst_k=int(worst.k))


@dataclasses.dataclass(frozen=True)
class Params(ChapterParams):
    """The parameters of ``notebooks/masking_more.md`` (their meaning: its parameters cell), checked when
    built: the asymptotic covariances are exact sums over ``2^n`` states (``n`` at most
    :data:`gmlm_lib.ising.fisher.MAX_EXACT_N`), the models split into mild and peaky halves, and each
    Monte Carlo mean has a spread."""

    def check(self) -> None:
        self.integer("n", 2, MAX_EXACT_N, "the asymptotic covariances are exact sums over 2^n states")
        self.integer("num_models", 2, why="half mild, half peaky")
        self.number("mild_scale", 0, "a standard deviation")
        self.number("peaky_coupling")
        self.integer("repeats", 2, why="a Monte Carlo mean and its spread")
        self.integers("sizes_mild", 1, why="training-set sizes")
        self.integers("sizes_peaky", 1, why="training-set sizes")

    # the fields: the parameters cell's names in its order (seed and install_ref: ChapterParams)
    n: int
    num_models: int
    mild_scale: float
    peaky_coupling: float
    repeats: int
    sizes_mild: list
    sizes_peaky: list


def all_masks_gain(regimes: pd.DataFrame, n: int) -> dict:
    """How much one mask a sample loses against every mask: ``regimes`` holds one row per (``truth``, ``k``)
    with ``one / all`` (``tr Gamma`` one-mask over all-masks). Returns ``all_masks_gain_<truth>_k1`` and
    ``all_masks_gain_<truth>_kn`` (the ratio at k = 1 and at k = n - 1, where one mask of k positions
    leaves one out) for each truth, and ``all_masks_kn`` (n - 1)."""
    missing = [c for c in ("truth", "k", "one / all") if c not in regimes.columns]
    if missing:
        raise ValueError(f"all_masks_gain: the regimes table lacks the columns {missing}.")
    out = dict(all_masks_kn=int(n) - 1)
    for truth, rows in regimes.groupby("truth"):
        ratio = rows.set_index("k")["one / all"]
        absent = [k for k in (1, int(n) - 1) if k not in ratio.index]
        if absent:
            raise ValueError(f"all_masks_gain: the truth {truth!r} has no row at k = {absent} (n = {n}).")
        out[f"all_masks_gain_{truth}_k1"] = float(ratio.loc[1])
        out[f"all_masks_gain_{truth}_kn"] = float(ratio.loc[int(n) - 1])
    return out


def all_masks_order(order: pd.DataFrame, rtol: float = 1e-9) -> dict:
    """The exercise on Theorem 2's order in the all-masks regime. ``order``: one row per (``truth``, ``k``)
    with ``max gen. eig (Gamma_k+1, Gamma_k)`` and ``tr Gamma_k / tr Gamma_MLE``. Returns the largest
    generalised eigenvalue (``ex_order_worst``; above one by more than rounding, the Loewner order fails)
    with its ``ex_order_worst_truth`` and step ``ex_order_worst_k`` -> ``ex_order_worst_k_next``, and
    ``ex_order_efficient``: the k at which every truth's all-masks estimator is as efficient as the MLE
    (trace ratio 1 within ``rtol``), listed ("none")."""
    eig, ratio = "max gen. eig (Gamma_k+1, Gamma_k)", "tr Gamma_k / tr Gamma_MLE"
    missing = [c for c in ("truth", "k", eig, ratio) if c not in order.columns]
    if missing or order.empty or order[eig].isna().any():
        raise ValueError(f"all_masks_order: the order table needs rows with truth, k, {eig!r} (not NaN) and "
                         f"{ratio!r}; missing columns {missing}, {len(order)} rows.")
    worst = order.loc[order[eig].idxmax()]
    efficient = [int(k) for k, rows in order.groupby("k")
                 if np.allclose(rows[ratio].to_numpy(dtype=float), 1.0, rtol=rtol, atol=0)]
    return dict(ex_order_worst=float(worst[eig]), ex_order_worst_truth=str(worst["truth"]),
                ex_order_worst_k=int(worst["k"]), ex_order_worst_k_next=int(worst["k"]) + 1,
                ex_order_efficient=listed(efficient))
