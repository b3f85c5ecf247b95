"""Reference NumPy implementations of the samplers in :mod:`gmlm_lib.ising.samplers`, for benchmarks.

Written the straightforward way a researcher would first write them: a Python loop over the
chains, with NumPy doing the work of one update (the local fields, the ``2^k`` completions).
:func:`k_gibbs_vectorised` and :func:`independent_parallel_vectorised` are the stronger,
chain-vectorised NumPy versions (one array operation per step for all chains), reported beside
them so the speed-up is not only against Python loops.
"""

from __future__ import annotations

import itertools

import numpy as np


def _patterns(k: int) -> np.ndarray:
    return np.array(list(itertools.product([-1.0, 1.0], repeat=k)))  # (2^k, k), -1 < +1


def k_gibbs(J: np.ndarray, h: np.ndarray, x: np.ndarray, k: int, num_steps: int, rng: np.random.Generator) -> np.ndarray:
    """k-Gibbs [Definition 10], one chain at a time. x (C, n) int8, updated in place and returned."""
    n = h.shape[0]
    pats = _patterns(k)
    for _ in range(num_steps):
        for c in range(x.shape[0]):
            s = rng.choice(n, size=k, replace=False)
            xc = x[c].astype(np.float64)
            Js = J[np.ix_(s, s)]
            field = h[s] + J[s] @ xc - Js @ xc[s]
            lw = pats @ field + 0.5 * np.einsum("pi,ij,pj->p", pats, Js, pats)
            w = np.exp(lw - lw.max())
            j = rng.choice(len(w), p=w / w.sum())
            x[c, s] = pats[j]
    return x


def independent_parallel(J: np.ndarray, h: np.ndarray, x: np.ndarray, num_steps: int, rng: np.random.Generator) -> np.ndarray:
    """Independent parallel [Definition 11], one chain at a time. x (C, n) int8."""
    n = h.shape[0]
    for _ in range(num_steps):
        for c in range(x.shape[0]):
            field = h + J @ x[c].astype(np.float64)
            up = rng.random(n) < 1.0 / (1.0 + np.exp(-2.0 * field))
            x[c] = np.where(up, 1, -1)
    return x


def k_gibbs_vectorised(J, h, x, k, num_steps, rng):
    """k-Gibbs with all chains in one array operation per step. x (C, n) int8."""
    C, n = x.shape
    pats = _patterns(k)
    rows = np.arange(C)[:, None]
    for _ in range(num_steps):
        s = np.argsort(rng.random((C, n)), axis=1)[:, :k] if k > 1 else rng.integers(0, n, (C, 1))
        xf = x.astype(np.float64)
        Js = J[s[:, :, None], s[:, None, :]]  # (C, k, k)
        field = h[s] + np.einsum("ckn,cn->ck", J[s], xf) - np.einsum("cij,cj->ci", Js, xf[rows, s])
        lw = field @ pats.T + 0.5 * np.einsum("pi,cij,pj->cp", pats, Js, pats)
        w = np.exp(lw - lw.max(1, keepdims=True))
        cdf = np.cumsum(w / w.sum(1, keepdims=True), axis=1)
        j = np.minimum((rng.random((C, 1)) > cdf).sum(1), len(pats) - 1)
        x[rows, s] = pats[j]
    return x


def independent_parallel_vectorised(J, h, x, num_steps, rng):
    """Independent parallel with all chains in one matrix product per step. x (C, n) int8."""
    for _ in range(num_steps):
        field = h + x.astype(np.float64) @ J
        x = np.where(rng.random(x.shape) < 1.0 / (1.0 + np.exp(-2.0 * field)), 1, -1).astype(np.int8)
    return x
