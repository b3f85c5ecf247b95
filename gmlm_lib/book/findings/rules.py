"""The book's decision rules: a target is met when the measurement reaches it (:func:`grade`), a
difference is significant when its paired-bootstrap p-value is below :data:`ALPHA` (:func:`significant`),
and a number of Part III, whose trained models vary with their seed, is graded by where its interval over
seeds and sentences lies against the bar (:func:`grade_interval`, the interval from
:func:`seed_sentence_interval`). Every chapter's findings use these, so one rule decides every verdict
of the book; :func:`holm` applies the second to a family of tests at once (the ablations chapter's
exercise)."""

from __future__ import annotations

import math

import pandas as pd

__all__ = ["ALPHA", "ONE_RUN", "VERDICTS", "grade", "grade_interval", "seed_sentence_interval", "significant",
           "compare", "holm", "listed"]

ALPHA = 0.05
"""The book's one significance level: p < ALPHA is significant (paired bootstrap, two systems)."""


def _number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number; got {value!r}: a verdict is never drawn from a missing "
                         "or non-finite measurement.")
    return float(value)


def grade(value: float, target: float, *, at_least: bool) -> str:
    """``"met"`` when ``value >= target`` (``at_least``, a floor such as a speed-up) or ``value <= target``
    (a ceiling such as a BLEU gap), else ``"missed"``; exact, no tolerance. A non-finite value or target
    is a ``ValueError``: a NaN is never graded."""
    value, target = _number("value", value), _number("target", target)
    return "met" if (value >= target if at_least else value <= target) else "missed"


ONE_RUN = "one run: within noise unknown"
"""The verdict of a Part III number measured on one trained model: one seed cannot tell a difference from
the spread between seeds (two identical runs of one recipe have moved a verdict across its bar)."""
VERDICTS = ("met", "missed", "within noise", "not comparable", ONE_RUN)
"""Every verdict the book gives."""


def grade_interval(interval: tuple[float, float] | None, bar: float, *, at_least: bool,
                   improving: bool = False) -> str:
    """The verdict of a Part III number against ``bar`` from its 95% ``interval`` over seeds and sentences
    (:func:`seed_sentence_interval`): **met** when the whole interval is on the right side of the bar
    (at or above it with ``at_least``, at or below it otherwise), **missed** when the whole interval is on
    the wrong side, **within noise** when it straddles the bar; **not comparable** when a model was still
    improving at the end of its budget (``improving``: the number says little of the recipe); and
    :data:`ONE_RUN` when ``interval`` is None (one trained model: no spread over seeds to tell)."""
    bar = _number("bar", bar)
    if improving:
        return "not comparable"
    if interval is None:
        return ONE_RUN
    if not isinstance(interval, (tuple, list)) or len(interval) != 2:
        raise ValueError(f"interval must be (low, high) or None; got {interval!r}.")
    low, high = _number("the interval's low end", interval[0]), _number("the interval's high end", interval[1])
    if low > high:
        raise ValueError(f"interval must have low <= high; got ({low}, {high}).")
    if at_least:
        return "met" if low >= bar else "missed" if high < bar else "within noise"
    return "met" if high <= bar else "missed" if low > bar else "within noise"


def seed_sentence_interval(scores, key, *, draws: int = 10_000, level: float = 0.95) -> tuple[float, float]:
    """The ``level`` interval of a number averaged over replicas, with both sources of its noise: the seed
    that trained each replica (initialisation, dropout, batch order) and the test sentences.

    ``scores``: (S, B) array, row ``s`` the number of replica ``s`` on each of B paired-bootstrap resamples
    of the test sentences (the same B resamples for every replica). A two-level bootstrap (Davison and
    Hinkley, 1997, Section 3.8): each of ``draws`` draws picks S replicas with replacement and one sentence
    resample for each, and averages them; the interval is the percentile interval of those means. Both
    levels of variance then widen it, as Bouthillier et al. (2021) ask of machine-learning comparisons,
    where a bootstrap over sentences alone holds the trained models fixed. ``key``: a ``jax.random`` key.
    At least two replicas: one cannot estimate the spread between seeds (:data:`ONE_RUN`)."""
    import jax
    import numpy as np

    from gmlm_lib.core import rng

    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] < 2 or values.shape[1] < 1:
        raise ValueError(f"scores must be an (S, B) array with S >= 2 replicas and B >= 1 resamples; got shape "
                         f"{values.shape}: one replica cannot estimate the spread between seeds.")
    if not np.isfinite(values).all():
        raise ValueError("scores hold a non-finite number: a verdict is never drawn from a missing measurement.")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 100:
        raise ValueError(f"draws must be an integer >= 100 (the percentiles need a few hundred); got {draws!r}.")
    if not 0.5 <= _number("level", level) < 1.0:
        raise ValueError(f"level must be in [0.5, 1); got {level}.")
    reps, rows = values.shape
    pick, resample = rng.fold_in(key, 0), rng.fold_in(key, 1)  # one program each process, whatever the caller
    which = np.asarray(jax.random.randint(pick, (draws, reps), 0, reps))
    column = np.asarray(jax.random.randint(resample, (draws, reps), 0, rows))
    means = values[which, column].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def significant(p: float, alpha: float = ALPHA) -> bool:
    """Whether a paired-bootstrap p-value is significant at ``alpha`` (strictly below it)."""
    p, alpha = _number("p", p), _number("alpha", alpha)
    if not 0.0 <= p <= 1.0 or not 0.0 < alpha < 1.0:
        raise ValueError(f"p must be in [0, 1] and alpha in (0, 1); got p = {p}, alpha = {alpha}.")
    return p < alpha


def compare(difference: float, p: float, alpha: float = ALPHA) -> int:
    """How a system compares with its baseline: ``+1`` significantly better (``difference > 0`` and
    :func:`significant`), ``-1`` significantly worse, ``0`` when the test cannot tell them apart.

    ``difference`` is the system's score minus the baseline's (e.g. BLEU). A difference of exactly 0 is
    never significant: SacreBLEU's paired bootstrap gives two identical systems p = 1/(n + 1), which
    read alone would call identical outputs significantly different."""
    difference = _number("difference", difference)
    if not significant(p, alpha) or difference == 0.0:
        return 0
    return 1 if difference > 0 else -1


def holm(pvalues: dict, alpha: float = ALPHA) -> pd.DataFrame:
    """Holm's step-down correction of a family of p-values (Holm, 1979): with ``m`` tests sorted by p,
    the ``i``-th smallest (from 1) is significant when it and every smaller one satisfy
    ``p_(j) < alpha / (m - j + 1)``. It holds the chance of *any* false "significant" in the family at
    ``alpha``, where :func:`significant` holds each test's alone. Its decisions are those of the closed
    testing procedure with Bonferroni tests of every intersection (``tests/test_findings_exercises.py``
    checks that on all small families by brute force).

    ``pvalues``: name -> p. Returns one row a test, smallest p first: ``p``, ``threshold``
    (``alpha / (m - rank + 1)``), ``adjusted`` (Holm's adjusted p-value, ``max_{j <= i} min(1, (m - j + 1)
    p_(j))``: below ``alpha`` exactly when significant, up to rounding), ``alone`` (:func:`significant` of ``p``) and
    ``holm`` (significant in the family)."""
    if not isinstance(pvalues, dict) or not pvalues:
        raise ValueError(f"holm: pvalues must be a non-empty dict name -> p; got {pvalues!r}.")
    alpha = _number("alpha", alpha)
    ps = {name: _number(f"the p-value of {name!r}", p) for name, p in pvalues.items()}
    for name, p in ps.items():
        significant(p, alpha)  # the ranges of p and alpha, checked with their names
    order = sorted(ps, key=lambda name: ps[name])
    m, running, kept, rows = len(order), 0.0, True, {}
    for rank, name in enumerate(order, start=1):
        threshold = alpha / (m - rank + 1)
        running = max(running, min(1.0, (m - rank + 1) * ps[name]))
        kept = kept and ps[name] < threshold  # the step-down stops at the first p at or above its threshold
        rows[name] = dict(p=ps[name], threshold=threshold, adjusted=running, alone=significant(ps[name], alpha),
                          holm=kept)
    return pd.DataFrame.from_dict(rows, orient="index")


def listed(items, empty: str = "none") -> str:
    """A short list for a sentence: ``"2, 4 and 8"``; ``empty`` when there is nothing to list."""
    items = [f"{x:g}" if isinstance(x, float) else str(x) for x in items]
    if not items:
        return empty
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
