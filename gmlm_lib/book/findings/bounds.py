"""The verdicts of the two chapters that check bounds exactly: adaptive masking (Definitions 7-8,
``notebooks/adaptive_masking.md``) and conditionals to the joint (Theorem 4,
``notebooks/conditionals_to_joint.md``).

An inequality ``a <= b`` computed in float64 counts as holding when ``a <= b * (1 + SLACK)``: the two
sides come from different routes (a generalised eigenvalue against a spectral gap, a certified bound
against an ascent), so they agree to rounding at best where the bound is tight.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["SLACK", "holds", "adaptive", "sandwich", "theorem4"]

SLACK = 1e-9
"""Relative rounding allowed on the larger side of an inequality checked in float64."""


def holds(smaller, larger) -> np.ndarray:
    """Elementwise ``smaller <= larger * (1 + SLACK)``; a NaN on either side does not hold."""
    smaller, larger = np.asarray(smaller, dtype=float), np.asarray(larger, dtype=float)
    return smaller <= larger * (1 + SLACK)


def _yes(ok) -> str:
    return "yes" if bool(np.all(ok)) else "no"


def _need(frame: pd.DataFrame, columns, what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing or frame.empty:
        raise ValueError(f"the {what} table needs rows and the columns {list(columns)}; missing {missing}.")


def adaptive(checks: pd.DataFrame) -> dict:
    """``checks``: one row per masking rule with ``|H - Sigma| (autodiff)``, ``|H closed - autodiff|``,
    ``|pP - p|``, ``detailed balance``, ``C_P`` and ``max v'Gamma v / v'Gamma_MLE v``. Returns the largest
    errors (``ad_equality``, ``ad_routes``, ``ad_balance``) and ``ad_bound``: "yes" when
    ``Gamma <= C_P Gamma_MLE`` holds for every rule (:func:`holds`)."""
    ratio = "max v'Gamma v / v'Gamma_MLE v"
    _need(checks, ("|H - Sigma| (autodiff)", "|H closed - autodiff|", "|pP - p|", "detailed balance", "C_P", ratio),
          "adaptive checks")
    return dict(ad_equality=float(checks["|H - Sigma| (autodiff)"].max()),
                ad_routes=float(checks["|H closed - autodiff|"].max()),
                ad_balance=float(checks[["|pP - p|", "detailed balance"]].to_numpy().max()),
                ad_bound=_yes(holds(checks[ratio], checks["C_P"])))


def sandwich(cat: pd.DataFrame) -> dict:
    """``cat``: one row per (coupling, k) with ``C_P``, the certified ``lower`` and ``upper`` bounds on
    C_AT, ``lower / C_P`` and ``exact`` (NaN where C_AT is not known exactly). Returns ``sandwich_ok``
    ("yes" when ``C_P <= lower <= upper`` on every row), ``exact_err`` (the largest relative gap of the lower
    bound to a known exact value) and ``nonlinear_gain`` (the largest ``lower / C_P``)."""
    _need(cat, ("C_P", "lower", "upper", "lower / C_P", "exact"), "C_AT")
    exact = cat[np.isfinite(cat.exact)]
    return dict(sandwich_ok=_yes(holds(cat.C_P, cat.lower) & (cat.lower.to_numpy() <= cat.upper.to_numpy())),
                exact_err=float(np.max(np.abs(exact.lower - exact.exact) / exact.exact)) if len(exact) else float("nan"),
                nonlinear_gain=float(cat["lower / C_P"].max()))


def theorem4(fits: pd.DataFrame) -> dict:
    """``fits``: the converged k-MPLE fits, with ``KL`` (of the truth to the fit), ``gap`` (the excess
    pseudolikelihood loss) and ``C_AT_upper`` (the certified upper bound on the fit's C_AT). Returns
    ``thm4_holds`` ("m of n": the fits where ``KL <= C_AT_upper * gap``, Theorem 4's key step, exactly, no
    slack) and ``ratio_max`` (the largest ``KL / gap``)."""
    _need(fits, ("KL", "gap", "C_AT_upper"), "fits")
    ok = fits.KL.to_numpy() <= fits.C_AT_upper.to_numpy() * fits.gap.to_numpy()
    return dict(thm4_holds=f"{int(ok.sum())} of {len(fits)}", ratio_max=float((fits.KL / fits.gap).max()))
