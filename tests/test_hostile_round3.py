"""Nothing silent, round two (issue 48), the rest: one way of checking arguments (gmlm_lib.core.checks)
at the public boundaries, and file and system errors at the run-folder boundary translated into one
line naming the file, what is wrong and what to do."""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gmlm_lib.core import checks, divergences
from gmlm_lib.ising import masks
from gmlm_lib.ising import model as ising
from gmlm_lib.ising import samplers
from gmlm_lib.mt import batching, config, corpus, decoding, experiment, metrics, runfolder, seq2seq, training, vocab

MODEL = seq2seq.ModelConfig(vocab=40, causal=True, d_model=32, heads=4, enc_layers=1, dec_layers=1, d_ff=64, max_len=16)
KEY = jax.random.key(0)


def _pair():
    with jax.enable_x64(True):
        return ising.ising_model(np.array([[0.0, 0.5], [0.5, 0.0]]), np.array([0.1, -0.2]))


# -- the one way: core.checks ------------------------------------------------------------------------------
@pytest.mark.parametrize("value, error, words", [
    (2.9, TypeError, "n must be an integer; got 2.9"),
    (3.0, TypeError, "never rounded"),
    ("3", TypeError, "got '3' (str)"),
    (True, TypeError, "n must be an integer"),
    (-1, ValueError, "n must be an integer >= 0; got -1"),
])
def test_a_count_is_never_rounded_or_parsed(value, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        checks.integer(value, "n", low=0)


def test_counts_numbers_and_masks_that_are_right_pass_unchanged():
    assert checks.integer(np.int64(3), "n", low=0) == 3 and type(checks.integer(np.int64(3), "n")) is int
    assert checks.integer(np.array(4), "n") == 4
    assert checks.real(1, "x", low=0.0) == 1.0 and checks.real(np.float32(0.5), "x", high=1.0) == 0.5
    np.testing.assert_array_equal(checks.mask(np.array([0, 1, 1]), "m", (3,)), [False, True, True])
    np.testing.assert_array_equal(checks.mask([True, False], "m", (None,)), [True, False])
    assert checks.key(KEY) is KEY and checks.key(jax.random.PRNGKey(0)).shape == (2,)


@pytest.mark.parametrize("kw, words", [
    (dict(low=0.0, low_open=True), r"rate must be a finite number > 0; got 0.0"),
    (dict(high=0.0, high_open=True), r"rate must be a finite number < 0; got 0.0"),
    (dict(low=0.0, high=0.0, low_open=True), r"rate must be a finite number in \(0, 0\]; got 0.0"),
])
def test_an_open_end_of_a_range_is_refused(kw, words):
    with pytest.raises(ValueError, match=words):
        checks.real(0.0, "rate", **kw)


def test_each_end_of_a_range_is_in_it_unless_it_is_open():
    assert [checks.integer(v, "n", low=1, high=4) for v in (1, 4)] == [1, 4]
    for v in (0, 5):
        with pytest.raises(ValueError, match=rf"n must be an integer in \[1, 4\]; got {v}"):
            checks.integer(v, "n", low=1, high=4)
    with pytest.raises(ValueError, match="n must be an integer <= 4; got 5"):
        checks.integer(5, "n", high=4)
    assert checks.real(0.0, "x", low=0.0, high=1.0) == 0.0 and checks.real(1.0, "x", low=0.0, high=1.0) == 1.0
    assert checks.real(1e-12, "x", low=0.0, low_open=True) == 1e-12
    assert checks.real(1.0 - 1e-12, "x", high=1.0, high_open=True) == 1.0 - 1e-12
    with pytest.raises(ValueError, match=r"x must be a finite number < 1; got 1.0"):
        checks.real(1.0, "x", high=1.0, high_open=True)
    with pytest.raises(ValueError, match=r"x must be a finite number in \[0, 1\); got 1.0"):
        checks.real(1.0, "x", low=0.0, high=1.0, high_open=True)


def test_a_number_in_a_0d_array_is_a_number_and_a_longer_array_is_not():
    assert checks.real(np.array(0.5), "x") == 0.5 and type(checks.real(jnp.array(0.25), "x")) is float
    assert checks.integer(jnp.array(3), "n") == 3
    for value in (np.array([0.5]), np.zeros((1, 1))):
        with pytest.raises(TypeError, match="x must be a number"):
            checks.real(value, "x")
    with pytest.raises(TypeError, match="n must be an integer"):
        checks.integer(np.array([3]), "n")


@pytest.mark.parametrize("value", [None, "1 0 1"])
def test_a_mask_is_an_array_not_nothing_or_words(value):
    with pytest.raises(TypeError, match=rf"m must be a boolean array; got {type(value).__name__}"):
        checks.mask(value, "m")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "0.5", True])
def test_a_number_is_finite_and_a_number(value):
    with pytest.raises((TypeError, ValueError), match="rate must be"):
        checks.real(value, "rate", low=0.0, high=1.0)


def test_a_mask_of_words_or_objects_is_refused_by_its_dtype():
    for value in (np.array(["1", "0"]), np.array([True, None], dtype=object)):
        with pytest.raises(TypeError, match=rf"m must be a boolean array \(or 0/1 numbers\); got dtype {value.dtype}"):
            checks.mask(value, "m")


def test_a_mask_of_one_half_is_not_read_as_true():
    with pytest.raises(ValueError, match=r"m must be a boolean mask.*1 other entries \(e.g. 0.5\)"):
        checks.mask(np.array([0.5, 0.0]), "m")
    with pytest.raises(ValueError, match=r"m must have shape \(3,\) \(sites\); got \(2,\)"):
        checks.mask(np.array([True, False]), "m", (3,), what="(sites)")

    @jax.jit
    def traced(m):
        return checks.mask(m, "m")

    with pytest.raises(TypeError, match="boolean array inside jit"):
        traced(jnp.array([1.0, 0.0]))
    assert traced(jnp.array([True, False])).dtype == bool


@pytest.mark.parametrize("value", [0, "key", np.zeros(3, np.uint32), None])
def test_a_key_is_a_jax_random_key(value):
    with pytest.raises(TypeError, match=r"key must be a jax.random key, e.g. jax.random.key\(0\)"):
        checks.key(value)


# -- the Ising side ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, error, words", [
    (lambda m: ising.sample(m, KEY, 2.9), TypeError, "num_samples must be an integer; got 2.9"),
    (lambda m: ising.sample(m, KEY, "3"), TypeError, "num_samples must be an integer"),
    (lambda m: ising.sample(m, KEY, True), TypeError, "num_samples must be an integer"),
    (lambda m: ising.sample(m, 0, 3), TypeError, "key must be a jax.random key"),
    (lambda m: ising.log_conditional(m, np.array([1, -1]), np.array([0.5, 0.0])), ValueError,
     "mask must be a boolean mask"),
    (lambda m: ising.log_conditional(m, np.array([1, -1]), np.array([True, False, True])), ValueError,
     "mask must have shape (2,) or (1, 2)"),
    (lambda m: ising.marginal(m, [0.5]), TypeError, "subset must hold site indices (integers)"),
    (lambda m: masks.uniform_k_subsets(KEY, 2.5, 3, 1), TypeError, "num must be an integer; got 2.5"),
    (lambda m: samplers.run_chains(KEY, samplers.k_gibbs(m, 1), np.ones((2, 2), np.int8), 2.5), TypeError,
     "num_steps must be an integer; got 2.5"),
    (lambda m: samplers.run_chains(KEY, samplers.k_gibbs(m, 1), np.ones((2, 2), np.int8), 4, chunk=0), ValueError,
     "chunk must be an integer >= 1"),
])
def test_ising_counts_masks_and_keys_are_checked(call, error, words):
    m = _pair()
    with jax.enable_x64(True):
        with pytest.raises(error) as err:
            call(m)
    assert words in str(err.value)


@pytest.mark.parametrize("q, p, words", [
    ([0.5, 0.6], [0.5, 0.5], "q must be a law: each row (last axis) summing to 1; a row sums to 1.1"),
    ([2.0, 0.0], [0.5, 0.5], "q must be a law"),
    ([0.5, 0.5], [0.2, 0.3, 0.5], "q and p must be laws on the same states"),
    (0.5, [0.5, 0.5], "got a scalar"),
    # the same states, but batches of laws whose leading axes do not broadcast
    ([[0.5, 0.5]] * 2, [[0.5, 0.5]] * 3, "leading axes broadcastable; got shapes (2, 2) and (3, 2)"),
])
def test_divergences_refuse_what_is_not_a_pair_of_laws(q, p, words):
    with jax.enable_x64(True):
        for f in (divergences.kl, divergences.tv):
            with pytest.raises(ValueError) as err:
                f(np.array(q), np.array(p))
            assert words in str(err.value)


def test_divergences_of_laws_still_work_in_float32_and_broadcast():
    q = np.full((3, 4), 0.25, np.float32)
    p = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    assert divergences.kl(q, p).shape == (3,) and float(divergences.tv(q, q).max()) == 0.0


# -- the translation side -----------------------------------------------------------------------------------
SRC, TGT = [[7, 8, 9], [10, 11]], [[7, 8], [9, 10, 11]]


@pytest.mark.parametrize("call, error, words", [
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=2500.5, buckets=(8, 16)), TypeError,
     "batch_tokens must be an integer; got 2500.5"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens="64", buckets=(8, 16)), TypeError, "batch_tokens must be an integer"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=64, buckets=(16, 8)), ValueError,
     "buckets must be strictly increasing (the smallest bucket that fits is used); got [16, 8]: pass [8, 16]"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=64, buckets=()), ValueError, "buckets must hold at least one length"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=64, buckets="16"), TypeError, "buckets must be a list"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=64, buckets=(8, 16.5)), TypeError, "buckets[1] must be an integer"),
    (lambda: batching.bucket_of(-3, 3, (8, 16)), ValueError, "src_len must be an integer >= 0"),
    (lambda: batching.pad([[1, 2]], 2.5), TypeError, "length must be an integer; got 2.5"),
    (lambda: batching.corrupt(KEY, jnp.ones((2, 4), jnp.int32), jnp.ones((2, 4), bool), 10, 1.5), ValueError,
     "unmasking_rate must be a finite number in [0, 1]; got 1.5"),
    (lambda: batching.corrupt(KEY, jnp.ones((2, 4), jnp.int32), jnp.ones((2, 3), bool), 10, 0.5), ValueError,
     "tgt_mask must have shape (2, 4) (the shape of tgt); got (2, 3)"),
    (lambda: batching.corrupt(KEY, jnp.ones((2, 4), jnp.int32), jnp.full((2, 4), 0.5), 10, 0.5), ValueError,
     "tgt_mask must be a boolean mask"),
    (lambda: batching.ar_inputs(jnp.ones((2, 4), jnp.int32), jnp.ones((2, 3), bool)), ValueError,
     "tgt_mask must have shape (2, 4)"),
    # one sentence without its batch axis (its mask of the same shape): named, not read as a batch of tokens
    (lambda: batching.ar_inputs(jnp.ones((4,), jnp.int32), jnp.ones((4,), bool)), ValueError,
     "tgt must have shape (any, any) (batch, length); got (4,)"),
    (lambda: batching.corrupt(KEY, jnp.ones((4,), jnp.int32), jnp.ones((4,), bool), 10, 0.5), ValueError,
     "tgt must have shape (any, any) (batch, length); got (4,)"),
    (lambda: training.TrainConfig(kind="ar", model=MODEL, steps=6, warmup=1, buckets=(16, 8)), ValueError,
     "TrainConfig.buckets must be strictly increasing"),
    (lambda: training.TrainConfig.from_dict({"kind": "ar", "steps": 3}), ValueError, "a 'model' mapping"),
    (lambda: training.TrainConfig.from_dict({"kind": "ar", "bogus": 1, "model": {"vocab": 40, "causal": True}}),
     ValueError, "TrainConfig.from_dict: unknown field(s) ['bogus']"),
    (lambda: training.TrainConfig.from_dict({"kind": "ar", "model": {"causal": True}}), ValueError,
     "ModelConfig.from_dict: missing ['vocab']"),
    (lambda: decoding.PadirOptions(steps=2.5), TypeError, "PadirOptions.steps must be an integer; got 2.5"),
    (lambda: decoding.strip(np.array([1, 2, 3])), ValueError, "ids must have shape (any, any) (batch, length)"),
    (lambda: config.resolve("auto", "quantum"), ValueError, "backend must be one of"),
    (lambda: config.get("multi30k_cpu", {"train_buckets": [64, 32]}), ValueError,
     "train_buckets must be strictly increasing"),
    (lambda: vocab.train(["a b c"] * 10, size=2.5), TypeError, "vocab.train: size must be an integer; got 2.5"),
    (lambda: vocab.train(["a b c"] * 10, size=20, character_coverage=0.0), ValueError,
     "character_coverage must be in (0, 1]; got 0.0"),
    (lambda: vocab.train(["a b c"] * 10, size=20, character_coverage=1.5), ValueError,
     "character_coverage must be in (0, 1]; got 1.5"),
    (lambda: metrics.paired_bootstrap([("base", ["a b"])], ["a b"]), ValueError,
     "at least two (name, hypotheses) pairs"),
    (lambda: metrics.paired_bootstrap([("a", ["x"]), ("a", ["y"])], ["x"]), ValueError, "names must differ"),
    (lambda: metrics.paired_bootstrap([("a", ["x"]), ("b", ["y"], "extra")], ["x"]), ValueError,
     "at least two (name, hypotheses) pairs"),
    (lambda: metrics.paired_bootstrap([("a", ["x"]), (2, ["y"])], ["x"]), ValueError,
     "at least two (name, hypotheses) pairs"),
])
def test_translation_values_are_refused_not_guessed(call, error, words):
    with pytest.raises(error) as err:
        call()
    assert words in str(err.value)


def test_a_translator_refuses_buckets_it_cannot_use():
    from gmlm_lib.mt import translate

    class Vocab:
        size = 40

    model = seq2seq.build(MODEL)
    with pytest.raises(ValueError, match="every bucket of \\[32, 64\\] exceeds the model's max_len = 16"):
        translate.Translator(model, Vocab(), buckets=(32, 64))
    with pytest.raises(ValueError, match="strictly increasing"):
        translate.Translator(model, Vocab(), buckets=(16, 8))
    assert translate.Translator(model, Vocab(), buckets=(8, 16, 32)).buckets == (8, 16)  # 32: beyond max_len


# -- file and system errors: one line, naming the file and the fix --------------------------------------------
def _one_line(err: BaseException) -> str:
    text = str(err.value if hasattr(err, "value") else err)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def test_load_says_which_file_is_wrong_and_what_to_do(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(runfolder.RunFolderError) as err:
        training.load(f)
    assert f"{f} is a file, not a run folder" in _one_line(err)
    with pytest.raises(runfolder.RunFolderError) as err:
        training.load(tmp_path / "nope")
    assert "does not exist" in _one_line(err) and "train the run there first" in str(err.value)
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(runfolder.RunFolderError) as err:
        training.load(run)
    assert "config.json does not exist (the run's TrainConfig)" in _one_line(err)
    (run / "config.json").write_text('{"kind": "ar", "steps": ')
    with pytest.raises(runfolder.RunFolderError) as err:
        training.load(run)
    assert "is not valid JSON" in _one_line(err) and "cut short or damaged" in str(err.value)
    (run / "config.json").write_text("[1, 2]")
    with pytest.raises(runfolder.RunFolderError, match="holds a JSON list, not an object"):
        training.load(run)
    (run / "config.json").write_text(json.dumps({"kind": "ar", "model": {"vocab": 40}}))
    with pytest.raises(runfolder.RunFolderError) as err:
        training.load(run)
    assert "is not a TrainConfig this library can read" in _one_line(err) and "missing ['causal']" in str(err.value)
    cfg = training.TrainConfig(kind="ar", model=MODEL, steps=6, warmup=1, buckets=(8, 16))
    (run / "config.json").write_text(json.dumps(cfg.to_dict()))
    with pytest.raises(runfolder.RunFolderError) as err:
        training.load(run)
    assert "has no checkpoint in checkpoints/" in _one_line(err)
    assert isinstance(err.value, OSError)  # what callers catching file errors expect


def test_train_refuses_a_file_as_its_folder_and_a_cut_record(tmp_path):
    cfg = training.TrainConfig(kind="ar", model=MODEL, steps=2, warmup=1, batch_tokens=64, buckets=(8, 16))
    batcher = batching.Batcher(SRC, TGT, batch_tokens=64, buckets=(8, 16))
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(runfolder.RunFolderError, match="is a file, not a run folder"):
        training.train(cfg, batcher, f, progress=False)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"kind": ')
    with pytest.raises(runfolder.RunFolderError) as err:
        training.train(cfg, batcher, run, progress=False)
    assert f"{run / 'config.json'} (the run's TrainConfig) is not valid JSON" in _one_line(err)
    assert (run / "config.json").read_text() == '{"kind": '  # nothing overwritten
    (run / "config.json").unlink()
    (run / "data.json").write_text("{}")
    with pytest.raises(runfolder.RunFolderError, match="records no data fingerprint"):
        training.train(cfg, batcher, run, progress=False)


def test_a_full_disk_in_a_run_names_the_newest_checkpoint_kept(tmp_path, monkeypatch):
    """train() on a disk that fills while writing checkpoint 4 (one every update, two kept: 2 and 3):
    the error names checkpoint 3, the one a later call resumes from, and that checkpoint is there."""
    import orbax.checkpoint as ocp

    save = ocp.CheckpointManager.save

    def filling(self, step, *args, **kwargs):
        if step == 4:
            raise ValueError("RESOURCE_EXHAUSTED: Error writing local file: No space left on device")
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", filling)
    cfg = training.TrainConfig(kind="ar", model=MODEL, steps=6, warmup=1, batch_tokens=64, buckets=(8, 16),
                               checkpoint_every=1)
    run = tmp_path / "run"
    with pytest.raises(runfolder.RunFolderError) as err:
        training.train(cfg, batching.Batcher(SRC * 8, TGT * 8, batch_tokens=64, buckets=(8, 16)), run, progress=False)
    assert "checkpoint of step 4" in _one_line(err) and "resumes from the checkpoint of step 3" in _one_line(err)
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == [2, 3]


def test_a_full_disk_during_a_checkpoint_save_is_one_line(tmp_path):
    class FullDisk:
        def save(self, *args, **kwargs):
            raise ValueError("RESOURCE_EXHAUSTED: Error writing local file \"/x/ocdbt.process_0/d/0\": No space left "
                             "on device [OS error: No space left on device]\n  (40 more frames)")

        def wait_until_finished(self):
            pass

    with pytest.raises(runfolder.RunFolderError) as err:
        runfolder.save_checkpoint(FullDisk(), 500, {}, tmp_path, last_good=250)
    text = _one_line(err)
    assert f"no space left on the disk of {tmp_path}" in text and "step 500" in text
    assert "free disk space" in text and "resumes from the checkpoint of step 250" in text

    class Other(FullDisk):
        def save(self, *args, **kwargs):
            raise KeyError("not a disk problem")

    with pytest.raises(KeyError):  # anything else is not disguised as a full disk
        runfolder.save_checkpoint(Other(), 500, {}, tmp_path, last_good=250)


def test_run_folder_and_corpus_errors_name_the_path(tmp_path):
    from gmlm_lib.mt import translate

    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(runfolder.RunFolderError, match="is a file, not a run folder"):
        experiment.open_run(f)
    with pytest.raises(IsADirectoryError, match="is a folder; pass one of the text files in it"):
        corpus.read_lines(tmp_path)
    out, rec = tmp_path / "distilled.de.gz", tmp_path / "distilled.json"
    out.write_bytes(b"")
    rec.write_text('{"method": ')
    with pytest.raises(runfolder.RunFolderError) as err:
        experiment.distil(None, ["a"], translate.Method("greedy"), out)
    assert "delete distilled.de.gz and distilled.json to decode again" in _one_line(err)


def test_read_json_reports_a_folder_and_an_unreadable_file(tmp_path):
    with pytest.raises(runfolder.RunFolderError, match="is a folder, not the thing"):
        runfolder.read_json(tmp_path, "the thing")
    path = tmp_path / "bad.json"
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(runfolder.RunFolderError, match="cannot read .*bad.json"):
        runfolder.read_json(path, "the thing")
    path.write_text('{"a": 1}')
    assert runfolder.read_json(path, "the thing") == {"a": 1}


def test_the_command_line_hands_batch_and_promote_their_arguments(capsys, monkeypatch, tmp_path):
    """`batch run` prepares the machine, then calls batch.run_batch with its chapters (the four translation
    chapters when none is named), profile, --out, overrides, resolved paths and the cache's size in bytes,
    returns its status and writes it to --status; `batch promote` calls batch.promote on its folder and names
    each promoted chapter (all replaced by stand-ins)."""
    from gmlm_lib.book import __main__ as cli
    from gmlm_lib.book import batch, sources

    root = sources.find_root(pathlib.Path(__file__).parent)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.en.gz").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sources, "find_root", lambda: root)
    calls = []
    monkeypatch.setattr(batch, "prepare", lambda r, args: calls.append(("prepare", args.commit)))
    monkeypatch.setattr(batch, "run_batch", lambda *a, **kw: calls.append((a, kw)) or 7)
    monkeypatch.setattr(batch, "promote", lambda r, results: calls.append((r, results)) or ["padir", "stutter"])
    common = ["--commit", "c" * 40, "--data", str(data)]
    assert cli.main(["batch", "run", "--out", "o", *common, "--cache-out-mib", "15", "-p", "preset", "x",
                     "--status", "st"]) == 7
    assert calls[0] == ("prepare", "c" * 40) and (tmp_path / "st").read_text() == "7\n"
    (names, profile, out, overrides, given_root), kw = calls[1]
    assert names == list(sources.TRANSLATION_CHAPTERS) and profile == "full" and out == pathlib.Path("o")
    assert overrides == {"preset": "x"} and given_root == tmp_path
    assert kw["sizing_from"] is None and kw["cache_from"] is None and kw["cache_out_bytes"] == 15 * 2**20
    assert cli.main(["batch", "run", "padir", "--profile", "smoke", "--out", "o", *common,
                     "--sizing-from", "r.tar.gz"]) == 7
    assert calls[3][0][:2] == (["padir"], "smoke") and calls[3][1]["sizing_from"] == tmp_path / "r.tar.gz"
    assert cli.main(["batch", "promote", "gpu-out"]) == 0
    assert calls[4] == (root, pathlib.Path("gpu-out"))
    assert capsys.readouterr().out.splitlines() == ["promoted padir: notebooks/padir.ipynb",
                                                    "promoted stutter: notebooks/stutter.ipynb"]
    assert cli.main(["batch", "run", "--out", "o", "--commit", "c" * 40, "--data", str(tmp_path)]) == 2
    assert "DATA=folder holding Multi30k" in capsys.readouterr().err


def test_the_command_line_runs_check_sync_provenance_and_labels(capsys, monkeypatch):
    """Each maintenance command calls its function (stand-ins here) and reports; `check` exits 1 with
    each problem on stderr when there are problems, 0 without."""
    from gmlm_lib.book import __main__ as cli
    from gmlm_lib.book import checks, labels, sources

    root = sources.find_root(pathlib.Path(__file__).parent)
    monkeypatch.setattr(sources, "find_root", lambda: root)
    found = [["padir: stale"], []]
    monkeypatch.setattr(checks, "check_all", lambda r: found.pop(0))
    ahead = [{"padir": "d78eb771c4730000"}, {}]
    monkeypatch.setattr(checks, "awaiting_all", lambda r: ahead.pop(0))
    monkeypatch.setattr(checks, "sync", lambda r: [root / "notebooks" / "padir.ipynb"])
    monkeypatch.setattr(checks, "write_provenance_page", lambda r: root / "book" / "provenance.md")
    monkeypatch.setattr(labels, "write_page", lambda r: root / "book" / "labels.md")
    chapters = len(sources.toc_notebooks(root))
    assert cli.main(["check"]) == 1
    got = capsys.readouterr()
    assert got.err == "padir: stale\n" and got.out == (
        "padir: awaiting an accelerator run (notebooks/padir.md has moved ahead of its notebook, the full run of "
        f"d78eb771c473, which the book shows until that run is promoted)\n"
        f"check: {chapters} chapters, 1 problem(s), 1 awaiting an accelerator run.\n")
    assert cli.main(["check"]) == 0 and capsys.readouterr().out == f"check: {chapters} chapters, 0 problem(s).\n"
    assert [cli.main([c]) for c in ("sync", "provenance", "labels")] == [0, 0, 0]
    assert capsys.readouterr().out.splitlines() == ["updated notebooks/padir.ipynb", "wrote book/provenance.md",
                                                    "wrote book/labels.md"]


def test_the_command_line_reports_a_batchs_compilations_by_chapter_process(capsys, tmp_path):
    """`records compiles` reads a compile log, or the run-records.tar.gz that holds one, and prints a line a
    process: two programs side by side in [0, 10] and [5, 12] s are 17 s summed, 12 s of wall time. A
    file that logs nothing, an archive without the log and a damaged archive each stop with one line."""
    import tarfile

    from gmlm_lib.book import __main__ as cli

    log = tmp_path / "compiles.tsv"
    log.write_text("1795000010.0\t7\tjit(step)\t10.0\n1795000012.0\t7\tjit(val)\t7.0\nnot a line\n"
                   "1795000100.0\t9\tjit(f)\t1.0\n")
    records = tmp_path / "run-records.tar.gz"
    with tarfile.open(records, "w:gz") as tar:
        tar.add(log, arcname="compiles.tsv")
    for path in (log, records):
        assert cli.main(["records", "compiles", str(path)]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "pid 7: 2 programs, 17.0 s summed, 12.0 s of wall time, 2026-11-18 11:06:40 to 2026-11-18 11:06:52 UTC",
            "pid 9: 1 program, 1.0 s summed, 1.0 s of wall time, 2026-11-18 11:08:19 to 2026-11-18 11:08:20 UTC"]
    empty = tmp_path / "empty.tsv"
    empty.write_text("not a line\n")
    without = tmp_path / "old-records.tar.gz"
    with tarfile.open(without, "w:gz") as tar:
        tar.add(empty, arcname="runs.json")
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(b"not gzip")
    for path, why in [(empty, "logs no compilation"), (without, "holds no compiles.tsv"),
                      (damaged, "is not a readable .tar.gz")]:
        assert cli.main(["records", "compiles", str(path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: ValueError: {path} {why}") and err.count("\n") == 1


def test_the_command_line_stops_with_one_line(capsys, monkeypatch):
    import errno

    from gmlm_lib.book import __main__ as cli
    from gmlm_lib.book import sources

    monkeypatch.chdir(sources.find_root(pathlib.Path(__file__).parent))
    assert cli.main(["run", "smoke", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: FileNotFoundError: 'nope' is not a chapter of the book") and err.count("\n") == 1
    assert cli.main(["run", "smoke", "gmlm_ising_testbed", "-p", "bogus", "3"]) == 1
    assert capsys.readouterr().err.startswith('error: KeyError: unknown parameter(s) [\'bogus\']')
    full = OSError(errno.ENOSPC, "No space left on device", "/book/_build/x.ipynb")
    assert cli.describe(full) == ("No space left on device (/book/_build/x.ipynb): free disk space and run again; "
                                  "nothing committed was replaced (a run writes its notebook only once every cell has "
                                  "succeeded).")
    assert cli.describe(runfolder.RunFolderError("run folder /r does not exist; pass ...")) == \
        "RunFolderError: run folder /r does not exist; pass ..."
    # a system error without advice keeps its whole message (not its first argument, the errno)
    assert cli.describe(OSError(errno.EIO, "Input/output error", "/x")) == "OSError: [Errno 5] Input/output error: '/x'"
    assert cli.describe(KeyError("padir")) == "KeyError: padir"
    with pytest.raises(SystemExit) as stop:  # nothing to run: a usage error (status 2), not a silent success
        cli.main(["run", "smoke"])
    assert stop.value.code == 2 and "name at least one notebook, or pass --all" in capsys.readouterr().err
    monkeypatch.setenv("GMLM_TRACEBACK", "1")  # the whole traceback, for debugging the tools
    with pytest.raises(FileNotFoundError, match="'nope' is not a chapter of the book"):
        cli.main(["run", "smoke", "nope"])


def test_the_command_line_names_each_finished_run_and_where_it_went(capsys, monkeypatch):
    from gmlm_lib.book import __main__ as cli
    from gmlm_lib.book import runner, sources

    monkeypatch.chdir(sources.find_root(pathlib.Path(__file__).parent))
    ran = []
    monkeypatch.setattr(runner, "run_notebook", lambda name, profile, overrides, root: ran.append(
        (name, profile, overrides)) or {"total_wall_time_s": 12.34})
    assert cli.main(["run", "smoke", "masking_more", "padir", "-p", "seed", "3"]) == 0
    assert ran == [("masking_more", "smoke", {"seed": 3}), ("padir", "smoke", {"seed": 3})]
    assert capsys.readouterr().out.splitlines() == [
        "masking_more: smoke run finished in 12.3 s -> _build/smoke/masking_more.ipynb",
        "padir: smoke run finished in 12.3 s -> _build/smoke/padir.ipynb"]


@pytest.mark.parametrize("call, error, words", [
    (lambda: ising.ising_model([["0", "1"], ["1", "0"]], [0, 0]), TypeError, "J must hold numbers"),
    (lambda: ising.random_model(0, 3, 0.1, 0.1), TypeError, "key must be a jax.random key"),
    (lambda: metrics.bleu(["a"], ["a"], tokenize="nope"), ValueError, "bleu(tokenize=...) must be one of"),
    (lambda: metrics.words(None), TypeError, "words(text) needs one sentence as a string"),
    (lambda: seq2seq.build(MODEL, 2.5), TypeError, "seed must be an integer; got 2.5"),
    (lambda: seq2seq.ModelConfig(vocab=40.5, causal=True), TypeError, "ModelConfig.vocab must be an integer"),
    (lambda: seq2seq.ModelConfig(vocab=40, causal=True, d_model="32"), TypeError, "ModelConfig.d_model must be an integer"),
    (lambda: seq2seq.ModelConfig(vocab=40, causal="yes"), TypeError, "ModelConfig.causal must be True or False"),
    (lambda: vocab.train([None, "a b"]), TypeError, "item 0 is NoneType"),
])
def test_a_fresh_battery_of_wrong_values_is_refused(call, error, words):
    """Calls of the same kinds as the issue's, on functions it did not name."""
    with jax.enable_x64(True):
        with pytest.raises(error) as err:
            call()
    assert words in str(err.value)


def test_counts_as_numpy_integers_are_counts():
    assert decoding.StrategyOptions("threshold", steps=np.int64(3)).steps == 3
    assert type(decoding.StrategyOptions("threshold", steps=np.int64(3)).steps) is int


def test_a_run_folder_root_that_is_a_file_is_refused(tmp_path):
    from gmlm_lib.mt import pipeline

    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(runfolder.RunFolderError, match="is a file, not a run folder"):
        pipeline.run_folder(config.get("multi30k_tiny"), f)
