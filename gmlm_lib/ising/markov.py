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
    """The block-dynamics transition operator as a function ``f (2^n,) -> P f (2^n,)``.

    Fixed or adaptive ``w``; ``(P f)(x) = E[f(X_1) | X_0 = x]``. Works on a batch (2^n, B) too.
    One compiled program per shape (:func:`gmlm_lib.ising.blocks.apply_operator`).
    """
    return blocks.averaged_conditional_expectation(model, dist)


def transition_matrix(model: IsingModel, dist: MaskDistribution) -> jax.Array:
    """Dense ``P(x, y)``, rows indexed by state number. (2^n, 2^n); n <= :data:`MAX_DENSE_N`.
    Column ``y`` is the operator applied to the indicator of ``y``."""
    blocks.check_exact_blocks(model.n, MAX_DENSE_N)
    return operator(model, dist)(np.eye(2**model.n))  # copied to the device: jnp.eye is a program a size


def _exact(model: IsingModel, dist: MaskDistribution, f=None):
    """The law ``p``, the mask table and ``f`` checked, for the jitted kernels below."""
    n = ising.check_model(model).n
    table = blocks.mask_table(dist, n)
    p = ising.probabilities(model)
    return p, table, (None if f is None else ising.check_state_function(f, n))


@jax.jit
def _dirichlet(p, table, f):
    return jnp.sum(p * f * (f - blocks.averaged_expectation(p, table, f)))


@jax.jit
def _dirichlet_variance(p, table, f):
    values = jnp.stack([f, f * f], axis=1)

    def body(ids, w):
        mass, m = blocks.block_moments(p * w, values, ids)
        return jnp.sum(mass * (m[:, 1] - m[:, 0] ** 2))

    return blocks.scan_masks(body, jnp.zeros(()), table)


def dirichlet_form(model: IsingModel, dist: MaskDistribution, f: jax.Array) -> jax.Array:
    """``E(f, f) = 1/2 sum_{x,y} p(x) P(x,y) (f(x) - f(y))^2 = <f, (I - P) f>_p`` [Definition 4]. ()."""
    return _dirichlet(*_exact(model, dist, f))


def dirichlet_form_variance(model: IsingModel, dist: MaskDistribution, f: jax.Array) -> jax.Array:
    """``E(f, f) = E_{(x,S)} Var(f | x_{-S}, S)`` [Caputo & Parisi 2021; Prop. (App. C.3)]: the
    same Dirichlet form by conditional variances, without the operator. (). One compiled program
    per shape."""
    return _dirichlet_variance(*_exact(model, dist, f))


def _sym_apply(p, sqrt_p, table, g):
    """``A g`` with ``A = D^1/2 P D^-1/2`` and the top eigenvector ``sqrt(p)`` deflated; g (2^n,)."""
    g = g - sqrt_p * (sqrt_p @ g)
    out = sqrt_p * blocks.averaged_expectation(p, table, g / sqrt_p)
    return out - sqrt_p * (sqrt_p @ out)


_sym_matvec = jax.jit(_sym_apply)


@jax.jit
def _sym_dense(p, sqrt_p, table):
    A = jax.vmap(lambda g: _sym_apply(p, sqrt_p, table, g), in_axes=1, out_axes=1)(jnp.eye(p.shape[0]))
    return 0.5 * (A + A.T)


def _symmetrised(model, dist):
    """The deflated symmetrised operator as a matvec over NumPy vectors, and ``sqrt(p)``."""
    p, table, _ = _exact(model, dist)
    sqrt_p = _host_sqrt(p)
    on_device = jax.device_put(sqrt_p)
    return (lambda g: np.asarray(_sym_matvec(p, on_device, table, jax.device_put(np.asarray(g, np.float64))))), sqrt_p


def _dense_symmetrised(model, dist) -> tuple[np.ndarray, np.ndarray]:
    """The deflated symmetrised operator as a dense (2^n, 2^n) NumPy matrix, and ``sqrt(p)``."""
    blocks.check_exact_blocks(model.n, MAX_DENSE_N)
    p, table, _ = _exact(model, dist)
    sqrt_p = _host_sqrt(p)
    return np.asarray(_sym_dense(p, jax.device_put(sqrt_p), table)), sqrt_p


def _host_sqrt(p: jax.Array) -> np.ndarray:
    """``sqrt(p)`` on the host (correctly rounded, as on the device): ``jnp.sqrt`` of a device array
    outside a jitted function compiles a program a shape."""
    return np.sqrt(np.asarray(p))


def second_eigenvalue(model: IsingModel, dist: MaskDistribution, method: str = "lanczos", tol: float = 1e-13) -> float:
    """``lambda_2(P)``, the largest eigenvalue below the trivial ``1`` (constants).

    ``method="dense"``: ``eigvalsh`` of the symmetrised matrix (n <= :data:`MAX_DENSE_N`).
    ``method="lanczos"``: ARPACK ``eigsh`` on a matrix-free ``LinearOperator`` (any n <= 20).
    Block dynamics are positive semidefinite, so ``lambda_2`` is also the second largest in
    absolute value.
    """
    if method == "dense":
        return float(np.linalg.eigvalsh(_dense_symmetrised(model, dist)[0])[-1])
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
        _, vecs = np.linalg.eigh(A)
        f = _centred(vecs[:, -1] / sqrt_p, sqrt_p**2)
    else:
        raise ValueError(f"method must be 'dense' or 'lanczos'; got {method!r}.")
    gap = float(dirichlet_form_variance(model, dist, f))
    return math.inf if gap < MIN_RESOLVABLE_GAP else 1.0 / gap


def reversibility_error(model: IsingModel, P: jax.Array) -> tuple[float, float]:
    """``(max_x |(pP)(x) - p(x)|, max_{x,y} |p(x)P(x,y) - p(y)P(y,x)|)`` for a dense ``P``:
    stationarity and detailed balance with respect to ``p``."""
    p, P = np.asarray(ising.probabilities(model)), np.asarray(P)
    flow = p[:, None] * P
    return float(np.max(np.abs(p @ P - p))), float(np.max(np.abs(flow - flow.T)))


def slowest_mode(model: IsingModel, dist: MaskDistribution, tol: float = 1e-13) -> tuple[float, jax.Array]:
    """``(lambda_2, f)``: the second eigenvalue of ``P`` and an eigenfunction ``f`` (2^n,) with
    ``E_p f = 0`` and ``Var_p f = 1`` -- the function the chain forgets most slowly, which attains
    the Poincaré constant. Lanczos (ARPACK) on the deflated symmetrised operator."""
    matvec, sqrt_p = _symmetrised(model, dist)
    N = sqrt_p.shape[0]
    p = sqrt_p**2
    v0 = np.cos(np.arange(N) * 0.7) + 0.1
    image = matvec(v0)
    if N <= 2 or np.linalg.norm(image) <= 1e-14 * np.linalg.norm(v0):
        # One step samples exactly (e.g. k = n): the deflated operator is zero, lambda_2 = 0,
        # and every centred function is an eigenfunction.
        return 0.0, jax.device_put(_centred(v0, p))
    op = spla.LinearOperator((N, N), matvec=lambda v: matvec(v.ravel()), dtype=np.float64)
    vals, vecs = spla.eigsh(op, k=1, which="LA", tol=tol, v0=v0, maxiter=20 * N)
    return float(vals[0]), jax.device_put(_centred(vecs[:, 0] / sqrt_p, p))  # copied, no program


def _centred(f: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``f`` centred and scaled to ``E_p f = 0``, ``Var_p f = 1``."""
    f = f - p @ f
    return f / np.sqrt(p @ f**2)


def span_fraction(model: IsingModel, f: jax.Array) -> float:
    """Share of ``Var_p(f)`` explained by the span of the sufficient statistics ``T`` (and
    constants): ``1`` when ``f = <v, T> + c``. Weighted least squares in ``L^2(p)``."""
    p = np.asarray(ising.probabilities(ising.check_model(model)))
    f = np.asarray(ising.check_state_function(f, model.n))
    T = np.asarray(ising.state_statistics(model.n))
    X = np.concatenate([np.ones((T.shape[0], 1)), T], axis=1) * np.sqrt(p)[:, None]
    y = f * np.sqrt(p)
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ coef
    var = p @ f**2 - (p @ f) ** 2
    return float(1.0 - (resid @ resid) / var)
