"""The parallel-rules chapter's verdicts (gmlm_lib.book.findings.parallel_rules) on hand-made tables."""

import math

import pandas as pd
import pytest

from gmlm_lib.book.findings import parallel_rules as F


def frontier(ours_kl: float, *, ours_passes: float = 3.0):
    rows = [("strong", "dependency", 0.9, ours_passes, ours_kl),
            ("strong", "threshold", 0.9, 3.0, 0.100), ("strong", "entropy", 0.1, 2.0, 0.300),
            ("strong", "factor", 1.0, 5.0, 0.010), ("strong", "dilated", 4, 8.0, 0.0),
            ("strong", "top_k", 3, 3.0, 0.500), ("weak", "dependency", 0.9, 3.0, 0.0),
            ("weak", "threshold", 0.9, 3.0, 0.0), ("weak", "entropy", 0.1, 3.0, 0.0)]
    return pd.DataFrame(rows, columns=["family", "rule", "param", "passes", "kl"])


def li_cai(kl_strong: float):
    return pd.DataFrame([("strong", 2, kl_strong, 0.5), ("strong", 4, 0.05, 0.2), ("weak", 2, 0.0, 0.0)],
                        columns=["family", "T", "kl", "bound"])


@pytest.mark.parametrize("ours,verdict", [(0.0999, "met"), (0.100, "met"), (0.1001, "missed")])
def test_ours_matches_or_not_by_a_hair(ours, verdict):
    out = F.findings(frontier(ours), li_cai(0.1), [3], ["strong"])
    assert out["ours_target"] == verdict
    assert out["ours_vs_best_kl"] == pytest.approx(ours / 0.1)
    assert (out["ours_missed_at"] == "nowhere") == (verdict == "met")


def test_budget_decides_which_settings_count():
    versus = F.ours_vs_best(frontier(0.05), [2, 3, 8], ["strong"])
    assert versus.best_rule.tolist() == ["entropy", "threshold", "dilated"]
    assert math.isinf(versus.ratio.iloc[0])  # ours has no setting within 2 passes, entropy has
    assert versus.ratio.iloc[1] == pytest.approx(0.5)
    assert versus.ratio.iloc[2] == pytest.approx(0.05 / F.FLOOR)  # dilated is exact at 8 passes, ours is not
    out = F.findings(frontier(0.05), li_cai(0.1), [2, 3], ["strong"])
    assert out["ours_target"] == "missed" and "no setting" in out["ours_missed_at"]


def test_both_exact_compare_equal():
    versus = F.ours_vs_best(frontier(0.0), [3], ["weak"])
    assert versus.ratio.tolist() == [1.0]


def test_the_floor_is_inclusive_wherever_a_kl_is_read_as_exact():
    """:data:`FLOOR` reads "at or below": a KL of exactly FLOOR is exact (ours or the best rival's),
    a rule within FLOOR of the best is listed with it, a KL of bound + FLOOR holds, and a bound of
    FLOOR with a KL of FLOOR is a vanishing pair (ratio 0) that never names the tightest or loosest."""
    weak = frontier(0.0)
    weak.loc[(weak.family == "weak") & (weak.rule == "dependency"), "kl"] = F.FLOOR
    assert F.ours_vs_best(weak, [3], ["weak"]).ratio.tolist() == [1.0]  # ours at FLOOR, the best exact
    weak.loc[weak.family == "weak", "kl"] = [0.0, F.FLOOR, F.FLOOR]
    assert F.ours_vs_best(weak, [3], ["weak"]).ratio.tolist() == [1.0]  # the best rival at FLOOR, ours exact
    assert F.best_by_budget(weak, [3]).set_index("family").loc["weak", "best"] == "dependency, threshold, entropy"
    table = pd.DataFrame([("strong", 2, 0.1 + F.FLOOR, 0.1), ("strong", 4, F.FLOOR, F.FLOOR),
                          ("strong", 6, 0.02, 0.2)], columns=["family", "T", "kl", "bound"])
    checked = F.li_cai_check(table)
    assert checked.holds.tolist() == [True, True, True] and checked.ratio.iloc[1] == 0.0
    out = F.findings(frontier(0.1), table, [3], ["strong"])
    assert out["li_cai_tightest"].startswith("strong, T = 2") and out["li_cai_loosest"].startswith("strong, T = 6")


def test_of_rivals_tied_at_the_best_kl_the_first_listed_is_named():
    """``best_rule`` on a tie: the first of ``rivals`` in their order (so the table names the same rule
    on every run), whatever the order of the frontier's rows."""
    tied = frontier(0.1)
    tied.loc[tied.rule == "top_k", "kl"] = 0.100  # top_k now ties threshold at 3 passes
    for rows in (tied, tied.iloc[::-1]):
        for rivals, named in ((("threshold", "top_k"), "threshold"), (("top_k", "threshold"), "top_k")):
            assert F.ours_vs_best(rows, [3], ["strong"], rivals=rivals).best_rule.tolist() == [named]


def test_li_cai_violation_is_counted_and_named():
    held = F.findings(frontier(0.1), li_cai(0.5), [3], ["strong"])
    assert held["li_cai_violations"] == 0 and held["li_cai_verdict"] == "holds on every model tested"
    assert held["li_cai_tightest"].startswith("strong, T = 2 (KL / bound = 1.00")
    assert held["li_cai_loosest"].startswith("strong, T = 4")
    broken = F.findings(frontier(0.1), li_cai(0.5 + 1e-9), [3], ["strong"])
    assert broken["li_cai_violations"] == 1 and broken["li_cai_verdict"] == "fails on strong"


def test_a_vanishing_bound_with_a_positive_kl_is_an_infinite_ratio():
    table = pd.DataFrame([("strong", 2, 0.0, 0.0), ("strong", 4, 0.01, 0.0), ("strong", 6, 0.05, 0.1)],
                         columns=["family", "T", "kl", "bound"])
    checked = F.li_cai_check(table)
    assert checked.ratio.tolist() == [0.0, math.inf, 0.5] and checked.holds.tolist() == [True, False, True]


def test_best_rule_by_budget_text():
    out = F.findings(frontier(0.1), li_cai(0.1), [3, 8], ["strong"])
    # at 3 passes dependency and threshold tie at 0.1; at 8 dilated is exact; weak is not a strong family
    assert out["best_rule_by_budget"] == "3 passes: dependency, threshold (strong); 8 passes: dilated (strong)"


@pytest.mark.parametrize("table,match", [
    (frontier(0.1).drop(columns="kl"), "lacks the columns"),
    (frontier(0.1).assign(kl=float("nan")), "has a missing passes/kl/bound value"),
    (frontier(0.1).assign(passes=[float("nan")] + [3.0] * 8), "has a missing passes/kl/bound value"),
    (frontier(0.1).iloc[:0], "empty"),
])
def test_bad_tables_are_refused(table, match):
    with pytest.raises(ValueError, match=match):
        F.findings(table, li_cai(0.1), [3], ["strong"])


@pytest.mark.parametrize("call, error, match", [
    (lambda: F.best_by_budget(frontier(0.1).drop(columns="kl"), [3]), ValueError, "frontier lacks the columns"),
    (lambda: F.best_by_budget(frontier(0.1).to_dict(), [3]), TypeError,
     "frontier must be a pandas DataFrame; got dict"),
    (lambda: F.li_cai_check(li_cai(0.1).drop(columns="bound")), ValueError, "li_cai lacks the columns"),
    (lambda: F.li_cai_check(li_cai(0.1).assign(kl=float("nan"))), ValueError,
     "li_cai has a missing passes/kl/bound value"),
    (lambda: F.best_2025_by_T(translation_table(33.0).drop(columns="BLEU")), ValueError, "table lacks the columns"),
])
def test_each_verdict_checks_its_own_table(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_bad_budgets_and_families_are_refused():
    for bad in ([], [0], [2, -1], [True], ["3"]):
        with pytest.raises(ValueError, match="budgets"):
            F.ours_vs_best(frontier(0.1), bad, ["strong"])
    with pytest.raises(ValueError, match="no rows for family"):
        F.ours_vs_best(frontier(0.1), [3], ["clique"])


def test_ours_against_the_entropy_rule_alone():
    out = F.findings(frontier(0.1), li_cai(0.1), [2, 3], ["strong"])
    # strong: at 2 passes ours has no setting (inf), at 3 ours 0.1 against entropy 0.3; weak: all exact
    assert out["ours_vs_entropy"] == math.inf and out["comparisons"] == 4
    assert out["ours_beats_entropy"] == 1


def translation_table(ours_bleu: float):
    rows = [(2, "threshold", 30.0), (2, "entropy", 31.0), (2, "dependency_entropy", 31.5),
            (4, "threshold", 33.0), (4, "dilated", 32.0), (4, "dependency_entropy", ours_bleu)]
    return pd.DataFrame(rows, columns=["T", "rule", "BLEU"])


@pytest.mark.parametrize("p,verdict", [(0.049, "missed"), (0.05, "met"), (0.051, "met")])
def test_translation_verdict_by_a_hair(p, verdict):
    out = F.translation(translation_table(32.5), {2: 0.3, 4: p})
    assert out["rules_target"] == verdict
    assert out["ours_vs_best_bleu"] == pytest.approx(-0.5) and out["best_2025_at_T"] == "threshold"
    assert out["ours_vs_best_p"] == p
    assert out["ours_worse_at"] == ("T = 4" if verdict == "missed" else "no T")


def test_translation_better_is_never_worse_and_best_by_T_names_ours():
    out = F.translation(translation_table(34.0), {2: 0.001, 4: 0.001})  # significant, but ours is better
    assert out["rules_target"] == "met"
    assert out["best_rule_by_T"] == "T = 2: dependency_entropy (31.5); T = 4: dependency_entropy (34.0)"


def test_translation_inputs_are_checked():
    with pytest.raises(ValueError, match="one p-value for each T"):
        F.translation(translation_table(33.0), {4: 0.5})
    with pytest.raises(ValueError, match="needs ours"):
        F.translation(translation_table(33.0), {2: 0.5, 4: 0.5}, at_T=3)
    without_ours = translation_table(33.0).query("not (T == 4 and rule == 'dependency_entropy')")
    with pytest.raises(ValueError, match="needs ours"):
        F.translation(without_ours, {2: 0.5, 4: 0.5})
    with pytest.raises(ValueError, match="no 2025 rule"):
        F.best_2025_by_T(pd.DataFrame([(4, "dependency_entropy", 30.0)], columns=["T", "rule", "BLEU"]))


@pytest.mark.parametrize("ising, translation, word, words", [
    ("met", "met", "agree", "matches the best 2025 rule in both"),
    ("missed", "missed", "agree", "falls short of the best 2025 rule in both"),
    ("met", "missed", "disagree", "significantly worse on translation"),
    ("missed", "met", "disagree", "not significantly worse on translation"),
])
def test_the_two_frontiers_agree_when_both_targets_say_the_same(ising, translation, word, words):
    got = F.frontiers_agree(ising, translation)
    assert got[0] == word and words in got[1]


def test_frontiers_agree_takes_graded_targets_only():
    with pytest.raises(ValueError, match="translation_target must be 'met' or 'missed'"):
        F.frontiers_agree("met", "not comparable")


# --- the exercises ---------------------------------------------------------------------------------------

def test_the_delta_grid_runs_from_the_exact_graph_to_no_graph():
    grid = F.delta_grid([0.1, -0.4, 0.2, 0.3])
    assert grid[0] == 0.0 and grid[1:4] == pytest.approx([0.175, 0.25, 0.325]) and grid[-1] > 0.4
    assert grid[-1] == pytest.approx(0.4, abs=1e-15)  # the next float above the largest |J_ij|
    assert F.delta_grid([0.5, 0.5]) == [0.0, 0.5, F.delta_grid([0.5])[-1]]  # repeats dropped
    with pytest.raises(ValueError, match="couplings"):
        F.delta_grid([])


def _sweep():
    rows = [(0.0, 0.1, 4.0, 0.010), (0.0, 1.0, 2.0, 0.200), (0.2, 0.1, 3.0, 0.012), (0.2, 1.0, 2.0, 0.150),
            (0.5, 0.1, 1.0, 0.300), (0.5, 1.0, 1.0, 0.300)]
    return pd.DataFrame(rows, columns=["delta", "gamma", "passes", "kl"])


def test_the_best_threshold_at_each_budget():
    table = F.delta_by_budget(_sweep(), [1, 2, 4])
    assert list(table.index) == [0.0, 0.2, 0.5]
    assert table.loc[0.0].tolist() == [math.inf, 0.2, 0.01] and table.loc[0.2].tolist() == [math.inf, 0.15, 0.012]
    found = F.delta_findings(table)
    assert found["ex_delta_best"] == "1 passes: 0.5; 2 passes: 0.2; 4 passes: 0"
    assert (found["ex_delta_exact_best"], found["ex_delta_budgets"]) == (1, 3)
    tie = _sweep()
    tie.loc[3, "kl"] = 0.2 + 1e-13  # within the rounding floor of the exact graph's: both best
    assert "2 passes: 0, 0.2" in F.delta_findings(F.delta_by_budget(tie, [2]))["ex_delta_best"]
    none = F.delta_findings(F.delta_by_budget(_sweep(), [0.5]))
    assert none["ex_delta_best"] == "0.5 passes: none fits" and none["ex_delta_exact_best"] == 0
    with pytest.raises(ValueError, match="delta = 0"):
        F.delta_findings(table.drop(index=0.0))


def _records(tc, mass=None):
    tc = [float(v) for v in tc]
    mass = [1.0] * len(tc) if mass is None else mass
    return {"pass": [1] * len(tc), "size": [2] * len(tc), "mass": mass, "total_correlation": tc,
            "charge": [2 * v for v in tc]}


def test_pass_errors_against_gamma_by_a_hair():
    at = F.pass_errors(_records([0.05, 0.1, 0.0]), 0.1)
    assert at["holds"] and at["largest_over_gamma"] == pytest.approx(1.0) and at["passes"] == 3.0
    assert at["mean"] == pytest.approx(0.05) and at["mean_charge"] == pytest.approx(0.1)
    assert not F.pass_errors(_records([0.1 + 2e-12]), 0.1)["holds"]
    # a batch the decoder never draws (mass 0) does not count as its largest error
    assert F.pass_errors(_records([0.05, 9.0], mass=[1.0, 0.0]), 0.1)["largest"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="gamma"):
        F.pass_errors(_records([0.05]), 0.0)
    table = pd.DataFrame([dict(rule="entropy", **F.pass_errors(_records([0.05]), 0.1)),
                          dict(rule="entropy", **F.pass_errors(_records([0.02]), 0.05)),
                          dict(rule="dependency", **F.pass_errors(_records([0.3]), 0.2))])
    found = F.pass_error_findings(table)
    assert found["ex_tc_holds"] == "not everywhere: dependency at gamma = 0.2"
    assert found["ex_tc_entropy_largest"] == pytest.approx(0.5) and found["ex_tc_dependency_mean"] == pytest.approx(1.5)
    assert F.pass_error_findings(table.iloc[:2])["ex_tc_holds"] == "on every path of every setting"
