"""The distilled training set of a run folder [App. L.1.2]: written whole with its record, reused
only when it was decoded the same way from the same sources, and bad files named."""

import gzip
import json
import time

import pytest

from gmlm_lib.book import provenance
from gmlm_lib.mt import experiment, translate

SOURCES = ["a cat", "two dogs", "a red ball", "snow"]


class FakeTeacher:
    """Stands in for a Translator: upper-cases, leaves 'snow' empty and puts a newline in 'two dogs'."""

    def __init__(self, fail=False):
        self.calls, self.fail = 0, fail

    def translate(self, texts, method, *, batch_size, progress=None):
        self.calls += 1
        if self.fail:
            raise KeyboardInterrupt  # a run stopped in the middle of decoding
        if progress is not None:
            progress.update(len(texts))
        return ["" if t == "snow" else t.upper().replace(" ", "\n", 1) if t == "two dogs" else t.upper()
                for t in texts]


def test_distil_writes_the_file_and_its_record_then_reuses_them(tmp_path):
    path = tmp_path / "distilled.de.gz"
    method = translate.Method("beam", beam=2, alpha=0.6)
    teacher = FakeTeacher()
    t0 = time.perf_counter()
    first = experiment.distil(teacher, SOURCES, method, path, progress=False)
    elapsed = time.perf_counter() - t0
    assert not first.reused and teacher.calls == 1
    assert first.lines == ["A CAT", "TWO DOGS", "A RED BALL", ""]  # one line per source, newlines flattened
    with gzip.open(path, "rt", encoding="utf-8") as f:
        assert f.read() == "A CAT\nTWO DOGS\nA RED BALL\n\n"
    record = json.loads((tmp_path / "distilled.json").read_text())
    assert record == first.record
    assert record["method"]["beam"] == 2 and record["sentences"] == 4 and 0 <= record["wall_s"] <= elapsed
    assert record["commit"] == provenance.git_commit() and record["hardware"] == provenance.hardware_summary()
    again = experiment.distil(teacher, SOURCES, method, path, progress=False)
    assert again.reused and teacher.calls == 1 and again.lines == first.lines and again.record == record
    assert sorted(p.name for p in tmp_path.iterdir()) == ["distilled.de.gz", "distilled.json"]


def test_distil_fallback_replaces_empty_outputs(tmp_path):
    humans = ["eine Katze", "zwei Hunde", "ein roter Ball", "Schnee"]
    out = experiment.distil(FakeTeacher(), SOURCES, translate.Method("greedy"), tmp_path / "d.gz", fallback=humans,
                            progress=False)
    assert out.lines == ["A CAT", "TWO DOGS", "A RED BALL", "Schnee"]
    with pytest.raises(ValueError, match="fallback"):
        experiment.distil(FakeTeacher(), SOURCES, translate.Method("greedy"), tmp_path / "e.gz", fallback=humans[:2])


def test_distil_refuses_a_file_decoded_otherwise(tmp_path):
    path = tmp_path / "distilled.de.gz"
    experiment.distil(FakeTeacher(), SOURCES, translate.Method("beam", beam=2), path, progress=False)
    with pytest.raises(ValueError, match=r"distilled\.de\.gz was decoded with .* from 4 sentences"):
        experiment.distil(FakeTeacher(), SOURCES, translate.Method("beam", beam=4), path, progress=False)
    with pytest.raises(ValueError, match="from 4 sentences, not with .* from 3"):
        experiment.distil(FakeTeacher(), SOURCES[:3], translate.Method("beam", beam=2), path, progress=False)
    with gzip.open(path, "wt", encoding="utf-8") as f:  # a truncated file
        f.write("A CAT\n")
    with pytest.raises(ValueError, match="has 1 lines but its record says 4"):
        experiment.distil(FakeTeacher(), SOURCES, translate.Method("beam", beam=2), path, progress=False)
    (tmp_path / "distilled.json").unlink()
    with pytest.raises(ValueError, match="has no record distilled.json"):
        experiment.distil(FakeTeacher(), SOURCES, translate.Method("beam", beam=2), path, progress=False)


def test_an_interrupted_distillation_leaves_nothing_to_reuse(tmp_path):
    path = tmp_path / "distilled.de.gz"
    with pytest.raises(KeyboardInterrupt):
        experiment.distil(FakeTeacher(fail=True), SOURCES, translate.Method("greedy"), path, progress=False)
    assert list(tmp_path.iterdir()) == []
    teacher = FakeTeacher()
    assert not experiment.distil(teacher, SOURCES, translate.Method("greedy"), path, progress=False).reused
    assert teacher.calls == 1


def test_every_run_folder_model_has_a_label():
    assert set(experiment.LABELS) == set(experiment.MODELS + experiment.OPTIONAL)


def test_the_stand_in_is_the_tiny_preset_with_as_many_updates_as_asked(tmp_path, monkeypatch):
    """tiny_run hands the one pipeline the tiny preset with ``steps`` updates a model, a checkpoint at
    the last, and a warm-up shorter than the updates (down to a single update), the pairs it is given
    as the training set and the first of them as the test set."""
    from gmlm_lib.mt import config, corpus, pipeline

    asked = []
    monkeypatch.setattr(pipeline, "build", lambda exp, root, **kw: asked.append((exp, root, kw)))
    pairs = corpus.Parallel(SOURCES, [s.upper() for s in SOURCES], name="toy")
    tiny = config.PRESETS["multi30k_tiny"]
    for steps in (1, 2, 8):
        pipeline.tiny_run(tmp_path, pairs, steps=steps, seed=5, padir_init="teacher", batch_tokens=512)
        exp, root, kw = asked[-1]
        assert (exp.ar_steps, exp.padir_steps, exp.checkpoint_every) == (steps, steps, steps)
        assert 0 <= exp.warmup < steps and (exp.warmup > 0) == (steps > 1)
        assert (exp.seed, exp.padir_init, exp.batch_tokens, exp.train_sentences) == (5, "teacher", 512, 4)
        assert (exp.d_model, exp.layers, exp.vocab_size) == (tiny["d_model"], tiny["layers"], tiny["vocab_size"])
        assert root == tmp_path and kw["data"].train is pairs and kw["data"].test.tgt == ["A CAT"]
