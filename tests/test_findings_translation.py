"""The translation chapters' verdicts (gmlm_lib.book.findings: stutter, dependency_decoding, ablations)
on small hand-made tables: each bar met and missed by a hair, p = 0.049 against 0.051, a zero difference
never significant, and nothing graded from a missing row."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from gmlm_lib.book import findings
from gmlm_lib.book.findings import ablations, dependency_decoding, padir, reuse, stutter


# --- the one significance rule ------------------------------------------------------------------------

@pytest.mark.parametrize("difference, p, want", [
    (0.3, 0.049, 1), (0.3, 0.051, 0), (-0.3, 0.049, -1), (-0.3, 0.051, 0),
    (0.0, 0.001, 0),  # SacreBLEU gives identical systems p = 1/(n+1): a zero difference is never significant
])
def test_compare_is_the_one_rule(difference, p, want):
    assert findings.compare(difference, p) == want


def test_compare_refuses_a_missing_difference():
    with pytest.raises(ValueError, match="difference"):
        findings.compare(float("nan"), 0.01)


@pytest.mark.parametrize("items, want", [([], "none"), ([4], "4"), ([2, 4], "2 and 4"), ([1, 2, 8], "1, 2 and 8"),
                                         ([0.3, 0.5], "0.3 and 0.5")])
def test_listed(items, want):
    assert findings.listed(items) == want


# --- dependency_decoding ------------------------------------------------------------------------------

def _frontier(dep=(30.0, 31.0), p_dep=(0.5, 0.049), mp=(29.0, 30.0), p_mp=(0.01, 0.3)):
    rows = []
    for i, T in enumerate((2, 4)):
        rows += [dict(T=T, strategy="plain PaDIR", BLEU=30.0 if T == 4 else 29.5, **{"p vs plain": np.nan},
                      **{"median ms": 10.0}),
                 dict(T=T, strategy="Mask-Predict", BLEU=mp[i], **{"p vs plain": p_mp[i]}, **{"median ms": 11.0}),
                 dict(T=T, strategy="dependency-aware", BLEU=dep[i], **{"p vs plain": p_dep[i]}, **{"median ms": 12.0})]
    return pd.DataFrame(rows).set_index(["T", "strategy"])


@pytest.mark.parametrize("dep4, p4, want", [
    (31.001, 0.049, "met"), (30.999, 0.049, "missed"), (31.5, 0.051, "missed"), (31.5, 0.05, "missed"),
])
def test_the_translation_bar_met_or_missed_by_a_hair(dep4, p4, want):
    got = dependency_decoding.translation(_frontier(dep=(30.0, dep4), p_dep=(0.5, p4)))
    assert got["gain_met"] == want
    assert math.isclose(got["dep_gain_bleu"], dep4 - 30.0) and got["dep_p_value"] == p4


def test_the_frontier_verdicts_name_each_T():
    got = dependency_decoding.translation(_frontier(dep=(30.0, 31.5), p_dep=(0.5, 0.01), mp=(28.0, 29.0),
                                                    p_mp=(0.01, 0.3)))
    assert (got["dep_better_at"], got["dep_worse_at"]) == ("4", "no T")
    assert (got["mp_better_at"], got["mp_worse_at"]) == ("no T", "2")
    assert got["vs_maskpredict"] == "not below" and got["ms_dep"] == 12.0
    assert dependency_decoding.translation(_frontier(dep=(30.0, 29.9)))["vs_maskpredict"] == "below"
    assert dependency_decoding.translation(_frontier(dep=(30.0, 30.0)))["vs_maskpredict"] == "not below"  # a tie
    for broken in (_frontier().drop(columns="median ms"), _frontier().reset_index().set_index(["strategy", "T"])):
        with pytest.raises(ValueError, match="indexed by \\(T, strategy\\)"):
            dependency_decoding.translation(broken)


def test_the_testbed_ratio_measured_and_censored():
    at = pd.Series({"independent parallel": 100.0, "dependency-aware": 10.001})
    assert dependency_decoding.ising(at, 1000)["ising_ratio_met"] == "missed"
    at["dependency-aware"] = 9.999
    got = dependency_decoding.ising(at, 1000)
    assert got["ising_ratio_met"] == "met" and got["ising_ratio_kind"] == "measured"
    censored = dependency_decoding.ising(pd.Series({"independent parallel": np.inf, "dependency-aware": 50.0}), 1000)
    assert censored["ising_ratio_kind"] == "a lower bound" and censored["ising_pass_ratio"] == 20.0
    for bad in (np.nan, 0.0):
        with pytest.raises(ValueError, match="median passes"):
            dependency_decoding.ising(pd.Series({"independent parallel": 5.0, "dependency-aware": bad}), 1000)
    half = dependency_decoding.ising(pd.Series({"independent parallel": 5.0, "dependency-aware": 0.5}), 1000)
    assert half["ising_pass_ratio"] == 10.0  # fewer than one pass at the median is a measurement, not an error


# --- ablations ----------------------------------------------------------------------------------------

def _ablation_table(**rows):
    base = {"baseline": (20.0, np.nan)}
    data = {**base, **rows}
    return pd.DataFrame({"BLEU": {k: v[0] for k, v in data.items()},
                         "p vs baseline": {k: v[1] for k, v in data.items()},
                         "stutter /100 words": {k: 1.0 for k in data}})


@pytest.mark.parametrize("bleu, p, want", [
    (19.0, 0.049, "the baseline's choice is better"), (19.0, 0.051, "no significant difference"),
    (21.0, 0.049, "the variant is better here"), (20.0, 0.001, "no significant difference"),
])
def test_a_choice_against_its_ablation(bleu, p, want):
    assert ablations.choice_verdict(_ablation_table(**{"1 training stage": (bleu, p)}), "1 training stage") == want


@pytest.mark.parametrize("calls, want", [
    ({"u3": (19.0, 0.01), "u5": (18.0, 0.01)}, "our numbers agree"),
    ({"u3": (19.0, 0.01), "u5": (19.5, 0.2)}, "our numbers partly agree"),
    ({"u3": (21.0, 0.01), "u5": (18.0, 0.01)}, "our numbers disagree"),
    ({"u3": (19.9, 0.3), "u5": (20.1, 0.4)}, "the test set cannot tell the rates apart"),
    ({}, "not tested"),
])
def test_the_masking_rule(calls, want):
    rates = {"u3": 0.3, "u5": 0.5}
    got = ablations.rates(_ablation_table(**calls), 0.1, {k: rates[k] for k in calls})
    assert got["unmask_verdict"] == want


def test_the_rates_line_and_lists():
    got = ablations.rates(_ablation_table(u3=(21.0, 0.01), u5=(18.0, 0.01)), 0.1, {"u3": 0.3, "u5": 0.5})
    assert got["unmask_less_better"] == "0.3" and got["unmask_less_worse"] == "0.5" and got["unmask_best"] == "0.3"
    assert got["unmask_line"].startswith("unmasking 0.1 (masking 90%): 20.0; unmasking 0.3 (masking 70%): 21.0 (p = 0.010)")


def test_findings_grade_the_budget_and_count_supported_choices():
    table = _ablation_table(**{"1 training stage": (19.0, 0.01), "no positional attention": (19.0, 0.2),
                               "no distillation": (18.0, 0.001), "u3": (19.0, 0.01)})
    cells = pd.DataFrame({"T": [1, 4, 4], "hyps": [1, 1, 3], "BLEU": [15.0, 20.0, 20.5], "median ms": [5.0, 9.0, 12.0]})
    kw = dict(base_rate=0.1, variant_rates={"u3": 0.3})
    got = ablations.findings(table, cells, train_min=100.0, eval_min=20.0, **kw)
    assert got["budget_met"] == "met" and got["remask_verdict"] == "not run" and math.isnan(got["remask_bleu"])
    assert (got["total_min"], got["total_train_min"], got["eval_min"]) == (120.0, 100.0, 20.0)
    assert got["dist_stutter"] == 1.0 and math.isnan(got["remask_stutter"]) and "stage_stutter" not in got
    assert got["choices_supported"] == 3  # stage, distillation, and the masking rule; not positional attention
    assert (got["grid_best_T"], got["grid_best_hyps"], got["grid_t1_bleu"]) == (4, 3, 15.0)
    assert ablations.findings(table, cells, train_min=100.0, eval_min=20.001, **kw)["budget_met"] == "missed"
    with pytest.raises(ValueError, match="'baseline' row"):
        ablations.findings(table.drop(index="baseline"), cells, train_min=1.0, eval_min=1.0, **kw)
    for call in (lambda t: ablations.choice_verdict(t, "u3"), lambda t: ablations.rates(t, **kw)):
        with pytest.raises(ValueError, match="'baseline' row and the columns"):
            call(table.drop(index="baseline"))
        with pytest.raises(ValueError, match=r"missing columns \['p vs baseline'\]"):
            call(table.drop(columns="p vs baseline"))


# --- stutter ------------------------------------------------------------------------------------------

def _summary(ci_avg, ci_max, auroc=0.6):
    return pd.DataFrame({"aggregate": ["avg", "max"], "AUROC 95% CI": [ci_avg, ci_max], "AUROC": [auroc, auroc],
                         "stutter mean": [0.2, 0.3], "other mean": [0.1, 0.2]})


@pytest.mark.parametrize("cis, want", [
    (((0.501, 0.7), (0.51, 0.8)), "supported"),
    (((0.499, 0.7), (0.51, 0.8)), "not supported"),
    (((0.3, 0.499), (0.2, 0.45)), "contradicted"),
    (((0.3, 0.501), (0.2, 0.45)), "not supported"),
])
def test_a_hypothesis_from_its_intervals(cis, want):
    tables = {"tv": _summary(*cis), "cos": _summary((0.6, 0.7), (0.6, 0.7))}
    if want == "contradicted":
        tables["cos"] = _summary((0.1, 0.2), (0.1, 0.2))
    assert stutter.hypothesis(tables, ("tv", "cos")) == want


def test_a_hypothesis_whose_statistics_point_opposite_ways_is_mixed():
    """Hypothesis 1 as the committed stutter run measured it: forward self-attention larger between stutter
    pairs (AUROC interval [0.625, 0.687]), backward smaller ([0.374, 0.456]): mixed, not "not supported"."""
    tables = {"self_fwd": _summary((0.625, 0.687), (0.61, 0.70)), "self_bwd": _summary((0.374, 0.456), (0.35, 0.47))}
    assert stutter.hypothesis(tables, stutter.HYPOTHESES["h1"]) == "mixed"
    tables["self_bwd"] = _summary((0.374, 0.51), (0.35, 0.47))  # one interval reaches chance: not all below
    assert stutter.hypothesis(tables, stutter.HYPOTHESES["h1"]) == "not supported"


@pytest.mark.parametrize("cis", [((0.5, 0.7), (0.51, 0.8)), ((0.3, 0.5), (0.2, 0.45))])
def test_an_interval_touching_chance_does_not_exclude_it(cis):
    assert stutter.hypothesis({"tv": _summary(*cis)}, ("tv",)) == "not supported"


def test_a_summary_without_its_row_or_interval_is_named():
    for broken in (_summary((0.6, 0.7), (0.6, 0.7)).drop(columns="AUROC 95% CI"),
                   _summary((0.6, 0.7), (0.6, 0.7)).iloc[:1]):
        with pytest.raises(KeyError, match="'AUROC 95% CI' column"):
            stutter.hypothesis({"tv": broken}, ("tv",))


def test_stutter_findings_read_the_steps_and_refuse_a_missing_model():
    tables = {s: _summary((0.6, 0.7), (0.6, 0.7)) for s in ("self_fwd", "self_bwd", "tv", "cos")}
    by_step = pd.DataFrame({"model": ["padir_distilled"] * 2 + ["padir_raw"] * 2, "step": [1, 2, 1, 2],
                            "word_stutter": [5.0, 2.0, 8.0, 4.0], "word_stutter_after_drop": [1.0, 0.5, 2.0, 1.0]})
    got = stutter.findings(tables, by_step, analysed="padir_distilled")
    assert (got["h1"], got["h2"]) == ("supported", "supported")
    assert (got["st1"], got["stT"], got["st1_raw"], got["stT_raw"], got["stT_drop"]) == (5.0, 2.0, 8.0, 4.0, 0.5)
    assert got["self_bwd_s"] == 0.2 and got["auc_cos"] == 0.6
    with pytest.raises(KeyError, match="by_step has no rows of the model 'padir_raw'"):
        stutter.findings(tables, by_step[by_step.model != "padir_raw"], analysed="padir_distilled")
    with pytest.raises(KeyError, match="no summary table for the statistic 'tv'; have"):
        stutter.hypothesis({"cos": _summary((0.6, 0.7), (0.6, 0.7))}, ("tv", "cos"))


@pytest.mark.parametrize("same, want", [
    ({"padir_distilled": [True, True], "padir_raw": [True]}, (3, 3, "identical")),
    ({"padir_distilled": [True, False], "padir_raw": [True]}, (2, 3, "not identical")),  # one sentence differs
    ({}, (0, 0, "not checked")),  # T > max_steps: nothing compared
    ({"padir_distilled": []}, (0, 0, "not checked")),
])
def test_the_pass_rows_agree_with_the_decode_sentence_for_sentence(same, want):
    got = stutter.agreement(same)
    assert (got["agree_identical"], got["agree_total"], got["agree_word"]) == want


# --- dependency_decoding's thresholds -----------------------------------------------------------------

def test_the_thresholds_of_highest_val_bleu_win():
    tuning = pd.DataFrame(dict(confidence=[0.3, 0.3, 0.5, 0.5], dependency=[0.8, 0.9, 0.8, 0.9],
                               BLEU=[30.0, 30.2, 30.201, 29.0]))
    got = dependency_decoding.thresholds(tuning, [0.3, 0.5], [0.8, 0.9], 300)
    assert (got["tuned_confidence"], got["tuned_dependency"]) == (0.5, 0.8)  # by 0.001 BLEU
    assert (got["tuned_word"], got["tuned_candidates"], got["tuned_sentences"]) == ("best on the val split", 4, 300)
    tie = tuning.assign(BLEU=[31.0, 30.0, 31.0, 29.0])
    assert dependency_decoding.thresholds(tie, [0.3, 0.5], [0.8, 0.9], 300)["tuned_confidence"] == 0.3  # first wins


def test_one_given_pair_is_used_untuned_and_several_need_a_table():
    got = dependency_decoding.thresholds(None, [0.7], [0.95], 300)
    assert got == dict(tuned_confidence=0.7, tuned_dependency=0.95, tuned_word="given", tuned_candidates=1,
                       tuned_sentences=0)
    with pytest.raises(ValueError, match="4 threshold pairs and no tuning table"):
        dependency_decoding.thresholds(None, [0.3, 0.5], [0.8, 0.9], 300)
    with pytest.raises(ValueError, match="BLEU that is not NaN"):
        dependency_decoding.thresholds(pd.DataFrame(dict(confidence=[0.3], dependency=[0.8], BLEU=[math.nan])),
                                       [0.3], [0.8], 300)
    with pytest.raises(ValueError, match=r"missing columns \['BLEU'\]"):
        dependency_decoding.thresholds(pd.DataFrame(dict(confidence=[0.3], dependency=[0.8])), [0.3], [0.8], 300)


@pytest.mark.parametrize("padir_run, complete_before, want", [
    ("runs/padir/en-de", True, "reused from the PaDIR chapter's run folder"),
    ("runs/padir/en-de", False, "trained in this run by the PaDIR chapter's pipeline"),
    ("", False, "stand-in"),
])
def test_the_models_origin_says_reused_or_trained_here(padir_run, complete_before, want):
    """A chapter that opened a finished PaDIR run folder says it reused that chapter's model; one that had to
    build the folder says its models were trained again here; the smoke stand-in says it is one. Each wording
    holds only its own case."""
    words = reuse.origin(padir_run, complete_before)
    assert want in words
    others = {"reused from the PaDIR chapter's run folder", "trained in this run by the PaDIR chapter's pipeline", "stand-in"} - {want}
    assert not any(o in words for o in others)


def test_the_models_origin_refuses_what_cannot_be():
    with pytest.raises(ValueError, match="empty padir_run"):
        reuse.origin("", True)
    with pytest.raises(TypeError, match="complete_before must be True or False"):
        reuse.origin("runs/padir/en-de", 1)
    with pytest.raises(TypeError, match="padir_run must be a string"):
        reuse.origin(None, False)


def test_the_host_output_reads_as_the_way_taken_and_both_times():
    text = padir.host_output_text(dict(choice="pinned", ms=dict(copy=0.5, pinned=0.25), error=None))
    assert text.startswith("written into pinned host memory") and "0.250 ms" in text and "0.500 ms" in text
    text = padir.host_output_text(dict(choice="copy", ms=dict(copy=0.5), error="the device has no 'pinned_host' memory"))
    assert text == "copied back: pinned host memory was not used (the device has no 'pinned_host' memory)"
    for bad in (None, dict(choice="disk", ms=dict(copy=1.0)), dict(choice="pinned", ms=dict(copy=1.0)),
                dict(choice="copy", ms=dict(copy=float("nan")))):
        with pytest.raises(ValueError, match="choice must be what decode_costs.choose_host_output returned"):
            padir.host_output_text(bad)


def test_the_ablations_table_shows_the_seed_spread_only_where_there_are_seeds():
    """A lone replica (the CPU preset's one seed) has no seed columns, and its table is shown all the same:
    the chapter's full CPU run once stopped here because the table's formats named those columns."""
    rows = {"baseline": [35.0, 0.9, 0.0, np.nan, 35.4, 0.61, 60.0, 3.0, 7.0, 9.0],
            "no distillation": [33.5, 0.9, -1.5, 0.001, 33.0, 1.10, 58.0, 3.1, 7.2, 9.5]}
    columns = ["BLEU", "± 95%", "Δ BLEU", "p vs baseline", "BLEU, seeds", "sd (seeds)", "chrF", "stutter /100 words",
               "median ms", "p99 ms"]
    two = pd.DataFrame.from_dict(rows, orient="index", columns=columns).rename_axis("variant")
    one = two.drop(columns=list(ablations.SEED_COLUMNS))
    shown_two, shown_one = ablations.present_table(two).to_html(), ablations.present_table(one).to_html()
    assert "sd (seeds)" in shown_two and "0.61" in shown_two and "-1.5" in shown_two
    assert "seeds" not in shown_one and "35.0" in shown_one and "60.0" in shown_one and "-1.5" in shown_one
    with pytest.raises(KeyError, match="formats names column 'p99 ms'"):  # the others are still checked
        ablations.present_table(one.drop(columns=["p99 ms"]))
