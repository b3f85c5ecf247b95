"""The verdicts of the stutter chapter (``notebooks/stutter.md``) [Section 3.4, Appendix L.5, Tables 4-5].

The paper's two hypotheses on adjacent output positions are each read off sentence-bootstrap 95%
intervals of AUROCs (:func:`gmlm_lib.mt.stutter_analysis.summary_table`): a hypothesis is
**supported** when every mean- and max-aggregate interval of its statistics lies above 0.5,
**contradicted** when every one lies below 0.5 (the opposite direction holds), **mixed** when the
intervals of one of its statistics all lie above 0.5 and those of another all below (Hypothesis 1's
forward and backward self-attention pointing opposite ways), and **not supported** otherwise.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from gmlm_lib.book.findings.reuse import PADIR_MODELS, ReuseParams

__all__ = ["HYPOTHESES", "AGGREGATES", "Params", "hypothesis", "agreement", "findings", "THIRDS", "by_position",
           "position_findings", "stutter_tokens", "token_findings"]

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
    """"supported", "contradicted", "mixed" or "not supported" (module docstring), from ``tables``:
    statistic -> summary table with an ``aggregate`` column and an ``AUROC 95% CI`` column of (low, high)."""
    sides = []
    for stat in stats:
        intervals = [_interval(tables, stat, a) for a in AGGREGATES]
        sides.append("above" if all(low > 0.5 for low, _ in intervals) else
                     "below" if all(high < 0.5 for _, high in intervals) else "neither")
    if all(side == "above" for side in sides):
        return "supported"
    if all(side == "below" for side in sides):
        return "contradicted"
    return "mixed" if "above" in sides and "below" in sides else "not supported"


def findings(tables: dict, by_step: pd.DataFrame, *, analysed: str, other: str = "padir_raw") -> dict:
    """Every verdict and derived number the chapter's box glues: ``h1``, ``h2`` (:func:`hypothesis`); the
    mean-aggregate statistic of stutter and other pairs and its AUROC (``self_s``, ``self_o``,
    ``auc_self``, the same for ``self_bwd``, ``tv``, ``cos``; Hypothesis 1's two directions again as
    ``h1_forward_auc`` and ``h1_backward_auc``); stutter per 100 words after the first and the last pass
    (``st1``, ``stT`` for ``analysed``, ``st1_raw``, ``stT_raw`` for ``other``) and after merging repeats
    (``stT_drop``, the paper's protocol: PaDIR's output has its repeated tokens merged after the last pass,
    Appendix L), with the unmerged rate beside it as ``padir_stutter_unmerged`` (``stT``). ``by_step``: one row per (model, step) in step order, with
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
    out.update(h1_forward_auc=out["auc_self"], h1_backward_auc=out["auc_self_bwd"], padir_stutter_unmerged=out["stT"])
    return out


# --- the exercises: where in a sentence, and on which tokens, PaDIR stutters -------------------------

THIRDS = ("start", "middle", "end")
"""The parts of an output in exercise ``ex-stutter-position``: pair ``i`` of a sentence's ``n`` adjacent pairs
is in third ``floor(3 i / n)``."""


def _pairs(pairs: pd.DataFrame, columns) -> None:
    missing = [c for c in columns if c not in pairs.columns]
    if missing:
        raise ValueError(f"the pairs table (gmlm_lib.mt.stutter_analysis.analyse) lacks the columns {missing}.")


def by_position(pairs: pd.DataFrame) -> pd.DataFrame:
    """Exercise ``ex-stutter-position``: stutter and Hypothesis 2's signal in each third of the outputs
    (:data:`THIRDS`), and over all. ``pairs``: one row an adjacent output pair with ``sentence``,
    ``position`` (0 for a sentence's first pair), ``stutter`` and ``tv_avg``
    (:func:`gmlm_lib.mt.stutter_analysis.analyse`). Columns ``pairs``, ``stutter`` (stutter pairs),
    ``stutter_pct`` and ``tv_auroc``: the AUROC of the smaller cross-attention TV for predicting stutter
    among that third's pairs alone (NaN where the third has no stutter pair or only stutter pairs). If
    stutter gathered in one part of the outputs and TV were smaller there for every pair, the AUROC over
    all pairs would be high without the hypothesis holding within any part; within a third, position
    cannot produce it."""
    from gmlm_lib.mt.stutter_analysis import auroc

    _pairs(pairs, ("sentence", "position", "stutter", "tv_avg"))
    if pairs.empty:
        raise ValueError("by_position: no adjacent pair to describe (every output shorter than two tokens).")
    per_sentence = pairs.groupby("sentence")["position"].transform("size").to_numpy()
    third = np.minimum(3 * pairs["position"].to_numpy() // per_sentence, 2)
    rows = {}
    for name, sel in [*((t, third == i) for i, t in enumerate(THIRDS)), ("all", np.ones(len(pairs), bool))]:
        part = pairs[sel]
        flag = part["stutter"].to_numpy(bool)
        rows[name] = dict(pairs=len(part), stutter=int(flag.sum()),
                          stutter_pct=100 * flag.mean() if len(part) else math.nan,
                          tv_auroc=auroc(-part["tv_avg"].to_numpy(np.float64), flag) if len(part) else math.nan)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("part of the output")


def position_findings(table: pd.DataFrame) -> dict:
    """The glued values of exercise ``ex-stutter-position`` from :func:`by_position`'s table:
    ``ex_pos_most`` (the third with the highest stutter share; "none" without stutter) and its
    ``ex_pos_most_pct``, the lowest and highest AUROC within a third (``ex_pos_auc_low``,
    ``ex_pos_auc_high``, over the thirds where it is defined; NaN where none is; in words ``ex_pos_auc_span``,
    "from 0.612 to 0.744") and ``ex_pos_within``:
    "above 0.5 in every third", "at or below 0.5 in some third", or "not measurable in every third" (a
    third with no stutter pair, or no other pair)."""
    thirds = table.loc[list(THIRDS)]
    if thirds["stutter"].sum() == 0:
        most, most_pct = "none", 0.0
    else:
        most = str(thirds["stutter_pct"].idxmax())
        most_pct = float(thirds.loc[most, "stutter_pct"])
    auc = thirds["tv_auroc"].astype(float)
    defined = auc.dropna()
    if len(defined) < len(THIRDS):
        within = "not measurable in every third"
    else:
        within = "above 0.5 in every third" if (defined > 0.5).all() else "at or below 0.5 in some third"
    low, high = (float(defined.min()), float(defined.max())) if len(defined) else (math.nan, math.nan)
    span = ("not defined in any third" if not len(defined) else f"{low:.3f}" if len(defined) == 1
            else f"from {low:.3f} to {high:.3f}")
    return dict(ex_pos_most=most, ex_pos_most_pct=most_pct, ex_pos_auc_low=low, ex_pos_auc_high=high,
                ex_pos_auc_span=span, ex_pos_within=within)


def stutter_tokens(pairs: pd.DataFrame, piece, top: int = 10) -> pd.DataFrame:
    """Exercise ``ex-stutter-tokens``: the ``top`` tokens that stutter most often. ``pairs`` as for
    :func:`by_position` with ``token`` (the pair's first token, which a stutter pair repeats); ``piece``:
    token id -> its SentencePiece text (``vocab.sp.id_to_piece``). One row a token that stutters at least
    once, most stutter pairs first (then by id): ``piece``, ``stutter``, ``share`` (of all stutter pairs),
    ``opens`` (the pairs whose first token it is) and ``rate`` (``stutter / opens``: how often the token,
    once output, is repeated next)."""
    _pairs(pairs, ("token", "stutter"))
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"stutter_tokens: top must be a whole number >= 1; got {top!r}.")
    counts = pairs.groupby("token")["stutter"].agg(["sum", "size"])
    counts = counts[counts["sum"] > 0].rename(columns={"sum": "stutter", "size": "opens"})
    counts = counts.reset_index().sort_values(["stutter", "token"], ascending=[False, True]).head(top)
    total = int(pairs["stutter"].sum())
    out = pd.DataFrame({"piece": [str(piece(int(t))) for t in counts["token"]],
                        "stutter": counts["stutter"].astype(int),
                        "share": counts["stutter"] / total if total else counts["stutter"] * 0.0,
                        "opens": counts["opens"].astype(int), "rate": counts["stutter"] / counts["opens"]})
    return out.set_index("piece")


def token_findings(table: pd.DataFrame, pairs: pd.DataFrame) -> dict:
    """The glued values of exercise ``ex-stutter-tokens``: ``ex_tok_distinct`` (tokens that stutter at least
    once, in ``pairs``), ``ex_tok_top`` (the one that stutters most; "none") with ``ex_tok_top_share``,
    and ``ex_tok_shown`` / ``ex_tok_shown_share`` (the rows of :func:`stutter_tokens`' table and the share
    of all stutter pairs they hold; 0 without stutter)."""
    _pairs(pairs, ("token", "stutter"))
    distinct = int(pairs.loc[pairs["stutter"].astype(bool), "token"].nunique())
    if table.empty:
        return dict(ex_tok_distinct=distinct, ex_tok_top="none", ex_tok_top_share=0.0, ex_tok_shown=0,
                    ex_tok_shown_share=0.0)
    return dict(ex_tok_distinct=distinct, ex_tok_top=str(table.index[0]),
                ex_tok_top_share=float(table["share"].iloc[0]), ex_tok_shown=len(table),
                ex_tok_shown_share=float(table["share"].sum()))
