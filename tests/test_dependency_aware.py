"""The dependency-aware parallel sampler (gmlm_lib.ising.samplers.dependency_aware), against brute force."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gmlm_lib.ising import model as ising
from gmlm_lib.ising import samplers


def _p(model):
    return np.asarray(jax.nn.softmax(ising.log_weights(model)))


def _brute_sweep(model, groups):
    """The sweep's transition matrix written from the definition with plain NumPy loops: pass t
    draws site g_t of every group from p(x_{g_t} | x_{-G}, x_{g<t}) (later sites of G summed out),
    all groups given the same current state."""
    n = model.n
    J, h = np.asarray(model.J), np.asarray(model.h)
    states = [np.array(s) for s in itertools.product([-1, 1], repeat=n)]
    index = {tuple(s): i for i, s in enumerate(states)}
    w = np.array([np.exp(0.5 * s @ J @ s + h @ s) for s in states])
    L = max(len(g) for g in groups)

    def up_prob(x, g, t):
        free = list(g[t:])
        num = den = 0.0
        for vals in itertools.product([-1, 1], repeat=len(free)):
            y = x.copy()
            y[free] = vals
            den += w[index[tuple(y)]]
            num += w[index[tuple(y)]] * (vals[0] > 0)
        return num / den

    M = np.eye(2**n)
    for t in range(L):
        P = np.zeros((2**n, 2**n))
        drawing = [g for g in groups if len(g) > t]
        for a, x in enumerate(states):
            ps = [up_prob(x, g, t) for g in drawing]
            for vals in itertools.product([-1, 1], repeat=len(drawing)):
                y = x.copy()
                prob = 1.0
                for g, v, pu in zip(drawing, vals, ps):
                    y[g[t]] = v
                    prob *= pu if v > 0 else 1 - pu
                P[a, index[tuple(y)]] += prob
        M = M @ P
    return M


@pytest.mark.parametrize("groups", [[(0, 2), (1,), (3,)], [(0, 1, 3), (2,)], [(3, 1), (0, 2)]])
def test_sweep_kernel_is_its_definition(groups):
    model = ising.random_model(jax.random.key(3), 4, 0.8, 0.4)
    P = np.asarray(samplers.transition_matrix(samplers.dependency_aware(model, groups=groups)))
    np.testing.assert_allclose(P, _brute_sweep(model, [tuple(g) for g in groups]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=0, atol=1e-12)


def test_each_sweep_kernel_is_one_compiled_program_not_one_per_operation():
    """The sweep's exact matrix is one jitted program with the model as an operand, one per (n, groups):
    run op by op, each pass's few dozen operations would compile as programs of their own, hundreds for
    the three models below, and on an accelerator compiling a program costs far more than running it.
    Three models split into the same groups share it: a fresh process compiles a handful of programs
    for their three transition matrices (at most 8), and the matrices are each model's own."""
    script = ("import json, jax, numpy as np\njax.config.update('jax_enable_x64', True)\n"
              "from gmlm_lib.core import timing\nfrom gmlm_lib.ising import model as ising, samplers\n"
              "models = [ising.clique_plus_independent(6, 3, J, 0.5) for J in (0.5, 1.0, 1.5)]\n"
              "clock = timing.compile_clock()\n"
              "P = [np.asarray(samplers.transition_matrix(samplers.dependency_aware(m, threshold=0.0))) for m in models]\n"
              "counted = timing.compiles_since(clock)\n"
              "counted['distinct'] = len({p.tobytes() for p in P})\n"
              "print(json.dumps(counted))")
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}  # every program compiled here
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    counted = json.loads(out.stdout.splitlines()[-1])
    assert 1 <= counted["compilations"] + counted["cache_hits"] <= 8, counted
    assert counted["distinct"] == 3, counted


def test_uncoupled_groups_make_an_exact_gibbs_block():
    """Eq. 6 (clique plus free sites): the groups are the clique and each free site, no coupling
    joins two groups, so a sweep draws exactly from p from every start (every row of the kernel is
    p) in c passes, where independent parallel's stationary law is not p."""
    model = ising.clique_plus_independent(5, 3, 1.5, 0.5)
    da = samplers.dependency_aware(model, threshold=0.0)
    assert samplers.dependency_groups(model, 0.0) == [(0, 1, 2), (3,), (4,)] and da.passes == 3
    P = np.asarray(samplers.transition_matrix(da))
    np.testing.assert_allclose(P, np.broadcast_to(_p(model), P.shape), rtol=0, atol=1e-12)
    ind = samplers.stationary_law(samplers.transition_matrix(samplers.independent_parallel(model)))
    assert 0.5 * np.abs(np.asarray(ind) - _p(model)).sum() > 0.02  # 0.045 here


def test_limits_are_independent_parallel_and_exact_sampling():
    model = ising.random_model(jax.random.key(5), 5, 0.6, 0.3)
    singletons = samplers.dependency_aware(model, threshold=10.0)  # nothing is strong: every site alone
    assert singletons.passes == 1
    np.testing.assert_allclose(samplers.transition_matrix(singletons),
                               samplers.transition_matrix(samplers.independent_parallel(model)), rtol=0, atol=1e-12)
    whole = samplers.dependency_aware(model, groups=[range(5)])
    P = np.asarray(samplers.transition_matrix(whole))
    np.testing.assert_allclose(P, np.broadcast_to(_p(model), P.shape), rtol=0, atol=1e-12)


def test_step_samples_the_kernel():
    model = ising.random_model(jax.random.key(8), 4, 0.9, 0.3)
    da = samplers.dependency_aware(model, groups=[(0, 2), (1, 3)])
    x0 = jnp.array([1, -1, -1, 1], jnp.int8)
    state = da.init(x0)
    keys = jax.random.split(jax.random.key(0), 40000)
    xs = jax.vmap(lambda k: da.step(k, state)[0].x)(keys)
    freq = np.bincount(np.asarray(ising.index_from_states(xs)), minlength=16) / len(keys)
    row = np.asarray(da.kernel(x0))
    assert 0.5 * np.abs(freq - row).sum() < 0.015
    # float32 steps sample the same law
    da32 = samplers.dependency_aware(model, groups=[(0, 2), (1, 3)], dtype=jnp.float32)
    xs32 = jax.vmap(lambda k: da32.step(k, state)[0].x)(keys)
    freq32 = np.bincount(np.asarray(ising.index_from_states(xs32)), minlength=16) / len(keys)
    assert 0.5 * np.abs(freq32 - row).sum() < 0.015


def test_groups_from_the_couplings():
    J = np.zeros((6, 6))
    for i, j, v in [(0, 3, 1.0), (3, 5, -2.0), (1, 2, 0.05), (2, 4, 0.7)]:
        J[i, j] = J[j, i] = v
    model = ising.ising_model(J, np.zeros(6))
    assert samplers.dependency_groups(model, 0.5) == [(0, 3, 5), (1,), (2, 4)]
    assert samplers.dependency_groups(model, 0.0) == [(0, 3, 5), (1, 2, 4)]
    assert samplers.dependency_groups(model, 5.0) == [(i,) for i in range(6)]


@pytest.mark.parametrize("kwargs, words", [
    (dict(threshold=-1.0), ["threshold", ">= 0"]),
    (dict(threshold=math.nan), ["threshold"]),
    (dict(), ["threshold", "groups", "exactly one"]),
    (dict(threshold=0.1, groups=[(0, 1, 2, 3)]), ["exactly one"]),
    (dict(groups=[(0, 1), (1, 2, 3)]), ["groups", "exactly one"]),
    (dict(groups=[(0, 1), (2,)]), ["groups", "0..3"]),
    (dict(groups=[(0, 1, 2, 3), ()]), ["non-empty"]),
])
def test_bad_options_are_named(kwargs, words):
    model = ising.random_model(jax.random.key(1), 4, 0.5, 0.5)
    with pytest.raises(ValueError) as err:
        samplers.dependency_aware(model, **kwargs)
    for w in words:
        assert w in str(err.value)
