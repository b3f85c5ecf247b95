"""Hostile but fair inputs to the Ising side (numerics, masks, fitters, samplers), in float64 as a
theory program runs them: each gets a clear exception whose message names the offending argument and,
where there is one, the fix; none is silently accepted."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gmlm_lib import ising
from gmlm_lib.ising import fisher, markov, masks, mple, samplers, tensorization

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
    (lambda: ising.clique_plus_independent(4.0, 2, 1.0, 0.0), TypeError, ["integers", "n=4.0"]),
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
