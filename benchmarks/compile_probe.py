"""What the translation chapters pay to compile on this device, under each of several XLA flag settings.

    python benchmarks/compile_probe.py --json probe.json                   # the GPU recipe, XLA's defaults
    python benchmarks/compile_probe.py --flags= --flags=--xla_gpu_autotune_level=0 --json probe.json
    python benchmarks/compile_probe.py --programs decode --kinds ar padir \
        --flags= --flags=--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL     # CUDA graphs of whole loops
    make gpu-probe OUT=dir DATA=.gpu-data                                   # the same on the GPU machine

On an accelerator a small Transformer's training update runs in milliseconds and compiles in tens of
seconds (XLA:GPU tries candidate kernels for every matrix product while compiling: its autotuner), so
the wall time of a translation run is decided by how many programs it compiles and what each costs.
This script measures that unit cost before a full run is sized: for each flag setting (each ``--flags=VALUE``,
a value of ``XLA_FLAGS``, which XLA reads once at start, so each runs in its own child process;
``""`` is XLA's defaults) it builds the preset's models (``--preset``, default ``"multi30k_gpu"``)
with random weights and, for each model kind (``--kinds``: the AR teacher, PaDIR, the deep-shallow
AR baseline), and for each program of ``--programs`` (both by default):

* ``update``: one training update on a batch of the bucket the epochs use most
  (:func:`gmlm_lib.mt.sizing.update_seconds`): ``first_s`` the first call (building the model,
  tracing, lowering and compiling), ``compile_s`` the seconds XLA spent compiling in it (the
  model's initialisation included; ``cache_hits`` of its ``programs`` were read from a persistent
  cache instead), and ``run_ms`` the median update;
* ``decode``: batch-1 decoding as the latency tables run it (AR greedy; PaDIR with T = 4 passes
  and 3 length hypotheses), the programs of every source bucket compiled first
  (:meth:`gmlm_lib.mt.translate.Translator.warm_up`), then ``run_ms`` the median over
  ``--sentences`` test sentences (the untrained AR model runs to its length limit: an upper bound),
  and ``busy_ms``/``busy_fraction``: the device's busy time in a translation of the first test
  sentence and its share of the wall time (:func:`gmlm_lib.core.devtrace.trace_calls`, ``--trace-calls``
  calls; ``None`` with ``trace_error`` where the profiler fails), and where the rest goes
  (:func:`gmlm_lib.mt.decode_costs.call_parts`: the whole call, the compiled decoder on the source
  handed over from the host as a translation hands it, the same on inputs already on the device, an
  empty program with the same arguments). A flag that cuts kernel launches or host round trips
  (CUDA graphs of whole loops) shows as a higher busy fraction and a lower ``run_ms``.

A setting whose child fails (an XLA that does not know a flag aborts at start) or runs past
``--timeout`` is reported with the end of its error, and the others still run. With ``--choose
FILE`` the script also decides which setting a run should use (:func:`choose`: the defaults unless
another compiles faster and runs no more than ``SLACK`` times slower) and writes its ``XLA_FLAGS``
value to FILE: what ``make gpu-run GPU_XLA_FLAGS=auto`` does before the chapters run; where the
defaults themselves failed, FILE names them anyway (the run goes on with XLA's defaults) and the
exit status is 1. The JSON holds every row, each setting's wall time, the machine and the
library's commit; a table goes to stdout. The models are untrained: the times, not the
translations, are the result.

The probe's programs are the run's own: by default it builds the preset's vocabulary from the whole
training split, as the run does (SentencePiece stops below ``vocab_size`` on a small sample, which
would change every embedding's shape), and times the bucket the run's sizing times. With ``--cache DIR``
(the run's persistent compilation cache, ``JAX_COMPILATION_CACHE_DIR``) each setting compiles cold in
a fresh cache at that very path (JAX's cache keys hold the path of XLA's autotuning cache beneath it),
moved aside before the next setting, and the chosen setting's cache is put back there: the run then
reads the probe's compiled update and decoder, and XLA's autotuning results, instead of compiling
them again. A ``DIR`` that already holds files is left as it is (the probe then runs without a cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

KINDS = ("ar", "padir", "ar_shallow")
PROGRAMS = ("update", "decode")
DECODE = {"ar": "greedy", "ar_shallow": "greedy", "padir": "padir T=4, #hyp=3"}


def measure(args) -> dict:
    """One flag setting, in this process: the rows of every kind (what :func:`main` gathers)."""
    import numpy as np

    from gmlm_lib.core import devtrace, timing
    from gmlm_lib.mt import config, decode_costs, decoding, pipeline, seq2seq, sizing, translate

    start = time.perf_counter()
    timing.compile_clock()
    overrides = dict(test_sentences=args.sentences, run_root="")
    if args.train_sentences is not None:
        overrides["train_sentences"] = args.train_sentences
    exp = config.get(args.preset, overrides)
    data = pipeline.load_data(exp)
    root = Path(args.workdir)
    vocab = pipeline.vocabulary(exp, data.train, root)
    batches = pipeline.batcher(exp, vocab, data.train.src, data.train.tgt)
    rows = []
    for kind in args.kinds:
        cfg = exp.train_config(kind, vocab.size)
        if "update" in args.programs:
            clock = timing.compile_clock()
            got = sizing.update_seconds(cfg, batches, repeats=args.repeats)
            spent = timing.compiles_since(clock)
            rows.append(dict(kind=kind, what="update", bucket=got["bucket"], batch=got["batch"],
                             first_s=round(got["compile_s"] + got["update_s"], 3), compile_s=spent["compile_s"],
                             programs=spent["compilations"], cache_hits=spent["cache_hits"],
                             run_ms=round(1e3 * got["update_s"], 3)))
        if "decode" not in args.programs:
            continue
        model = seq2seq.build(cfg.model, cfg.seed)
        tr = translate.Translator(model, vocab, buckets=exp.decode_buckets, seed=exp.seed)
        method = (translate.Method("padir", padir=decoding.PadirOptions(steps=4, hyps=3)) if kind == "padir"
                  else translate.Method("greedy"))
        clock = timing.compile_clock()
        t0 = time.perf_counter()
        tr.warm_up(method)
        first = time.perf_counter() - t0
        spent = timing.compiles_since(clock)
        seconds = translate.latencies({kind: (tr, method)}, data.test.src, progress=False)[kind]
        busy = dict(busy_ms=None, busy_fraction=None)
        try:  # the device's share of a translation (devtrace): what a flag that cuts launches should move
            traced = devtrace.trace_calls(lambda: tr.translate_one(data.test.src[0], method), calls=args.trace_calls)
            busy = dict(busy_ms=round(traced.busy_ms, 3), busy_fraction=round(traced.busy_fraction, 3))
        except Exception as err:  # a profiler that fails here costs the column, not the probe
            busy["trace_error"] = f"{type(err).__name__}: {err}"[:300]
        try:  # where the rest of a translation goes: a failure here costs these columns, not the probe
            parts = {k: round(v, 3) for k, v in decode_costs.call_parts(tr, method, data.test.src[0]).items()}
        except Exception as err:
            parts = dict(parts_error=f"{type(err).__name__}: {err}"[:300])
        rows.append(dict(kind=kind, what="decode", bucket=None, batch=1, first_s=round(first, 3),
                         compile_s=spent["compile_s"], programs=spent["compilations"], cache_hits=spent["cache_hits"],
                         run_ms=round(1e3 * float(np.median(seconds)), 3), **busy, **parts))
    return dict(rows=rows, wall_s=round(time.perf_counter() - start, 2), machine=timing.machine())


def child(args, flags: str, workdir: Path, cache: Path | None = None) -> dict:
    """Run :func:`measure` with ``XLA_FLAGS`` = ``flags`` (appended to any set already) in a new process,
    with JAX's persistent compilation cache in ``cache`` (None: none)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(f for f in (os.environ.get("XLA_FLAGS", ""), flags) if f)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    if cache is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    cmd = [sys.executable, __file__, "--child", "--preset", args.preset, "--kinds", *args.kinds,
           "--programs", *args.programs,
           "--sentences", str(args.sentences), "--repeats", str(args.repeats), "--workdir", str(workdir),
           "--trace-calls", str(args.trace_calls)]
    if args.train_sentences is not None:
        cmd += ["--train-sentences", str(args.train_sentences)]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired as err:
        tail = err.stderr.decode(errors="replace")[-1500:] if isinstance(err.stderr, bytes) else (err.stderr or "")[-1500:]
        return dict(flags=flags, ok=False, process_s=round(time.perf_counter() - t0, 2),
                    error=f"{tail}\ntimed out after {args.timeout:g} s (--timeout)")
    wall = round(time.perf_counter() - t0, 2)
    if done.returncode != 0:
        return dict(flags=flags, ok=False, process_s=wall, error=(done.stderr or done.stdout)[-2000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return dict(flags=flags, ok=True, process_s=wall, **result)


SLACK = 1.25
"""How much slower than with XLA's defaults a setting's programs may run and still be chosen."""


def choose(settings: list[dict], slack: float = SLACK) -> tuple[str, str]:
    """The ``XLA_FLAGS`` value a run should use, and a sentence saying why: XLA's defaults, unless
    another setting's first calls (building, tracing and compiling) took less time in all and every
    program it timed ran at most ``slack`` times as long as with the defaults (a setting that buys
    its compile time with slower kernels would bias the run's timings). The defaults (``""``) must be
    among ``settings`` and must have run; failed settings are passed over."""
    base = next((s for s in settings if s["flags"] == ""), None)
    if base is None or not base["ok"]:
        raise ValueError("choose: XLA's defaults (--flags=) must be among the settings and must have run; "
                         + ("they failed." if base is not None else "they were not probed."))

    def cost(s):
        return sum(r["first_s"] for r in s["rows"])

    best, ratios = base, {}
    for s in settings:
        if s is base or not s["ok"] or [(r["kind"], r["what"]) for r in s["rows"]] != \
                [(r["kind"], r["what"]) for r in base["rows"]]:
            continue
        ratios[s["flags"]] = max(r["run_ms"] / b["run_ms"] for r, b in zip(s["rows"], base["rows"]))
        if ratios[s["flags"]] <= slack and cost(s) < cost(best):
            best = s
    if best is base:
        return "", (f"XLA's defaults: no other setting compiled faster with its programs at most {slack:.2f}x "
                    f"as slow (first calls {cost(base):.1f} s with the defaults)")
    return best["flags"], (f"{best['flags']}: first calls {cost(best):.1f} s against {cost(base):.1f} s with XLA's "
                           f"defaults, its programs at most {ratios[best['flags']]:.2f}x as slow (allowed "
                           f"{slack:.2f}x)")


def table(settings: list[dict]) -> str:
    lines = ["| XLA_FLAGS | model | program | first call (s) | compiling (s) | programs | run (ms) | device busy | "
             "translate / new inputs / program / empty call (ms) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in settings:
        name = s["flags"] or "(defaults)"
        if not s["ok"]:
            last = s["error"].strip().splitlines()[-1][:120] if s["error"].strip() else "?"
            lines.append(f"| {name} | failed: {last} | | | | | | | |")
            continue
        for r in s["rows"]:
            what = "update" if r["what"] == "update" else f"batch-1 {DECODE[r['kind']]}"
            busy = "" if r.get("busy_fraction") is None else f"{r['busy_ms']:.2f} ms ({r['busy_fraction']:.0%})"
            parts = ("" if r.get("program_ms") is None else
                     f"{r['translate_ms']:.2f} / {r['fresh_ms']:.2f} / {r['program_ms']:.2f} / {r['empty_ms']:.3f}")
            lines.append(f"| {name} | {r['kind']} | {what} | {r['first_s']:.1f} | {r['compile_s']:.1f} | "
                         f"{r['programs']} | {r['run_ms']:.2f} | {busy} | {parts} |")
        lines.append(f"| {name} | all | process wall time | {s['process_s']:.1f} | | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flags", action="append", metavar="=VALUE",
                    help="an XLA_FLAGS value, written --flags=VALUE (one child process each; --flags= is the "
                         "defaults); repeat it for several settings; none: the defaults only")
    ap.add_argument("--preset", default="multi30k_gpu", help="gmlm_lib.mt.config preset of the models")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--programs", nargs="+", choices=PROGRAMS, default=list(PROGRAMS),
                    help="which programs of each kind to compile and time (decode alone: a flag that changes "
                         "only how programs run, such as command buffers, probed in seconds, not minutes)")
    ap.add_argument("--train-sentences", type=int, default=None,
                    help="training pairs of the vocabulary and the batches (default: the preset's, as the run)")
    ap.add_argument("--sentences", type=int, default=40, help="test sentences decoded at batch 1")
    ap.add_argument("--repeats", type=int, default=5, help="timed updates after the compiling one")
    ap.add_argument("--trace-calls", type=int, default=10,
                    help="batch-1 translations traced for the device's busy time (core.devtrace)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one setting may take")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--choose", metavar="FILE",
                    help="write the XLA_FLAGS value a run should use (choose(): the defaults unless a setting "
                         "compiles faster without running slower) to FILE, and why to stdout")
    ap.add_argument("--cache", metavar="DIR",
                    help="with --choose: the run's persistent compilation cache; each setting compiles cold in a "
                         "fresh cache there and the chosen one's is kept for the run (a DIR holding files: no cache)")
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name in ("sentences", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if args.train_sentences is not None and args.train_sentences < 0:
        ap.error(f"--train-sentences must be >= 0 (0: the whole training split); got {args.train_sentences}")
    if args.cache and not args.choose:
        ap.error("--cache keeps the chosen setting's compilation cache: it needs --choose")
    args.flags = [""] if args.flags is None else args.flags
    if args.child:
        print(json.dumps(measure(args)))
        return 0
    import tempfile

    from gmlm_lib.core import records

    cache = Path(args.cache).absolute() if args.cache else None
    if cache is not None and cache.exists() and (not cache.is_dir() or any(cache.iterdir())):
        print(f"compile_probe: --cache {cache} already holds files; the probe runs without a cache and leaves it "
              "as it is", file=sys.stderr, flush=True)
        cache = None
    with tempfile.TemporaryDirectory(prefix="compile-probe-") as tmp:
        settings, caches = [], []
        for i, flags in enumerate(args.flags):
            print(f"compile_probe: XLA_FLAGS={flags!r} ...", file=sys.stderr, flush=True)
            settings.append(child(args, flags, Path(tmp), cache))  # one vocabulary, trained by the first
            if cache is not None:  # this setting's programs, kept aside so that the next one compiles cold
                caches.append(Path(tmp) / f"cache-{i}")
                if cache.exists():
                    shutil.move(str(cache), str(caches[-1]))
        out = dict(preset=args.preset, kinds=list(args.kinds), programs=list(args.programs),
                   sentences=args.sentences, settings=settings,
                   commit=records.short_commit(records.git_commit()))
        print(table(settings))
        if args.choose:
            try:
                flags, why = choose(settings)
            except ValueError as err:  # the defaults failed: a run goes on with them, and says why
                flags, why = "", f"XLA's defaults, unprobed: {err}"
            out["chosen"] = dict(flags=flags, why=why, slack=SLACK)
            print(f"\nchosen XLA_FLAGS: {why}")
            picked = next((i for i, s in enumerate(settings) if s["flags"] == flags and s["ok"]), None)
            if cache is not None and picked is not None:
                kept = caches[picked]
                if kept.exists():
                    shutil.move(str(kept), str(cache))
                out["chosen"]["cache"] = str(cache) if cache.exists() else None
                print(f"compile_probe: the run's compilation cache {cache} starts with the chosen setting's "
                      f"{sum(1 for p in cache.rglob('*') if p.is_file()) if cache.exists() else 0} files",
                      file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    if args.choose:  # written whatever happened: the run reads it
        Path(args.choose).write_text(out["chosen"]["flags"] + "\n")
        return 0 if any(s["ok"] and s["flags"] == "" for s in settings) else 1
    return 0 if all(s["ok"] for s in settings) else 1


if __name__ == "__main__":
    sys.exit(main())
