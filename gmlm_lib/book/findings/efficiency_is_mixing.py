"""The verdicts of the sample-efficiency chapter (``notebooks/efficiency_is_mixing.md``) [Theorem 1].

Two kinds: the bound ``Gamma_k <= C_P(k) Gamma_MLE`` must hold up to rounding (its tightness ratio at
most ``1 + BOUND_SLACK``, the book's one rounding slack :data:`gmlm_lib.book.findings.bounds.SLACK`), and
the exact computation must run "at scale" within :data:`TIME_BAR` seconds on the machine of the run.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from gmlm_lib.book.findings.bounds import SLACK as BOUND_SLACK
from gmlm_lib.book.findings.rules import grade, listed
from gmlm_lib.book.validate import ChapterParams
from gmlm_lib.ising.fisher import MAX_EXACT_N
from gmlm_lib.ising.markov import MAX_DENSE_N

__all__ = ["TIME_BAR", "BOUND_SLACK", "Params", "findings", "tightness"]

TIME_BAR = 60.0
"""Seconds: what "at scale" has to mean on a laptop-class CPU, for each exact computation graded."""


def findings(max_tightness: float, scale_seconds: float, big: dict) -> dict:
    """``max_tightness``: the largest ratio of ``v' Gamma_k v`` to ``C_P(k) v' Gamma_MLE v`` over the
    maps; ``scale_seconds``: the dense computation at the chapter's scale; ``big``: k -> (``C_P(k)``,
    seconds) of each matrix-free computation at the chapter's largest ``n``. Returns ``bound_verdict``,
    ``time_bar``, ``scale_verdict`` and ``big_verdict`` (met when every one is within the bar), and what the
    box says of the matrix-free computations: ``big_ks`` (listed), ``big_cp_min``, ``big_cp_max`` and
    ``big_s_max`` (the slowest)."""
    if not big:
        raise ValueError("big must hold at least one matrix-free computation: nothing to grade.")
    cps, seconds = [float(cp) for cp, _ in big.values()], [float(s) for _, s in big.values()]
    return dict(bound_slack=BOUND_SLACK, bound_verdict=grade(max_tightness, 1.0 + BOUND_SLACK, at_least=False),
                time_bar=TIME_BAR, scale_verdict=grade(scale_seconds, TIME_BAR, at_least=False),
                big_verdict=grade(max(seconds), TIME_BAR, at_least=False), big_ks=listed(sorted(big)),
                big_cp_min=min(cps), big_cp_max=max(cps), big_s_max=max(seconds))


def tightness(maps, n: int) -> dict:
    """``maps``: one row per (family, J, k) with the columns ``family``, ``J``, ``k``, ``C_P``, ``tightness`` (the
    largest ratio of ``v' Gamma_k v`` to ``C_P(k) v' Gamma_MLE v``) and ``slow mode in span(T)`` (a fraction);
    ``n``: the sites of its models. Where the bound is tight: the tightness range at ``J = 0``
    (``tight_J0_min``, ``tight_J0_max``) and for ``k >= n - 2`` (``tight_kn_min``, ``tight_kn_max``); the
    loosest cell (``loosest_ratio``, ``loosest_family``, ``loosest_J``, ``loosest_k``, and
    ``loosest_slow_pct``, the percent of its slowest mode in the span of the sufficient statistics T); the
    range of ``C_P`` (``cp_min``, ``cp_max``). NaN ranges where the maps hold no such cell."""
    needed = ("family", "J", "k", "C_P", "tightness", "slow mode in span(T)")
    missing = [c for c in needed if c not in maps.columns]
    if missing or len(maps) == 0:
        raise ValueError(f"maps must be a non-empty table with the columns {list(needed)}; it lacks {missing}.")
    if not np.all(np.isfinite(maps[["tightness", "C_P"]].to_numpy(dtype=float))):
        raise ValueError("maps holds a non-finite tightness or C_P: a failed cell, not a finding.")

    def span(rows, name):
        values = rows.tightness.to_numpy(dtype=float)
        nan = float("nan")
        return {f"{name}_min": float(values.min()) if values.size else nan,
                f"{name}_max": float(values.max()) if values.size else nan}

    loosest = maps.loc[maps.tightness.idxmin()]
    return dict(**span(maps[maps.J == 0], "tight_J0"), **span(maps[maps.k >= n - 2], "tight_kn"),
                loosest_ratio=float(loosest.tightness), loosest_family=str(loosest.family),
                loosest_J=float(loosest.J), loosest_k=int(loosest.k),
                loosest_slow_pct=100 * float(loosest["slow mode in span(T)"]),
                cp_min=float(maps.C_P.min()), cp_max=float(maps.C_P.max()))


@dataclasses.dataclass(frozen=True)
class Params(ChapterParams):
    """The parameters of ``notebooks/efficiency_is_mixing.md`` (their meaning: its parameters cell), checked
    when built: the maps and the dense eigensolver use ``2^n x 2^n`` operators (at most
    :data:`gmlm_lib.ising.markov.MAX_DENSE_N` sites), exact ``Gamma_k`` for every k at most
    :data:`gmlm_lib.ising.fisher.MAX_EXACT_N`, and the matrix-free timing's mask sizes fit in ``big_n``."""

    def check(self) -> None:
        self.integer("n", 2, MAX_DENSE_N, "the maps use dense 2^n x 2^n operators")
        self.numbers("couplings")
        self.number("field")
        self.integer("dense_n", 2, MAX_DENSE_N, "the dense eigensolver")
        self.integer("scale_n", 2, MAX_EXACT_N, "exact Gamma_k for every k")
        self.integer("big_n", 2)
        self.integers("big_ks", 1, self.big_n, "mask sizes")

    # the fields: the parameters cell's names in its order (seed and install_ref: ChapterParams)
    n: int
    couplings: list
    field: float
    dense_n: int
    scale_n: int
    big_n: int
    big_ks: list
