"""Selecting a model's number of updates on a val split (issue 45, item 1): the val loss counts every
held-out pair once, the best checkpoint is kept and is the model returned and loaded, a killed run
resumes to the same selection, and a folder is never validated on other pairs without a word."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import time
import types

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


def test_val_loss_without_a_target_token_is_refused_by_name():
    """No batch, or batches whose rows are all filling: a clear error, not a division by zero."""
    with pytest.raises(ValueError, match="validation batches hold no target token"):
        training.validation_loss(None, None, [], jax.random.key(0))

    class Filling:
        def arrays(self):
            return {}

    calls = []

    def eval_fn(params, arrays, key):
        calls.append(key)
        return np.float32(0.0), np.float32(0.0)

    with pytest.raises(ValueError, match="validation batches hold no target token"):
        training.validation_loss(eval_fn, None, [Filling(), Filling()], jax.random.key(0))
    assert len(calls) == 2


# --- selection, resume, refusals ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_the_checkpoint_with_the_lowest_val_loss_is_kept_returned_and_loaded(tmp_path, kind):
    run = tmp_path / "run"
    t0 = time.perf_counter()
    res = training.train(_cfg(kind), _batcher(8, 1), run, val=_batcher(24, 2), progress=False)
    elapsed = time.perf_counter() - t0
    steps, losses = zip(*res.val_losses)
    assert steps == (5, 10, 15, 20)
    assert res.selected_step == steps[int(np.argmin(losses))] == 5  # the scenario overfits: an early one wins
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir()) == [5, 15, 20]  # best + newest two
    # a digest for each checkpoint kept, none for the pruned ones
    assert sorted(map(int, json.loads((run / "checkpoint_digests.json").read_text()))) == [5, 15, 20]
    for log in ("metrics.jsonl", "val.jsonl"):  # seconds since the call started, in order
        walls = [json.loads(line)["wall_s"] for line in (run / log).read_text().splitlines()]
        assert 0 < walls[0] and walls == sorted(walls) and walls[-1] <= elapsed, log
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


def test_of_equal_val_losses_the_trainer_selects_the_earlier_checkpoint(tmp_path, monkeypatch):
    """A tie goes to the fewer updates, as padir_findings.convergence reads a run's val losses (tested
    in test_convergence_reads_the_fall_over_the_last_quarter): every checkpoint scoring the same, the
    first is the selected one."""
    monkeypatch.setattr(training, "validation_loss", lambda *args, **kwargs: 1.25)
    res = training.train(_cfg(steps=10), _batcher(8, 1), tmp_path / "run", val=_batcher(24, 2), progress=False)
    assert res.val_losses == [(5, 1.25), (10, 1.25)] and res.selected_step == 5


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


def test_a_validated_run_resumed_from_an_earlier_checkpoint_drops_the_lost_val_rows(tmp_path):
    """Killed at step 12 with checkpoint 10 damaged, the run falls back to checkpoint 5: the val row of step
    10 belongs to the lost part of the run and is dropped before training goes on, so the resumed curve and
    ``val.jsonl`` hold each step once."""
    def kill(step, _loss):
        if step == 12:
            raise KeyboardInterrupt

    run = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        training.train(_cfg(), _batcher(8, 1), run, val=_batcher(24, 2), progress=False, on_step=kill)
    assert [json.loads(line)["step"] for line in (run / "val.jsonl").read_text().splitlines()] == [5, 10]
    for p in (run / "checkpoints" / "10").rglob("*"):  # cut every file of checkpoint 10 in half
        if p.is_file() and p.stat().st_size > 64:
            p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.warns(UserWarning, match="checkpoint of step 10 is damaged"):
        resumed = training.train(_cfg(), _batcher(8, 1), run, val=_batcher(24, 2), progress=False)
    assert [s for s, _ in resumed.val_losses] == [5, 10, 15, 20]
    rows = [json.loads(line) for line in (run / "val.jsonl").read_text().splitlines()]
    assert [(r["step"], r["val_loss"]) for r in rows] == list(resumed.val_losses)


@pytest.mark.parametrize("what", ["parameters", "val loss"])
def test_non_finite_parameters_or_val_loss_stop_the_run_before_its_checkpoint(tmp_path, monkeypatch, what):
    """A finite training loss can come with non-finite parameters or a non-finite val loss: either stops the
    run at the checkpoint, before it is saved, and the run is not marked finished."""
    if what == "parameters":
        monkeypatch.setattr(runfolder, "all_finite", lambda tree: False)
        words = "the parameters hold non-finite numbers at step 5"
    else:
        monkeypatch.setattr(training._Validation, "score", lambda self, *args: float("nan"))
        words = "the validation loss is nan at step 5"
    run = tmp_path / "run"
    with pytest.raises(FloatingPointError, match=words):
        training.train(_cfg(), _batcher(8, 1), run, val=_batcher(24, 2), progress=False)
    saved = sorted(p.name for p in (run / "checkpoints").iterdir()) if (run / "checkpoints").is_dir() else []
    assert saved == []
    record = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    assert record.get("final_loss") is None


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
    with pytest.raises(runfolder.RunFolderError, match=r"step 5 \(selected on the val split\) is damaged: its digest differs"):
        training.load(run)


def test_a_selected_checkpoint_missing_from_the_folder_is_named_not_called_damaged(tmp_path):
    """A copy without the selected step's folder: the refusal says it is not there and which steps are,
    not that it is damaged (which a restore of a missing step would also report)."""
    run = tmp_path / "run"
    training.train(_cfg(), _batcher(8, 1), run, val=_batcher(24, 2), progress=False)
    held = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert 5 in held
    (run / "checkpoints" / "5").rename(tmp_path / "5")
    rest = [s for s in held if s != 5]
    with pytest.raises(runfolder.RunFolderError,
                       match=r"step 5 \(selected on the val split\) is not in checkpoints/ \(it holds "
                             + re.escape(str(rest))):
        training.load(run)


def test_a_damaged_digest_file_is_reported_and_the_checkpoints_still_load(tmp_path):
    """checkpoint_digests.json cut short: a warning names it (the checkpoints are then checked for finite
    numbers only) and the selected model still loads, the same as before the damage."""
    run = tmp_path / "run"
    training.train(_cfg(), _batcher(8, 1), run, val=_batcher(24, 2), progress=False)
    before = _params(training.load(run)[1])
    path = run / "checkpoint_digests.json"
    path.write_text(path.read_text()[:5])
    with pytest.warns(UserWarning, match=r"checkpoint_digests.json is damaged; the checkpoints are checked for finite"):
        after = _params(training.load(run)[1])
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


def test_a_run_whose_every_checkpoint_is_damaged_is_refused_by_load(tmp_path):
    """Without a val split load() takes the newest checkpoint that verifies; when none does, each is named
    in a warning, left where it is, and the refusal says to train again."""
    run = tmp_path / "run"
    training.train(_cfg(), _batcher(8, 1), run, progress=False)
    held = sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert len(held) >= 2
    path = run / "checkpoint_digests.json"
    path.write_text(json.dumps(dict.fromkeys(json.loads(path.read_text()), "0" * 64)))
    with pytest.warns(UserWarning, match="is damaged") as seen:
        with pytest.raises(runfolder.RunFolderError, match=r"every checkpoint in .*checkpoints is damaged"):
            training.load(run)
    assert sum("is damaged (its digest differs" in str(w.message) for w in seen) == len(held)
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == held  # nothing moved


def test_a_run_folder_that_cannot_be_made_is_named_with_the_fix(tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    with pytest.raises(runfolder.RunFolderError, match=r"cannot create the run folder .*a file/run \(.+\); pick a"):
        training.train(_cfg(), _batcher(8, 1), blocker / "run", progress=False)
    assert blocker.read_text() == "not a folder"


# --- the verdicts -------------------------------------------------------------------------------------

def test_convergence_reads_the_fall_over_the_last_quarter():
    # 1000 updates: the reference is the checkpoint at 750, the fall is to the lowest after it
    just_under = [(250, 3.0), (500, 2.5), (750, 2.0), (1000, 2.0 * (1 - 0.0099))]
    just_over = [(250, 3.0), (500, 2.5), (750, 2.0), (1000, 2.0 * (1 - 0.0101))]
    assert padir_findings.convergence(just_under, 1000)["verdict"] == "converged"
    assert padir_findings.convergence(just_over, 1000)["verdict"] == "still improving"
    assert padir_findings.convergence(just_over, 1000)["tail_gain"] == pytest.approx(0.0101)
    # exactly the gain, either way: a fall of 1% still improves, a rise of 1% is past its best (both ends included)
    at_gain = padir_findings.convergence([(500, 120.0), (750, 100.0), (1000, 99.0)], 1000)
    assert (at_gain["tail_gain"], at_gain["verdict"]) == (padir_findings.CONVERGED_GAIN, "still improving")
    at_rise = padir_findings.convergence([(500, 90.0), (750, 100.0), (1000, 101.0)], 1000)
    assert (at_rise["tail_gain"], at_rise["verdict"]) == (-padir_findings.CONVERGED_GAIN, "past its best")
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
    # the fall to the lowest loss after the cut, not to the last one (the trainer keeps the lowest)
    dip = padir_findings.convergence([(500, 2.0), (800, 1.5), (1000, 2.1)], 1000)
    assert dip["tail_gain"] == pytest.approx(0.25) and dip["verdict"] == "still improving"
    for bad in (dict(gain=0.0), dict(tail=1.0), dict(tail=0.0)):
        with pytest.raises(ValueError, match="tail must be in"):
            padir_findings.convergence([(500, 2.0), (1000, 1.0)], 1000, **bad)


def test_selection_findings_grade_every_model():
    curves = {"AR": ([(500, 2.0), (1000, 1.99)], 1000), "PaDIR raw": ([(500, 3.0), (1000, 2.5)], 1000),
              "PaDIR distilled": ([(500, 2.0), (1000, 2.5)], 1000)}
    table = padir_findings.selection(curves)
    assert list(table["verdict"]) == ["converged", "still improving", "past its best"]
    found = padir_findings.selection_findings(table, 1000)
    assert found["converged_met"] == "missed" and found["still_improving"] == "PaDIR raw"
    assert found["ar_selected_step"] == 1000 and found["n_validated"] == 3 and found["ar_verdict"] == "converged"
    table = padir_findings.selection({"AR": curves["AR"], "PaDIR distilled": curves["PaDIR distilled"]})
    found = padir_findings.selection_findings(table, 1000)
    assert found["converged_met"] == "met" and found["still_improving"] == "none"
    none = padir_findings.selection_findings(None, 300)
    assert none["converged_met"] == "not measured" and none["ar_selected_step"] == 300
    assert none["ar_verdict"] == "not measured"
    early = padir_findings.selection({"AR": ([(500, 1.9), (1000, 1.99)], 1000)})  # the teacher kept at 500
    found = padir_findings.selection_findings(early, 1000)
    assert found["ar_selected_step"] == 500 and found["ar_verdict"] == "past its best"
    rising = padir_findings.selection({"AR": ([(500, 2.0), (1000, 1.5)], 1000), "PaDIR raw": curves["AR"]})
    assert padir_findings.selection_findings(rising, 1000)["ar_verdict"] == "still improving"
    no_teacher = padir_findings.selection({"PaDIR raw": curves["PaDIR raw"]})
    assert padir_findings.selection_findings(no_teacher, 1000)["ar_verdict"] == "not measured"


# --- the pipeline ------------------------------------------------------------------------------------

M30K = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


@pytest.mark.skipif(not M30K.is_dir(), reason="the Multi30k copy (../shared/data/multi30k) is not here")
def test_the_pipeline_selects_on_multi30k_val_and_checks_val_files(tmp_path, monkeypatch):
    # data_dir wins over GMLM_MULTI30K_DIR (pointed here at a folder without the corpus)
    monkeypatch.setenv("GMLM_MULTI30K_DIR", str(tmp_path))
    exp = config.get("multi30k_tiny", dict(val_sentences=30, test_sentences=5, data_dir=str(M30K)))
    data = pipeline.load_data(exp)
    assert data.val is not None and len(data.val) == 30 and data.val.src != data.test.src[:30]
    assert len(pipeline.load_data(dataclasses.replace(exp, val_sentences=0)).val) == 1014  # 0: the whole split
    # aligned files without val_files: no val split, whatever val_sentences says
    for name, text in (("t.en", "a cat\ntwo dogs\n"), ("t.de", "eine katze\nzwei hunde\n")):
        (tmp_path / name).write_text(text)
    files = [str(tmp_path / "t.en"), str(tmp_path / "t.de")]
    own = pipeline.load_data(config.get("multi30k_tiny", dict(train_files=files, test_files=files, val_sentences=5)))
    assert own.val is None and own.train.tgt == ["eine katze", "zwei hunde"]
    with pytest.raises(ValueError, match="val_files must be empty or hold two aligned files"):
        config.get("multi30k_cpu", dict(val_files=["a.en", "a.de"]))
    with pytest.raises(ValueError, match="val_sentences must be >= 0"):
        config.get("multi30k_cpu", dict(val_sentences=-1))


# --- fitting the updates to a wall-time budget ---------------------------------------------------------

def test_factor_fits_every_model_in_the_budget_and_never_stretches():
    from gmlm_lib.mt import sizing

    planned = {"ar": (3000, 0.02), "padir": (4000, 0.03)}  # 60 s + 120 s
    assert sizing.factor(0, planned) == 1.0 and sizing.factor(200, planned) == 1.0
    f = sizing.factor(90, planned)
    assert f == pytest.approx(0.5) and sum(s * f * p for s, p in planned.values()) == pytest.approx(90)
    with pytest.raises(ValueError, match="train_seconds must be a finite number >= 0"):
        sizing.factor(-1, planned)
    with pytest.raises(ValueError, match="positive time per update"):
        sizing.factor(90, {"ar": (10, 0.0)})
    assert sizing.scaled(3000, 400, 500, 0.5) == dict(steps=1500, warmup=200, checkpoint_every=250)
    assert sizing.scaled(3000, 400, 500, 1.0) == dict(steps=3000, warmup=400, checkpoint_every=500)
    assert sizing.scaled(100, 10, 500, 1.0) == dict(steps=100, warmup=10, checkpoint_every=500)  # as asked
    tiny = sizing.scaled(10, 4, 5, 0.01)
    assert tiny["steps"] == 2 and 0 < tiny["warmup"] < 2 and tiny["checkpoint_every"] == 1
    # a warm-up of one update stays one (at least 1 while there is one); none stays none
    assert sizing.scaled(3000, 1, 500, 0.5)["warmup"] == 1 and sizing.scaled(3000, 0, 500, 0.5)["warmup"] == 0


class _Epochs:  # a batcher as _common_bucket reads it: the buckets of its first epoch's batches
    def __init__(self, buckets):
        self.buckets = buckets

    def epoch(self, seed):
        return [(b, None) for b in self.buckets]


def test_the_update_is_timed_on_the_bucket_the_epochs_use_most_the_longer_on_a_tie():
    from gmlm_lib.mt import sizing

    assert sizing._common_bucket(_Epochs([8, 16, 8, 32, 8, 16])) == 8
    assert sizing._common_bucket(_Epochs([16, 8, 32, 32, 16])) == 32  # 16 and 32 tie: the longer
    assert sizing._common_bucket(_Epochs([8])) == 8


def test_a_budget_for_no_models_and_no_repeats_is_refused():
    from gmlm_lib.mt import sizing

    with pytest.raises(ValueError, match="fit_config\\(models=...\\) must be >= 1; got 0"):
        sizing.fit_config(_cfg(), _batcher(24, 1), 0, 0)
    cfg, record = sizing.fit_config(_cfg(), _batcher(24, 1), 1, 0)  # one model, no budget: nothing timed
    assert cfg == _cfg() and record["update_s"] is None and record["factor"] == 1.0
    with pytest.raises(ValueError, match="updates_seconds\\(repeats=...\\) must be >= 1; got 0"):
        sizing.update_seconds(_cfg(), _batcher(24, 1), repeats=0)
    for no_number in (None, "60", True):  # not "no budget" (0): refused by name before anything is timed
        with pytest.raises(ValueError, match=rf"train_seconds must be a finite number >= 0 \(0: no budget\); "
                                             rf"got {re.escape(repr(no_number))}\."):
            sizing.fit_config(_cfg(), _batcher(24, 1), 1, no_number)
    assert sizing.factor(np.float64(2.0), {"ar": (10, 0.1)}) == 1.0  # a NumPy number is a number


def test_update_seconds_reads_each_loss_after_the_next_update_is_dispatched(monkeypatch):
    """The timing waits for the device: every update's loss is read (what blocks until it is computed),
    the first untimed, each timed one after the next update is dispatched, the last before the clock
    stops; a loss never read would leave its update's time out of the measurement."""
    from gmlm_lib.mt import sizing

    events = []

    class Loss:
        def __float__(self):
            events.append("read")
            time.sleep(0.01)
            return 1.0

    def update(leaves, batch, key):
        events.append("update")
        return leaves, Loss(), None

    n = training.mesh().devices.size
    job = dict(update=update, leaves=[], host=np.zeros((n, 2), np.int32), key=jax.random.key(0), bucket=8, size=n,
               sharding=None)
    monkeypatch.setattr(sizing, "_update_jobs", lambda models, buckets=None: {"m": job})
    monkeypatch.setattr(sizing, "_compile_updates", lambda jobs: 0.0)
    got = sizing.updates_seconds({"m": (None, None)}, repeats=3)["m"]
    assert events == ["update", "read", "update", "update", "read", "update", "read", "read"]
    assert got["update_s"] >= 0.01  # three timed reads of 10 ms over three updates


def test_update_seconds_times_a_compiled_update(monkeypatch):
    """The timed updates are the programs compiled side by side first, run as the loop runs them
    (batches sent from the host, the state's flat leaves): nothing compiles while they are timed."""
    from gmlm_lib.core import timing
    from gmlm_lib.mt import sizing

    phase, late = ["setup"], []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, d, fun_name=None, **_: late.append(fun_name)
        if event == "/jax/core/compile/backend_compile_duration" and phase[0] == "timed" and fun_name == "jit(step)"
        else None)
    real = timing.compile_in_parallel

    def spy(calls, threads=None):
        seconds = real(calls, threads)
        phase[0] = "timed"
        return seconds

    monkeypatch.setattr(timing, "compile_in_parallel", spy)
    try:
        m = sizing.update_seconds(_cfg(), _batcher(24, 1), repeats=2)
    finally:
        phase[0] = "off"
    assert late == []  # the timed updates are the compiled ones (the batch and state they were compiled for)
    monkeypatch.setattr(timing, "compile_in_parallel", real)
    assert m["update_s"] > 0 and m["compile_s"] > 0 and m["bucket"] in (8, 16) and m["batch"] >= 1
    both = sizing.updates_seconds({"ar": (_cfg(), _batcher(24, 1)), "padir": (_cfg("padir"), _batcher(24, 1))},
                                  repeats=2)
    assert set(both) == {"ar", "padir"} and all(r["update_s"] > 0 for r in both.values())
    assert sizing.update_seconds(_cfg(), _batcher(24, 1), repeats=1)["update_s"] > 0  # one repeat is a timing
    assert both["ar"]["compile_s"] == both["padir"]["compile_s"] > 0  # compiled together, side by side


@pytest.mark.slow  # compile counting: in the main suite, not in the newest-versions job
def test_variants_compiled_up_front_train_without_compiling_their_update(tmp_path):
    """compile_updates compiles one program per distinct update and length bucket (two variants that
    differ only in traced numbers, the unmasking rate and the learning rate, share one; a one-stage
    variant has its own), and each variant's training loop then compiles no update: the programs it
    runs, in both buckets, are those."""
    from gmlm_lib.mt import sizing

    compiled, phase = [], ["setup"]
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, d, fun_name=None, **_: compiled.append(phase[0])
        if event == "/jax/core/compile/backend_compile_duration" and fun_name == "jit(step)" else None)
    rng = np.random.default_rng(1)
    src = [list(rng.integers(6, 40, n)) for n in [3, 4, 5] * 6 + [10, 11, 12] * 2]  # short and long pairs
    two_buckets = batching.Batcher(src, [s[::-1] for s in src], batch_tokens=128, buckets=(8, 16))
    assert len(two_buckets.groups) == 2
    variants = {"baseline": _cfg("padir", steps=3, unmasking_rate=0.1),
                "rate 0.5": _cfg("padir", steps=3, unmasking_rate=0.5, learning_rate=2e-3),
                "1 stage": _cfg("padir", steps=3, stages=1)}
    try:
        phase[0] = "up front"
        got = sizing.compile_updates({name: (cfg, two_buckets) for name, cfg in variants.items()})
        assert got["programs"] == 2 * 2 and got["compile_s"] > 0
        for name, cfg in variants.items():
            phase[0] = name
            training.train(cfg, two_buckets, tmp_path / name.replace(" ", "_"), progress=False)
    finally:
        phase[0] = "off"
    assert compiled.count("up front") == 2 * 2, compiled
    assert [p for p in compiled if p != "up front"] == []  # the loops compiled no update of their own
    base = variants["baseline"]
    assert training.finished(base, tmp_path / "baseline")  # what the chapter leaves out of compile_updates
    assert not training.finished(base.replace(steps=4), tmp_path / "baseline")  # more updates to run
    assert not training.finished(base, tmp_path / "never_trained")


def test_fit_shrinks_the_updates_once_and_every_chapter_reuses_the_decision(tmp_path, monkeypatch):
    from gmlm_lib.mt import sizing

    calls = []

    def fake(models, repeats=5):
        calls.extend(cfg.kind for cfg, _ in models.values())
        return {name: dict(update_s=0.01 if cfg.kind == "ar" else 0.02, compile_s=1.0, bucket=16, batch=8)
                for name, (cfg, _) in models.items()}

    monkeypatch.setattr(sizing, "updates_seconds", fake)
    exp = config.get("multi30k_cpu", dict(ar_steps=1000, padir_steps=500, warmup=100, checkpoint_every=200,
                                          train_seconds=15.0))
    data = {"ar": _batcher(8, 1), "padir": _batcher(8, 1)}
    fitted, record = sizing.fit(exp, 40, data, tmp_path)  # planned: 1000 * 0.01 + 2 * 500 * 0.02 = 30 s
    assert record["factor"] == pytest.approx(0.5) and record["planned_s"] == pytest.approx(30.0)
    assert (fitted.ar_steps, fitted.padir_steps, fitted.warmup, fitted.checkpoint_every) == (500, 250, 50, 100)
    assert "500 AR and 250 PaDIR updates" in padir_findings.sizing_text(record)
    assert "would take 30 s here, over the 15 s budget, so each model trains 0.50" in padir_findings.sizing_text(record)
    again, _ = sizing.fit(exp, 40, data, tmp_path)  # decided once: not timed again
    assert again == fitted and len(calls) == 2
    with pytest.raises(ValueError, match="was decided for other settings"):
        sizing.fit(dataclasses.replace(exp, train_seconds=20.0), 40, data, tmp_path)
    roomy, record = sizing.fit(dataclasses.replace(exp, train_seconds=60.0), 40, data, tmp_path / "b")
    assert record["chosen"] == {}  # nothing shrunk: nothing chosen
    assert roomy.ar_steps == 1000 and record["factor"] == 1.0 and "within the 60 s budget" in \
        padir_findings.sizing_text(record)
    none, record = sizing.fit(dataclasses.replace(exp, train_seconds=0.0), 40, data, tmp_path / "c")
    assert none.ar_steps == 1000 and "no wall-time budget" in padir_findings.sizing_text(record)
    assert not (tmp_path / "c" / sizing.SIZING_FILE).exists()


def test_fit_plans_padir_twice_and_keeps_the_schedule_inside_the_shorter_run(tmp_path, monkeypatch):
    """The planned time counts each kind's own updates (PaDIR trained twice, raw and distilled), and the
    one warm-up and checkpoint interval the experiment holds are the smaller of the two kinds' (here
    PaDIR's, whose 50 updates clamp them)."""
    from gmlm_lib.mt import sizing

    monkeypatch.setattr(sizing, "updates_seconds", lambda models, repeats=5: {
        name: dict(update_s=0.01 if cfg.kind == "ar" else 0.02, compile_s=1.0, bucket=16, batch=8)
        for name, (cfg, _) in models.items()})
    exp = config.get("multi30k_cpu", dict(ar_steps=1000, padir_steps=101, warmup=100, checkpoint_every=200,
                                          train_seconds=7.02))
    fitted, record = sizing.fit(exp, 40, {"ar": _batcher(8, 1), "padir": _batcher(8, 1)}, tmp_path)
    assert record["planned_s"] == pytest.approx(1000 * 0.01 + 2 * 101 * 0.02) and record["factor"] == pytest.approx(0.5)
    assert (fitted.ar_steps, fitted.padir_steps, fitted.warmup, fitted.checkpoint_every) == (500, 50, 49, 50)
    assert record["chosen"] == dict(ar_steps=500, padir_steps=50, warmup=49, checkpoint_every=50)
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="scaled: the factor must be in \\(0, 1\\]"):
            sizing.scaled(1000, 100, 200, bad)
    assert sizing.factor(10, {"ar": (0, 0.01)}) == 1.0  # a model with no updates to run


def test_an_update_costs_the_loops_wall_time_over_the_repeats(monkeypatch):
    from gmlm_lib.mt import sizing

    ticks = iter(range(100, 1000, 3))  # each reading of the clock 3 s after the last: the repeats take 3 s
    monkeypatch.setattr(sizing, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    assert sizing.update_seconds(_cfg(), _batcher(24, 1), repeats=4)["update_s"] == pytest.approx(3 / 4)


def test_the_ablations_say_how_their_updates_were_fitted():
    from gmlm_lib.book.findings import ablations

    def text(used, seconds, per):
        return ablations.budget_text(dict(asked=1200, used=used, seconds=seconds, update_s=per, factor=used / 1200))

    assert text(1200, 0, None) == "1,200 updates a model (no wall-time budget)"
    assert text(1200, 90, 0.0123) == "1,200 updates a model, within the 90 s budget; an update takes 12.3 ms here"
    assert "the 1,200 asked for would not fit the 90 s budget, so each trains 0.50 of them" in text(600, 90, 0.02)
    assert ablations.steps_findings(1200)["steps_met"] == "met"
    assert ablations.steps_findings(1199)["steps_met"] == "missed"


def test_fit_config_shrinks_one_recipe_for_several_models(monkeypatch):
    from gmlm_lib.mt import sizing

    monkeypatch.setattr(sizing, "update_seconds", lambda cfg, batcher, repeats=5: dict(update_s=0.01))
    cfg = _cfg(steps=1000, warmup=100, checkpoint_every=200)
    same, record = sizing.fit_config(cfg, _batcher(8, 1), 4, 0)
    assert same == cfg and record["factor"] == 1.0 and record["update_s"] is None
    fitted, record = sizing.fit_config(cfg, _batcher(8, 1), 4, 20.0)  # 4 models x 1000 x 10 ms = 40 s
    assert record["factor"] == pytest.approx(0.5) and record["used"] == fitted.steps == 500
    assert (fitted.warmup, fitted.checkpoint_every, fitted.log_every) == (50, 100, 10)
    roomy, record = sizing.fit_config(cfg, _batcher(8, 1), 4, 60.0)
    assert roomy == cfg and record["update_s"] == 0.01
    with pytest.raises(ValueError, match="models=...\\) must be >= 1"):
        sizing.fit_config(cfg, _batcher(8, 1), 0, 60.0)


@pytest.mark.slow  # compile counting: in the main suite, not in the newest-versions job
def test_a_run_compiles_its_update_and_val_programs_at_once_before_its_first_update(tmp_path, monkeypatch):
    from gmlm_lib.core import timing

    def batches(seed):
        return batching.Batcher(*_pairs(24, seed), batch_tokens=128, buckets=(5, 8))

    train, val = batches(1), batches(2)
    assert len(train.groups) == 2  # both buckets hold pairs: two update programs
    val_shapes = {(b.src.shape, b.tgt.shape) for b in val.once()}
    phase, compiled, batches = ["off"], [], []

    def listener(event, duration, fun_name=None, **_):
        if event == "/jax/core/compile/backend_compile_duration" and phase[0] != "off":
            compiled.append((phase[0], fun_name))

    jax.monitoring.register_event_duration_secs_listener(listener)
    real = timing.compile_in_parallel

    def spy(calls, threads=None):
        batches.append(len(calls))
        seconds = real(calls, threads)
        phase[0] = "loop"
        return seconds

    monkeypatch.setattr(timing, "compile_in_parallel", spy)
    phase[0] = "setup"
    try:
        res = training.train(_cfg(buckets=(5, 8)), train, tmp_path / "run", val=val, progress=False)
    finally:
        phase[0] = "off"
    assert batches == [2 + len(val_shapes)]
    programs = ("jit(step)", "jit(f)")  # the update and the val loss
    assert sum(name == "jit(step)" for p, name in compiled if p == "setup") == 2
    assert sum(name == "jit(f)" for p, name in compiled if p == "setup") == len(val_shapes)
    assert [name for p, name in compiled if p == "loop" and name in programs] == []  # the loop compiles none
    assert res.record["segments"][-1]["compile_s"] > 0
    # the same run trained without the early compilation: the same losses (the copies it donated were copies)
    monkeypatch.setattr(timing, "compile_in_parallel", lambda calls, threads=None: 0.0)
    plain = training.train(_cfg(buckets=(5, 8)), train, tmp_path / "plain", val=val, progress=False)
    assert plain.losses == res.losses and plain.val_losses == res.val_losses


def test_compile_in_parallel_calls_everything_and_raises_what_a_call_raised():
    from gmlm_lib.core import timing

    done = []
    assert timing.compile_in_parallel([]) == 0.0
    assert timing.compile_in_parallel([lambda i=i: done.append(i) or jax.numpy.ones(i + 1) for i in range(5)],
                                      threads=2) >= 0.0
    assert sorted(done) == list(range(5))

    def bad():
        raise FloatingPointError("boom")

    with pytest.raises(FloatingPointError, match="boom"):
        timing.compile_in_parallel([lambda: jax.numpy.ones(2), bad])
    with pytest.raises(ValueError, match="threads"):
        timing.compile_in_parallel([bad], threads=0)


def test_the_environment_caps_the_compile_threads_and_the_record_names_it(monkeypatch):
    import threading

    from gmlm_lib.core import records, timing

    names = []

    def call():
        names.append(threading.current_thread().name)
        time.sleep(0.05)  # long enough that a second thread, if there were one, would take a call

    monkeypatch.setenv(timing.ENV_THREADS, "1")
    timing.compile_in_parallel([call] * 4)
    assert len(set(names)) == 1  # one by one
    assert records.environment()["gmlm_compile_threads"] == "1"
    names.clear()
    timing.compile_in_parallel([call] * 4, threads=2)  # an explicit cap wins
    assert len(set(names)) == 2
    monkeypatch.setenv(timing.ENV_THREADS, "many")
    with pytest.raises(ValueError, match=r"\$GMLM_COMPILE_THREADS must be an integer >= 1"):
        timing.compile_in_parallel([call])
    monkeypatch.setenv(timing.ENV_THREADS, "0")
    with pytest.raises(ValueError, match=r"\$GMLM_COMPILE_THREADS must be an integer >= 1"):
        timing.compile_in_parallel([call])
    monkeypatch.delenv(timing.ENV_THREADS)
    assert "gmlm_compile_threads" not in records.environment()
