"""Selecting a model's number of updates on a val split (issue 45, item 1): the val loss counts every
held-out pair once, the best checkpoint is kept and is the model returned and loaded, a killed run
resumes to the same selection, and a folder is never validated on other pairs without a word."""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np
import pytest
from flax import nnx

from gmlm_lib.book.findings import padir as padir_findings
from gmlm_lib.mt import batching, config, pipeline, runfolder, seq2seq, training


def _pairs(n, seed):
    rng = np.random.default_rng(seed)
    src = [list(rng.integers(6, 40, rng.integers(2, 7))) for _ in range(n)]
    return src, [s[::-1] for s in src]


def _batcher(n, seed, **kw):
    return batching.Batcher(*_pairs(n, seed), batch_tokens=128, buckets=(8, 16), **kw)


def _cfg(kind="ar", **kw):
    mc = seq2seq.ModelConfig(vocab=40, causal=kind == "ar", d_model=32, heads=4, enc_layers=1, dec_layers=1,
                             d_ff=64, max_len=16, dropout=0.0)
    # 8 training pairs at a high learning rate: the model memorises them and its val loss rises after the
    # first checkpoint, so the selected checkpoint is an early one (step 5 of 20)
    base = dict(kind=kind, model=mc, steps=20, warmup=1, batch_tokens=128, checkpoint_every=5, log_every=5,
                buckets=(8, 16), learning_rate=1e-2)
    return training.TrainConfig(**{**base, **kw})


def _params(model) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(nnx.split(model)[1])]


# --- the val batches and the val loss ---------------------------------------------------------------------

def test_once_holds_every_pair_once_in_full_batches():
    val = batching.Batcher(*_pairs(37, 3), batch_tokens=128, buckets=(8, 16), multiple=2)
    batches = val.once()
    seen = []
    for b in batches:
        assert len(b.src) % 2 == 0 and b.rows is not None and len(b.rows) == len(b.src)
        seen += [tuple(int(t) for t in row[m]) for row, m, r in zip(b.src, b.src_mask, b.rows) if r]
    kept = [tuple(val.src[i]) for ix in val.groups.values() for i in ix]
    assert sorted(seen) == sorted(kept) and len(seen) == 37


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_val_loss_is_the_mean_over_every_pair_and_ignores_the_filling(kind):
    # fill = "mask" with unmasking rate 0 makes PaDIR's corruption deterministic (every position [MASK]),
    # so the loss of a pair does not depend on the batch it is in: the batched val loss must equal the
    # token-weighted mean of each pair scored alone
    cfg = _cfg(kind, **(dict(fill="mask", unmasking_rate=0.0) if kind == "padir" else {}))
    model = seq2seq.build(cfg.model, 0)
    graphdef, params = nnx.split(model)
    eval_fn = training.make_eval(graphdef, cfg)
    val = _batcher(13, 4)
    batched = training.validation_loss(eval_fn, params, val.once(), jax.random.key(0))
    total = tokens = 0.0
    for bucket, ix in val.groups.items():
        for i in ix:
            t, n = eval_fn(params, val.make(bucket, np.array([i])).arrays(), jax.random.key(1))
            total, tokens = total + float(t), tokens + float(n)
    assert batched == pytest.approx(total / tokens, rel=1e-5)
    # the filled-up rows really are excluded: counting them changes the loss
    b = val.once()[0]
    assert not b.rows.all()
    counted = eval_fn(params, b.arrays(), jax.random.key(0))[1]
    everything = eval_fn(params, dict(b.arrays(), rows=np.ones_like(b.rows)), jax.random.key(0))[1]
    assert float(everything) > float(counted)


# --- selection, resume, refusals ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_the_checkpoint_with_the_lowest_val_loss_is_kept_returned_and_loaded(tmp_path, kind):
    run = tmp_path / "run"
    res = training.train(_cfg(kind), _batcher(8, 1), run, val=_batcher(24, 2), progress=False)
    steps, losses = zip(*res.val_losses)
    assert steps == (5, 10, 15, 20)
    assert res.selected_step == steps[int(np.argmin(losses))] == 5  # the scenario overfits: an early one wins
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir()) == [5, 15, 20]  # best + newest two
    record = json.loads((run / "run.json").read_text())["validation"]
    assert record["selected_step"] == 5 and record["selected_loss"] == pytest.approx(min(losses))
    assert record["last_step"] == 20 and record["pairs"] == 24 and record["metric"] == training.VAL_METRIC
    rows = [json.loads(line) for line in (run / "val.jsonl").read_text().splitlines()]
    assert [(r["step"], r["val_loss"]) for r in rows] == list(res.val_losses)
    _, loaded = training.load(run)
    for a, b in zip(_params(res.model), _params(loaded)):
        np.testing.assert_array_equal(a, b)
    last = training.train(_cfg(kind), _batcher(8, 1), tmp_path / "unvalidated", progress=False)
    assert any(not np.array_equal(a, b) for a, b in zip(_params(last.model), _params(loaded)))  # not the last one
    again = training.train(_cfg(kind), _batcher(8, 1), run, val=_batcher(24, 2), progress=False)  # reused
    assert again.selected_step == 5 and again.val_losses == res.val_losses
    for a, b in zip(_params(again.model), _params(loaded)):
        np.testing.assert_array_equal(a, b)


def test_a_killed_validated_run_resumes_to_the_same_curve_and_selection(tmp_path):
    whole = training.train(_cfg(), _batcher(8, 1), tmp_path / "whole", val=_batcher(24, 2), progress=False)

    def kill(step, _loss):
        if step == 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        training.train(_cfg(), _batcher(8, 1), tmp_path / "cut", val=_batcher(24, 2), progress=False, on_step=kill)
    resumed = training.train(_cfg(), _batcher(8, 1), tmp_path / "cut", val=_batcher(24, 2), progress=False)
    assert [s for s, _ in resumed.val_losses] == [5, 10, 15, 20]
    np.testing.assert_allclose([v for _, v in resumed.val_losses], [v for _, v in whole.val_losses], rtol=1e-6)
    assert resumed.selected_step == whole.selected_step


def test_a_folder_is_validated_on_one_val_split_or_none(tmp_path):
    run = tmp_path / "run"
    training.train(_cfg(), _batcher(8, 1), run, val=_batcher(24, 2), progress=False)
    with pytest.raises(ValueError, match="validated on a val split"):
        training.train(_cfg(), _batcher(8, 1), run, progress=False)
    with pytest.raises(ValueError, match="validated on other pairs"):
        training.train(_cfg(), _batcher(8, 1), run, val=_batcher(24, 5), progress=False)
    plain = tmp_path / "plain"
    training.train(_cfg(), _batcher(8, 1), plain, progress=False)
    with pytest.raises(ValueError, match="trained without validation"):
        training.train(_cfg(), _batcher(8, 1), plain, val=_batcher(24, 2), progress=False)


def test_a_damaged_selected_checkpoint_is_refused_not_replaced(tmp_path):
    run = tmp_path / "run"
    training.train(_cfg(), _batcher(8, 1), run, val=_batcher(24, 2), progress=False)
    digests = json.loads((run / "checkpoint_digests.json").read_text())
    digests["5"] = "0" * 64
    (run / "checkpoint_digests.json").write_text(json.dumps(digests))
    with pytest.raises(runfolder.RunFolderError, match=r"step 5 \(selected on the val split\) differs from the digest"):
        training.load(run)


# --- the verdicts -------------------------------------------------------------------------------------

def test_convergence_reads_the_fall_over_the_last_quarter():
    # 1000 updates: the reference is the checkpoint at 750, the fall is to the lowest after it
    just_under = [(250, 3.0), (500, 2.5), (750, 2.0), (1000, 2.0 * (1 - 0.0099))]
    just_over = [(250, 3.0), (500, 2.5), (750, 2.0), (1000, 2.0 * (1 - 0.0101))]
    assert padir_findings.convergence(just_under, 1000)["verdict"] == "converged"
    assert padir_findings.convergence(just_over, 1000)["verdict"] == "still improving"
    assert padir_findings.convergence(just_over, 1000)["tail_gain"] == pytest.approx(0.0101)
    rising = padir_findings.convergence([(250, 2.0), (500, 1.5), (750, 1.6), (1000, 1.7)], 1000)
    assert rising["selected_step"] == 500 and rising["tail_gain"] < 0 and rising["verdict"] == "past its best"
    flat = padir_findings.convergence([(500, 1.5), (750, 2.0), (1000, 2.0 * (1 + 0.0099))], 1000)
    assert flat["verdict"] == "converged" and flat["tail_gain"] == pytest.approx(-0.0099)
    tie = padir_findings.convergence([(250, 2.0), (500, 1.5), (750, 1.5), (1000, 1.6)], 1000)
    assert tie["selected_step"] == 500  # the earlier of two equal losses, as the trainer keeps it
    with pytest.raises(ValueError, match="checkpoint more often"):
        padir_findings.convergence([(1000, 1.0)], 1000)
    with pytest.raises(ValueError, match="not finite"):
        padir_findings.convergence([(500, float("nan")), (1000, 1.0)], 1000)


def test_selection_findings_grade_every_model():
    curves = {"AR": ([(500, 2.0), (1000, 1.99)], 1000), "PaDIR raw": ([(500, 3.0), (1000, 2.5)], 1000),
              "PaDIR distilled": ([(500, 2.0), (1000, 2.5)], 1000)}
    table = padir_findings.selection(curves)
    assert list(table["verdict"]) == ["converged", "still improving", "past its best"]
    found = padir_findings.selection_findings(table, 1000)
    assert found["converged_met"] == "missed" and found["still_improving"] == "PaDIR raw"
    assert found["ar_selected_step"] == 1000 and found["n_validated"] == 3
    table = padir_findings.selection({"AR": curves["AR"], "PaDIR distilled": curves["PaDIR distilled"]})
    found = padir_findings.selection_findings(table, 1000)
    assert found["converged_met"] == "met" and found["still_improving"] == "none"
    none = padir_findings.selection_findings(None, 300)
    assert none["converged_met"] == "not measured" and none["ar_selected_step"] == 300


# --- the pipeline ------------------------------------------------------------------------------------

M30K = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


@pytest.mark.skipif(not M30K.is_dir(), reason="the Multi30k copy (../shared/data/multi30k) is not here")
def test_the_pipeline_selects_on_multi30k_val_and_checks_val_files():
    exp = config.get("multi30k_tiny", dict(val_sentences=30, test_sentences=5, data_dir=str(M30K)))
    data = pipeline.load_data(exp)
    assert data.val is not None and len(data.val) == 30 and data.val.src != data.test.src[:30]
    with pytest.raises(ValueError, match="val_files must be empty or hold two aligned files"):
        config.get("multi30k_cpu", dict(val_files=["a.en", "a.de"]))
    with pytest.raises(ValueError, match="val_sentences must be >= 0"):
        config.get("multi30k_cpu", dict(val_sentences=-1))
