"""The verdicts of the sample-efficiency chapter (``notebooks/efficiency_is_mixing.md``) [Theorem 1].

Two kinds: the bound ``Gamma_k <= C_P(k) Gamma_MLE`` must hold up to rounding (its tightness ratio at
most ``1 + BOUND_SLACK``, the book's one rounding slack :data:`gmlm_lib.book.findings.bounds.SLACK`), and
the exact computation must run "at scale" within :data:`TIME_BAR` seconds on the machine of the run.
"""

from __future__ import annotations

from gmlm_lib.book.findings.bounds import SLACK as BOUND_SLACK
from gmlm_lib.book.findings.rules import grade

__all__ = ["TIME_BAR", "BOUND_SLACK", "findings"]

TIME_BAR = 60.0
"""Seconds: what "at scale" has to mean on a laptop-class CPU, for each exact computation graded."""


def findings(max_tightness: float, scale_seconds: float, big_seconds) -> dict:
    """``max_tightness``: the largest ratio of ``v' Gamma_k v`` to ``C_P(k) v' Gamma_MLE v`` over the
    maps; ``scale_seconds``: the dense computation at the chapter's scale; ``big_seconds``: each
    matrix-free computation. Returns ``bound_verdict``, ``time_bar``, ``scale_verdict`` and ``big_verdict``
    (met when every one is within the bar)."""
    big = [float(s) for s in big_seconds]
    if not big:
        raise ValueError("big_seconds must hold at least one timing: nothing to grade.")
    return dict(bound_slack=BOUND_SLACK, bound_verdict=grade(max_tightness, 1.0 + BOUND_SLACK, at_least=False),
                time_bar=TIME_BAR, scale_verdict=grade(scale_seconds, TIME_BAR, at_least=False),
                big_verdict=grade(max(big), TIME_BAR, at_least=False))
