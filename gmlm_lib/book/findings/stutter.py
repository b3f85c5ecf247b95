"""The verdicts of the stutter chapter (``notebooks/stutter.md``) [Section 3.4, Appendix L.5, Tables 4-5].

The paper's two hypotheses on adjacent output positions are each read off sentence-bootstrap 95%
intervals of AUROCs (:func:`gmlm_lib.mt.stutter_analysis.summary_table`): a hypothesis is
**supported** when every mean- and max-aggregate interval of its statistics lies above 0.5,
**contradicted** when every one lies below 0.5 (the opposite direction holds), and **not supported**
otherwise.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from gmlm_lib.book.findings.reuse import PADIR_MODELS, ReuseParams

__all__ = ["HYPOTHESES", "AGGREGATES", "Params", "hypothesis", "agreement", "findings"]

HYPOTHESES = {"h1": ("self_fwd", "self_bwd"), "h2": ("tv", "cos")}
"""Hypothesis 1 (stutter pairs attend more to each other: self-attention i -> i+1 and back) and
Hypothesis 2 (they read the same source: TV and cosine distance of their cross-attention)."""
AGGREGATES = ("avg", "max")
"""The aggregates over layers and heads whose intervals decide a verdict."""


@dataclasses.dataclass(frozen=True)
class Params(ReuseParams):
    """The parameters of the stutter chapter (their meaning: its parameters cell), checked when built;
    ``decode_buckets`` None is the preset's (:meth:`~gmlm_lib.book.findings.reuse.ReuseParams.resolved`)."""

    def check(self) -> None:
        self.check_reuse()
        self.need(self.analysed in PADIR_MODELS, "analysed", f"one of {list(PADIR_MODELS)}")
        for name, why in (("steps", "refinement passes T of the analysed outputs"), ("hyps", "length hypotheses"),
                          ("max_steps", "passes of the stutter-over-steps decode"),
                          ("batch_size", "sentences a decoding batch"), ("ar_beam", "beam width"),
                          ("bootstrap_samples", "sentence-bootstrap resamples")):
            self.integer(name, 1, why=why)

    # the fields: the parameters cell's names in its order (the shared ones: ReuseParams and ChapterParams)
    analysed: str
    steps: int
    hyps: int
    max_steps: int
    batch_size: int
    ar_beam: int
    bootstrap_samples: int


def agreement(same: dict) -> dict:
    """Whether the stutter-over-steps decode's row for pass T is the T-pass decode analysed, sentence
    for sentence. ``same``: model -> one bool a sentence (empty dict: not checked, T > max_steps).
    Returns ``agree_identical`` and ``agree_total`` (sentences, all models) and ``agree_word``:
    "identical" (every one), "not identical" (some differ) or "not checked"."""
    flags = [bool(x) for values in same.values() for x in values]
    word = "not checked" if not flags else ("identical" if all(flags) else "not identical")
    return dict(agree_identical=sum(flags), agree_total=len(flags), agree_word=word)


def _interval(tables: dict, stat: str, aggregate: str) -> tuple[float, float]:
    if stat not in tables:
        raise KeyError(f"no summary table for the statistic {stat!r}; have {sorted(tables)}.")
    row = tables[stat].set_index("aggregate")
    if aggregate not in row.index or "AUROC 95% CI" not in row.columns:
        raise KeyError(f"the {stat!r} table needs an {aggregate!r} row and an 'AUROC 95% CI' column.")
    low, high = row.loc[aggregate, "AUROC 95% CI"]
    return float(low), float(high)


def hypothesis(tables: dict, stats) -> str:
    """"supported", "contradicted" or "not supported" (module docstring), from ``tables``: statistic ->
    summary table with an ``aggregate`` column and an ``AUROC 95% CI`` column of (low, high)."""
    intervals = [_interval(tables, s, a) for s in stats for a in AGGREGATES]
    if all(low > 0.5 for low, _ in intervals):
        return "supported"
    if all(high < 0.5 for _, high in intervals):
        return "contradicted"
    return "not supported"


def findings(tables: dict, by_step: pd.DataFrame, *, analysed: str, other: str = "padir_raw") -> dict:
    """Every verdict and derived number the chapter's box glues: ``h1``, ``h2`` (:func:`hypothesis`); the
    mean-aggregate statistic of stutter and other pairs and its AUROC (``self_s``, ``self_o``,
    ``auc_self``, the same for ``self_bwd``, ``tv``, ``cos``); stutter per 100 words after the first
    and the last pass (``st1``, ``stT`` for ``analysed``, ``st1_raw``, ``stT_raw`` for ``other``) and
    after dropping repeats (``stT_drop``). ``by_step``: one row per (model, step) in step order, with
    ``word_stutter`` and ``word_stutter_after_drop``."""
    out = {key: hypothesis(tables, stats) for key, stats in HYPOTHESES.items()}
    for stat, short in (("self_fwd", "self"), ("self_bwd", "self_bwd"), ("tv", "tv"), ("cos", "cos")):
        row = tables[stat].set_index("aggregate").loc["avg"]
        out[f"{short}_s"], out[f"{short}_o"] = float(row["stutter mean"]), float(row["other mean"])
        out[f"auc_{short}"] = float(row["AUROC"])
    first, last = by_step.groupby("model").first(), by_step.groupby("model").last()
    for name, suffix in ((analysed, ""), (other, "_raw")):
        if name not in first.index:
            raise KeyError(f"by_step has no rows of the model {name!r}; models: {sorted(first.index)}.")
        out[f"st1{suffix}"] = float(first.loc[name, "word_stutter"])
        out[f"stT{suffix}"] = float(last.loc[name, "word_stutter"])
    out["stT_drop"] = float(last.loc[analysed, "word_stutter_after_drop"])
    return out
