"""Sampler throughput: the JAX samplers against the NumPy references, timed in the same process.

Throughput is site updates per second: a k-Gibbs step updates ``k`` sites of one chain, an
independent parallel step ``n``. JAX is timed warm (compiled by a first call) with
``block_until_ready``; each NumPy reference runs enough steps to take at least ``min_time``
seconds. Used by ``benchmarks/sampler_throughput.py`` and the chapter on k-Gibbs.

For the independent parallel sampler the benchmark also times the part of a step no
implementation of it can skip: the dense product ``x @ J`` for every chain and one random
word per site (drawn as :func:`gmlm_lib.samplers.run_chains` draws them). The per-chain NumPy
loop's time per step over that time is the ``ceiling``: the largest speed-up any JAX step
that does this work could reach on the machine.
"""

from __future__ import annotations

import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib import ising, numpy_samplers, samplers


def _timed(fn, min_time: float) -> tuple[float, int]:
    """Call ``fn()`` until ``min_time`` seconds have passed; (seconds per call, calls)."""
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / calls, calls


def throughput(n: int, num_chains: int, sampler: str, k: int = 1, *, dtype="float64", jax_steps: int = 200, numpy_steps: int = 1,
               min_time: float = 1.0, seed: int = 0) -> dict:
    """Site updates per second of one sampler (``"k-gibbs"`` or ``"independent-parallel"``) on a
    random n-site model (couplings N(0, 1/n), fields N(0, 0.3^2)), for ``num_chains`` chains:
    JAX (:func:`gmlm_lib.samplers.run_chains`), the per-chain NumPy loop, the vectorised NumPy."""
    key = jax.random.key(seed)
    model = ising.random_model(key, n, 1.0 / np.sqrt(n), 0.3)
    J, h = np.asarray(model.J), np.asarray(model.h)
    x0 = np.ones((num_chains, n), dtype=np.int8)
    rng = np.random.default_rng(seed)
    if sampler == "k-gibbs":
        s = samplers.k_gibbs(model, k, dtype)
        sites = k
        loop = lambda: numpy_samplers.k_gibbs(J, h, x0.copy(), k, numpy_steps, rng)  # noqa: E731
        vec = lambda: numpy_samplers.k_gibbs_vectorised(J, h, x0.copy(), k, numpy_steps, rng)  # noqa: E731
    elif sampler == "independent-parallel":
        s = samplers.independent_parallel(model, dtype)
        sites = n
        loop = lambda: numpy_samplers.independent_parallel(J, h, x0.copy(), numpy_steps, rng)  # noqa: E731
        vec = lambda: numpy_samplers.independent_parallel_vectorised(J, h, x0.copy(), numpy_steps, rng)  # noqa: E731
    else:
        raise ValueError(f"sampler must be 'k-gibbs' or 'independent-parallel'; got {sampler!r}.")
    xj = jnp.asarray(x0)
    run = lambda: jax.block_until_ready(samplers.run_chains(key, s, xj, jax_steps, chunk=jax_steps).final)  # noqa: E731
    run()  # compile
    t_jax, _ = _timed(run, min_time)
    t_loop, _ = _timed(loop, min_time)
    t_vec, _ = _timed(vec, min_time)
    updates = num_chains * sites
    out = {
        "n": n, "chains": num_chains, "sampler": s.name, "dtype": str(dtype),
        "jax": updates * jax_steps / t_jax,
        "numpy_loop": updates * numpy_steps / t_loop,
        "numpy_vectorised": updates * numpy_steps / t_vec,
    }
    out["speedup_vs_loop"] = out["jax"] / out["numpy_loop"]
    out["speedup_vs_vectorised"] = out["jax"] / out["numpy_vectorised"]
    out["ceiling_vs_loop"] = float("nan")
    if sampler == "independent-parallel":
        t_floor = parallel_step_floor(key, model, xj, dtype, min_time)
        out["ceiling_vs_loop"] = (t_loop / numpy_steps) / t_floor
    return out


def parallel_step_floor(key: jax.Array, model: ising.IsingModel, x: jax.Array, dtype="float64", min_time: float = 1.0) -> float:
    """Seconds per step of the work an independent parallel step over the chains ``x`` (C, n)
    cannot skip: ``x @ J`` in ``dtype`` and one uint32 random word per site from per-chain keys
    ``fold_in(fold_in(key, t), c)``. Inputs are passed as arguments (no constant folding)."""
    J = model.J.astype(dtype)
    chains = jnp.arange(x.shape[0])

    @jax.jit
    def floor(key, t, x, J):
        keys = jax.vmap(lambda c: jax.random.fold_in(jax.random.fold_in(key, t), c))(chains)
        bits = jax.vmap(lambda k: jax.random.bits(k, (x.shape[1],), dtype=jnp.uint32))(keys)
        return x.astype(J.dtype) @ J, bits

    step = lambda: jax.block_until_ready(floor(key, 0, x, J))  # noqa: E731
    step()  # compile
    return _timed(step, min_time)[0]


def machine() -> dict:
    """Where the numbers were measured."""
    return {
        "backend": jax.default_backend(),
        "devices": [d.device_kind for d in jax.devices()],
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "jax": jax.__version__,
    }


def matmul_peak(size: int = 2048, dtype="float32", min_time: float = 2.0) -> float:
    """Measured FLOP/s of one jitted ``size x size`` matrix product (2 size^3 flops) on the
    default device: the practical matmul peak that training throughput is compared with."""
    a = jnp.ones((size, size), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    seconds, _ = _timed(lambda: f(a).block_until_ready(), min_time)
    return 2.0 * size**3 / seconds
