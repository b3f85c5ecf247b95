"""The one translation pipeline (gmlm_lib.mt.pipeline): data to a complete run folder, resumable
step by step, and the stand-in of smoke runs made by the same function with the tiny preset."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import tempfile

import pytest

from gmlm_lib.mt import config, corpus, experiment, pipeline, runfolder, training, translate, vocab

# one worker: the module-scoped run folder below is built once, not once per worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]

PAIRS = corpus.Parallel([f"a dog number {i} runs" for i in range(60)] + [f"two cats sit {i}" for i in range(60)],
                        [f"ein hund nummer {i} rennt" for i in range(60)] + [f"zwei katzen sitzen {i}" for i in range(60)],
                        name="toy")
TINY = config.get("multi30k_tiny", dict(ar_steps=3, padir_steps=3, checkpoint_every=3, warmup=1, vocab_size=120,
                                        padir_init="teacher"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One complete run folder made by build() (the deep-shallow baseline too), for the tests to copy."""
    root = tmp_path_factory.mktemp("built") / "en-de"
    assert not pipeline.complete(root)
    folder = pipeline.build(TINY, root, data=pipeline.Data(PAIRS, PAIRS.take(4)), shallow=True, progress=False)
    return root, folder


def test_build_makes_every_part_then_reuses_them(built, tmp_path):
    src, folder = built
    root = tmp_path / "en-de"
    shutil.copytree(src, root)
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
    # the tiny preset trains two replicas of every model; PaDIR replica r starts from teacher replica r
    assert TINY.seeds == 2 and {name: len(models) for name, models in folder.replicas.items()} == dict.fromkeys(steps, 2)
    assert folder.records["padir_raw"]["init"]["teacher_fingerprint"] == training._teacher_fingerprint(
        folder.replicas["ar"]) != training._teacher_fingerprint(folder.replicas["ar"][0])
    assert len(folder.records["ar"]["final_losses"]) == 2
    record = json.loads((root / "distilled.json").read_text())
    assert record["method"]["kind"] == "greedy"  # distill_beam = 1 in the tiny preset
    stamp = (root / "ar" / "run.json").stat().st_mtime_ns
    again = pipeline.ensure(root, TINY, progress=False)  # complete: opened, nothing trained again
    assert (root / "ar" / "run.json").stat().st_mtime_ns == stamp
    assert again.records == folder.records


def test_ensure_finishes_a_folder_that_a_kill_left_half_made(built, tmp_path):
    """A run stopped after the teacher and the distillation: ensure() trains what is missing and keeps
    the teacher; other pairs for the same teacher are refused."""
    src, folder = built
    root = tmp_path / "en-de"
    shutil.copytree(src, root)
    for name in ("padir_raw", "padir_distilled", "ar_shallow"):
        shutil.rmtree(root / name)
    assert not pipeline.complete(root)
    with pytest.raises(FileNotFoundError, match="no trained 'padir_raw'"):
        experiment.open_run(root)
    stamp = (root / "ar" / "run.json").stat().st_mtime_ns
    other = corpus.Parallel(PAIRS.src[::-1], PAIRS.tgt[::-1])
    with pytest.raises(ValueError, match="trained on other data"):  # other pairs for the same teacher: refused
        pipeline.build(TINY, root, data=pipeline.Data(other, other.take(4)), progress=False)
    again = pipeline.ensure(root, TINY, data=pipeline.Data(PAIRS, PAIRS.take(4)), progress=False)
    assert (root / "ar" / "run.json").stat().st_mtime_ns == stamp  # the teacher was reused, not retrained
    assert again.records["ar"]["final_loss"] == folder.records["ar"]["final_loss"]
    assert again.records["padir_raw"]["final_loss"] == folder.records["padir_raw"]["final_loss"]  # same run again
    assert pipeline.complete(root)


@pytest.mark.parametrize("budget", [0.0, 1e-6])
def test_a_chapter_that_trains_its_own_padir_models_gets_the_teacher_and_the_distilled_set_only(budget, tmp_path):
    """ensure(padir=False) on a fresh folder trains the teacher and distils the training set, and trains no
    PaDIR model (nor distils the val sources, which only the distilled model needs); padir_config gives the
    recipe the PaDIR model would train with there, updates sized by the folder's own decision (a budget too
    small for the recipe shrinks them), and equals the config of the model a later ensure() trains, which
    reuses the teacher and the distilled set."""
    exp = dataclasses.replace(TINY, train_seconds=budget)
    root, data = tmp_path / "en-de", pipeline.Data(PAIRS, PAIRS.take(4))
    part = pipeline.ensure(root, exp, data=data, padir=False, progress=False)
    assert sorted(part.models) == ["ar"] and len(part.distilled) == len(PAIRS)
    assert part.distilled_record["sentences"] == len(PAIRS)  # the provenance a chapter lists for the distillation
    assert not any(root.glob("padir_*")) and not any(root.glob("distilled_val.*"))
    assert pipeline.complete(root, padir=False) and not pipeline.complete(root)
    recipe = pipeline.padir_config(part, exp)
    assert (recipe.steps < TINY.padir_steps) == bool(budget)  # 1 us cannot hold 3 updates: the decision shrank them
    stamp = (root / "ar" / "run.json").stat().st_mtime_ns
    assert sorted(pipeline.ensure(root, exp, data=data, padir=False, progress=False).models) == ["ar"]  # opened
    whole = pipeline.ensure(root, exp, data=data, progress=False)
    assert (root / "ar" / "run.json").stat().st_mtime_ns == stamp and pipeline.complete(root)
    assert whole.models["padir_distilled"][0] == recipe == pipeline.padir_config(whole, exp)
    (root / "sizing.json").unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError, match="no trained PaDIR model and no sizing.json"):
        pipeline.padir_config(experiment.RunFolder(root, part.vocab, part.models, part.records, part.distilled),
                              dataclasses.replace(exp, train_seconds=1.0))


def test_another_experiment_in_the_same_folder_is_refused(built, tmp_path):
    src, _ = built
    root = tmp_path / "en-de"
    shutil.copytree(src, root)
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


def test_run_folder_is_under_run_root_or_temporary(tmp_path, monkeypatch):
    exp = config.get("multi30k_tiny", dict(run_root=str(tmp_path), src_lang="de", tgt_lang="en"))
    assert pipeline.run_folder(exp) == tmp_path / "de-en"
    assert pipeline.run_folder(exp, tmp_path / "x") == tmp_path / "x"
    (scratch := tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the temporary folders: made here, removed with tmp_path
    first, second = pipeline.run_folder(TINY), pipeline.run_folder(TINY)
    assert first.name == second.name == "en-de" and first != second
    assert first.parent.parent == second.parent.parent == scratch and first.parent.name.startswith("padir-")


def test_a_folder_whose_vocabulary_is_not_its_models_is_refused(built, tmp_path):
    """spm.model of another run (another size) beside these models: refused on opening, not decoded into garbage."""
    src, folder = built
    root = tmp_path / "en-de"
    shutil.copytree(src, root)
    other = vocab.train(PAIRS.src + PAIRS.tgt, size=folder.vocab.size // 2)
    assert other.size != folder.vocab.size
    other.save(root / "spm.model")
    with pytest.raises(runfolder.RunFolderError, match=rf"has {other.size:,} pieces but the 'ar' model .* was built for "
                                                         rf"{folder.vocab.size:,}"):
        experiment.open_run(root)


def test_reuse_turns_the_cache_on_beside_the_run_then_opens_it_or_trains_a_stand_in(built, tmp_path, monkeypatch):
    from gmlm_lib.core import timing

    caches = []
    monkeypatch.setattr(timing, "persistent_cache", lambda folder=None: caches.append(folder and str(folder)) or "c")
    src, folder = built
    root = tmp_path / "runs" / "en-de"
    shutil.copytree(src, root)
    stamp = (root / "ar" / "run.json").stat().st_mtime_ns
    opened = pipeline.reuse(str(root), TINY)
    assert caches == [str(tmp_path / "runs" / "jax-cache")] and opened.records == folder.records
    assert (root / "ar" / "run.json").stat().st_mtime_ns == stamp  # opened, nothing trained again
    # the stand-in reads the corpus from data_dir, not from GMLM_MULTI30K_DIR (pointed at a folder without it)
    m30k = str(corpus.multi30k_dir(download_missing=False))
    monkeypatch.setenv(corpus.ENV_VAR, str(tmp_path))
    (scratch := tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the stand-in's temporary folders: made here
    stand_in = pipeline.reuse("", dataclasses.replace(TINY, data_dir=m30k), stand_in_sentences=40, seed=3,
                              padir_init="teacher")
    assert caches[1:] == [None]  # a temporary folder, made only if no cache folder is set (timing's test)
    assert len(stand_in.distilled) == 40 and stand_in.root.name == "en-de" and stand_in.root.parent.parent == scratch
    assert stand_in.records["padir_raw"]["init"]["start"] == "teacher"


def test_the_distilled_model_is_selected_on_the_teachers_translations_of_the_val_sources(tmp_path, monkeypatch):
    """build() with val pairs: the teacher and PaDIR raw are selected on the human val targets, PaDIR
    distilled on the teacher's translations of the val sources (the targets it learns; here stand-ins
    that fit the buckets, since a 3-update teacher's outputs run to the length limit), decoded once
    into distilled_val.de.gz and reused."""
    val = corpus.Parallel(PAIRS.src[::20], PAIRS.tgt[::20], name="val")
    said = [f"der lehrer sagt {i}" for i in range(len(val))]
    real = experiment.distil

    def distil(translator, sources, method, path, **kw):
        if pathlib.Path(path).name.startswith("distilled_val."):
            return experiment.Distilled(list(said), {}, False)
        return real(translator, sources, method, path, **kw)

    monkeypatch.setattr(experiment, "distil", distil)
    root = tmp_path / "en-de"
    folder = pipeline.build(TINY, root, data=pipeline.Data(PAIRS, PAIRS.take(4), val), progress=False)
    fp = {name: rec["validation"]["fingerprint"] for name, rec in folder.records.items()}
    human = pipeline._val(TINY, folder.vocab, val).fingerprint()
    assert fp["ar"] == fp["padir_raw"] == human
    assert fp["padir_distilled"] == pipeline._val(TINY, folder.vocab, corpus.Parallel(val.src, said)).fingerprint()
    monkeypatch.undo()
    got = pipeline.distil_val(TINY, folder.vocab, folder.models["ar"][1], val, root, progress=False)
    teacher_val = corpus.read_lines(root / "distilled_val.de.gz")
    assert len(teacher_val) == len(val) and (root / "distilled_val.json").is_file() and got.src == val.src
    again = pipeline.distil_val(TINY, folder.vocab, folder.models["ar"][1], val, root, progress=False)  # reused
    assert again == got and json.loads((root / "distilled_val.json").read_text())["sentences"] == len(val)
    assert pipeline.distil_val(TINY, folder.vocab, folder.models["ar"][1], None, root) is None


def test_a_teacher_translation_too_long_for_the_buckets_keeps_its_human_val_target(built, tmp_path, monkeypatch):
    """A barely trained teacher's outputs run to the length limit: such a val pair keeps its human
    target (as an empty output does), so the distilled model is still scored on every val pair."""
    _, folder = built
    val = corpus.Parallel(PAIRS.src[:3], PAIRS.tgt[:3], name="val")
    long = " ".join(["hund"] * 200)
    monkeypatch.setattr(experiment, "distil", lambda *a, **k: experiment.Distilled([long, "ein hund", long], {}, False))
    got = pipeline.distil_val(TINY, folder.vocab, folder.models["ar"][1], val, tmp_path, progress=False)
    assert got.tgt == [PAIRS.tgt[0], "ein hund", PAIRS.tgt[2]] and got.src == val.src


def test_a_val_translation_fits_when_its_pieces_and_the_end_fill_the_largest_bucket(built, tmp_path, monkeypatch):
    """The limit is the largest training bucket, and a target of n pieces takes n + 1 positions: with
    buckets 16 and 64, translations of 20 and 63 pieces are kept, one of 64 keeps its human target."""
    _, folder = built
    exp = dataclasses.replace(TINY, train_buckets=(16, 64))
    said = ["a" * 19, "a" * 62, "a" * 63]  # "a" * k is k + 1 pieces of this vocabulary
    assert [len(ids) for ids in folder.vocab.encode(said)] == [20, 63, 64]
    val = corpus.Parallel(PAIRS.src[:3], PAIRS.tgt[:3], name="val")
    monkeypatch.setattr(experiment, "distil", lambda *a, **k: experiment.Distilled(list(said), {}, False))
    got = pipeline.distil_val(exp, folder.vocab, folder.models["ar"][1], val, tmp_path, progress=False)
    assert got.tgt == [said[0], said[1], PAIRS.tgt[2]]
