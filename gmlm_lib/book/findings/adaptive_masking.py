"""The parameters and the comparison of the adaptive-masking chapter (``notebooks/adaptive_masking.md``)
[Definitions 7-8, Theorem 3]. The bound's verdict is :func:`gmlm_lib.book.findings.bounds.adaptive`'s.

The comparison asks, at one coupling inside the clusters, which masking rule needs the least data
(smallest ``tr Gamma / tr Gamma_MLE``: the asymptotic variance relative to maximum likelihood) and
which rule's block dynamics mixes fastest (smallest Poincaré constant ``C_P``), each beside the
uniform rule's value.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from gmlm_lib.book.validate import ChapterParams, count, finite
from gmlm_lib.ising.fisher import MAX_EXACT_N

__all__ = ["BASELINE", "LEARN", "MIX", "Params", "comparison"]

BASELINE = "uniform"
"""The rule every other is compared with (2-Gibbs: every pair equally likely)."""
LEARN = "tr Gamma / tr Gamma_MLE"
"""The sweep's column of the data needed relative to maximum likelihood."""
MIX = "C_P"
"""The sweep's column of the Poincaré constant of the rule's block dynamics, in steps."""


def comparison(sweep: pd.DataFrame, coupling: float) -> dict:
    """``sweep``: one row per (coupling, rule) with the columns ``coupling in``, ``rule``, :data:`LEARN` and
    :data:`MIX`. At ``coupling``, returns the rule that learns with the least data (``best_learn``), its
    ratio and the uniform rule's (``best_learn_ratio``, ``uniform_learn_ratio``), and the same for mixing
    (``best_mix``, ``best_mix_cp``, ``uniform_cp``). A tie goes to the rule listed first."""
    missing = [c for c in ("coupling in", "rule", LEARN, MIX) if c not in sweep.columns]
    if missing:
        raise ValueError(f"sweep lacks the columns {missing}; it needs one row per (coupling in, rule).")
    at = sweep[sweep["coupling in"] == coupling]
    if at.empty:
        raise ValueError(f"sweep has no row at coupling in = {coupling!r}; it has {sorted(set(sweep['coupling in']))}.")
    if at.rule.duplicated().any() or BASELINE not in set(at.rule):
        raise ValueError(f"sweep must hold each rule once at coupling in = {coupling!r}, the {BASELINE!r} rule "
                         f"among them; got {list(at.rule)}.")
    at = at.set_index("rule")
    if not np.all(np.isfinite(at[[LEARN, MIX]].to_numpy(dtype=float))):
        raise ValueError(f"sweep has a non-finite {LEARN} or {MIX} at coupling in = {coupling!r}: nothing to compare.")
    best_learn, best_mix = at[LEARN].idxmin(), at[MIX].idxmin()
    return dict(best_learn=str(best_learn), best_learn_ratio=float(at.loc[best_learn, LEARN]),
                uniform_learn_ratio=float(at.loc[BASELINE, LEARN]), best_mix=str(best_mix),
                best_mix_cp=float(at.loc[best_mix, MIX]), uniform_cp=float(at.loc[BASELINE, MIX]))


@dataclasses.dataclass(frozen=True)
class Params(ChapterParams):
    """The parameters of ``notebooks/adaptive_masking.md`` (their meaning: its parameters cell), checked
    when built: the Lemma 2 rule's bias is a probability, ``n`` splits into two clusters of ``n / 2`` sites
    and the exact numerics sum over ``2^n`` states (at most :data:`gmlm_lib.ising.fisher.MAX_EXACT_N`)."""

    def check(self) -> None:
        self.need(finite(self.lemma2_bias) and 0 < self.lemma2_bias < 1, "lemma2_bias", "a probability in (0, 1)")
        self.need(count(self.n, 4) and self.n % 2 == 0 and self.n <= MAX_EXACT_N, "n",
                  f"an even integer in [4, {MAX_EXACT_N}]: two clusters of n / 2 sites, exact numerics over 2^n states")
        for name in ("coupling_in", "coupling_out", "field"):
            self.number(name)
        self.number("strength", 0)
        self.numbers("couplings_in")

    # the fields: the parameters cell's names in its order (seed and install_ref: ChapterParams)
    lemma2_bias: float
    n: int
    coupling_in: float
    coupling_out: float
    field: float
    strength: float
    couplings_in: list
