"""Block dynamics, their Dirichlet forms and Poincaré constants [Definitions 4-6, 8; Theorems 1, 3 (App. C.4)].

Weighted block dynamics (Definition 6): from ``x`` draw ``S ~ w``, resample
``x_S ~ p(x_S | x_{-S})``. Adaptive block dynamics (Definition 8): draw ``S ~ w(. | x)``,
resample ``x_S ~ p(x_S | x_{-S}, S)``, i.e. proportionally to ``p(y) w(S | y)`` over the block.
k-Gibbs (Definition 10) is the fixed ``w`` uniform over k-subsets. One operator covers all:

    (P f)(x) = sum_S w(S | x) E_{q_S}[ f | block of x under S ],   q_S(y) = p(y) w(S | y).

Both chains are reversible with respect to ``p``. The operator is applied matrix-free (a
sum over blocks, ``O(M 2^n)`` per product) for any ``n <= 20``; :func:`transition_matrix`
builds it densely from the same code for ``n <=`` :data:`MAX_DENSE_N`. The Poincaré constant
``C_P = 1 / (1 - lambda_2(P))`` comes from a dense symmetric eigensolver or from Lanczos
(ARPACK ``eigsh``) on a ``scipy.sparse.linalg.LinearOperator``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse.linalg as spla

from gmlm_lib.ising import blocks
from gmlm_lib.ising import model as ising
from gmlm_lib.ising.masks import MaskDistribution, check_distribution
from gmlm_lib.ising.model import IsingModel

MAX_DENSE_N = 12
"""Largest n for dense transition matrices (4096 x 4096)."""

MIN_RESOLVABLE_GAP = 1e-15
"""Spectral gaps below this are reported as 0 (``C_P = inf``): float64 cannot resolve them."""


def operator(model: IsingModel, dist: MaskDistribution):
    """The block-dynamics transition operator as a jitted function ``f (2^n,) -> P f (2^n,)``.

    Fixed or adaptive ``w``; ``(P f)(x) = E[f(X_1) | X_0 = x]``. Works on a batch (2^n, B) too.
    """
    return blocks.averaged_conditional_expectation(model, dist)


def transition_matrix(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """Dense ``P(x, y)``, rows indexed by state number. (2^n, 2^n); n <= :data:`MAX_DENSE_N`.
    Column ``y`` is the operator applied to the indicator of ``y``."""
    blocks.check_exact_blocks(model.n, MAX_DENSE_N)
    return operator(model, dist)(jnp.eye(2**model.n))


def dirichlet_form(model: IsingModel, dist: MaskDistribution, f: jax.Array) -> jax.Array:
    """``E(f, f) = 1/2 sum_{x,y} p(x) P(x,y) (f(x) - f(y))^2 = <f, (I - P) f>_p`` [Definition 4]. ()."""
    p = ising.probabilities(ising.check_model(model))
    f = ising.check_state_function(f, model.n)
    return jnp.sum(p * f * (f - operator(model, dist)(f)))


def dirichlet_form_variance(model: IsingModel, dist: MaskDistribution, f: jax.Array) -> jax.Array:
    """``E(f, f) = E_{(x,S)} Var(f | x_{-S}, S)`` [Caputo & Parisi 2021; Prop. (App. C.3)]: the
    same Dirichlet form by conditional variances, without the operator. ()."""
    n = ising.check_model(model).n
    check_distribution(dist, n)
    p = ising.probabilities(model)
    f = ising.check_state_function(f, n)
    total = jnp.zeros(())
    for g in blocks.size_groups(dist, n):

        def body(acc, sw, k=g.k):
            ids, w = sw
            mass, m = blocks.block_moments(p * w, jnp.stack([f, f * f], axis=1), ids, k, n)
            return acc + jnp.sum(mass * (m[:, 1] - m[:, 0] ** 2)), None

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


def _dense_symmetrised(model, dist) -> tuple[jax.Array, jax.Array]:
    """The deflated symmetrised operator as a dense (2^n, 2^n) matrix, and ``sqrt(p)``."""
    blocks.check_exact_blocks(model.n, MAX_DENSE_N)
    matvec, sqrt_p = _symmetrised(model, dist)
    A = jax.vmap(matvec, in_axes=1, out_axes=1)(jnp.eye(sqrt_p.shape[0]))
    return 0.5 * (A + A.T), sqrt_p


def second_eigenvalue(model: IsingModel, dist: MaskDistribution, method: str = "lanczos", tol: float = 1e-13) -> float:
    """``lambda_2(P)``, the largest eigenvalue below the trivial ``1`` (constants).

    ``method="dense"``: ``eigvalsh`` of the symmetrised matrix (n <= :data:`MAX_DENSE_N`).
    ``method="lanczos"``: ARPACK ``eigsh`` on a matrix-free ``LinearOperator`` (any n <= 20).
    Block dynamics are positive semidefinite, so ``lambda_2`` is also the second largest in
    absolute value.
    """
    if method == "dense":
        return float(jnp.linalg.eigvalsh(_dense_symmetrised(model, dist)[0])[-1])
    if method == "lanczos":
        return slowest_mode(model, dist, tol)[0]
    raise ValueError(f"method must be 'dense' or 'lanczos'; got {method!r}.")


def poincare_constant(model: IsingModel, dist: MaskDistribution, method: str = "lanczos") -> float:
    """The best Poincaré constant ``C_P = 1 / (1 - lambda_2(P))`` [Definition 5; Theorems 1, 3]: the smallest
    ``C`` with ``Var_p(f) <= C E(f, f)`` for all ``f``.

    The eigenvector ``f`` of ``lambda_2`` comes from ``method`` (``"dense"`` or ``"lanczos"``,
    see :func:`second_eigenvalue`); the gap is then its Rayleigh quotient
    ``E(f, f) / Var_p(f)`` with ``E`` summed as conditional variances
    (:func:`dirichlet_form_variance`). That sum has no cancellation, so gaps far below float64
    resolution of ``1 - lambda_2`` (strongly coupled models, ``C_P`` up to ~1e12 and beyond)
    stay accurate; the Rayleigh quotient's error is second order in the eigenvector's.
    ``inf`` when the gap is below :data:`MIN_RESOLVABLE_GAP`: the chain is reducible (a site no
    mask ever covers) or mixes too slowly for float64 to tell it from reducible.
    """
    if method == "lanczos":
        _, f = slowest_mode(model, dist)
    elif method == "dense":
        A, sqrt_p = _dense_symmetrised(model, dist)
        _, vecs = jnp.linalg.eigh(A)
        f = vecs[:, -1] / sqrt_p
        p = sqrt_p**2
        f = f - p @ f
        f = f / jnp.sqrt(p @ f**2)
    else:
        raise ValueError(f"method must be 'dense' or 'lanczos'; got {method!r}.")
    gap = float(dirichlet_form_variance(model, dist, f))
    return math.inf if gap < MIN_RESOLVABLE_GAP else 1.0 / gap


def reversibility_error(model: IsingModel, P: jax.Array) -> tuple[float, float]:
    """``(max_x |(pP)(x) - p(x)|, max_{x,y} |p(x)P(x,y) - p(y)P(y,x)|)`` for a dense ``P``:
    stationarity and detailed balance with respect to ``p``."""
    p = ising.probabilities(model)
    flow = p[:, None] * P
    return float(jnp.max(jnp.abs(p @ P - p))), float(jnp.max(jnp.abs(flow - flow.T)))


def slowest_mode(model: IsingModel, dist: MaskDistribution, tol: float = 1e-13) -> tuple[float, jax.Array]:
    """``(lambda_2, f)``: the second eigenvalue of ``P`` and an eigenfunction ``f`` (2^n,) with
    ``E_p f = 0`` and ``Var_p f = 1`` -- the function the chain forgets most slowly, which attains
    the Poincaré constant. Lanczos (ARPACK) on the deflated symmetrised operator."""
    matvec, sqrt_p = _symmetrised(model, dist)
    N = sqrt_p.shape[0]
    p = sqrt_p**2
    v0 = np.asarray(jnp.cos(jnp.arange(N) * 0.7) + 0.1)
    image = np.asarray(matvec(jnp.asarray(v0)))
    if N <= 2 or np.linalg.norm(image) <= 1e-14 * np.linalg.norm(v0):
        # One step samples exactly (e.g. k = n): the deflated operator is zero, lambda_2 = 0,
        # and every centred function is an eigenfunction.
        f = jnp.asarray(v0) - jnp.asarray(v0) @ p
        return 0.0, f / jnp.sqrt(p @ f**2)
    op = spla.LinearOperator((N, N), matvec=lambda v: np.asarray(matvec(jnp.asarray(v.ravel()))), dtype=np.float64)
    vals, vecs = spla.eigsh(op, k=1, which="LA", tol=tol, v0=v0, maxiter=20 * N)
    f = jnp.asarray(vecs[:, 0]) / sqrt_p
    f = f - p @ f
    return float(vals[0]), f / jnp.sqrt(p @ f**2)


def span_fraction(model: IsingModel, f: jax.Array) -> float:
    """Share of ``Var_p(f)`` explained by the span of the sufficient statistics ``T`` (and
    constants): ``1`` when ``f = <v, T> + c``. Weighted least squares in ``L^2(p)``."""
    p = ising.probabilities(ising.check_model(model))
    f = ising.check_state_function(f, model.n)
    T = ising.sufficient_statistics(ising.enumerate_states(model.n))
    X = jnp.concatenate([jnp.ones((T.shape[0], 1)), T], axis=1) * jnp.sqrt(p)[:, None]
    y = f * jnp.sqrt(p)
    coef, *_ = jnp.linalg.lstsq(X, y)
    resid = y - X @ coef
    var = p @ f**2 - (p @ f) ** 2
    return float(1.0 - (resid @ resid) / var)
