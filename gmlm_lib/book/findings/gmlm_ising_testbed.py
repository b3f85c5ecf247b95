"""The verdicts of the testbed chapter (``notebooks/gmlm_ising_testbed.md``).

The exact sampler is checked state by state: the empirical frequency of each of the ``2^n`` states of
a small model, in units of its binomial standard error, must stay within :data:`Z_BAR`. The first look
at Theorem 2 asks whether the mean squared parameter error of k-MPLE decreases strictly in k.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from gmlm_lib.book.findings.rules import grade
from gmlm_lib.book.validate import ChapterParams
from gmlm_lib.ising.model import MAX_EXACT_N

__all__ = ["Z_BAR", "Params", "sampler", "ordered", "drops", "drop_findings"]

Z_BAR = 4.5
"""Largest ``|z|`` of any state's frequency that passes (about a 1-in-150,000 tail for one state)."""


def sampler(freq, prob, draws: int) -> dict:
    """``freq`` and ``prob``: (2^n,) empirical frequencies over ``draws`` exact samples and the model's
    probabilities. Returns ``sampler_max_z`` (the largest ``|z|``), ``z_bar`` and ``z_verdict`` ("met" when
    no state's ``|z|`` exceeds :data:`Z_BAR`)."""
    freq, prob = np.asarray(freq, dtype=float), np.asarray(prob, dtype=float)
    if freq.shape != prob.shape or freq.ndim != 1:
        raise ValueError(f"freq and prob must be two (2^n,) arrays of one shape; got {freq.shape} and {prob.shape}.")
    if not (np.all(prob > 0) and np.all(prob < 1)) or draws < 1:
        raise ValueError("every probability must lie in (0, 1) and draws must be >= 1: a state of probability 0 "
                         "or 1 has no binomial standard error.")
    z = (freq - prob) / np.sqrt(prob * (1 - prob) / draws)
    max_z = float(np.max(np.abs(z)))
    return dict(sampler_max_z=max_z, z_bar=Z_BAR, z_verdict=grade(max_z, Z_BAR, at_least=False))


def ordered(errors) -> str:
    """"yes" when the errors (one per k, in increasing k) decrease strictly, else "no"."""
    errors = np.asarray(errors, dtype=float)
    if errors.ndim != 1 or errors.size < 2 or not np.all(np.isfinite(errors)):
        raise ValueError(f"errors must be at least two finite numbers, one per k; got {errors!r}.")
    return "yes" if bool(np.all(np.diff(errors) < 0)) else "no"


def drops(sq_err: dict, ks) -> pd.DataFrame:
    """How the squared parameter error falls from each mask size to the next, on the same training sets.
    ``sq_err``: k -> one squared error per training set (the same sets, in the same order, for every k);
    ``ks`` in increasing order. One row per consecutive pair: ``from k``, ``to k``, ``fell in`` (the
    fraction of training sets whose error fell), ``mean drop`` and ``z`` (the mean drop over its standard
    error, ``sd / sqrt(sets)``; infinite when every set dropped by the same amount, NaN when none moved)."""
    ks = list(ks)
    if len(ks) < 2 or any(b <= a for a, b in zip(ks[:-1], ks[1:])) or any(k not in sq_err for k in ks):
        raise ValueError(f"drops: ks must be at least two increasing mask sizes, each a key of sq_err; got {ks} "
                         f"and keys {sorted(sq_err)}.")
    sizes = {len(np.asarray(sq_err[k])) for k in ks}
    if len(sizes) != 1 or min(sizes) < 2:
        raise ValueError(f"drops: every k needs the same training sets, at least two; got sizes {sorted(sizes)}.")
    rows = []
    for a, b in zip(ks[:-1], ks[1:]):
        diff = np.asarray(sq_err[a], dtype=float) - np.asarray(sq_err[b], dtype=float)
        sd = diff.std(ddof=1)
        z = diff.mean() / (sd / np.sqrt(diff.size)) if sd > 0 else (np.sign(diff.mean()) * np.inf
                                                                     if diff.mean() != 0 else np.nan)
        rows.append({"from k": a, "to k": b, "fell in": float(np.mean(diff > 0)), "mean drop": float(diff.mean()),
                     "z": float(z)})
    return pd.DataFrame(rows)


def drop_findings(table: pd.DataFrame) -> dict:
    """The glued summary of :func:`drops`' table: ``win_min_pct`` (the smallest percentage of training sets
    in which the error fell, over the consecutive pairs) and ``win_min_z`` (the smallest ``z``)."""
    if table.empty or table["z"].isna().any():
        raise ValueError("drop_findings: every pair needs a z (a pair whose errors never moved has none).")
    return dict(win_min_pct=100 * float(table["fell in"].min()), win_min_z=float(table["z"].min()))


@dataclasses.dataclass(frozen=True)
class Params(ChapterParams):
    """The parameters of ``notebooks/gmlm_ising_testbed.md`` (their meaning: its parameters cell), checked
    when built: the exact law enumerates ``2^n`` states (``n`` and ``eq6_c`` at most
    :data:`gmlm_lib.ising.model.MAX_EXACT_N`), the mask sizes fit in ``n``, errors are averaged over at
    least two training sets."""

    def check(self) -> None:
        self.integer("n", 2, MAX_EXACT_N, "the exact law enumerates 2^n states")
        self.number("coupling_scale", 0, "a standard deviation")
        self.number("field_scale", 0, "a standard deviation")
        self.integer("num_samples", 1)
        self.integer("repeats", 2, why="errors are averaged over them")
        self.integers("ks", 1, self.n, "mask sizes")
        self.integer("eq6_c", 2, MAX_EXACT_N, "a clique size")
        self.number("eq6_h")
        self.numbers("eq6_J")
        self.integer("sampler_checks", 1)

    # the fields: the parameters cell's names in its order (seed and install_ref: ChapterParams)
    n: int
    coupling_scale: float
    field_scale: float
    num_samples: int
    repeats: int
    ks: list
    eq6_c: int
    eq6_h: float
    eq6_J: list
    sampler_checks: int
