"""The theory chapters' verdicts (gmlm_lib.book.findings: testbed, efficiency, bounds, kgibbs) on small
hand-made inputs: each bar met and missed by a hair, and nothing graded from nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gmlm_lib.book.findings import bounds
from gmlm_lib.book.findings import efficiency_is_mixing as efficiency
from gmlm_lib.book.findings import gmlm_ising_testbed as testbed
from gmlm_lib.book.findings import kgibbs_vs_parallel as kgibbs


def _z_case(max_z):
    """Four states with probability 1/4 and 400 draws: one state's frequency set so its |z| is max_z."""
    prob = np.full(4, 0.25)
    se = np.sqrt(0.25 * 0.75 / 400)
    freq = np.array([0.25 + max_z * se, 0.25 - max_z * se, 0.25, 0.25])
    return freq, prob


@pytest.mark.parametrize("max_z, want", [(4.499, "met"), (4.501, "missed")])
def test_the_sampler_bar_by_a_hair(max_z, want):
    got = testbed.sampler(*_z_case(max_z), 400)
    assert got["z_verdict"] == want and got["z_bar"] == testbed.Z_BAR
    assert got["sampler_max_z"] == pytest.approx(max_z, rel=1e-12)


def test_the_sampler_check_refuses_what_has_no_standard_error():
    with pytest.raises(ValueError, match="shape"):
        testbed.sampler(np.ones(3) / 3, np.ones(4) / 4, 10)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        testbed.sampler(np.array([1.0, 0.0]), np.array([1.0, 0.0]), 10)
    with pytest.raises(ValueError, match="shape"):
        testbed.sampler(np.full((2, 2), 0.25), np.full((2, 2), 0.25), 10)
    for prob in ([0.0, 0.5, 0.5], [1.0, 0.5]):  # one state of probability 0, or 1
        with pytest.raises(ValueError, match=r"\(0, 1\)"):
            testbed.sampler(np.full(len(prob), 0.5), np.array(prob), 10)
    with pytest.raises(ValueError, match="draws must be >= 1"):
        testbed.sampler(*_z_case(1.0), 0)
    assert testbed.sampler(np.array([1.0, 0.0]), np.array([0.5, 0.5]), 1)["sampler_max_z"] == 1.0  # one draw


@pytest.mark.parametrize("errors, want", [([3.0, 2.0, 1.0], "yes"), ([3.0, 3.0, 1.0], "no"), ([1.0, 2.0], "no")])
def test_ordered(errors, want):
    assert testbed.ordered(errors) == want


def test_ordered_needs_two_finite_errors():
    with pytest.raises(ValueError, match="at least two finite"):
        testbed.ordered([1.0, np.nan])


@pytest.mark.parametrize("tightness, scale, big, want", [
    (1.0, 59.9, [60.0], ("met", "met", "met")),
    (1.0 + 2e-9, 60.001, [1.0, 60.001], ("missed", "missed", "missed")),
    (1.0 + 0.5e-9, 1.0, [59.999, 2.0], ("met", "met", "met")),
])
def test_the_bound_and_the_time_bars(tightness, scale, big, want):
    got = efficiency.findings(tightness, scale, {k + 1: (10.0, s) for k, s in enumerate(big)})
    assert (got["bound_verdict"], got["scale_verdict"], got["big_verdict"]) == want
    with pytest.raises(ValueError, match="at least one matrix-free computation"):
        efficiency.findings(1.0, 1.0, {})


def _speed(ip_loop=(25.0, 10.0), ip_ceiling=(30.0, 15.0), product=(40.0, 12.0)):
    rows = []
    for i, n in enumerate((64, 1024)):
        for dtype in ("float64", "float32"):
            rows.append(dict(n=n, sampler="k-Gibbs (k = 4)", dtype=dtype, speedup_vs_loop=50.0, speedup_vs_vectorised=3.0,
                             ceiling_vs_loop=np.nan, product_ceiling_vs_loop=np.nan))
            rows.append(dict(n=n, sampler="independent parallel", dtype=dtype, speedup_vs_loop=ip_loop[i],
                             speedup_vs_vectorised=1.5, ceiling_vs_loop=ip_ceiling[i],
                             product_ceiling_vs_loop=product[i] if dtype == "float64" else 100.0))
    return pd.DataFrame(rows)


def test_the_throughput_verdicts():
    got = kgibbs.benchmark(_speed())
    assert got["bench_meets"] == "3 of 4" and got["bench_kg_meets"] == "2 of 2" and got["bench_ip_meets"] == "1 of 2 sizes"
    assert (got["bench_ip_missed"], got["bench_ip_ceiling"]) == ("1024", "below")
    assert got["bench_ip_product_blocked"] == "float64 at n = 1024"
    assert got["bench_ip_share"] == "67%"  # 10 / 15 at n = 1024
    # ranges: float64 independent parallel against the loop; its product ceiling over both precisions
    assert (got["bench_ip_lo"], got["bench_ip_hi"]) == (10.0, 25.0)
    assert (got["bench_ip_product_lo"], got["bench_ip_product_hi"]) == (12.0, 100.0)


@pytest.mark.parametrize("loop, ceiling, want", [((25.0, 19.999), (30.0, 20.001), "above"),
                                                 ((25.0, 19.999), (30.0, 19.999), "below"),
                                                 ((25.0, 20.0), (30.0, 19.0), "not needed")])
def test_the_ceiling_word_by_a_hair(loop, ceiling, want):
    assert kgibbs.benchmark(_speed(ip_loop=loop, ip_ceiling=ceiling))["bench_ip_ceiling"] == want


def test_the_throughput_bar_at_exactly_the_bar():
    """A speed-up of exactly the bar reaches it; a ceiling or a matrix product of exactly the bar is not below it."""
    bar = kgibbs.SPEED_BAR
    exact = kgibbs.benchmark(_speed(ip_loop=(25.0, bar)))
    assert (exact["bench_ip_meets"], exact["bench_ip_missed"]) == ("2 of 2 sizes", "none")
    assert exact["bench_meets"] == "4 of 4"
    edge = kgibbs.benchmark(_speed(ip_loop=(25.0, bar - 1.0), ip_ceiling=(30.0, bar), product=(40.0, bar)))
    assert (edge["bench_ip_ceiling"], edge["bench_ip_product_blocked"]) == ("above", "none")


def test_the_float64_and_float32_rows_are_graded_apart():
    speed = _speed()
    speed.loc[speed.dtype == "float32", "speedup_vs_loop"] = 5.0  # every float32 row below the bar
    got = kgibbs.benchmark(speed)
    assert (got["bench_meets"], got["bench_meets32"]) == ("3 of 4", "0 of 4")
    assert (got["bench_min_loop"], got["bench_max_loop"]) == (10.0, 50.0)  # float64 only
    with pytest.raises(ValueError, match="no float64 rows"):
        kgibbs.benchmark(speed[speed.dtype == "float32"])


def test_the_throughput_verdicts_need_their_columns():
    with pytest.raises(ValueError, match="lacks the columns"):
        kgibbs.benchmark(_speed().drop(columns="ceiling_vs_loop"))


def _hits(gibbs=None, parallel=None, n=4, field=0.5):
    """A hand-made sweep over c in {2, 3} and J in {1, 2} on n = 4 sites: k-Gibbs medians that fall with k
    and rise with J below the clique size, independent parallel past its budget (inf) at c = 3, J = 2.
    ``gibbs`` / ``parallel`` replace medians: {(c, J, k): steps} / {(c, J): steps}."""
    base = {(2, 1.0): [20, 3, 2, 1], (2, 2.0): [90, 3, 2, 1], (3, 1.0): [60, 30, 4, 1], (3, 2.0): [900, 400, 4, 1]}
    ip = {(2, 1.0): 5.0, (2, 2.0): 40.0, (3, 1.0): 300.0, (3, 2.0): np.inf}
    ip.update(parallel or {})
    rows = []
    for (c, J), medians in base.items():
        for k, m in enumerate(medians, start=1):
            m = (gibbs or {}).get((c, J, k), m)
            rows.append(dict(c=c, J=J, sampler=f"{k}-Gibbs", k=k, median=float(m), budget=1000,
                             scale=kgibbs.gibbs_scale(n, k, c)))
        rows.append(dict(c=c, J=J, sampler=kgibbs.IP, k=n + 1, median=ip[(c, J)], budget=5000,
                         scale=kgibbs.parallel_scale(J, c, field)))
    return pd.DataFrame(rows)


def test_figure3_graded_on_its_four_sentences():
    """[Figure 3] each of App. L.7's sentences graded on a sweep that agrees with all four (ties allowed)."""
    ties = {(2, 1.0, 3): 3, (2, 2.0, 1): 20}  # k = 2 and k = 3 both 3 steps; k = 1 20 steps at both J
    got = kgibbs.hitting(_hits(gibbs=ties, parallel={(2, 2.0): np.inf}), n=4, field=0.5)
    assert {name: got[name] for name in kgibbs.FIGURE3_CLAIMS} == dict.fromkeys(kgibbs.FIGURE3_CLAIMS, "met")
    assert got["fig3_verdict"] == "met" and got["fig3_reach_count"] == "10 of 10"
    assert (got["kg_censored"], got["kg_settings"]) == (0, 10)  # k >= c: k = 2, 3, 4 at c = 2 and 3, 4 at c = 3
    censored = kgibbs.hitting(_hits(gibbs={(3, 2.0, 3): np.inf}, parallel={(2, 2.0): np.inf}), n=4, field=0.5)
    assert (censored["kg_censored"], censored["kg_settings"], censored["fig3_reach_count"]) == (1, 10, "9 of 10")
    assert got["kg_ratio_hi"] == pytest.approx(3 / 2)  # k = 3, c = 2: 3 steps over C(4,3) / C(2,1) = 2
    assert got["small_k_stuck"] == "0 of 3" and got["kn_median_max"] == 1.0
    assert (got["max_clique"], got["max_coupling"], got["ip_couplings"]) == (3, 2.0, "1.0, 2.0")
    assert got["ip_scale"] == "c = 2: 1.8, > budget; c = 3: 15, > budget"  # c = 3, J = 1: 300 / exp(2 (1 * 2 - 0.5)) = 14.9


@pytest.mark.parametrize("change, claim, where", [
    (dict(gibbs={(3, 2.0, k): np.inf for k in (1, 2, 3)}), "fig3_reach", "c = 3, J = 2.0, k = 3"),  # k >= c censored
    (dict(gibbs={(2, 2.0, 1): 19.0}), "fig3_coupling", "c = 2, k = 1"),               # faster at the larger J
    (dict(parallel={(2, 2.0): 4.0}), "fig3_coupling", "c = 2, independent parallel"),  # by one step (and so not stuck)
    (dict(gibbs={(2, 1.0, 4): 3.0}), "fig3_k", "c = 2, J = 1.0"),                     # k = 4 slower than k = 3, by one
    (dict(parallel={(3, 2.0): 4999.0}), "fig3_stuck", "c = 3, J = 2.0"),              # reached one step inside
])
def test_figure3_each_sentence_missed_by_one_setting(change, claim, where):
    change = {**change, "parallel": {(2, 2.0): np.inf, **change.get("parallel", {})}}  # stuck at both clique sizes
    got = kgibbs.hitting(_hits(**change), n=4, field=0.5)
    assert got[claim] == "missed" and got[f"{claim}_where"] == where and got["fig3_verdict"] == "missed"
    # independent parallel faster at the stronger coupling has escaped there: then "stuck" is missed too
    also = ["fig3_stuck"] if claim == "fig3_coupling" and np.isfinite(change["parallel"][(2, 2.0)]) else []
    assert [name for name in kgibbs.FIGURE3_CLAIMS if got[name] == "missed"] == [claim] + also


def test_the_stuck_claim_is_graded_at_every_clique_size():
    """[Figure 3] "independent parallel cannot reach the heavy mode" at each clique size's strongest coupling:
    met where it is past its budget, missed (with its median and its ratio to the scale) where it escapes."""
    got = kgibbs.hitting(_hits(parallel={(2, 2.0): np.inf}), n=4, field=0.5)
    assert got["fig3_stuck"] == "met" and got["fig3_stuck_where"] == "none"
    assert got["fig3_stuck_by_clique"] == ("c = 2: met (past its budget of 5,000 steps); "
                                          "c = 3: met (past its budget of 5,000 steps)")
    escapes = kgibbs.hitting(_hits(), n=4, field=0.5)  # c = 2 reached at J = 2 in 40 steps: exp(2 (2 - 0.5)) = 20.1
    assert escapes["fig3_stuck"] == "missed" and escapes["fig3_stuck_where"] == "c = 2, J = 2.0"
    assert escapes["fig3_stuck_by_clique"] == ("c = 2: missed (reached in a median of 40 steps, 2x its scale); "
                                              "c = 3: met (past its budget of 5,000 steps)")


def test_the_coupling_claim_reads_the_runs_below_the_clique_size_only():
    # k = c may get faster with J (it is past the clique): only k < c is claimed to slow down
    assert kgibbs.hitting(_hits(gibbs={(2, 2.0, 2): 2.0}), n=4, field=0.5)["fig3_coupling"] == "met"


@pytest.mark.parametrize("n, field", [(0, 0.5), (True, 0.5), (4.0, 0.5), (4, float("nan")), (4, True), (4, "0.5")])
def test_the_hitting_findings_refuse_a_bad_size_or_field(n, field):
    with pytest.raises(ValueError, match="hitting\\((n|field)=...\\)"):
        kgibbs.hitting(_hits(), n=n, field=field)


def test_the_strongest_coupling_is_read_apart():
    """The largest J's k >= c ratios and its k < c runs past the budget are those of J = 2 only."""
    got = kgibbs.hitting(_hits(gibbs={(3, 2.0, 3): 8.0, (3, 2.0, 1): np.inf}), n=4, field=0.5)
    strong = [m / kgibbs.gibbs_scale(4, k, c) for c, k, m in ((2, 2, 3), (2, 3, 2), (2, 4, 1), (3, 3, 8), (3, 4, 1))]
    assert (got["kg_strong_lo"], got["kg_strong_hi"]) == pytest.approx((min(strong), max(strong)))
    assert got["small_k_stuck"] == "1 of 3"  # k = 1 of c = 2 and k = 1, 2 of c = 3, at J = 2
    assert kgibbs.hitting(_hits(), n=4, field=0.5)["kg_strong_hi"] < got["kg_strong_hi"]


def test_the_independent_parallel_table_and_its_first_flip():
    ip = kgibbs.parallel_table(_hits(), field=0.5)
    assert (ip["median / first flip"] == ip["median"] / ip["first flip"]).all()  # inf / x stays inf
    q = 1 / (1 + np.exp(2 * (2.0 * 2 - 0.5)))  # c = 3, J = 2: each clique site's chance to flip per step
    assert list(ip.c) == [2, 2, 3, 3] and ip["first flip"].iloc[-1] == pytest.approx(1 / (1 - (1 - q) ** 3))
    assert kgibbs.first_flip(0.0, 1, 0.0) == pytest.approx(2.0)  # a fair coin: two steps on average
    assert np.isnan(kgibbs.gibbs_scale(4, 1, 2)) and kgibbs.gibbs_scale(4, 4, 2) == 1.0


@pytest.mark.parametrize("hits, match", [
    (lambda h: h.drop(columns="budget"), "lacks the columns"),
    (lambda h: h.assign(median=h["median"].where(h.k != 2, np.nan)), "NaN"),
    (lambda h: h[h.sampler != kgibbs.IP], "needs k-Gibbs rows and"),
    (lambda h: h[(h.sampler == kgibbs.IP) | (h.k < h.c)], "k >= c"),
    (lambda h: h[h.sampler == kgibbs.IP], "needs k-Gibbs rows and"),
])
def test_figure3_is_never_graded_from_a_missing_median(hits, match):
    with pytest.raises(ValueError, match=match):
        kgibbs.hitting(hits(_hits()), n=4, field=0.5)


@pytest.mark.parametrize("value, minimum, want", [(3, 2, True), (2, 2, True), (1, 2, False), (2.0, 2, False),
                                                  (True, 0, False), ("3", 0, False), (0, 0, True)])
def test_a_chapter_parameter_count(value, minimum, want):
    """gmlm_lib.book.validate.count: the one integer check of the chapters' validation cells."""
    from gmlm_lib.book.validate import count

    assert count(value, minimum) is want


# --- bounds (adaptive masking, conditionals to the joint) ----------------------------------------------

@pytest.mark.parametrize("smaller, larger, want", [(1.0 + 0.5e-9, 1.0, True), (1.0 + 2e-9, 1.0, False),
                                                   (np.nan, 1.0, False), (0.5, np.nan, False), (0.0, 0.0, True)])
def test_an_inequality_up_to_rounding(smaller, larger, want):
    assert bool(bounds.holds(smaller, larger)) is want


def _adaptive(ratio=(1.0, 2.0), cp=(1.0, 2.5)):
    return pd.DataFrame({"|H - Sigma| (autodiff)": [1e-15, 3e-15], "|H closed - autodiff|": [2e-15, 1e-15],
                         "|pP - p|": [1e-16, 4e-16], "detailed balance": [5e-16, 1e-16], "C_P": list(cp),
                         "max v'Gamma v / v'Gamma_MLE v": list(ratio)}, index=["uniform", "adaptive"])


def test_the_adaptive_bound_for_every_rule():
    got = bounds.adaptive(_adaptive())
    assert got["ad_bound"] == "yes" and got["ad_equality"] == 3e-15 and got["ad_balance"] == 5e-16
    assert bounds.adaptive(_adaptive(ratio=(1.0, 2.5 * (1 + 2e-9))))["ad_bound"] == "no"
    with pytest.raises(ValueError, match="C_P"):
        bounds.adaptive(_adaptive().drop(columns="C_P"))


def _cat(lower=(2.0, 3.0), upper=(4.0, 5.0), cp=(2.0, 1.5), exact=(2.0, np.nan)):
    lower = np.asarray(lower)
    return pd.DataFrame({"C_P": cp, "lower": lower, "upper": upper, "lower / C_P": lower / np.asarray(cp),
                         "exact": exact})


@pytest.mark.parametrize("kw, want", [({}, "yes"), (dict(cp=(2.0 * (1 + 2e-9), 1.5)), "no"),
                                      (dict(upper=(1.999, 5.0)), "no"), (dict(upper=(2.0, 5.0)), "yes")])
def test_the_sandwich(kw, want):
    assert bounds.sandwich(_cat(**kw))["sandwich_ok"] == want


def test_the_sandwich_numbers():
    got = bounds.sandwich(_cat(lower=(2.002, 3.0)))
    assert got["exact_err"] == pytest.approx(0.001) and got["nonlinear_gain"] == 2.0


def test_theorem4_counts_the_fits_where_the_key_step_holds():
    fits = pd.DataFrame({"KL": [1.0, 2.0, 3.001], "gap": [0.5, 2.0, 1.0], "C_AT_upper": [2.0, 1.25, 3.0]})
    got = bounds.theorem4(fits)  # 1 <= 2 x 0.5 exactly, 2 <= 1.25 x 2, 3.001 > 3 x 1
    assert got["thm4_holds"] == "2 of 3" and got["ratio_max"] == 3.001  # KL / gap: 2, 1, 3.001


@pytest.mark.parametrize("verdict, table", [(bounds.sandwich, _cat().drop(columns="upper")),
                                            (bounds.sandwich, _cat().iloc[:0]),
                                            (bounds.theorem4, pd.DataFrame({"KL": [1.0], "gap": [0.5]}))])
def test_the_c_at_verdicts_name_a_table_without_its_columns_or_rows(verdict, table):
    with pytest.raises(ValueError, match="table needs rows and the columns"):
        verdict(table)


def _sweep(**at_top):
    """Three rules at couplings 0 and 0.8; ``at_top`` overrides (learn, mix) of a rule at 0.8."""
    rows = []
    for coupling in (0.0, 0.8):
        for rule, (learn, mix) in dict(uniform=(2.0, 10.0), cluster=(1.5, 12.0), adaptive=(1.8, 8.0)).items():
            if coupling == 0.8 and rule in at_top:
                learn, mix = at_top[rule]
            rows.append({"coupling in": coupling, "rule": rule, "tr Gamma / tr Gamma_MLE": learn, "C_P": mix})
    return pd.DataFrame(rows)


def test_the_adaptive_comparison_picks_each_best_rule_beside_uniform():
    from gmlm_lib.book.findings import adaptive_masking

    got = adaptive_masking.comparison(_sweep(adaptive=(1.499, 8.0)), 0.8)
    assert got == dict(best_learn="adaptive", best_learn_ratio=1.499, uniform_learn_ratio=2.0, best_mix="adaptive",
                       best_mix_cp=8.0, uniform_cp=10.0)
    got = adaptive_masking.comparison(_sweep(adaptive=(1.501, 8.0), uniform=(2.0, 7.999)), 0.8)
    assert (got["best_learn"], got["best_mix"], got["best_mix_cp"]) == ("cluster", "uniform", 7.999)
    assert adaptive_masking.comparison(_sweep(), 0.0)["best_learn"] == "cluster"  # the coupling asked for, not the last


def test_the_adaptive_comparison_refuses_what_it_cannot_compare():
    from gmlm_lib.book.findings import adaptive_masking

    with pytest.raises(ValueError, match="no row at coupling in = 0.5"):
        adaptive_masking.comparison(_sweep(), 0.5)
    with pytest.raises(ValueError, match="the 'uniform' rule"):
        adaptive_masking.comparison(_sweep().query("rule != 'uniform'"), 0.8)
    with pytest.raises(ValueError, match="non-finite"):
        adaptive_masking.comparison(_sweep(cluster=(np.nan, 12.0)), 0.8)
    with pytest.raises(ValueError, match="lacks the columns"):
        adaptive_masking.comparison(_sweep().drop(columns="C_P"), 0.8)


def _maps():
    """n = 6: a J = 0 row, two k >= n - 2 rows, and the loosest cell at J = 0.5, k = 1."""
    return pd.DataFrame([
        dict(family="random", J=0.0, k=1, C_P=1.0, tightness=0.9999999999, **{"slow mode in span(T)": 1.0}),
        dict(family="random", J=0.5, k=1, C_P=40.0, tightness=0.02, **{"slow mode in span(T)": 0.000123}),
        dict(family="ferromagnet", J=0.5, k=4, C_P=3.0, tightness=0.999, **{"slow mode in span(T)": 0.5}),
        dict(family="ferromagnet", J=0.2, k=6, C_P=1.0, tightness=1.0, **{"slow mode in span(T)": 0.9}),
    ])


def test_where_the_efficiency_bound_is_tight_and_loosest():
    got = efficiency.tightness(_maps(), 6)
    assert (got["tight_J0_min"], got["tight_J0_max"]) == (0.9999999999, 0.9999999999)
    assert (got["tight_kn_min"], got["tight_kn_max"]) == (0.999, 1.0)
    assert (got["loosest_ratio"], got["loosest_family"], got["loosest_J"], got["loosest_k"]) == (0.02, "random", 0.5, 1)
    assert got["loosest_slow_pct"] == pytest.approx(0.0123, rel=1e-12)
    assert (got["cp_min"], got["cp_max"]) == (1.0, 40.0)
    assert np.isnan(efficiency.tightness(_maps()[lambda d: d.J > 0], 6)["tight_J0_min"])  # no J = 0 cell: NaN
    assert efficiency.tightness(_maps(), 8)["tight_kn_max"] == 1.0  # k >= n - 2 follows n: only k = 6


def test_the_efficiency_tightness_refuses_a_failed_cell():
    with pytest.raises(ValueError, match="non-finite"):
        efficiency.tightness(_maps().assign(tightness=[1.0, np.nan, 0.5, 0.5]), 6)
    with pytest.raises(ValueError, match="lacks"):
        efficiency.tightness(_maps().drop(columns="family"), 6)
    with pytest.raises(ValueError, match="non-empty table"):
        efficiency.tightness(_maps().iloc[:0], 6)
    assert efficiency.tightness(_maps().iloc[:1], 6)["cp_min"] == _maps()["C_P"].iloc[0]  # one cell is enough


def test_the_error_drops_from_each_k_to_the_next():
    sq_err = {1: np.array([4.0, 3.0, 5.0, 4.0]), 2: np.array([3.0, 3.5, 4.0, 3.0]), 8: np.array([2.0, 2.5, 3.0, 2.0])}
    table = testbed.drops(sq_err, [1, 2, 8])
    assert list(table["from k"]) == [1, 2] and list(table["to k"]) == [2, 8]
    assert list(table["fell in"]) == [0.75, 1.0]  # one set rose from k = 1 to 2 (3.0 -> 3.5)
    diff = sq_err[1] - sq_err[2]
    assert table.loc[0, "z"] == pytest.approx(diff.mean() / (diff.std(ddof=1) / 2.0))
    assert np.isinf(table.loc[1, "z"])  # every set fell by exactly 1: no spread
    got = testbed.drop_findings(table)
    assert got == dict(win_min_pct=75.0, win_min_z=pytest.approx(float(table.loc[0, "z"])))


def test_drops_refuse_what_they_cannot_compare():
    for ks in ([2, 1], [1, 1], [1]):
        with pytest.raises(ValueError, match="increasing mask sizes"):
            testbed.drops({1: [1.0, 2.0], 2: [1.0, 2.0]}, ks)
    assert testbed.drops({1: [1.0, 2.0, 3.0], 2: [1.0, 1.0, 3.5]}, [1, 2]).loc[0, "fell in"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="same training sets"):
        testbed.drops({1: [1.0, 2.0], 2: [1.0, 2.0, 3.0]}, [1, 2])
    still = testbed.drops({1: [1.0, 2.0], 2: [1.0, 2.0]}, [1, 2])
    assert np.isnan(still.loc[0, "z"])
    with pytest.raises(ValueError, match="needs a z"):
        testbed.drop_findings(still)


def test_the_matrix_free_computations_summarised():
    got = efficiency.findings(1.0, 1.0, {4: (12.5, 3.0), 2: (3.25, 7.5), 16: (1e6, 1.0)})
    assert {k: got[k] for k in ("big_ks", "big_cp_min", "big_cp_max", "big_s_max")} == dict(
        big_ks="2, 4 and 16", big_cp_min=3.25, big_cp_max=1e6, big_s_max=7.5)


def test_a_throughput_row_is_met_only_when_every_timing_round_reaches_the_bar():
    """Rows with the range of their speed-up over the timing rounds: the bar is met when the lowest round
    reaches it, missed when the highest does not, and a row whose rounds straddle it is said apart."""
    bar = kgibbs.SPEED_BAR
    speed = _speed(ip_loop=(25.0, 19.0))
    speed["speedup_vs_loop_lo"] = speed["speedup_vs_loop"]
    speed["speedup_vs_loop_hi"] = speed["speedup_vs_loop"]
    kg = speed.sampler != "independent parallel"
    speed.loc[kg & (speed.n == 64), "speedup_vs_loop_lo"] = bar - 5.0  # one k-Gibbs size straddles the bar
    ip = (speed.sampler == "independent parallel") & (speed.n == 1024)
    speed.loc[ip, "speedup_vs_loop_hi"] = bar + 1.0  # and the independent parallel size below it
    got = kgibbs.benchmark(speed)
    assert got["bench_kg_meets"] == "1 of 2 (1 more within timing noise)"
    assert got["bench_ip_meets"] == "1 of 2 sizes (1 more within timing noise)"
    assert got["bench_ip_missed"] == "none" and got["bench_ip_ceiling"] == "not needed"
    assert got["bench_meets"] == "2 of 4 (2 more within timing noise)"
    speed["speedup_vs_loop_hi"] = speed["speedup_vs_loop"]
    speed.loc[kg & (speed.n == 64), "speedup_vs_loop_hi"] = bar - 1.0  # every round below: missed, not noise
    speed.loc[kg & (speed.n == 64), "speedup_vs_loop"] = bar - 1.0
    assert kgibbs.benchmark(speed)["bench_kg_meets"] == "1 of 2"
