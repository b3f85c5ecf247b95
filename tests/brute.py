"""Independent brute-force NumPy reference for small Ising models (n <= 6), and the dependency-aware
entropy bound's charge of a set of positions, which the Ising and translation rule tests share.

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


def stats(x: np.ndarray) -> np.ndarray:
    """T(x) = (x_i x_j for i<j, x_i)."""
    n = len(x)
    return np.array([x[i] * x[j] for i in range(n) for j in range(i + 1, n)] + list(x), dtype=float)


def pair_terms(J, h, subsets, W):
    """Yield (pi(x,S), T(x), E[T | x_-S, S], x index, S index) for every state and mask.
    W[x, m] = w(S_m | x)."""
    n = len(h)
    X = states(n)
    p = probs(J, h)
    T = np.array([stats(x) for x in X])
    for m, S in enumerate(subsets):
        rest = [i for i in range(n) if not S[i]]
        for a, x in enumerate(X):
            same = [b for b, y in enumerate(X) if np.all(y[rest] == x[rest])]
            q = np.array([p[b] * W[b, m] for b in same])
            if q.sum() == 0:
                continue
            mean = (q[:, None] * T[same]).sum(0) / q.sum()
            yield p[a] * W[a, m], T[a], mean, a, m


def hessian(J, h, subsets, W):
    """H = E_{x,S} Cov(T | x_-S, S), from the definition."""
    n = len(h)
    X = states(n)
    p = probs(J, h)
    T = np.array([stats(x) for x in X])
    d = T.shape[1]
    H = np.zeros((d, d))
    for m, S in enumerate(subsets):
        rest = [i for i in range(n) if not S[i]]
        for a, x in enumerate(X):
            same = [b for b, y in enumerate(X) if np.all(y[rest] == x[rest])]
            q = np.array([p[b] * W[b, m] for b in same])
            if q.sum() == 0 or W[a, m] == 0:
                continue
            q = q / q.sum()
            mu = q @ T[same]
            cov = (T[same] - mu).T @ (q[:, None] * (T[same] - mu))
            H += p[a] * W[a, m] * cov
    return H


def score_cov_all_masks(J, h, subsets, W):
    n = len(h)
    d = n * (n - 1) // 2 + n
    g = np.zeros((2**n, d))
    for pi, t, mean, a, m in pair_terms(J, h, subsets, W):
        g[a] += W[a, m] * (t - mean)
    p = probs(J, h)
    return g.T @ (p[:, None] * g)


def transition(J, h, subsets, W):
    """P(x, y) = sum_S w(S|x) 1[y_-S = x_-S] p(y) w(S|y) / Z_S(x)."""
    n = len(h)
    X = states(n)
    p = probs(J, h)
    P = np.zeros((2**n, 2**n))
    for m, S in enumerate(subsets):
        rest = [i for i in range(n) if not S[i]]
        for a, x in enumerate(X):
            if W[a, m] == 0:
                continue
            same = [b for b, y in enumerate(X) if np.all(y[rest] == x[rest])]
            q = np.array([p[b] * W[b, m] for b in same])
            for b, qb in zip(same, q / q.sum()):
                P[a, b] += W[a, m] * qb
    return P


def second_eigenvalue(J, h, P):
    """lambda_2 of a p-reversible transition matrix P: the second largest eigenvalue of the
    symmetrised D^1/2 P D^-1/2 (its largest is 1, on constants)."""
    p = probs(J, h)
    A = np.sqrt(p)[:, None] * P / np.sqrt(p)[None, :]
    return np.sort(np.linalg.eigvalsh(0.5 * (A + A.T)))[-2]


def independent_parallel_transition(J, h):
    """P(x, y) = prod_i p(y_i | x_{-i}), from the one-site conditionals (Definition 11)."""
    n = len(h)
    X = states(n)
    P = np.zeros((2**n, 2**n))
    for a, x in enumerate(X):
        for b, y in enumerate(X):
            prob = 1.0
            for i in range(n):
                field = h[i] + sum(J[i, j] * x[j] for j in range(n) if j != i)
                prob *= 1.0 / (1.0 + np.exp(-2.0 * y[i] * field))
            P[a, b] = prob
    return P


def group_charge(chosen, ent, linked) -> float:
    """The dependency-aware entropy bound's charge of the set of positions ``chosen``: over the groups
    (the connected components of ``linked``, a dict position -> set of the open positions it is joined
    to), the sum minus the max of the entropies ``ent[i]`` of the positions taken in the group."""
    def component(i):
        seen, todo = {i}, [i]
        while todo:
            for b in set(linked[todo.pop()]) - seen:
                seen.add(b)
                todo.append(b)
        return frozenset(seen)

    groups = {component(i) for i in chosen}
    return sum(sum(ent[i] for i in g & chosen) - max(ent[i] for i in g & chosen) for g in groups)
