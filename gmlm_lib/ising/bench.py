"""Sampler throughput: the JAX samplers against the NumPy references, timed in the same process.

Throughput is site updates per second: a k-Gibbs step updates ``k`` sites of one chain, an
independent parallel step ``n``. JAX is timed warm (compiled by a first call) with
``block_until_ready``. The contestants are timed in interleaved rounds (each round calls each
one for ``min_time / rounds`` seconds) and each is credited with its fastest call, so a burst
of load from elsewhere on the machine does not land on one side only. Used by
``benchmarks/sampler_throughput.py`` and the chapter on k-Gibbs.

For the independent parallel sampler the benchmark also times the work of a step that no
implementation of it can skip: the dense product ``x @ J`` for every chain and one random word per
site (from the same per-chain keys as :func:`gmlm_lib.ising.samplers.run_chains`), scanned over the
same number of steps as the sampler, the chains laid out over the devices as ``run_chains`` lays
them out. The per-chain NumPy loop's time per step over the fastest time of that one XLA program is
the ``ceiling``; the ``product_ceiling`` does the same for a program that computes the dense product
alone. Each is a measurement of one program on this machine, a reference point for what the
sampler's step costs, not a bound on every possible implementation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core.rng import key as random_key
from gmlm_lib.core.timing import round_times
from gmlm_lib.ising import model as ising
from gmlm_lib.ising import numpy_samplers, samplers


def throughput(n: int, num_chains: int, sampler: str, k: int = 1, *, dtype="float64", jax_steps: int = 200, numpy_steps: int = 1,
               min_time: float = 1.0, seed: int = 0) -> dict:
    """Site updates per second of one sampler (``"k-gibbs"`` or ``"independent-parallel"``) on a
    random n-site model (couplings N(0, 1/n), fields N(0, 0.3^2)), for ``num_chains`` chains:
    JAX (:func:`gmlm_lib.ising.samplers.run_chains`), the per-chain NumPy loop, the vectorised NumPy;
    for the independent parallel sampler also ``ceiling_vs_loop`` and ``product_ceiling_vs_loop``
    (see the module docstring). Each contestant is timed for ``min_time`` times the number of
    contestants (3, or 5 with the two floor steps of the ceilings), in 3 interleaved rounds."""
    key = random_key(seed)
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
    # laid out once as run_chains lays out chains (a host copy, not jnp.asarray: that compiles a program)
    xj = jax.device_put(x0, samplers.chain_sharding(num_chains))
    run = lambda: jax.block_until_ready(samplers.run_chains(key, s, xj, jax_steps, chunk=jax_steps).final)  # noqa: E731
    run()  # compile
    fns = {"jax": run, "loop": loop, "vec": vec}
    if sampler == "independent-parallel":
        fns["floor"] = parallel_step_floor(key, model, xj, jax_steps, dtype)
        fns["product"] = parallel_step_floor(key, model, xj, jax_steps, dtype, random_words=False)
    rounds = round_times(fns, min_time * len(fns))
    t = {name: min(times) for name, times in rounds.items()}
    updates = num_chains * sites
    out = {
        "n": n, "chains": num_chains, "sampler": s.name, "dtype": str(dtype),
        "jax": updates * jax_steps / t["jax"],
        "numpy_loop": updates * numpy_steps / t["loop"],
        "numpy_vectorised": updates * numpy_steps / t["vec"],
    }
    out["speedup_vs_loop"] = out["jax"] / out["numpy_loop"]
    # the speed-up as each round measured it (its two timings from the same round), and the best one: the
    # spread a verdict against a bar must clear
    per_round = [(loop / numpy_steps) / (fast / jax_steps) for fast, loop in zip(rounds["jax"], rounds["loop"])]
    out["speedup_vs_loop_lo"] = min(per_round + [out["speedup_vs_loop"]])
    out["speedup_vs_loop_hi"] = max(per_round + [out["speedup_vs_loop"]])
    out["speedup_vs_vectorised"] = out["jax"] / out["numpy_vectorised"]
    for name, floor in [("ceiling_vs_loop", "floor"), ("product_ceiling_vs_loop", "product")]:
        out[name] = (t["loop"] / numpy_steps) / (t[floor] / jax_steps) if floor in t else float("nan")
    return out


def parallel_step_floor(key: jax.Array, model: ising.IsingModel, x: jax.Array, num_steps: int, dtype="float64",
                        random_words: bool = True):
    """A compiled, warm callable that runs ``num_steps`` steps of the work an independent parallel
    step over the chains ``x`` (C, n) cannot skip: ``x @ J`` in ``dtype`` and one uint32 random
    word per site from the keys :func:`gmlm_lib.ising.samplers.chain_keys` gives :func:`gmlm_lib.ising.samplers.run_chains`.
    The next ``x`` is one comparison of the two per site, so neither is hoisted out of the scan.
    With ``random_words=False`` only the product: the next ``x`` is the sign of the field
    (+1 where it is positive). The callable returns the final ``x``."""
    J = samplers._cast(model, dtype).J  # cast as the samplers cast (on the host: no program of its own)

    @jax.jit
    def floor(key, x, J):
        def step(x, t):
            keys = samplers.chain_keys(key, t, x.shape[0])
            bits = jax.vmap(lambda k: jax.random.bits(k, (x.shape[1],), dtype=jnp.uint32))(keys)
            field = x.astype(J.dtype) @ J
            return jnp.where((field > 0) ^ (bits >= 2**31), 1, -1).astype(x.dtype), None

        def product_step(x, t):
            return jnp.where(x.astype(J.dtype) @ J > 0, 1, -1).astype(x.dtype), None

        return jax.lax.scan(step if random_words else product_step, x, jnp.arange(num_steps))[0]

    sharding = samplers.chain_sharding(x.shape[0])  # laid out over the devices as run_chains does
    if sharding is not None:
        x = jax.device_put(x, sharding)
    run = lambda: jax.block_until_ready(floor(key, x, J))  # noqa: E731
    run()  # compile
    return run
