"""Each chapter's parameters, checked by its findings module's frozen ``Params`` (gmlm_lib.book.validate):
the fields are the parameters cell's names, the defaults and the smoke profile pass, every parameter
has a check that names it, and the ranges hold at their edges."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gmlm_lib.book import sources
from gmlm_lib.book.findings import (ablations, adaptive_masking, conditionals_to_joint, efficiency, kgibbs,
                                    masking_more, one_parallel_step, parallel_rules, testbed)
from gmlm_lib.book.validate import ChapterParams
from gmlm_lib.mt import config

ROOT = Path(__file__).resolve().parents[1]
PARAMS = {  # chapter: the Params that its validation cell builds
    "gmlm_ising_testbed": testbed.Params,
    "masking_more": masking_more.Params,
    "efficiency_is_mixing": efficiency.Params,
    "adaptive_masking": adaptive_masking.Params,
    "conditionals_to_joint": conditionals_to_joint.Params,
    "one_parallel_step": one_parallel_step.Params,
    "kgibbs_vs_parallel": kgibbs.Params,
    "parallel_rules": parallel_rules.Params,
}


def _defaults(chapter: str) -> dict:
    return sources.parameters_cell(sources.read_text_notebook(ROOT / "notebooks" / f"{chapter}.md"))


def _text(chapter: str) -> str:
    return (ROOT / "notebooks" / f"{chapter}.md").read_text()


@pytest.mark.parametrize("chapter", sorted(PARAMS))
def test_the_fields_are_the_parameters_cell_and_its_defaults_pass(chapter):
    defaults = _defaults(chapter)
    cls = PARAMS[chapter]
    assert sorted(f.name for f in dataclasses.fields(cls)) == sorted(defaults)  # the cell's names, no other
    assert cls.of(defaults).record() == defaults
    smoke = sources.smoke_overrides(ROOT).get(chapter, {})
    assert cls(**{**defaults, **smoke}).record() == {**defaults, **smoke}
    # the chapter imports this class's module, builds its Params once, and checks nothing in a cell of its own
    text = _text(chapter)
    assert f"from gmlm_lib.book.findings import {cls.__module__.rsplit('.', 1)[1]} as " in text
    assert text.count(".Params.of(globals())") == 1 and "require(" not in text


@pytest.mark.parametrize("chapter", sorted(PARAMS))
def test_every_parameter_is_checked_and_named(chapter):
    """A value of the wrong kind in any one parameter stops the chapter with an error naming it."""
    defaults = _defaults(chapter)
    for name in defaults:
        bad = "" if name == "install_ref" else "x"
        with pytest.raises(ValueError, match=f"parameter {name} = {bad!r} is out of range"):
            PARAMS[chapter](**{**defaults, name: bad})


def _edge(chapter, **changes):
    return PARAMS[chapter](**{**_defaults(chapter), **changes})


@pytest.mark.parametrize("chapter, good, bad, name", [
    ("kgibbs_vs_parallel", dict(n=5, cliques=[5], figure_clique=5), dict(n=5, cliques=[6], figure_clique=5), "cliques"),
    ("kgibbs_vs_parallel", dict(bench_ks=[64]), dict(bench_ks=[65]), "bench_ks"),
    ("kgibbs_vs_parallel", dict(field=1e-9), dict(field=0.0), "field"),
    ("adaptive_masking", dict(lemma2_bias=0.999), dict(lemma2_bias=1.0), "lemma2_bias"),
    ("adaptive_masking", dict(n=4), dict(n=5), "n"),
    ("adaptive_masking", dict(n=12), dict(n=14), "n"),
    ("one_parallel_step", dict(ca_rule=255), dict(ca_rule=256), "ca_rule"),
    ("one_parallel_step", dict(pairs=3), dict(pairs=4), "pairs"),
    ("one_parallel_step", dict(ca_length=3), dict(ca_length=2), "ca_length"),
    ("parallel_rules", dict(taus=[1.0]), dict(taus=[1.001]), "taus"),
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
    with pytest.raises(ValueError, match="parameter seed = True"):
        _edge(chapter, seed=True)


def test_a_namespace_without_a_parameter_is_named_and_params_are_frozen():
    defaults = _defaults("one_parallel_step")
    with pytest.raises(NameError, match=r"\['ca_rule'\]"):
        one_parallel_step.Params.of({k: v for k, v in defaults.items() if k != "ca_rule"})
    params = one_parallel_step.Params.of({**defaults, "unrelated": 1})  # a notebook's globals hold more
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.pairs = 4


def test_a_params_class_without_checks_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Unchecked(ChapterParams):
        pass

    with pytest.raises(NotImplementedError, match="Unchecked must define check"):
        Unchecked(seed=0, install_ref="main")
    with pytest.raises(ValueError, match="parameter seed = -1"):  # the shared fields are checked first
        Unchecked(seed=-1, install_ref="main")


def _staged_ablations():
    return sources.parameters_cell(sources.read_text_notebook(ROOT / "staged" / "ablations.md"))


def test_the_staged_ablations_chapter_is_checked_by_its_params():
    """The GPU run's ablations chapter (staged/ablations.md): its parameters cell is the Params' fields, and
    its defaults and smoke profile pass."""
    import yaml

    defaults = _staged_ablations()
    assert sorted(f.name for f in dataclasses.fields(ablations.Params)) == sorted(defaults)
    assert ablations.Params.of(defaults).record() == defaults
    smoke = yaml.safe_load((ROOT / "staged" / "smoke.yaml").read_text())["ablations"]
    ablations.Params(**{**defaults, **smoke})
    text = (ROOT / "staged" / "ablations.md").read_text()
    assert text.count("ablation_findings.Params.of(globals())") == 1 and "require(" not in text
    for name in defaults:  # every parameter has a check that names it
        with pytest.raises(ValueError, match=f"parameter {name} = "):
            ablations.Params(**{**defaults, name: b"x"})


@pytest.mark.parametrize("backend, steps, seconds", [("gpu", 1200, 300.0), ("tpu", 1200, 300.0), ("cpu", 120, 0.0)])
def test_the_ablations_none_defaults_are_resolved_by_backend(backend, steps, seconds):
    params = ablations.Params.of({**_staged_ablations(), "variant_steps": None, "train_seconds": None,
                                  "decode_buckets": None})
    got = params.resolved(backend)
    buckets = list(config.get(params.preset).decode_buckets)  # the preset's ("auto": by this machine's backend)
    assert (got.variant_steps, got.train_seconds, got.decode_buckets) == (steps, seconds, buckets)
    given = dataclasses.replace(params, variant_steps=0, train_seconds=1.5, decode_buckets=[16]).resolved(backend)
    assert (given.variant_steps, given.train_seconds, given.decode_buckets) == (0, 1.5, [16])  # a value given stays


@pytest.mark.parametrize("name, bad", [("variants", {"baseline": {"stages": 1}}), ("variants", {"x": {}}),
                                       ("tgt_lang", "en"), ("train_seconds", -1.0), ("variant_steps", -1),
                                       ("decode_buckets", [])])
def test_the_ablations_ranges(name, bad):
    with pytest.raises(ValueError, match=f"parameter {name} = "):
        ablations.Params(**{**_staged_ablations(), name: bad})
