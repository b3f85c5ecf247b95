"""Losses and fitting [Definitions 1-3, Appendix K]."""

import warnings

import brute
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gmlm_lib import ising
from gmlm_lib.ising import masks, mple


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    J, h = brute.random_model(rng, 5, 0.5)
    m = ising.ising_model(J, h)
    return m, J, h, ising.sample(m, jax.random.key(1), 400)


def _smooth_convex(t):
    """A smooth, strictly convex function of t (2,) with a finite minimiser: log-sum-exp of three
    linear forms plus a small ridge."""
    w = jnp.array([[1.0, 0.5], [-0.3, 1.2], [0.8, -0.7]])
    return jax.nn.logsumexp(w @ t) + 0.05 * t @ t


def test_k_equals_n_pseudolikelihood_is_likelihood(data):
    """[Definitions 1, 3]"""
    m, J, h, x = data
    full = jnp.ones_like(x, dtype=bool)
    pl = float(mple.pseudolikelihood_loss(m, x, full))
    nll = float(mple.negative_log_likelihood(m, x))
    want = -np.mean([np.log(brute.probs(J, h)[int(ising.index_from_states(xi))]) for xi in np.asarray(x)])
    assert abs(pl - nll) < 1e-12 and abs(nll - want) < 1e-10


def test_pseudolikelihood_loss_matches_brute_force(data):
    """[Definition 2]"""
    m, J, h, x = data
    mk = masks.uniform_k_subsets(jax.random.key(2), x.shape[0], 5, 2)
    got = float(mple.pseudolikelihood_loss(m, x, mk))
    xs, ms = np.asarray(x)[:60], np.asarray(mk)[:60]
    got60 = float(mple.pseudolikelihood_loss(m, xs, ms))
    want60 = -np.mean([brute.conditional(J, h, xi, np.nonzero(mi)[0]) for xi, mi in zip(xs, ms)])
    assert np.isfinite(got) and abs(got60 - want60) < 1e-10


def test_loss_is_convex_in_theta(data):
    """Appendix K: the Hessian in theta is positive semidefinite (checked at random points)."""
    m, _, _, x = data
    mk = masks.uniform_k_subsets(jax.random.key(3), x.shape[0], 5, 2)
    f = lambda t: mple.pseudolikelihood_loss(ising.from_theta(t, 5), x, mk, 2)  # noqa: E731
    for s in range(3):
        t = jax.random.normal(jax.random.key(s), (ising.num_params(5),))
        assert float(jnp.linalg.eigvalsh(jax.hessian(f)(t)).min()) > -1e-12


@pytest.mark.parametrize("k", [1, 2, 3])
def test_fit_reaches_stationary_point(data, k):
    m, _, _, x = data
    mk = masks.uniform_k_subsets(jax.random.key(k), x.shape[0], 5, k)
    fit = mple.fit_pseudolikelihood(x, mk, tol=1e-10)
    assert bool(fit.converged)
    g = jax.grad(lambda t: mple.pseudolikelihood_loss(ising.from_theta(t, 5), x, mk, k))(fit.theta)
    assert float(jnp.max(jnp.abs(g))) <= 1e-10
    # a minimiser: no nearby point is better
    for s in range(5):
        d = 1e-3 * jax.random.normal(jax.random.key(10 + s), fit.theta.shape)
        assert float(mple.pseudolikelihood_loss(ising.from_theta(fit.theta + d, 5), x, mk)) >= float(fit.loss) - 1e-14


def test_full_mask_pseudolikelihood_fit_equals_mle(data):
    _, _, _, x = data
    via_pl = mple.fit_pseudolikelihood(x, jnp.ones_like(x, dtype=bool), tol=1e-10)
    via_ml = mple.fit_likelihood(x, tol=1e-10)
    assert bool(via_pl.converged) and bool(via_ml.converged)
    np.testing.assert_allclose(np.asarray(via_pl.theta), np.asarray(via_ml.theta), atol=1e-8)


def test_mle_matches_moments(data):
    """At the MLE the model's moments equal the empirical means of T(x) (exponential family). [Definition 1]"""
    _, _, _, x = data
    fit = mple.fit_likelihood(x, tol=1e-11)
    fitted = ising.from_theta(fit.theta, 5)
    emp = np.asarray(ising.sufficient_statistics(x).mean(0))
    np.testing.assert_allclose(np.asarray(ising.moments(fitted)), emp, atol=1e-10)


def test_l2_regularised_fit_exists_when_mple_does_not():
    """A site that is +1 in every sample has no finite MPLE; l2 > 0 restores one."""
    x = np.array([[1, 1, -1], [1, -1, 1], [1, 1, 1], [1, -1, -1]] * 5)
    mk = np.ones_like(x, dtype=bool)
    assert not bool(mple.fit_pseudolikelihood(x, mk, max_iter=30).converged)
    pl = mple.fit_pseudolikelihood(x, mk, l2=0.1, tol=1e-11)
    assert bool(pl.converged)
    # the penalty is l2/2 |theta|^2: at the penalised MPLE the loss's gradient is -l2 theta
    grad = jax.grad(lambda t: mple.pseudolikelihood_loss(ising.from_theta(t, 3), jnp.asarray(x), jnp.asarray(mk)))
    np.testing.assert_allclose(grad(pl.theta), -0.1 * np.asarray(pl.theta), rtol=0, atol=1e-10)
    # the penalised MLE is stationary: E_theta[T] - mean T(x) + l2 theta = 0, moments by brute force
    fit = mple.fit_likelihood(x, l2=0.1, tol=1e-11)
    J, h = np.asarray(ising.from_theta(fit.theta, 3).J), np.asarray(ising.from_theta(fit.theta, 3).h)
    T = np.array([brute.stats(s) for s in brute.states(3)])
    emp = np.array([brute.stats(s) for s in x]).mean(0)
    assert bool(fit.converged)
    np.testing.assert_allclose(brute.probs(J, h) @ T - emp + 0.1 * np.asarray(fit.theta), 0.0, atol=1e-10)


def test_fit_repeats_shares_samples_across_k_and_is_deterministic():
    """[Definition 3; Figures 1-2]"""
    m = ising.random_model(jax.random.key(0), 4, 0.4, 0.3)
    a = mple.fit_repeats(jax.random.key(5), m, 300, 2, 4)
    b = mple.fit_repeats(jax.random.key(5), m, 300, 2, 4)
    np.testing.assert_array_equal(np.asarray(a.theta), np.asarray(b.theta))
    assert a.theta.shape == (4, ising.num_params(4)) and bool(a.converged.all())
    # k = n in fit_repeats is the MLE of the same samples that k < n used
    full = mple.fit_repeats(jax.random.key(5), m, 300, 4, 4)
    data_key = jax.random.split(jax.random.split(jax.random.key(5), 4)[2])[0]
    mle = mple.fit_likelihood(ising.sample(m, data_key, 300))
    np.testing.assert_allclose(np.asarray(full.theta[2]), np.asarray(mle.theta), atol=1e-8)
    # and k < n is the k-MPLE of those samples with the masks its docstring describes
    data_key, mask_key = jax.random.split(jax.random.split(jax.random.key(5), 4)[2])
    mk = masks.uniform_k_subsets(jax.random.fold_in(mask_key, 2), 300, 4, 2)
    pl = mple.fit_pseudolikelihood(ising.sample(m, data_key, 300), mk)
    np.testing.assert_allclose(np.asarray(a.theta[2]), np.asarray(pl.theta), atol=1e-8)
    one = mple.fit_repeats(jax.random.key(5), m, 1, 2, 2)  # one sample a repeat: runs, no minimiser
    assert one.theta.shape == (2, ising.num_params(4)) and not bool(one.converged.any())


def test_a_sample_count_within_the_capacity_fits_the_same_data_and_shares_the_program():
    """[Definition 3; Figures 1-2] fit_repeats(N, capacity=C) holds C samples and weighs the first N: the
    draws are those of N alone (counter-based random bits), so the fits equal the unpadded ones, k < n
    and k = n; and a second N within the same capacity compiles nothing."""
    from gmlm_lib.core import timing

    m = ising.random_model(jax.random.key(0), 4, 0.4, 0.3)
    for k in (2, 4):
        alone = mple.fit_repeats(jax.random.key(5), m, 120, k, 3)
        held = mple.fit_repeats(jax.random.key(5), m, 120, k, 3, capacity=400)
        np.testing.assert_allclose(np.asarray(held.theta), np.asarray(alone.theta), atol=1e-9)
        assert np.array_equal(np.asarray(held.converged), np.asarray(alone.converged))
    start = timing.compile_clock()
    mple.fit_repeats(jax.random.key(6), m, 300, 2, 3, capacity=400).theta.block_until_ready()
    assert timing.compiles_since(start)["compilations"] == 0
    with pytest.raises(ValueError, match="capacity must be an integer >= 300; got 200.*at least num_samples"):
        mple.fit_repeats(jax.random.key(6), m, 300, 2, 3, capacity=200)


def test_fit_repeats_compiles_once_for_models_of_one_size():
    """The chapters call fit_repeats for one model after another (every sample size, k and truth): a
    second model of the same size runs the program the first one compiled (nothing is compiled or read
    from the persistent cache), and fits that model, not the one the program was compiled for; a new k
    is a new program."""
    from gmlm_lib.core import timing

    first, second = (ising.random_model(jax.random.key(s), 4, 0.4, 0.3) for s in (11, 12))
    a = mple.fit_repeats(jax.random.key(1), first, 50, 2, 3)
    a.theta.block_until_ready()
    start = timing.compile_clock()
    b = mple.fit_repeats(jax.random.key(1), second, 50, 2, 3)
    b.theta.block_until_ready()
    assert timing.compiles_since(start)["compilations"] == 0
    assert not np.allclose(np.asarray(a.theta), np.asarray(b.theta))  # the same samples' keys, another truth
    mple.fit_repeats(jax.random.key(1), second, 50, 3, 3).theta.block_until_ready()
    assert timing.compiles_since(start)["compilations"] > 0  # the count sees a compilation when there is one


def test_a_sweep_over_k_below_n_shares_one_program_through_max_k():
    """[Definition 3; Figures 1-2] With max_k, the mask size is an operand: k = 1 and k = 2 run one program,
    and each fit is the one compiled for its own k (the padded completions change nothing but rounding); the
    MLE (k = n) takes no max_k, and a max_k outside [k, n - 1] is refused by name."""
    from gmlm_lib.core import timing

    m = ising.random_model(jax.random.key(0), 4, 0.4, 0.3)
    own = {k: mple.fit_repeats(jax.random.key(5), m, 200, k, 3) for k in (1, 2)}
    mple.fit_repeats(jax.random.key(5), m, 200, 2, 3, max_k=3).theta.block_until_ready()
    start = timing.compile_clock()
    for k in (1, 2):
        shared = mple.fit_repeats(jax.random.key(5), m, 200, k, 3, max_k=3)
        np.testing.assert_allclose(np.asarray(shared.theta), np.asarray(own[k].theta), atol=1e-9)
        assert np.array_equal(np.asarray(shared.converged), np.asarray(own[k].converged))
    assert timing.compiles_since(start)["compilations"] == 0
    assert not np.allclose(np.asarray(own[1].theta), np.asarray(own[2].theta))  # k reaches the program
    for k, max_k in ((2, 1), (2, 4)):
        with pytest.raises(ValueError, match=rf"max_k must be an integer in \[2, 3\]; got {max_k}"):
            mple.fit_repeats(jax.random.key(5), m, 200, k, 3, max_k=max_k)
    with pytest.raises(ValueError, match="max_k = 4 with k = n = 4: k = n fits the MLE"):
        mple.fit_repeats(jax.random.key(5), m, 200, 4, 3, max_k=4)


def test_repeat_samples_is_the_training_set_every_k_of_that_repeat_fits():
    """repeat_samples(key, model, N, R, r) draws again the samples of fit_repeats' repeat r: exactly those of
    its keys, and the MLE on them is fit_repeats' k = n fit of that repeat."""
    m = ising.random_model(jax.random.key(0), 4, 0.4, 0.3)
    data_key = jax.random.split(jax.random.split(jax.random.key(5), 4)[2])[0]
    x = mple.repeat_samples(jax.random.key(5), m, 300, 4, 2)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(ising.sample(m, data_key, 300)))
    full = mple.fit_repeats(jax.random.key(5), m, 300, 4, 4)
    np.testing.assert_allclose(np.asarray(mple.fit_likelihood(x).theta), np.asarray(full.theta[2]), atol=1e-8)
    for r in (-1, 4):
        with pytest.raises(ValueError, match="r must be an integer in"):
            mple.repeat_samples(jax.random.key(5), m, 300, 4, r)


def test_newton_counts_its_iterations_and_stops_at_max_iter(data):
    """num_iter is the number of Newton iterations taken; max_iter = 1 allows exactly one."""
    _, _, _, x = data
    full = mple.fit_likelihood(x, tol=1e-10)
    assert bool(full.converged) and int(full.num_iter) > 2
    for cap in (1, 2):
        fit = mple.fit_likelihood(x, tol=1e-10, max_iter=cap)
        assert int(fit.num_iter) == cap and not bool(fit.converged)
    # it stops at its first converged iterate: one iteration fewer has not converged
    assert not bool(mple.fit_likelihood(x, tol=1e-10, max_iter=int(full.num_iter) - 1).converged)


def test_a_start_that_is_converged_or_has_no_finite_loss_takes_no_iteration():
    """A fit started at a converged point returns it with num_iter = 0; one started where the loss is
    not finite (exp(1000) overflows) returns the start, not converged, also with num_iter = 0."""
    best = mple.minimize_convex(_smooth_convex, jnp.array([1.0, -1.0]))
    assert bool(best.converged) and int(best.num_iter) > 0
    again = mple.minimize_convex(_smooth_convex, best.theta)
    assert bool(again.converged) and int(again.num_iter) == 0
    np.testing.assert_array_equal(again.theta, best.theta)
    start = jnp.array([1e3, 1.0])
    overflow = mple.minimize_convex(lambda t: jnp.exp(t[0]) + t[1] ** 2, start)
    assert not bool(overflow.converged) and int(overflow.num_iter) == 0
    np.testing.assert_array_equal(overflow.theta, start)


def test_vmap_over_datasets_matches_single_fits(data):
    m = data[0]
    keys = jax.random.split(jax.random.key(9), 3)
    xs = jnp.stack([ising.sample(m, k, 200) for k in keys])
    ms = jnp.stack([masks.uniform_k_subsets(k, 200, 5, 2) for k in keys])
    batched = jax.vmap(lambda x, mk: mple.fit_pseudolikelihood(x, mk, max_size=2))(xs, ms)
    for i in range(3):
        single = mple.fit_pseudolikelihood(xs[i], ms[i])
        np.testing.assert_allclose(np.asarray(batched.theta[i]), np.asarray(single.theta), atol=1e-9)


def test_mple_is_consistent():
    """With many samples every k-MPLE is close to the truth (realizable, identifiable). [Lemma 1]"""
    m = ising.random_model(jax.random.key(3), 4, 0.5, 0.3)
    fits = [mple.fit_repeats(jax.random.key(4), m, 40_000, k, 1) for k in (1, 2, 4)]
    for fit in fits:
        assert float(jnp.max(jnp.abs(fit.theta[0] - ising.to_theta(m)))) < 0.05


def test_newton_converges_where_the_loss_cannot_resolve_the_last_decrease():
    """Near the minimiser the decrease a Newton step promises falls below the loss's rounding
    error, so Armijo's test is decided by rounding (seen with the exact likelihood at tol = 1e-10
    on an AMD EPYC CPU: the full step's loss came out 2e-15 higher). Stand-in for that rounding:
    the loss's value is raised by 1e-6 x the distance moved from the start (at most ~1e-13
    here), its derivatives are exact. The fit must still reach the tolerance."""
    best = mple.minimize_convex(_smooth_convex, jnp.array([1.0, -1.0]), tol=1e-13)
    assert bool(best.converged)
    start = best.theta + jnp.array([1e-7, -1e-7])

    @jax.custom_jvp
    def perturbed(t):
        return _smooth_convex(t) + 1e-6 * jnp.abs(t - start).sum()

    @perturbed.defjvp
    def _(primals, tangents):
        return perturbed(primals[0]), jax.jvp(_smooth_convex, primals, tangents)[1]

    fit = mple.minimize_convex(perturbed, start, tol=1e-10)
    assert bool(fit.converged) and float(fit.grad_norm) <= 1e-10, fit
    assert float(jnp.max(jnp.abs(fit.theta - best.theta))) <= 1e-9


@pytest.mark.parametrize("make", [
    lambda: mple.fit_likelihood(np.ones((20, 3))),  # every site constant: theta runs to infinity
    lambda: mple.fit_pseudolikelihood(np.ones((20, 3)), np.eye(3, dtype=bool)[np.arange(20) % 3]),  # k = 1, constant
    lambda: mple.fit_likelihood(np.tile([[1, 1, -1], [-1, -1, 1]], (10, 1))),  # x_0 = x_1 always: J_01 -> inf
])
def test_no_finite_minimiser_is_never_converged(make):
    """converged means a finite stationary point: a fit whose parameters run off to infinity (the
    gradient underflows, the Hessian with it) reports converged = False."""
    fit = make()
    assert not bool(fit.converged), (float(jnp.max(jnp.abs(fit.theta))), float(fit.grad_norm))


def test_a_hessian_singular_next_to_its_largest_curvature_is_never_converged():
    """Converged needs a numerically non-singular Hessian, judged against its own scale: every pivot of
    its LU factorisation above MIN_RCOND times the largest pivot, or times 1 where all are below 1.
    Quadratics with their minimiser at 0, which one exact Newton step reaches: the smallest curvature
    10x above that threshold is converged, at it or 10x below it is not, for a large scale (1e6) and a small one."""
    for scale in (1e6, 1e-3):
        threshold = mple.MIN_RCOND * max(1.0, scale)
        for small, converged in ((10 * threshold, True), (threshold, False), (threshold / 10, False)):
            fit = mple.minimize_convex(lambda t, s=small: 0.5 * (scale * t[0] ** 2 + s * t[1] ** 2), jnp.ones(2))
            assert bool(fit.converged) == converged, (scale, small, fit)
            assert float(jnp.max(jnp.abs(fit.theta))) <= 1e-12, fit  # the minimiser is reached either way


def test_on_a_quadratic_one_full_newton_step_reaches_the_minimiser_and_its_loss():
    """Newton's step is exact on a quadratic 0.5 t'At - b't: from any start the full step (Armijo's test
    judged at the point it moves to) lands on A^-1 b in one iteration, and the loss returned is the loss
    there, -0.5 b'A^-1 b."""
    a = jnp.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    b = jnp.array([1.0, -2.0, 0.5])
    best = jnp.linalg.solve(a, b)
    for start in (jnp.zeros(3), jnp.array([5.0, -3.0, 10.0])):
        fit = mple.minimize_convex(lambda t: 0.5 * t @ a @ t - b @ t, start)
        assert bool(fit.converged) and int(fit.num_iter) == 1, fit
        np.testing.assert_allclose(fit.theta, best, rtol=0, atol=1e-12)
        np.testing.assert_allclose(fit.loss, -0.5 * b @ best, rtol=1e-12)


def test_converged_is_judged_with_tol_and_step_tol_included():
    """``max|grad| <= tol`` and ``max|H^-1 grad| <= step_tol``, each bound included: a start exactly on
    either bound (powers of two, so the gradient and the Newton step are exact) is converged with no
    iteration; with the bound halved the same start takes a step first."""
    for curvature, tol, step_tol in ((1.0, 2.0**-20, 2.0**-10), (4.0, 2.0**-10, 2.0**-20)):
        def fun(t, c=curvature):
            return 0.5 * c * jnp.sum(t**2)

        start = jnp.array([2.0**-20, 0.0])  # gradient c * 2^-20, Newton step 2^-20
        on_bounds = mple.minimize_convex(fun, start, tol=tol, step_tol=step_tol)
        assert bool(on_bounds.converged) and int(on_bounds.num_iter) == 0, on_bounds
        assert max(float(on_bounds.grad_norm) - tol, float(on_bounds.step_norm) - step_tol) == 0.0, on_bounds
        inside = mple.minimize_convex(fun, start, tol=tol / 2, step_tol=step_tol / 2)
        assert bool(inside.converged) and int(inside.num_iter) >= 1, inside


def test_where_the_newton_direction_is_not_finite_the_fit_steps_along_the_gradient():
    """Far out on a softplus its curvature underflows to exactly 0 while its slope is 1 (a site
    constant in the data drives a pseudolikelihood there), so the Newton direction is -inf in that
    coordinate, and its slope g . d is -inf. The fit must fall back to steepest descent there, not
    try the infinite step (every backtracked step is infinite too, so the fit would stop where it
    started): it solves the other coordinate, drives the loss to its infimum 0, stops once no step
    helps and, with no minimiser, reports not converged."""
    def fun(t):
        return jax.nn.softplus(t[0]) + (t[1] - 1.0) ** 2

    start = jnp.array([40.0, 3.0])
    assert float(jax.hessian(fun)(start)[0, 0]) == 0.0  # the premise: the curvature has underflowed
    fit = mple.minimize_convex(fun, start)
    assert float(fit.theta[0]) < 0.0 and abs(float(fit.theta[1]) - 1.0) <= 1e-9, fit
    assert float(fit.loss) <= 1e-12 and not bool(fit.converged), fit
    assert int(fit.num_iter) < 50  # it stops where no step lowers the loss or the gradient, before max_iter


def test_empty_data_is_an_error():
    with pytest.raises(ValueError, match="at least one sample"):
        mple.fit_likelihood(np.ones((0, 3)))
    with pytest.raises(ValueError, match="at least one sample"):
        mple.fit_pseudolikelihood(np.ones((0, 3)), np.ones((0, 3), bool))


def test_a_mask_of_no_site_is_refused_not_fitted():
    """A pair whose mask is empty predicts nothing (log 1 = 0): all-empty masks would fit any theta at a loss
    of 0, and one empty row would dilute the mean; both are refused, naming the row."""
    model = ising.random_model(jax.random.key(0), 3, 0.5, 0.2)
    x = np.asarray(ising.sample(model, jax.random.key(1), 6))
    some = np.ones((6, 3), bool)
    some[4] = False
    for m, row in ((np.zeros((6, 3), bool), 0), (some, 4)):
        with pytest.raises(ValueError, match=f"masks row {row} masks no site"):
            mple.fit_pseudolikelihood(x, m)
        with pytest.raises(ValueError, match=f"masks row {row} masks no site"):
            mple.pseudolikelihood_loss(model, x, m)


def test_fit_settings_and_masks_of_the_wrong_kind_are_named():
    x = np.asarray(ising.sample(ising.random_model(jax.random.key(0), 3, 0.5, 0.2), jax.random.key(1), 6))
    with pytest.raises(TypeError, match="l2 must be a number; got '0.1'"):
        mple.fit_pseudolikelihood(x, np.ones((6, 3), bool), l2="0.1")
    with pytest.raises(ValueError, match="masks must be boolean"):
        mple.fit_pseudolikelihood(x, np.full((6, 3), 0.5))
    fit = mple.fit_pseudolikelihood(x, np.ones((6, 3), np.int8), l2=0.1)  # 0/1 integers are masks
    assert bool(fit.converged)


def test_couplings_past_float64_are_refused_without_a_numpy_warning():
    J = np.array([[0, 1e308, 0], [1e308, 0, 0], [0, 0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="can reach inf \\(past float64\\)"):
            ising.ising_model(J, np.zeros(3))


def test_closed_form_pseudolikelihood_derivatives_equal_autodiff_on_masks_of_every_size():
    """The fits use the loss's gradient and Hessian in closed form (a mean of exponential-family
    log-partitions over the completions); autodiff of :func:`pseudolikelihood_loss` is the reference,
    on masks of mixed sizes with padded slots and at a point away from the minimiser."""
    n = 5
    model = ising.random_model(jax.random.key(0), n, 0.6, 0.4)
    x = ising.sample(model, jax.random.key(1), 64)
    m = jax.random.bernoulli(jax.random.key(2), 0.4, (64, n)).at[:, 1].set(True)
    theta = 0.3 * jax.random.normal(jax.random.key(3), (ising.num_params(n),))
    for max_size in (int(m.sum(1).max()), n):
        loss = lambda t, s=max_size: mple.pseudolikelihood_loss(ising.from_theta(t, n), x, m, s)  # noqa: E731
        value, g, H = mple.pseudolikelihood_derivatives(x, m, max_size)(theta)
        assert abs(float(value - loss(theta))) < 1e-12
        np.testing.assert_allclose(g, jax.grad(loss)(theta), atol=1e-12)
        np.testing.assert_allclose(H, jax.hessian(loss)(theta), atol=1e-12)


def test_a_loss_of_no_sample_is_refused_not_nan():
    """Nothing silent: the mean loss of an empty sample would be NaN; both losses refuse it by name."""
    m = ising.random_model(jax.random.key(0), 3, 0.4, 0.3)
    empty = jnp.zeros((0, 3), jnp.int8)
    with pytest.raises(ValueError, match="x holds no sample"):
        mple.negative_log_likelihood(m, empty)
    with pytest.raises(ValueError, match="x holds no sample"):
        mple.pseudolikelihood_loss(m, empty, jnp.zeros((0, 3), bool), max_size=1)
