"""What copying a batch-1 translation's output back to the host costs on this machine, and whether an output
placed in host memory by the program itself costs less.

    PYTHONPATH=. python benchmarks/host_transfer.py                  # a (1, 64) int32 result
    PYTHONPATH=. python benchmarks/host_transfer.py --width 32 --json transfer.json

Why: on one H200 (benchmarks/gpu_runs/2026-12-04-h200, the PaDIR chapter's time split of one batch-1
translation) the host's side of a translation, the whole call less the compiled decoder waited for on
the device, took 1.5 of PaDIR T = 4's 3.0 ms and 1.4 of AR greedy's 4.5 ms, while tokenising, padding,
stripping and detokenising the same sentence take about 0.06 ms on a CPU. The one other step on that side
is the copy of the (1, width) ids back to the host (``jax.device_get``): if it is what costs the
millisecond, both decoders pay it once per sentence and it pulls every speed-up toward 1. This script
times that copy alone, beside two ways around it, on a tiny program (``x + 1``) so that nothing else is measured:

- ``wait``: the program, waited for on the device (``block_until_ready``);
- ``get``: the program and ``np.asarray(jax.device_get(out))``, as ``Translator.translate_one`` does;
- ``async_get``: the same with ``out.copy_to_host_async()`` issued right after the call;
- ``wait_get``: the program waited for as in ``wait``, then the copy back of the finished result (if this
  is near ``wait``, what costs is how ``device_get`` waits for the program, not the copy itself);
- ``pinned``: the program compiled to write its output to ``pinned_host`` memory (a JAX memory kind;
  measured only where the device offers it), then ``np.asarray(out)``;
- ``pinned_wait_get``: the same program waited for with ``block_until_ready``, then ``np.asarray(out)``
  (the two changes together: if the copy machinery costs, ``pinned`` gains; if the way ``device_get``
  waits costs, ``wait_get`` gains; this gains in both cases).

Where ``pinned_host`` exists, ``pinned_loop`` says whether a program shaped like the decoders (a
``while_loop`` whose trip count depends on the data, inside a ``lax.switch``) compiles with its
output in that memory and returns the right values: the decoders would take that path, not ``x + 1``.

Each variant's calls are timed one by one over 3 interleaved rounds: ``ms`` holds its fastest call (as
:func:`gmlm_lib.core.timing.best_times`), ``median_ms`` its median call (a chapter's latencies are medians
over sentences, so a wake-up that is slow only sometimes shows there and not in the fastest); ``get -
wait`` is what the copy back adds. It prints a table and, with ``--json``, writes it with the machine,
the commit and the wall time.
"""

from __future__ import annotations

import argparse
import json
import time


def measure(width: int = 64, min_time: float = 1.0, rounds: int = 3) -> dict:
    """``{"ms": {variant: fastest ms}, "median_ms": {variant: median ms}, "calls": {variant: n},
    "pinned_loop": bool or None}`` for the variants above on the default device (the ``pinned`` ones absent
    and ``pinned_loop`` None where the device has no ``pinned_host`` memory); ``ms`` and ``median_ms`` also
    hold ``copy_ms`` = get - wait. ``width``: the output's length;
    each variant is called for ``min_time / rounds`` seconds in each of ``rounds`` interleaved rounds."""
    import jax
    import numpy as np

    if not (isinstance(width, int) and width >= 1):
        raise ValueError(f"width must be an integer >= 1; got {width!r}.")
    if not (isinstance(rounds, int) and rounds >= 1):
        raise ValueError(f"rounds must be an integer >= 1; got {rounds!r}.")
    device = jax.devices()[0]
    x = jax.device_put(np.zeros((1, width), np.int32), device)
    plain = jax.jit(lambda a: a + 1)

    def get():
        return np.asarray(jax.device_get(plain(x)))

    def async_get():
        out = plain(x)
        out.copy_to_host_async()
        return np.asarray(out)

    def wait_get():
        return np.asarray(plain(x).block_until_ready())

    fns = dict(wait=lambda: plain(x).block_until_ready(), get=get, async_get=async_get, wait_get=wait_get)
    loop_ok = None
    if "pinned_host" in [m.kind for m in device.addressable_memories()]:
        sharding = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
        pinned = jax.jit(lambda a: a + 1, out_shardings=sharding)
        fns["pinned"] = lambda: np.asarray(pinned(x))
        fns["pinned_wait_get"] = lambda: np.asarray(pinned(x).block_until_ready())
        loop_ok = _pinned_loop_works(sharding, x)
    for fn in fns.values():  # compiled and warm before anything is timed
        assert np.array_equal(np.asarray(fn()), np.ones((1, width), np.int32))
    calls = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                fn()
                now = time.perf_counter()
                calls[name].append(now - t0)
                if now - start >= min_time / rounds:
                    break
    out = dict(ms={name: 1e3 * min(t) for name, t in calls.items()},
               median_ms={name: 1e3 * float(np.median(t)) for name, t in calls.items()},
               calls={name: len(t) for name, t in calls.items()}, pinned_loop=loop_ok)
    for stat in ("ms", "median_ms"):
        out[stat]["copy_ms"] = out[stat]["get"] - out[stat]["wait"]
    return out


def _pinned_loop_works(sharding, x) -> bool:
    """Whether a decoder-shaped program (a data-dependent ``while_loop`` in one branch of a ``lax.switch``)
    compiles with its output in ``sharding``'s memory and gives the values it gives in device memory."""
    import jax
    import numpy as np

    def program(a):
        def count_up(b):
            return jax.lax.while_loop(lambda c: c[0] < b[0, 0] + 3, lambda c: (c[0] + 1, c[1] + 1), (0, b))[1]

        return jax.lax.switch(a[0, 0] % 2, [count_up, lambda b: b - 1], a)

    try:
        got = np.asarray(jax.jit(program, out_shardings=sharding)(x).block_until_ready())
    except Exception as err:  # a compiler that refuses the placement: reported, the decoders keep device memory
        print(f"pinned_host output of a loop program failed: {type(err).__name__}: {str(err)[:300]}")
        return False
    return bool(np.array_equal(got, np.asarray(jax.jit(program)(x))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=64, help="length of the (1, width) int32 output (default 64)")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds each variant is timed, in 3 rounds")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    from gmlm_lib.core import records, timing  # after parsing: --help does not start JAX

    if args.width < 1 or not args.min_time > 0:
        ap.error(f"--width must be >= 1 and --min-time > 0; got {args.width} and {args.min_time}.")
    start = time.time()
    got = measure(args.width, args.min_time)
    where = timing.machine()
    print(f"(1, {args.width}) int32 output on {where}")
    print(f"  {'':>15}  {'fastest':>9}  {'median':>9}  calls")
    for name, value in got["ms"].items():
        print(f"  {name:>15}: {value:6.3f} ms  {got['median_ms'][name]:6.3f} ms  {got['calls'].get(name, '')}")
    if got["pinned_loop"] is not None:
        print(f"  a loop program's output in pinned_host memory: {'right' if got['pinned_loop'] else 'FAILED'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(width=args.width, min_time=args.min_time, **got, machine=where,
                           commit=records.short_commit(records.git_commit()), wall_s=time.time() - start), f, indent=1)


if __name__ == "__main__":
    main()
