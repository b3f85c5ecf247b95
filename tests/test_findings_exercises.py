"""The exercises of the translation chapters (padir, stutter, ablations, dependency_decoding): the tables and
glued words of their solutions on small hand-made inputs whose answers are known, and Holm's correction
against closed testing by brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from gmlm_lib.book.findings import ablations, padir, rules, stutter
from gmlm_lib.book.findings import dependency_decoding as findings_dd


# --- padir: speed and quality by length ------------------------------------------------------------------

def test_length_groups_are_quartiles_of_equal_size_shortest_first():
    lengths = np.array([9, 1, 5, 7, 3, 8, 2, 6])
    assert padir.length_groups(lengths).tolist() == [3, 0, 1, 2, 1, 3, 0, 2]
    assert np.bincount(padir.length_groups(np.arange(10))).tolist() == [3, 2, 3, 2]  # sizes to one sentence


def test_sentences_of_equal_length_fill_every_group():
    group = padir.length_groups(np.full(8, 12))
    assert np.bincount(group).tolist() == [2, 2, 2, 2]
    assert padir.length_groups(np.array([4, 6]), groups=4).tolist() == [0, 1]  # fewer sentences than groups


@pytest.mark.parametrize("lengths, groups", [(np.array([]), 4), (np.array([1.5, 2.0]), 4), (np.array([3, -1]), 4),
                                             (np.array([3, 4]), 0), (np.array([3, 4]), True)])
def test_length_groups_refuse_what_is_not_a_piece_count(lengths, groups):
    with pytest.raises(ValueError, match="length_groups"):
        padir.length_groups(lengths, groups)


def test_the_speed_up_of_each_length_group_is_the_ratio_of_its_medians():
    # AR costs 1 ms a piece and one more step, PaDIR 4 ms whatever the length: the speed-up rises with length
    lengths = np.arange(2, 18)
    ar, pad = (lengths + 1) * 1e-3, np.full(lengths.size, 4e-3)
    table = padir.speedup_by_length(ar, pad, lengths)
    assert list(table.index) == ["group 1", "group 2", "group 3", "group 4", "all"]
    assert table["pieces"].tolist() == ["2-5", "6-9", "10-13", "14-17", "2-17"]
    assert table["sentences"].tolist() == [4, 4, 4, 4, 16]
    assert table.loc["group 1", "ar_ms"] == pytest.approx(4.5)  # median of 3, 4, 5, 6 ms
    assert table.loc["group 4", "speedup"] == pytest.approx(16.5 / 4)
    assert table.loc["all", "speedup"] == pytest.approx(np.median(lengths + 1) / 4)
    found = padir.speedup_length_findings(table, ar, pad, lengths)
    assert found["ex_speedup_short"] == pytest.approx(4.5 / 4) and found["ex_speedup_long"] == pytest.approx(16.5 / 4)
    assert (found["ex_speedup_short_pieces"], found["ex_speedup_long_pieces"]) == ("2-5", "14-17")
    assert found["ex_speedup_tau"] == pytest.approx(1.0) and found["ex_speedup_trend"] == "rises with the length"
    assert found["ex_speedup_corr"] == "Kendall's τ = 1.00, p < 0.001"


def test_a_speed_up_that_does_not_move_with_length_shows_no_trend():
    lengths = np.arange(2, 18)
    ar = np.full(lengths.size, 6e-3)
    found = padir.speedup_length_findings(padir.speedup_by_length(ar, ar / 2, lengths), ar, ar / 2, lengths)
    assert math.isnan(found["ex_speedup_tau"])
    assert found["ex_speedup_trend"] == "shows no significant trend with the length"
    assert found["ex_speedup_corr"].startswith("no correlation is defined")
    # a falling speed-up, significant, reads as falling; with 3 sentences tau = -1 is not (exact p = 1/3)
    falling = padir.speedup_length_findings(padir.speedup_by_length(ar, ar * lengths / 10, lengths), ar,
                                            ar * lengths / 10, lengths)
    assert falling["ex_speedup_trend"] == "falls with the length"
    few = padir.speedup_length_findings(padir.speedup_by_length(ar[:3], ar[:3] * lengths[:3], lengths[:3]), ar[:3],
                                        ar[:3] * lengths[:3], lengths[:3])
    assert few["ex_speedup_tau"] == pytest.approx(-1.0) and few["ex_speedup_p"] == pytest.approx(1 / 3)
    assert few["ex_speedup_trend"].startswith("shows no") and few["ex_speedup_corr"] == "Kendall's τ = -1.00, p = 0.333"


@pytest.mark.parametrize("ar, pad, lengths, words", [
    ([1e-3, 2e-3], [1e-3], [3, 4], "1-D, one entry a sentence"),
    ([1e-3, float("nan")], [1e-3, 1e-3], [3, 4], "not timed"),
    ([1e-3, 0.0], [1e-3, 1e-3], [3, 4], "not timed"),
])
def test_speed_by_length_refuses_times_it_cannot_compare(ar, pad, lengths, words):
    with pytest.raises(ValueError, match=words):
        padir.speedup_by_length(ar, pad, np.array(lengths))


def test_bleu_by_length_scores_each_group_on_its_own_sentences():
    refs = ["a small dog runs .", "the man is here", "two girls play in the big green park today",
            "a woman reads a very long book on the old bench by the river"]
    ar = list(refs)  # AR copies the references: 100 BLEU in every group
    pad = refs[:2] + ["two girls play", "a woman reads a book"]  # PaDIR drops words on the two long ones
    lengths = np.array([len(r.split()) for r in refs])
    table = padir.bleu_by_length(ar, pad, refs, lengths, groups=2)
    assert table["sentences"].tolist() == [2, 2, 4]
    assert table.loc["group 1", "gap"] == pytest.approx(0.0) and table.loc["group 2", "gap"] > 10
    assert table["ar_bleu"].tolist() == pytest.approx([100.0] * 3)
    found = padir.bleu_length_findings(table)
    assert found["ex_gap_wider"] == "the longest" and found["ex_gap_short"] == pytest.approx(0.0)
    swapped = padir.bleu_length_findings(table.assign(gap=[5.0, 1.0, 3.0]))
    assert swapped["ex_gap_wider"] == "the shortest"
    assert padir.bleu_length_findings(table.assign(gap=1.0))["ex_gap_wider"] == "neither"
    with pytest.raises(ValueError, match="one entry a sentence"):
        padir.bleu_by_length(ar, pad[:3], refs, lengths)


# --- Holm's correction -------------------------------------------------------------------------------------

def _closed_testing(ps: dict, alpha: float) -> dict:
    """Brute force: a hypothesis is rejected when every intersection that contains it is rejected by its
    Bonferroni test (some p in the subset below alpha / its size)."""
    names = list(ps)
    subsets = [s for k in range(1, len(names) + 1) for s in itertools.combinations(names, k)]
    return {n: all(min(ps[m] for m in s) < alpha / len(s) for s in subsets if n in s) for n in names}


def test_holm_decides_as_closed_testing_does_on_every_small_family():
    rng = np.random.default_rng(0)
    grid = [0.001, 0.01, 0.0125, 0.016, 0.02, 0.025, 0.03, 0.049, 0.05, 0.2]  # thresholds' neighbours, ties
    checked = 0
    for m in range(1, 6):
        for _ in range(60):
            ps = {f"t{i}": float(rng.choice(grid)) for i in range(m)}
            table = rules.holm(ps)
            assert table["holm"].to_dict() == _closed_testing(ps, rules.ALPHA), ps
            checked += 1
    assert checked == 300


def test_holm_on_a_family_computed_by_hand():
    table = rules.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert list(table.index) == ["d", "a", "c", "b"]
    assert table["threshold"].tolist() == pytest.approx([0.0125, 0.05 / 3, 0.025, 0.05])
    assert table["adjusted"].tolist() == pytest.approx([0.02, 0.03, 0.06, 0.06])
    assert table["holm"].tolist() == [True, True, False, False]  # 0.03 >= 0.025 stops the step-down
    assert table["alone"].tolist() == [True, True, True, True]
    # met and missed by a hair: the first threshold is alpha / m
    assert rules.holm({"x": 0.0249, "y": 0.001})["holm"].tolist() == [True, True]
    assert rules.holm({"x": 0.0251, "y": 0.0251})["holm"].tolist() == [False, False]


@pytest.mark.parametrize("ps", [{}, {"a": float("nan")}, {"a": 1.2}, [0.01]])
def test_holm_refuses_a_family_it_cannot_judge(ps):
    with pytest.raises(ValueError):
        rules.holm(ps)


# --- ablations: the family, and the front --------------------------------------------------------------------

def _ablation_table():
    return pd.DataFrame({"BLEU": [30.0, 28.0, 31.0, 30.0, 29.5, 30.5, 26.0],
                         "p vs baseline": [math.nan, 0.004, 0.02, 0.001, 0.04, 0.3, 0.001],
                         "median ms": [10.0, 10.0, 10.0, 10.0, 9.0, 18.0, 4.0]},
                        index=["baseline", "1 training stage", "no positional attention", "T=10, #hyp=3",
                               "no stutter re-masking", "T=8, #hyp=5", "T=1, #hyp=1"])


def test_the_family_leaves_out_a_row_identical_to_the_baseline_and_corrects_the_rest():
    table = ablations.family(_ablation_table())
    assert "T=10, #hyp=3" not in table.index  # a zero difference tests nothing
    assert list(table.index) == ["T=1, #hyp=1", "1 training stage", "no positional attention", "no stutter re-masking",
                                 "T=8, #hyp=5"]
    assert table["call"].tolist() == ["worse", "worse", "no significant difference", "no significant difference",
                                      "no significant difference"]
    found = ablations.family_findings(table)
    assert found == dict(ex_family_m=5, ex_family_alone=4, ex_family_holm=2,
                         ex_family_lost="no positional attention and no stutter re-masking")


def test_a_family_with_nothing_to_test_is_empty_and_says_so():
    flat = _ablation_table().assign(BLEU=30.0)
    table = ablations.family(flat)
    assert table.empty
    assert ablations.family_findings(table) == dict(ex_family_m=0, ex_family_alone=0, ex_family_holm=0,
                                                    ex_family_lost="none")


def test_the_front_keeps_what_no_other_setting_beats_on_both_counts():
    rows = ["baseline", "no stutter re-masking", "T=8, #hyp=5", "T=1, #hyp=1", "T=10, #hyp=3"]
    table = ablations.front(_ablation_table(), rows)
    # baseline (30, 10 ms) and T=10 (30, 10 ms) tie: neither beats the other, both stay
    assert table["on_front"].to_dict() == {"T=1, #hyp=1": True, "no stutter re-masking": True, "baseline": True,
                                           "T=10, #hyp=3": True, "T=8, #hyp=5": True}
    slower = _ablation_table()
    slower.loc["T=10, #hyp=3", "median ms"] = 10.001  # as good, a hair slower: beaten by the baseline
    table = ablations.front(slower, rows)
    assert not table.loc["T=10, #hyp=3", "on_front"]
    found = ablations.front_findings(table)
    assert found["ex_front_n"] == 4 and found["ex_front_of"] == 5 and found["ex_front_baseline"] == "on"
    assert found["ex_front"] == "T=1, #hyp=1, no stutter re-masking, baseline and T=8, #hyp=5"
    worse = slower.copy()
    worse.loc["baseline", "BLEU"] = 29.0  # below "no stutter re-masking" (29.5) at a higher cost: off the front
    assert ablations.front_findings(ablations.front(worse, rows))["ex_front_baseline"] == "off"


def test_the_front_refuses_an_unknown_or_unmeasured_row():
    with pytest.raises(ValueError, match="unknown"):
        ablations.front(_ablation_table(), ["baseline", "T=99"])
    gap = _ablation_table()
    gap.loc["T=1, #hyp=1", "median ms"] = math.nan
    with pytest.raises(ValueError, match="missing"):
        ablations.front(gap, ["baseline", "T=1, #hyp=1"])


# --- stutter: where, and on which tokens -----------------------------------------------------------------------

def _pairs():
    # two sentences of 6 pairs each (thirds: positions 0-1, 2-3, 4-5); stutter only at the end; the TV of a
    # stutter pair is smaller than that of any other pair in its third, but larger than the start's pairs'
    rows = []
    for s in range(2):
        for pos in range(6):
            stut = pos == 5 - s  # sentence 0: pos 5 (end); sentence 1: pos 4 (end)
            tv = 0.05 if pos < 2 else (0.3 if stut else 0.6)
            rows.append(dict(sentence=s, position=pos, token=7 if stut else 10 + pos, stutter=stut, tv_avg=tv))
    return pd.DataFrame(rows)


def test_stutter_by_third_of_the_output_with_the_signal_within_each_third():
    table = stutter.by_position(_pairs())
    assert list(table.index) == ["start", "middle", "end", "all"]
    assert table["pairs"].tolist() == [4, 4, 4, 12]
    assert table["stutter"].tolist() == [0, 0, 2, 2]
    assert table.loc["end", "stutter_pct"] == pytest.approx(50.0)
    assert table.loc["end", "tv_auroc"] == pytest.approx(1.0)  # within the end, stutter pairs read closer sources
    assert table.loc["all", "tv_auroc"] == pytest.approx(0.6)  # over all, the start's small TVs blur it: 12/20
    assert math.isnan(table.loc["start", "tv_auroc"])  # no stutter pair there
    found = stutter.position_findings(table)
    assert found["ex_pos_most"] == "end" and found["ex_pos_most_pct"] == pytest.approx(50.0)
    assert found["ex_pos_within"] == "not measurable in every third"
    assert found["ex_pos_auc_low"] == found["ex_pos_auc_high"] == pytest.approx(1.0)
    assert found["ex_pos_auc_span"] == "1.000"


def test_the_within_third_verdict_over_three_measurable_thirds():
    table = pd.DataFrame({"pairs": [4, 4, 4, 12], "stutter": [1, 1, 1, 3], "stutter_pct": [25.0] * 4,
                          "tv_auroc": [0.9, 0.501, 0.7, 0.8]}, index=["start", "middle", "end", "all"])
    assert stutter.position_findings(table)["ex_pos_within"] == "above 0.5 in every third"
    assert stutter.position_findings(table)["ex_pos_auc_span"] == "from 0.501 to 0.900"
    table.loc["middle", "tv_auroc"] = 0.5
    assert stutter.position_findings(table)["ex_pos_within"] == "at or below 0.5 in some third"
    none = stutter.position_findings(table.assign(stutter=0))
    assert none["ex_pos_most"] == "none" and none["ex_pos_most_pct"] == 0.0
    undefined = stutter.position_findings(table.assign(tv_auroc=math.nan))
    assert undefined["ex_pos_auc_span"] == "not defined in any third" and math.isnan(undefined["ex_pos_auc_low"])


def test_a_one_pair_sentence_is_in_the_first_third():
    pairs = pd.DataFrame(dict(sentence=[0], position=[0], token=[3], stutter=[True], tv_avg=[0.1]))
    assert stutter.by_position(pairs)["pairs"].tolist() == [1, 0, 0, 1]
    with pytest.raises(ValueError, match="no adjacent pair"):
        stutter.by_position(pairs.iloc[:0])
    with pytest.raises(ValueError, match="tv_avg"):
        stutter.by_position(pairs.drop(columns="tv_avg"))


def test_the_tokens_that_stutter_most_with_their_share_and_rate():
    pairs = pd.DataFrame(dict(token=[5, 5, 5, 5, 9, 9, 2, 2, 2], stutter=[True, True, True, False, True, False,
                                                                          False, False, False]))
    table = stutter.stutter_tokens(pairs, piece={5: "▁the", 9: ",", 2: "▁a"}.get, top=10)
    assert list(table.index) == ["▁the", ","]  # a token that never stutters is not listed
    assert table["stutter"].tolist() == [3, 1] and table["opens"].tolist() == [4, 2]
    assert table["share"].tolist() == pytest.approx([0.75, 0.25])
    assert table["rate"].tolist() == pytest.approx([0.75, 0.5])
    found = stutter.token_findings(stutter.stutter_tokens(pairs, str, top=1), pairs)
    assert found == dict(ex_tok_distinct=2, ex_tok_top="5", ex_tok_top_share=0.75, ex_tok_shown=1,
                         ex_tok_shown_share=0.75)
    quiet = pairs.assign(stutter=False)
    assert stutter.token_findings(stutter.stutter_tokens(quiet, str), quiet)["ex_tok_top"] == "none"
    with pytest.raises(ValueError, match="top"):
        stutter.stutter_tokens(pairs, str, top=0)


# --- dependency_decoding: the thresholds, and the groups on a random model ---------------------------------

def test_the_eager_and_cautious_threshold_pairs_and_a_repeat_left_out():
    pairs = findings_dd.threshold_pairs([0.3, 0.5, 0.7], [0.8, 0.9, 0.95], dict(confidence=0.5, dependency=0.9))
    assert pairs == {"tuned": (0.5, 0.9), "eager": (0.3, 0.95), "cautious": (0.7, 0.8)}
    same = findings_dd.threshold_pairs([0.3, 0.5], [0.9], dict(confidence=0.3, dependency=0.9))
    assert same == {"tuned": (0.3, 0.9), "cautious": (0.5, 0.9)}  # the eager pair is the tuned one


def test_the_threshold_pairs_against_the_tuned_one_at_the_fewest_and_most_passes():
    table = pd.DataFrame([("tuned", 1, 20.0), ("tuned", 10, 30.0), ("eager", 1, 21.0), ("eager", 10, 29.5),
                          ("cautious", 1, 15.0), ("cautious", 10, 30.0)], columns=["pair", "T", "BLEU"])
    found = findings_dd.threshold_findings(table)
    assert (found["ex_thr_small_T"], found["ex_thr_large_T"]) == (1, 10)
    assert found["ex_thr_eager_small"] == pytest.approx(1.0) and found["ex_thr_cautious_small"] == pytest.approx(-5.0)
    assert all(type(v) in (int, float, str) for v in found.values())  # plain Python values: glue shows them as such
    assert found["ex_thr_cautious_text"] == "-5.0 at T = 1, +0.0 at T = 10"
    alone = findings_dd.threshold_findings(table[table["pair"] != "eager"])
    assert alone["ex_thr_eager_text"] == "the tuned pair itself" and math.isnan(alone["ex_thr_eager_small"])
    with pytest.raises(ValueError, match="tuned"):
        findings_dd.threshold_findings(table[table["pair"] != "tuned"])


def test_the_groupings_of_a_model_as_the_threshold_rises():
    import jax

    from gmlm_lib.ising import model as ising
    from gmlm_lib.ising import samplers

    J = np.array([[0.0, 1.0, 0.2, 0.0], [1.0, 0.0, 0.0, 0.0], [0.2, 0.0, 0.0, 0.5], [0.0, 0.0, 0.5, 0.0]])
    with jax.enable_x64(True):
        parts = samplers.dependency_partitions(ising.ising_model(J, np.zeros(4)))
    assert parts == [(0.0, [(0, 1, 2, 3)]), (0.2, [(0, 1), (2, 3)]), (0.5, [(0, 1), (2,), (3,)]),
                     (1.0, [(0,), (1,), (2,), (3,)])]


def test_the_stationary_error_by_passes_a_sweep():
    table = pd.DataFrame(dict(passes=[5, 3, 3, 2, 1], stationary_tv=[1e-15, 0.2, 0.15, 0.3, 0.7]))
    found = findings_dd.partition_findings(table)
    assert found["ex_part_line"] == "1 pass: 0.700; 2 passes: 0.300; 3 passes: 0.150; 5 passes: exact"
    assert found["ex_part_one"] == pytest.approx(0.7) and found["ex_part_exact_at"] == 5
    assert found["ex_part_monotone"] == "falls with every pass added"
    bump = findings_dd.partition_findings(table.assign(stationary_tv=[0.0, 0.4, 0.35, 0.3, 0.7]))
    assert bump["ex_part_monotone"] == "does not always fall"
    never = findings_dd.partition_findings(table.assign(stationary_tv=[0.1, 0.2, 0.15, 0.3, 0.7]))
    assert never["ex_part_exact_at"] == 0
    with pytest.raises(ValueError, match="stationary_tv"):
        findings_dd.partition_findings(table.assign(stationary_tv=math.nan))
