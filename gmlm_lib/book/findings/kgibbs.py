"""The benchmark verdicts of the k-Gibbs chapter (``notebooks/kgibbs_vs_parallel.md``).

The book's own throughput target (the paper times no samplers): the JAX samplers at least
:data:`SPEED_BAR` times the per-chain NumPy loop. Where the independent parallel sampler misses it, the
chapter's "ceilings" (the fastest XLA programs measured that do only the step's arithmetic and random
words, or only its matrix product) say whether any JAX implementation could reach it on that machine.
"""

from __future__ import annotations

import pandas as pd

from gmlm_lib.book.findings.rules import listed

__all__ = ["SPEED_BAR", "benchmark"]

SPEED_BAR = 20.0
"""The speed-up over the per-chain NumPy loop that the chapter grades against."""
_COLUMNS = ("n", "sampler", "dtype", "speedup_vs_loop", "speedup_vs_vectorised", "ceiling_vs_loop",
            "product_ceiling_vs_loop")


def _meets(frame: pd.DataFrame) -> str:
    return f"{int((frame['speedup_vs_loop'] >= SPEED_BAR).sum())} of {len(frame)}"


def benchmark(speed: pd.DataFrame) -> dict:
    """``speed``: one row per (n, sampler, dtype) with the columns of ``_COLUMNS`` (speed-ups as ratios;
    the ceilings NaN for k-Gibbs). Returns ``speed_bar``; float64 ranges against the loop and the
    vectorised NumPy (``bench_min_loop`` ... ``bench_max_vec``); how many rows reach the bar
    (``bench_meets``, ``bench_meets32``, ``bench_kg_meets``, ``bench_ip_meets``, as "m of n"); the
    independent parallel sampler's sizes below the bar (``bench_ip_missed``, "none" when it never misses)
    and whether its ceiling is below the bar at every one of them (``bench_ip_ceiling``: "below",
    "above", or "not needed"); and the (dtype, n) where even the matrix product alone is below the bar
    (``bench_ip_product_blocked``, "none")."""
    missing = [c for c in _COLUMNS if c not in speed.columns]
    if missing:
        raise ValueError(f"the speed table lacks the columns {missing}.")
    f64, f32 = speed[speed.dtype == "float64"], speed[speed.dtype == "float32"]
    if f64.empty:
        raise ValueError("the speed table has no float64 rows: nothing to grade.")
    kg64, ip64 = f64[f64.sampler != "independent parallel"], f64[f64.sampler == "independent parallel"]
    miss = ip64[ip64.speedup_vs_loop < SPEED_BAR]
    ip_all = speed[speed.sampler == "independent parallel"]
    blocked = ip_all[ip_all.product_ceiling_vs_loop < SPEED_BAR]
    ceiling = ("not needed" if miss.empty else "below" if bool((miss.ceiling_vs_loop < SPEED_BAR).all())
               else "above")
    return dict(
        speed_bar=SPEED_BAR,
        bench_min_loop=float(f64.speedup_vs_loop.min()), bench_max_loop=float(f64.speedup_vs_loop.max()),
        bench_min_vec=float(f64.speedup_vs_vectorised.min()), bench_max_vec=float(f64.speedup_vs_vectorised.max()),
        bench_meets=_meets(f64), bench_meets32=_meets(f32), bench_kg_meets=_meets(kg64),
        bench_kg_min=float(kg64.speedup_vs_loop.min()) if len(kg64) else float("nan"),
        bench_ip_meets=f"{_meets(ip64)} sizes",
        bench_ip_share=f"{(ip64.speedup_vs_loop / ip64.ceiling_vs_loop).min():.0%}" if len(ip64) else "n/a",
        bench_ip_missed=listed([int(v) for v in miss.n]),
        bench_ip_ceiling=ceiling,
        bench_ip_product_blocked=listed([f"{r.dtype} at n = {r.n}" for r in blocked.itertuples()]),
    )
