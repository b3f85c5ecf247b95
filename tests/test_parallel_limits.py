"""Block approximate tensorization [Definition 9, Theorem 4], product transitions [Props. 3-4],
and the parallel decoder: checked against closed forms and brute force."""

from __future__ import annotations

import time

import brute
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from gmlm_lib import ising
from gmlm_lib.core import divergences
from gmlm_lib.ising import masks, product, samplers, tensorization
from gmlm_lib.ising import transformer as tr


def test_conditional_kl_is_the_definition():
    """D_w(q||p) by the chain rule equals E_{x~q} E_S KL(q(.|x_-S) || p(.|x_-S)) summed by brute force. [Definition 9]"""
    rng = np.random.default_rng(0)
    J, h = brute.random_model(rng, 4, 0.7)
    model = ising.ising_model(J, h)
    p = brute.probs(J, h)
    q = rng.dirichlet(np.ones(16))
    X = brute.states(4)
    dist = masks.uniform_k(4, 2)
    expect = 0.0
    for S in np.asarray(dist.subsets):
        rest = ~S
        for a, x in enumerate(X):
            same = [b for b in range(16) if np.all(X[b][rest] == x[rest])]
            qc = q[same] / q[same].sum()
            pc = p[same] / p[same].sum()
            expect += q[a] * np.sum(qc * np.log(qc / pc)) / 6  # w(S) = 1/6
    a, d = tensorization.conditional_kl_fn(model, dist)(jnp.asarray(q))
    np.testing.assert_allclose(float(a), np.sum(q * np.log(q / p)), rtol=1e-12)
    np.testing.assert_allclose(float(d), expect, rtol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_product_measure_has_c_at_n_over_k(k):
    """For a product measure and uniform k-subsets, C_AT = n/k (Han's inequality); the ascent
    reaches it and, being a lower bound, does not exceed it."""
    model = ising.ising_model(np.zeros((6, 6)), np.linspace(-0.5, 0.5, 6))
    lb = tensorization.lower_bound(jax.random.key(0), model, masks.uniform_k(6, k), restarts=8, steps=200)
    assert 6 / k - 1e-6 < lb.value <= 6 / k + 1e-9
    assert lb.poincare == pytest.approx(6 / k, rel=1e-9)


def test_sandwich_and_theorem_4_key_step():
    """C_P <= (ascent) <= C_AT <= upper bound, and KL(p*||p_theta) <= C_AT (L(theta) - L(theta*))
    with the certified upper bound, for a fitted-looking perturbation of the truth. [Theorem 4; Proposition 1]"""
    rng = np.random.default_rng(2)
    J, h = brute.random_model(rng, 5, 0.6)
    model = ising.ising_model(J, h)
    dist = masks.uniform_k(5, 2)
    lb = tensorization.lower_bound(jax.random.key(1), model, dist, restarts=8, steps=200)
    ub = tensorization.upper_bound(model, dist)
    assert lb.poincare <= lb.value + 1e-9 <= ub
    E = rng.normal(size=(5, 5))
    truth = ising.ising_model(J + 0.05 * (E + E.T) * (1 - np.eye(5)), h + 0.05)
    kl_val, gap = tensorization.excess_loss(truth, model, dist)
    assert 0 < kl_val <= ub * gap
    assert kl_val / gap == pytest.approx(tensorization.ratio(model, dist, ising.probabilities(truth)), rel=1e-12)


def test_upper_bound_is_its_formula_and_the_ratio_takes_laws_with_zeros():
    """upper_bound is C_P log(1/p_min - 1) / (1 - 2 p_min), with C_P from the brute-force transition
    matrix; the ratio of a law q with zero entries is defined (0 log 0 = 0) and below it; the ascent
    runs with one restart and no steps (its start is then a certified ratio too)."""
    rng = np.random.default_rng(3)
    J, h = brute.random_model(rng, 4, 0.7)
    model, dist, p = ising.ising_model(J, h), masks.uniform_k(4, 2), brute.probs(J, h)
    P = brute.transition(J, h, np.asarray(dist.subsets), np.tile(np.asarray(dist.weights), (16, 1)))
    cp = 1 / (1 - brute.second_eigenvalue(J, h, P))
    want = cp * np.log(1 / p.min() - 1) / (1 - 2 * p.min())
    assert tensorization.upper_bound(model, dist) == pytest.approx(want, rel=1e-9)
    q = rng.dirichlet(np.ones(16)) * np.repeat([0.0, 1.0], 8)
    q = q / q.sum()
    assert 0 < tensorization.ratio(model, dist, jnp.asarray(q)) <= want
    lb = tensorization.lower_bound(jax.random.key(0), model, dist, restarts=1, steps=0)
    assert lb.restarts.shape == (1,) and lb.value == pytest.approx(tensorization.ratio(model, dist, lb.q), rel=1e-12)


def test_distances_average_the_rows_with_their_weights():
    """distances: KL and TV of the learned rows and of the closest product (the product of each
    row's two site marginals), averaged over rows with the given weights, normalised, or uniformly."""
    rng = np.random.default_rng(4)
    target, learned = rng.dirichlet(np.ones(4), size=(2, 3))
    weights = np.array([1.0, 2.0, 5.0])
    X = brute.states(2)
    floor = []
    for row in target:
        up = [row[X[:, i] > 0].sum() for i in range(2)]
        floor.append([np.prod([u if x > 0 else 1 - u for u, x in zip(up, y)]) for y in X])
    floor = np.array(floor)
    kl = lambda P, Q: np.sum(P * np.log(P / Q), axis=1)  # noqa: E731
    tv = lambda P, Q: 0.5 * np.abs(P - Q).sum(1)  # noqa: E731
    for w, avg in [(weights, weights / weights.sum()), (None, np.full(3, 1 / 3))]:
        got = product.distances(jnp.asarray(target), jnp.asarray(learned), None if w is None else jnp.asarray(w))
        want = {"kl_learned": avg @ kl(target, learned), "kl_floor": avg @ kl(target, floor),
                "tv_learned": avg @ tv(target, learned), "tv_closest_product": avg @ tv(target, floor)}
        assert got == pytest.approx(want, rel=1e-12)


def test_distances_and_a_samplers_cast_compile_no_program_of_their_own():
    """In JAX 0.10 every operation run outside ``jit`` compiles a program of its own for each shape:
    distances averages its rows on the host once the divergences are compiled (5 rows of n = 3, a shape no
    other test uses), and a float32 sampler of a float64 model casts it on the host, the same rounding."""
    from gmlm_lib.core import timing

    rng = np.random.default_rng(11)
    target, learned = rng.dirichlet(np.ones(8), size=(2, 5))
    best = product.closest_product(target)
    divergences.kl(target, learned), divergences.kl(target, best), divergences.tv(target, learned)
    clock = timing.compile_clock()
    got = product.distances(target, learned, np.arange(1.0, 6.0))
    assert timing.compiles_since(clock)["compilations"] == 0
    assert got["kl_learned"] == pytest.approx(np.arange(1.0, 6.0) @ np.asarray(divergences.kl(target, learned)) / 15,
                                              rel=1e-13)
    model = ising.random_model(jax.random.key(3), 5, 0.4, 0.2)
    clock = timing.compile_clock()
    fast = samplers._cast(model, jnp.float32)
    assert timing.compiles_since(clock)["compilations"] == 0 and samplers._cast(model, jnp.float64) is model
    assert fast.J.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(fast.J), np.asarray(jnp.asarray(model.J).astype(jnp.float32)))
    np.testing.assert_array_equal(np.asarray(fast.h), np.asarray(model.h).astype(np.float32))


def test_min_tv_to_its_own_product_is_zero_to_the_refined_grid():
    """An exact product law at an off-grid point: each refinement spans +-4 steps of the grid
    before it, so after three the spacing is (8/800)^2 / 800 ~ 1.2e-7 on each axis, far below the
    first grid's 1/800, and a and b are found to within it."""
    for a, b in [(0.3137, 0.6271), (0.6271, 0.3137)]:
        law = np.asarray(product.product_law(jnp.asarray([a, b])))
        tv_min, got_a, got_b = product.min_tv_pair(law)
        assert tv_min < 2e-7 and abs(got_a - a) < 2e-7 and abs(got_b - b) < 2e-7


def test_k_equals_n_tensorizes_with_constant_one():
    model = ising.clique_plus_independent(5, 3, 1.0, 0.2)
    q = np.random.default_rng(0).dirichlet(np.ones(32))
    assert tensorization.ratio(model, masks.uniform_k(5, 5), q) == pytest.approx(1.0, rel=1e-12)


def test_closest_product_is_the_product_of_marginals():
    """[Proposition 4]"""
    rng = np.random.default_rng(4)
    target = rng.dirichlet(np.ones(8), size=5)
    best = product.closest_product(target)
    floor = product.kl_floor(target)
    for _ in range(50):  # no random product beats it
        m = rng.uniform(0.01, 0.99, size=(5, 3))
        assert np.all(np.asarray(divergences.kl(target, product.product_law(m))) >= np.asarray(floor) - 1e-12)
    np.testing.assert_allclose(np.asarray(best).sum(-1), 1.0, atol=1e-14)
    # a product target is its own closest product
    m = rng.uniform(size=(2, 3))
    np.testing.assert_allclose(np.asarray(product.kl_floor(product.product_law(m))), 0.0, atol=1e-14)


def test_pair_floor_closed_form_and_tv_minimum():
    """Symmetric pair: 2-Gibbs step law p(y) ∝ exp(J y1 y2); closest product is uniform; the KL
    floor is the mutual information ``log 2 + s log s + (1-s) log(1-s)``, ``s = sigmoid(2J)``; the TV
    minimum over products is found and beats a coarse grid."""
    J = 1.5
    model = ising.ising_model([[0, J], [J, 0]], [0, 0])
    row = samplers.transition_matrix(samplers.k_gibbs(model, 2))[0]
    same = 1 / (1 + np.exp(-2 * J))
    mi = np.log(2) + same * np.log(same) + (1 - same) * np.log(1 - same)
    assert float(product.kl_floor(row)) == pytest.approx(mi, rel=1e-12)
    tv_min, a, b = product.min_tv_pair(np.asarray(row))
    grid = np.linspace(0, 1, 101)
    coarse = min(float(divergences.tv(row, product.product_law(jnp.asarray([u, v])))) for u in grid for v in grid)
    assert tv_min <= coarse + 1e-12
    assert tv_min > 0.3  # a strongly coupled pair is far from every product


def test_deterministic_transitions_are_one_parallel_step_exactly():
    """[Proposition 3] A deterministic transition x -> f(x) is a product of point masses: the product of its
    own site marginals is the transition itself (no KL left), so one parallel pass that predicts each site
    of f(x) from x implements it exactly, for every map f; a transition that is not deterministic and
    couples the sites is not a product."""
    n = 3
    rng = np.random.default_rng(0)
    for _ in range(20):
        f = rng.integers(0, 2**n, 2**n)  # any map of the 8 states to the 8 states
        rows = jnp.asarray(np.eye(2**n)[f])  # P(y | x) = 1 when y = f(x)
        marginals = product.site_marginals(rows)
        assert set(np.unique(np.asarray(marginals))) <= {0.0, 1.0}
        np.testing.assert_allclose(np.asarray(product.product_law(marginals)), np.asarray(rows), atol=1e-12)
        np.testing.assert_allclose(np.asarray(product.kl_floor(rows)), 0.0, atol=1e-12)
    coupled = jnp.asarray(np.tile(np.eye(2**n)[[0, 2**n - 1]].mean(0), (2**n, 1)))  # all-up or all-down, 1/2 each
    assert float(jnp.min(product.kl_floor(coupled))) > 0.5  # (n - 1) log 2 of total correlation


def test_parallel_decoder_shapes_and_training_step():
    """The parallel decoder of Section 2.4.1 computes one logit vector a position and learns a copy task."""
    cfg = tr.Config(vocab=3, outputs=2, length=5, d_model=16, heads=2, layers=1, d_ff=32)
    model = tr.ParallelDecoder(cfg, rngs=nnx.Rngs(0))
    out = model(jnp.zeros((4, 5), jnp.int32))
    assert out.shape == (4, 5, 2) and out.dtype == jnp.float32
    rng = np.random.default_rng(0)

    def batches():
        while True:
            x = rng.integers(0, 2, (32, 5))
            yield x, x  # copy task
    log = tr.train(model, batches(), 150, progress=False, log_every=50)
    assert log["losses"][-1][1] < 0.5 * log["losses"][0][1]
    assert [t for t, _ in log["losses"]] == [50, 100, 150]
    with pytest.raises(ValueError, match=r"tokens must have shape \(batch, 5\)"):
        model(jnp.zeros((4, 6), jnp.int32))
    with pytest.raises(ValueError, match="divisible by heads"):
        tr.Config(vocab=2, outputs=2, length=4, d_model=10, heads=4)


def test_parallel_decoder_training_logs_warms_up_and_times_as_documented(monkeypatch):
    """``train``: the loss is logged every ``log_every`` steps and at the last one, the warm-up takes
    ``warmup`` steps but never more than a tenth of the run, ``wall_s`` is the loop's wall time; one step
    is a run, zero is refused."""
    cfg = tr.Config(vocab=2, outputs=2, length=3, d_model=8, heads=2, layers=1, d_ff=8)
    model = tr.ParallelDecoder(cfg, rngs=nnx.Rngs(0))
    batches = iter(lambda: (np.zeros((2, 3), np.int32), np.ones((2, 3), np.int32)), None)
    seen, logged = [], []
    real = tr.optax.warmup_cosine_decay_schedule

    def spy(init_value, peak_value, warmup_steps, decay_steps, *args, **kwargs):
        seen.append((init_value, peak_value, warmup_steps, decay_steps))
        return real(init_value, peak_value, warmup_steps, decay_steps, *args, **kwargs)

    monkeypatch.setattr(tr.optax, "warmup_cosine_decay_schedule", spy)
    start = time.perf_counter()
    log = tr.train(model, batches, 7, learning_rate=0.01, warmup=3, log_every=3, progress=False,
                   on_log=lambda t, loss: logged.append(t))
    took = time.perf_counter() - start
    assert [t for t, _ in log["losses"]] == logged == [3, 6, 7]
    assert 0 < log["wall_s"] <= took
    assert seen[-1] == (0.0, 0.01, 1, 7)  # a tenth of 7 steps rounds down to 0: one step of warm-up
    tr.train(model, batches, 40, warmup=3, log_every=100, progress=False)
    assert seen[-1][2:] == (3, 40)  # 3 steps, within a tenth of 40
    one = tr.train(model, batches, 1, log_every=100, progress=False)
    assert [t for t, _ in one["losses"]] == [1] and seen[-1][2:] == (1, 2)
    with pytest.raises(ValueError, match="steps must be >= 1; got 0"):
        tr.train(model, batches, 0, progress=False)
    for bad in (float("nan"), 0.0, float("inf")):  # a NaN step would train to a NaN loss, silently
        with pytest.raises(ValueError, match="learning_rate must be a finite number > 0"):
            tr.train(model, batches, 5, learning_rate=bad, progress=False)
    built = tr.build(cfg, 0)  # built in one program: the same modules, initialised from the same seed
    x = jnp.zeros((2, 3), jnp.int32)
    np.testing.assert_allclose(np.asarray(tr.predict(built, x)), np.asarray(tr.ParallelDecoder(cfg, rngs=nnx.Rngs(0))(x)),
                               atol=1e-5)


def test_min_tv_to_a_product_of_the_perfectly_coupled_pair_is_sqrt2_minus_1():
    """1/2 on ++ and on --: the best product puts 1/2 on one of them, TV = 1 - 1/2 - (1 - 1/sqrt2)^2."""
    tv_min, a, b = product.min_tv_pair(np.array([0.5, 0.0, 0.0, 0.5]))
    assert tv_min == pytest.approx(np.sqrt(2) - 1, abs=1e-6)
    assert a == pytest.approx(b, abs=1e-4)
