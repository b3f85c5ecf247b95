"""Where a call's time goes on the device: :func:`trace_calls` runs a function under JAX's profiler
(``jax.profiler.trace``) and reads the trace back (``jax.profiler.ProfileData``, no TensorBoard) into
a :class:`TraceSummary`: per call, the wall time, the time the device was busy running the
program's operations (kernels on a GPU, XLA ops on a TPU, the thunks of XLA's CPU client on a CPU)
and how many it ran.

Why: at batch 1 a decode is short, and on an accelerator its wall time can be set by something
other than its arithmetic: the launch of a few hundred small kernels, or the host reading a loop's
condition back each iteration. Timing the units (:mod:`gmlm_lib.mt.decode_costs`) says what a pass
and a step cost; the trace says whether the device was computing or waiting in between. Busy time
is the union of the operations' intervals (nested or overlapping operations counted once; copies on
the device's streams count as operations); for the rest of an untraced call's wall time the device
was idle.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import tempfile
import time

import jax
import numpy as np

__all__ = ["TraceSummary", "trace_calls", "summarize", "busy_ns", "device_events", "count_dispatches",
           "DISPATCH_EVENTS"]

_DEVICE_PLANE = "/device:"  # "/device:GPU:0", "/device:TPU:0"; XLA's CPU client runs on "/host:CPU" threads
_CONTAINERS = ("while", "conditional", "call")  # XLA control flow: on a CPU an event around the ops inside
_NOT_OPS = ("Steps", "XLA Modules", "Launch Stats", "Framework", "Source", "TraceMe", "Task Environment")


@dataclasses.dataclass(frozen=True)
class TraceSummary:
    """One function's calls, traced. Times are milliseconds per call.

    ``wall_ms``: the mean wall time of a call, untraced; ``traced_wall_ms``: the same for the traced
    calls (the difference is the profiler's own cost, paid on the host); ``busy_ms``: the device's busy
    time a call (the union of its operations' intervals over the traced calls, divided by ``calls``);
    ``ops``: operations a call (control-flow containers left out: :func:`summarize`); ``idle_ms``:
    ``wall_ms - busy_ms``, the time the device waited (on kernel launches, on the host) in an
    untraced call; ``top``: the operations that took the most device time, as ``(name, ms a call,
    count a call)``, most first; ``source``: where the events came from (the device plane's name, or
    ``"host (XLA CPU client)"``).

    Busy time is set against the *untraced* wall time: on an accelerator the profiler slows the host's
    side (launches) and leaves the kernels' durations alone, so an idle time taken from the traced
    calls would count the profiler's cost as the decoder's. On a CPU the operations run on the host's
    threads and tracing lengthens them too, so there the busy fraction is an upper bound (at most 1)."""

    calls: int
    wall_ms: float
    traced_wall_ms: float
    busy_ms: float
    ops: float
    top: tuple[tuple[str, float, float], ...]
    source: str

    @property
    def idle_ms(self) -> float:
        return max(0.0, self.wall_ms - self.busy_ms)

    @property
    def busy_fraction(self) -> float:
        """``busy_ms / wall_ms``, at most 1: near 1, the device computed all along; near 0, it mostly waited."""
        return min(1.0, self.busy_ms / self.wall_ms) if self.wall_ms > 0 else float("nan")

    def row(self) -> dict:
        """The summary as a table row: wall, busy and idle ms, busy fraction, operations a call."""
        return dict(wall_ms=self.wall_ms, traced_wall_ms=self.traced_wall_ms, busy_ms=self.busy_ms,
                    idle_ms=self.idle_ms, busy_fraction=self.busy_fraction, ops_per_call=self.ops)


def busy_ns(intervals) -> float:
    """The length of the union of ``(start, end)`` intervals: time covered at least once.
    Nested and overlapping intervals (an XLA ``while`` and the operations inside it, kernels on two
    streams) count once; an empty list gives 0."""
    spans = sorted((float(s), float(e)) for s, e in intervals if e > s)
    total, end = 0.0, -np.inf
    for s, e in spans:
        if s >= end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def device_events(profile) -> tuple[str, list[tuple[str, float, float]]]:
    """The operations a ``jax.profiler.ProfileData`` recorded on the device: ``(source, [(name,
    start_ns, end_ns), ...])``. On a GPU or TPU, the events of the first ``/device:`` plane that has
    any, except its summary lines (steps, modules, launch statistics): a GPU's stream lines hold its
    kernels, a TPU's ``XLA Ops`` line its ops. Without a device plane (a CPU), the events of the host
    threads that carry an ``hlo_op`` statistic: XLA's CPU client runs each operation as such an event."""
    planes = list(profile.planes)
    for plane in planes:
        if not plane.name.startswith(_DEVICE_PLANE):
            continue
        events = [(e.name, e.start_ns, e.end_ns) for line in plane.lines
                  if not any(word in line.name for word in _NOT_OPS) for e in line.events]
        if events:
            return plane.name, events
    events = [(e.name, e.start_ns, e.end_ns) for plane in planes if plane.name.startswith("/host:")
              for line in plane.lines for e in line.events if any(k == "hlo_op" for k, _ in e.stats)]
    return "host (XLA CPU client)", events


#: the host events of XLA's PjRt client (as this JAX names them) that mark, per call: a compiled program
#: run, an array copied from the host to a device, a copy of a device array to the host started
DISPATCH_EVENTS = {"programs": ("CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice",
                                "PjRtStreamExecutorLoadedExecutable::ExecuteHelper"),
                   "to_device": ("DevicePut",), "to_host": ("ArrayImpl.copy_to_host_async",)}


def count_dispatches(fn, *, calls: int = 3) -> dict[str, float]:
    """What one call of ``fn()`` asks of the runtime, read from a profile of ``calls`` calls (after one
    untraced warm-up call): ``{"programs": compiled programs run, "to_device": host arrays copied to a
    device, "to_host": device arrays copied back}``, each per call (:data:`DISPATCH_EVENTS`). Why: at batch
    1 on an accelerator each program launch, input copy and copy back is a fixed cost of the order of a
    short decode, so a translation should make one of each at most; this counts them. An output that a
    program writes into host memory (a ``pinned_host`` memory kind) is not a copy back. ``RuntimeError``
    when the profile holds no program run at all (a JAX whose client names its events otherwise)."""
    if not (isinstance(calls, int) and calls >= 1):
        raise ValueError(f"count_dispatches: calls must be a positive int; got {calls!r}.")
    jax.block_until_ready(fn())
    profile, _ = _profiled(fn, calls, "count_dispatches")
    names = [e.name for plane in profile.planes if plane.name.startswith("/host:")
             for line in plane.lines for e in line.events]
    counts = {kind: sum(names.count(n) for n in events) / calls for kind, events in DISPATCH_EVENTS.items()}
    if not counts["programs"]:
        raise RuntimeError("count_dispatches: the profile shows no program run (none of "
                           f"{DISPATCH_EVENTS['programs']}); this JAX's runtime names its events otherwise.")
    return counts


def _profiled(fn, calls: int, who: str):
    """``calls`` calls of ``fn()`` (each waited for) under ``jax.profiler.trace``: the profile, read back
    from a temporary folder that is then deleted, and the mean wall seconds of a traced call."""
    folder = tempfile.mkdtemp(prefix="gmlm-trace-")
    try:
        with jax.profiler.trace(folder):
            traced = _mean_wall(fn, calls)
        files = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        if not files:
            raise RuntimeError(f"{who}: jax.profiler.trace wrote no .xplane.pb under {folder}.")
        return jax.profiler.ProfileData.from_file(max(files, key=os.path.getmtime)), traced
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _mean_wall(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(fn())
    return (time.perf_counter() - t0) / calls


def trace_calls(fn, *, calls: int = 20, top: int = 5) -> TraceSummary:
    """Call ``fn()`` (which returns arrays; each call is waited for) once to warm it, ``calls``
    times for its wall time, then ``calls`` times under ``jax.profiler.trace``, and summarise the
    trace (:func:`summarize`). The trace is written to a temporary folder and deleted. Everything
    the device ran while traced counts, so ``fn`` should be the whole of what is measured (e.g. one
    end-to-end batch-1 translation), run alone."""
    if not (isinstance(calls, int) and calls >= 1):
        raise ValueError(f"trace_calls: calls must be a positive int; got {calls!r}.")
    jax.block_until_ready(fn())  # compiled and warm before anything is timed
    wall = _mean_wall(fn, calls)
    profile, traced = _profiled(fn, calls, "trace_calls")
    source, events = device_events(profile)
    return summarize(profile, source, events, calls=calls, wall_s=wall, traced_wall_s=traced, top=top)


def summarize(profile, source: str, events, *, calls: int, wall_s: float, traced_wall_s: float,
              top: int = 5) -> TraceSummary:
    """The :class:`TraceSummary` of ``calls`` calls from their device ``events`` (``(name, start_ns,
    end_ns)``, :func:`device_events` of ``profile``) and their mean wall seconds untraced and
    traced. Busy time is the union of every event; the operation count and ``top`` leave out XLA's
    control-flow containers (``while``, ``conditional``, ``call``: on a CPU an event that spans the
    operations inside it). ``RuntimeError`` when there are no events (a backend whose profiler
    plug-in is missing, e.g. a GPU without CUPTI), naming the planes the profile holds."""
    if not events:
        raise RuntimeError("trace_calls: the profiler recorded no device operations (planes: "
                           f"{', '.join(p.name for p in profile.planes) or 'none'}); on a GPU JAX's profiler needs "
                           "CUPTI (the nvidia-cuda-cupti package of the CUDA wheels).")
    by_name: dict[str, list[float]] = {}
    for name, s, e in events:
        if name.split(".")[0] not in _CONTAINERS:
            by_name.setdefault(name, []).append(e - s)
    ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    return TraceSummary(calls=calls, wall_ms=1e3 * wall_s, traced_wall_ms=1e3 * traced_wall_s,
                        busy_ms=busy_ns((s, e) for _, s, e in events) / 1e6 / calls,
                        ops=sum(map(len, by_name.values())) / calls,
                        top=tuple((name, sum(d) / 1e6 / calls, len(d) / calls) for name, d in ranked),
                        source=source)
