"""Hostile but fair inputs to the Ising side (numerics, masks, fitters, samplers), in float64 as a
theory program runs them: each gets a clear exception whose message names the offending argument and,
where there is one, the fix; none is silently accepted."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gmlm_lib import ising
from gmlm_lib.core import divergences
from gmlm_lib.ising import fisher, markov, masks, mple, product, samplers, tensorization, transformer
from gmlm_lib.ising import model as ising_m

KEY = jax.random.key(0)


def _model(n=3):
    return ising.ising_model(np.zeros((n, n)), np.zeros(n))


# --- Ising numerics ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, words", [
    (lambda: ising.ising_model("J", np.zeros(2)), (ValueError, TypeError), ["J"]),
    (lambda: ising.ising_model(np.zeros((0, 0)), np.zeros(0)), ValueError, ["at least one site"]),
    (lambda: ising.random_model(KEY, 0, 1.0, 1.0), ValueError, ["n must be an integer >= 1"]),
    (lambda: ising.random_model(KEY, 3.5, 1.0, 1.0), TypeError, ["n must be an integer", "never rounded"]),
    (lambda: ising.random_model(KEY, 3, -1.0, 1.0), ValueError, ["coupling_scale", ">= 0"]),
    (lambda: ising.random_model(KEY, 3, float("nan"), 1.0), ValueError, ["coupling_scale"]),  # named, not "J and h"
    (lambda: ising.random_model(KEY, 3, 1.0, float("inf")), ValueError, ["field_scale"]),
    (lambda: ising.random_model(KEY, 3, "0.5", 1.0), TypeError, ["coupling_scale must be a number"]),
    (lambda: ising.sample(_model(), KEY, -1), ValueError, ["num_samples must be an integer >= 0"]),
    (lambda: ising.log_prob(_model(), np.array([[1, 0, 1]])), ValueError, ["-1", "+1"]),
    (lambda: ising.log_prob(_model(), np.array([[1, 1]])), ValueError, ["3"]),
    (lambda: ising.clique_plus_independent(4, 5, 1.0, 0.0), ValueError, ["c"]),
    (lambda: ising.clique_plus_independent(4, 0, 1.0, 0.0), ValueError, ["at least one site", "c = 0"]),
    (lambda: ising.clique_plus_independent(4.0, 2, 1.0, 0.0), TypeError, ["n must be an integer", "got 4.0"]),
    (lambda: ising.enumerate_states(21), ValueError, ["n = 21", "n <= 20"]),
])
def test_ising_boundaries(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert all(w in str(info.value) for w in words), str(info.value)


# --- masks and fitters --------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, words", [
    (lambda: masks.uniform_k(3, 0), ValueError, ["k"]),
    (lambda: masks.uniform_k(3, 4), ValueError, ["k"]),
    (lambda: masks.from_weights([[True, False, False]], [-1.0]), ValueError, ["weights"]),
    (lambda: masks.from_weights([[True, False, False], [False, True, False]], [0.5]), ValueError, ["weights"]),
    (lambda: mple.fit_likelihood(np.ones((0, 3))), ValueError, ["at least one sample"]),
    (lambda: mple.fit_likelihood(np.array([[1, 0, 1]])), ValueError, ["-1", "+1"]),
    (lambda: mple.fit_likelihood(np.ones((3, 2)), l2=-1.0), ValueError, ["l2"]),
    (lambda: mple.fit_likelihood(np.ones((3, 2)), tol=0.0), ValueError, ["tol"]),
    (lambda: mple.fit_pseudolikelihood(np.ones((3, 2)), np.ones((3, 3), bool)), ValueError, ["masks", "shape"]),
    (lambda: mple.fit_repeats(KEY, _model(), 0, 1, 2), ValueError, ["num_samples"]),
    (lambda: mple.fit_repeats(KEY, _model(), 10, 1, 0), ValueError, ["repeats"]),
])
def test_mask_and_fit_boundaries(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert all(w in str(info.value) for w in words), str(info.value)


# --- samplers -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, words", [
    (lambda: samplers.k_gibbs(_model(), 0), ValueError, ["k"]),
    (lambda: samplers.k_gibbs(_model(), 4), ValueError, ["k"]),
    (lambda: samplers.run_chains(KEY, samplers.k_gibbs(_model(), 1), jnp.ones((2, 4), jnp.int8), 3), ValueError,
     ["x0"]),
    (lambda: samplers.run_chains(KEY, samplers.k_gibbs(_model(), 1), jnp.zeros((2, 3), jnp.int8), 3), ValueError,
     ["x0", "-1", "+1"]),
    (lambda: samplers.run_chains(KEY, samplers.k_gibbs(_model(), 1), jnp.ones((2, 3), jnp.int8), -1), ValueError,
     ["num_steps"]),
    (lambda: samplers.run_chains(KEY, samplers.k_gibbs(_model(), 1), jnp.ones((2, 3), jnp.int8), 3, thin=0),
     ValueError, ["thin"]),
])
def test_sampler_boundaries(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert all(w in str(info.value) for w in words), str(info.value)


# --- Fisher, Markov operators, tensorization -------------------------------------------------------------

def _dist():
    return masks.uniform_k(3, 2)


@pytest.mark.parametrize("call, error, words", [
    (lambda: fisher.fisher_information(np.eye(3)), TypeError, ["model", "IsingModel"]),
    (lambda: fisher.hessian(_model(), masks.uniform_k(4, 2)), ValueError, ["n = 4", "n = 3"]),
    (lambda: fisher.sandwich(jnp.eye(3), jnp.eye(4)), ValueError, ["Sigma", "(3, 3)"]),
    (lambda: fisher.sandwich(jnp.ones((3, 2)), jnp.eye(3)), ValueError, ["H", "square"]),
    (lambda: fisher.sandwich(jnp.full((3, 3), jnp.nan), jnp.eye(3)), ValueError, ["H", "non-finite"]),
    (lambda: fisher.hessian_per_mask(_model(), jnp.full((2, 3), 0.5)), ValueError, ["masks", "boolean"]),
    (lambda: fisher.hessian_per_mask(_model(), np.ones((2, 4), bool)), ValueError, ["masks", "(M, 3)", "(2, 4)"]),
    (lambda: fisher.hessian_per_mask(_model(), np.ones((0, 3), bool)), ValueError, ["masks", "M >= 1", "(0, 3)"]),
    (lambda: fisher.asymptotic_covariance(_model(), _dist(), "every"), ValueError, ["regime", "'every'"]),
    (lambda: markov.second_eigenvalue(_model(), _dist(), "qr"), ValueError, ["method", "'qr'"]),
    (lambda: markov.poincare_constant(_model(), _dist(), "qr"), ValueError, ["method", "'qr'"]),
    (lambda: fisher.generalized_eigvals(jnp.eye(3), jnp.eye(4)), ValueError, ["B", "(3, 3)"]),
    (lambda: markov.dirichlet_form(_model(), _dist(), jnp.ones(5)), ValueError, ["f", "(8,)"]),
    (lambda: markov.dirichlet_form_variance(_model(), _dist(), jnp.full(8, jnp.inf)), ValueError, ["f", "non-finite"]),
    (lambda: markov.span_fraction(_model(), jnp.ones(7)), ValueError, ["f", "(8,)"]),
    (lambda: markov.dirichlet_form(_model(), _dist(), jnp.ones(8, jnp.complex64)), TypeError, ["f", "real"]),
    (lambda: tensorization.ratio(_model(), _dist(), jnp.ones(5) / 5), ValueError, ["q", "(8,)"]),
    (lambda: tensorization.ratio(_model(), _dist(), -jnp.ones(8)), ValueError, ["q", "probability"]),
    (lambda: tensorization.ratio(_model(), _dist(), jnp.ones(8)), ValueError, ["q", "summing to 1"]),
    (lambda: tensorization.upper_bound("model", _dist()), TypeError, ["model", "IsingModel"]),
    (lambda: tensorization.ratio(_model(), _dist(), ising.probabilities(_model())), ValueError, ["D_w(q || p) = 0"]),
    (lambda: tensorization.lower_bound(KEY, _model(), _dist(), restarts=0), ValueError, ["restarts", "restarts=0"]),
    (lambda: tensorization.lower_bound(KEY, _model(), _dist(), steps=-1), ValueError, ["steps >= 0", "steps=-1"]),
])
def test_fisher_markov_tensorization_boundaries(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert all(w in str(info.value) for w in words), str(info.value)


# -- values refused on the Ising side --------------------------------------------------------------
@pytest.mark.parametrize("call, error, words", [
    (lambda m: ising.sample(m, KEY, 2.9), TypeError, "num_samples must be an integer; got 2.9"),
    (lambda m: ising.sample(m, KEY, "3"), TypeError, "num_samples must be an integer"),
    (lambda m: ising.sample(m, KEY, True), TypeError, "num_samples must be an integer"),
    (lambda m: ising.sample(m, 0, 3), TypeError, "key must be a jax.random key"),
    (lambda m: ising.log_conditional(m, np.array([1, -1]), np.array([0.5, 0.0])), ValueError,
     "mask must be a boolean mask"),
    (lambda m: ising.log_conditional(m, np.array([1, -1]), np.array([True, False, True])), ValueError,
     "mask must have shape (2,) or (1, 2)"),
    (lambda m: ising.marginal(m, [0.5]), TypeError, "subset must hold site indices (integers)"),
    (lambda m: masks.uniform_k_subsets(KEY, 2.5, 3, 1), TypeError, "num must be an integer; got 2.5"),
    (lambda m: samplers.run_chains(KEY, samplers.k_gibbs(m, 1), np.ones((2, 2), np.int8), 2.5), TypeError,
     "num_steps must be an integer; got 2.5"),
    (lambda m: samplers.run_chains(KEY, samplers.k_gibbs(m, 1), np.ones((2, 2), np.int8), 4, chunk=0), ValueError,
     "chunk must be an integer >= 1"),
])
def test_ising_counts_masks_and_keys_are_checked(call, error, words):
    m = _pair2()
    with jax.enable_x64(True):
        with pytest.raises(error) as err:
            call(m)
    assert words in str(err.value)


@pytest.mark.parametrize("q, p, words", [
    ([0.5, 0.6], [0.5, 0.5], "q must be a law: each row (last axis) summing to 1; a row sums to 1.1"),
    ([2.0, 0.0], [0.5, 0.5], "q must be a law"),
    ([0.5, 0.5], [0.2, 0.3, 0.5], "q and p must be laws on the same states"),
    (0.5, [0.5, 0.5], "got a scalar"),
    # the same states, but batches of laws whose leading axes do not broadcast
    ([[0.5, 0.5]] * 2, [[0.5, 0.5]] * 3, "leading axes broadcastable; got shapes (2, 2) and (3, 2)"),
])
def test_divergences_refuse_what_is_not_a_pair_of_laws(q, p, words):
    with jax.enable_x64(True):
        for f in (divergences.kl, divergences.tv):
            with pytest.raises(ValueError) as err:
                f(np.array(q), np.array(p))
            assert words in str(err.value)


def test_divergences_of_laws_still_work_in_float32_and_broadcast():
    q = np.full((3, 4), 0.25, np.float32)
    p = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    assert divergences.kl(q, p).shape == (3,) and float(divergences.tv(q, q).max()) == 0.0


def _pair2():
    with jax.enable_x64(True):
        return ising.ising_model(np.array([[0.0, 0.5], [0.5, 0.0]]), np.array([0.1, -0.2]))


def _adaptive_pair():
    """An adaptive mask law on two sites (each site masked with probability 1/2 whatever the state)."""
    return masks.adaptive(masks.all_k_subsets(2, 1), lambda states: np.full((states.shape[0], 2), 0.5))


@pytest.mark.parametrize("call,words", [
    (lambda: divergences.kl(np.array([0.5, np.nan]), np.array([0.5, 0.5])), ["q must hold probabilities", "1 NaN"]),
    (lambda: divergences.kl(np.array([0.5, 0.5]), np.array([np.nan, 0.5])), ["p must hold probabilities"]),
    (lambda: divergences.tv(np.array([1.5, -0.5]), np.array([0.5, 0.5])), ["q must", "1 negative"]),
    (lambda: product.product_law(np.array([1.5, 0.2])), ["marginals", "[0, 1]", "1.5"]),
    (lambda: product.product_law(np.array([np.nan, 0.2])), ["marginals", "NaN"]),
    (lambda: samplers.stationary_law(np.array([[0.5, 0.7], [0.2, 0.2]])), ["stochastic", "row sums"]),
    (lambda: samplers.stationary_law(np.ones((2, 3)) / 3), ["square"]),
    (lambda: samplers.stationary_law(np.full(4, 0.25)), ["square"]),
    (lambda: samplers.stationary_law(np.array([[1.5, -0.5], [0.0, 1.0]])), ["stochastic", "smallest entry is -0.5"]),
    (lambda: samplers.stationary_law(np.array([[np.nan, 1.0], [0.5, 0.5]])), ["stochastic", "finite"]),
    (lambda: ising.enumerate_states(-1), ["n must be an integer >= 0"]),
    (lambda: ising.enumerate_states(2.5), ["n must be an integer", "never rounded"]),
    (lambda: ising.ising_model(1e200 * (1 - np.eye(3)), np.zeros(3)), ["too large", "Scale J and h down"]),
    (lambda: masks.all_k_subsets(26, 13), ["C(26, 13) = 10,400,600 subsets is too many to list", "uniform_k_subsets"]),
    (lambda: masks.from_weights(np.ones(3, bool), np.ones(1)), ["subsets must be a (M, n) boolean array", "(3,)"]),
    (lambda: masks.from_weights(np.array([[2, 0]]), np.ones(1)), ["subsets must be boolean masks (or 0/1)"]),
    (lambda: masks.check_distribution(masks.MaskDistribution(np.ones((1, 2), bool), np.ones((3, 1))), 2),
     ["adaptive weights must have 2^n = 4 rows; got 3"]),
    (lambda: ising.marginal(ising.curie_weiss(3, 0.5, 0.1), []), ["subset must name at least one site"]),
    (lambda: ising.marginal(ising.curie_weiss(3, 0.5, 0.1), [0, 3]), ["subset entries must lie in [0, 2]", "[0, 3]"]),
    (lambda: ising.marginal(ising.curie_weiss(3, 0.5, 0.1), [-1]), ["subset entries must lie in [0, 2]", "[-1]"]),
    (lambda: ising.marginal(ising.curie_weiss(3, 0.5, 0.1), [1, 1]), ["subset must not repeat a site", "[1, 1]"]),
    (lambda: mple.fit_repeats(jax.random.key(0), ising.curie_weiss(3, 0.5, 0.1), 10, 1, 1, max_iter=0),
     ["max_iter must be >= 1; got 0"]),
    (lambda: product.site_marginals(np.full(3, 1 / 3)), ["rows must be laws over 2^n states", "has 3 entries"]),
    (lambda: product.min_tv_pair(np.full(3, 1 / 3)), ["joint must be a law over the 4 states of a pair", "(3,)"]),
    (lambda: tensorization.upper_bound(ising.curie_weiss(2, 0.5, 0.1), _adaptive_pair()),
     ["Definition 9 is stated here for a fixed mask distribution w; got an adaptive one"]),
    (lambda: tensorization.lower_bound(jax.random.key(0), ising.curie_weiss(2, 0.5, 0.1), _adaptive_pair()),
     ["Definition 9 is stated here for a fixed mask distribution w; got an adaptive one"]),
    (lambda: tensorization.excess_loss(ising.curie_weiss(2, 0.5, 0.1), ising.curie_weiss(2, 0.4, 0.1),
                                       _adaptive_pair()),
     ["Definition 9 is stated here for a fixed mask distribution w; got an adaptive one"]),
    (lambda: tensorization.ratio(ising.curie_weiss(2, 0.5, 0.1), _adaptive_pair(), np.full(4, 0.25)),
     ["Definition 9 is stated here for a fixed mask distribution w; got an adaptive one"]),
    (lambda: transformer.Config(vocab=0, outputs=2, length=4), ["Config.vocab", ">= 1"]),
    (lambda: ising.clique_magnetisation_law(0, 0.5, 0.1), ["the clique must have at least one site: c = 0"]),
    (lambda: mple.fit_likelihood(np.ones((2, 21))), ["n = 21 is too large for exact enumeration"]),
])
def test_ising_side_wrong_numbers_are_refused(call, words):
    """A NaN law, a probability outside [0, 1], a matrix that is not stochastic, a negative n, couplings
    too large for float64, masks or laws of the wrong shape, an adaptive law where Definition 9 needs a
    fixed one and sizes past an exact sum's limit each give an error naming the argument, never a wrong number."""
    with jax.enable_x64(True):
        with pytest.raises((ValueError, TypeError)) as err:  # TypeError: a count given as a float
            call()
    for w in words:
        assert w in str(err.value)


def test_zero_sites_enumerate_the_one_empty_pattern():
    with jax.enable_x64(True):
        assert ising.enumerate_states(0).shape == (1, 0)


def test_large_but_exact_couplings_still_work():
    """|E| up to 1e6 keeps log-probabilities exact to about 1e-10: |J| = 1e3 on three sites is fine."""
    with jax.enable_x64(True):
        p = np.asarray(ising.probabilities(ising.ising_model(1e3 * (1 - np.eye(3)), np.zeros(3))))
    assert p.sum() == pytest.approx(1.0, abs=1e-12) and p[0] == pytest.approx(0.5) and p[-1] == pytest.approx(0.5)


def test_the_energy_limit_counts_couplings_and_fields_together():
    """The limit is on max |E(x)| = sum_{i<j} |J_ij| + sum |h_i| (reached at x = (+1, +1) here): a model at 1e6
    is built; one a unit above is refused, whether fields alone, couplings alone or both together pass it."""
    def model(coupling, fields):
        return ising.ising_model(coupling * (1 - np.eye(2)), np.asarray(fields, dtype=np.float64))

    with jax.enable_x64(True):
        at_limit = model(6e5, [2e5, 2e5])
        assert float(-ising.energy(at_limit, np.ones(2, np.int8))) == ising_m.MAX_ENERGY
        for over in ((6e5, [2e5, 2e5 + 1]), (0.0, [5e5, 5e5 + 1]), (1e6 + 1, [0.0, 0.0])):
            with pytest.raises(ValueError, match=r"\|E\(x\)\| can reach 1e\+06"):
                model(*over)


@pytest.mark.parametrize("call, error, name", [
    (lambda: ising.clique_plus_independent(6, True, 1.0, 0.0), TypeError, "c must be an integer"),
    (lambda: ising.clique_plus_independent(6.0, 3, 1.0, 0.0), TypeError, "n must be an integer"),
    (lambda: mple.fit_repeats(KEY, _model(), 10, 1, 1.5), TypeError, "repeats must be an integer"),
    (lambda: mple.fit_repeats(KEY, _model(), 10, 1, True), TypeError, "repeats must be an integer"),
    (lambda: mple.fit_repeats(KEY, _model(), 10, 1, None), TypeError, "repeats must be an integer"),
    (lambda: mple.fit_repeats(KEY, _model(), "10", 1, 2), TypeError, "num_samples must be an integer"),
    (lambda: mple.fit_repeats(KEY, _model(), 10, 1, 2, capacity=5), ValueError, "capacity must be an integer >= 10"),
])
def test_counts_are_refused_by_their_own_name_never_converted(call, error, name):
    """A count given as a bool, a float, text or None is refused naming the argument, not passed to int()
    (which took 1.5 as 1 and True as 1, and failed on None in Python's words)."""
    with pytest.raises(error, match=name):
        call()
