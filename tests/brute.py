"""Independent brute-force NumPy reference for small Ising models (n <= 6).

Deliberately written from the formulas, not from gmlm_lib: loops over states with
``itertools.product`` and explicit sums, no shared helpers.
"""

from __future__ import annotations

import itertools

import numpy as np


def states(n: int) -> np.ndarray:
    """All states in lexicographic order with -1 < +1, (2^n, n)."""
    return np.array(list(itertools.product([-1, 1], repeat=n)), dtype=np.int64)


def log_weight(J: np.ndarray, h: np.ndarray, x: np.ndarray) -> float:
    n = len(h)
    return sum(J[i, j] * x[i] * x[j] for i in range(n) for j in range(i + 1, n)) + float(h @ x)


def probs(J: np.ndarray, h: np.ndarray) -> np.ndarray:
    w = np.array([np.exp(log_weight(J, h, x)) for x in states(len(h))])
    return w / w.sum()


def log_z(J: np.ndarray, h: np.ndarray) -> float:
    return float(np.log(sum(np.exp(log_weight(J, h, x)) for x in states(len(h)))))


def conditional(J: np.ndarray, h: np.ndarray, x: np.ndarray, S) -> float:
    """log p(x_S | x_{-S}) by summing p over the states that agree with x off S."""
    S = list(S)
    if not S:
        return 0.0
    rest = [i for i in range(len(h)) if i not in S]
    num, den = 0.0, 0.0
    for y in states(len(h)):
        if np.all(y[rest] == x[rest]):
            w = np.exp(log_weight(J, h, y))
            den += w
            if np.all(y == x):
                num = w
    return float(np.log(num / den))


def random_model(rng: np.random.Generator, n: int, scale: float = 1.0):
    A = rng.normal(scale=scale, size=(n, n))
    J = np.triu(A, 1)
    J = J + J.T
    return J, rng.normal(scale=scale, size=n)
