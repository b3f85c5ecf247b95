"""Ising numerics against the brute-force reference in brute.py (float64, tight tolerances)."""

import math

import brute
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmlm_lib import ising
from gmlm_lib.ising import masks

TOL = 1e-10


@pytest.fixture(params=[1, 2, 3, 5, 6])
def model(request):
    rng = np.random.default_rng(request.param)
    J, h = brute.random_model(rng, request.param)
    return ising.ising_model(J, h), J, h


def test_exact_numerics_are_float64_when_the_program_asks():
    """The exact quantities come out in float64 under x64 (the theory chapters turn it on), not float32."""
    m = ising.ising_model(*brute.random_model(np.random.default_rng(0), 3))
    assert ising.log_partition(m).dtype == jnp.float64
    assert ising.probabilities(m).dtype == jnp.float64


def test_enumeration_order_and_index_roundtrip():
    for n in (1, 3, 6):
        s = np.asarray(ising.enumerate_states(n))
        np.testing.assert_array_equal(s, brute.states(n))
        np.testing.assert_array_equal(np.asarray(ising.index_from_states(s)), np.arange(2**n))


def test_log_partition_and_probabilities(model):
    """[Definition 12]"""
    m, J, h = model
    assert abs(float(ising.log_partition(m)) - brute.log_z(J, h)) < TOL
    np.testing.assert_allclose(np.asarray(ising.probabilities(m)), brute.probs(J, h), rtol=0, atol=TOL)
    x = brute.states(len(h))
    np.testing.assert_allclose(
        np.asarray(ising.log_prob(m, x)), np.log(brute.probs(J, h)), rtol=0, atol=TOL
    )


def test_energy_matches_definition(model):
    m, J, h = model
    for x in brute.states(len(h)):
        assert abs(float(ising.energy(m, x)) + brute.log_weight(J, h, x)) < TOL


def test_theta_roundtrip_and_statistics(model):
    m, J, h = model
    theta = ising.to_theta(m)
    assert theta.shape == (ising.num_params(len(h)),)
    back = ising.from_theta(theta, len(h))
    np.testing.assert_array_equal(np.asarray(back.J), J)
    # <theta, T(x)> is the unnormalised log-probability
    x = brute.states(len(h))
    np.testing.assert_allclose(
        np.asarray(ising.sufficient_statistics(x) @ theta),
        [brute.log_weight(J, h, xi) for xi in x], atol=TOL,
    )


def test_moments_and_marginals(model):
    m, J, h = model
    n = len(h)
    p, x = brute.probs(J, h), brute.states(n)
    iu, ju = np.triu_indices(n, 1)
    want = np.concatenate([p @ (x[:, iu] * x[:, ju]), p @ x])
    np.testing.assert_allclose(np.asarray(ising.moments(m)), want, atol=TOL)
    subset = [n - 1, 0] if n > 1 else [0]
    marg = np.asarray(ising.marginal(m, subset))
    for r, xs in enumerate(brute.states(len(subset))):
        assert abs(marg[r] - p[np.all(x[:, subset] == xs, axis=1)].sum()) < TOL


def test_conditionals_every_subset(model):
    """log p(x_S | x_-S) for every subset S and every state, batched, mixed |S| in one call. [Definition 2]"""
    m, J, h = model
    n = len(h)
    x = brute.states(n)
    subsets = [np.array([(b >> i) & 1 for i in range(n)], bool) for b in range(2**n)]
    xs = np.repeat(x, len(subsets), axis=0)
    ms = np.tile(np.array(subsets), (len(x), 1))
    got = np.asarray(ising.log_conditional(m, xs, ms))
    want = [brute.conditional(J, h, xi, np.nonzero(mi)[0]) for xi, mi in zip(xs, ms)]
    np.testing.assert_allclose(got, want, atol=1e-9, rtol=0)


def test_conditional_log_probs_normalised_and_consistent():
    rng = np.random.default_rng(7)
    J, h = brute.random_model(rng, 5)
    m = ising.ising_model(J, h)
    x = brute.states(5)[[3, 17, 30]]
    idx = jnp.array([[0, 2, 5], [4, 5, 5], [1, 3, 4]])  # 5 pads
    lp = np.asarray(ising.conditional_log_probs(m, jnp.asarray(x), idx))
    np.testing.assert_allclose(np.exp(lp).sum(-1), 1.0, atol=TOL)
    # the mass of each distinct completion equals the brute-force conditional
    pat = np.asarray(ising.enumerate_states(3))
    row = 1  # S = {4}: patterns whose first slot is +1 hold p(x_4 = +1 | rest)
    y = x[row].copy()
    y[4] = 1
    assert abs(np.exp(lp[row])[pat[:, 0] == 1].sum() - np.exp(brute.conditional(J, h, y, [4]))) < TOL


def test_conditional_with_max_size_padding_and_jit():
    rng = np.random.default_rng(3)
    J, h = brute.random_model(rng, 4)
    m = ising.ising_model(J, h)
    x = brute.states(4)[[5, 9]]
    mk = np.array([[True, False, False, True], [False, True, False, False]])
    eager = ising.log_conditional(m, x, mk)
    padded = ising.log_conditional(m, x, mk, max_size=4)
    jitted = jax.jit(lambda x, mk: ising.log_conditional(m, x, mk, max_size=3))(jnp.asarray(x), jnp.asarray(mk))
    want = [brute.conditional(J, h, x[0], [0, 3]), brute.conditional(J, h, x[1], [1])]
    for got in (eager, padded, jitted):
        np.testing.assert_allclose(np.asarray(got), want, atol=TOL)
    # inside jit an over-full mask cannot raise, so it gives NaN rather than a clipped value
    over = jax.jit(lambda x, mk: ising.log_conditional(m, x, mk, max_size=1))(jnp.asarray(x), jnp.asarray(mk))
    assert np.isnan(np.asarray(over)[0]) and np.isfinite(np.asarray(over)[1])


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 5), seed=st.integers(0, 2**31 - 1), scale=st.floats(0.0, 3.0))
def test_property_conditionals_random_models(n, seed, scale):
    rng = np.random.default_rng(seed)
    J, h = brute.random_model(rng, n, scale)
    m = ising.ising_model(J, h)
    x = brute.states(n)[rng.integers(0, 2**n, size=4)]
    mk = rng.random((4, n)) < 0.5
    got = np.asarray(ising.log_conditional(m, x, mk))
    want = [brute.conditional(J, h, xi, np.nonzero(mi)[0]) for xi, mi in zip(x, mk)]
    assert got.shape == (4,)
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_sampling_frequencies_within_standard_errors():
    """Exact sampler: every state's frequency within 4.5 binomial standard errors (fixed seed;
    with 32 states the chance of a false failure is below 1e-4)."""
    rng = np.random.default_rng(11)
    J, h = brute.random_model(rng, 5, 0.7)
    m = ising.ising_model(J, h)
    num = 100_000
    draws = ising.sample(m, jax.random.key(0), num)
    assert draws.shape == (num, 5) and draws.dtype == jnp.int8
    freq = np.bincount(np.asarray(ising.index_from_states(draws)), minlength=32) / num
    p = brute.probs(J, h)
    z = (freq - p) / np.sqrt(p * (1 - p) / num)
    assert np.max(np.abs(z)) < 4.5
    # and the sampler is a function of its key
    np.testing.assert_array_equal(np.asarray(ising.sample(m, jax.random.key(0), 50)), np.asarray(draws[:50]))


def test_clique_plus_independent_structure_and_closed_form():
    m = ising.clique_plus_independent(6, 3, 1.5, 0.2, h_rest=-0.4)
    J = np.asarray(m.J)
    assert np.all(J[:3, :3][~np.eye(3, dtype=bool)] == 1.5) and np.all(J[3:] == 0) and np.all(np.diag(J) == 0)
    np.testing.assert_array_equal(np.asarray(m.h), [0.2, 0.2, 0.2, -0.4, -0.4, -0.4])
    assert abs(ising.clique_plus_independent_log_partition(6, 3, 1.5, 0.2, -0.4) - brute.log_z(J, np.asarray(m.h))) < TOL
    law = ising.clique_magnetisation_law(3, 1.5, 0.2)
    p, x = brute.probs(J, np.asarray(m.h)), brute.states(6)
    for k in range(4):
        assert abs(law[k] - p[(x[:, :3] == 1).sum(1) == k].sum()) < TOL
    # a clique of one site is a free site; a strong clique's law stays finite (weights near e^2250)
    one = ising.clique_plus_independent(3, 1, 1.5, 0.2)
    assert np.all(np.asarray(one.J) == 0) and ising.clique_magnetisation_law(1, 1.5, 0.2)[1] == pytest.approx(
        1 / (1 + np.exp(-0.4)), rel=1e-12)
    strong = ising.clique_magnetisation_law(10, 50.0, 0.1)
    assert np.all(np.isfinite(strong)) and strong.sum() == pytest.approx(1.0) and strong[-1] > 0.5


def test_random_model_scales_and_zero_scales():
    """J_ij ~ N(0, coupling_scale^2) symmetric with a zero diagonal, h_i ~ N(0, field_scale^2); a
    scale of 0 (a model without couplings, or without fields) is allowed."""
    m = ising.random_model(jax.random.key(0), 40, 0.5, 2.0)
    J, h = np.asarray(m.J), np.asarray(m.h)
    assert np.all(J == J.T) and np.all(np.diag(J) == 0)
    assert 0.4 < J[np.triu_indices(40, 1)].std() < 0.6 and 1.5 < h.std() < 2.5
    free = ising.random_model(jax.random.key(0), 4, 0.0, 1.0)
    flat = ising.random_model(jax.random.key(0), 4, 1.0, 0.0)
    assert np.all(np.asarray(free.J) == 0) and np.all(np.asarray(flat.h) == 0) and np.any(np.asarray(flat.J) != 0)


def test_the_two_modes_of_the_clique_model():
    """[Eqs. 7-8] the light-mode start is in X_- and not X_+; the exact mass of in_heavy_mode over all
    states is the closed-form P(X_+); the test works under jit, as a sampler's hitting target."""
    x0 = np.asarray(ising.light_mode_states(4, 6, 3))
    assert x0.shape == (4, 6) and x0.dtype == np.int8
    np.testing.assert_array_equal(x0, np.tile([-1, -1, -1, 1, 1, 1], (4, 1)))
    assert not np.asarray(ising.in_heavy_mode(jnp.asarray(x0), 3)).any()
    m, states = ising.clique_plus_independent(6, 3, 1.5, 0.2), ising.enumerate_states(6)
    heavy = np.asarray(jax.jit(ising.in_heavy_mode, static_argnums=1)(states, 3))
    assert heavy.sum() == 2 ** 3  # the clique fixed at +1, the three free sites anything
    assert abs(float(np.asarray(ising.probabilities(m))[heavy].sum()) - ising.clique_magnetisation_law(3, 1.5, 0.2)[-1]) < TOL
    with pytest.raises(ValueError, match="clique size"):
        ising.in_heavy_mode(states, 7)
    with pytest.raises(ValueError, match="chains"):
        ising.light_mode_states(0, 6, 3)
    with pytest.raises(ValueError, match="exceeds"):
        ising.light_mode_states(2, 3, 4)


@pytest.mark.parametrize("n, J, h", [(2, 0.7, -0.1), (5, 0.25, 0.3), (6, -0.4, 0.0)])
def test_curie_weiss_is_every_pair_coupled_alike(n, J, h):
    m = ising.curie_weiss(n, J, h)
    Jb = J * (1 - np.eye(n))
    np.testing.assert_array_equal(np.asarray(m.J), Jb)
    np.testing.assert_array_equal(np.asarray(m.h), np.full(n, h))
    assert abs(float(ising.log_partition(m)) - brute.log_z(Jb, np.full(n, h))) < TOL
    with pytest.raises(ValueError, match="sites"):
        ising.curie_weiss(0, J, h)


@pytest.mark.parametrize("n", [2, 5, 6])
def test_two_clusters_couple_inside_and_across(n):
    m = ising.two_clusters(n, 0.6, 0.05, 0.1)
    J = np.asarray(m.J)
    half = n // 2
    assert np.all(J[:half, :half][~np.eye(half, dtype=bool)] == 0.6) and np.all(J[:half, half:] == 0.05)
    assert np.all(J[half:, half:][~np.eye(n - half, dtype=bool)] == 0.6) and np.all(np.diag(J) == 0)
    np.testing.assert_array_equal(np.asarray(m.h), np.full(n, 0.1))
    assert abs(float(ising.log_partition(m)) - brute.log_z(J, np.full(n, 0.1))) < TOL
    with pytest.raises(ValueError, match="two clusters"):
        ising.two_clusters(1, 0.6, 0.05, 0.1)


def test_spin_glass_scales_one_fixed_gaussian_pattern():
    """The same key gives the same pattern at every J (the couplings scale linearly), the pattern is
    random_model's unit-scale couplings (symmetric, zero diagonal, both signs), the field is uniform."""
    key = jax.random.key(5)
    one, two = ising.spin_glass(key, 6, 1.0, 0.2), ising.spin_glass(key, 6, 2.5, 0.2)
    pattern = np.asarray(ising.random_model(key, 6, 1.0, 0.0).J)
    np.testing.assert_array_equal(np.asarray(one.J), pattern)
    np.testing.assert_array_equal(np.asarray(two.J), 2.5 * pattern)
    assert (pattern > 0).any() and (pattern < 0).any() and np.all(np.diag(pattern) == 0)
    np.testing.assert_array_equal(np.asarray(two.h), np.full(6, 0.2))
    assert abs(float(ising.log_partition(two)) - brute.log_z(2.5 * pattern, np.full(6, 0.2))) < TOL
    other = np.asarray(ising.spin_glass(jax.random.key(6), 6, 1.0, 0.2).J)
    assert not np.array_equal(other, pattern)
    with pytest.raises(ValueError, match="sites"):
        ising.spin_glass(key, 0, 1.0, 0.2)


@pytest.mark.parametrize("pairs", [1, 2, 3])
def test_pair_chain_couples_each_pair_and_links_neighbours(pairs):
    """Written out site by site: coupling inside pair a (sites 2a, 2a + 1), link from 2a + 1 to 2a + 2,
    nothing else; log Z against brute force."""
    m = ising.pair_chain(pairs, 1.5, 0.3, 0.1)
    n = 2 * pairs
    want = np.zeros((n, n))
    for a in range(pairs):
        want[2 * a, 2 * a + 1] = want[2 * a + 1, 2 * a] = 1.5
        if a + 1 < pairs:
            want[2 * a + 1, 2 * a + 2] = want[2 * a + 2, 2 * a + 1] = 0.3
    np.testing.assert_array_equal(np.asarray(m.J), want)
    np.testing.assert_array_equal(np.asarray(m.h), np.full(n, 0.1))
    assert abs(float(ising.log_partition(m)) - brute.log_z(want, np.full(n, 0.1))) < TOL
    with pytest.raises(ValueError, match="pairs"):
        ising.pair_chain(0, 1.5, 0.3, 0.1)


def test_two_modes_is_the_noise_model_plus_a_ferromagnetic_coupling():
    key = jax.random.key(3)
    base, peaky = ising.random_model(key, 5, 0.1, 0.1), ising.two_modes(key, 5, 0.5)
    np.testing.assert_allclose(np.asarray(peaky.J) - np.asarray(base.J), 0.5 * (1 - np.eye(5)), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(np.asarray(peaky.h), np.asarray(base.h))
    p = np.asarray(ising.probabilities(peaky))  # the two modes are the two most probable states
    assert set(np.argsort(p)[-2:]) == {0, 2**5 - 1}


@pytest.mark.parametrize("J", [-10.0, 0.5, 10.0])
def test_log_partition_stable_at_n20(J):
    """n = 20 (the enumeration limit) with |J| = 10: chunked log-sum-exp equals the closed form."""
    m = ising.clique_plus_independent(20, 12, J, 0.3)
    got = float(ising.log_partition(m))
    want = ising.clique_plus_independent_log_partition(20, 12, J, 0.3)
    assert math.isfinite(got) and abs(got - want) <= 1e-12 * max(1.0, abs(want))


def test_random_model_is_valid_and_keyed():
    a = ising.random_model(jax.random.key(1), 7, 0.5, 0.2)
    b = ising.random_model(jax.random.key(1), 7, 0.5, 0.2)
    np.testing.assert_array_equal(np.asarray(a.J), np.asarray(b.J))
    assert np.allclose(np.asarray(a.J), np.asarray(a.J).T) and np.all(np.diag(np.asarray(a.J)) == 0)


def test_uniform_k_subsets_are_uniform():
    n, k, num = 5, 2, 50_000
    mk = np.asarray(masks.uniform_k_subsets(jax.random.key(4), num, n, k))
    assert np.all(mk.sum(1) == k)
    codes = (mk * (1 << np.arange(n))).sum(1)
    counts = np.array([np.sum(codes == c) for c in np.unique(codes)])
    assert len(counts) == math.comb(n, k)
    p = 1 / math.comb(n, k)
    z = (counts / num - p) / np.sqrt(p * (1 - p) / num)
    assert np.max(np.abs(z)) < 4.5


def test_all_k_subsets():
    s = np.asarray(masks.all_k_subsets(5, 3))
    assert s.shape == (10, 5) and np.all(s.sum(1) == 3) and len({tuple(r) for r in s}) == 10


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 7), st.integers(0, 9), st.integers(0, 2**31 - 1))
def test_mask_to_indices_numpy_path_equals_the_traced_one(n, size, seed):
    """Concrete masks take a NumPy path (no program per batch shape); traced ones the jitted path: the
    same indices, padded with n, for every slot count, more slots than sites included."""
    mask = np.random.default_rng(seed).random((3, n)) < 0.5
    eager = np.asarray(ising.mask_to_indices(mask, size))
    traced = np.asarray(jax.jit(lambda m: ising.mask_to_indices(m, size))(jnp.asarray(mask)))
    np.testing.assert_array_equal(eager, traced)


@pytest.mark.parametrize("J, h, error, words", [
    (np.ones((3, 3)) - np.eye(3) + np.eye(3) * 0.5, np.zeros(3), ValueError, "J must have a zero diagonal"),
    (np.triu(np.ones((3, 3)), 1), np.zeros(3), ValueError, "J must be symmetric"),
    (np.zeros((3, 3)), np.zeros(2), ValueError, "h must have shape (3,) to match J"),
    (np.zeros((3, 2)), np.zeros(3), ValueError, "J must be a square (n, n) matrix"),
    (np.where(np.eye(2, dtype=bool), 0.0, np.inf), np.zeros(2), ValueError, "J must be finite"),
    (np.zeros((2, 2)), np.array([0.0, np.nan]), ValueError, "h must be finite"),
    (np.array([["0", "1"], ["1", "0"]]), np.zeros(2), TypeError, "J must hold numbers"),
])
def test_the_model_constructor_refuses_what_is_not_a_model(J, h, error, words):
    """IsingModel(J, h) checks what ising_model checks of a model's form (not the exact numerics' range),
    naming the field and the fix, on concrete arrays and on batches of models alike."""
    with pytest.raises(error, match=__import__("re").escape(words)):
        ising.IsingModel(J=J, h=h)
    with pytest.raises(error, match=__import__("re").escape(words).replace(r"\(3,\)", r"\(2,\ 3\)")):
        ising.IsingModel(J=np.stack([np.asarray(J)] * 2), h=np.stack([np.asarray(h)] * 2))


def test_the_model_constructor_keeps_models_and_checks_only_shapes_under_a_transformation():
    """A model built directly is the factory's; under jit/vmap only shapes are checked (the values are
    traced), JAX rebuilds models and mask laws from their leaves unchecked, and a vmap specification
    built with the constructor (axis numbers, None) is taken as it is."""
    m = ising.curie_weiss(3, 0.5, 0.1)
    direct = ising.IsingModel(J=m.J, h=m.h)
    assert np.array_equal(direct.J, m.J) and type(jax.jit(lambda x: x)(direct)) is ising.IsingModel
    batch = jax.vmap(lambda J, h: ising.IsingModel(J, h))(jnp.stack([m.J] * 2), jnp.stack([m.h] * 2))
    assert batch.J.shape == (2, 3, 3)
    with pytest.raises(ValueError, match=r"h must have shape \(3,\)"):
        jax.jit(lambda J: ising.IsingModel(J, jnp.zeros(2)))(m.J)
    spec = ising.IsingModel(J=0, h=None)
    assert jax.vmap(lambda mod, h: mod.J.sum() + h.sum(), in_axes=(spec, None))(batch, m.h).shape == (2,)
    law = masks.uniform_k(3, 2)
    assert type(jax.jit(lambda d: d)(law)) is masks.MaskDistribution
    assert type(ising.IsingModel.unchecked(np.ones((2, 2)), np.zeros(2))) is ising.IsingModel  # factories' path


@pytest.mark.parametrize("subsets, weights, words", [
    (np.ones((2, 3), bool), np.array([0.5, 0.6]), "must sum to one"),
    (np.ones((2, 3), bool), np.array([1.5, -0.5]), "must be finite and non-negative"),
    (np.ones((2, 3), bool), np.ones(3) / 3, "weights must have shape (2,) (one per subset) or (8, 2)"),
    (np.ones((1, 2), bool), np.ones((3, 1)), "adaptive weights must have 2^n = 4 rows; got 3"),
    (np.array([[2, 0]]), np.ones(1), "subsets must be boolean masks (or 0/1)"),
    (np.zeros((0, 2), bool), np.ones(0), "the mask distribution is empty"),
])
def test_the_mask_law_constructor_refuses_what_is_not_a_law(subsets, weights, words):
    """MaskDistribution(subsets, weights) checks what from_weights and adaptive check (a law whose weights
    do not sum to one would give a negative Hessian trace downstream, silently)."""
    with pytest.raises(ValueError, match=__import__("re").escape(words)):
        masks.MaskDistribution(subsets, weights)
    ok = masks.MaskDistribution(np.ones((2, 3), bool), np.array([0.25, 0.75]))
    assert ok.n == 3 and not ok.is_adaptive


# --- hostile inputs, generated (issue 127, item 6): a finite answer or an error naming the argument ---------

_EXTREME = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                     st.sampled_from([0.0, 1e-300, 1e300, -1e300, 709.0, 1e4]))


def _named(err: Exception, *names: str) -> bool:
    text = str(err)
    return any(name in text for name in names)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 5), m=st.integers(0, 5), values=st.lists(_EXTREME, min_size=30, max_size=30),
       symmetric=st.booleans())
def test_property_a_model_from_any_fields_is_finite_or_refused_by_name(n, m, values, symmetric):
    """Every (J, h) of any shape and value, NaN, infinities and overflowing couplings included: either a
    model whose exact numerics are finite (log Z, probabilities summing to 1, moments), or a ValueError or
    TypeError that names the field (J, h) or says the numbers are out of the exact numerics' range."""
    vals = np.resize(np.asarray(values, np.float64), n * n + m)
    J = vals[: n * n].reshape(n, n)
    if symmetric:
        J = np.triu(J, 1) + np.triu(J, 1).T
    h = vals[n * n:]
    try:
        model = ising.ising_model(J, h)
    except (ValueError, TypeError) as err:
        assert _named(err, "J", "h"), str(err)
        return
    try:
        log_z = float(ising.log_partition(model))
        p = np.asarray(ising.probabilities(model))
        mom = np.asarray(ising.moments(model))
    except (ValueError, FloatingPointError) as err:
        assert _named(err, "range", "overflow", "finite", "large"), str(err)
        return
    assert math.isfinite(log_z) and np.isfinite(p).all() and np.isfinite(mom).all()
    assert abs(p.sum() - 1.0) < 1e-9 and (p >= 0).all()


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 4), cols=st.integers(0, 5),
       values=st.lists(st.one_of(st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True)),
                       min_size=20, max_size=20))
def test_property_states_of_any_shape_and_value_are_read_or_refused_by_name(rows, cols, values):
    """log_prob and energy of a 3-site model on any array: (N, 3) arrays of +-1 are scored finitely;
    anything else (another width, 0/2/NaN entries, floats that are not spins) is refused naming x."""
    model = ising.ising_model(np.array([[0.0, 0.4, 0.0], [0.4, 0.0, -0.3], [0.0, -0.3, 0.0]]), np.array([0.1, 0.0, -0.2]))
    x = np.resize(np.asarray(values, dtype=np.float64), rows * cols).reshape(rows, cols)
    for f in (ising.log_prob, ising.energy):
        try:
            got = np.asarray(f(model, x))
        except (ValueError, TypeError) as err:
            assert _named(err, "x"), str(err)
            continue
        assert x.shape[-1] == 3 and np.isin(x, (-1, 1)).all() and got.shape == (rows,) and np.isfinite(got).all()


def test_host_tables_are_copied_to_the_device_without_compiling():
    """The tables the library makes on the host (states, k-subsets, mask distributions and their block ids)
    reach the device by a copy: ``jnp.asarray`` of a NumPy array compiles a program a shape in JAX 0.10
    (``lax.stage``), which the chapters' compile counts showed by the dozen. Fresh shapes, so nothing is cached."""
    from gmlm_lib.core import timing
    from gmlm_lib.ising import blocks

    clock = timing.compile_clock()
    for n in (7, 9):
        states = ising.enumerate_states(n)
        dist = masks.uniform_k(n, 3)
        table = blocks.mask_table(dist, n)
        fixed = masks.from_weights(np.eye(n, dtype=bool), np.full(n, 1.0 / n))
    assert timing.compiles_since(clock)["compilations"] == 0
    assert states.dtype == jnp.int8 and states.shape == (2**9, 9)
    assert table.ids.shape == (blocks.table_rows(math.comb(9, 3), 9), 2**9) and fixed.weights.shape == (9,)
    assert int(table.live.sum()) == math.comb(9, 3)
    np.testing.assert_allclose(np.asarray(dist.weights).sum(), 1.0, rtol=1e-12)


def test_host_arrays_reach_the_exact_kernels_without_programs_of_their_own():
    """In JAX 0.10 ``jnp.asarray`` of a host array, and every operation run outside ``jit`` on a device array,
    compile a program of their own for each shape: a chapter that passes NumPy arrays to the library would pay
    one at every shape it meets. Unpacking a concrete theta, converting to float64 and checking a function on
    the states compile nothing; a loss compiles its own program and the model's kernels, nothing per operation.
    n = 7 is a size no other test uses, so nothing is cached."""
    from gmlm_lib.core import precision, timing
    from gmlm_lib.ising import mple

    theta = np.linspace(-0.3, 0.3, ising.num_params(7))
    x = np.where(np.arange(70).reshape(10, 7) % 3 == 0, 1, -1).astype(np.int8)
    clock = timing.compile_clock()
    model = ising.from_theta(theta, 7)
    f = precision.float64(np.arange(5))
    g = ising.check_state_function(np.arange(2**7), 7)
    assert timing.compiles_since(clock)["compilations"] == 0
    assert f.dtype == jnp.float64 and g.dtype == jnp.float64 and isinstance(g, jax.Array)
    np.testing.assert_array_equal(np.asarray(ising.to_theta(model)), theta)
    traced = jax.jit(lambda t: ising.from_theta(t, 7))(theta)  # the traceable path builds the same model
    np.testing.assert_array_equal(np.asarray(traced.J), np.asarray(model.J))
    clock = timing.compile_clock()
    nll = mple.negative_log_likelihood(model, x)
    pl = mple.pseudolikelihood_loss(model, x, x > 0)
    assert timing.compiles_since(clock)["compilations"] <= 4  # log Z, the mean energy; the conditionals, the mean
    want = float(np.mean(np.asarray(ising.energy(model, x)))) + float(ising.log_partition(model))
    assert float(nll) == pytest.approx(want, rel=1e-14)
    assert float(pl) == pytest.approx(-float(np.mean(np.asarray(ising.log_conditional(model, x, x > 0)))), rel=1e-14)
