"""Every bad input gets a clear error naming the argument and the fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gmlm_lib import ising
from gmlm_lib.ising import masks, mple

J3 = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.5], [0.0, 0.5, 0.0]])
H3 = np.zeros(3)


@pytest.mark.parametrize(
    "J, h, match",
    [
        (np.array([[0.0, 1.0], [0.5, 0.0]]), np.zeros(2), "J must be symmetric.*\\(J \\+ J.T\\) / 2"),
        (np.array([[1.0, 0.2], [0.2, 0.0]]), np.zeros(2), "zero diagonal"),
        (np.zeros((2, 3)), np.zeros(2), "square"),
        (np.zeros(3), np.zeros(3), "square"),
        (np.zeros((3, 3)), np.zeros(2), "h must have shape \\(3,\\)"),
        (np.array([[0.0, np.nan], [np.nan, 0.0]]), np.zeros(2), "finite"),
        (np.zeros((2, 2)), np.array([0.0, np.inf]), "finite"),
        (np.zeros((2, 2)), np.array([1e6, 1.0]), "too large"),  # the fields alone reach |E| > 1e6
    ],
)
def test_bad_parameters(J, h, match):
    with pytest.raises(ValueError, match=match):
        ising.ising_model(J, h)


def test_parameters_at_the_limits_are_accepted():
    """|E| = 1e6 exactly is within the limit; with atol = 0 an exactly symmetric J with an exactly
    zero diagonal is accepted (the tolerances are upper bounds, not margins)."""
    assert ising.ising_model(np.zeros((1, 1)), np.array([1e6])).n == 1
    assert ising.ising_model(J3, H3, atol=0.0).n == 3


def test_n_too_large_for_enumeration_names_the_limit():
    with pytest.raises(ValueError, match="n = 21 is too large.*n <= 20"):
        ising.enumerate_states(21)
    big = ising.IsingModel(J=jnp.zeros((21, 21)), h=jnp.zeros(21))
    for f in (ising.log_partition, ising.probabilities):
        with pytest.raises(ValueError, match="limit is n <= 20"):
            f(big)
    with pytest.raises(ValueError, match="limit is n <= 20"):
        mple.fit_likelihood(np.ones((4, 21)))


def test_bad_states():
    m = ising.ising_model(J3, H3)
    with pytest.raises(ValueError, match="only -1 and \\+1.*2x - 1"):
        ising.log_conditional(m, np.array([[0, 1, 1]]), np.array([[True, False, False]]))
    with pytest.raises(ValueError, match="shape \\(..., 3\\)"):
        ising.log_conditional(m, np.ones((2, 4)), np.ones((2, 4), bool))
    with pytest.raises(ValueError, match="only -1 and \\+1"):
        mple.negative_log_likelihood(m, np.array([[2, 1, 1]]))


def test_mask_larger_than_max_size():
    m = ising.ising_model(J3, H3)
    with pytest.raises(ValueError, match="a mask has 3 sites but max_size = 2"):
        ising.log_conditional(m, np.ones((1, 3)), np.ones((1, 3), bool), max_size=2)


def test_traced_mask_needs_max_size():
    m = ising.ising_model(J3, H3)
    with pytest.raises(ValueError, match="pass max_size"):
        jax.jit(lambda mk: ising.log_conditional(m, jnp.ones((1, 3)), mk))(jnp.ones((1, 3), bool))


@pytest.mark.parametrize("k", [0, 4, -1])
def test_k_out_of_range(k):
    with pytest.raises(ValueError, match=rf"k must be an integer in \[1, 3\]; got {k}\..*n = 3 sites"):
        masks.uniform_k_subsets(jax.random.key(0), 5, 3, k)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 3\]"):
        masks.all_k_subsets(3, k)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 3\]"):
        mple.fit_repeats(jax.random.key(0), ising.ising_model(J3, H3), 10, k, 2)


def test_k_not_integer():
    with pytest.raises(TypeError, match="k must be an integer"):
        masks.uniform_k_subsets(jax.random.key(0), 5, 3, 1.5)


@pytest.mark.parametrize("n, c, match", [(5, 0, "at least one site"), (5, 6, "exceeds the number of sites n = 5")])
def test_bad_clique(n, c, match):
    with pytest.raises(ValueError, match=match):
        ising.clique_plus_independent(n, c, 1.0, 0.1)
    with pytest.raises(ValueError, match=match):
        ising.clique_plus_independent_log_partition(n, c, 1.0, 0.1)


def test_bad_fit_arguments():
    x = np.array([[1, -1, 1], [-1, -1, 1]])
    with pytest.raises(ValueError, match="masks must have the shape of x"):
        mple.fit_pseudolikelihood(x, np.ones((2, 2), bool))
    with pytest.raises(ValueError, match="l2 must be >= 0"):
        mple.fit_pseudolikelihood(x, np.ones_like(x, bool), l2=-1.0)
    with pytest.raises(ValueError, match="theta0 must have shape \\(6,\\)"):
        mple.fit_likelihood(x, theta0=np.zeros(5))
    with pytest.raises(ValueError, match="tol must be > 0"):
        mple.fit_likelihood(x, tol=0.0)


def test_bad_subset_and_theta():
    m = ising.ising_model(J3, H3)
    with pytest.raises(ValueError, match="lie in \\[0, 2\\]"):
        ising.marginal(m, [0, 3])
    with pytest.raises(ValueError, match="must not repeat"):
        ising.marginal(m, [1, 1])
    with pytest.raises(ValueError, match="6 entries for n = 3"):
        ising.from_theta(np.zeros(5), 3)
