"""Likelihood and (weighted, k-) pseudolikelihood losses for Ising models, and convex fitting
[Definitions 1-3, Appendix K].

Losses are plain functions ``loss(params, x, masks) -> ()`` of an :class:`~gmlm_lib.ising.model.IsingModel`,
a batch of states ``x`` (N, n) and one mask per state (N, n) (Optax style); fitting is separate.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core import checks
from gmlm_lib.core.precision import float64, require_x64
from gmlm_lib.ising import masks as masks_lib
from gmlm_lib.ising import model as ising
from gmlm_lib.ising.model import IsingModel


def negative_log_likelihood(params: IsingModel, x: jax.Array, masks: jax.Array | None = None) -> jax.Array:
    """Mean negative log-likelihood ``-(1/N) sum_i log p_theta(x^(i))`` [Definition 1]. Returns ().

    ``masks`` is accepted and ignored, so the MLE plugs in wherever a masked loss does
    (it is the ``k = n`` pseudolikelihood, :func:`pseudolikelihood_loss` with full masks). An empty
    sample has no mean: refused.
    """
    x = ising.check_spins(x, params.n)
    _check_not_empty(x)
    return _mean_energy_plus(params, x, ising.log_partition(params))


@jax.jit
def _mean_energy_plus(params, x, log_z):
    """The mean energy of ``x`` plus ``log Z``, one program a shape (op by op, three)."""
    return jnp.mean(ising.energy(params, x)) + log_z


def _check_not_empty(x: jax.Array) -> None:
    if x.ndim == 2 and x.shape[0] == 0:
        raise ValueError("x holds no sample (shape (0, n)): a loss is a mean over samples; pass at least one.")


def pseudolikelihood_loss(params: IsingModel, x: jax.Array, masks: jax.Array, max_size: int | None = None) -> jax.Array:
    """Weighted pseudolikelihood loss ``-(1/N) sum_i log p_theta(x^(i)_S | x^(i)_{-S})`` with
    ``S = {j : masks[i, j]}`` [Definition 2]. With masks drawn uniformly among the ``k``-subsets
    this is the k-pseudolikelihood loss [Definition 3]. Returns ().

    x (N, n) in {-1,+1}; masks (N, n) bool. ``max_size`` (static) bounds ``|S|``; see
    :func:`gmlm_lib.ising.model.log_conditional`. An empty sample has no mean, and a pair whose mask
    is empty predicts nothing: both refused.
    """
    _check_not_empty(checks.array(x))
    _check_masks(masks)
    return _negative_mean(ising.log_conditional(params, x, masks, max_size=max_size))


@jax.jit
def _negative_mean(values):
    """``-mean(values)``, one program a shape (op by op, two)."""
    return -jnp.mean(values)


def _check_masks(masks) -> None:
    """Refuse a pair whose mask holds no site (checked where ``masks`` is concrete; a traced call is its
    caller's to check): it conditions on everything and predicts nothing, ``log 1 = 0``, so it would only
    dilute the mean, and masks that are all empty would fit any theta at a loss of 0."""
    if isinstance(masks, jax.core.Tracer):
        return
    m = np.asarray(masks)
    if m.dtype != bool and not (np.issubdtype(m.dtype, np.number) and np.isin(m, (0, 1)).all()):
        raise ValueError(f"masks must be boolean (True: the site is masked), or 0 and 1; got an array of {m.dtype} "
                         "holding other values (a value is never rounded to a mask).")
    m = m.astype(bool)
    if m.ndim == 0 or m.shape[-1] == 0:  # no site to mask at all
        m = np.zeros((1, 1), bool)
    empty = np.flatnonzero(~m.reshape(-1, m.shape[-1]).any(axis=-1))
    if empty.size:
        raise ValueError(f"masks row {int(empty[0])} masks no site ({empty.size} row(s) do): an empty mask predicts "
                         "nothing (its term is log 1 = 0) and would only dilute the loss's mean; give every pair at "
                         "least one masked site (k >= 1).")


MIN_RCOND = 1e-12
"""Smallest pivot of the Hessian's LU factorisation, relative to the largest (or to 1), at which a
fit's Newton step counts as defined: the Hessians of the fits in this book reach condition numbers
around 1e9 at finite minimisers, while a fit running to infinity has a direction whose curvature
underflows."""


class FitResult(NamedTuple):
    """Result of a convex fit: the minimiser, its loss, gradient and Newton step, and convergence."""

    theta: jax.Array  # (p,)
    loss: jax.Array  # ()
    grad_norm: jax.Array  # () max-norm of the gradient at theta
    step_norm: jax.Array  # () max-norm of the Newton step H^-1 g at theta
    num_iter: jax.Array  # () Newton iterations taken
    converged: jax.Array  # () bool: a finite minimiser reached (see minimize_convex)


def minimize_convex(
    fun: Callable[[jax.Array], jax.Array],
    theta0: jax.Array,
    *,
    tol: float = 1e-8,
    step_tol: float = 1e-6,
    max_iter: int = 50,
    derivatives: Callable[[jax.Array], tuple[jax.Array, jax.Array]] | None = None,
) -> FitResult:
    """Minimise a smooth convex ``fun: (p,) -> ()`` by Newton's method with Armijo backtracking.

    Converged means a finite stationary point: ``theta`` finite, ``max|grad| <= tol``, the
    Hessian numerically non-singular (every pivot of its LU factorisation above :data:`MIN_RCOND`
    times the largest, or times 1 when all are smaller: the losses here are means of log-probabilities
    of spins, whose curvature at a finite minimiser is of order one or a few orders below) *and*
    ``max|H^-1 grad| <= step_tol``. The last two
    matter: when no minimiser exists (the infimum is approached as some ``theta_i -> inf``, e.g. a
    site that is constant in the data) the gradient decays exponentially, but the Newton step
    does not, and once the Hessian underflows it is singular and no Newton step exists at all. Once the Newton step is within ``step_tol``,
    the decrease it promises (about ``|grad . step| / 2``) can be smaller than the rounding error
    of ``fun`` itself, and Armijo's test would be decided by rounding; there the full step is
    taken if it shrinks ``max|grad|``. Stops when converged, when no step decreases ``fun``
    (or, that close, ``max|grad|``: a stall, not converged), or after ``max_iter`` iterations. Pure and
    traceable, so ``vmap`` fits many data sets at once. Newton rather than a first-order
    method because the problems are small (``p = n(n-1)/2 + n``), exactly convex
    [Appendix K], and the experiments need minimisers accurate to the stated tolerance.
    ``derivatives(theta) -> (gradient, Hessian)``, when given, replaces autodiff's (for a loss
    whose derivatives have a closed form, as :func:`pseudolikelihood_derivatives` gives them).
    """
    derivatives = derivatives or (lambda theta: (jax.grad(fun)(theta), jax.hessian(fun)(theta)))
    armijo = 1e-4

    def is_converged(theta, g, d, newton):
        return (newton & jnp.all(jnp.isfinite(theta)) & (jnp.max(jnp.abs(g)) <= tol)
                & (jnp.max(jnp.abs(d)) <= step_tol))

    def cond(state):
        it, _, _, _, _, _, done, first = state
        return first | (~done & (it < max_iter))

    def body(state):
        # The loss and the derivatives appear once each in the compiled loop: the first trip (``first``)
        # evaluates them at theta0 (a zero direction, so its one line-search step stays at theta0) and
        # counts no iteration; written out before the loop as well, they compiled twice (three times the loss).
        it, theta, f, g, d, newton, _, first = state
        slope = g @ d
        polish = jnp.max(jnp.abs(d)) <= step_tol  # full Newton step, judged by the gradient

        def ls_cond(s):  # t = 2 enters once to evaluate the full step, then Armijo's halving
            t, f_new = s
            return (t > 1.5) | (~polish & ~(f_new <= f + armijo * t * slope) & (t > 1e-12))

        def ls_body(s):
            t = s[0] / 2
            return t, fun(theta + t * d)

        t, f_new = jax.lax.while_loop(ls_cond, ls_body, (jnp.full_like(f, 2.0), jnp.full_like(f, jnp.inf)))
        new_theta = theta + t * d
        new_g, new_d, new_newton = _newton_direction(*derivatives(new_theta))
        accepted = first | jnp.where(polish, jnp.max(jnp.abs(new_g)) < jnp.max(jnp.abs(g)),
                                     f_new <= f + armijo * t * slope)
        keep = lambda new, old: jnp.where(accepted, new, old)  # noqa: E731
        theta, f, g, d = keep(new_theta, theta), keep(f_new, f), keep(new_g, g), keep(new_d, d)
        newton = keep(new_newton, newton)
        done = is_converged(theta, g, d, newton) | ~accepted | (first & ~jnp.isfinite(f))
        return it + jnp.where(first, 0, 1), theta, f, g, d, newton, done, jnp.zeros_like(first)

    theta0 = jnp.asarray(theta0, dtype=jnp.float64)
    zero, p = jnp.zeros((), theta0.dtype), theta0.shape[0]
    init = (jnp.asarray(0), theta0, zero, jnp.zeros(p, theta0.dtype), jnp.zeros(p, theta0.dtype), jnp.asarray(False),
            jnp.asarray(False), jnp.asarray(True))
    it, theta, f, g, d, newton, _, _ = jax.lax.while_loop(cond, body, init)
    return FitResult(
        theta=theta, loss=f, grad_norm=jnp.max(jnp.abs(g)), step_norm=jnp.max(jnp.abs(d)),
        num_iter=it, converged=is_converged(theta, g, d, newton) & jnp.isfinite(f),
    )


def _newton_direction(g: jax.Array, H: jax.Array):
    """The gradient, the Newton direction (steepest descent where the Newton one is not finite or does
    not descend) and whether the Hessian is numerically positive definite (:data:`MIN_RCOND`)."""
    lu, piv = jax.scipy.linalg.lu_factor(H)
    d = -jax.scipy.linalg.lu_solve((lu, piv), g)
    d = jnp.where(jnp.all(jnp.isfinite(d)) & (g @ d < 0), d, -g)
    pivots = jnp.abs(jnp.diagonal(lu))  # the curvature left in each direction of the elimination
    definite = jnp.all(jnp.isfinite(pivots)) & (pivots.min() > MIN_RCOND * jnp.maximum(1.0, pivots.max()))
    return g, d, definite


def pseudolikelihood_derivatives(x: jax.Array, masks: jax.Array, max_size: int, weights: jax.Array | None = None):
    """:func:`pseudolikelihood_loss` with its gradient and Hessian in ``theta`` in closed form, as a
    function ``theta (p,) -> (loss (), g (p,), H (p, p))`` [Definition 2; Appendix K].

    With ``T_c`` the statistics of completion ``c`` of sample ``i`` on its mask and ``s_i`` the
    conditional law of the completions, ``g = mean_i (E_{s_i} T_c - T(x_i))`` and
    ``H = mean_i Cov_{s_i}(T_c)``: the loss is a mean of log-partition functions of exponential
    families. Why: these are einsums over a (N, 2^max_size, p) table built once per data set, which
    compile in a fraction of the time autodiff's Hessian of the gathers takes, and run faster.
    x (N, n) spins, masks (N, n) bool with at most ``max_size`` (static) sites each; a padded slot
    repeats every completion ``2^(max_size - |S|)`` times, which the loss corrects as
    :func:`gmlm_lib.ising.model.log_conditional` does and the derivatives do not see. ``weights`` (N,),
    summing to one, replace the mean (0 for the padding rows of a data set held in a larger array)."""
    N, n = x.shape
    w = jnp.full(N, 1.0 / N) if weights is None else weights
    idx = ising.mask_to_indices(masks, max_size)  # (N, m), padded with n
    patterns = ising.enumerate_states(max_size).astype(jnp.float64)  # (P, m)
    P = patterns.shape[0]
    xf = jnp.pad(jnp.asarray(x, dtype=jnp.float64), ((0, 0), (0, 1)))  # site n: the padding slot's target
    completions = jnp.broadcast_to(xf[:, None, :], (N, P, n + 1))
    completions = completions.at[jnp.arange(N)[:, None, None], jnp.arange(P)[None, :, None], idx[:, None, :]].set(
        jnp.broadcast_to(patterns[None], (N, P, max_size)))
    Tc = ising.sufficient_statistics(completions[..., :n])  # (N, P, p)
    Tobs = ising.sufficient_statistics(x)
    repeats = (max_size - jnp.sum(masks, axis=-1)) * jnp.log(2.0)  # (N,)

    def value_and_derivatives(theta):
        logits = Tc @ theta
        lse = jax.nn.logsumexp(logits, axis=-1)
        s = jnp.exp(logits - lse[:, None])  # (N, P)
        mean = jnp.einsum("np,npa->na", s, Tc)
        g = w @ (mean - Tobs)
        H = jnp.einsum("n,np,npa,npb->ab", w, s, Tc, Tc) - (w[:, None] * mean).T @ mean
        return w @ (lse - Tobs @ theta - repeats), g, 0.5 * (H + H.T)

    return value_and_derivatives


def likelihood_derivatives(x: jax.Array, weights: jax.Array | None = None):
    """:func:`negative_log_likelihood` with its gradient and Hessian in closed form, as a function
    ``theta (p,) -> (loss (), g (p,), H (p, p))`` [Definition 1]: ``log Z(theta) - <theta, mean T>``,
    ``g = E_theta T - mean T``, ``H = Cov_theta(T)``, by enumeration of the ``2^n`` states. x (N, n);
    ``weights`` (N,) summing to one replace the mean, as in :func:`pseudolikelihood_derivatives`."""
    N, n = x.shape
    w = jnp.full(N, 1.0 / N) if weights is None else weights
    table = ising.sufficient_statistics(ising.states_from_index(jnp.arange(2**n), n))  # (2^n, p)
    data = w @ ising.sufficient_statistics(x)

    def value_and_derivatives(theta):
        logits = table @ theta
        lse = jax.nn.logsumexp(logits)
        prob = jnp.exp(logits - lse)
        mean = prob @ table
        H = table.T @ (prob[:, None] * table) - jnp.outer(mean, mean)
        return lse - data @ theta, mean - data, 0.5 * (H + H.T)

    return value_and_derivatives


def _fit_closed_form(terms, theta0, l2, tol, max_iter) -> FitResult:
    """Newton's method (:func:`minimize_convex`) on a loss given as ``terms(theta) -> (value, g, H)``."""

    def objective(theta):
        return terms(theta)[0] + 0.5 * l2 * jnp.sum(theta**2)

    def derivatives(theta):
        _, g, H = terms(theta)
        return g + l2 * theta, H + l2 * jnp.eye(theta.shape[0])

    return minimize_convex(objective, theta0, tol=tol, max_iter=max_iter, derivatives=derivatives)


def _check_samples(x: jax.Array) -> None:
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"x must hold at least one sample, shape (N, n) with N >= 1; got shape {tuple(x.shape)}. "
                         "An empty data set has no minimiser.")


def _check_fit_args(l2: float, tol: float, max_iter: int) -> None:
    require_x64("gmlm_lib.ising.mple (fitting)")
    for name, value in (("l2", l2), ("tol", tol)):
        if not isinstance(value, jax.core.Tracer):
            checks.real(value, name)  # a number: a string is named, not compared
    if not isinstance(max_iter, jax.core.Tracer):
        checks.integer(max_iter, "max_iter")
    if not l2 >= 0:
        raise ValueError(f"l2 must be >= 0; got {l2}.")
    if not tol > 0:
        raise ValueError(f"tol must be > 0; got {tol}.")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1; got {max_iter}.")


def _initial_theta(theta0, n: int) -> jax.Array:
    if theta0 is None:
        return jax.device_put(np.zeros(ising.num_params(n)))  # copied: jnp.zeros compiles a program a shape
    theta0 = float64(theta0)
    if theta0.shape != (ising.num_params(n),):
        raise ValueError(f"theta0 must have shape ({ising.num_params(n)},) for n = {n}; got {theta0.shape}.")
    return theta0


@partial(jax.jit, static_argnames=("max_size", "tol", "max_iter"))
def _fit_pl(x, masks, theta0, l2, *, max_size, tol, max_iter, weights=None):
    return _fit_closed_form(pseudolikelihood_derivatives(x, masks, max_size, weights), theta0, l2, tol, max_iter)


@partial(jax.jit, static_argnames=("tol", "max_iter"))
def _fit_ml(x, theta0, l2, *, tol, max_iter, weights=None):
    return _fit_closed_form(likelihood_derivatives(x, weights), theta0, l2, tol, max_iter)


def fit_pseudolikelihood(
    x: jax.Array,
    masks: jax.Array,
    *,
    max_size: int | None = None,
    l2: float = 0.0,
    tol: float = 1e-8,
    max_iter: int = 50,
    theta0: jax.Array | None = None,
) -> FitResult:
    """Weighted MPLE ``argmin_theta`` of :func:`pseudolikelihood_loss` (+ ``l2/2 |theta|^2``)
    on pairs ``(x^(i), S^(i))`` [Definitions 2-3]. x (N, n), masks (N, n) bool.

    Jitted; traceable (``vmap`` over data sets) when ``max_size`` is given. Check
    ``converged``: with few samples the MPLE may not exist (e.g. a site that is constant
    in the data); then pass ``l2 > 0``.
    """
    x = checks.array(x)
    _check_samples(x)
    n = x.shape[-1]
    x = ising.check_spins(x, n)
    _check_masks(masks)
    masks = masks.astype(bool) if isinstance(masks, jax.Array) else np.asarray(masks, dtype=bool)
    if masks.shape != x.shape:
        raise ValueError(f"masks must have the shape of x, {x.shape}; got {masks.shape}.")
    _check_fit_args(l2, tol, max_iter)
    max_size = ising.resolve_max_size(masks, max_size)
    return _fit_pl(x, masks, _initial_theta(theta0, n), l2, max_size=max_size, tol=float(tol), max_iter=int(max_iter))


def fit_likelihood(
    x: jax.Array,
    *,
    l2: float = 0.0,
    tol: float = 1e-8,
    max_iter: int = 50,
    theta0: jax.Array | None = None,
) -> FitResult:
    """MLE ``argmin_theta`` of :func:`negative_log_likelihood` (+ ``l2/2 |theta|^2``)
    [Definition 1], exact ``log Z`` by enumeration (n <= :data:`~gmlm_lib.ising.model.MAX_EXACT_N`).
    x (N, n). Jitted and traceable."""
    x = checks.array(x)
    _check_samples(x)
    n = x.shape[-1]
    ising.check_exact_n(n)
    x = ising.check_spins(x, n)
    _check_fit_args(l2, tol, max_iter)
    return _fit_ml(x, _initial_theta(theta0, n), l2, tol=float(tol), max_iter=int(max_iter))


def fit_repeats(key: jax.Array, model: IsingModel, num_samples: int, k: int, repeats: int, *,
                capacity: int | None = None, max_k: int | None = None, tol: float = 1e-8,
                max_iter: int = 50) -> FitResult:
    """k-MPLE [Definition 3; Figures 1-2] on ``repeats`` independent training sets, in one compiled program.

    Repeat ``r`` draws ``num_samples`` exact i.i.d. samples from ``model`` with a key that
    depends on ``key`` and ``r`` only, so every ``k`` sees the *same* samples; it then pairs
    each sample with one uniform ``k``-subset (Definition 2's i.i.d. pairs) and fits. For
    ``k = n`` the mask is all of ``[n]`` and the estimator is the MLE, fitted through the
    exact likelihood (the same minimiser; see the tests). Returns a :class:`FitResult`
    whose fields have a leading axis of length ``repeats``.

    ``capacity`` (at least ``num_samples``; default ``num_samples``): the samples the compiled program
    holds. The sample count is an operand, so a sweep over ``N`` that passes its largest ``N`` as
    ``capacity`` compiles one program per ``k``, not one per ``(N, k)``; the first ``num_samples``
    draws of a larger capacity are the draws of ``num_samples`` alone (JAX's counter-based random
    bits), and the rows past them get weight 0, so the fits are those of the smaller data sets.

    ``max_k`` (``k <= max_k < n``; default ``k``; only for ``k < n``): the largest mask the compiled program
    holds. The mask size is then an operand as well: a sweep over several ``k < n`` that passes the largest
    as ``max_k`` compiles one program for them all (each pseudolikelihood term then sums over ``2^max_k``
    completions, padded as in :func:`gmlm_lib.ising.model.log_conditional`: the same fits up to rounding, at
    the larger enumeration's cost). ``k = n`` is the MLE, a program of its own.
    """
    n = model.n
    k = masks_lib.check_k(k, n)
    mle = k == n
    if mle and max_k is not None:
        raise ValueError(f"max_k = {max_k!r} with k = n = {n}: k = n fits the MLE through the likelihood, with no "
                         "masks to bound; leave max_k out there (it serves a sweep over k < n).")
    max_k = k if max_k is None else checks.integer(
        max_k, "max_k", low=k, high=n - 1, fix="max_k bounds the masks of a sweep over k < n.")
    repeats = checks.integer(repeats, "repeats", low=1, fix="repeats counts the independent training sets fitted.")
    num_samples = checks.integer(num_samples, "num_samples", low=1, fix="A fit needs at least one sample.")
    capacity = num_samples if capacity is None else checks.integer(
        capacity, "capacity", low=num_samples, fix="capacity is the samples the program holds, at least num_samples.")
    _check_fit_args(0.0, tol, max_iter)
    # operands (weak int32, as jnp.asarray made them), copied: no program
    count, size = jax.device_put((num_samples, 0 if mle else k))
    return _fit_repeats(jax.random.split(key, repeats), model, count, size, capacity=capacity,
                        max_k=None if mle else max_k, tol=float(tol), max_iter=int(max_iter))


def repeat_samples(key: jax.Array, model: IsingModel, num_samples: int, repeats: int, r: int) -> jax.Array:
    """The training set of repeat ``r`` of :func:`fit_repeats` with the same ``key``, ``num_samples`` and
    ``repeats`` (every ``k`` fits it), drawn again outside the fits: (num_samples, n). For checking one
    repeat's fit against another estimator on the same data."""
    repeats = checks.integer(repeats, "repeats", low=1, fix="repeats counts the independent training sets fitted.")
    r = checks.integer(r, "r", low=0, high=repeats - 1, fix="r numbers a repeat of fit_repeats, from 0.")
    num_samples = checks.integer(num_samples, "num_samples", low=1, fix="A training set holds at least one sample.")
    return _repeat_samples(checks.key(key), model, jax.device_put(r), repeats=repeats, num_samples=num_samples)


@partial(jax.jit, static_argnames=("repeats", "num_samples"))
def _repeat_samples(key, model, r, *, repeats, num_samples):
    data_key, _ = _repeat_keys(jax.random.split(key, repeats)[r])
    return ising.sample(model, data_key, num_samples)


def _repeat_keys(rkey):
    """A repeat's data key and mask key (:func:`fit_repeats`; :func:`repeat_samples` draws the same data)."""
    return jax.random.split(rkey)


@partial(jax.jit, static_argnames=("capacity", "max_k", "tol", "max_iter"))
def _fit_repeats(keys, model, count, k, *, capacity, max_k, tol, max_iter):
    """:func:`fit_repeats`'s fits, one per key of ``keys`` (R,), on the first ``count`` of ``capacity``
    samples, with masks of ``k`` sites (an operand up to ``max_k``; ``max_k`` None: the MLE). One jitted
    function at module level, with the model, the sample count and the mask size operands, so that every
    model of the same size (with the same capacity, max_k, repeats and settings) reuses one compiled
    program."""
    n = model.n
    weights = (jnp.arange(capacity) < count) / count

    def one(rkey, model):
        data_key, mask_key = _repeat_keys(rkey)
        x = ising.sample(model, data_key, capacity)
        theta0 = jnp.zeros(ising.num_params(n), dtype=model.J.dtype)
        if max_k is None:
            return _fit_ml(x, theta0, 0.0, tol=tol, max_iter=max_iter, weights=weights)
        m = masks_lib.k_smallest(jax.random.fold_in(mask_key, k), capacity, n, k)
        return _fit_pl(x, m, theta0, 0.0, max_size=max_k, tol=tol, max_iter=max_iter, weights=weights)

    # one fit after another (lax.map), not vmap: a vmapped Newton loop runs every fit until the slowest
    # converges and compiles a larger program; the sequential one compiles in about half the time
    return jax.lax.map(lambda rkey: one(rkey, model), keys)
