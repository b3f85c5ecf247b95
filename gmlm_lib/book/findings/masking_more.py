"""The verdicts of the chapter on Theorem 2 (masking more never hurts), from its table of exact checks.

The chapter computes, for each model and mask size k, the exact Hessian and score covariance of the
k-pseudolikelihood and the asymptotic covariances Gamma_k. Three statements are graded by
:func:`gmlm_lib.book.findings.rules.grade` against bars that allow only floating-point rounding:

* the information equality ``H_k = Sigma_k`` (Hessian = score covariance at the truth): ``max |H - Sigma| <= EQUALITY_BAR``;
* the order ``Gamma_k >= Gamma_{k+1}`` [Theorem 2]: ``min lambda_min(Gamma_k - Gamma_{k+1}) >= ORDER_BAR``;
* the same order read as generalised eigenvalues: ``max eig(Gamma_{k+1}, Gamma_k) <= 1 + EQUALITY_BAR``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gmlm_lib.book.findings.rules import grade

__all__ = ["EQUALITY_BAR", "ORDER_BAR", "COLUMNS", "findings"]

EQUALITY_BAR = 1e-10
"""The largest entry of ``|H - Sigma|`` (and excess of a generalised eigenvalue over 1) that still counts as equal."""
ORDER_BAR = -1e-10
"""The smallest eigenvalue of ``Gamma_k - Gamma_{k+1}`` that still counts as positive semi-definite."""
COLUMNS = {"equality": "|H - Sigma| (autodiff)", "order": "lambda_min(Gamma_k - Gamma_k+1)",
           "gen_eig": "max gen. eig (Gamma_k+1, Gamma_k)"}
"""The columns of the chapter's checks table that the verdicts read."""


def _extreme(checks: pd.DataFrame, column: str, how: str) -> float:
    if column not in checks.columns:
        raise KeyError(f"the checks table has no column {column!r}; its columns: {list(checks.columns)}.")
    values = pd.to_numeric(checks[column], errors="coerce").to_numpy(dtype=float)
    values = values[~np.isnan(values)]  # k = n has no Gamma_{k+1}: those rows are NaN by design
    if values.size == 0:
        raise ValueError(f"the checks table's column {column!r} holds no value to grade.")
    return float(values.max() if how == "max" else values.min())


def findings(checks: pd.DataFrame) -> dict:
    """Every value and verdict the chapter glues from its ``checks`` table (one row per model and k):
    the bars, ``max_h_minus_sigma``, ``min_lambda``, ``max_gen_eig`` and the three verdicts
    ``equality_verdict``, ``order_verdict``, ``gen_eig_verdict`` ("met" or "missed")."""
    max_eq = _extreme(checks, COLUMNS["equality"], "max")
    min_order = _extreme(checks, COLUMNS["order"], "min")
    max_gen = _extreme(checks, COLUMNS["gen_eig"], "max")
    return dict(
        equality_bar=EQUALITY_BAR, order_bar=ORDER_BAR,
        max_h_minus_sigma=max_eq, min_lambda=min_order, max_gen_eig=max_gen,
        equality_verdict=grade(max_eq, EQUALITY_BAR, at_least=False),
        order_verdict=grade(min_order, ORDER_BAR, at_least=True),
        gen_eig_verdict=grade(max_gen, 1 + EQUALITY_BAR, at_least=False),
    )
