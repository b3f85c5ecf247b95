"""The timing rules every latency, unit cost and throughput of the book rests on (gmlm_lib.core.timing),
on a fake clock: the fastest call over a minimum time, interleaved rounds, the matmul peak's FLOP count,
and the compile counters read as differences (and, on the real clock, counted once a program)."""

import types

import jax
import jax.numpy as jnp
import pytest

from gmlm_lib.core import timing


class _Clock:
    """perf_counter for timing: each call of a timed function advances it by its next duration."""

    def __init__(self, durations):
        self.now, self.durations, self.calls = 100.0, list(durations), 0  # not 0: a sum and a difference differ

    def perf_counter(self):
        return self.now

    def call(self):
        self.calls += 1
        self.now += self.durations.pop(0)


def test_the_fastest_call_is_kept_and_calls_stop_once_the_minimum_time_has_passed(monkeypatch):
    clock = _Clock([3.0, 1.0, 2.0, 0.5])
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    assert timing.fastest_call(clock.call, 6.0) == 1.0  # 3 + 1 + 2 = 6 s: the minimum reached, no fourth call
    assert clock.calls == 3
    clock = _Clock([0.25])
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    assert timing.fastest_call(clock.call, 0.0) == 0.25 and clock.calls == 1  # at least one call


def test_rounds_interleave_the_contestants_and_each_keeps_its_best(monkeypatch):
    seen, results = [], {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 6.0, 4.0])}

    def fake(fn, min_time):
        seen.append((fn(), min_time))
        return next(results[seen[-1][0]])

    monkeypatch.setattr(timing, "fastest_call", fake)
    best = timing.best_times({"a": lambda: "a", "b": lambda: "b"}, 1.5, rounds=3)
    assert best == {"a": 1.0, "b": 4.0}
    assert seen == [("a", 0.5), ("b", 0.5)] * 3  # a, b, a, b, a, b; each round a third of the time


def test_the_matmul_peak_counts_two_flops_a_multiply_add(monkeypatch):
    monkeypatch.setattr(timing, "fastest_call", lambda fn, min_time: (fn(), 0.5)[1])
    assert timing.matmul_peak(size=8, min_time=0.0) == pytest.approx(2 * 8**3 / 0.5)


def test_compilations_are_counted_from_the_snapshot_on(monkeypatch):
    timing.compile_clock()  # listeners registered
    monkeypatch.setitem(timing._COMPILES, "compilations", 5)
    monkeypatch.setitem(timing._COMPILES, "compile_s", 4.0)
    monkeypatch.setitem(timing._COMPILES, "compile_wall_s", 3.0)
    monkeypatch.setitem(timing._COMPILES, "cache_hits", 3)
    since = timing.compiles_since(dict(compilations=2, compile_s=1.5, compile_wall_s=1.0, cache_hits=1))
    assert since == dict(compilations=3, compile_s=2.5, compile_wall_s=2.0, cache_hits=2)
    # a snapshot from before the wall time was counted: all of it since the process started
    assert timing.compiles_since(dict(compilations=2, compile_s=1.5, cache_hits=1))["compile_wall_s"] == 3.0


def test_covered_adds_what_a_span_adds_to_the_time_the_spans_cover():
    """Programs compiled side by side overlap: the wall time in which any compiled grows by the part of
    a new span that no earlier span covers, in whatever order the spans come."""
    spans = []
    assert timing.covered(spans, 10.0, 20.0) == 10.0
    assert timing.covered(spans, 12.0, 18.0) == 0.0  # inside: compiled while another was compiling
    assert timing.covered(spans, 15.0, 25.0) == 5.0  # overlaps the end
    assert timing.covered(spans, 30.0, 31.0) == 1.0 and spans == [[10.0, 25.0], [30.0, 31.0]]
    assert timing.covered(spans, 0.0, 2.0) == 2.0 and spans[0] == [0.0, 2.0]  # earlier than every span
    assert timing.covered(spans, 1.0, 40.0) == 8.0 + 5.0 + 9.0 and spans == [[0.0, 40.0]]
    assert timing.covered(spans, 40.0, 40.0) == 0.0 and spans == [[0.0, 40.0]]
    with pytest.raises(ValueError, match=r"covered: a span must end at or after its start; got \[2.0, 1.0\]"):
        timing.covered(spans, 2.0, 1.0)


def test_the_wall_time_of_compilations_side_by_side_is_less_than_their_sum(monkeypatch):
    """The listener credits each compilation with its seconds (summed) and with what it adds to the wall time in
    which something compiled: three programs ending at 10, 11 and 20 s after 10, 10 and 2 s took 22 s summed,
    13 s of wall time ([0, 11] and [18, 20])."""
    clock = iter([10.0, 11.0, 20.0])
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: next(clock), time=lambda: 0.0))
    monkeypatch.setattr(timing, "_SPANS", [])
    monkeypatch.setitem(timing._COMPILES, "compile_wall_s", 0.0)
    monkeypatch.delenv(timing.COMPILE_LOG, raising=False)
    before = dict(timing._COMPILES)
    for seconds in (10.0, 10.0, 2.0):
        timing._on_duration(timing._COMPILE_EVENT, seconds, fun_name="jit(f)")
    assert timing._COMPILES["compile_s"] - before["compile_s"] == pytest.approx(22.0)
    assert timing._COMPILES["compile_wall_s"] == pytest.approx(13.0)
    assert timing._COMPILES["compilations"] - before["compilations"] == 3


def test_a_summary_of_one_program_says_program(tmp_path):
    log = tmp_path / "compiles.tsv"
    log.write_text("100.0\t1\tjit(step)\t2.5\n99.0\t1\tjit(old)\t1.0\n")
    assert timing.compile_summary(log, since=100.0) == \
        "1 program, 2.5 s summed, 2.5 s of wall time: jit(step) 1 x 2.5 s"
    assert timing.compile_summary(log, since=100.0005).startswith("1 program,")  # times are written rounded
    assert timing.compile_summary(log, since=100.01) == "no compilation logged"
    # jit(old) compiled in [98, 99] while jit(step) did in [97.5, 100]: 3.5 s summed, 2.5 s of wall time
    assert timing.compile_summary(log, top=2) == \
        "2 programs, 3.5 s summed, 2.5 s of wall time: jit(step) 1 x 2.5 s, jit(old) 1 x 1.0 s"
    assert timing.compile_summary(log, top=1).endswith("jit(step) 1 x 2.5 s, ...")  # more programs than shown


def test_compiling_in_parallel_reports_the_wall_seconds_from_its_start(monkeypatch):
    ticks = iter([100.0, 103.5])
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    done = []
    assert timing.compile_in_parallel([lambda: done.append(1), lambda: done.append(2)], threads=2) == 3.5
    assert sorted(done) == [1, 2]


def test_compile_clock_counts_each_compilation_once_however_often_it_is_called():
    """compile_clock registers its listeners with jax.monitoring on its first call only (a chapter calls it
    before each step it times; compiles_since calls it too): a program is counted once, not once a call."""
    x = jnp.ones((8, 8))
    start = timing.compile_clock()
    for _ in range(3):
        timing.compile_clock()
    jax.jit(lambda y: jnp.tanh(y @ y.T).sum() + 1.5)(x).block_until_ready()  # one new program
    assert timing.compiles_since(start)["compilations"] == 1
    assert timing.compiles_since(timing.compile_clock())["compilations"] == 0


def test_the_compile_log_names_the_line_that_compiled_each_program(tmp_path, monkeypatch):
    """Each line ends with the caller outside JAX and the standard library (here this test's line), so
    that array code run op by op shows as many programs from one line; a log of four fields still reads."""
    log = tmp_path / "compiles.tsv"
    monkeypatch.setenv(timing.COMPILE_LOG, str(log))
    timing.compile_clock()
    x = jnp.arange(7.0) * 3.25  # a one-operation program, compiled by this line
    jax.jit(lambda y: jnp.cos(y).sum() * 0.5)(x).block_until_ready()
    fields = [line.split("\t") for line in log.read_text().splitlines()]
    assert fields and all(len(f) == 5 for f in fields)
    assert all(f[4].startswith("test_timing.py:") for f in fields), fields
    assert any(f[4].endswith(":test_the_compile_log_names_the_line_that_compiled_each_program") for f in fields)
    old = tmp_path / "old.tsv"
    old.write_text("\n".join("\t".join(f[:4]) for f in fields) + "\n")
    assert timing.compile_summary(old).startswith(f"{len(fields)} program")
    assert timing.compile_summary(log).startswith(f"{len(fields)} program")


def test_programs_compiled_side_by_side_are_timed_summed_and_as_wall_time(tmp_path, monkeypatch):
    """Four programs compiled by compile_in_parallel: the record's wall seconds (the union of their spans) are
    at least the longest one's seconds, as the compile log writes them, and at most their sum."""
    log = tmp_path / "compiles.tsv"
    monkeypatch.setenv(timing.COMPILE_LOG, str(log))
    start = timing.compile_clock()
    x = jnp.ones((16, 16))
    fns = [jax.jit(lambda y, k=k: jnp.sin(y @ y.T * (k + 0.25)).cumsum(axis=k % 2).sum()) for k in range(4)]
    timing.compile_in_parallel([lambda f=f: f(x).block_until_ready() for f in fns], threads=4)
    got = timing.compiles_since(start)
    each = [float(line.split("\t")[3]) for line in log.read_text().splitlines()]
    assert got["compilations"] == len(each) >= 4
    assert max(each) - 0.01 <= got["compile_wall_s"] <= got["compile_s"] + 0.01
