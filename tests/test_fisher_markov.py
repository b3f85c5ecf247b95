"""Fisher information, H_w, Sigma_w, Gamma_w, block dynamics and Poincaré constants against the
brute-force definitions in brute.py (n <= 5, to 1e-10), and the theorems as properties."""

import itertools
import math

import brute
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmlm_lib import ising
from gmlm_lib.ising import blocks, fisher, markov, masks, tensorization

TOL = 1e-10


def _model(seed, n, scale=0.8):
    J, h = brute.random_model(np.random.default_rng(seed), n, scale)
    return ising.ising_model(J, h), J, h


def _adaptive_dist(n, temp=0.7):
    """Masks of size 2; those whose sites agree in x are more likely (a rule that depends on x)."""
    subs = np.asarray(masks.all_k_subsets(n, 2))

    def rule(states):
        x = np.asarray(states, float)
        agree = np.stack([x[:, s].prod(1) for s in subs], 1)  # +1 when the two sites agree
        return jax.nn.softmax(temp * agree, axis=-1)

    return masks.adaptive(subs, rule)


def _sparse_adaptive_dist(n):
    """One site masked, site i only when site i + 1 (cyclically) is +1 (uniform over those; all
    sites when none is): w(S|x) = 0 on whole blocks, which then carry no mass. The masks are 0/1
    integers, as a caller may give them."""

    def rule(states):
        up = (np.roll(np.asarray(states), -1, axis=1) > 0).astype(float)
        up[up.sum(1) == 0] = 1.0
        return up / up.sum(1, keepdims=True)

    return masks.adaptive(np.eye(n, dtype=int), rule)


def _dists(n):
    fixed = [masks.uniform_k(n, k) for k in range(1, n + 1)]
    subs = [np.array(s) for s in itertools.product([False, True], repeat=n) if any(s)]
    w = np.random.default_rng(n).random(len(subs))
    mixed = masks.from_weights(np.array(subs), w / w.sum())
    return fixed + [mixed, _adaptive_dist(n), _sparse_adaptive_dist(n)]


def _W(dist, n):
    w = np.asarray(dist.weights)
    return w if dist.is_adaptive else np.tile(w, (2**n, 1))


@pytest.mark.parametrize("n", [3, 4])
def test_hessian_score_and_all_masks_against_definitions(n):
    """[Lemma 1]"""
    m, J, h = _model(n, n)
    for dist in _dists(n):
        subs, W = np.asarray(dist.subsets), _W(dist, n)
        H = brute.hessian(J, h, subs, W)
        np.testing.assert_allclose(np.asarray(fisher.hessian(m, dist)), H, atol=TOL)
        np.testing.assert_allclose(np.asarray(fisher.score_covariance(m, dist)), H, atol=TOL)
        np.testing.assert_allclose(
            np.asarray(fisher.all_masks_score_covariance(m, dist)), brute.score_cov_all_masks(J, h, subs, W), atol=TOL
        )


def test_fisher_information_is_full_mask_hessian():
    m, J, h = _model(1, 5)
    X = brute.states(5)
    T = np.array([brute.stats(x) for x in X])
    p = brute.probs(J, h)
    mu = p @ T
    I = T.T @ (p[:, None] * T) - np.outer(mu, mu)
    np.testing.assert_allclose(np.asarray(fisher.fisher_information(m)), I, atol=TOL)
    np.testing.assert_allclose(np.asarray(fisher.hessian(m, masks.uniform_k(5, 5))), I, atol=TOL)


def test_information_matrix_equality_by_autodiff():
    """Lemma (App. A): the autodiff Hessian of the exact loss equals the autodiff score
    covariance, and the mean score vanishes (realizable), for fixed and adaptive w."""
    m, _, _ = _model(3, 4, 1.5)
    for dist in _dists(4):
        H = fisher.loss_hessian_autodiff(m, dist)
        S = fisher.score_covariance_autodiff(m, dist)
        assert float(jnp.max(jnp.abs(H - S.mean))) < TOL
        assert float(jnp.max(jnp.abs(S.se))) < TOL
        np.testing.assert_allclose(np.asarray(H), np.asarray(fisher.hessian(m, dist)), atol=TOL)


def _tol(B):
    """A generalized eigenvalue is only resolved to about eps * cond(B) in float64: the tolerance is
    1e-8 or that floor (x1000), whichever is larger (peaky models reach cond(H) ~ 5e8)."""
    return max(1e-8, 1e3 * np.finfo(float).eps * float(np.linalg.cond(np.asarray(B))))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(0.1, 2.5), n=st.integers(2, 4))
def test_theorem2_loewner_order(seed, scale, n):
    """Theorem 2 in scale-invariant form: H_{k+1} >= H_k (the proof step, no inversion);
    Gamma_{k+1} <= Gamma_k, i.e. the pencil (H_k, H_{k+1}) -- the same generalized eigenvalues as
    (Gamma_{k+1}, Gamma_k) -- has eigenvalues <= 1; and Gamma_n = I^-1. [Theorem 2]"""
    m, _, _ = _model(seed, n, scale)
    I = fisher.fisher_information(m)
    H = [fisher.hessian(m, masks.uniform_k(n, k)) for k in range(1, n + 1)]
    for a, b in zip(H, H[1:]):
        # H = E[T T^T] (entries <= 1 for spins) minus a term of the same size: its absolute
        # rounding is ~eps, whatever the size of H, so the scale is max(1, |H|)
        assert float(jnp.linalg.eigvalsh(b - a).min()) >= -1e-12 * max(1.0, float(jnp.abs(b).max()))
        assert fisher.generalized_eigvals(a, b).max() <= 1 + _tol(b)
    np.testing.assert_allclose(np.asarray(H[-1]), np.asarray(I), atol=1e-12)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(0.1, 2.5), n=st.integers(2, 4))
def test_theorem1_poincare_bound(seed, scale, n):
    """Theorem 1 for every fixed mask law w (uniform k-subsets for each k, and a random mixture of
    all subsets): Gamma_MPLE(w) <= C_P(w) Gamma_MLE, with C_P(w) the Poincare constant of w's block
    dynamics, in scale-invariant form max v'Iv / v'H_w v <= C_P(w) (Gamma = H^-1 by the information
    matrix equality); at k = n the chain resamples everything, C_P = 1 and the bound is an equality.
    Adaptive laws are Theorem 3's test. [Theorem 1; Definitions 5-6]"""
    m, _, _ = _model(seed, n, scale)
    I = fisher.fisher_information(m)
    fixed = [d for d in _dists(n) if not d.is_adaptive]  # uniform_k for k = 1..n, then the mixture
    assert len(fixed) == n + 1
    cps = []
    for dist in fixed:
        H = fisher.hessian(m, dist)
        cps.append(markov.poincare_constant(m, dist, "dense"))
        assert fisher.generalized_eigvals(I, H).max() <= cps[-1] * (1 + _tol(H))
    assert cps[n - 1] == pytest.approx(1.0, abs=1e-9)  # k = n


def test_all_masks_regime_is_no_worse():
    m, _, _ = _model(5, 5)
    for k in range(1, 5):
        d = masks.uniform_k(5, k)
        one, every = fisher.asymptotic_covariance(m, d), fisher.asymptotic_covariance(m, d, "all-masks")
        assert float(jnp.linalg.eigvalsh(one - every).min()) >= -1e-10


def test_asymptotic_covariances_are_their_definitions():
    """Gamma = H_w^-1 for one mask per sample and H_w^-1 Sigma'_w H_w^-1 for all masks, against
    numpy's inverses of the brute-force H_w and Sigma'_w; the sandwich of two non-commuting
    symmetric matrices is H^-1 Sigma H^-1, symmetric. [Lemma 1]"""
    m, J, h = _model(6, 4)
    d = masks.uniform_k(4, 2)
    subs, W = np.asarray(d.subsets), _W(d, 4)
    Hinv = np.linalg.inv(brute.hessian(J, h, subs, W))
    np.testing.assert_allclose(np.asarray(fisher.asymptotic_covariance(m, d)), Hinv, rtol=1e-9, atol=1e-9)
    want = Hinv @ brute.score_cov_all_masks(J, h, subs, W) @ Hinv
    np.testing.assert_allclose(np.asarray(fisher.asymptotic_covariance(m, d, "all-masks")), want, rtol=1e-9, atol=1e-9)
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(2, 4, 4))
    H, S = A @ A.T + np.eye(4), B @ B.T
    np.testing.assert_allclose(np.asarray(fisher.sandwich(jnp.asarray(H), jnp.asarray(S))),
                               np.linalg.inv(H) @ S @ np.linalg.inv(H), rtol=1e-10)


@pytest.mark.parametrize("n, k", [(4, 1), (4, 2), (3, 3)])
def test_slowest_mode_is_an_eigenfunction_of_the_second_eigenvalue(n, k):
    """slowest_mode returns lambda_2 of the brute-force transition matrix and an eigenfunction
    with E_p f = 0 and Var_p f = 1; second_eigenvalue agrees by both methods. At k = n one step
    samples exactly: lambda_2 = 0, every centred function is a mode and C_P = 1. [Definitions 5-6]"""
    m, J, h = _model(20 + n + k, n)
    d = masks.uniform_k(n, k)
    P = brute.transition(J, h, np.asarray(d.subsets), _W(d, n))
    p = brute.probs(J, h)
    want = brute.second_eigenvalue(J, h, P)
    lam, f = markov.slowest_mode(m, d)
    f = np.asarray(f)
    assert lam == pytest.approx(want, abs=1e-10)
    np.testing.assert_allclose(P @ f, lam * f, atol=1e-8)
    assert abs(p @ f) < 1e-10 and p @ f**2 == pytest.approx(1.0, abs=1e-10)
    for method in ("dense", "lanczos"):
        assert markov.second_eigenvalue(m, d, method) == pytest.approx(want, abs=1e-10)
    if k == n:
        assert lam == 0.0 and markov.poincare_constant(m, d, "lanczos") == pytest.approx(1.0, abs=1e-12)


def test_span_fraction_is_the_share_of_variance_in_the_span_of_t():
    """f = c + <v, T> + r with r orthogonal in L^2(p) to constants and to T: the share is
    Var_p(<v, T>) / (Var_p(<v, T>) + E_p r^2), 1 for r = 0 and 0 for v = 0."""
    m, J, h = _model(7, 4)
    p = brute.probs(J, h)
    T = np.array([brute.stats(x) for x in brute.states(4)])
    X = np.concatenate([np.ones((16, 1)), T], axis=1)
    rng = np.random.default_rng(1)
    g = rng.normal(size=16)
    r = g - X @ np.linalg.solve(X.T @ (p[:, None] * X), X.T @ (p * g))  # the L^2(p) projection removed
    lin = T @ rng.normal(size=T.shape[1])
    var_lin = p @ lin**2 - (p @ lin) ** 2
    assert markov.span_fraction(m, jnp.asarray(3.0 + lin)) == pytest.approx(1.0, abs=1e-10)
    assert markov.span_fraction(m, jnp.asarray(r)) == pytest.approx(0.0, abs=1e-10)
    assert markov.span_fraction(m, jnp.asarray(lin + r)) == pytest.approx(var_lin / (var_lin + p @ r**2), abs=1e-10)


@pytest.mark.parametrize("n", [3, 4])
def test_transition_matrix_against_definition(n):
    """[Definition 6]"""
    m, J, h = _model(10 + n, n)
    for dist in _dists(n):
        P = np.asarray(markov.transition_matrix(m, dist))
        np.testing.assert_allclose(P, brute.transition(J, h, np.asarray(dist.subsets), _W(dist, n)), atol=TOL)
        stat, balance = markov.reversibility_error(m, jnp.asarray(P))
        assert stat < TOL and balance < TOL


def test_dirichlet_form_two_ways_and_definition():
    """[Definition 4]"""
    m, J, h = _model(2, 4)
    p = brute.probs(J, h)
    f = np.random.default_rng(0).normal(size=16)
    for dist in _dists(4):
        P = brute.transition(J, h, np.asarray(dist.subsets), _W(dist, 4))
        want = 0.5 * np.sum(p[:, None] * P * (f[:, None] - f[None, :]) ** 2)
        assert abs(float(markov.dirichlet_form(m, dist, f)) - want) < TOL
        assert abs(float(markov.dirichlet_form_variance(m, dist, f)) - want) < TOL


def test_poincare_constant_dense_lanczos_and_definition():
    """[Definition 5]"""
    m, J, h = _model(4, 5, 1.0)
    p = brute.probs(J, h)
    for dist in [masks.uniform_k(5, 1), masks.uniform_k(5, 2), _adaptive_dist(5)]:
        P = brute.transition(J, h, np.asarray(dist.subsets), _W(dist, 5))
        want = 1 / (1 - brute.second_eigenvalue(J, h, P))
        dense = markov.poincare_constant(m, dist, "dense")
        lanczos = markov.poincare_constant(m, dist, "lanczos")
        assert abs(dense - want) <= 1e-9 * want and abs(lanczos - dense) <= 1e-8 * dense
        # the Poincaré inequality holds for random f, with equality approached by the slow mode
        for s in range(5):
            f = np.random.default_rng(s).normal(size=32)
            var = p @ f**2 - (p @ f) ** 2
            assert var <= dense * float(markov.dirichlet_form(m, dist, f)) + 1e-12


def test_reducible_chain_has_infinite_poincare_constant():
    m, _, _ = _model(0, 3)
    only_first = masks.from_weights(np.array([[True, False, False]]), [1.0])
    assert markov.poincare_constant(m, only_first, "dense") == np.inf


def test_monte_carlo_hessian_within_three_standard_errors():
    """The mask-sampled estimate of H_k against the exact one, through scalar summaries (trace
    and a fixed quadratic form) with their own standard errors; fixed seeds."""
    m = ising.random_model(jax.random.key(0), 8, 0.5, 0.3)
    exact = fisher.hessian(m, masks.uniform_k(8, 3))
    draws = np.asarray(masks.uniform_k_subsets(jax.random.key(1), 400, 8, 3))
    est = fisher.hessian_monte_carlo(m, draws)
    per = fisher.hessian_per_mask(m, draws)
    np.testing.assert_allclose(np.asarray(per.mean(0)), np.asarray(est.mean), atol=1e-14)
    np.testing.assert_allclose(np.asarray(est.se), np.asarray(per.std(0, ddof=1)) / np.sqrt(400), atol=1e-14)
    v = jax.random.normal(jax.random.key(2), (exact.shape[0],))
    for f in (jnp.trace, lambda A: v @ A @ v):
        vals = np.asarray(jax.vmap(f)(per))
        se = vals.std(ddof=1) / np.sqrt(len(vals))
        assert abs(float(f(est.mean)) - float(f(exact))) <= 3 * se


def test_the_hessian_of_each_mask_is_the_point_mass_hessian():
    """hessian_per_mask row m is H_w for w = delta_{S_m}, down to a single mask."""
    m, _, _ = _model(9, 4)
    rows = np.array([[1, 0, 0, 1], [0, 1, 1, 1]], dtype=bool)
    for M in (1, 2):
        got = fisher.hessian_per_mask(m, rows[:M])
        for S, H in zip(rows, got):
            np.testing.assert_allclose(np.asarray(H), np.asarray(fisher.hessian(m, masks.from_weights([S], [1.0]))),
                                       atol=TOL)


def test_masks_given_as_zeros_and_ones_are_the_boolean_masks():
    """Subsets as 0/1 integers (or floats) are read as the boolean masks they spell; any other value is
    refused (test_hostile_ising)."""
    want = masks.from_weights(np.array([[True, False, True], [False, True, True]]), [0.25, 0.75])
    for subsets in ([[1, 0, 1], [0, 1, 1]], np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])):
        got = masks.from_weights(subsets, [0.25, 0.75])
        assert got.subsets.dtype == bool
        np.testing.assert_array_equal(got.subsets, want.subsets)
        np.testing.assert_array_equal(got.weights, want.weights)


def test_bad_mask_distributions():
    with pytest.raises(ValueError, match="mask distribution is empty"):
        masks.from_weights(np.zeros((0, 3), bool), [])
    with pytest.raises(ValueError, match="must sum to one.*divide by their sum"):
        masks.from_weights(np.eye(3, dtype=bool), [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="non-negative"):
        masks.from_weights(np.eye(2, dtype=bool), [1.5, -0.5])
    with pytest.raises(ValueError, match="one per subset"):
        masks.from_weights(np.eye(3, dtype=bool), [1.0])
    with pytest.raises(ValueError, match="each row of rule\\(states\\) must sum to one"):
        masks.adaptive(np.eye(3, dtype=bool), lambda s: np.full((8, 3), 0.5))
    with pytest.raises(ValueError, match="rule must return shape"):
        masks.adaptive(np.eye(3, dtype=bool), lambda s: np.full((8, 2), 0.5))


def test_over_the_exact_limit():
    blocks.check_exact_blocks(12, 12)  # at the limit: allowed
    with pytest.raises(ValueError, match="M >= 2"):
        fisher.hessian_monte_carlo(ising.IsingModel(J=jnp.zeros((4, 4)), h=jnp.zeros(4)), np.ones((1, 4), bool))
    two = fisher.hessian_monte_carlo(ising.IsingModel(J=jnp.zeros((4, 4)), h=jnp.zeros(4)), np.eye(4, dtype=bool)[:2])
    assert two.mean.shape == two.se.shape == (10, 10)  # M = 2, the fewest with a standard error


@pytest.mark.parametrize("call, n, limit", [
    (fisher.hessian, 13, fisher.MAX_EXACT_N),
    (markov.transition_matrix, 13, markov.MAX_DENSE_N),
    (fisher.score_covariance, 13, fisher.MAX_EXACT_N),
    (fisher.all_masks_score_covariance, 13, fisher.MAX_EXACT_N),
    (fisher.loss_hessian_autodiff, 9, fisher.MAX_AUTODIFF_N),
    (fisher.score_covariance_autodiff, 9, fisher.MAX_AUTODIFF_N),
    (lambda m, d: markov.second_eigenvalue(m, d, method="dense"), 13, markov.MAX_DENSE_N),
    (tensorization.upper_bound, 11, tensorization.MAX_N),
])
def test_each_exact_quantity_refuses_a_model_over_its_own_limit(call, n, limit):
    """Each sum over all states and masks has its limit, checked before anything is enumerated; the
    error names the way out (the Monte Carlo estimator)."""
    assert n == limit + 1
    big = ising.IsingModel(J=jnp.zeros((n, n)), h=jnp.zeros(n))
    with pytest.raises(ValueError, match=f"n = {n} is over the limit n <= {limit} .*Monte Carlo"):
        call(big, masks.uniform_k(n, 1))


@pytest.mark.parametrize("call", [
    lambda m, d: blocks.mask_table(d, m.n), blocks.conditional_given_mask,
    blocks.averaged_conditional_expectation, fisher.hessian, fisher.score_covariance,
    fisher.all_masks_score_covariance, fisher.loss_hessian_autodiff, fisher.score_covariance_autodiff,
    lambda m, d: markov.dirichlet_form_variance(m, d, np.ones(2 ** m.n)),
])
def test_each_exact_quantity_refuses_a_mask_law_over_another_n(call):
    m, _, _ = _model(0, 4)
    with pytest.raises(ValueError, match="the mask distribution is over n = 3 sites but the model has n = 4"):
        call(m, masks.uniform_k(3, 1))


def test_conditional_given_mask_is_bayes_on_the_joint():
    """Lemma 3: p(x_S | x_-S, S) from blocks equals Bayes' rule on pi(x, S) = p(x) w(S|x); for a
    fixed w it is the plain conditional of gmlm_lib.ising (Lemma 2's contrast). [Lemmas 2-3; Definition 7]"""
    m, J, h = _model(8, 4)
    X = brute.states(4)
    p = brute.probs(J, h)
    for dist in _dists(4):
        W, subs = _W(dist, 4), np.asarray(dist.subsets)
        got = np.asarray(blocks.conditional_given_mask(m, dist))
        for mi, S in enumerate(subs):
            for b, x in enumerate(X):
                same = np.all(X[:, ~S] == x[~S], axis=1)
                den = (p * W[:, mi])[same].sum()
                want = p[b] * W[b, mi] / den if den > 0 else 0.0
                assert abs(got[mi, b] - want) < TOL
        if not dist.is_adaptive:
            for mi, S in enumerate(subs[:3]):
                lc = np.asarray(ising.log_conditional(m, X, np.tile(S, (16, 1))))
                np.testing.assert_allclose(got[mi], np.exp(lc), atol=TOL)


def test_adaptive_masks_asymptotic_variance_bounded_by_poincare():
    """Theorem 3: for an adaptive rule (masks that depend on x), Gamma <= C_P Gamma_MLE, i.e. the largest
    generalized eigenvalue of (I, H_w) is at most C_P of the adaptive block dynamics; H_w equals the
    score covariance there (the information-matrix equality of Definition 7's loss) [Theorem 3; Definition 8]."""
    for seed in range(3):
        m, _, _ = _model(seed, 4, 1.2)
        dist = _adaptive_dist(4)
        I = fisher.fisher_information(m)
        H = fisher.loss_hessian_autodiff(m, dist)
        np.testing.assert_allclose(np.asarray(H), np.asarray(fisher.score_covariance_autodiff(m, dist).mean), atol=1e-10)
        cp = markov.poincare_constant(m, dist, "dense")
        ratio = fisher.generalized_eigvals(I, H).max()
        assert 1.0 <= ratio <= cp * (1 + 1e-9), (ratio, cp)


def test_exact_quantities_compile_once_per_shape_not_per_model_or_mask_law():
    """Compile once [the compile issue, item 1]: the models and the mask laws are operands of the exact
    kernels, so a second model with the same n and a mask law with as many masks (k and n - k have
    C(n, k) masks each, of different block sizes) run the programs the first call compiled."""
    from gmlm_lib.core import timing

    n = 6
    first, _, _ = _model(1, n)
    second, _, _ = _model(2, n, scale=1.3)

    def everything(m, dist):
        H = fisher.hessian(m, dist)
        fisher.score_covariance(m, dist)
        fisher.all_masks_score_covariance(m, dist)
        fisher.fisher_information(m)
        cp = markov.poincare_constant(m, dist, "lanczos")
        markov.poincare_constant(m, dist, "dense")
        markov.dirichlet_form(m, dist, jnp.arange(2.0**n))
        blocks.conditional_given_mask(m, dist)
        return H, cp

    everything(first, masks.uniform_k(n, 2))
    clock = timing.compile_clock()
    H, cp = everything(second, masks.uniform_k(n, n - 2))
    assert timing.compiles_since(clock)["compilations"] == 0
    dist = masks.uniform_k(n, n - 2)  # and the shared program computed the second model's own H_w
    W = np.tile(np.asarray(dist.weights)[None, :], (2**n, 1))
    assert np.allclose(H, brute.hessian(np.asarray(second.J), np.asarray(second.h), np.asarray(dist.subsets), W), atol=1e-10)
    assert 1.0 < cp < np.inf


def test_a_fixed_law_as_adaptive_rows_is_the_same_law_and_shares_the_adaptive_programs():
    """[Definitions 7-8] as_adaptive writes a fixed w(S) as equal rows w(S | x): every exact quantity is the fixed
    law's to rounding, and after an adaptive law over the same subsets has compiled its kernels, the fixed law
    in this form compiles nothing (in its own (M,) form it compiles them again). Too large a table is refused."""
    from gmlm_lib.core import timing

    n = 5
    m, _, _ = _model(4, n)
    fixed = masks.uniform_k(n, 2)
    rows = masks.as_adaptive(fixed)
    assert rows.is_adaptive and rows.weights.shape == (2**n, fixed.subsets.shape[0])
    assert masks.as_adaptive(rows) is rows

    def kernels(dist):
        return (fisher.hessian(m, dist), fisher.loss_hessian_autodiff(m, dist), markov.poincare_constant(m, dist),
                markov.poincare_constant(m, dist, "dense"), blocks.conditional_given_mask(m, dist))

    kernels(_adaptive_dist(n))  # an adaptive law over the same 2-subsets
    clock = timing.compile_clock()
    as_rows = kernels(rows)
    assert timing.compiles_since(clock)["compilations"] == 0
    for a, b in zip(as_rows, kernels(fixed)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
    assert timing.compiles_since(clock)["compilations"] > 0  # the (M,) form: programs of their own
    with pytest.raises(ValueError, match=r"as_adaptive: a table of 2\^20 x 184756 = 193,730,707,456 weights"):
        masks.as_adaptive(masks.MaskDistribution.unchecked(np.zeros((184_756, 20), bool), np.ones(184_756) / 184_756))


def test_mask_laws_of_different_mask_counts_share_a_padded_table_and_its_programs():
    """Compile once across a sweep over k: at n = 6 every uniform law's mask table is padded to the widest
    one's rows (C(6, 3) = 20 masks on 64 rows), so after uniform_k(6, 2) (15 masks) the laws of k = 1, 3 and
    6 (6, 20 and 1 masks) compile nothing; the padding rows are skipped, so every quantity equals the one
    over an unpadded table (and the definition). conditional_given_mask, one row a mask, keeps its own
    shape."""
    from gmlm_lib.core import timing

    n = 6
    m, J, h = _model(3, n)

    def sums(dist):
        fisher.hessian(m, dist)
        fisher.score_covariance(m, dist)
        fisher.all_masks_score_covariance(m, dist)
        markov.poincare_constant(m, dist, "lanczos")
        markov.poincare_constant(m, dist, "dense")
        markov.dirichlet_form_variance(m, dist, jnp.arange(2.0**n))

    sums(masks.uniform_k(n, 2))
    clock = timing.compile_clock()
    for k in (1, 3, n):
        sums(masks.uniform_k(n, k))
    assert timing.compiles_since(clock)["compilations"] == 0
    for k in (1, 2, 3, n):
        dist = masks.uniform_k(n, k)
        padded, plain = blocks.mask_table(dist, n), blocks.mask_table(dist, n, padded=False)
        count = len(dist.subsets)
        assert padded.ids.shape[0] == blocks.table_rows(count, n) and plain.ids.shape[0] == count
        T, p = ising.state_statistics(n), ising.probabilities(m)
        np.testing.assert_allclose(fisher._hessian(T, p, padded), fisher._hessian(T, p, plain), rtol=0, atol=1e-13)
        W = np.tile(np.asarray(dist.weights)[None, :], (2**n, 1))
        np.testing.assert_allclose(fisher.hessian(m, dist), brute.hessian(J, h, np.asarray(dist.subsets), W), atol=TOL)
        assert blocks.conditional_given_mask(m, dist).shape == (len(dist.subsets), 2**n)


def test_table_rows_pads_to_powers_of_four_within_the_memory_cap():
    assert [blocks.table_rows(k, 10) for k in (1, 2, 4, 5, 16, 17, 252)] == [1, 4, 4, 16, 16, 64, 256]
    assert {blocks.table_rows(m, 12) for m in (495, 792, 924)} == {1024}
    assert blocks.table_rows(12, 12) == 16  # past SHARED_ENTRIES a narrow law keeps its own rows
    # up to n = 8 every law of at most C(n, n // 2) masks takes the widest law's rows: one shape a size
    assert {blocks.table_rows(math.comb(6, k), 6) for k in range(7)} == {64}
    assert {blocks.table_rows(math.comb(8, k), 8) for k in range(9)} == {256} and blocks.table_rows(2**8, 8) == 256
    assert blocks.table_rows(1, 1) == 1 and blocks.table_rows(2, 2) == 4
    over = blocks.PADDED_ENTRIES // 2**16 + 1  # 257 masks at n = 16 would pad to 1024 rows of 65,536 entries
    assert blocks.table_rows(over, 16) == over and blocks.table_rows(120, 16) == 256


@pytest.mark.parametrize("J, h, named", [
    (np.full((3, 3), np.nan), np.zeros(3), "J"),
    (np.zeros((3, 3)), np.array([0.0, np.inf, 0.0]), "h"),
    (np.array([[0.0, 1e308, 0.0], [1e308, 0.0, 0.0], [0.0, 0.0, 0.0]]), np.zeros(3), "too large"),
])
def test_a_law_that_is_not_finite_is_refused_not_returned(J, h, named):
    """Nothing silent: a model whose law is NaN or inf is refused by the constructor where its entries are
    not finite, and one that reaches the exact numerics without the constructor's checks (as a fit's
    parameters do, through from_theta) gets an error naming the cause, not an array of NaN."""
    if named != "too large":
        with pytest.raises(ValueError, match=f"IsingModel: {named} must be finite"):
            ising.IsingModel(J=jnp.asarray(J), h=jnp.asarray(h))
    bad = ising.IsingModel.unchecked(jnp.asarray(J), jnp.asarray(h))
    for call in (ising.probabilities, ising.log_partition, ising.log_weights):
        with pytest.raises(ValueError, match=named):
            call(bad)


def test_a_singular_hessian_and_a_nan_step_size_are_refused_not_returned():
    """Nothing silent: the sandwich of a Hessian float64 cannot invert would be rounding noise, and a NaN
    learning rate would make the tensorization ascent return -inf; both are refused with the cause."""
    H = np.diag([1.0, 1e-17])
    with pytest.raises(ValueError, match="numerically singular"):
        fisher.sandwich(H, np.eye(2))
    m, _, _ = _model(0, 4)
    for bad in (float("nan"), 0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="learning_rate must be a finite number > 0"):
            tensorization.lower_bound(jax.random.key(0), m, masks.uniform_k(4, 1), learning_rate=bad)
