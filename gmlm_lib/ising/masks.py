"""Mask distributions ``w`` over subsets ``S ⊆ [n]``, fixed or adaptive [Definitions 2-3, 7].

A mask is a boolean vector of length ``n``; ``S = {i : mask_i}``. A batch of masks is (B, n).
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core import checks


def check_k(k: int, n: int) -> int:
    """Validate a mask size: an integer with ``1 <= k <= n``."""
    return checks.integer(k, "k", low=1, high=n, fix=f"k-pseudolikelihood masks k of the n = {n} sites.")


def uniform_k_subsets(key: jax.Array, num: int, n: int, k: int) -> jax.Array:
    """``num`` i.i.d. masks, each uniform over the ``C(n, k)`` subsets of size ``k`` [Definition 3].

    Returns (num, n) bool. Each row marks the ``k`` smallest of ``n`` i.i.d. uniforms, which is
    a uniform ``k``-subset.
    """
    k = check_k(k, n)
    num = checks.integer(num, "num", low=0)
    return k_smallest(checks.key(key), num, n, k)


def k_smallest(key: jax.Array, num: int, n: int, k) -> jax.Array:
    """:func:`uniform_k_subsets` of checked arguments, with ``k`` a Python int or a traced integer (inside a
    program whose mask size is an operand, :func:`gmlm_lib.ising.mple.fit_repeats`). Returns (num, n) bool."""
    u = jax.random.uniform(key, (num, n))
    return jnp.argsort(jnp.argsort(u, axis=-1), axis=-1) < k


def all_k_subsets(n: int, k: int) -> jax.Array:
    """Every subset of size ``k`` once, in lexicographic order. Returns (C(n, k), n) bool."""
    k = check_k(k, n)
    count = math.comb(n, k)
    if count > 10**7:
        raise ValueError(f"C({n}, {k}) = {count:,} subsets is too many to list; sample them with uniform_k_subsets.")
    out = np.zeros((count, n), dtype=bool)
    for r, s in enumerate(itertools.combinations(range(n), k)):
        out[r, list(s)] = True
    return jax.device_put(out)  # copied: jnp.asarray of a host array runs a program of its own a shape


class _MaskFields(NamedTuple):
    subsets: jax.Array
    weights: jax.Array


class MaskDistribution(_MaskFields):
    """A distribution ``w`` over masks [Definitions 2, 3, 7].

    ``subsets`` (M, n) bool lists the masks ``S`` with positive probability. ``weights`` is
    (M,) for a fixed ``w(S)``, or (2^n, M) for an adaptive ``w(S | x)`` whose row ``b`` is the
    law of ``S`` given state number ``b`` (:func:`gmlm_lib.ising.model.enumerate_states` order).
    :func:`uniform_k`, :func:`from_weights` and :func:`adaptive` build one; the constructor checks the
    same on concrete arrays (masks of 0/1, one weight per mask or a row per state, each row finite,
    non-negative and summing to one: ``ValueError`` naming the field and the fix). Under a
    transformation (traced arrays) it checks nothing, and JAX rebuilds a distribution from its leaves
    without checks.
    """

    __slots__ = ()

    def __new__(cls, subsets, weights):
        if not any(isinstance(v, jax.core.Tracer) or v is None or isinstance(v, (int, float))
                   for v in (subsets, weights)):
            s = _check_subsets(subsets)
            w = np.asarray(weights)
            if w.dtype.kind not in "biuf":
                raise TypeError(f"MaskDistribution: weights must hold numbers; got dtype {w.dtype}.")
            n, m = s.shape[1], s.shape[0]
            if w.shape != (m,) and w.shape != (2**n, m):
                if w.ndim == 2 and w.shape[1] == m:
                    raise ValueError(f"adaptive weights must have 2^n = {2**n} rows; got {w.shape[0]}.")
                raise ValueError(f"MaskDistribution: weights must have shape ({m},) (one per subset) or "
                                 f"({2**n}, {m}) (a row per state, adaptive); got {w.shape}.")
            _check_probability_rows(w.astype(np.float64), "MaskDistribution weights (each row)")
        return super().__new__(cls, subsets, weights)

    @classmethod
    def unchecked(cls, subsets, weights) -> "MaskDistribution":
        """A distribution from fields a validating factory has checked, without the constructor's checks."""
        return tuple.__new__(cls, (subsets, weights))

    @property
    def n(self) -> int:
        return self.subsets.shape[-1]

    @property
    def is_adaptive(self) -> bool:
        return self.weights.ndim == 2


def _check_subsets(subsets) -> np.ndarray:
    s = np.asarray(subsets)
    if s.ndim != 2:
        raise ValueError(f"subsets must be a (M, n) boolean array of masks; got shape {s.shape}.")
    if s.shape[0] == 0:
        raise ValueError("the mask distribution is empty: give at least one subset S with positive weight.")
    if s.dtype != bool:
        if not np.all((s == 0) | (s == 1)):
            raise ValueError("subsets must be boolean masks (or 0/1).")
        s = s.astype(bool)
    return s


def _check_probability_rows(w: np.ndarray, what: str, atol: float = 1e-9) -> None:
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"{what} must be finite and non-negative.")
    sums = w.sum(-1)
    bad = np.max(np.abs(sums - 1.0))
    if bad > atol:
        raise ValueError(f"{what} must sum to one (max |sum - 1| = {bad:.3g}); divide by their sum.")


# JAX rebuilds a distribution from its leaves (outputs of jit, vmap, scan...) without the constructor's checks
jax.tree_util.register_pytree_with_keys(
    MaskDistribution,
    lambda d: (((jax.tree_util.GetAttrKey("subsets"), d.subsets), (jax.tree_util.GetAttrKey("weights"), d.weights)),
               None),
    lambda _, leaves: MaskDistribution.unchecked(*leaves),
    flatten_func=lambda d: ((d.subsets, d.weights), None))


def from_weights(subsets, weights) -> MaskDistribution:
    """A fixed distribution: mask ``subsets[m]`` has probability ``weights[m]``."""
    s = _check_subsets(subsets)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (s.shape[0],):
        raise ValueError(f"weights must have shape ({s.shape[0]},), one per subset; got {w.shape}.")
    _check_probability_rows(w, "weights")
    return MaskDistribution.unchecked(*jax.device_put((s, w)))


def uniform_k(n: int, k: int) -> MaskDistribution:
    """``w`` uniform over the ``C(n, k)`` subsets of size ``k`` [Definition 3]."""
    s = all_k_subsets(n, k)
    return MaskDistribution.unchecked(s, jax.device_put(np.full(s.shape[0], 1.0 / s.shape[0])))


def adaptive(subsets, rule) -> MaskDistribution:
    """An adaptive distribution ``w(S | x)`` [Section 2.2.3, Definition 7].

    ``rule(states) -> (2^n, M)``: for the (2^n, n) array of all states, the probability of
    each of the M ``subsets`` given each state. Rows must sum to one.
    """
    from gmlm_lib.ising import model as ising

    s = _check_subsets(subsets)
    n = s.shape[1]
    w = np.asarray(rule(ising.enumerate_states(n)), dtype=np.float64)
    if w.shape != (2**n, s.shape[0]):
        raise ValueError(f"rule must return shape (2^n, M) = ({2**n}, {s.shape[0]}); got {w.shape}.")
    _check_probability_rows(w, "each row of rule(states)")
    return MaskDistribution.unchecked(*jax.device_put((s, w)))


MAX_TABLE = 2**24
"""The most numbers :func:`as_adaptive` writes (a table of 128 MiB in float64)."""


def as_adaptive(dist: MaskDistribution) -> MaskDistribution:
    """``dist`` as rows per state (2^n, M), the form of :func:`adaptive`: the same law (a fixed ``w(S)`` is an
    adaptive one whose rows are all equal), and an adaptive ``dist`` unchanged. Why: a fixed ``w`` (M,) and an
    adaptive one (2^n, M) are two shapes, so every exact kernel compiles twice for a comparison of fixed and
    adaptive rules over the same subsets, and once when all are in this form (values equal up to rounding).
    A table of more than :data:`MAX_TABLE` numbers is refused."""
    if dist.is_adaptive:
        return dist
    n, m = dist.n, dist.subsets.shape[0]
    if 2**n * m > MAX_TABLE:
        raise ValueError(f"as_adaptive: a table of 2^{n} x {m} = {2**n * m:,} weights is more than MAX_TABLE = "
                         f"{MAX_TABLE:,}; keep the fixed distribution (its kernels take (M,) weights).")
    w = np.asarray(dist.weights, dtype=np.float64)  # on the host: a broadcast of a device array is a program
    return MaskDistribution.unchecked(dist.subsets, jax.device_put(np.tile(w, (2**n, 1))))


def check_distribution(dist: MaskDistribution, n: int) -> None:
    """Raise when ``dist`` does not fit an ``n``-site model."""
    if dist.n != n:
        raise ValueError(f"the mask distribution is over n = {dist.n} sites but the model has n = {n}.")
    if dist.is_adaptive and dist.weights.shape[0] != 2**n:
        raise ValueError(f"adaptive weights must have 2^n = {2**n} rows; got {dist.weights.shape[0]}.")
