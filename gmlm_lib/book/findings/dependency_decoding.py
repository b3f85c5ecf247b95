"""The verdicts of the dependency-aware decoding chapter (``notebooks/dependency_decoding.md``).

Two bars, set before the runs: on the Ising testbed (Eq. 6) the dependency-aware sampler reaches the
heavy mode in at most 1/:data:`PASS_RATIO_BAR` of the passes independent parallel needs; in
translation it gains at least :data:`GAIN_BAR` BLEU over plain PaDIR at T = 4, significantly by the
book's one rule (:func:`gmlm_lib.book.findings.rules.compare`).
"""

from __future__ import annotations

import math

import pandas as pd

from gmlm_lib.book.findings.rules import ALPHA, compare, grade, listed

__all__ = ["PASS_RATIO_BAR", "GAIN_BAR", "STRATEGIES", "ising", "translation"]

PASS_RATIO_BAR = 10.0
"""Testbed bar: independent parallel needs at least this many times the dependency-aware sampler's passes."""
GAIN_BAR = 1.0
"""Translation bar: BLEU of dependency-aware minus plain PaDIR at T = 4 (and significant)."""
STRATEGIES = ("plain PaDIR", "Mask-Predict", "dependency-aware")
"""The frontier's strategies; the first is the baseline of every p-value."""


def ising(median_passes: pd.Series, max_steps: int) -> dict:
    """The testbed verdict at the largest coupling. ``median_passes``: sampler name -> median passes to
    the heavy mode (NaN or inf where fewer than half the chains reached it within ``max_steps`` steps),
    with ``"independent parallel"`` and ``"dependency-aware"``. Independent parallel makes one pass a
    step, so a censored run's ratio is at least ``max_steps`` over the dependency-aware median: that
    lower bound is graded, and ``ising_ratio_kind`` says "a lower bound" instead of "measured"."""
    parallel, ours = float(median_passes["independent parallel"]), float(median_passes["dependency-aware"])
    if not math.isfinite(ours) or ours <= 0:
        raise ValueError(f"the dependency-aware sampler's median passes must be a positive number; got {ours!r}: "
                         "without it there is no ratio to grade.")
    censored = not math.isfinite(parallel)
    ratio = (max_steps if censored else parallel) / ours
    return dict(ising_pass_ratio=ratio, ising_ratio_kind="a lower bound" if censored else "measured",
                ising_ratio_met=grade(ratio, PASS_RATIO_BAR, at_least=True), bar_pass_ratio=PASS_RATIO_BAR,
                max_steps=int(max_steps))


def _better_worse(frontier: pd.DataFrame, name: str) -> tuple[list, list]:
    better, worse = [], []
    for T in sorted(frontier.index.get_level_values("T").unique()):
        diff = float(frontier.loc[(T, name), "BLEU"]) - float(frontier.loc[(T, STRATEGIES[0]), "BLEU"])
        call = compare(diff, float(frontier.loc[(T, name), "p vs plain"]))
        (better if call > 0 else worse if call < 0 else []).append(int(T))
    return better, worse


def translation(frontier: pd.DataFrame, *, at_T: int = 4) -> dict:
    """The translation verdicts. ``frontier``: indexed by (``T``, ``strategy``) over :data:`STRATEGIES`,
    with ``BLEU``, ``p vs plain`` (NaN for plain PaDIR) and ``median ms``. Returns the BLEU and latency of
    each strategy at ``at_T``, ``dep_gain_bleu`` and ``dep_p_value`` (dependency-aware against plain),
    ``gain_met`` (:data:`GAIN_BAR` reached and significantly better), ``vs_maskpredict`` ("not worse
    than" or "worse than" in BLEU), and for each other strategy the T where it is significantly better or
    worse than plain PaDIR (``dep_better_at``, ``dep_worse_at``, ``mp_better_at``, ``mp_worse_at``; "no T")."""
    missing = [c for c in ("BLEU", "p vs plain", "median ms") if c not in frontier.columns]
    if missing or list(frontier.index.names) != ["T", "strategy"]:
        raise ValueError(f"frontier must be indexed by (T, strategy) with columns BLEU, p vs plain, median ms; "
                         f"missing {missing}, index {frontier.index.names}.")
    at = frontier.xs(at_T, level="T")
    bleu = {name: float(at.loc[name, "BLEU"]) for name in STRATEGIES}
    gain, p = bleu["dependency-aware"] - bleu["plain PaDIR"], float(at.loc["dependency-aware", "p vs plain"])
    met = grade(gain, GAIN_BAR, at_least=True) == "met" and compare(gain, p) > 0
    out = dict(plain_bleu=bleu["plain PaDIR"], maskpredict_bleu=bleu["Mask-Predict"], dep_bleu=bleu["dependency-aware"],
               dep_gain_bleu=gain, dep_p_value=p, gain_met="met" if met else "missed", bar_gain=GAIN_BAR, bar_p=ALPHA,
               vs_maskpredict="not worse than" if bleu["dependency-aware"] >= bleu["Mask-Predict"] else "worse than",
               ms_plain=float(at.loc["plain PaDIR", "median ms"]), ms_mp=float(at.loc["Mask-Predict", "median ms"]),
               ms_dep=float(at.loc["dependency-aware", "median ms"]))
    for key, name in (("dep", "dependency-aware"), ("mp", "Mask-Predict")):
        better, worse = _better_worse(frontier, name)
        out[f"{key}_better_at"], out[f"{key}_worse_at"] = listed(better, "no T"), listed(worse, "no T")
    return out
