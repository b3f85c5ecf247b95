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
    monkeypatch.setitem(timing._COMPILES, "cache_hits", 3)
    since = timing.compiles_since(dict(compilations=2, compile_s=1.5, cache_hits=1))
    assert since == dict(compilations=3, compile_s=2.5, cache_hits=2)


def test_a_summary_of_one_program_says_program(tmp_path):
    log = tmp_path / "compiles.tsv"
    log.write_text("100.0\t1\tjit(step)\t2.5\n99.0\t1\tjit(old)\t1.0\n")
    assert timing.compile_summary(log, since=100.0) == "1 program, 2.5 s summed: jit(step) 1 x 2.5 s"
    assert timing.compile_summary(log, since=100.0005).startswith("1 program,")  # times are written rounded
    assert timing.compile_summary(log, since=100.01) == "no compilation logged"
    assert timing.compile_summary(log, top=2) == "2 programs, 3.5 s summed: jit(step) 1 x 2.5 s, jit(old) 1 x 1.0 s"
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
