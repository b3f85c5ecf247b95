"""Sampler throughput benchmark: JAX samplers vs straightforward NumPy, same process.

    python benchmarks/sampler_throughput.py                 # n = 64 and 1024, 1,000 chains
    python benchmarks/sampler_throughput.py --n 64 --json out.json
    python benchmarks/sampler_throughput.py --dtype float64 float32   # both arithmetics

Prints one row per (n, sampler) with site updates per second and the speed-ups (for the
independent parallel sampler also two ceilings: the loop's time per step over the time of the
step's dense product and random words alone, and over the product alone; see ``gmlm_lib.ising.bench``),
and the machine it ran on; ``--json`` also writes them with the parameters and the commit. On
a CPU, every core is a JAX device and the chains are split over them (``--cpu-devices``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time

import jax

from gmlm_lib.core import records, timing
from gmlm_lib.ising import bench, samplers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[64, 1024], help="numbers of sites")
    ap.add_argument("--chains", type=int, default=1000)
    ap.add_argument("--k", type=int, nargs="+", default=[1, 4], help="k of the k-Gibbs samplers")
    ap.add_argument("--min-time", type=float, default=2.0,
                    help="each contestant is timed for this times the number of contestants "
                         "(3 interleaved rounds; the fastest call counts)")
    ap.add_argument("--dtype", nargs="+", default=["float64"], choices=["float64", "float32"],
                    help="arithmetic of the JAX samplers (the NumPy references are float64)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--cpu-devices", type=int, default=None,
                    help="CPU cores exposed to JAX as devices, the chains split over them "
                         "(default: every core; 1: JAX's default, one CPU device)")
    args = ap.parse_args()
    samplers.use_cpu_cores_as_devices(args.cpu_devices)
    jax.config.update("jax_enable_x64", True)  # the models are exact float64 (gmlm_lib.core.precision)
    start = time.time()
    rows = []
    contestants = [("k-gibbs", k) for k in args.k] + [("independent-parallel", 1)]
    for n, dtype, (sampler, k) in itertools.product(args.n, args.dtype, contestants):
        r = bench.throughput(n, args.chains, sampler, k, dtype=dtype, min_time=args.min_time)
        rows.append(r)
        print(f"n={n:5d} {r['sampler']:>22s} {dtype}  JAX {r['jax']:10.3g}/s  NumPy loop {r['numpy_loop']:10.3g}/s "
              f"(x{r['speedup_vs_loop']:.0f})  NumPy vectorised {r['numpy_vectorised']:10.3g}/s (x{r['speedup_vs_vectorised']:.1f})"
              + ("" if math.isnan(r["ceiling_vs_loop"]) else
                 f"  ceiling x{r['ceiling_vs_loop']:.1f} (product alone x{r['product_ceiling_vs_loop']:.1f})"),
              flush=True)
    commit = records.short_commit(records.git_commit())
    record = {"rows": rows, "machine": timing.machine(), "params": vars(args), "commit": commit, "wall_s": time.time() - start}
    print(json.dumps(record["machine"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
