"""The verdicts of the dependency-aware decoding chapter (``notebooks/dependency_decoding.md``).

Two bars, set before the runs: on the Ising testbed (Eq. 6) the dependency-aware sampler reaches the
heavy mode in at most 1/:data:`PASS_RATIO_BAR` of the passes independent parallel needs; in
translation it gains at least :data:`GAIN_BAR` BLEU over plain PaDIR at T = 4, significantly by the
book's one rule (:func:`gmlm_lib.book.findings.rules.compare`).
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

from gmlm_lib.book.findings.reuse import PADIR_MODELS, ReuseParams
from gmlm_lib.book.findings.rules import ALPHA, compare, grade, listed
from gmlm_lib.book.validate import finite

__all__ = ["PASS_RATIO_BAR", "GAIN_BAR", "STRATEGIES", "GRADED_T", "Params", "ising", "thresholds", "translation",
           "threshold_pairs", "threshold_findings", "EXACT_TV", "partition_findings"]

PASS_RATIO_BAR = 10.0
"""Testbed bar: independent parallel needs at least this many times the dependency-aware sampler's passes."""
GAIN_BAR = 1.0
"""Translation bar: BLEU of dependency-aware minus plain PaDIR at T = 4 (and significant)."""
STRATEGIES = ("plain PaDIR", "Mask-Predict", "dependency-aware")
"""The frontier's strategies; the first is the baseline of every p-value."""
GRADED_T = 4
"""The number of passes at which the chapter grades its bars and tunes its thresholds."""


@dataclasses.dataclass(frozen=True)
class Params(ReuseParams):
    """The parameters of the dependency-aware decoding chapter (their meaning: its parameters cell),
    checked when built; ``decode_buckets`` None is the preset's
    (:meth:`~gmlm_lib.book.findings.reuse.ReuseParams.resolved`)."""

    def check(self) -> None:
        from gmlm_lib.ising.samplers import MAX_KERNEL_N
        from gmlm_lib.mt.decoding import RULE_SETTING, RULE_STRATEGIES, StrategyOptions

        self.check_reuse()
        self.need(self.model_name in PADIR_MODELS, "model_name", f"one of {list(PADIR_MODELS)}")
        for name in ("passes", "rule_passes"):
            self.integers(name, 1)
            self.need(GRADED_T in getattr(self, name), name,
                      f"a list that includes {GRADED_T} (the T the chapter grades)")
        for name in ("confidence", "dependency"):
            self.numbers(name, 0.0, high=1.0, why="thresholds; several: the best pair on the val split is used")
        self.need(self.refill in ("prediction", "mask"), "refill", "'prediction' or 'mask'")
        self.integer("tune_sentences", 0, why="val sentences of the threshold tuning")
        self.need(self.tune_sentences > 0 or len(self.confidence) * len(self.dependency) == 1, "tune_sentences",
                  "an integer >= 1 when confidence or dependency lists several values (tuned on the val split)")
        self.number("similarity", 0.0, "a cosine similarity", high=1.0)
        self.need(isinstance(self.rule_grid, dict) and set(self.rule_grid) == set(RULE_STRATEGIES)
                  and all(isinstance(v, list) and len(v) > 0 and finite(v) for v in self.rule_grid.values()),
                  "rule_grid", f"a dict with one non-empty list of numbers for each of {RULE_STRATEGIES}")
        for name, values in self.rule_grid.items():  # each value a setting its rule takes (a block: a power of two)
            for value in values:
                try:
                    StrategyOptions.for_rule(name, value)
                except (TypeError, ValueError) as err:
                    self.need(False, "rule_grid", f"settings each rule takes: {name}'s {RULE_SETTING[name]} {value!r} "
                                                  f"is refused ({str(err).rstrip('.')})")
        for name, why in (("hyps", "length hypotheses"), ("latency_sentences", "timed at batch 1"),
                          ("batch_size", "sentences a decoding batch"), ("bootstrap_samples", "paired-bootstrap "
                          "resamples"), ("chains", "Ising chains"), ("max_steps", "steps per chain"),
                          ("random_models", "random models of the stationary-law check")):
            self.integer(name, 1, why=why)
        self.integer("ising_n", 2, MAX_KERNEL_N, why="the exact transition matrices have 2^n states")
        self.integer("clique", 2, self.ising_n, why="a clique of the ising_n sites")
        self.numbers("couplings", why="clique couplings J")
        self.number("field")
        self.need(finite(self.random_scale) and self.random_scale > 0, "random_scale", "a finite coupling scale > 0")

    # the fields: the parameters cell's names in its order (the shared ones: ReuseParams and ChapterParams)
    model_name: str
    passes: list
    hyps: int
    confidence: list
    dependency: list
    refill: str
    tune_sentences: int
    similarity: float
    latency_sentences: int
    rule_passes: list
    rule_grid: dict
    batch_size: int
    bootstrap_samples: int
    ising_n: int
    clique: int
    couplings: list
    field: float
    chains: int
    max_steps: int
    random_models: int
    random_scale: float


def thresholds(tuning: pd.DataFrame | None, confidence, dependency, sentences: int) -> dict:
    """The dependency-aware thresholds the chapter uses. ``tuning``: one row per (``confidence``,
    ``dependency``) pair with the val ``BLEU`` at T = :data:`GRADED_T` (None: one pair given, not
    tuned); the pair of highest BLEU wins (the first in the table's order on a tie). Returns
    ``tuned_confidence``, ``tuned_dependency``, ``tuned_word`` ("best on the val split" or "given"),
    ``tuned_candidates`` (pairs tried) and ``tuned_sentences`` (val sentences, 0 when not tuned)."""
    if tuning is None:
        if len(confidence) * len(dependency) != 1:
            raise ValueError(f"thresholds: {len(confidence) * len(dependency)} threshold pairs and no tuning table; "
                             "pass the table of their val BLEU, or one confidence and one dependency.")
        return dict(tuned_confidence=float(confidence[0]), tuned_dependency=float(dependency[0]), tuned_word="given",
                    tuned_candidates=1, tuned_sentences=0)
    missing = [c for c in ("confidence", "dependency", "BLEU") if c not in tuning.columns]
    if missing or not len(tuning) or tuning["BLEU"].isna().any():
        raise ValueError(f"thresholds: the tuning table needs rows with confidence, dependency and a BLEU that is not "
                         f"NaN; missing columns {missing}, {len(tuning)} rows.")
    best = tuning.loc[tuning["BLEU"].idxmax()]
    return dict(tuned_confidence=float(best["confidence"]), tuned_dependency=float(best["dependency"]),
                tuned_word="best on the val split", tuned_candidates=len(tuning), tuned_sentences=int(sentences))


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
    ``gain_met`` (:data:`GAIN_BAR` reached and significantly better), ``vs_maskpredict`` ("not below"
    or "below": the two BLEU at ``at_T`` compared as numbers, no test), and for each other strategy the T
    where it is significantly better or worse than plain PaDIR (``dep_better_at``, ``dep_worse_at``,
    ``mp_better_at``, ``mp_worse_at``; "no T")."""
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
               vs_maskpredict="not below" if bleu["dependency-aware"] >= bleu["Mask-Predict"] else "below",
               ms_plain=float(at.loc["plain PaDIR", "median ms"]), ms_mp=float(at.loc["Mask-Predict", "median ms"]),
               ms_dep=float(at.loc["dependency-aware", "median ms"]))
    for key, name in (("dep", "dependency-aware"), ("mp", "Mask-Predict")):
        better, worse = _better_worse(frontier, name)
        out[f"{key}_better_at"], out[f"{key}_worse_at"] = listed(better, "no T"), listed(worse, "no T")
    return out


# --- the exercises: the thresholds of the translation strategy, and the groups on a random model ------

def threshold_pairs(confidence, dependency, chosen: dict) -> dict:
    """Exercise ``ex-dependency-threshold``: the (confidence, dependency) pairs to compare, by label:
    ``"tuned"`` (``chosen``, the pair the chapter uses), ``"eager"`` (the lowest confidence and the
    highest dependency threshold listed: most positions committed a pass) and ``"cautious"`` (the
    highest confidence and the lowest dependency threshold: fewest). A pair equal to one before it is
    left out."""
    if not confidence or not dependency:
        raise ValueError("threshold_pairs: confidence and dependency must each list at least one threshold.")
    pairs = {"tuned": (float(chosen["confidence"]), float(chosen["dependency"])),
             "eager": (float(min(confidence)), float(max(dependency))),
             "cautious": (float(max(confidence)), float(min(dependency)))}
    out: dict = {}
    for label, pair in pairs.items():
        if pair not in out.values():
            out[label] = pair
    return out


def threshold_findings(table: pd.DataFrame) -> dict:
    """The glued values of exercise ``ex-dependency-threshold``. ``table``: one row per (``pair``, ``T``)
    with ``BLEU``, the pairs of :func:`threshold_pairs`. Returns ``ex_thr_small_T`` / ``ex_thr_large_T``
    (the fewest and the most passes tried) and, for ``eager`` and ``cautious``, their BLEU less the tuned
    pair's at each (``ex_thr_eager_small``, ...; NaN for a pair equal to the tuned one, which
    ``ex_thr_<label>_text`` then says: "+1.2 at T = 1, -0.3 at T = 10" or "the tuned pair itself")."""
    missing = [c for c in ("pair", "T", "BLEU") if c not in table.columns]
    if missing or "tuned" not in set(table["pair"]):
        raise ValueError(f"threshold_findings: the table needs rows of the 'tuned' pair and the columns pair, T, BLEU; "
                         f"missing {missing}.")
    bleu = table.set_index(["pair", "T"])["BLEU"].astype(float)
    small, large = int(table["T"].min()), int(table["T"].max())
    out = dict(ex_thr_small_T=small, ex_thr_large_T=large)
    for label in ("eager", "cautious"):
        if label in set(table["pair"]):
            d_small = float(bleu[(label, small)] - bleu[("tuned", small)])
            d_large = float(bleu[(label, large)] - bleu[("tuned", large)])
            text = f"{d_small:+.1f} at T = {small}, {d_large:+.1f} at T = {large}"
        else:
            d_small = d_large = math.nan
            text = "the tuned pair itself"
        out.update({f"ex_thr_{label}_small": d_small, f"ex_thr_{label}_large": d_large, f"ex_thr_{label}_text": text})
    return out


EXACT_TV = 1e-12
"""A stationary TV at or below this is exact to rounding."""


def partition_findings(table: pd.DataFrame) -> dict:
    """The glued values of exercise ``ex-dependency-random``. ``table``: one row per grouping of the
    random model (:func:`gmlm_lib.ising.samplers.dependency_partitions`) with ``passes`` (a sweep's
    passes, the largest group) and ``stationary_tv``. Returns ``ex_part_line``: for each number of
    passes, the smallest stationary TV of a grouping that costs it ("1 pass: 0.21; 3 passes: 0.12;
    5 passes: exact"), ``ex_part_one`` (the TV at one pass, independent parallel), ``ex_part_exact_at``
    (the fewest passes whose TV is exact to :data:`EXACT_TV`; 0 when none is) and ``ex_part_monotone``
    ("falls with every pass added" when the smallest TV strictly falls as the passes grow, until it is
    exact, else "does not always fall")."""
    missing = [c for c in ("passes", "stationary_tv") if c not in table.columns]
    if missing or table.empty or table["stationary_tv"].isna().any():
        raise ValueError(f"partition_findings: the table needs rows with passes and a stationary_tv that is not NaN; "
                         f"missing {missing}, {len(table)} rows.")
    best = table.groupby("passes")["stationary_tv"].min().sort_index()
    line = "; ".join(f"{int(k)} pass{'es' if k != 1 else ''}: {'exact' if v <= EXACT_TV else f'{v:.3f}'}"
                     for k, v in best.items())
    exact = [int(k) for k, v in best.items() if v <= EXACT_TV]
    falls = all(b < a or a <= EXACT_TV for a, b in zip(best.to_numpy()[:-1], best.to_numpy()[1:]))
    return dict(ex_part_line=line, ex_part_one=float(best.get(1, math.nan)), ex_part_exact_at=min(exact, default=0),
                ex_part_monotone="falls with every pass added" if falls else "does not always fall")
