"""Fisher information and the asymptotic covariances of weighted pseudolikelihood for Ising
models, exact by enumeration [Section 2.2, Lemma 1, Lemma (App. A), Theorem 2].

With sufficient statistics ``T`` and ``q_S(x) = p(x) w(S | x)`` (the law of a training pair):

- Fisher information ``I = Cov_p(T)``; ``Gamma_MLE = I^-1``.
- ``H_w = E_{(x,S)} Cov(T | x_{-S}, S)``, the Hessian of the population loss at ``theta*``.
- ``Sigma_w = Cov_{(x,S)}(grad l(theta*; x, S))``, the score covariance (one mask per sample).
- ``Sigma'_w = Cov_x(E_{S ~ w(.|x)} grad l(theta*; x, S))`` when each sample is used with all
  of its masks.
- ``Gamma_w = H_w^-1 Sigma_w H_w^-1``; under realizability ``H_w = Sigma_w`` (the generalized
  information-matrix equality) and ``Gamma_w = H_w^-1``.

Exact functions enumerate all ``2^n`` states and every mask of ``w``, for ``n <= 12``
(:data:`MAX_EXACT_N`). :func:`hessian_monte_carlo` estimates ``H_w`` for larger ``n`` (up to
the enumeration limit 20) from masks drawn from ``w``, with standard errors. The
``*_autodiff`` functions differentiate the exact population loss instead, an independent
route used to verify the information-matrix equality. Everything is float64.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib import blocks, ising
from gmlm_lib.ising import IsingModel
from gmlm_lib.masks import MaskDistribution, check_distribution

MAX_EXACT_N = 12
"""Largest n for exact sums over all states and all masks."""

MAX_AUTODIFF_N = 8
"""Largest n for the autodiff route (it differentiates a loss over every (state, mask) pair)."""


def _tables(model: IsingModel):
    states = ising.enumerate_states(model.n)
    return ising.sufficient_statistics(states), ising.probabilities(model)


def fisher_information(model: IsingModel) -> jax.Array:
    """``I(theta) = Cov_p(T(X))``. Returns (p, p), p = n(n-1)/2 + n."""
    T, p = _tables(model)
    mu = p @ T
    return T.T @ (p[:, None] * T) - jnp.outer(mu, mu)


def _block_means_term(T, p, group: blocks.SizeGroup, n: int):
    """``sum_S sum_blocks Mtilde Mtilde^T / P`` over one size group (see :func:`hessian`)."""

    def body(acc, sw):
        ids, w = sw
        q = p * w
        Mc = blocks.block_sum(q[:, None] * T, ids, group.k, n)
        Pc = blocks.block_sum(q, ids, group.k, n)
        return acc + Mc.T @ (Mc / jnp.where(Pc > 0, Pc, 1.0)[:, None]), None

    acc, _ = jax.lax.scan(body, jnp.zeros((T.shape[1], T.shape[1])), (group.ids, group.weights))
    return acc


def hessian(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """``H_w = E_{(x,S)~p(x)w(S|x)} Cov(T | x_{-S}, S)`` [Lemma (App. A)]. Returns (p, p).

    Computed as ``E[T T^T] - sum_S sum_B Mtilde_B Mtilde_B^T / P_B`` over the blocks ``B`` of each
    mask, with ``P_B = sum_{y in B} q_S(y)`` and ``Mtilde_B = sum_{y in B} q_S(y) T(y)``.
    Fixed or adaptive ``w``; ``n <=`` :data:`MAX_EXACT_N`.
    """
    n = model.n
    blocks.check_exact_blocks(n, MAX_EXACT_N)
    check_distribution(dist, n)
    T, p = _tables(model)
    second = T.T @ (p[:, None] * T)
    acc = sum(_block_means_term(T, p, g, n) for g in blocks.size_groups(dist, n))
    return second - acc


def score_covariance(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """``Sigma_w``: covariance of the per-pair score ``-(T(x) - E[T | x_{-S}, S])`` under
    ``p(x) w(S|x)`` [Lemma 1]. Returns (p, p). Summed state by state (a different route
    from :func:`hessian`; equal to it under realizability)."""
    n = model.n
    blocks.check_exact_blocks(n, MAX_EXACT_N)
    check_distribution(dist, n)
    T, p = _tables(model)
    out = jnp.zeros((T.shape[1], T.shape[1]))
    for g in blocks.size_groups(dist, n):

        def body(acc, sw, k=g.k):
            ids, w = sw
            q = p * w
            means = blocks.block_sum(q[:, None] * T, ids, k, n) / jnp.where(
                (P := blocks.block_sum(q, ids, k, n)) > 0, P, 1.0
            )[:, None]
            r = T - means[ids]
            return acc + r.T @ (q[:, None] * r), None

        out, _ = jax.lax.scan(body, out, (g.ids, g.weights))
    return out


def all_masks_score_covariance(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """``Sigma'_w = Cov_x( E_{S~w(.|x)} grad l(theta*; x, S) )``: the score covariance when each
    sample is used with all of its masks. Returns (p, p). ``Sigma' <= Sigma_w`` (law of total
    covariance)."""
    n = model.n
    blocks.check_exact_blocks(n, MAX_EXACT_N)
    check_distribution(dist, n)
    T, p = _tables(model)
    mixed = jnp.zeros_like(T)  # E_{S ~ w(.|x)} E[T | x_{-S}, S], state by state
    for g in blocks.size_groups(dist, n):

        def body(acc, sw, k=g.k):
            ids, w = sw
            q = p * w
            P = blocks.block_sum(q, ids, k, n)
            means = blocks.block_sum(q[:, None] * T, ids, k, n) / jnp.where(P > 0, P, 1.0)[:, None]
            return acc + jnp.broadcast_to(w, p.shape)[:, None] * means[ids], None

        mixed, _ = jax.lax.scan(body, mixed, (g.ids, g.weights))
    r = T - mixed
    return r.T @ (p[:, None] * r)


def sandwich(H: jax.Array, Sigma: jax.Array) -> jax.Array:
    """``H^-1 Sigma H^-1`` [Lemma 1], symmetrised. (p, p)."""
    Hinv = jnp.linalg.inv(H)
    G = Hinv @ Sigma @ Hinv
    return 0.5 * (G + G.T)


def asymptotic_covariance(model: IsingModel, dist: MaskDistribution, regime: str = "one-mask") -> jax.Array:
    """``Gamma_w``, the asymptotic covariance of ``sqrt(N)(theta_hat - theta*)`` [Lemma 1, Theorem 2].

    ``regime="one-mask"``: i.i.d. pairs ``(x, S)`` (Definition 2); realizable, so
    ``Gamma = H_w^-1``. ``regime="all-masks"``: each sample with every mask, weighted by ``w``;
    ``Gamma = H_w^-1 Sigma'_w H_w^-1``. Returns (p, p).
    """
    H = hessian(model, dist)
    if regime == "one-mask":
        return sandwich(H, H)
    if regime == "all-masks":
        return sandwich(H, all_masks_score_covariance(model, dist))
    raise ValueError(f"regime must be 'one-mask' or 'all-masks'; got {regime!r}.")


# --- Monte Carlo over masks (12 < n <= 20) --------------------------------------------------------


class Estimate(NamedTuple):
    """A Monte Carlo estimate and its standard error (same shape)."""

    mean: jax.Array
    se: jax.Array


def hessian_per_mask(model: IsingModel, masks: jax.Array) -> jax.Array:
    """``H_{S} = E_x Cov(T | x_{-S})`` for each given mask (a point mass ``w = delta_S``), all
    states enumerated (``n <= 20``). masks (M, n) bool -> (M, p, p)."""
    n = model.n
    ising.check_exact_n(n)
    masks = np.asarray(masks, dtype=bool)
    if masks.ndim != 2 or masks.shape[1] != n or masks.shape[0] < 1:
        raise ValueError(f"masks must be (M, {n}) with M >= 1; got {masks.shape}.")
    T, p = _tables(model)
    second = T.T @ (p[:, None] * T)
    sizes = masks.sum(1)
    out = [None] * masks.shape[0]
    for k in np.unique(sizes):
        idx = np.nonzero(sizes == k)[0]
        ids = jnp.asarray(blocks.block_ids(masks[idx]))

        def one(ids_row, k=int(k)):
            Mc = blocks.block_sum(p[:, None] * T, ids_row, k, n)
            Pc = blocks.block_sum(p, ids_row, k, n)
            return second - Mc.T @ (Mc / Pc[:, None])

        for j, H in zip(idx, jax.lax.map(one, ids)):
            out[j] = H
    return jnp.stack(out)


def hessian_monte_carlo(model: IsingModel, masks: jax.Array) -> Estimate:
    """Unbiased estimate of ``H_w`` for a fixed ``w`` from masks ``S_1..S_M`` drawn i.i.d. from
    ``w``: every state is still enumerated (``n <= 20``), only the sum over masks is sampled.
    masks (M, n) bool, M >= 2. Returns the (p, p) mean and its entrywise standard error."""
    masks = np.asarray(masks, dtype=bool)
    if masks.ndim != 2 or masks.shape[0] < 2:
        raise ValueError(f"masks must be (M, n) with M >= 2 for a standard error; got {masks.shape}.")
    per_mask = hessian_per_mask(model, masks)
    m = per_mask.shape[0]
    return Estimate(per_mask.mean(0), per_mask.std(0, ddof=1) / np.sqrt(m))


# --- Autodiff route (small n): the equality H = Sigma checked, not assumed -------------------------


def _pair_losses(theta, n: int, dist: MaskDistribution):
    """``l(theta; x, S) = -log p_theta(x_S | x_{-S}, S)`` for every state and mask. (M, 2^n)."""
    T = ising.sufficient_statistics(ising.enumerate_states(n))
    logits = T @ theta
    s = np.asarray(dist.subsets, dtype=bool)
    ids = jnp.asarray(blocks.block_ids(s))
    W = dist.weights.T if dist.is_adaptive else jnp.broadcast_to(dist.weights[:, None], (s.shape[0], 2**n))
    logw = jnp.log(jnp.where(W > 0, W, 1.0)) + jnp.where(W > 0, 0.0, -jnp.inf)

    def one(ids_row, logw_row, k):
        z = logits + logw_row
        zmax = jax.ops.segment_max(z, ids_row, num_segments=2 ** (n - k))
        zmax = jnp.where(jnp.isfinite(zmax), zmax, 0.0)
        lse = zmax + jnp.log(jax.ops.segment_sum(jnp.exp(z - zmax[ids_row]), ids_row, num_segments=2 ** (n - k)))
        return -(z - lse[ids_row])

    sizes = s.sum(1)
    return jnp.stack([one(ids[m], logw[m], int(sizes[m])) for m in range(s.shape[0])])


def _pair_law(model: IsingModel, dist: MaskDistribution):
    p = ising.probabilities(model)
    W = dist.weights.T if dist.is_adaptive else dist.weights[:, None] * jnp.ones((1, 2**model.n))
    return W * p[None, :]  # (M, 2^n): pi(x, S)


def loss_hessian_autodiff(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """``H_w`` as the autodiff Hessian of the exact population loss
    ``L(theta) = sum_{x,S} pi(x,S) l(theta; x, S)`` at ``theta*``. (p, p); n <= :data:`MAX_AUTODIFF_N`."""
    n = model.n
    blocks.check_exact_blocks(n, MAX_AUTODIFF_N)
    check_distribution(dist, n)
    law = _pair_law(model, dist)
    L = lambda th: jnp.sum(law * jnp.where(law > 0, _pair_losses(th, n, dist), 0.0))  # noqa: E731
    return jax.hessian(L)(ising.to_theta(model))


def score_covariance_autodiff(model: IsingModel, dist: MaskDistribution) -> Estimate:
    """``Sigma_w`` from autodiff per-pair scores ``grad l(theta*; x, S)``: their covariance under
    ``pi(x, S)``. Returns ``Estimate(mean=Sigma_w, se=mean score)``: the second field is the
    mean score (p,), zero at ``theta*`` under realizability."""
    n = model.n
    blocks.check_exact_blocks(n, MAX_AUTODIFF_N)
    check_distribution(dist, n)
    law = _pair_law(model, dist)
    J = jax.jacfwd(lambda th: _pair_losses(th, n, dist))(ising.to_theta(model))  # (M, 2^n, p)
    J = jnp.where(law[..., None] > 0, J, 0.0)
    mean = jnp.einsum("ms,msp->p", law, J)
    second = jnp.einsum("ms,msp,msq->pq", law, J, J)
    return Estimate(second - jnp.outer(mean, mean), mean)


def generalized_eigvals(A: jax.Array, B: jax.Array) -> np.ndarray:
    """Eigenvalues of the pencil ``(A, B)``: the stationary values of ``v^T A v / v^T B v``, for
    symmetric ``A`` and positive definite ``B``, ascending. Scale-invariant, so Loewner
    comparisons of badly conditioned covariances do not hinge on inverting them:
    ``A <= B`` iff every value is ``<= 1``."""
    import scipy.linalg

    A, B = np.asarray(A), np.asarray(B)
    return scipy.linalg.eigh(0.5 * (A + A.T), 0.5 * (B + B.T), eigvals_only=True)
