"""Timing on a shared machine: each contestant credited with its fastest call over interleaved
rounds, so a burst of load from elsewhere does not land on one side only; the machine the
numbers were measured on; the matmul peak that throughput is compared with."""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core.records import cpu_model


def fastest_call(fn, min_time: float) -> float:
    """Call ``fn()`` until ``min_time`` seconds have passed; the fastest call, in seconds."""
    best, start = float("inf"), time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        now = time.perf_counter()
        best = min(best, now - t0)
        if now - start >= min_time:
            return best


def best_times(fns: dict, min_time: float, rounds: int = 3) -> dict:
    """Fastest call of each ``fns[name]()`` over ``rounds`` interleaved rounds of
    ``min_time / rounds`` seconds each; ``{name: seconds}``."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], fastest_call(fn, min_time / rounds))
    return best


def machine() -> dict:
    """Where the numbers were measured."""
    return {
        "backend": jax.default_backend(),
        "devices": [d.device_kind for d in jax.devices()],
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "jax": jax.__version__,
    }


def matmul_peak(size: int = 2048, dtype="float32", min_time: float = 2.0) -> float:
    """Measured FLOP/s of one jitted ``size x size`` matrix product (2 size^3 flops, fastest call
    over ``min_time`` seconds) on the default device: the practical matmul peak that training
    throughput is compared with."""
    a = jnp.ones((size, size), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    seconds = fastest_call(lambda: f(a).block_until_ready(), min_time)
    return 2.0 * size**3 / seconds
