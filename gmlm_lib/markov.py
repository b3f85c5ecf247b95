"""Block dynamics, their Dirichlet forms and Poincaré constants [Definitions 4-6, 8; Theorem (App. C.4)].

Weighted block dynamics (Definition 6): from ``x`` draw ``S ~ w``, resample
``x_S ~ p(x_S | x_{-S})``. Adaptive block dynamics (Definition 8): draw ``S ~ w(. | x)``,
resample ``x_S ~ p(x_S | x_{-S}, S)``, i.e. proportionally to ``p(y) w(S | y)`` over the block.
k-Gibbs (Definition 10) is the fixed ``w`` uniform over k-subsets. One operator covers all:

    (P f)(x) = sum_S w(S | x) E_{q_S}[ f | block of x under S ],   q_S(y) = p(y) w(S | y).

Both chains are reversible with respect to ``p``. The operator is applied matrix-free (a
sum over blocks, ``O(M 2^n)`` per product) for any ``n <= 20``; :func:`transition_matrix`
builds it densely from the same code for ``n <=`` :data:`MAX_DENSE_N`. The Poincaré constant
``C_P = 1 / (1 - lambda_2(P))`` comes from a dense symmetric eigensolver or from Lanczos
(ARPACK ``eigsh``) on a :class:`scipy.sparse.linalg.LinearOperator`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse.linalg as spla

from gmlm_lib import blocks, ising
from gmlm_lib.ising import IsingModel
from gmlm_lib.masks import MaskDistribution, check_distribution

MAX_DENSE_N = 12
"""Largest n for dense transition matrices (4096 x 4096)."""


def operator(model: IsingModel, dist: MaskDistribution):
    """The block-dynamics transition operator as a jitted function ``f (2^n,) -> P f (2^n,)``.

    Fixed or adaptive ``w``; ``(P f)(x) = E[f(X_1) | X_0 = x]``. Works on a batch (2^n, B) too.
    """
    n = model.n
    ising.check_exact_n(n)
    check_distribution(dist, n)
    p = ising.probabilities(model)
    groups = list(blocks.size_groups(dist, n))

    @jax.jit
    def apply(f):
        f = jnp.asarray(f, dtype=jnp.float64)
        fb = f.reshape(f.shape[0], -1)
        out = jnp.zeros_like(fb)
        for g in groups:

            def body(acc, sw, k=g.k):
                ids, w = sw
                q = p * w
                P = blocks.block_sum(q, ids, k, n)
                cond = blocks.block_sum(q[:, None] * fb, ids, k, n) / jnp.where(P > 0, P, 1.0)[:, None]
                return acc + jnp.broadcast_to(w, p.shape)[:, None] * cond[ids], None

            out, _ = jax.lax.scan(body, out, (g.ids, g.weights))
        return out.reshape(f.shape)

    return apply


def transition_matrix(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """Dense ``P(x, y)``, rows indexed by state number. (2^n, 2^n); n <= :data:`MAX_DENSE_N`.
    Column ``y`` is the operator applied to the indicator of ``y``."""
    blocks.check_exact_blocks(model.n, MAX_DENSE_N)
    return operator(model, dist)(jnp.eye(2**model.n))


def dirichlet_form(model: IsingModel, dist: MaskDistribution, f: jax.Array) -> jax.Array:
    """``E(f, f) = 1/2 sum_{x,y} p(x) P(x,y) (f(x) - f(y))^2 = <f, (I - P) f>_p`` [Definition 4]. ()."""
    p = ising.probabilities(model)
    f = jnp.asarray(f, dtype=jnp.float64)
    return jnp.sum(p * f * (f - operator(model, dist)(f)))


def dirichlet_form_variance(model: IsingModel, dist: MaskDistribution, f: jax.Array) -> jax.Array:
    """``E(f, f) = E_{(x,S)} Var(f | x_{-S}, S)`` [Caputo & Parisi 2021; Prop. (App. C.3)]: the
    same Dirichlet form by conditional variances, without the operator. ()."""
    n = model.n
    check_distribution(dist, n)
    p = ising.probabilities(model)
    f = jnp.asarray(f, dtype=jnp.float64)
    total = jnp.zeros(())
    for g in blocks.size_groups(dist, n):

        def body(acc, sw, k=g.k):
            ids, w = sw
            q = p * w
            P = blocks.block_sum(q, ids, k, n)
            safe = jnp.where(P > 0, P, 1.0)
            m1 = blocks.block_sum(q * f, ids, k, n) / safe
            m2 = blocks.block_sum(q * f * f, ids, k, n) / safe
            return acc + jnp.sum(P * (m2 - m1**2)), None

        total, _ = jax.lax.scan(body, total, (g.ids, g.weights))
    return total


def _symmetrised(model, dist):
    """``A = D^1/2 P D^-1/2`` with the top eigenvector ``sqrt(p)`` deflated, as a matvec."""
    apply = operator(model, dist)
    sqrt_p = jnp.sqrt(ising.probabilities(model))

    @jax.jit
    def matvec(g):
        g = g - sqrt_p * (sqrt_p @ g)
        out = sqrt_p * apply(g / sqrt_p)
        return out - sqrt_p * (sqrt_p @ out)

    return matvec, sqrt_p


def second_eigenvalue(model: IsingModel, dist: MaskDistribution, method: str = "lanczos", tol: float = 1e-13) -> float:
    """``lambda_2(P)``, the largest eigenvalue below the trivial ``1`` (constants).

    ``method="dense"``: ``eigvalsh`` of the symmetrised matrix (n <= :data:`MAX_DENSE_N`).
    ``method="lanczos"``: ARPACK ``eigsh`` on a matrix-free ``LinearOperator`` (any n <= 20).
    Block dynamics are positive semidefinite, so ``lambda_2`` is also the second largest in
    absolute value.
    """
    matvec, sqrt_p = _symmetrised(model, dist)
    N = sqrt_p.shape[0]
    if method == "dense":
        blocks.check_exact_blocks(model.n, MAX_DENSE_N)
        A = jax.vmap(matvec, in_axes=1, out_axes=1)(jnp.eye(N))
        return float(jnp.linalg.eigvalsh(0.5 * (A + A.T))[-1])
    if method == "lanczos":
        if N <= 2:
            return second_eigenvalue(model, dist, "dense")
        op = spla.LinearOperator((N, N), matvec=lambda v: np.asarray(matvec(jnp.asarray(v.ravel()))), dtype=np.float64)
        v0 = np.asarray(jnp.cos(jnp.arange(N) * 0.7) + 0.1)  # deterministic start
        vals = spla.eigsh(op, k=1, which="LA", tol=tol, v0=v0, return_eigenvectors=False, maxiter=20 * N)
        return float(vals[0])
    raise ValueError(f"method must be 'dense' or 'lanczos'; got {method!r}.")


def poincare_constant(model: IsingModel, dist: MaskDistribution, method: str = "lanczos") -> float:
    """The best Poincaré constant ``C_P = 1 / (1 - lambda_2(P))`` [Definition 5]: the smallest
    ``C`` with ``Var_p(f) <= C E(f, f)`` for all ``f``. ``inf`` when the chain is reducible (a
    site no mask ever covers, or a mask law that cannot connect the states)."""
    lam = second_eigenvalue(model, dist, method)
    gap = 1.0 - lam
    return math.inf if gap <= 1e-14 else 1.0 / gap


def reversibility_error(model: IsingModel, P: jax.Array) -> tuple[float, float]:
    """``(max_x |(pP)(x) - p(x)|, max_{x,y} |p(x)P(x,y) - p(y)P(y,x)|)`` for a dense ``P``:
    stationarity and detailed balance with respect to ``p``."""
    p = ising.probabilities(model)
    flow = p[:, None] * P
    return float(jnp.max(jnp.abs(p @ P - p))), float(jnp.max(jnp.abs(flow - flow.T)))
