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

from gmlm_lib.ising import blocks
from gmlm_lib.ising import model as ising
from gmlm_lib.ising.masks import MaskDistribution, check_distribution
from gmlm_lib.ising.model import IsingModel

MAX_EXACT_N = 12
"""Largest n for exact sums over all states and all masks."""

MAX_AUTODIFF_N = 8
"""Largest n for the autodiff route (it differentiates a loss over every (state, mask) pair)."""


def _tables(model: IsingModel):
    ising.check_model(model)
    return ising.state_statistics(model.n), ising.probabilities(model)


def _exact(model: IsingModel, dist: MaskDistribution):
    """``T`` (2^n, p), ``p`` (2^n,) and the mask table, for the jitted kernels below."""
    n = ising.check_model(model).n
    blocks.check_exact_blocks(n, MAX_EXACT_N)
    table = blocks.mask_table(dist, n)
    return (*_tables(model), table)


@jax.jit
def _fisher(T, p):
    mu = p @ T
    return T.T @ (p[:, None] * T) - jnp.outer(mu, mu)


def fisher_information(model: IsingModel) -> jax.Array:
    """``I(theta) = Cov_p(T(X))``. Returns (p, p), p = n(n-1)/2 + n."""
    return _fisher(*_tables(model))


@jax.jit
def _hessian(T, p, table):
    def body(ids, w):
        mass, means = blocks.block_moments(p * w, T, ids)
        return means.T @ (mass[:, None] * means)

    return T.T @ (p[:, None] * T) - blocks.scan_masks(body, jnp.zeros((T.shape[1], T.shape[1])), table)


def hessian(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """``H_w = E_{(x,S)~p(x)w(S|x)} Cov(T | x_{-S}, S)`` [Lemma (App. A)]. Returns (p, p).

    Computed as ``E[T T^T] - sum_S sum_B P_B m_B m_B^T`` over the blocks ``B`` of each mask, with
    ``P_B = sum_{y in B} q_S(y)`` and ``m_B`` the ``q_S``-weighted mean of ``T`` on ``B``.
    Fixed or adaptive ``w``; ``n <=`` :data:`MAX_EXACT_N`. One compiled program per shape.
    """
    return _hessian(*_exact(model, dist))


@jax.jit
def _score_covariance(T, p, table):
    def body(ids, w):
        q = p * w
        _, means = blocks.block_moments(q, T, ids)
        r = T - means[ids]
        return r.T @ (q[:, None] * r)

    return blocks.scan_masks(body, jnp.zeros((T.shape[1], T.shape[1])), table)


def score_covariance(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """``Sigma_w``: covariance of the per-pair score ``-(T(x) - E[T | x_{-S}, S])`` under
    ``p(x) w(S|x)`` [Lemma 1]. Returns (p, p). Summed state by state (a different route
    from :func:`hessian`; equal to it under realizability)."""
    return _score_covariance(*_exact(model, dist))


@jax.jit
def _all_masks_covariance(T, p, table):
    r = T - blocks.averaged_expectation(p, table, T)  # (P T)(x): the block-dynamics operator
    return r.T @ (p[:, None] * r)


def all_masks_score_covariance(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """``Sigma'_w = Cov_x( E_{S~w(.|x)} grad l(theta*; x, S) )``: the score covariance when each
    sample is used with all of its masks. Returns (p, p). ``Sigma' <= Sigma_w`` (law of total
    covariance). The mask-averaged score is ``-(T - P T)`` with ``P`` the block dynamics of ``w``."""
    return _all_masks_covariance(*_exact(model, dist))


def sandwich(H: jax.Array, Sigma: jax.Array) -> jax.Array:
    """``H^-1 Sigma H^-1`` [Lemma 1], symmetrised. (p, p). A Hessian that float64 cannot invert (its
    condition number above ``1 / eps``, as at very strong couplings, where the conditionals are nearly
    deterministic) is refused with its condition number, not turned into a covariance of rounding errors."""
    H = ising.check_matrix(H, "H")
    Sigma = ising.check_matrix(Sigma, "Sigma", H.shape[0])
    if not isinstance(H, jax.core.Tracer):
        cond = float(np.linalg.cond(np.asarray(H)))
        if not cond < 1.0 / np.finfo(np.float64).eps:
            raise ValueError(f"H is numerically singular (condition number {cond:.3g}, float64 resolves up to "
                             f"{1 / np.finfo(np.float64).eps:.3g}): the asymptotic covariance is not computable at this "
                             "model; weaken its couplings (the strongest make the conditionals deterministic).")
    return _sandwich(H, Sigma)


@jax.jit
def _sandwich(H, Sigma):
    """:func:`sandwich`'s arithmetic, one program a size (run op by op, each operation would be one)."""
    Hinv = jnp.linalg.inv(H)
    G = Hinv @ Sigma @ Hinv
    return 0.5 * (G + G.T)


def asymptotic_covariance(model: IsingModel, dist: MaskDistribution, regime: str = "one-mask") -> jax.Array:
    """``Gamma_w``, the asymptotic covariance of ``sqrt(N)(theta_hat - theta*)`` [Lemma 1, Theorems 1-3].

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
    n = ising.check_model(model).n
    ising.check_exact_n(n)
    raw = np.asarray(masks)
    if raw.dtype != bool and not (np.issubdtype(raw.dtype, np.number) and np.isin(raw, (0, 1)).all()):
        raise ValueError(f"masks must be boolean (or 0/1) rows, True on the masked sites; got dtype {raw.dtype} with "
                         "values other than 0 and 1.")
    masks = raw.astype(bool)
    if masks.ndim != 2 or masks.shape[1] != n or masks.shape[0] < 1:
        raise ValueError(f"masks must be (M, {n}) with M >= 1; got {masks.shape}.")
    return _per_mask(*_tables(model), jax.device_put(blocks.block_ids(masks)))


@jax.jit
def _per_mask(T, p, ids):
    second = T.T @ (p[:, None] * T)

    def one(ids_row):
        mass, means = blocks.block_moments(p, T, ids_row)
        return second - means.T @ (mass[:, None] * means)

    return jax.lax.map(one, ids)


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


def _pair_arrays(n: int, dist: MaskDistribution):
    s = np.asarray(dist.subsets, dtype=bool)
    W = np.asarray(dist.weights).T if dist.is_adaptive else np.tile(np.asarray(dist.weights)[:, None], (1, 2**n))
    with np.errstate(divide="ignore"):
        logw = np.log(W)
    return jax.device_put((blocks.block_ids(s), logw, W))  # copied: jnp.asarray would run a program a shape


def _pair_losses(theta, T, ids, logw):
    """``l(theta; x, S) = -log p_theta(x_S | x_{-S}, S)`` for every mask and state. (M, 2^n);
    ``+inf``-free: pairs with ``w(S|x) = 0`` give 0 (they carry no probability), and so do their
    derivatives: a block where ``w(S|.)`` is 0 throughout has no log-normaliser, and the ``-inf``
    is kept out of both branches of each ``where`` (a ``where`` passes a NaN derivative from the
    branch it does not take). Vectorised over masks with ``2^n`` segments, so one program serves
    every distribution with the same number of masks."""
    logits = T @ theta
    segments = T.shape[0]

    def row(ids, lw):
        z = logits + lw
        live = jnp.isfinite(z)
        zmax = jax.ops.segment_max(z, ids, num_segments=segments)
        zmax = jnp.where(jnp.isfinite(zmax), zmax, 0.0)
        tot = jax.ops.segment_sum(jnp.exp(z - zmax[ids]), ids, num_segments=segments)
        lse = zmax + jnp.log(jnp.where(tot > 0, tot, 1.0))
        return jnp.where(live, -(jnp.where(live, z, 0.0) - lse[ids]), 0.0)

    return jax.vmap(row)(ids, logw)


@jax.jit
def _loss_hessian(theta, T, p, W, ids, logw):
    law = W * p[None, :]
    return jax.hessian(lambda th: jnp.sum(law * _pair_losses(th, T, ids, logw)))(theta)


@jax.jit
def _pair_scores(theta, T, ids, logw):
    return jax.jacfwd(lambda th: _pair_losses(th, T, ids, logw))(theta)


def loss_hessian_autodiff(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """``H_w`` as the autodiff Hessian of the exact population loss
    ``L(theta) = sum_{x,S} pi(x,S) l(theta; x, S)`` at ``theta*``, with ``pi(x,S) = p(x) w(S|x)``.
    (p, p); n <= :data:`MAX_AUTODIFF_N`."""
    n = model.n
    blocks.check_exact_blocks(n, MAX_AUTODIFF_N)
    check_distribution(dist, n)
    ids, logw, W = _pair_arrays(n, dist)
    return _loss_hessian(ising.to_theta(model), ising.state_statistics(n), ising.probabilities(model), W, ids, logw)


def score_covariance_autodiff(model: IsingModel, dist: MaskDistribution) -> Estimate:
    """``Sigma_w`` from autodiff per-pair scores ``grad l(theta*; x, S)``: their covariance under
    ``pi(x, S)``. Returns ``Estimate(mean=Sigma_w, se=mean score)``: the second field is the
    mean score (p,), zero at ``theta*`` under realizability."""
    n = model.n
    blocks.check_exact_blocks(n, MAX_AUTODIFF_N)
    check_distribution(dist, n)
    ids, logw, W = _pair_arrays(n, dist)
    return Estimate(*_score_moments(ising.to_theta(model), ising.state_statistics(n), ising.probabilities(model), W,
                                    ids, logw))


@jax.jit
def _score_moments(theta, T, p, W, ids, logw):
    law = W * p[None, :]
    J = _pair_scores(theta, T, ids, logw)
    mean = jnp.einsum("ms,msp->p", law, J)
    second = jnp.einsum("ms,msp,msq->pq", law, J, J)
    return second - jnp.outer(mean, mean), mean


def generalized_eigvals(A: jax.Array, B: jax.Array) -> np.ndarray:
    """Eigenvalues of the pencil ``(A, B)``: the stationary values of ``v^T A v / v^T B v``, for
    symmetric ``A`` and positive definite ``B``, ascending. Scale-invariant, so Loewner
    comparisons of badly conditioned covariances do not hinge on inverting them:
    ``A <= B`` iff every value is ``<= 1``."""
    import scipy.linalg

    A = np.asarray(ising.check_matrix(A, "A"))
    B = np.asarray(ising.check_matrix(B, "B", A.shape[0]))
    return scipy.linalg.eigh(0.5 * (A + A.T), 0.5 * (B + B.T), eigvals_only=True)
