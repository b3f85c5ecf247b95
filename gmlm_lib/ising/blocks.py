"""Exact sums over the blocks of a mask: the states that agree off ``S``.

For a mask ``S`` the ``2^n`` states split into ``2^(n-|S|)`` blocks ``{y : y_{-S} = x_{-S}}``
of ``2^|S|`` states each. Every exact quantity of the theory chapters (conditional
expectations ``E[f | x_{-S}, S]``, the Hessian ``H_w``, the block-dynamics operator, its
Dirichlet form) is a sum over these blocks with weights ``q_S(y) = p(y) w(S | y)``.

:func:`block_ids` numbers the blocks of each mask ``0 .. 2^(n-|S|)-1`` so that a block sum is a
``segment_sum`` with a static number of segments; :func:`size_groups` splits a mask
distribution by ``|S|`` so each group has one static shape.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.ising import model as ising
from gmlm_lib.ising.masks import MaskDistribution, check_distribution


def block_ids(subsets) -> np.ndarray:
    """Block number of every state for each mask. (M, n) bool -> (M, 2^n) int32.

    The block of state ``x`` under ``S`` is the binary number formed by ``x_{-S}``, so states
    share a block exactly when they agree off ``S``; numbers run over ``0 .. 2^(n-|S|)-1``.
    """
    s = np.asarray(subsets, dtype=bool)
    n = s.shape[-1]
    bits = (np.asarray(ising.enumerate_states(n)) > 0).astype(np.int64)  # (2^n, n)
    rest = ~s
    rank = np.cumsum(rest[:, ::-1], axis=1)[:, ::-1] - 1  # rank among the rest, last site = 0
    weights = np.where(rest, np.left_shift(1, np.maximum(rank, 0)), 0)  # (M, n)
    return (bits @ weights.T).T.astype(np.int32)


class SizeGroup(NamedTuple):
    """The masks of one size ``k``: their block numbers and their weights."""

    k: int
    ids: jax.Array  # (M_k, 2^n) int32
    weights: jax.Array  # (M_k,) fixed w(S), or (M_k, 2^n) adaptive w(S | x)


def size_groups(dist: MaskDistribution, n: int) -> Iterator[SizeGroup]:
    """Split ``dist`` by mask size, in increasing ``k``."""
    check_distribution(dist, n)
    s = np.asarray(dist.subsets, dtype=bool)
    sizes = s.sum(1)
    w = np.asarray(dist.weights)
    for k in np.unique(sizes):
        idx = np.nonzero(sizes == k)[0]
        weights = w[:, idx].T if dist.is_adaptive else w[idx]
        yield SizeGroup(int(k), jnp.asarray(block_ids(s[idx])), jnp.asarray(weights))


def block_sum(values: jax.Array, ids: jax.Array, k: int, n: int) -> jax.Array:
    """Sum ``values`` (2^n, ...) over the blocks numbered by ``ids`` (2^n,). Returns (2^(n-k), ...)."""
    return jax.ops.segment_sum(values, ids, num_segments=2 ** (n - k), indices_are_sorted=False)


def block_moments(q: jax.Array, values: jax.Array, ids: jax.Array, k: int, n: int) -> tuple[jax.Array, jax.Array]:
    """Mass ``P_B = sum_{y in B} q(y)`` (2^(n-k),) and ``q``-weighted mean of ``values`` (2^n, ...)
    over each block ``B``, (2^(n-k), ...). A block of zero mass (possible under an adaptive
    ``w``) gets mean 0 instead of 0/0."""
    mass = block_sum(q, ids, k, n)
    safe = jnp.where(mass > 0, mass, 1.0).reshape(mass.shape + (1,) * (values.ndim - 1))
    return mass, block_sum(q.reshape(q.shape + (1,) * (values.ndim - 1)) * values, ids, k, n) / safe


def check_exact_blocks(n: int, limit: int) -> None:
    """Raise a ValueError naming the limit and the alternatives when ``n > limit``: exact sums
    over all ``2^n`` states and all masks are out of reach."""
    if n > limit:
        raise ValueError(
            f"n = {n} is over the limit n <= {limit} for exact sums over all states and all masks; "
            "use the Monte Carlo estimator over masks (e.g. fisher.hessian_monte_carlo) or a smaller model."
        )


def conditional_given_mask(model, dist: MaskDistribution) -> jax.Array:
    """``p(x_S | x_{-S}, S)`` for every mask and state [Lemma 3]: ``q_S(x) / sum_{y in B} q_S(y)``
    with ``q_S(y) = p(y) w(S | y)`` and ``B`` the block of ``x`` under ``S``. (M, 2^n); entry
    ``[m, b]`` is the probability of state ``b`` within its block given mask ``m`` (0 where the
    block has no weight). For a fixed ``w`` it is the plain conditional ``p(x_S | x_{-S})``;
    for an adaptive ``w`` it differs in general [Lemma 2]."""
    n = model.n
    check_distribution(dist, n)
    p = ising.probabilities(model)
    s = np.asarray(dist.subsets, dtype=bool)
    ids = jnp.asarray(block_ids(s))
    W = dist.weights.T if dist.is_adaptive else jnp.broadcast_to(dist.weights[:, None], (s.shape[0], 2**n))
    out = []
    for m, k in enumerate(s.sum(1)):
        q = p * W[m]
        tot = block_sum(q, ids[m], int(k), n)[ids[m]]
        out.append(jnp.where(tot > 0, q / jnp.where(tot > 0, tot, 1.0), 0.0))
    return jnp.stack(out)


def averaged_conditional_expectation(model, dist: MaskDistribution):
    """``F -> sum_S w(S | x) E_{q_S}[F | block of x under S]``, jitted, for F (2^n,) or (2^n, B).

    This is the block-dynamics transition operator ``P`` [Definitions 6, 8] applied to the
    columns of ``F``; :mod:`gmlm_lib.ising.markov` and :func:`gmlm_lib.ising.fisher.all_masks_score_covariance`
    (whose mask-averaged score is ``T - P T``) both use it.
    """
    n = model.n
    ising.check_exact_n(n)
    check_distribution(dist, n)
    p = ising.probabilities(model)
    groups = list(size_groups(dist, n))

    @jax.jit
    def apply(F):
        F = jnp.asarray(F, dtype=jnp.float64)
        Fb = F.reshape(F.shape[0], -1)
        out = jnp.zeros_like(Fb)
        for g in groups:

            def body(acc, sw, k=g.k):
                ids, w = sw
                _, cond = block_moments(p * w, Fb, ids, k, n)
                return acc + jnp.broadcast_to(w, p.shape)[:, None] * cond[ids], None

            out, _ = jax.lax.scan(body, out, (g.ids, g.weights))
        return out.reshape(F.shape)

    return apply
