"""Each chapter's parameters, checked by its findings module's frozen ``Params`` (gmlm_lib.book.validate):
the fields are the parameters cell's names, the defaults and the smoke profile pass, every parameter
has a check that names it, and the ranges hold at their edges. Checked in each chapter's source,
``notebooks/NAME.md`` (which may run ahead of its notebook, awaiting an accelerator run)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gmlm_lib.book import sources
from gmlm_lib.book.findings import (ablations, adaptive_masking, conditionals_to_joint, dependency_decoding,
                                    efficiency_is_mixing, gmlm_ising_testbed, kgibbs_vs_parallel, masking_more,
                                    one_parallel_step, padir, parallel_rules, stutter)
from gmlm_lib.book.validate import ChapterParams
from gmlm_lib.mt import config

ROOT = Path(__file__).resolve().parents[1]
PARAMS = {  # chapter: the Params that its validation cell builds
    "gmlm_ising_testbed": gmlm_ising_testbed.Params,
    "masking_more": masking_more.Params,
    "efficiency_is_mixing": efficiency_is_mixing.Params,
    "adaptive_masking": adaptive_masking.Params,
    "conditionals_to_joint": conditionals_to_joint.Params,
    "one_parallel_step": one_parallel_step.Params,
    "kgibbs_vs_parallel": kgibbs_vs_parallel.Params,
    "parallel_rules": parallel_rules.Params,
    "padir": padir.Params,
    "stutter": stutter.Params,
    "dependency_decoding": dependency_decoding.Params,
    "ablations": ablations.Params,
}


# the chapter whose other parameters are the settings of its Experiment (gmlm_lib.mt.config), built and checked
# there: its Params holds only its own parameters
EXPERIMENT_NAMES = {"padir": set(config.FIELDS) - {"seed"}}


def _source(chapter: str) -> Path:
    return ROOT / "notebooks" / f"{chapter}.md"


def _defaults(chapter: str) -> dict:
    return sources.parameters_cell(sources.read_text_notebook(_source(chapter)))


def _text(chapter: str) -> str:
    return _source(chapter).read_text()


def _smoke(chapter: str) -> dict:
    """The chapter's smoke overrides (params/smoke.yaml)."""
    return sources.smoke_overrides(ROOT).get(chapter, {})


def test_every_chapter_has_its_params():
    assert sorted(PARAMS) == sorted(sources.toc_notebooks(ROOT))


def _own(chapter: str, values: dict) -> dict:
    """The parameters of ``values`` that the chapter's Params holds (all but its experiment's settings)."""
    return {k: v for k, v in values.items() if k not in EXPERIMENT_NAMES.get(chapter, ())}


@pytest.mark.parametrize("chapter", sorted(PARAMS))
def test_the_fields_are_the_parameters_cell_and_its_defaults_pass(chapter):
    defaults = _defaults(chapter)
    cls = PARAMS[chapter]
    assert sorted(f.name for f in dataclasses.fields(cls)) == sorted(_own(chapter, defaults))  # the cell's, no other
    assert cls.of(defaults).record() == _own(chapter, defaults)
    smoke = _smoke(chapter)
    assert cls(**_own(chapter, {**defaults, **smoke})).record() == _own(chapter, {**defaults, **smoke})
    # the chapter imports this class's module, builds its Params once, and checks nothing in a cell of its own
    text = _text(chapter)
    assert cls.__module__.rsplit(".", 1)[1] == chapter, "a chapter's findings module is named after the chapter"
    assert f"from gmlm_lib.book.findings import {chapter} as " in text
    assert text.count(".Params.of(globals())") == 1 and "require(" not in text


@pytest.mark.parametrize("chapter", sorted(PARAMS))
def test_every_parameter_is_checked_and_named(chapter):
    """A value of the wrong kind in any one parameter stops the chapter with an error naming it: by its
    Params, or, for a setting of its experiment, by :func:`gmlm_lib.mt.config.from_parameters`."""
    defaults = _defaults(chapter)
    for name in defaults:  # bytes: no parameter of any chapter takes them (a string would pass a str check)
        if name in EXPERIMENT_NAMES.get(chapter, ()):
            with pytest.raises((TypeError, ValueError), match=f"^{name}"):
                config.from_parameters(defaults["preset"], {**defaults, name: b"x"})
            continue
        with pytest.raises(ValueError, match=f"parameter {name} = b'x' is out of range"):
            PARAMS[chapter](**_own(chapter, {**defaults, name: b"x"}))


def _edge(chapter, **changes):
    """The chapter's parameters with ``changes``, checked as the chapter checks them (its experiment too)."""
    values = {**_defaults(chapter), **changes}
    if chapter in EXPERIMENT_NAMES:
        exp = config.from_parameters(values["preset"], values)
        return PARAMS[chapter].of(values).resolved(exp, "cpu")
    return PARAMS[chapter](**values)


def test_a_model_setting_is_named_by_the_cells_name_for_it():
    """The model config's ``vocab`` is the cell's ``vocab_size``: its error names ``vocab_size``."""
    with pytest.raises(ValueError, match=r"^vocab_size = 5 is out of range: ModelConfig\.vocab = 5 "):
        _edge("padir", preset="multi30k_cpu", vocab_size=5)


@pytest.mark.parametrize("chapter, good, bad, name", [
    ("kgibbs_vs_parallel", dict(n=5, cliques=[5], figure_clique=5), dict(n=5, cliques=[6], figure_clique=5), "cliques"),
    ("kgibbs_vs_parallel", dict(bench_ks=[64]), dict(bench_ks=[65]), "bench_ks"),
    ("kgibbs_vs_parallel", dict(field=1e-9), dict(field=0.0), "field"),
    ("kgibbs_vs_parallel", dict(bench_min_time=1e-3), dict(bench_min_time=0.0), "bench_min_time"),
    ("adaptive_masking", dict(lemma2_bias=0.999), dict(lemma2_bias=1.0), "lemma2_bias"),
    ("adaptive_masking", dict(lemma2_bias=0.001), dict(lemma2_bias=0.0), "lemma2_bias"),
    ("adaptive_masking", dict(n=4), dict(n=5), "n"),
    ("adaptive_masking", dict(n=12), dict(n=14), "n"),
    ("one_parallel_step", dict(ca_rule=255), dict(ca_rule=256), "ca_rule"),
    ("one_parallel_step", dict(pairs=3), dict(pairs=4), "pairs"),
    ("one_parallel_step", dict(ca_length=3), dict(ca_length=2), "ca_length"),
    ("parallel_rules", dict(taus=[1.0]), dict(taus=[1.001]), "taus"),
    ("parallel_rules", dict(taus=[0.5, 1.0]), dict(taus=[0.5, 1.001]), "taus"),
    ("parallel_rules", dict(budgets=[1e-3, 5]), dict(budgets=[0.0, 5]), "budgets"),
    ("parallel_rules", dict(blocks=[2, 16]), dict(blocks=[2, 6]), "blocks"),
    ("parallel_rules", dict(mc_samples=100), dict(mc_samples=99), "mc_samples"),
    ("parallel_rules", dict(n=12, schedules=[12]), dict(n=12, schedules=[13]), "schedules"),
    ("conditionals_to_joint", dict(couplings=[0.0]), dict(couplings=[-0.001]), "couplings"),
    ("conditionals_to_joint", dict(fit_k=6), dict(fit_k=7), "fit_k"),
    ("efficiency_is_mixing", dict(big_n=16, big_ks=[16]), dict(big_n=16, big_ks=[17]), "big_ks"),
    ("efficiency_is_mixing", dict(n=12), dict(n=13), "n"),
    ("masking_more", dict(num_models=2), dict(num_models=1), "num_models"),
    ("masking_more", dict(repeats=2), dict(repeats=1), "repeats"),
    ("gmlm_ising_testbed", dict(ks=[8]), dict(ks=[9]), "ks"),
    ("gmlm_ising_testbed", dict(coupling_scale=0.0), dict(coupling_scale=-0.1), "coupling_scale"),
    ("gmlm_ising_testbed", dict(eq6_c=20), dict(eq6_c=21), "eq6_c"),
])
def test_a_range_at_its_edge(chapter, good, bad, name):
    _edge(chapter, **good)
    with pytest.raises(ValueError, match=f"parameter {name} = "):
        _edge(chapter, **bad)


@pytest.mark.parametrize("chapter", sorted(PARAMS))
def test_a_bool_is_not_a_seed(chapter):
    with pytest.raises((TypeError, ValueError), match="^(parameter seed = True|seed in the parameters cell must be an "
                                                      "integer; got True)"):
        _edge(chapter, seed=True)


def test_an_out_of_range_error_gives_the_range_and_why():
    # the reader sees the range and its reason (n = 2 x pairs sites), not only the parameter's name
    limit = one_parallel_step.MAX_PAIRS
    why = rf"must be an integer in \[1, {limit}\] \(n = 2 pairs is at most {2 * limit}\)"
    with pytest.raises(ValueError, match=why):
        _edge("one_parallel_step", pairs=limit + 1)


def test_a_namespace_without_a_parameter_is_named_and_params_are_frozen():
    defaults = _defaults("one_parallel_step")
    with pytest.raises(NameError, match=r"\['ca_rule'\]"):
        one_parallel_step.Params.of({k: v for k, v in defaults.items() if k != "ca_rule"})
    params = one_parallel_step.Params.of({**defaults, "unrelated": 1})  # a notebook's globals hold more
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.pairs = 4


@dataclasses.dataclass(frozen=True)
class _Ranged(ChapterParams):
    x: float = 0.5
    xs: tuple = (0.0, 1.0)
    n: int = 2
    ns: tuple = (1, 2)
    m: int = 3

    def check(self):
        self.number("x", 0.0, "a share", high=1.0)
        self.numbers("xs", high=1.0)
        self.integer("n", 1, 4)
        self.integers("ns", 1, 4)
        self.integer("m", 1)


@pytest.mark.parametrize("changes, words", [
    (dict(x=1.0001),
     "parameter x = 1.0001 is out of range: it must be a finite number in \\[0.0, 1.0\\] \\(a share\\)"),
    (dict(x=-0.0001), "must be a finite number in \\[0.0, 1.0\\]"),
    (dict(x=float("nan")), "parameter x = nan"),
    (dict(xs=(0.5, 1.0001)),
     "xs = \\(0.5, 1.0001\\) is out of range: it must be a non-empty list of finite numbers <= 1.0"),
    (dict(xs=()), "parameter xs = \\(\\) is out of range: it must be a non-empty list"),
    (dict(n=5), "parameter n = 5 is out of range: it must be an integer in \\[1, 4\\]"),
    (dict(n=0), "parameter n = 0 is out of range: it must be an integer in \\[1, 4\\]"),
    (dict(ns=(1, 5)),
     "parameter ns = \\(1, 5\\) is out of range: it must be a non-empty list of integers in \\[1, 4\\]"),
    (dict(ns=(0, 2)), "parameter ns = \\(0, 2\\) is out of range"),
    (dict(m=0), "parameter m = 0 is out of range: it must be an integer >= 1"),
    (dict(seed=None), "parameter seed = None is out of range: it must be an integer >= 0"),  # None means nothing here
])
def test_the_range_helpers_check_both_ends_and_say_the_range(changes, words):
    # each end itself is in range; no lower end for xs, no upper end for m
    _Ranged(seed=0, install_ref="main", x=1.0, xs=(-5.0, 1.0), n=4, ns=(4, 1), m=10**9)
    _Ranged(seed=0, install_ref="main", x=0.0, n=1, ns=(1,), m=1)
    with pytest.raises(ValueError, match=words):
        _Ranged(**{"seed": 0, "install_ref": "main", **changes})


def test_a_params_class_without_checks_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Unchecked(ChapterParams):
        pass

    with pytest.raises(NotImplementedError, match="Unchecked must define check"):
        Unchecked(seed=0, install_ref="main")
    with pytest.raises(ValueError, match="parameter seed = -1"):  # the shared fields are checked first
        Unchecked(seed=-1, install_ref="main")


@pytest.mark.parametrize("backend, steps, seconds", [("gpu", 1200, 300.0), ("tpu", 1200, 300.0), ("cpu", 120, 0.0)])
def test_the_ablations_none_defaults_are_resolved_by_backend(backend, steps, seconds):
    params = ablations.Params.of({**_defaults("ablations"), "variant_steps": None, "train_seconds": None,
                                  "decode_buckets": None, "preset": "auto"})
    got = params.resolved(backend)
    assert (got.variant_steps, got.train_seconds) == (steps, seconds)
    given = dataclasses.replace(params, variant_steps=0, train_seconds=1.5, decode_buckets=[16]).resolved(backend)
    assert (given.variant_steps, given.train_seconds, given.decode_buckets) == (0, 1.5, [16])  # a value given stays


@pytest.mark.parametrize("chapter", ["stutter", "dependency_decoding", "ablations"])
@pytest.mark.parametrize("backend, buckets", [("gpu", [64]), ("tpu", [64]), ("cpu", [16, 32, 64])])
def test_decode_buckets_none_is_the_presets_for_the_backend(chapter, backend, buckets):
    """"auto" resolves by the backend given (not by this machine's): one bucket on an accelerator, three on a CPU."""
    params = PARAMS[chapter].of({**_defaults(chapter), "decode_buckets": None, "preset": "auto"})
    assert params.resolved(backend).decode_buckets == buckets
    assert params.resolved(backend).record()["decode_buckets"] == buckets
    cpu = PARAMS[chapter].of({**_defaults(chapter), "decode_buckets": None, "preset": "multi30k_cpu"})
    assert cpu.resolved("gpu").decode_buckets == [16, 32, 64]  # a named preset is itself on any backend
    assert dataclasses.replace(params, decode_buckets=[8]).resolved(backend).decode_buckets == [8]


@pytest.mark.parametrize("name, bad", [("variants", {"baseline": {"stages": 1}}), ("variants", {"x": {}}),
                                       ("variants", {}), ("train_seconds", 1e9),
                                       ("tgt_lang", "en"), ("train_seconds", -1.0), ("variant_steps", -1),
                                       ("decode_buckets", []), ("preset", "multi30k"), ("run_root", None)])
def test_the_ablations_ranges(name, bad):
    with pytest.raises(ValueError, match=f"parameter {name} = "):
        _edge("ablations", **{name: bad})


def _rule_grid(**values) -> dict:
    """The dependency chapter's ``rule_grid`` override: one valid setting for each rule, ``values`` replacing some."""
    return dict(rule_grid={"threshold": [0.5], "factor": [1.0], "entropy": [0.1], "dilated": [4],
                           "dependency_entropy": [0.1], **values})


@pytest.mark.parametrize("chapter, good, bad, name", [
    ("stutter", dict(analysed="padir_raw"), dict(analysed="ar"), "analysed"),
    ("ablations", dict(variants={"1 training stage": {"stages": 1}}), dict(variants={}), "variants"),
    ("stutter", dict(test_sentences=0, train_sentences=1), dict(train_sentences=0), "train_sentences"),
    ("dependency_decoding", dict(passes=[4]), dict(passes=[3, 5]), "passes"),
    ("dependency_decoding", dict(passes=[1, 4]), dict(passes=[0, 4]), "passes"),
    ("dependency_decoding", dict(rule_passes=[1, 4]), dict(rule_passes=[4, 2.5]), "rule_passes"),
    ("dependency_decoding", dict(confidence=[0.0, 1.0]), dict(confidence=[1.001]), "confidence"),
    ("dependency_decoding", dict(ising_n=6, clique=6), dict(ising_n=7), "ising_n"),
    ("dependency_decoding", dict(clique=2), dict(clique=1), "clique"),
    ("dependency_decoding", dict(confidence=[0.5], dependency=[0.9], tune_sentences=0),
     dict(tune_sentences=0), "tune_sentences"),
    ("dependency_decoding", dict(confidence=[0.5, 0.9], tune_sentences=1),
     dict(confidence=[0.5, 0.9], tune_sentences=0), "tune_sentences"),
    ("dependency_decoding", dict(similarity=1.0), dict(similarity=1.01), "similarity"),
    ("dependency_decoding", dict(random_scale=1e-3), dict(random_scale=0.0), "random_scale"),
    ("dependency_decoding", _rule_grid(), dict(rule_grid={"threshold": [0.5]}), "rule_grid"),
    ("dependency_decoding", _rule_grid(), _rule_grid(threshold=[]), "rule_grid"),
    # each value is a setting its rule takes: a DUS block is a power of two, never a float rounded to one
    ("dependency_decoding", _rule_grid(threshold=[0.0, 1.0], factor=[1e-3], dilated=[2, 64]), _rule_grid(dilated=[8.0]),
     "rule_grid"),
    ("dependency_decoding", _rule_grid(), _rule_grid(dilated=[6]), "rule_grid"),
    ("dependency_decoding", _rule_grid(), _rule_grid(threshold=[1.5]), "rule_grid"),
    ("dependency_decoding", _rule_grid(), _rule_grid(factor=[0.0]), "rule_grid"),
    ("padir", dict(unit_widths=[1, 64]), dict(unit_widths=[65]), "unit_widths"),
    ("padir", dict(latency_hyps=[1]), dict(latency_hyps=[3]), "latency_hyps"),
    ("padir", dict(base_unit_seconds=1e-3), dict(base_unit_seconds=0.0), "base_unit_seconds"),
    ("padir", dict(seed=None), dict(seed=-1), "seed"),
    ("padir", dict(warmup=10, ar_steps=11, padir_steps=11), dict(warmup=11, ar_steps=11, padir_steps=11), "warmup"),
    ("padir", dict(dropout=0.0), dict(dropout=1.0), "dropout"),
    ("padir", dict(compute_dtype="bfloat16"), dict(compute_dtype="float16"), "compute_dtype"),
    ("padir", dict(deep_shallow=None), dict(deep_shallow=1), "deep_shallow"),
])
def test_a_translation_range_at_its_edge(chapter, good, bad, name):
    _edge(chapter, **good)
    with pytest.raises(ValueError, match=f"(parameter |^){name} "):
        _edge(chapter, **bad)


def test_a_padir_setting_out_of_range_in_the_preset_is_named_with_the_presets_value():
    with pytest.raises(ValueError, match=r"^d_model \(None in the parameters cell: the preset's value\) = 256 is out "
                                         r"of range: .*heads = 3"):
        _edge("padir", heads=3)


@pytest.mark.parametrize("backend, preset, deep", [("gpu", "multi30k_gpu", True), ("tpu", "multi30k_gpu", True),
                                                   ("cpu", "multi30k_cpu", False)])
def test_the_padir_record_holds_every_setting_resolved_for_the_backend(backend, preset, deep, monkeypatch):
    """What the chapter's run records: every name of its parameters cell, none left at None, the experiment's
    settings the preset's (by name) and the chapter's own resolved for the backend; a value given stays."""
    import jax

    from gmlm_lib.book.findings import padir as findings

    monkeypatch.setattr(jax, "default_backend", lambda: backend)  # "auto" resolves by the running backend
    values = {**_defaults("padir"), "preset": "auto"}
    exp = config.from_parameters("auto", values)
    record = findings.record(exp, findings.Params.of(values).resolved(exp, backend))
    assert set(record) == set(values) and None not in record.values()
    assert record["preset"] == preset and record["deep_shallow"] is deep
    assert {k: record[k] for k in config.FIELDS} == dataclasses.asdict(config.get(preset))
    mine = {**values, "d_model": 128, "deep_shallow": False}
    exp = config.from_parameters("auto", mine)
    assert (exp.d_model, findings.Params.of(mine).resolved(exp, backend).deep_shallow) == (128, False)
