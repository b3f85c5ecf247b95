"""Translation quality and stutter [Section 3.3-3.4]: SacreBLEU BLEU and chrF with their
signatures on detokenised text, the word-level stutter rate, and the share of dependent adjacent
output pairs."""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np
import sacrebleu

from gmlm_lib.core import checks

_EDGE = re.compile(r"^\W+|\W+$")


@dataclasses.dataclass(frozen=True)
class Score:
    """A corpus-level score and the SacreBLEU signature that says how it was computed."""

    score: float
    signature: str


TOKENIZERS = tuple(sorted(sacrebleu.metrics.BLEU.TOKENIZERS))
"""SacreBLEU's tokenizer names that :func:`bleu` accepts ("13a" is its default)."""


def _check(hyps, refs):
    for name, value in (("hyps", hyps), ("refs", refs)):
        if isinstance(value, str) or not all(isinstance(x, str) for x in value):
            raise TypeError(f"{name} must be a list of strings, one sentence each; got "
                            f"{type(value).__name__ if isinstance(value, str) else 'a list with non-strings'} "
                            "(a single string would be scored character by character).")
    if len(hyps) != len(refs):
        raise ValueError(f"hyps and refs must be aligned; got {len(hyps)} hypotheses and {len(refs)} references.")
    if not hyps:
        raise ValueError("hyps is empty.")


def bleu(hyps: list[str], refs: list[str], *, tokenize: str = "13a", lowercase: bool = False) -> Score:
    """Corpus BLEU (SacreBLEU defaults, one reference) and its signature [Tables 1-2]. ``lowercase``:
    case-insensitive BLEU (the signature says ``case:lc``), as the Multi30k literature reports it; the
    book's headline is cased."""
    _check(hyps, refs)
    if not isinstance(lowercase, bool):
        raise TypeError(f"bleu(lowercase=...) must be True or False; got {lowercase!r}.")
    if tokenize not in TOKENIZERS:
        raise ValueError(f"bleu(tokenize=...) must be one of SacreBLEU's tokenizers {TOKENIZERS}; got {tokenize!r}.")
    metric = sacrebleu.metrics.BLEU(tokenize=tokenize, lowercase=lowercase)
    return Score(metric.corpus_score(hyps, [refs]).score, str(metric.get_signature()))


def resample_index(n: int, resamples: int, key) -> np.ndarray:
    """(resamples, n) sentence indices drawn with replacement from ``jax.random`` ``key``: the test-set
    resamples of a paired bootstrap (Koehn, 2004), the same rows for every system and replica scored
    on them (:func:`bleu_resamples`), so that their differences are paired."""
    import jax  # noqa: PLC0415

    n = checks.integer(n, "n", low=1, fix="A bootstrap resamples at least one sentence.")
    resamples = checks.integer(resamples, "resamples", low=1)
    return np.asarray(jax.random.randint(key, (resamples, n), 0, n))


def bleu_resamples(hyps: list[str], refs: list[str], index, *, lowercase: bool = False) -> np.ndarray:
    """Corpus BLEU (as :func:`bleu`, tokenizer 13a) of ``hyps`` on each resample of the test set, one a row
    of ``index`` ((B, N) sentence indices, :func:`resample_index`): (B,). Computed as SacreBLEU's paired
    bootstrap computes it (its significance module), from each sentence's n-gram statistics summed over a
    resample; the identity resample gives :func:`bleu` exactly (tested)."""
    _check(hyps, refs)
    index = np.asarray(index)
    if index.ndim != 2 or not np.issubdtype(index.dtype, np.integer) or index.size == 0:
        raise ValueError(f"index must be a non-empty (resamples, sentences) integer array; got shape {index.shape} "
                         f"of {index.dtype}.")
    if index.min() < 0 or index.max() >= len(hyps):
        raise ValueError(f"index holds sentence numbers outside [0, {len(hyps)}): draw it for these {len(hyps)} "
                         "sentences (resample_index).")
    metric = sacrebleu.metrics.BLEU(lowercase=lowercase)
    stats = np.asarray(metric._extract_corpus_statistics(hyps, [refs]), dtype=np.int64)  # (N, 2 + 2 * max order)
    sums = stats[index].sum(axis=1)  # (B, statistics)
    return np.array([metric._compute_score_from_stats(list(row)).score for row in sums])


def chrf(hyps: list[str], refs: list[str]) -> Score:
    """Corpus chrF (SacreBLEU defaults) and its signature."""
    _check(hyps, refs)
    metric = sacrebleu.metrics.CHRF()
    return Score(metric.corpus_score(hyps, [refs]).score, str(metric.get_signature()))


def words(text: str) -> list[str]:
    """Lower-cased whitespace words with punctuation stripped at their edges (empty ones dropped)."""
    if not isinstance(text, str):
        raise TypeError(f"words(text) needs one sentence as a string; got {type(text).__name__}.")
    out = []
    for w in text.lower().split():
        w = _EDGE.sub("", w)
        if w:
            out.append(w)
    return out


def stutter_pairs(seq: Sequence, ref: Sequence = ()) -> list[bool]:
    """The book's one stutter rule [Section 3.3], for words or token ids: for each adjacent pair
    (i, i + 1) of ``seq``, True when the two items are equal and ``ref`` never has that item twice
    in a row (a repeat the reference also has is not stutter). ``len(seq) - 1`` flags (none for a
    sequence shorter than 2). :func:`gmlm_lib.mt.decoding.stutter_positions` is this rule on the
    device with no reference (decoding has none), as PaDIR's re-masking uses it."""
    ref = list(ref)
    ref_repeats = {a for a, b in zip(ref, ref[1:]) if a == b}
    seq = list(seq)
    return [a == b and a not in ref_repeats for a, b in zip(seq, seq[1:])]


def stutter_flags(hyp: str, ref: str) -> list[bool]:
    """:func:`stutter_pairs` over the :func:`words` of a hypothesis and its reference."""
    return stutter_pairs(words(hyp), words(ref))


def stutter_rate(hyps: list[str], refs: list[str]) -> float:
    """Stuttered words per 100 output words over the corpus: consecutive repeated words in the
    output that are not repeated in the reference [Section 3.3]."""
    _check(hyps, refs)
    count = sum(sum(stutter_flags(h, r)) for h, r in zip(hyps, refs))
    total = sum(len(words(h)) for h in hyps)
    return 100.0 * count / max(total, 1)


def dependent_share(similarities, threshold: float) -> float:
    """The share of adjacent output pairs that are *dependent*: whose similarity (one array a
    sentence, :meth:`gmlm_lib.mt.translate.Translator.adjacent_similarities`) exceeds ``threshold``,
    over all the pairs of all the sentences; 0.0 when no output has two pieces."""
    threshold = checks.real(threshold, "threshold")
    flagged = total = 0
    for i, sim in enumerate(similarities):
        sim = np.asarray(sim)
        if sim.ndim != 1:
            raise ValueError(f"similarities[{i}] must be one value per adjacent pair of a sentence (1-D); got shape "
                             f"{sim.shape}.")
        flagged += int(np.sum(sim > threshold))
        total += sim.size
    return flagged / total if total else 0.0


def paired_bootstrap(systems: list[tuple[str, list[str]]], refs: list[str], *, n_samples: int = 1000):
    """SacreBLEU's paired bootstrap test [Koehn 2004] of every system against the first (the
    baseline): returns ``(table, signature)``, ``table`` a DataFrame with per system ``BLEU``,
    ``bootstrap mean``, ``95% CI`` (half-width of the interval of its BLEU over test-set resamples)
    and ``p-value`` (of the difference to the baseline; NaN for the baseline). SacreBLEU
    seeds its resampling (12345 unless ``SACREBLEU_SEED`` is set), so the result is reproducible."""
    import pandas as pd  # noqa: PLC0415
    from sacrebleu.significance import PairedTest  # noqa: PLC0415

    n_samples = checks.integer(n_samples, "paired_bootstrap(n_samples=...)", low=1,
                               fix="It counts resamples (sacrebleu would silently run its default of 1000 for 0).")
    if isinstance(systems, (str, dict)) or not isinstance(systems, (list, tuple)) or len(systems) < 2 or \
            not all(isinstance(s, (list, tuple)) and len(s) == 2 and isinstance(s[0], str) for s in systems):
        raise ValueError("paired_bootstrap(systems=...) must be a list of at least two (name, hypotheses) pairs: "
                         "the baseline first, then each system compared with it.")
    names = [name for name, _ in systems]
    if len(set(names)) != len(names):
        raise ValueError(f"paired_bootstrap: system names must differ (they index the table); got {names}.")
    for name, hyps in systems:
        _check(hyps, refs)
    test = PairedTest(systems, {"BLEU": sacrebleu.metrics.BLEU()}, [refs], test_type="bs", n_samples=n_samples)
    sigs, res = test()
    rows = [dict(system=name, BLEU=r.score, **{"bootstrap mean": float(r.mean), "95% CI": float(r.ci),
                                                "p-value": r.p_value})
            for name, r in zip(res["System"], res["BLEU"])]
    return pd.DataFrame(rows).set_index("system"), str(sigs["BLEU"])
