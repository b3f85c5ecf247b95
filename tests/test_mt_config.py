"""One configuration source for translation runs (gmlm_lib.mt.config): presets, overrides, files."""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest

from gmlm_lib.book import sources
from gmlm_lib.mt import config, training

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _plain(v):
    return tuple(v) if isinstance(v, list) else v


def test_defaults_are_the_padir_chapters_full_run():
    """Every chapter parameter that is a setting of the experiment has the CPU preset's value, or is
    None (the preset's value, with ``preset = "auto"``); a chapter with a ``preset`` names every setting."""
    params = sources.parameters_cell(sources.read_text_notebook(ROOT / "notebooks" / "padir.md"))
    fields = {f.name for f in dataclasses.fields(config.Experiment)}
    shared = fields & set(params)
    assert len(shared) >= 30
    if "preset" in params:
        assert params["preset"] == "auto" and shared == fields
    default = config.get()
    assert {k: _plain(params[k]) for k in shared if params[k] is not None} == \
        {k: getattr(default, k) for k in shared if params[k] is not None}


@pytest.mark.parametrize("path", sorted((ROOT / "params" / "padir").glob("*.yaml")), ids=lambda p: p.name)
def test_parameter_files_validate(path):
    exp = config.from_yaml(path)
    assert isinstance(exp, config.Experiment)


def test_colab_file_is_the_wmt14_preset():
    assert config.from_yaml(ROOT / "params" / "padir" / "colab-tpu-wmt14.yaml") == config.get("wmt14_colab_tpu")


def test_train_config_maps_every_setting():
    exp = config.get(overrides=dict(learning_rate=5e-4, unmasking_rate=0.2, layers=2, train_buckets=[8, 16],
                                    decode_buckets=[8, 16]))
    ar, padir = exp.train_config("ar", vocab=100), exp.train_config("padir", vocab=100)
    assert (padir.learning_rate, padir.unmasking_rate, padir.model.enc_layers, padir.model.max_len) == (5e-4, 0.2, 2, 16)
    assert padir.steps == exp.padir_steps and ar.steps == exp.ar_steps and not padir.model.causal and ar.model.causal
    # the teacher keeps the PaDIR-only fields at TrainConfig's defaults, so they never invalidate its run folder
    defaults = {f.name: f.default for f in dataclasses.fields(training.TrainConfig)}
    assert (ar.unmasking_rate, ar.stages, ar.init) == (defaults["unmasking_rate"], defaults["stages"], defaults["init"])


def test_yaml_float_pitfall_is_read_as_a_number(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("learning_rate: 1e-3\nwarmup: 10\n")  # YAML 1.1 reads 1e-3 as a string
    assert config.from_yaml(f).learning_rate == 1e-3


@pytest.mark.parametrize("text, error, words", [
    ("learnig_rate: 0.1\n", KeyError, ["learnig_rate", "p.yaml"]),
    ("layers: three\n", TypeError, ["layers", "int", "p.yaml"]),
    ("layers: true\n", TypeError, ["layers", "int"]),
    ("train_buckets: 32\n", TypeError, ["train_buckets", "list"]),
    ("train_files: /a/b\n", TypeError, ["train_files", "list"]),
    ("preset: tpu\n", ValueError, ["preset", "multi30k_cpu"]),
    ("- 1\n- 2\n", TypeError, ["p.yaml", "mapping"]),
    ("a: [1\n", ValueError, ["p.yaml"]),
])
def test_bad_parameter_files_name_the_setting_and_file(tmp_path, text, error, words):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(error) as info:
        config.from_yaml(f)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_bad_kind_is_named():
    with pytest.raises(ValueError, match="kind"):
        config.get().train_config("bert", vocab=100)


@pytest.mark.parametrize("backend, preset", [("cpu", "multi30k_cpu"), ("gpu", "multi30k_gpu"),
                                             ("tpu", "multi30k_gpu"), ("cuda", "multi30k_gpu")])
def test_auto_picks_the_preset_of_the_backend(backend, preset):
    assert config.resolve("auto", backend=backend) == preset
    assert config.resolve("multi30k_tiny", backend="gpu") == "multi30k_tiny"  # a named preset stays itself


def test_auto_here_is_the_backend_of_this_process():
    import jax

    want = "multi30k_gpu" if jax.default_backend() in ("gpu", "tpu") else "multi30k_cpu"
    assert config.get("auto") == config.get(want)


@pytest.mark.parametrize("bad", ["gpu", "", None, 3])
def test_an_unknown_preset_lists_the_presets(bad):
    with pytest.raises(ValueError, match="multi30k_gpu") as info:
        config.resolve(bad)
    assert "auto" in str(info.value)


@pytest.mark.parametrize("name", sorted(config.PRESETS))
def test_every_preset_builds_both_models(name):
    exp = config.get(name)
    for kind in ("ar", "padir"):
        cfg = exp.train_config(kind, vocab=exp.vocab_size)
        assert max(cfg.buckets) <= cfg.model.max_len


def test_gpu_preset_is_the_literature_recipe_in_bfloat16():
    """The recipe of issue 45: 4 + 4 layers, dropout 0.3, label smoothing 0.1, bf16, whole test set timed."""
    gpu = config.get("multi30k_gpu")
    model = gpu.model_config(gpu.vocab_size, causal=True)
    assert (model.enc_layers, model.dec_layers, model.d_model, model.d_ff, model.dropout, model.dtype) == \
        (4, 4, 256, 1024, 0.3, "bfloat16")
    assert gpu.label_smoothing == 0.1 and gpu.latency_sentences == 0 and gpu.padir_init == "teacher"
    assert gpu.ar_steps * gpu.batch_tokens > config.get().ar_steps * config.get().batch_tokens  # more data seen


def test_from_parameters_lets_set_values_win_and_none_take_the_preset():
    exp = config.from_parameters("multi30k_gpu", dict(ar_steps=None, padir_steps=777, analysed="padir_raw"))
    assert exp.ar_steps == config.get("multi30k_gpu").ar_steps and exp.padir_steps == 777
    with pytest.raises(TypeError, match="padir_steps.*the parameters cell"):
        config.from_parameters("multi30k_cpu", dict(padir_steps="many"))
    with pytest.raises(TypeError, match="dict"):
        config.from_parameters("multi30k_cpu", [("ar_steps", 3)])


def test_deep_shallow_baseline_is_the_teacher_with_one_decoder_layer():
    exp = config.get("multi30k_gpu")
    teacher, shallow = exp.train_config("ar", 100), exp.train_config("ar_shallow", 100)
    assert shallow.kind == "ar" and shallow.model.dec_layers == 1 and shallow.model.causal
    assert shallow.model.enc_layers == teacher.model.enc_layers == 4
    assert shallow.replace(dec_layers=teacher.model.dec_layers) == teacher  # nothing else differs


@pytest.mark.parametrize("changes, words", [
    (dict(eval_steps=(0, 4)), "eval_steps must be a non-empty list of integers >= 1"),
    (dict(latency_steps=()), "latency_steps must be a non-empty list of integers >= 1"),
    (dict(train_seconds=-1.0), "train_seconds must be a finite number >= 0"),
    (dict(train_seconds=float("inf")), "train_seconds must be a finite number >= 0"),
    (dict(learning_rate=0.0), "learning_rate must be > 0"),
    (dict(length_penalty=-0.1), "length_penalty must be >= 0"),
    (dict(train_files=["a.en", "a.de"]), "train_files and test_files must both be empty"),
    (dict(train_files=["a.en", "a.de"], test_files=["t.en"]), "train_files and test_files must both be empty"),
    (dict(val_files=["v.en", "v.de"]), "val_files must be empty or hold two aligned files"),
    (dict(train_files=["a.en", "a.de"], test_files=["t.en", "t.de"], val_files=["v.en"]), "val_files must be empty"),
    (dict(test_sentences=-1), "test_sentences must be >= 0 (0: all); got -1."),
    (dict(warmup=-1), "warmup must be >= 0 (0: none); got -1."),
    (dict(decode_buckets=[]), "decode_buckets must hold at least one length"),
    # the trainer's own checks run when the experiment is made, before any work, not when a model trains
    (dict(warmup=10**6), "TrainConfig.warmup must be in [0, steps = 1200); got 1000000."),
])
def test_an_experiment_names_a_setting_out_of_range(changes, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        config.get("multi30k_cpu", changes)


@pytest.mark.parametrize("name", ["beam", "seeds", "ar_steps", "test_sentences", "seed"])
def test_an_experiment_names_a_count_given_as_text_or_a_fraction(name):
    """A count given as a string or a float is named, not compared (no "'<' not supported")."""
    for value in ("4", 2.5):
        with pytest.raises(TypeError, match=f"{name} must be an integer; got {re.escape(repr(value))}"):
            config.get("multi30k_cpu", {name: value})


def test_an_experiments_ranges_include_their_ends():
    edge = config.get("multi30k_cpu", dict(eval_steps=(1,), latency_steps=(1,), train_seconds=0.0, length_penalty=0.0,
                                           train_files=["a.en", "a.de"], test_files=["t.en", "t.de"],
                                           val_files=["v.en", "v.de"]))
    assert edge.eval_steps == (1,) and edge.train_seconds == 0.0 and edge.length_penalty == 0.0


def test_decode_buckets_past_the_models_max_len_are_refused_by_name():
    """A decoding bucket longer than the models' max_len (max(train_buckets)) would be accepted here and
    dropped later by the translator: it is refused where it is set, naming both settings."""
    with pytest.raises(ValueError, match=r"^decode_buckets go up to 64 but the models' max_len = "
                                         r"max\(train_buckets\) = 32"):
        config.get(overrides=dict(train_buckets=[16, 32], decode_buckets=[16, 64]))
    assert config.get(overrides=dict(train_buckets=[16, 32], decode_buckets=[16, 32])).decode_buckets == (16, 32)
