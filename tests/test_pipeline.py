"""The one translation pipeline (gmlm_lib.mt.pipeline): data to a complete run folder, resumable
step by step, and the stand-in of smoke runs made by the same function with the tiny preset."""

from __future__ import annotations

import json

import pytest

from gmlm_lib.mt import config, corpus, experiment, pipeline, translate

pytestmark = pytest.mark.slow

PAIRS = corpus.Parallel([f"a dog number {i} runs" for i in range(60)] + [f"two cats sit {i}" for i in range(60)],
                        [f"ein hund nummer {i} rennt" for i in range(60)] + [f"zwei katzen sitzen {i}" for i in range(60)],
                        name="toy")
TINY = config.get("multi30k_tiny", dict(ar_steps=3, padir_steps=3, checkpoint_every=3, warmup=1, vocab_size=120,
                                        padir_init="teacher"))


def test_build_makes_every_part_then_reuses_them(tmp_path):
    root = tmp_path / "en-de"
    assert not pipeline.complete(root)
    folder = pipeline.build(TINY, root, data=pipeline.Data(PAIRS, PAIRS.take(4)), shallow=True, progress=False)
    assert sorted(folder.models) == sorted(experiment.MODELS + ("ar_shallow",)) and len(folder.distilled) == len(PAIRS)
    assert pipeline.complete(root)
    steps = {name: rec["steps"] for name, rec in folder.records.items()}
    assert steps == {"ar": 3, "padir_raw": 3, "padir_distilled": 3, "ar_shallow": 3}
    shallow, teacher = folder.models["ar_shallow"][1].cfg, folder.models["ar"][1].cfg
    assert (shallow.dec_layers, shallow.enc_layers, shallow.causal) == (1, teacher.enc_layers, True)
    out = translate.Translator(folder.models["ar_shallow"][1], folder.vocab, buckets=(64,)).translate(
        PAIRS.src[:2], translate.Method("greedy"), batch_size=2)
    assert len(out) == 2 and all(isinstance(line, str) for line in out)
    assert folder.records["padir_raw"]["init"]["start"] == "teacher"
    record = json.loads((root / "distilled.json").read_text())
    assert record["method"]["kind"] == "greedy"  # distill_beam = 1 in the tiny preset
    stamp = (root / "ar" / "run.json").stat().st_mtime_ns
    again = pipeline.ensure(root, TINY, progress=False)  # complete: opened, nothing trained again
    assert (root / "ar" / "run.json").stat().st_mtime_ns == stamp
    assert again.records == folder.records


def test_ensure_finishes_a_folder_that_a_kill_left_half_made(tmp_path):
    """A run stopped after the teacher: ensure() trains what is missing and keeps the teacher."""
    root = tmp_path / "en-de"
    vocab = pipeline.vocabulary(TINY, PAIRS, root)
    teacher = pipeline.train_teacher(TINY, vocab, PAIRS, root, progress=False)
    assert not pipeline.complete(root)
    with pytest.raises(FileNotFoundError, match="no trained 'padir_raw'"):
        experiment.open_run(root)
    stamp = (root / "ar" / "run.json").stat().st_mtime_ns
    other = corpus.Parallel(PAIRS.src[::-1], PAIRS.tgt[::-1])
    with pytest.raises(ValueError, match="trained on other data"):  # other pairs for the same teacher: refused
        pipeline.build(TINY, root, data=pipeline.Data(other, other.take(4)), progress=False)
    folder = pipeline.build(TINY, root, data=pipeline.Data(PAIRS, PAIRS.take(4)), progress=False)
    assert (root / "ar" / "run.json").stat().st_mtime_ns == stamp  # the teacher was reused, not retrained
    assert folder.records["ar"]["final_loss"] == teacher.final_loss
    assert pipeline.complete(root)


def test_another_experiment_in_the_same_folder_is_refused(tmp_path):
    root = tmp_path / "en-de"
    pipeline.build(TINY, root, data=pipeline.Data(PAIRS, PAIRS.take(4)), progress=False)
    other = config.get("multi30k_tiny", dict(ar_steps=3, padir_steps=4, checkpoint_every=3, warmup=1, vocab_size=120,
                                             padir_init="teacher"))
    for name in ("padir_raw", "padir_distilled"):
        (root / name / "run.json").unlink()  # incomplete again: ensure() would train the PaDIR models
    with pytest.raises(ValueError, match="config.json holds a different TrainConfig"):
        pipeline.ensure(root, other, data=pipeline.Data(PAIRS, PAIRS.take(4)), progress=False)


def test_train_padir_names_what_it_needs(tmp_path):
    vocab = pipeline.vocabulary(TINY, PAIRS, tmp_path)
    with pytest.raises(ValueError, match="teacher=<the AR model>"):
        pipeline.train_padir(TINY, vocab, PAIRS, PAIRS.tgt, tmp_path, "raw", progress=False)
    with pytest.raises(ValueError, match="'raw' or 'distilled'"):
        pipeline.train_padir(TINY, vocab, PAIRS, PAIRS.tgt, tmp_path, "both", progress=False)


def test_run_folder_is_under_run_root_or_temporary(tmp_path):
    exp = config.get("multi30k_tiny", dict(run_root=str(tmp_path), src_lang="de", tgt_lang="en"))
    assert pipeline.run_folder(exp) == tmp_path / "de-en"
    assert pipeline.run_folder(exp, tmp_path / "x") == tmp_path / "x"
    assert pipeline.run_folder(TINY).name == "en-de" and pipeline.run_folder(TINY) != pipeline.run_folder(TINY)
