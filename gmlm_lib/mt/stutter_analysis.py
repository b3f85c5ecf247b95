"""Where parallel decoding stutters: attention statistics of adjacent output positions
[Section 3.4, App. L.5, Tables 4-5].

For every pair of adjacent positions ``(i, i + 1)`` of a PaDIR output, taken from the final
refinement pass (:func:`gmlm_lib.mt.decoding.padir_refine` with ``return_attention=True``):

* Hypothesis 1 (strongly dependent positions attend to each other): the decoder self-attention
  weight from ``i`` to ``i + 1`` (``self_fwd``) and from ``i + 1`` to ``i`` (``self_bwd``);
* Hypothesis 2 (they read the same source tokens): the total-variation distance
  ``tv = 1/2 sum_s |c_i(s) - c_{i+1}(s)|`` and the cosine distance ``cos = 1 - <c_i, c_{i+1}> /
  (|c_i| |c_{i+1}|)`` between their cross-attention distributions ``c`` over the encoder
  positions (the source tokens and the ``[LENGTH]`` slot in front).

Each is computed per layer and head and aggregated by its min, mean and max over all of them,
as in the paper's tables. A pair is labelled stutter when the two tokens are equal and the
reference never repeats that token (:func:`token_stutter_labels`, the token-level analogue of
:func:`gmlm_lib.mt.metrics.stutter_pairs` on token ids).
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
import pandas as pd
from scipy import stats as sps

from gmlm_lib.core import checks
from gmlm_lib.mt import decoding, metrics

STATISTICS = ("self_fwd", "self_bwd", "tv", "cos")
AGGREGATES = ("min", "avg", "max")
STATISTIC_NAMES = {"self_fwd": "self-attention i → i+1", "self_bwd": "self-attention i+1 → i",
                   "tv": "cross-attention TV distance", "cos": "cross-attention cosine distance"}
"""What a reader calls each of ``STATISTICS`` (table rows, figure titles)."""


def token_stutter_labels(ids: Sequence[int], ref_ids: Sequence[int]) -> np.ndarray:
    """(n - 1,) bool for an output of n tokens: pair (i, i + 1) is stutter when ``ids[i] ==
    ids[i + 1]`` and the reference ``ref_ids`` has no such repeat of that token."""
    return np.array(metrics.stutter_pairs(ids, ref_ids), dtype=bool)


def pair_statistics(attention, lengths) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Per adjacent pair, per layer and head, the four statistics.

    ``attention``: a list over layers of ``(self (B, H, W, W), cross (B, H, W, S))`` weights;
    ``lengths`` (B,) the output lengths. Returns ``(sentence (P,), position (P,), stats)`` with
    ``stats[name]`` of shape (P, layers, H), P = sum of ``max(length - 1, 0)``."""
    lengths = np.asarray(lengths)
    sent = np.concatenate([np.full(max(n - 1, 0), b) for b, n in enumerate(lengths)]).astype(int)
    pos = np.concatenate([np.arange(max(n - 1, 0)) for n in lengths]).astype(int)
    out = {k: [] for k in STATISTICS}
    for w_self, w_cross in attention:
        w_self, w_cross = np.asarray(w_self, np.float64), np.asarray(w_cross, np.float64)
        out["self_fwd"].append(w_self[sent, :, pos, pos + 1])  # (P, H)
        out["self_bwd"].append(w_self[sent, :, pos + 1, pos])
        a, b = w_cross[sent, :, pos], w_cross[sent, :, pos + 1]  # (P, H, S)
        out["tv"].append(0.5 * np.abs(a - b).sum(-1))
        norm = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
        out["cos"].append(1.0 - (a * b).sum(-1) / np.maximum(norm, 1e-300))
    return sent, pos, {k: np.stack(v, axis=1) for k, v in out.items()}


def aggregate(stats: dict[str, np.ndarray]) -> pd.DataFrame:
    """(P, layers, H) arrays -> columns ``<stat>_<min|avg|max>`` over layers and heads."""
    cols = {}
    for name, v in stats.items():
        flat = v.reshape(v.shape[0], int(np.prod(v.shape[1:])))
        cols[f"{name}_min"], cols[f"{name}_avg"], cols[f"{name}_max"] = flat.min(1), flat.mean(1), flat.max(1)
    return pd.DataFrame(cols)


def auroc(scores, labels) -> float:
    """Area under the ROC curve of ``scores`` for predicting ``labels`` (True = positive): the
    probability that a random positive scores above a random negative, ties counting 1/2
    (the Mann-Whitney U statistic over n_pos * n_neg). NaN when a class is empty."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels, bool)
    if scores.shape != labels.shape or scores.ndim != 1:
        raise ValueError(f"auroc: scores and labels must be 1-D of the same length; got {scores.shape}, {labels.shape}.")
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = sps.rankdata(scores)  # average ranks for ties
    u = ranks[labels].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def bootstrap_indices(clusters, key, n_boot: int = 1000) -> list[np.ndarray]:
    """``n_boot`` resamples, drawn with ``key``, of whole clusters (sentences: the pairs of one
    sentence stay together) with replacement; each is an index array into ``clusters``."""
    n_boot = checks.integer(n_boot, "n_boot", low=1)
    key = checks.key(key)
    clusters = np.asarray(clusters)
    names, inverse = np.unique(clusters, return_inverse=True)
    members = [np.flatnonzero(inverse == j) for j in range(len(names))]
    draws = np.asarray(jax.random.randint(key, (n_boot, len(names)), 0, len(names)))
    return [np.concatenate([members[j] for j in row]) for row in draws]


def _ci(values) -> tuple[float, float]:
    values = np.asarray(values, np.float64)
    if not np.isfinite(values).any():
        return (float("nan"), float("nan"))
    lo, hi = np.nanpercentile(values, [2.5, 97.5])
    return (float(lo), float(hi))


def summary_table(df: pd.DataFrame, stat: str, resamples: list[np.ndarray], label: str = "stutter",
                  higher_predicts: bool = True) -> pd.DataFrame:
    """[Tables 4-5] for one statistic: for each aggregate (min/avg/max) the mean and std over stutter
    and non-stutter pairs, a bootstrap 95% CI of each mean over ``resamples`` (from
    :func:`bootstrap_indices`), and the AUROC of the statistic for predicting stutter (of minus
    it when ``higher_predicts`` is False: then a small value predicts stutter) with its CI."""
    y = df[label].to_numpy(bool)
    sign = 1.0 if higher_predicts else -1.0
    rows = []
    for agg in AGGREGATES:
        x = df[f"{stat}_{agg}"].to_numpy(np.float64)
        row = {"statistic": stat, "aggregate": agg}
        for name, flag in (("stutter", True), ("other", False)):
            sel = y == flag
            row[f"{name} mean"] = x[sel].mean() if sel.any() else np.nan
            row[f"{name} std"] = x[sel].std() if sel.any() else np.nan
            row[f"{name} 95% CI"] = _ci([x[i][y[i] == flag].mean() if (y[i] == flag).any() else np.nan
                                         for i in resamples])
        row["AUROC"] = auroc(sign * x, y)
        row["AUROC 95% CI"] = _ci([auroc(sign * x[i], y[i]) for i in resamples])
        rows.append(row)
    return pd.DataFrame(rows)


def analyse(translator, texts: list[str], refs: list[str], options, *, batch_size: int = 64,
            records: int | None = None, progress=None) -> tuple[pd.DataFrame, dict[str, np.ndarray], list[list[int]], np.ndarray]:
    """Decode ``texts`` with PaDIR ``options`` (a :class:`gmlm_lib.mt.translate.Translator` over a
    PaDIR model), read the attention of the final pass, and describe every adjacent output pair.

    Returns ``(pairs, per_layer, outputs, per_pass)``: ``pairs`` one row per pair with ``sentence``,
    ``position``, ``token``, ``stutter`` (:func:`token_stutter_labels` against the encoded
    reference) and the :func:`aggregate` columns; ``per_layer[name]`` (P, layers) the mean over
    heads of each statistic; ``outputs`` the raw output ids (repeats kept); ``per_pass`` (R, N, W),
    R = ``records``: row t the best hypothesis after pass t + 1, i.e. what decoding with ``steps = t + 1``
    returns (``pass_best`` of :func:`gmlm_lib.mt.decoding.padir_refine`; early-stopped rows, and rows past
    T, repeat their last one), padded to the width ``W`` of the largest bucket. ``records`` (default
    T): its rows, as :func:`gmlm_lib.mt.decoding.padir_refine`'s; analyses of several T with the same ``records``
    share their compiled programs."""
    ref_ids = translator.vocab.encode(refs)
    width = max(translator.buckets + (translator.cfg.max_len,))
    outputs: list[list[int] | None] = [None] * len(texts)
    records = decoding.pass_records(options, records)
    per_pass = np.full((records, len(texts), width), 0, np.int32)
    frames, layers = [], []
    for chunk, src, mask, key in translator.batches(texts, batch_size):
        out = decoding.padir(translator.graphdef, translator.params, jax.device_put(src), jax.device_put(mask), key,
                             options=options, max_len=translator.cfg.max_len, buckets=translator.buckets,
                             return_attention=True, records=records)
        k = len(chunk)
        lengths = np.asarray(out["length"])[:k]
        tok = np.asarray(out["ids"])[:k]
        hist = np.asarray(out["pass_best"])[:, :k]
        per_pass[:, chunk, : hist.shape[2]] = hist
        att = [(np.asarray(s)[:k], np.asarray(c)[:k]) for s, c in out["attention"]]
        sent, pos, st = pair_statistics(att, lengths)
        df = aggregate(st)
        gidx = np.asarray(chunk)[sent]
        df.insert(0, "sentence", gidx)
        df.insert(1, "position", pos)
        df.insert(2, "token", tok[sent, pos])
        labels = {i: token_stutter_labels(tok[r, : lengths[r]], ref_ids[i]) for r, i in enumerate(chunk)}
        df.insert(3, "stutter", [bool(labels[g][p]) for g, p in zip(gidx, pos)])
        frames.append(df)
        layers.append({name: v.mean(-1) for name, v in st.items()})
        for r, i in enumerate(chunk):
            outputs[i] = tok[r, : lengths[r]].tolist()
        if progress is not None:
            progress.update(k)
    pairs = pd.concat(frames, ignore_index=True)
    per_layer = {name: np.concatenate([l[name] for l in layers]) for name in STATISTICS}
    return pairs, per_layer, outputs, per_pass
