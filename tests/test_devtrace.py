"""core.devtrace: a call's device time read back from JAX's profiler, on any backend."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.profiler import ProfileData

from gmlm_lib.core import devtrace


def test_busy_time_is_the_union_of_the_intervals():
    """Against a brute-force count of covered integer instants, on random nested, overlapping and
    disjoint intervals; an empty interval and an empty list cost nothing."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        starts = rng.integers(0, 100, size=rng.integers(0, 8))
        spans = [(int(s), int(s + rng.integers(0, 30))) for s in starts]
        covered = np.zeros(140, bool)
        for s, e in spans:
            covered[s:e] = True
        assert devtrace.busy_ns(spans) == covered.sum()
    assert devtrace.busy_ns([(0, 10), (2, 5), (8, 12)]) == 12  # nested and overlapping count once


_GPU_PLANE = '''
planes { id: 1 name: "/device:GPU:0"
  lines { id: 1 name: "Stream #7(Compute)" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 4000000 }
    events { metadata_id: 2 offset_ps: 6000000 duration_ps: 1000000 }
    events { metadata_id: 1 offset_ps: 20000000 duration_ps: 2000000 } }
  lines { id: 2 name: "XLA Modules" timestamp_ns: 1000
    events { metadata_id: 3 offset_ps: 0 duration_ps: 30000000 } }
  event_metadata { key: 1 value { id: 1 name: "gemm_fusion" } }
  event_metadata { key: 2 value { id: 2 name: "loop_fusion" } }
  event_metadata { key: 3 value { id: 3 name: "jit_decode" } } }
planes { id: 2 name: "/host:CPU" }
'''


def test_a_gpu_trace_counts_its_kernels_not_its_module_spans():
    """A GPU plane as the profiler writes it: kernels on a stream line, and an "XLA Modules" line whose
    event spans the whole program, idle gaps included. Busy time is the kernels' (7 us), not the
    module's, set against the untraced wall time (40 us; the traced calls took 30); the top operations
    are ranked by device time."""
    profile = ProfileData.from_text_proto(_GPU_PLANE)
    source, events = devtrace.device_events(profile)
    assert source == "/device:GPU:0" and sorted(n for n, _, _ in events) == ["gemm_fusion", "gemm_fusion", "loop_fusion"]
    s = devtrace.summarize(profile, source, events, calls=1, wall_s=40e-6, traced_wall_s=30e-6)
    assert s.busy_ms == pytest.approx(0.007) and s.ops == 3 and s.idle_ms == pytest.approx(0.033)
    assert s.top == (("gemm_fusion", pytest.approx(0.006), 2.0), ("loop_fusion", pytest.approx(0.001), 1.0))
    assert s.busy_fraction == pytest.approx(7 / 40)
    more = devtrace.summarize(profile, source, events, calls=1, wall_s=5e-6, traced_wall_s=8e-6)
    assert more.busy_fraction == 1.0 and more.idle_ms == 0.0  # never more than busy
    # the same events as two calls: per call, half the busy time, operations and top entries; the
    # wall times are already means a call
    two = devtrace.summarize(profile, source, events, calls=2, wall_s=40e-6, traced_wall_s=30e-6)
    assert two.busy_ms == pytest.approx(0.0035) and two.ops == 1.5
    assert two.wall_ms == pytest.approx(0.04) and two.traced_wall_ms == pytest.approx(0.03)
    assert two.top == (("gemm_fusion", pytest.approx(0.003), 1.0), ("loop_fusion", pytest.approx(0.0005), 0.5))
    assert np.isnan(devtrace.summarize(profile, source, events, calls=1, wall_s=0.0, traced_wall_s=0.0).busy_fraction)
    with pytest.raises(RuntimeError, match="no device operations .*/host:CPU.*CUPTI"):
        devtrace.summarize(profile, source, [], calls=1, wall_s=1.0, traced_wall_s=1.0)


def test_a_traced_call_on_this_backend():
    """A jitted loop traced here: the device is busy for most of a call and never longer than the call;
    the same work with a host pause between two calls leaves the device idle for the pause (the pause is
    not counted as busy); each call's operations are found and named."""
    f = jax.jit(lambda x: jax.lax.fori_loop(0, 8, lambda i, y: jnp.tanh(y @ y), x))
    x = jnp.ones((256, 256)) / 256
    busy = devtrace.trace_calls(lambda: f(x), calls=5)
    assert busy.calls == 5 and busy.ops >= 8 and busy.top
    assert 0 < busy.busy_ms <= busy.traced_wall_ms * 1.01 and 0 < busy.busy_fraction <= 1

    def paused():
        jax.block_until_ready(f(x))
        time.sleep(0.05)
        return f(x)

    waiting = devtrace.trace_calls(paused, calls=3)
    assert waiting.idle_ms >= 40 and waiting.busy_fraction < 0.6
    assert 50 <= waiting.wall_ms < 100 and 50 <= waiting.traced_wall_ms  # the mean of a call, pause included
    assert waiting.ops == pytest.approx(2 * busy.ops)  # two calls of the same program each time
    assert devtrace.trace_calls(lambda: f(x), calls=1).ops == pytest.approx(busy.ops)  # one call is enough
    with pytest.raises(ValueError, match="calls must be a positive int"):
        devtrace.trace_calls(lambda: f(x), calls=0)


def test_a_trace_that_wrote_no_profile_is_an_error_and_leaves_no_folder(monkeypatch, tmp_path):
    import contextlib
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(jax.profiler, "trace", lambda folder: contextlib.nullcontext())  # a profiler that wrote nothing
    with pytest.raises(RuntimeError, match=r"trace_calls: jax.profiler.trace wrote no .xplane.pb under .*gmlm-trace-"):
        devtrace.trace_calls(lambda: jnp.ones(3) * 2, calls=1)
    assert list(tmp_path.iterdir()) == []  # the temporary folder is removed on the error too
