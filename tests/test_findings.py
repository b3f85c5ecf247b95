"""The book's verdicts are decided by tested code (gmlm_lib.book.findings): one grading rule, one
significance rule, and the PaDIR chapter's findings on small hand-made tables."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT
from gmlm_lib.book import findings
from gmlm_lib.book.findings import padir


@pytest.mark.parametrize("value, target, at_least, want", [
    (2.001, 2.0, True, "met"), (1.999, 2.0, True, "missed"), (2.0, 2.0, True, "met"),
    (0.999, 1.0, False, "met"), (1.001, 1.0, False, "missed"), (1.0, 1.0, False, "met"),
])
def test_a_target_met_or_missed_by_a_thousandth(value, target, at_least, want):
    assert findings.grade(value, target, at_least=at_least) == want


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), None, "2.0", True])
def test_nothing_is_graded_from_a_missing_measurement(bad):
    with pytest.raises(ValueError, match="finite number"):
        findings.grade(bad, 1.0, at_least=True)


@pytest.mark.parametrize("p, want", [(0.049, True), (0.051, False), (0.05, False), (0.0, True), (1.0, False)])
def test_one_significance_rule(p, want):
    assert findings.significant(p) is want


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_a_p_value_outside_its_range_is_refused(p):
    with pytest.raises(ValueError):
        findings.significant(p)


@pytest.mark.parametrize("alpha", [0.0, 1.0, 1.5])
def test_a_significance_level_outside_zero_to_one_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha in \\(0, 1\\)"):
        findings.significant(0.01, alpha)


@pytest.mark.parametrize("interval, bar, at_least, want", [
    ((1.0, 2.0), 1.0, True, "met"), ((1.0, 2.0), 1.001, True, "within noise"), ((0.2, 0.999), 1.0, True, "missed"),
    ((-0.5, 1.0), 1.0, False, "met"), ((0.9, 1.001), 1.0, False, "within noise"), ((1.001, 3.0), 1.0, False, "missed"),
    ((2.0, 2.0), 2.0, True, "met"), ((2.0, 2.0), 2.0, False, "met"),
])
def test_an_interval_is_graded_by_where_it_lies_against_the_bar(interval, bar, at_least, want):
    """met: the whole interval on the right side of the bar (the bar itself counts); missed: the whole of
    it on the wrong side; within noise: it straddles the bar."""
    assert findings.rules.grade_interval(interval, bar, at_least=at_least) == want


def test_a_model_still_improving_or_a_single_run_is_not_graded_met_or_missed():
    rules = findings.rules
    assert rules.grade_interval((5.0, 6.0), 1.0, at_least=True, improving=True) == "not comparable"
    assert rules.grade_interval(None, 1.0, at_least=True) == rules.ONE_RUN == "one run: within noise unknown"
    assert rules.grade_interval(None, 1.0, at_least=True, improving=True) == "not comparable"
    for bad in [(2.0, 1.0), (float("nan"), 1.0), (0.0,), "0 to 1"]:
        with pytest.raises(ValueError):
            rules.grade_interval(bad, 1.0, at_least=True)
    with pytest.raises(ValueError, match="bar must be a finite number"):
        rules.grade_interval((0.0, 1.0), float("inf"), at_least=True)


def test_the_seed_and_sentence_interval_widens_with_either_noise_and_covers_the_mean():
    """Constructed cases: replicas that agree and sentences that do not move the number give an interval of
    that number; spread between seeds alone, or between sentence resamples alone, widens it; 50 replicas
    drawn from N(0, 1) give about the normal interval of their mean (1.96 / sqrt(50) on each side)."""
    import jax
    import numpy as np

    rules = findings.rules
    key = jax.random.key(0)
    assert rules.seed_sentence_interval(np.full((4, 30), 2.5), key) == (2.5, 2.5)
    seeds = np.repeat(np.array([[1.0], [2.0], [3.0], [4.0]]), 30, axis=1)
    low, high = rules.seed_sentence_interval(seeds, key)
    assert 1.0 <= low < 2.5 < high <= 4.0
    sentences = np.tile(np.linspace(2.0, 3.0, 30), (4, 1))
    low, high = rules.seed_sentence_interval(sentences, key)
    assert 2.0 <= low < 2.5 < high <= 3.0
    draws = np.random.default_rng(1).normal(size=50)
    low, high = rules.seed_sentence_interval(np.repeat(draws[:, None], 20, axis=1), key)
    half = 1.96 * draws.std(ddof=1) / np.sqrt(50)
    assert abs((high - low) / 2 - half) < 0.15 * half and low < draws.mean() < high
    assert rules.seed_sentence_interval(seeds, key) == rules.seed_sentence_interval(seeds, key)  # the key decides
    with pytest.raises(ValueError, match="one replica cannot estimate the spread between seeds"):
        rules.seed_sentence_interval(np.ones((1, 30)), key)
    with pytest.raises(ValueError, match="non-finite"):
        rules.seed_sentence_interval(np.array([[1.0, np.nan], [1.0, 2.0]]), key)


def _tables(ar=30.0, dist=29.0, lc=39.0, greedy_ms=(10.0, 30.0), padir_ms=(5.0, 10.0), shallow_ms=None,
            unrolled_ms=None):
    quality = pd.DataFrame([
        dict(model="AR", decoding="greedy", BLEU=ar, BLEU_lc=ar + 1, stutter=0.5),
        dict(model="AR", decoding="beam 4", BLEU=ar + 0.5, BLEU_lc=lc, stutter=0.4),
        dict(model="PaDIR raw", decoding="T=4, #hyp=3", BLEU=dist - 2, BLEU_lc=dist - 1, stutter=1.2),
        dict(model="PaDIR raw", decoding="T=10, #hyp=3", BLEU=dist - 1.5, BLEU_lc=dist - 0.5, stutter=1.0),
        dict(model="PaDIR distilled", decoding="T=4, #hyp=3", BLEU=dist, BLEU_lc=dist + 1, stutter=0.3),
        dict(model="PaDIR distilled", decoding="T=10, #hyp=3", BLEU=dist + 0.2, BLEU_lc=dist + 1.2, stutter=0.2),
    ])
    rows = {"AR greedy": greedy_ms, "AR beam 4": (20.0, 50.0), "PaDIR T=4, #hyp=1": padir_ms,
            "PaDIR T=4, #hyp=3": (6.0, 12.0)}
    if shallow_ms:
        rows["AR deep-shallow greedy"] = shallow_ms
    if unrolled_ms:
        rows["PaDIR T=4, #hyp=1, unrolled"] = unrolled_ms
    speed = pd.DataFrame([dict(system=k, median_ms=m, p99_ms=p) for k, (m, p) in rows.items()]).set_index("system")
    cost = pd.DataFrame([dict(run="AR", wall_min=2.0, fraction_of_peak=0.2),
                         dict(run="PaDIR raw", wall_min=1.0, fraction_of_peak=0.1)]).set_index("run")
    return quality, speed, cost


def _padir(**tables):
    q, s, c = _tables(**tables)
    return padir.findings(q, s, c, eval_steps=(4, 10), eval_hyps=3, beam=4, distill_s=60.0, latency_vs_bound=0.95)


def test_padir_findings_on_a_hand_made_run():
    f = _padir()
    assert (f["ar_bleu"], f["dist_bleu"], f["dist_bleu_long"], f["raw_bleu"]) == (30.0, 29.0, 29.2, 27.0)
    assert f["gap_greedy"] == pytest.approx(1.0) and f["gap_greedy_met"] == "met"  # exactly at the ceiling
    assert f["gap_beam"] == pytest.approx(1.5)
    assert f["ar_beam_bleu_lc"] == 39.0 and f["beam_lc_met"] == "met"
    assert f["fast_label"] == "PaDIR T=4, #hyp=1"
    assert (f["median_speedup"], f["p99_speedup"]) == (2.0, 3.0)
    assert (f["median_target_met"], f["p99_target_met"]) == ("met", "met")
    assert f["speed_word"] == "faster than" and f["stutter_compare"] == "less"
    assert _padir(greedy_ms=(5.1, 10.0))["speed_word"] == "at parity with"
    assert f["total_min"] == pytest.approx(4.0) and f["budget_met"] == "within" and f["mfu"] == pytest.approx(0.15)
    assert math.isnan(f["deep_shallow_speedup"]) and f["deep_shallow_text"].startswith("not measured")
    assert f["target_p99_speedup"] == 3.0


def test_padir_targets_missed_by_a_thousandth():
    f = _padir(dist=28.999, lc=38.999, greedy_ms=(9.995, 29.995))
    assert f["gap_greedy_met"] == "missed" and f["beam_lc_met"] == "missed"
    assert (f["median_target_met"], f["p99_target_met"]) == ("missed", "missed")


@pytest.mark.parametrize("speedup, want", [(1.02, "at parity with"), (0.96, "at parity with"),
                                           (1.06, "faster than"), (0.94, "slower than"),
                                           (1.05, "at parity with"), (0.95, "at parity with"),
                                           (1.0549, "at parity with"), (0.9451, "at parity with"),
                                           (1.0551, "faster than"), (0.9449, "slower than")])
def test_parity_is_called_parity(speedup, want):
    """0.95x to 1.05x, both ends included, read at the two decimals the chapter shows: a shown "1.05x" is
    parity (in floating point ``abs(1.05 - 1.0)`` is above 0.05)."""
    assert padir.speed_word(speedup) == want


def test_the_chapter_shows_speed_ups_with_the_decimals_speed_word_reads():
    """``speed_word`` reads a speed-up at :data:`SPEED_DECIMALS`; the PaDIR chapter must show every glued
    speed-up with that many, or a shown "1.05x" and its word could disagree."""
    text = (ROOT / "notebooks" / "padir.md").read_text()
    shown = re.findall(r"\{glue:text\}`(median_speedup|p99_speedup)(:[^`]*)?`", text)
    assert len(shown) >= 4, "the PaDIR chapter no longer glues its speed-ups: update this test"
    assert {fmt for _, fmt in shown} == {f":.{padir.SPEED_DECIMALS}f"}


def test_the_sizing_sentence_at_exactly_the_budget_and_with_the_update_rate():
    """A plan that takes exactly the budget fits it (factor 1.0); the AR update's measured seconds read in ms."""
    record = dict(asked=dict(ar_steps=1000, padir_steps=500, train_seconds=60.0), factor=1.0, planned_s=60.0,
                  measured={"ar": {"update_s": 0.0123}}, chosen={})
    assert padir.sizing_text(record) == ("the recipe's 1,000 AR and 500 PaDIR updates, within the 60 s budget "
                                         "(60 s planned; an AR update takes 12.3 ms here)")
    over = dict(record, factor=0.5, planned_s=120.0, chosen=dict(ar_steps=500, padir_steps=250))
    assert padir.sizing_text(over) == ("500 AR and 250 PaDIR updates: the recipe's 1,000 AR and 500 PaDIR updates "
                                       "would take 120 s here, over the 60 s budget, so each model trains 0.50 of "
                                       "them; an AR update takes 12.3 ms here")


def test_the_unrolled_row_is_reported_beside_the_graded_one_and_never_graded():
    assert _padir()["unrolled_text"] == "not measured"
    f = _padir(unrolled_ms=(2.5, 5.0), padir_ms=(8.0, 20.0))
    assert f["unrolled_text"] == "4.00x median, 6.00x p99"
    # the graded speed-ups stay those of the looped decoder, which misses here
    assert (f["median_speedup"], f["median_target_met"], f["p99_target_met"]) == (1.25, "missed", "missed")


def test_stutter_compared_with_ar_equal_included():
    q, s, c = _tables()
    kw = dict(eval_steps=(4, 10), eval_hyps=3, beam=4, distill_s=0.0, latency_vs_bound=1.0)
    words = []
    for padir_stutter in (0.49, 0.5, 0.51):  # AR greedy stutters 0.5 words per 100
        q.loc[(q.model == "PaDIR distilled") & (q.decoding == "T=4, #hyp=3"), "stutter"] = padir_stutter
        words.append(padir.findings(q, s, c, **kw)["stutter_compare"])
    assert words == ["less", "no more", "more"]


def test_deep_shallow_speedup_when_it_was_timed():
    f = _padir(shallow_ms=(7.5, 15.0))
    assert f["deep_shallow_speedup"] == pytest.approx(1.5) and f["deep_shallow_text"] == "1.50x its median latency"
    assert f["deep_shallow_met"] == "not comparable" and math.isnan(f["deep_shallow_bleu"])  # its BLEU not scored


@pytest.mark.parametrize("shallow_bleu, shallow_ms, want", [(30.0, (7.5, 15.0), "met"), (30.01, (7.5, 15.0), "missed"),
                                                          (29.0, (4.9, 9.0), "missed"), (29.0, (5.0, 9.0), "met")])
def test_padir_against_deep_shallow_ar_is_graded_on_speed_and_quality(shallow_bleu, shallow_ms, want):
    """The fair AR baseline at batch 1: met when PaDIR T = 4 (29.0 BLEU, 5 ms median) is at least as fast
    as deep-shallow AR greedy and at most 1.0 BLEU below it."""
    q, s, c = _tables(shallow_ms=shallow_ms)
    q = pd.concat([q, pd.DataFrame([dict(model="AR deep-shallow", decoding="greedy", BLEU=shallow_bleu,
                                         BLEU_lc=shallow_bleu + 1, stutter=0.4)])], ignore_index=True)
    f = padir.findings(q, s, c, eval_steps=(4, 10), eval_hyps=3, beam=4, distill_s=60.0, latency_vs_bound=0.95)
    assert f["deep_shallow_bleu"] == shallow_bleu and f["deep_shallow_met"] == want


def test_a_missing_row_is_named():
    q, s, c = _tables()
    with pytest.raises(ValueError, match="distilled PaDIR"):
        padir.findings(q[q.model != "PaDIR distilled"], s, c, eval_steps=(4, 10), eval_hyps=3, beam=4, distill_s=0.0,
                       latency_vs_bound=1.0)
    with pytest.raises(ValueError, match="#hyp=1"):
        padir.findings(q, s.drop(index=["PaDIR T=4, #hyp=1"]), c, eval_steps=(4, 10), eval_hyps=3, beam=4,
                       distill_s=0.0, latency_vs_bound=1.0)


@pytest.mark.parametrize("cost, want", [(1.499, "about what a step costs"), (1.5, "more than a step"),
                                        (3.7, "more than a step")])
def test_a_pass_read_against_an_ar_step(cost, want):
    assert padir.pass_reading(cost) == want


@pytest.mark.parametrize("busy, want", [(0.499, "mostly waited"), (0.5, "mostly computed"), (0.0, "mostly waited"),
                                        (1.0, "mostly computed")])
def test_a_traced_decode_read_by_its_busy_fraction(busy, want):
    assert padir.trace_reading(busy) == want


def test_a_traced_decode_in_words():
    from gmlm_lib.core.devtrace import TraceSummary

    s = TraceSummary(calls=20, wall_ms=4.0, traced_wall_ms=3.9, busy_ms=1.2, ops=400.0, top=(), source="/device:GPU:0")
    assert padir.trace_texts(s) == ("1.2 of 4.0 ms (30%)", "mostly waited")  # against the untraced wall time
    assert padir.trace_texts(None) == ("not measured", "was not traced")


def test_a_translations_time_split_four_ways_and_its_largest_share_named():
    parts = dict(translate_ms=3.6, program_ms=3.0, empty_ms=0.1)
    split = padir.time_split(parts, busy_ms=1.0)
    assert split["host_ms"] == pytest.approx(0.6) and split["call_ms"] == 0.1 and split["busy_ms"] == 1.0
    assert split["wait_ms"] == pytest.approx(1.9) and split["largest"] == "waiting inside the program"
    assert padir.split_text(split) == "device 1.0, waiting 1.9, call 0.1, host 0.6 of 3.6 ms"
    # each share can be the largest: the device's work, the call, the host
    assert padir.time_split(parts, busy_ms=2.5)["largest"] == "the device's work"
    assert padir.time_split(dict(translate_ms=2.5, program_ms=2.0, empty_ms=1.5), 0.2)["largest"] == "the call itself"
    assert padir.time_split(dict(translate_ms=3.6, program_ms=1.0, empty_ms=0.1), 0.5)["largest"] == "the host's side"
    assert split["inputs_ms"] is None  # call_parts of an earlier version: no fresh_ms, no inputs share
    for busy in (0.0, 1.0, 2.5, 9.0):  # the four shares add up to the translation
        got = padir.time_split(parts, busy)
        assert sum(got[k] for k in padir.SPLIT_PARTS if k != "inputs_ms") == pytest.approx(3.6)
    # fastest calls against a mean busy time (an upper bound on a CPU): each share capped by what is left
    noisy = padir.time_split(dict(translate_ms=2.9, program_ms=3.0, empty_ms=0.1), busy_ms=3.2)
    assert noisy["host_ms"] == 0.0 and noisy["busy_ms"] == pytest.approx(2.8) and noisy["wait_ms"] == 0.0
    assert noisy["largest"] == "the device's work"
    assert padir.time_split(dict(translate_ms=1.0, program_ms=0.5, empty_ms=0.8), 0.3)["call_ms"] == 0.5
    untraced = padir.time_split(parts, busy_ms=None)
    assert untraced["busy_ms"] is None and untraced["wait_ms"] is None and untraced["largest"] == "not traced"
    assert padir.split_text(untraced) == "program 3.0, host 0.6 of 3.6 ms"
    assert padir.split_texts(split) == (padir.split_text(split), "waiting inside the program")
    assert padir.split_texts(None) == ("not measured", "not measured")
    table = padir.split_table({"PaDIR": split, "AR": untraced})
    assert list(table.columns) == [*padir.SPLIT_COLUMNS.values(), "largest share"]
    assert table.loc["PaDIR", "waiting in program"] == pytest.approx(1.9)
    assert math.isnan(table.loc["AR", "device busy"]) and table.loc["AR", "largest share"] == "not traced"


def test_new_input_buffers_are_a_share_of_their_own():
    """fresh_ms (the decoder on new input buffers, as translate_one calls it) splits the host's side:
    what new buffers cost (on a GPU: their copy and any CUDA graph re-recorded) apart from Python's part."""
    parts = dict(translate_ms=3.6, fresh_ms=3.3, program_ms=1.3, empty_ms=0.1)
    split = padir.time_split(parts, busy_ms=1.0)
    assert split["host_ms"] == pytest.approx(0.3) and split["inputs_ms"] == pytest.approx(2.0)
    assert split["wait_ms"] == pytest.approx(0.2) and split["largest"] == "new input buffers"
    assert padir.split_text(split) == "device 1.0, waiting 0.2, call 0.1, inputs 2.0, host 0.3 of 3.6 ms"
    for busy in (0.0, 1.0, 9.0):  # the five shares add up to the translation
        got = padir.time_split(parts, busy)
        assert sum(got[k] or 0.0 for k in padir.SPLIT_PARTS) == pytest.approx(3.6)
    assert padir.split_text(padir.time_split(parts, None)) == "program 1.3, inputs 2.0, host 0.3 of 3.6 ms"
    # noise: new buffers measured faster than the same ones, or slower than the whole translation
    same = padir.time_split(dict(parts, fresh_ms=1.25), busy_ms=1.0)
    assert same["inputs_ms"] == 0.0 and same["host_ms"] == pytest.approx(2.35)
    over = padir.time_split(dict(parts, fresh_ms=3.7), busy_ms=1.0)
    assert over["host_ms"] == 0.0 and over["inputs_ms"] == pytest.approx(2.3)
    earlier = padir.time_split({k: v for k, v in parts.items() if k != "fresh_ms"}, 1.0)
    table = padir.split_table({"PaDIR": split, "earlier": earlier})
    assert table.loc["PaDIR", "new inputs"] == pytest.approx(2.0) and math.isnan(table.loc["earlier", "new inputs"])
    with pytest.raises(ValueError, match="fresh_ms must be a finite number"):
        padir.time_split(dict(parts, fresh_ms=-1.0), 1.0)


@pytest.mark.parametrize("parts, busy, words", [
    (dict(translate_ms=3.6, program_ms=3.0), 1.0, "lacks \\['empty_ms'\\]"),
    (dict(translate_ms=3.6, program_ms=-3.0, empty_ms=0.1), 1.0, "program_ms must be a finite number"),
    (dict(translate_ms=float("nan"), program_ms=3.0, empty_ms=0.1), 1.0, "translate_ms must be a finite number"),
    (dict(translate_ms=3.6, program_ms=3.0, empty_ms=0.1), float("inf"), "busy_ms must be a finite number"),
    (dict(translate_ms=3.6, program_ms=3.0, empty_ms=True), 1.0, "empty_ms must be a finite number"),
])
def test_a_time_split_refuses_a_missing_or_impossible_time(parts, busy, words):
    with pytest.raises(ValueError, match=words):
        padir.time_split(parts, busy)
    with pytest.raises(ValueError, match="no system"):
        padir.split_table({})


@pytest.mark.parametrize("bad", [-0.1, 1.2, float("nan")])
def test_a_busy_fraction_is_between_zero_and_one(bad):
    with pytest.raises(ValueError, match="from 0 to 1"):
        padir.trace_reading(bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_pass_cost_must_be_positive(bad):
    with pytest.raises(ValueError, match="positive number"):
        padir.pass_reading(bad)
    with pytest.raises(ValueError, match="positive number"):
        padir.speed_word(bad)
    assert padir.pass_reading(0.5) == "about what a step costs"  # a pass cheaper than a step is a cost too


def test_the_box_grades_t4_wherever_it_is_in_the_steps_and_else_the_first():
    q, s, c = _tables()
    f = padir.findings(q, s, c, eval_steps=(10, 4), eval_hyps=3, beam=4, distill_s=0.0, latency_vs_bound=1.0)
    assert (f["dist_bleu"], f["dist_bleu_long"]) == (29.0, 29.2)
    # without T = 4: the first T evaluated is graded, and the speed row of the fewest passes timed
    q = q.assign(decoding=q.decoding.str.replace("T=4,", "T=5,"))
    s = s.rename(index={"PaDIR T=4, #hyp=1": "PaDIR T=5, #hyp=1", "PaDIR T=4, #hyp=3": "PaDIR T=9, #hyp=1"})
    s = s.loc[["AR greedy", "PaDIR T=9, #hyp=1", "PaDIR T=5, #hyp=1"]]
    f = padir.findings(q, s, c, eval_steps=(5, 10), eval_hyps=3, beam=4, distill_s=0.0, latency_vs_bound=1.0)
    assert (f["dist_bleu"], f["raw_bleu"], f["fast_label"], f["median_speedup"]) == (29.0, 27.0, "PaDIR T=5, #hyp=1",
                                                                                      2.0)


def test_the_training_table_shows_each_record_and_leaves_a_missing_field_missing():
    ar = dict(steps=3000, final_loss=1.234567, wall_s=61.5, tokens_per_s=512345.6, parameters=7_600_000, commit="x")
    table = padir.training_table({"AR teacher": ar, "PaDIR raw": {k: v for k, v in ar.items() if k != "parameters"}})
    assert list(table.columns) == list(padir.TRAINING_COLUMNS.values()) == list(padir.TRAINING_FORMATS)
    assert table.loc["AR teacher", "final loss (nats)"] == 1.234567 and table.loc["AR teacher", "updates"] == 3000
    assert math.isnan(table.loc["PaDIR raw", "parameters"])
    from gmlm_lib.core.tables import present

    html = present(table, formats=padir.TRAINING_FORMATS).to_html()  # the formats are valid for present
    assert "1.235" in html and "7,600,000" in html and "61.5 s" in html and "1.234567" not in html
    with pytest.raises(ValueError, match="no training record"):
        padir.training_table({})


def test_the_settings_table_shows_every_setting_but_the_folders_as_a_reader_reads_it():
    from gmlm_lib.mt import config

    exp = config.get("multi30k_gpu", dict(latency_sentences=0, test_sentences=50, run_root="/tmp/x", data_dir="/data"))
    table = padir.settings_table(exp)
    shown = [f.name for f in dataclasses.fields(exp) if f.name not in padir.SETTINGS_LEFT_OUT]
    assert list(table.index) == shown and table.index.name == "setting"
    assert set(padir.SETTINGS_LEFT_OUT) == {"data_dir", "run_root"}
    assert (table["latency_sentences"], table["test_sentences"]) == ("all", "50")  # 0 sentences: the whole split
    assert (table["eval_steps"], table["train_files"], table["layers"]) == ("4, 10", "none", str(exp.layers))
    with pytest.raises(TypeError, match="settings_table: exp must be"):
        padir.settings_table(dataclasses.asdict(exp))


def test_selection_needs_a_validated_model():
    with pytest.raises(ValueError, match="selection: no validated model"):
        padir.selection({})



# --- the PaDIR box's verdicts from every replica (issue 125, item 2) ---------------------------------------

def _samples(greedy, dist, beam_lc=40.0, shallow=None, seeds=4, spread=0.3, resamples=200, seed=0):
    """Constructed (seeds, resamples) BLEU arrays around the given means: replica offsets of ``spread`` and
    sentence noise of 0.2 BLEU."""
    rng = np.random.default_rng(seed)

    def around(mean):
        return mean + spread * rng.standard_normal((seeds, 1)) + 0.2 * rng.standard_normal((seeds, resamples))

    out = {("AR", "greedy"): dict(BLEU=around(greedy), BLEU_lc=around(greedy + 3)),
           ("AR", "beam 4"): dict(BLEU=around(beam_lc - 3), BLEU_lc=around(beam_lc)),
           ("PaDIR distilled", "T=4, #hyp=3"): dict(BLEU=around(dist), BLEU_lc=around(dist + 3))}
    if shallow is not None:
        out[("AR deep-shallow", "greedy")] = dict(BLEU=around(shallow), BLEU_lc=around(shallow + 3))
    return out


def _graded(samples, **kw):
    import jax

    return padir.graded(samples, eval_steps=(4, 10), eval_hyps=3, beam=4, key=jax.random.key(0), **kw)


@pytest.mark.parametrize("dist, verdict", [(35.6, "met"), (33.0, "missed"), (35.0, "within noise")])
def test_graded_reads_the_gap_interval_against_the_bar(dist, verdict):
    got = _graded(_samples(36.0, dist))
    assert got["seeds"] == 4 and got["gap_greedy_met"] == verdict
    low, high = (float(x) for x in got["gap_greedy_interval"].split(" to "))
    assert low < 36.0 - dist < high  # the interval holds the constructed gap
    assert (high <= 1.0) == (verdict == "met") and (low > 1.0) == (verdict == "missed")


def test_graded_widens_with_the_spread_between_seeds():
    narrow = _graded(_samples(36.0, 35.4, spread=0.0))["gap_greedy_interval"]
    wide = _graded(_samples(36.0, 35.4, spread=5.0))["gap_greedy_interval"]
    width = [float(b) - float(a) for a, b in (t.split(" to ") for t in (narrow, wide))]
    assert width[1] > 2 * width[0]


def test_graded_with_one_replica_or_an_improving_model():
    one = _graded(_samples(36.0, 35.6, seeds=1))
    assert one["seeds"] == 1 and one["gap_greedy_interval"] == "one run" and one["gap_greedy_met"] == findings.rules.ONE_RUN
    improving = _graded(_samples(36.0, 35.6), improving=["PaDIR distilled"])
    assert improving["gap_greedy_met"] == "not comparable" and improving["beam_lc_met"] != "not comparable"
    assert _graded(_samples(36.0, 35.6), improving=["AR"])["beam_lc_met"] == "not comparable"


def test_graded_deep_shallow_needs_speed_and_quality():
    fast_close = _graded(_samples(36.0, 35.6, shallow=35.8), deep_shallow_speedup=1.4)
    assert fast_close["deep_shallow_met"] == "met" and "deep_shallow_gap_interval" in fast_close
    assert _graded(_samples(36.0, 35.6, shallow=35.8), deep_shallow_speedup=0.9)["deep_shallow_met"] == "missed"
    assert _graded(_samples(36.0, 33.0, shallow=36.5), deep_shallow_speedup=1.4)["deep_shallow_met"] == "missed"
    assert "deep_shallow_met" not in _graded(_samples(36.0, 35.6))
    with pytest.raises(ValueError, match="no resampled BLEU"):
        _graded({k: v for k, v in _samples(36.0, 35.6).items() if k[0] != "AR" or k[1] != "greedy"})


def test_the_quality_table_shows_the_seed_spread_only_where_there_are_seeds():
    """A lone run (the CPU preset's one seed) has no BLEU sd column, and its table is shown all the same:
    the chapter's full CPU run once stopped here because the table's labels named that column."""
    rows = [dict(model="AR", decoding="greedy", replica=r, BLEU=36.0 + r, BLEU_lc=37.0, chrF=60.0, stutter=0.2)
            for r in range(2)]
    two = padir.present_quality(padir.replica_mean(pd.DataFrame(rows))).to_html()
    one = padir.present_quality(padir.replica_mean(pd.DataFrame(rows[:1]))).to_html()
    assert "BLEU sd (seeds)" in two and "0.71" in two and "36.5" in two
    assert "BLEU sd" not in one and "BLEU lowercased" in one and "36.0" in one and "stutter /100 words" in one


def test_replica_mean_averages_each_system_over_its_replicas():
    rows = [dict(model=m, decoding=d, replica=r, BLEU=b + r, BLEU_lc=b + 3, chrF=50.0, stutter=0.1 * r)
            for m, d, b in (("AR", "greedy", 36.0), ("PaDIR distilled", "T=4, #hyp=3", 35.0)) for r in range(3)]
    table = padir.replica_mean(pd.DataFrame(rows))
    assert list(table["model"]) == ["AR", "PaDIR distilled"]
    assert table["BLEU"].tolist() == [37.0, 36.0] and table["BLEU_sd"].tolist() == [1.0, 1.0]
    assert table["stutter"].tolist() == pytest.approx([0.1, 0.1])
    one = padir.replica_mean(pd.DataFrame([r for r in rows if r["replica"] == 0]))
    assert "BLEU_sd" not in one and one["BLEU"].tolist() == [36.0, 35.0]
    with pytest.raises(ValueError, match="missing"):
        padir.replica_mean(pd.DataFrame(rows).drop(columns="replica"))


def test_replica_speed_text_gives_the_range_over_replicas():
    assert padir.replica_speed_text([1.61, 1.48, 1.55, 1.5]) == "1.48x to 1.61x over 4 replicas"
    assert padir.replica_speed_text([1.523]) == "1.52x (one replica)"
    for bad in ([], [1.2, float("nan")], [0.0]):
        with pytest.raises(ValueError, match="speedups"):
            padir.replica_speed_text(bad)
