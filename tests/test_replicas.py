"""Seeds trained at once (issue 125, item 1): a run of S replicas updates every replica in one vmapped
program, and replica r equals the lone run with seed ``seed + r`` on replica r's batches (to float
rounding), selected on the val split as the lone run selects; a killed run of replicas resumes exactly."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from gmlm_lib.mt import batching, runfolder, seq2seq, training


def _pairs(n, seed):
    rng = np.random.default_rng(seed)
    src = [list(rng.integers(6, 40, rng.integers(2, 12))) for _ in range(n)]
    return src, [s[::-1] for s in src]


def _batcher(n, seed, **kw):
    return batching.Batcher(*_pairs(n, seed), batch_tokens=128, buckets=(8, 16), **kw)


def _cfg(kind="ar", **kw):
    mc = seq2seq.ModelConfig(vocab=40, causal=kind == "ar", d_model=32, heads=4, enc_layers=1, dec_layers=1,
                             d_ff=64, max_len=16, dropout=0.1, dropout_rng="threefry")
    base = dict(kind=kind, model=mc, steps=12, warmup=2, batch_tokens=128, checkpoint_every=4, log_every=2,
                buckets=(8, 16), learning_rate=1e-2, seed=3)
    return training.TrainConfig(**{**base, **kw})


def _params(model, inert: bool = True) -> list[np.ndarray]:
    """The parameters' arrays in path order; ``inert=False`` leaves out the attention key biases."""
    flat = jax.tree_util.tree_flatten_with_path(nnx.split(model)[1])[0]
    return [np.asarray(x) for path, x in flat if inert or "['k']['bias']" not in jax.tree_util.keystr(path)]


def _close(a, b, tol=2e-5):
    """Equal to ``tol``, the attention key biases left out when ``tol`` > 0: softmax is invariant to a shift
    that all keys share, so their gradient is zero but for rounding, and Adam (eps 1e-9) turns a rounding
    difference between the batched and the lone program into steps of the learning rate's size that change
    no output of the model (tested beside: the val losses agree)."""
    for x, y in zip(_params(a, tol == 0), _params(b, tol == 0), strict=True):
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


# --- the replicas' batches -------------------------------------------------------------------------------

def test_replica_batches_share_the_layout_and_differ_in_their_pairs():
    base = _batcher(60, 0)
    reps = base.replicas(3)
    assert reps[0] is base and [b.replica for b in reps] == [0, 1, 2]
    assert reps[1].fingerprint() != base.fingerprint() != reps[2].fingerprint()
    # replica 0 is the batcher of a lone run: its fingerprint and batches are those of a batcher without replicas
    plain = batching.Batcher(*_pairs(60, 0), batch_tokens=128, buckets=(8, 16))
    assert plain.fingerprint() == base.fingerprint()
    differ = 0
    for step in range(2 * len(base)):
        batches = [b.at(step) for b in reps]
        assert len({x.src.shape for x in batches}) == 1 and len({x.tgt.shape for x in batches}) == 1
        np.testing.assert_array_equal(batches[0].src, plain.at(step).src)
        differ += not np.array_equal(batches[0].src, batches[1].src)
    assert differ >= len(base)  # the replicas see other pairs (a bucket of one batch may coincide)
    # every replica still sees every kept pair of a bucket once an epoch
    for b in reps:
        seen = sorted(int(i) for bucket, ix in b.epoch(0) for i in ix if len(b.groups[bucket]) >= b.batch_size(bucket))
        assert len(seen) == len(set(seen))


def test_replica_settings_are_checked():
    with pytest.raises(ValueError, match="replicas"):
        _cfg(replicas=0)
    with pytest.raises(ValueError, match="r = 2 but the run has 2"):
        training.replica_config(_cfg(replicas=2), 2)
    assert training.replica_config(_cfg(replicas=2), 1) == _cfg(seed=4)
    with pytest.raises(ValueError, match="replica 0's batcher"):
        training.train(_cfg(replicas=2), _batcher(30, 0, replica=1), "/tmp/never-made-for-this-test", progress=False)


# --- a run of replicas against lone runs -----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_replica_r_equals_the_lone_run_with_seed_plus_r(tmp_path, kind):
    cfg = _cfg(kind, replicas=2)
    data, val = _batcher(40, 1), _batcher(12, 2)
    teacher = None
    if kind == "padir":  # each replica starts from its own teacher, as the pipeline pairs them
        cfg = cfg.replace(init="teacher")
        teacher = [seq2seq.build(_cfg("ar").model, s) for s in (7, 8)]
    both = training.train(cfg, data, tmp_path / "both", progress=False, val=val, teacher=teacher)
    assert len(both.models) == 2 and len(both.selected_steps) == 2
    assert both.record["parameters"] == seq2seq.count_params(both.models[0])
    rows = runfolder.read_metrics(tmp_path / "both" / "val.jsonl")
    for r, b in enumerate(data.replicas(2)):
        lone = training.train(training.replica_config(cfg, r), b, tmp_path / f"lone{r}", progress=False, val=val,
                              teacher=None if teacher is None else teacher[r])
        assert lone.selected_step == both.selected_steps[r]
        _close(lone.model, both.models[r])
        assert lone.final_loss == pytest.approx(both.record["final_losses"][r], rel=1e-4)
        np.testing.assert_allclose([v for _, v in lone.val_losses], [row["val_losses"][r] for row in rows], rtol=1e-4)
    # the replicas differ (their seeds do), so the comparison above could fail
    assert not np.allclose(_params(both.models[0])[0], _params(both.models[1])[0])
    # loading the folder gives each replica's selected model
    cfg_loaded, models = training.load_replicas(tmp_path / "both")
    assert cfg_loaded == cfg
    for got, want in zip(models, both.models, strict=True):
        _close(got, want, tol=0)


def test_a_killed_run_of_replicas_resumes_exactly(tmp_path):
    cfg, data = _cfg("padir", replicas=3), _batcher(40, 5)
    whole = training.train(cfg, data, tmp_path / "whole", progress=False)

    class Kill(Exception):
        pass

    def kill(step, loss):
        if step == 7:
            raise Kill

    with pytest.raises(Kill):
        training.train(cfg, data, tmp_path / "cut", progress=False, on_step=kill)
    resumed = training.train(cfg, data, tmp_path / "cut", progress=False)
    assert resumed.final_loss == whole.final_loss
    for a, b in zip(resumed.models, whole.models, strict=True):
        _close(a, b, tol=0)
    # a finished run whose record was lost: nothing trains, the record (each replica's final loss) comes back
    (tmp_path / "whole" / "run.json").unlink()
    again = training.train(cfg, data, tmp_path / "whole", progress=False,
                           on_step=lambda *_: pytest.fail("a finished run trained again"))
    assert again.record["final_losses"] == whole.record["final_losses"] and again.final_loss == whole.final_loss
    # reused when finished: no update runs, the same models come back
    again = training.train(cfg, data, tmp_path / "cut", progress=False,
                           on_step=lambda *_: pytest.fail("a finished run trained again"))
    for a, b in zip(again.models, whole.models, strict=True):
        _close(a, b, tol=0)


def test_a_non_finite_replica_stops_the_run_and_names_it(tmp_path):
    cfg = _cfg("ar", replicas=2, learning_rate=1e30, clip_norm=1e30, warmup=0)
    with pytest.raises(FloatingPointError, match=r"replica \d|non-finite"):
        training.train(cfg, _batcher(30, 0), tmp_path / "bad", progress=False)
    assert not training.finished(cfg, tmp_path / "bad")


def test_loading_a_run_of_replicas_falls_back_past_a_damaged_checkpoint(tmp_path):
    """load_replicas restores a run of replicas into abstract stacked arrays (no replica is built for it):
    the newest checkpoint whose digest disagrees is reported and the one before it loaded, every replica."""
    import json
    import warnings

    cfg, data = _cfg("ar", replicas=3), _batcher(30, 0)
    whole = training.train(cfg, data, tmp_path / "run", progress=False)
    _, models = training.load_replicas(tmp_path / "run")
    for got, want in zip(models, whole.models, strict=True):
        _close(got, want, tol=0)
    path = tmp_path / "run" / "checkpoint_digests.json"
    digests = json.loads(path.read_text())
    path.write_text(json.dumps({**digests, str(cfg.steps): "0" * 64}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, older = training.load_replicas(tmp_path / "run")
    assert any(f"step {cfg.steps} is damaged" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert len(older) == 3 and not np.array_equal(_params(older[0])[0], _params(models[0])[0])


def test_the_flops_of_a_run_of_replicas_are_every_replicas():
    """flops_per_step lowers the vmapped update on abstract stacked shapes (no replica built): S replicas
    count about S times a lone update's FLOPs (0.8% fewer measured here: XLA counts work that does not
    depend on the replica once, as it does with real arrays), never more."""
    data = _batcher(30, 0)
    lone = training.flops_per_step(_cfg("padir"), data)
    three = training.flops_per_step(_cfg("padir", replicas=3), data)
    assert 0.98 * 3 * lone <= three <= 3 * lone
