"""Mask distributions ``w`` over subsets ``S ⊆ [n]`` [Definitions 2-3].

A mask is a boolean vector of length ``n``; ``S = {i : mask_i}``. A batch of masks is (B, n).
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np


def check_k(k: int, n: int) -> int:
    """Validate a mask size: an integer with ``1 <= k <= n``."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise TypeError(f"k must be an integer; got {k!r}.")
    if not 1 <= k <= n:
        raise ValueError(f"k = {k} is out of range: k-pseudolikelihood needs 1 <= k <= n = {n}.")
    return int(k)


def uniform_k_subsets(key: jax.Array, num: int, n: int, k: int) -> jax.Array:
    """``num`` i.i.d. masks, each uniform over the ``C(n, k)`` subsets of size ``k`` [Definition 3].

    Returns (num, n) bool. Each row marks the ``k`` smallest of ``n`` i.i.d. uniforms, which is
    a uniform ``k``-subset.
    """
    k = check_k(k, n)
    if int(num) < 0:
        raise ValueError(f"num must be >= 0; got {num}.")
    u = jax.random.uniform(key, (int(num), n))
    ranks = jnp.argsort(jnp.argsort(u, axis=-1), axis=-1)
    return ranks < k


def all_k_subsets(n: int, k: int) -> jax.Array:
    """Every subset of size ``k`` once, in lexicographic order. Returns (C(n, k), n) bool."""
    k = check_k(k, n)
    count = math.comb(n, k)
    if count > 10**7:
        raise ValueError(f"C({n}, {k}) = {count:,} subsets is too many to list; sample them with uniform_k_subsets.")
    out = np.zeros((count, n), dtype=bool)
    for r, s in enumerate(itertools.combinations(range(n), k)):
        out[r, list(s)] = True
    return jnp.asarray(out)
