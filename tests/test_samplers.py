"""Samplers [Definitions 6, 8, 10, 11]: exact kernels against their definitions, invariance of p,
empirical frequencies against p, the independent parallel sampler's product form and its wrong
stationary law, and the runner's bookkeeping."""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import re
import subprocess
import sys

import brute
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmlm_lib import ising
from gmlm_lib.ising import bench, markov, masks, numpy_samplers, samplers


def _model(n=5, seed=3, scale=0.8):
    rng = np.random.default_rng(seed)
    J, h = brute.random_model(rng, n, scale)
    return J, h, ising.ising_model(J, h)


def _uniform_w(n, k):
    """Every k-subset once, as masks, with the uniform weight table brute.transition expects."""
    combos = list(itertools.combinations(range(n), k))
    subsets = np.zeros((len(combos), n), dtype=bool)
    for r, s in enumerate(combos):
        subsets[r, list(s)] = True
    return subsets, np.full((2**n, len(combos)), 1.0 / len(combos))


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_k_gibbs_kernel_is_definition_10(k):
    """[Definition 10]"""
    J, h, model = _model()
    subsets, W = _uniform_w(5, k)
    P = samplers.transition_matrix(samplers.k_gibbs(model, k))
    np.testing.assert_allclose(np.asarray(P), brute.transition(J, h, subsets, W), atol=1e-13)


def test_block_dynamics_kernels_are_definitions_6_and_8():
    """[Definitions 6, 8]"""
    J, h, model = _model()
    subsets = np.array([[1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 1, 0, 1, 1]], dtype=bool)
    w = np.array([0.5, 0.2, 0.3])
    P = samplers.transition_matrix(samplers.block_dynamics(model, masks.from_weights(subsets, w)))
    np.testing.assert_allclose(np.asarray(P), brute.transition(J, h, subsets, np.tile(w, (32, 1))), atol=1e-13)

    def rule(states):  # mask the first pair more often when its sites disagree
        s = np.asarray(states)
        a = np.where(s[:, 0] != s[:, 1], 0.7, 0.2)
        return np.stack([a, (1 - a) / 2, (1 - a) / 2], axis=1)

    dist = masks.adaptive(subsets, rule)
    P = samplers.transition_matrix(samplers.adaptive_block_dynamics(model, dist))
    np.testing.assert_allclose(np.asarray(P), brute.transition(J, h, subsets, np.asarray(dist.weights)), atol=1e-13)
    np.testing.assert_allclose(np.asarray(P), np.asarray(markov.transition_matrix(model, dist)), atol=1e-13)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 4), seed=st.integers(0, 2**31 - 1), scale=st.floats(0.0, 2.0), adaptive=st.booleans())
def test_property_block_dynamics_kernels_on_random_models_and_masks(n, seed, scale, adaptive):
    """Random models, random sets of distinct non-empty masks, random fixed weights or a random
    state-dependent rule: the kernel is Definition 6 / 8 (brute force), a stochastic matrix, and
    reversible with respect to p (detailed balance p(x) P(x, y) = p(y) P(y, x), so p is invariant)."""
    rng = np.random.default_rng(seed)
    J, h = brute.random_model(rng, n, scale)
    model = ising.ising_model(J, h)
    codes = rng.choice(np.arange(1, 2**n), size=min(int(rng.integers(1, 5)), 2**n - 1), replace=False)
    subsets = ((codes[:, None] >> np.arange(n)) & 1).astype(bool)  # distinct, none empty
    m = len(subsets)
    if adaptive:
        A, b = rng.normal(size=(n, m)), rng.normal(size=m)

        def rule(states):
            z = np.asarray(states, dtype=np.float64) @ A + b
            e = np.exp(z - z.max(1, keepdims=True))
            return e / e.sum(1, keepdims=True)

        dist = masks.adaptive(subsets, rule)
        sampler = samplers.adaptive_block_dynamics(model, dist)
        W = np.asarray(dist.weights)
    else:
        w = rng.random(m) + 0.05
        dist = masks.from_weights(subsets, w / w.sum())
        sampler = samplers.block_dynamics(model, dist)
        W = np.tile(np.asarray(dist.weights), (2**n, 1))
    P = np.asarray(samplers.transition_matrix(sampler))
    np.testing.assert_allclose(P, brute.transition(J, h, subsets, W), atol=1e-13)
    assert P.min() >= 0 and np.abs(P.sum(1) - 1).max() < 1e-13
    flow = brute.probs(J, h)[:, None] * P
    assert np.abs(flow - flow.T).max() < 1e-14


def test_independent_parallel_kernel_is_definition_11_and_a_product():
    """[Definition 11; Proposition 4]"""
    J, h, model = _model(n=4)
    P = np.asarray(samplers.transition_matrix(samplers.independent_parallel(model)))
    np.testing.assert_allclose(P, brute.independent_parallel_transition(J, h), atol=1e-14)
    # each row is the product of its one-site marginals
    X = brute.states(4)
    for row in P:
        marg = [(row * (X[:, i] > 0)).sum() for i in range(4)]
        prod = np.prod([np.where(X[:, i] > 0, marg[i], 1 - marg[i]) for i in range(4)], axis=0)
        np.testing.assert_allclose(row, prod, atol=1e-14)


@pytest.mark.parametrize("make", [lambda m: samplers.k_gibbs(m, 1), lambda m: samplers.k_gibbs(m, 3),
                                  lambda m: samplers.block_dynamics(m, masks.from_weights([[1, 1, 0, 0, 0], [0, 0, 1, 1, 1]], [0.4, 0.6]))])
def test_p_is_invariant_exactly(make):
    _, _, model = _model()
    p = ising.probabilities(model)
    P = samplers.transition_matrix(make(model))
    assert float(jnp.max(jnp.abs(p @ P - p))) < 1e-15


def test_independent_parallel_stationary_law_is_not_p():
    """On a coupled model the product transition's stationary law differs from p (Definition 11's
    footnote); at J = 0 the sites are independent and it is exactly p."""
    model = ising.clique_plus_independent(4, 3, 0.8, 0.3)
    P = samplers.transition_matrix(samplers.independent_parallel(model))
    pi = samplers.stationary_law(P)
    assert float(jnp.max(jnp.abs(pi @ P - pi))) < 1e-12
    assert 0.5 * float(jnp.abs(pi - ising.probabilities(model)).sum()) > 0.05
    free = ising.clique_plus_independent(4, 3, 0.0, 0.3)
    pi0 = samplers.stationary_law(samplers.transition_matrix(samplers.independent_parallel(free)))
    np.testing.assert_allclose(np.asarray(pi0), np.asarray(ising.probabilities(free)), atol=1e-12)


@pytest.mark.parametrize("name", ["2-gibbs", "adaptive"])
def test_empirical_frequencies_after_burn_in_match_p(name):
    """4,000 chains, 60 steps of burn-in from all +1: the state histogram is within 4.5 standard
    errors of p in every state (a fixed seed; 32 states)."""
    _, _, model = _model(seed=7, scale=0.5)
    if name == "2-gibbs":
        s = samplers.k_gibbs(model, 2)
    else:
        subsets = np.eye(5, dtype=bool) | np.roll(np.eye(5, dtype=bool), 1, axis=1)
        s = samplers.adaptive_block_dynamics(model, masks.adaptive(subsets, lambda st: np.where(np.asarray(st)[:, :1] > 0, 0.4, 0.1) * np.eye(5)[0] + np.where(np.asarray(st)[:, :1] > 0, 0.15, 0.225) * (1 - np.eye(5)[0])))
    C = 4000
    run = samplers.run_chains(jax.random.key(11), s, jnp.ones((C, 5), jnp.int8), 60, thin=60,
                              observe=lambda xs: jnp.bincount(ising.index_from_states(xs), length=32))
    freq = np.asarray(run.observations[-1]) / C
    p = np.asarray(ising.probabilities(model))
    z = np.abs(freq - p) / np.sqrt(p * (1 - p) / C)
    assert z.max() < 4.5, z.max()
    # and the chain really moved: the start state is not over-represented
    assert freq[-1] < p[-1] + 4.5 * np.sqrt(p[-1] / C)


def test_one_step_frequencies_match_the_kernel_row():
    """The step samples what the kernel says: 20,000 single steps from one state of a 6-site model."""
    _, _, model = _model(n=6, seed=5)
    s = samplers.k_gibbs(model, 2)
    x = jnp.asarray([1, -1, 1, 1, -1, -1], jnp.int8)
    row = np.asarray(s.kernel(x))
    keys = jax.random.split(jax.random.key(2), 20000)
    ys = jax.vmap(s.step, in_axes=(0, None))(keys, s.init(x))[0].x
    freq = np.bincount(np.asarray(ising.index_from_states(ys)), minlength=64) / 20000
    se = np.sqrt(np.maximum(row * (1 - row), 1e-12) / 20000)
    assert np.max(np.abs(freq - row) / se) < 4.5
    assert np.all(freq[row == 0] == 0)


def test_uniform_subset_is_uniform():
    keys = jax.random.split(jax.random.key(0), 30000)
    bits = jax.vmap(lambda k: jax.random.bits(k, (3,), dtype=jnp.uint32))(keys)
    subs = np.sort(np.asarray(jax.vmap(lambda b: samplers._uniform_subset(b, 6, 3))(bits)), axis=1)
    assert np.all(np.diff(subs, axis=1) > 0)  # three distinct sites
    _, counts = np.unique(subs, axis=0, return_counts=True)
    assert len(counts) == 20
    expected = 30000 / 20
    assert np.max(np.abs(counts - expected)) / np.sqrt(expected) < 4.5


def test_a_run_of_chains_compiles_its_start_and_its_chunks_only():
    """Compile once: a run's start (the cast to int8, the first hitting times and step 0's observation) is one
    program and each chunk length one more; stacking the observations compiles nothing (host side), so a
    first run at a new shape with two chunk lengths (9 steps, then 3) compiles exactly three programs, and
    an observation of several operations adds none of its own. The observations are the stacked pieces."""
    from gmlm_lib.core import timing

    model = ising.clique_plus_independent(6, 3, 1.0, 0.5)
    s = samplers.k_gibbs(model, 3)
    x0 = np.tile(np.array([-1, -1, -1, 1, 1, 1]), (23, 1))  # a host array of int64: cast inside the start program
    plus = lambda xs: jnp.all(xs[:, :3] > 0, axis=1)  # noqa: E731
    observe = lambda xs: jnp.mean(plus(xs)) + jnp.std(xs.astype(jnp.float32))  # noqa: E731
    key = jax.random.key(4)
    clock = timing.compile_clock()
    run = samplers.run_chains(key, s, x0, 12, target=plus, observe=observe, chunk=9)
    assert timing.compiles_since(clock)["compilations"] == 3
    assert isinstance(run.observations, np.ndarray) and run.observations.shape == (13,)
    assert run.final.dtype == jnp.int8 and run.recorded_steps.tolist() == list(range(13))
    again = samplers.run_chains(key, s, jnp.asarray(x0, jnp.int8), 12, target=plus, observe=observe, chunk=12)
    np.testing.assert_array_equal(np.asarray(again.final), np.asarray(run.final))
    np.testing.assert_allclose(again.observations, run.observations)


def test_runner_hitting_times_and_determinism():
    """[Figure 3]"""
    model = ising.clique_plus_independent(6, 3, 1.0, 0.5)
    x0 = jnp.tile(jnp.asarray([-1, -1, -1, 1, 1, 1], jnp.int8), (200, 1))
    plus = lambda xs: jnp.all(xs[:, :3] > 0, axis=1)  # noqa: E731
    s = samplers.k_gibbs(model, 3)
    a = samplers.run_chains(jax.random.key(4), s, x0, 60, target=plus, observe=lambda xs: jnp.mean(plus(xs)), thin=3, chunk=9)
    b = samplers.run_chains(jax.random.key(4), s, x0, 60, target=plus, observe=lambda xs: jnp.mean(plus(xs)), thin=1, chunk=60)
    np.testing.assert_array_equal(np.asarray(a.final), np.asarray(b.final))  # chunking and thinning do not matter
    np.testing.assert_array_equal(np.asarray(a.hitting_time), np.asarray(b.hitting_time))
    np.testing.assert_allclose(np.asarray(a.observations), np.asarray(b.observations)[::3])
    assert a.recorded_steps.tolist() == list(range(0, 61, 3))
    t = np.asarray(a.hitting_time)
    assert np.all((t == -1) | (t >= 1)) and np.mean(t > 0) > 0.5
    # the recorded fraction in X_+ never exceeds the fraction that has hit X_+ by then
    hit_by = np.array([(t > 0) & (t <= r) for r in a.recorded_steps]).mean(1)
    assert np.all(np.asarray(a.observations) <= hit_by + 1e-12)
    assert samplers.median_hitting_time([-1, -1, 3]) == np.inf
    assert samplers.median_hitting_time([1, 2, 3, -1]) == 2.5
    assert samplers.median_hitting_time([0, 0, 5]) == 0.0  # a chain that starts at the target hits at step 0


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_independent_parallel_step_has_the_kernel_law(dtype):
    _, _, model = _model(n=4, seed=9)
    s = samplers.independent_parallel(model, dtype=dtype)
    x = jnp.asarray([1, -1, 1, 1], jnp.int8)
    row = np.asarray(s.kernel(x))
    ys = jax.vmap(s.step, in_axes=(0, None))(jax.random.split(jax.random.key(3), 20000), s.init(x))[0].x
    freq = np.bincount(np.asarray(ising.index_from_states(ys)), minlength=16) / 20000
    assert np.max(np.abs(freq - row) / np.sqrt(row * (1 - row) / 20000)) < 4.5


def test_bad_inputs():
    _, _, model = _model()
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 5\]; got 0"):
        samplers.k_gibbs(model, 0)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 5\]; got 6"):
        samplers.k_gibbs(model, 6)
    with pytest.raises(TypeError, match="k must be an integer"):
        samplers.k_gibbs(model, 2.0)
    with pytest.raises(ValueError, match="clique must have at least one site"):
        ising.clique_plus_independent(6, 0, 1.0, 0.5)
    s = samplers.k_gibbs(model, 2)
    with pytest.raises(ValueError, match=r"start state must have shape \(5,\)"):
        s.init(jnp.ones(4, jnp.int8))
    with pytest.raises(ValueError, match=r"x0 must be a \(num_chains, 5\) batch"):
        samplers.run_chains(jax.random.key(0), s, jnp.ones((3, 4), jnp.int8), 10)
    with pytest.raises(ValueError, match="only -1 and \\+1"):
        samplers.run_chains(jax.random.key(0), s, jnp.zeros((3, 5), jnp.int8), 10)
    with pytest.raises(ValueError, match="thin must be a positive divisor"):
        samplers.run_chains(jax.random.key(0), s, jnp.ones((3, 5), jnp.int8), 10, thin=3)
    with pytest.raises(ValueError, match="use adaptive_block_dynamics"):
        samplers.block_dynamics(model, masks.adaptive(np.eye(5, dtype=bool), lambda st: np.full((32, 5), 0.2)))
    with pytest.raises(ValueError, match="exact transition matrices need n <= 6"):
        samplers.transition_matrix(samplers.k_gibbs(ising.clique_plus_independent(7, 2, 1.0, 0.1), 2))
    with pytest.raises(ValueError, match="dtype must be float32 or float64"):
        samplers.independent_parallel(model, dtype=jnp.int32)


def test_stop_when_all_hit_keeps_the_hitting_times():
    model = ising.clique_plus_independent(6, 2, 0.5, 0.5)
    x0 = jnp.tile(jnp.asarray([-1, -1, 1, 1, 1, 1], jnp.int8), (50, 1))
    plus = lambda xs: jnp.all(xs[:, :2] > 0, axis=1)  # noqa: E731
    s = samplers.k_gibbs(model, 6)
    full = samplers.run_chains(jax.random.key(0), s, x0, 400, target=plus, chunk=20)
    early = samplers.run_chains(jax.random.key(0), s, x0, 400, target=plus, chunk=20, stop_when_all_hit=True)
    np.testing.assert_array_equal(np.asarray(full.hitting_time), np.asarray(early.hitting_time))
    assert np.all(np.asarray(early.hitting_time) > 0)
    assert early.recorded_steps[-1] < 400 and early.recorded_steps[-1] % 20 == 0
    # chains that start in the target hit at step 0 and keep it; the run stops after its first chunk
    half = x0.at[:25, :2].set(1)
    again = samplers.run_chains(jax.random.key(0), s, half, 400, target=plus, chunk=20, stop_when_all_hit=True)
    hit = np.asarray(again.hitting_time)
    assert np.all(hit[:25] == 0) and np.all(hit[25:] > 0)
    started = samplers.run_chains(jax.random.key(0), s, x0.at[:, :2].set(1), 400, target=plus, chunk=20,
                                  stop_when_all_hit=True)
    assert np.all(np.asarray(started.hitting_time) == 0) and started.recorded_steps[-1] == 20


def test_samplers_refuse_a_model_or_mask_law_they_cannot_run():
    """A sampler needs an IsingModel, and a block sampler a mask law over the model's sites (fixed or adaptive)."""
    model = _model(n=4, seed=5)[2]
    for make in (lambda m: samplers.k_gibbs(m, 1), samplers.independent_parallel):
        with pytest.raises(TypeError, match="model must be an IsingModel .*; got ndarray"):
            make(np.zeros((4, 4)))
    for make in (samplers.block_dynamics, samplers.adaptive_block_dynamics):
        with pytest.raises(ValueError, match="the mask distribution is over n = 5 sites but the model has n = 4"):
            make(model, masks.uniform_k(5, 2))


@pytest.mark.parametrize("name", ["k-gibbs", "independent-parallel"])
def test_numpy_references_have_the_kernel_law(name):
    """The benchmark's NumPy references (loop and vectorised) draw one step from the same law as
    the exact kernel: frequencies over 8,000 chains from one start state, within 4.5 SE."""
    J, h, model = _model(n=4, seed=5)
    x = np.asarray([1, -1, -1, 1], np.int8)
    if name == "k-gibbs":
        row = np.asarray(samplers.k_gibbs(model, 2).kernel(jnp.asarray(x)))
        refs = [lambda xs, rng: numpy_samplers.k_gibbs(J, h, xs, 2, 1, rng),
                lambda xs, rng: numpy_samplers.k_gibbs_vectorised(J, h, xs, 2, 1, rng)]
    else:
        row = np.asarray(samplers.independent_parallel(model).kernel(jnp.asarray(x)))
        refs = [lambda xs, rng: numpy_samplers.independent_parallel(J, h, xs, 1, rng),
                lambda xs, rng: numpy_samplers.independent_parallel_vectorised(J, h, xs, 1, rng)]
    N = 8000
    for ref in refs:
        ys = ref(np.tile(x, (N, 1)), np.random.default_rng(0))
        freq = np.bincount(np.asarray(ising.index_from_states(jnp.asarray(ys))), minlength=16) / N
        se = np.sqrt(np.maximum(row * (1 - row), 1e-12) / N)
        assert np.max(np.abs(freq - row) / se) < 4.5


def test_numpy_k_gibbs_references_survive_fields_where_exp_overflows():
    """The references shift the log-weights of the ``2^k`` completions by their maximum before ``exp``: at
    fields of 400 (``exp(800)`` overflows) one 2-Gibbs step from all -1 sets its two sites to the favoured +1."""
    J, h = np.zeros((5, 5)), np.full(5, 400.0)
    for ref in (numpy_samplers.k_gibbs, numpy_samplers.k_gibbs_vectorised):
        with np.errstate(over="raise", invalid="raise"):  # underflow to 0 is the point of the shift
            ys = ref(J, h, -np.ones((50, 5), np.int8), 2, 1, np.random.default_rng(0))
        np.testing.assert_array_equal((ys == 1).sum(1), 2)


def test_throughput_report():
    ip = bench.throughput(8, 4, "independent-parallel", min_time=0.01, jax_steps=2)
    assert ip["speedup_vs_loop"] == pytest.approx(ip["jax"] / ip["numpy_loop"])
    for name in ("ceiling_vs_loop", "product_ceiling_vs_loop"):
        assert np.isfinite(ip[name]) and ip[name] > 0
    kg = bench.throughput(8, 4, "k-gibbs", 2, min_time=0.01, jax_steps=2)
    assert kg["sampler"] == "2-Gibbs" and np.isnan(kg["ceiling_vs_loop"]) and np.isnan(kg["product_ceiling_vs_loop"])
    with pytest.raises(ValueError, match="sampler must be 'k-gibbs' or 'independent-parallel'"):
        bench.throughput(8, 4, "gibbs")


@pytest.mark.parametrize("name", ["k-gibbs", "independent-parallel"])
def test_throughput_follows_from_the_measured_times(monkeypatch, name):
    """The report's numbers are the module's definitions applied to the contestants' times, checked on
    stand-in times: site updates per second (k sites a k-Gibbs step, n an independent parallel step, per
    chain), the speed-ups, and each ceiling as the loop's time per step over its floor's time per step.
    Each contestant is timed for ``min_time``, on the documented model (couplings of scale 1/sqrt(n))."""
    times = {"jax": 2.0, "loop": 3.0, "vec": 5.0, "floor": 7.0, "product": 11.0}
    slower = {"jax": (1.0, 1.5, 1.2), "loop": (1.3, 1.0, 1.1)}  # each round's time over the fastest
    seen = {}

    def stand_in(fns, total):
        seen["names"], seen["total"] = sorted(fns), total
        return {f: [times[f] * s for s in slower.get(f, (1.0, 1.0, 1.0))] for f in fns}

    real = bench.ising.random_model

    def spy(key, n, coupling_scale, field_scale):
        seen["scales"] = (coupling_scale, field_scale)
        return real(key, n, coupling_scale, field_scale)

    monkeypatch.setattr(bench, "round_times", stand_in)
    monkeypatch.setattr(bench.ising, "random_model", spy)
    n, chains, k, jax_steps, numpy_steps = 9, 4, 2, 6, 3
    out = bench.throughput(n, chains, name, k, jax_steps=jax_steps, numpy_steps=numpy_steps, min_time=0.5)
    assert seen["scales"] == pytest.approx((1 / 3, 0.3))
    sites = k if name == "k-gibbs" else n
    want = {"jax": chains * sites * jax_steps / 2.0, "numpy_loop": chains * sites * numpy_steps / 3.0,
            "numpy_vectorised": chains * sites * numpy_steps / 5.0}
    for field, value in want.items():
        assert out[field] == pytest.approx(value)
    assert out["speedup_vs_loop"] == pytest.approx(want["jax"] / want["numpy_loop"])
    # the range over rounds: each round's two times (round 1: loop 1.0 x, jax 1.5 x its fastest), with the best
    per_round = [out["speedup_vs_loop"] * lo / fa for fa, lo in zip(slower["jax"], slower["loop"])]
    assert out["speedup_vs_loop_lo"] == pytest.approx(min(per_round)) and min(per_round) < out["speedup_vs_loop"]
    assert out["speedup_vs_loop_hi"] == pytest.approx(max(per_round)) and max(per_round) > out["speedup_vs_loop"]
    assert out["speedup_vs_vectorised"] == pytest.approx(want["jax"] / want["numpy_vectorised"])
    if name == "k-gibbs":
        assert seen["names"] == ["jax", "loop", "vec"] and seen["total"] == pytest.approx(1.5)
    else:
        assert seen["names"] == ["floor", "jax", "loop", "product", "vec"] and seen["total"] == pytest.approx(2.5)
        assert out["ceiling_vs_loop"] == pytest.approx((3.0 / numpy_steps) / (7.0 / jax_steps))
        assert out["product_ceiling_vs_loop"] == pytest.approx((3.0 / numpy_steps) / (11.0 / jax_steps))


def test_floor_step_with_random_words_is_the_documented_comparison():
    """The ceiling's floor step is, per site, ``(x J > 0) xor (word >= 2^31)`` with one uint32 word per site
    from the keys ``chain_keys`` gives ``run_chains``: replayed step by step in NumPy from the same words."""
    model = ising.random_model(jax.random.key(4), 6, 0.8, 0.3)
    key = jax.random.key(2)
    x0 = jnp.asarray(np.random.default_rng(3).choice([-1, 1], size=(3, 6)), jnp.int8)
    want = np.asarray(x0, np.float64)
    for t in range(5):
        keys = samplers.chain_keys(key, t, 3)
        words = np.asarray(jax.vmap(lambda c: jax.random.bits(c, (6,), dtype=jnp.uint32))(keys))
        want = np.where((want @ np.asarray(model.J) > 0) ^ (words >= 2**31), 1, -1)
    got = bench.parallel_step_floor(key, model, x0, 5)()
    np.testing.assert_array_equal(np.asarray(got), want)


def test_floor_steps_do_the_product_every_step():
    """The ceilings' floor steps are not optimised away: without random words the floor is the
    map x -> sign(x J) iterated (checked against NumPy), and with them it is a different chain."""
    model = ising.random_model(jax.random.key(3), 7, 0.8, 0.3)
    x0 = jnp.asarray(np.random.default_rng(1).choice([-1, 1], size=(5, 7)), jnp.int8)
    want = np.asarray(x0, np.float64)
    for _ in range(4):
        want = np.where(want @ np.asarray(model.J) > 0, 1, -1)
    product_only = bench.parallel_step_floor(jax.random.key(0), model, x0, 4, random_words=False)()
    np.testing.assert_array_equal(np.asarray(product_only), want)
    with_words = bench.parallel_step_floor(jax.random.key(0), model, x0, 4)()
    assert set(np.unique(np.asarray(with_words))) <= {-1, 1}
    assert not np.array_equal(np.asarray(with_words), want)


def test_progress_bar_honours_tqdm_disable(monkeypatch, capsys):
    """progress=True shows a bar, unless TQDM_DISABLE is set (the book's runner sets it, so a
    stored notebook holds no progress bars): an explicit disable=False would override it."""
    s = samplers.k_gibbs(_model(seed=1)[2], 1)
    x0 = jnp.ones((2, 5), jnp.int8)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    samplers.run_chains(jax.random.key(0), s, x0, 3, progress=True)
    assert "1-Gibbs" in capsys.readouterr().err
    monkeypatch.setenv("TQDM_DISABLE", "1")
    samplers.run_chains(jax.random.key(0), s, x0, 3, progress=True)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("stop", [False, True])
def test_run_chains_reports_its_steps_to_the_bar_and_closes_it(monkeypatch, stop):
    """The bar advances by the steps each chunk ran and is closed when the run ends (early, once every
    chain has hit the target, too): a bar left open stays on the page below the cell's output."""
    events = []

    class Bar:
        def update(self, k):
            events.append(k)

        def close(self):
            events.append("close")

    monkeypatch.setattr(samplers, "progress_bar", lambda **kw: Bar())
    s = samplers.k_gibbs(_model(seed=1)[2], 1)
    target = (lambda xs: jnp.ones(xs.shape[0], bool)) if stop else None
    samplers.run_chains(jax.random.key(0), s, jnp.ones((2, 5), jnp.int8), 12, thin=2, chunk=4, target=target,
                        stop_when_all_hit=stop)
    assert events == ([4, "close"] if stop else [4, 4, 4, "close"])


CORES_SCRIPT = r"""
import json, sys
import jax
sys.path.insert(0, sys.argv[1])
jax.config.update("jax_enable_x64", True)
from gmlm_lib import ising
from gmlm_lib.ising import bench, samplers
assert samplers.use_cpu_cores_as_devices(int(sys.argv[2])) == int(sys.argv[2])
import jax.numpy as jnp
model = ising.clique_plus_independent(6, 3, 1.0, 0.5)
x0 = jnp.tile(jnp.asarray([-1, -1, -1, 1, 1, 1], jnp.int8), (12, 1))
plus = lambda xs: jnp.all(xs[:, :3] > 0, axis=1)
out = {"sharded": samplers.chain_sharding(12) is not None}
for name, s in [("2-gibbs", samplers.k_gibbs(model, 2)), ("ip", samplers.independent_parallel(model))]:
    r = samplers.run_chains(jax.random.key(5), s, x0, 40, target=plus, observe=lambda xs: jnp.mean(plus(xs)), thin=4)
    out[name] = [r.final.tolist(), r.hitting_time.tolist(), r.observations.tolist()]
floor = bench.parallel_step_floor(jax.random.key(5), model, x0, 3)()
out["floor"], out["floor_devices"] = floor.tolist(), len(floor.sharding.device_set)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_chains_sharded_over_cpu_cores_match_one_device():
    """use_cpu_cores_as_devices: with 2 CPU devices run_chains splits the chains over them and
    gives the same chains, bit for bit, as one device (each chain's keys do not depend on the
    layout); the benchmark's floor step runs on the same layout."""
    root = pathlib.Path(__file__).resolve().parents[1]
    runs = {}
    for count in (1, 2):
        res = subprocess.run([sys.executable, "-c", CORES_SCRIPT, str(root), str(count)], capture_output=True,
                             text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        assert res.returncode == 0, res.stderr[-3000:]
        runs[count] = json.loads(res.stdout.strip().splitlines()[-1])
    assert not runs[1].pop("sharded") and runs[2].pop("sharded")
    assert (runs[1].pop("floor_devices"), runs[2].pop("floor_devices")) == (1, 2)
    assert runs[1] == runs[2]
    assert sum(t > 0 for t in runs[1]["2-gibbs"][1]) >= 6  # the chains moved: most reached X_+


def test_cpu_devices_cannot_change_once_jax_runs():
    have = len(jax.devices("cpu"))  # the backends are up in this process
    with pytest.raises(RuntimeError, match="before JAX computes anything"):
        samplers.use_cpu_cores_as_devices(have + 1)
    assert samplers.use_cpu_cores_as_devices(have) == have  # asking for what it has is fine
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        samplers.use_cpu_cores_as_devices(0)


def _zero_model(n):
    return ising.ising_model(np.zeros((n, n)), np.zeros(n))


@pytest.mark.parametrize("build, refusal", [
    (lambda n: samplers.k_gibbs(_zero_model(n), n), "k = {n} needs 2^k"),
    (lambda n: samplers.block_dynamics(_zero_model(n), masks.from_weights(np.ones((1, n), bool), np.ones(1))),
     "a mask has {n} sites"),
    (lambda n: samplers.dependency_aware(_zero_model(n), groups=[tuple(range(n))]), "a group has {n} sites"),
])
def test_joint_updates_take_blocks_up_to_the_size_limit(build, refusal):
    """A block (k-subset, mask, group) of MAX_JOINT_K sites, 2^16 completions a step, is built; one
    more site is refused, naming the limit."""
    k = samplers.MAX_JOINT_K
    assert isinstance(build(k), samplers.Sampler)
    with pytest.raises(ValueError, match=f"{re.escape(refusal.format(n=k + 1))}.*{k}"):
        build(k + 1)


def test_site_log_probs_are_both_columns_of_each_sites_conditional():
    """Columns (-1, +1) of log p(x_i | x_{-i}), by brute force over the two values of each site."""
    J, h, model = _model(n=4, seed=2)
    x = np.asarray([1, -1, -1, 1], np.int8)
    got = np.asarray(samplers.site_log_probs(model, jnp.asarray(x)))
    for i in range(4):
        for col, v in enumerate((-1, 1)):
            y = x.astype(np.int64)
            y[i] = v
            assert got[i, col] == pytest.approx(brute.conditional(J, h, y, [i]), abs=1e-12)


def test_run_chains_compiles_once_for_every_model_of_a_structure():
    """Compile once: k-Gibbs and independent parallel take their model as an operand, so a sweep over
    couplings (a new model each time) runs the programs its first model compiled."""
    from gmlm_lib.core import timing

    n, c = 6, 3
    start = ising.light_mode_states(8, n, c)
    heavy = lambda xs: ising.in_heavy_mode(xs, c)  # noqa: E731

    def sweep(J):
        model = ising.clique_plus_independent(n, c, J, 0.5)
        for s in (samplers.k_gibbs(model, 2), samplers.independent_parallel(model)):
            samplers.run_chains(jax.random.key(0), s, start, 20, target=heavy, chunk=10)

    sweep(0.5)
    clock = timing.compile_clock()
    sweep(1.5)
    assert timing.compiles_since(clock)["compilations"] == 0


def test_the_median_of_no_chains_is_refused():
    with pytest.raises(ValueError, match="hitting_time holds no chain"):
        samplers.median_hitting_time([])


@pytest.mark.parametrize("build", [samplers.independent_parallel, lambda m: samplers.k_gibbs(m, 2),
                                   lambda m: samplers.dependency_aware(m, groups=[(0, 1), (2,), (3,)])])
def test_transition_matrices_of_one_structure_share_one_program_and_are_each_models_own(build):
    """transition_matrix takes the model as an operand (Sampler.kernel_core): models of one structure
    compile the matrix once, and each matrix is its own model's, row for row its kernel."""
    models = [ising.random_model(jax.random.key(s), 4, 0.8, 0.4) for s in range(3)]
    built = [build(m) for m in models]
    assert len({s.kernel_core for s in built}) == 1
    program = samplers._matrix_program(built[0].kernel_core)  # shared by every n where the kernel is
    before = program._cache_size()
    P = [np.asarray(samplers.transition_matrix(s)) for s in built]
    assert program._cache_size() - before <= 1  # none more where an earlier test compiled this shape
    assert len({p.tobytes() for p in P}) == 3
    states = ising.enumerate_states(4)
    for s, p in zip(built, P):
        np.testing.assert_allclose(p[5], np.asarray(s.kernel(states[5])), atol=1e-14)
        np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
