"""Timing on a shared machine: each contestant credited with its fastest call over interleaved
rounds, so a burst of load from elsewhere does not land on one side only; the machine the
numbers were measured on; the matmul peak that throughput is compared with; and the time a
process spent compiling (:func:`compile_clock`), which on an accelerator can rival the work itself,
and the persistent cache that spares a later run the same compilations (:func:`persistent_cache`);
and :func:`compile_in_parallel`, which compiles a run's programs at once instead of one by one."""

from __future__ import annotations

import concurrent.futures
import os
import tempfile
import threading
import time
import traceback
from pathlib import Path

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


def round_times(fns: dict, min_time: float, rounds: int = 3) -> dict:
    """Fastest call of each ``fns[name]()`` in each of ``rounds`` interleaved rounds of ``min_time / rounds``
    seconds each; ``{name: [seconds in round r]}``. Why the rounds: a ratio of two timings read from each
    round shows how far the machine's noise moves it (a verdict against a bar needs that spread)."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(fastest_call(fn, min_time / rounds))
    return times


def best_times(fns: dict, min_time: float, rounds: int = 3) -> dict:
    """Fastest call of each ``fns[name]()`` over ``rounds`` interleaved rounds of
    ``min_time / rounds`` seconds each; ``{name: seconds}``."""
    return {name: min(times) for name, times in round_times(fns, min_time, rounds).items()}


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
    a = jax.device_put(np.ones((size, size), jnp.dtype(dtype)))  # copied: jnp.ones would compile a program
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    seconds = fastest_call(lambda: f(a).block_until_ready(), min_time)
    return 2.0 * size**3 / seconds


#: JAX's monitoring event timing each XLA compilation (a persistent-cache hit included: then the
#: time of reading it), and the one counting persistent-cache hits
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_COMPILES = {"compilations": 0, "compile_s": 0.0, "compile_wall_s": 0.0, "cache_hits": 0}
_LISTENING: list[bool] = []
_SPANS: list[list[float]] = []  # the disjoint [start, end] wall-clock spans in which a program compiled, in order
_SPANS_LOCK = threading.Lock()  # programs compiled side by side report from their own threads


def covered(spans, start: float, end: float) -> float:
    """Add the span ``[start, end]`` to ``spans`` (disjoint ``[start, end]`` lists in order, changed in
    place) and return by how many seconds the time they cover grew: 0 for a span inside others, its
    length for one that overlaps none. Why: programs compiled side by side (:func:`compile_in_parallel`)
    overlap, so the seconds they took, summed, exceed the wall time in which anything compiled."""
    if not end >= start:
        raise ValueError(f"covered: a span must end at or after its start; got [{start!r}, {end!r}].")
    i = len(spans)
    while i > 0 and spans[i - 1][1] >= start:  # in order: the spans that end at or after `start` are the last
        i -= 1
    j = i
    lo, hi, old = start, end, 0.0
    while j < len(spans) and spans[j][0] <= end:
        lo, hi, old = min(lo, spans[j][0]), max(hi, spans[j][1]), old + spans[j][1] - spans[j][0]
        j += 1
    spans[i:j] = [[lo, hi]]
    return (hi - lo) - old


COMPILE_LOG = "GMLM_COMPILE_LOG"
"""The environment variable naming a file to which every process that counts its compilations
(:func:`compile_clock`) appends one line a program: ``time``, ``pid``, the program's name, the
seconds it took (compiled, or read from the persistent cache) and the code that asked for it (the
innermost frame outside JAX, Flax and Python's own modules, ``file:line:function``), tab-separated.
``make gpu-run``'s batch sets it and writes each chapter's :func:`compile_summary` to its log, so a
run stopped at its deadline still says which programs its time went to; the caller column says which
line of the library or of a chapter's cell made each (``sort`` it: array code run op by op shows as
many one-operation programs from one line)."""


def _caller() -> str:
    """``file:line:function`` of the innermost frame of the stack outside JAX, Flax, Python's own
    modules and this one: the library or notebook line whose call compiled a program."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename
        if name != __file__ and "site-packages" not in name and "dist-packages" not in name \
                and not name.startswith(_STDLIB):
            return f"{os.path.basename(name)}:{frame.lineno}:{frame.name}"
    return "?"


_STDLIB = os.path.dirname(os.__file__)


def _on_duration(event: str, duration: float, fun_name=None, **_) -> None:
    if event == _COMPILE_EVENT:
        end = time.perf_counter()  # JAX reports a compilation as it ends
        with _SPANS_LOCK:
            _COMPILES["compilations"] += 1
            _COMPILES["compile_s"] += float(duration)
            _COMPILES["compile_wall_s"] += covered(_SPANS, end - max(0.0, float(duration)), end)
        path = os.environ.get(COMPILE_LOG)
        if path:
            try:
                with open(path, "a") as f:  # one short appended line: whole even with threads compiling
                    f.write(f"{time.time():.6f}\t{os.getpid()}\t{fun_name}\t{float(duration):.3f}\t{_caller()}\n")
            except OSError:
                pass  # the log is a diagnostic: a full or read-only disk must not stop the work


def _logged(lines):
    """The compilations of :data:`COMPILE_LOG` lines, as ``(end time, pid, program, seconds)``;
    lines that are not four tab-separated fields (five with the caller) are skipped."""
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) in (4, 5):
            yield float(parts[0]), parts[1], parts[2], max(0.0, float(parts[3]))


def compile_summary(path, since: float = 0.0, top: int = 6) -> str:
    """The lines of a :data:`COMPILE_LOG` file written at or after ``since`` (a ``time.time()``),
    summed by program: ``"N programs, S s summed, W s of wall time: name k x s, ..."`` (programs
    compiled side by side overlap, so the sum S can exceed the wall time W in which any compiled:
    :func:`covered`, over the lines' spans), the ``top`` programs by seconds first;
    ``"no compilation logged"`` when there is none (or no file)."""
    by: dict[str, list[float]] = {}
    spans: list[list[float]] = []
    wall = 0.0
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        lines = []
    for end, _pid, name, seconds in _logged(lines):
        if end >= since - 1e-3:  # the times are written rounded
            by.setdefault(name, []).append(seconds)
            wall += covered(spans, end - seconds, end)
    if not by:
        return "no compilation logged"
    order = sorted(by.items(), key=lambda kv: -sum(kv[1]))
    total = sum(sum(v) for v in by.values())
    head = ", ".join(f"{name} {len(v)} x {sum(v):.1f} s" for name, v in order[:top])
    n = sum(len(v) for v in by.values())
    return (f"{n} program{'s' if n != 1 else ''}, {total:.1f} s summed, {wall:.1f} s of wall time: {head}"
            + (", ..." if len(order) > top else ""))


def compile_log_processes(lines) -> dict[str, dict]:
    """The lines of a :data:`COMPILE_LOG` file by process (a batch's chapters each run in their own
    kernel, one after another): ``pid -> dict(programs, summed_s, wall_s, first, last)``, where
    ``wall_s`` is the wall time in which any of its programs compiled (:func:`covered`), less than
    ``summed_s`` where they compiled side by side, and ``first``/``last`` the ``time.time()`` at which
    its first compilation began and its last ended; in the order the processes first appear (lines
    that are not a compilation are skipped)."""
    out: dict[str, dict] = {}
    spans: dict[str, list] = {}
    for end, pid, _name, seconds in _logged(lines):
        rec = out.setdefault(pid, dict(programs=0, summed_s=0.0, wall_s=0.0, first=end - seconds, last=end))
        rec["programs"] += 1
        rec["summed_s"] += seconds
        rec["wall_s"] += covered(spans.setdefault(pid, []), end - seconds, end)
        rec["first"], rec["last"] = min(rec["first"], end - seconds), max(rec["last"], end)
    return out


def _on_event(event: str, **_) -> None:
    if event == _CACHE_HIT_EVENT:
        _COMPILES["cache_hits"] += 1


def compile_clock() -> dict:
    """The compilations this process has done since the first call, as a snapshot to pass to
    :func:`compiles_since`: ``compilations`` (XLA programs compiled or read from the persistent
    cache), ``compile_s`` (the seconds they took, summed), ``compile_wall_s`` (the wall seconds in
    which at least one of them was compiling: less than the sum where programs compiled side by
    side, :func:`compile_in_parallel`) and ``cache_hits``. The first call registers two
    listeners with ``jax.monitoring`` (nothing of JAX's configuration changes); earlier compilations
    are not counted. Why: on a GPU a small decoder compiles in seconds and runs in milliseconds, so
    a chapter's wall time is read with its compile share beside it."""
    if not _LISTENING:
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)
        _LISTENING.append(True)
    return dict(_COMPILES)


def compiles_since(snapshot: dict) -> dict:
    """What :func:`compile_clock` has counted since ``snapshot`` (one of its returns)."""
    now = compile_clock()
    return dict(compilations=now["compilations"] - snapshot["compilations"],
                compile_s=round(now["compile_s"] - snapshot["compile_s"], 2),
                compile_wall_s=round(now["compile_wall_s"] - snapshot.get("compile_wall_s", 0.0), 2),
                cache_hits=now["cache_hits"] - snapshot["cache_hits"])


def persistent_cache(folder=None) -> str:
    """Turn on JAX's persistent compilation cache in ``folder`` (``None``: a new temporary folder),
    unless a cache folder is set already (``JAX_COMPILATION_CACHE_DIR``: ``make gpu-run`` gives the
    four translation chapters one, so the later chapters read the programs the PaDIR chapter
    compiled for the same models; then no folder is made), and return the folder in use. A
    chapter calls it before its first compilation, never a module on import (it changes JAX's
    configuration): JAX opens the cache at the first compilation after a folder is set and keeps
    that one for the process."""
    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(folder or tempfile.mkdtemp(prefix="jax-cache-")))
    return str(jax.config.jax_compilation_cache_dir)


ENV_THREADS = "GMLM_COMPILE_THREADS"
"""The environment variable that caps :func:`compile_in_parallel`'s threads (1: one by one, for
comparing; recorded in every run's environment, :func:`gmlm_lib.core.records.environment`)."""


def compile_in_parallel(calls: list, threads: int | None = None) -> float:
    """Call every function of ``calls`` (no arguments; each calls a jitted program once, for
    arguments of shapes the program has not seen), each in its own thread, wait for all, and return
    the wall seconds. Tracing holds Python's lock, but XLA compiles with it released, so the
    programs compile side by side on the machine's cores (the JAX maintainers' advice for warming
    jit caches, jax-ml/jax#11788), and each lands in its jit cache: the calls that follow with
    arguments of the same shapes run at once. Why: a run compiles an update and a val program per
    length bucket and model, each for seconds to tens of seconds on a GPU, where the updates take
    milliseconds. ``threads``: at most this many at once (default: ``$GMLM_COMPILE_THREADS`` when
    set, 1 compiling one by one, else the machine's cores). An exception in a call is raised here,
    after every call has ended."""
    calls = list(calls)
    if threads is None and os.environ.get(ENV_THREADS):
        try:
            threads = int(os.environ[ENV_THREADS])
        except ValueError:
            raise ValueError(f"${ENV_THREADS} must be an integer >= 1 (1: compile one by one); got "
                             f"{os.environ[ENV_THREADS]!r}.") from None
        where = f"${ENV_THREADS}"
    else:
        where = "compile_in_parallel(threads=...)"
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"{where} must be an integer >= 1 (1: compile one by one) or unset; got {threads!r}.")
    t0 = time.perf_counter()
    if not calls:
        return 0.0
    workers = min(len(calls), threads or os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="compile") as pool:  # waits for all
        futures = [pool.submit(lambda f=f: jax.block_until_ready(f())) for f in calls]
    for f in futures:
        f.result()
    return time.perf_counter() - t0
