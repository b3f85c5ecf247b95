"""The 2025 parallel unmasking rules on Ising models (gmlm_lib.ising.unmasking): exact laws against an
independent brute force, against Monte Carlo runs of the same decoder, and Li and Cai's bound."""

import itertools
import math

import brute
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gmlm_lib.ising import model as ising
from gmlm_lib.ising import product
from gmlm_lib.core.unmasking import dilated_passes
from gmlm_lib.ising import unmasking as um

N = 4


@pytest.fixture(scope="module", autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def strong_model():
    with jax.enable_x64(True):
        return ising.random_model(jax.random.key(3), N, 1.2, 0.6)


# --- An independent reference: plain Python over partial states, the rules written again ---------


def _conditionals(p, x):
    """P(x_i = +1 | the unmasked entries of x) for every i, by summing the joint dict p."""
    agree = {s: w for s, w in p.items() if all(v == 0 or v == s[i] for i, v in enumerate(x))}
    z = sum(agree.values())
    return [sum(w for s, w in agree.items() if s[i] == 1) / z for i in range(len(x))]


def _ref_choose(name, param, x, pu, t, n, J):
    masked = [i for i in range(n) if x[i] == 0]
    conf = {i: max(pu[i], 1 - pu[i]) for i in masked}
    ent = {i: -sum(q * math.log(q) for q in (pu[i], 1 - pu[i]) if q > 0) for i in masked}
    by_conf = sorted(masked, key=lambda i: (-conf[i], i))
    if name == "top_k":
        T = int(param)
        k = math.ceil(n * (t + 1) / T) - math.ceil(n * t / T)
        return [set(by_conf[:k])]
    if name == "random":
        T = int(param)
        k = math.ceil(n * (t + 1) / T) - math.ceil(n * t / T)
        return [set(c) for c in itertools.combinations(masked, k)]
    if name == "threshold":
        chosen = {i for i in masked if conf[i] >= param}
        return [chosen or {by_conf[0]}]
    if name == "factor":
        m = max([m for m in range(1, len(masked) + 1) if (m + 1) * (1 - conf[by_conf[m - 1]]) < param], default=1)
        return [set(by_conf[:m])]
    if name == "entropy":
        by_ent = sorted(masked, key=lambda i: (ent[i], i))
        m = max(m for m in range(1, len(masked) + 1)
                if sum(ent[i] for i in by_ent[:m]) - max(ent[i] for i in by_ent[:m]) <= param)
        return [set(by_ent[:m])]
    if name == "dilated":
        B = int(param)
        L = int(math.log2(B))
        key = lambda i: (i // B, 0 if i % B == 0 else L - ((i % B) & -(i % B)).bit_length() + 1)
        first = min(key(i) for i in masked)
        return [{i for i in masked if key(i) == first}]
    if name == "dependency":
        linked = {a: {b for b in masked if b != a and abs(J[a][b]) > 0.5} for a in masked}  # strong couplings
        by_ent = sorted(masked, key=lambda i: (ent[i], i))
        chosen = {by_ent[0]}
        for i in by_ent[1:]:
            if brute.group_charge(chosen | {i}, ent, linked) <= param:
                chosen.add(i)
        return [chosen]
    raise AssertionError(name)


def _reference(model, name, param, visit=None):
    """(law over enumerate_states order, expected passes) by recursion over partial states;
    ``visit(t, x, A, mass, pu, p)`` for every batch ``A`` drawn at partial state ``x`` of pass ``t``."""
    n = model.n
    states = [tuple(int(v) for v in s) for s in np.asarray(ising.enumerate_states(n))]
    p = dict(zip(states, np.asarray(ising.probabilities(model)).tolist()))
    J = np.asarray(model.J).tolist()
    law = {s: 0.0 for s in states}
    passes = 0.0

    def walk(x, mass, t):
        nonlocal passes
        if 0 not in x:
            law[x] += mass
            return
        passes += mass
        pu = _conditionals(p, x)
        options = _ref_choose(name, param, x, pu, t, n, J)
        for A in options:
            A = sorted(A)
            if visit is not None:
                visit(t, x, A, mass / len(options), pu, p)
            for vals in itertools.product((-1, 1), repeat=len(A)):
                w = mass / len(options)
                y = list(x)
                for i, v in zip(A, vals):
                    w *= pu[i] if v == 1 else 1 - pu[i]
                    y[i] = v
                walk(tuple(y), w, t + 1)

    walk((0,) * n, 1.0, 0)
    return np.asarray([law[s] for s in states]), passes


CASES = [("random", 2), ("random", 3), ("top_k", 2), ("top_k", 3), ("threshold", 0.7), ("threshold", 0.95),
         ("factor", 0.8), ("factor", 2.5), ("entropy", 0.05), ("entropy", 1.0), ("dilated", 2), ("dilated", 4),
         ("dependency", 0.05), ("dependency", 0.3), ("dependency", 1.0)]


def _rule(name, param, model):
    return um.make_rule(name, model.n, param, strong=np.abs(np.asarray(model.J)) > 0.5)


@pytest.mark.parametrize("name,param", CASES)
def test_exact_law_matches_brute_force(strong_model, name, param):
    exact = um.exact_law(strong_model, _rule(name, param, strong_model))
    law, passes = _reference(strong_model, name, param)
    np.testing.assert_allclose(exact.law, law, atol=1e-12)
    assert exact.passes == pytest.approx(passes, abs=1e-12)
    assert exact.pass_law.sum() == pytest.approx(1.0, abs=1e-12)
    target = np.asarray(ising.probabilities(strong_model))
    assert exact.kl == pytest.approx(max(0.0, float(np.sum(target * np.log(target / law)))), abs=1e-12)
    assert exact.tv == pytest.approx(0.5 * np.abs(law - target).sum(), abs=1e-12)


@pytest.mark.parametrize("param", [0.3, 1.0])
def test_dependency_rule_on_two_separate_strong_pairs_matches_brute_force(param):
    """strong_model's strong couplings join all four sites, so its groups split only late and its
    dependency cases give the entropy bound's law; here the strong pairs 0-1 and 2-3 are separate from
    the first pass, each group is charged apart, and the law differs from the entropy bound's."""
    J = np.array([[0.0, 1.2, 0.2, -0.3], [1.2, 0.0, 0.1, 0.25], [0.2, 0.1, 0.0, -1.0], [-0.3, 0.25, -1.0, 0.0]])
    model = ising.ising_model(J, np.array([0.4, -0.3, 0.6, 0.1]))
    exact = um.exact_law(model, _rule("dependency", param, model))
    plain = um.exact_law(model, _rule("entropy", param, model))
    law, passes = _reference(model, "dependency", param)
    np.testing.assert_allclose(exact.law, law, atol=1e-12)
    assert exact.passes == pytest.approx(passes, abs=1e-12)
    assert np.abs(np.asarray(plain.law) - law).max() > 0.05  # the groups change the law


@pytest.mark.parametrize("name,param", [("random", 2), ("top_k", 3), ("threshold", 0.7), ("factor", 2.5),
                                        ("entropy", 0.05), ("dilated", 4), ("dependency", 0.3)])
def test_monte_carlo_matches_exact_law(strong_model, name, param):
    rule = _rule(name, param, strong_model)
    exact = um.exact_law(strong_model, rule)
    num = 40_000
    out, passes = um.sample(jax.random.key(7), strong_model, rule, num)
    idx = np.asarray(ising.index_from_states(out))
    freq = np.bincount(idx, minlength=2 ** N) / num
    se = np.sqrt(exact.law * (1 - exact.law) / num)
    assert np.all(np.abs(freq - exact.law) <= 4.5 * se + 1e-3), (freq, exact.law)
    passes = np.asarray(passes, dtype=float)
    assert abs(passes.mean() - exact.passes) <= 4.5 * passes.std() / math.sqrt(num) + 1e-9
    assert np.all(np.asarray(out) != 0)  # every decode ended within n passes


def test_one_position_a_pass_is_exact_and_independent_sites_are_exact_for_every_rule(strong_model):
    for rule in (um.top_k(N, N), um.dilated(N, 2), um.random_order(N, N)):
        assert um.exact_law(strong_model, rule).kl == pytest.approx(0.0, abs=1e-12)
    free = ising.ising_model(np.zeros((N, N)), np.asarray([0.3, -1.0, 0.0, 2.0]))
    for name, param in CASES:
        assert um.exact_law(free, _rule(name, param, free)).kl == pytest.approx(0.0, abs=1e-12)


def test_all_at_once_costs_the_total_correlation(strong_model):
    """One pass over every position draws the product of the marginals: KL = total correlation."""
    exact = um.exact_law(strong_model, um.top_k(N, 1))
    target = np.asarray(ising.probabilities(strong_model))
    marginals = np.asarray([ising.marginal(strong_model, [i])[1] for i in range(N)])
    np.testing.assert_allclose(exact.law, np.asarray(product.product_law(marginals)), atol=1e-12)
    assert exact.passes == 1.0
    h = lambda q: -float(np.sum(q * np.log(q)))
    total_correlation = sum(h(np.asarray([1 - m, m])) for m in marginals) - h(target)
    assert exact.kl == pytest.approx(total_correlation, abs=1e-12)


def test_li_cai_bound_is_tight_for_two_positions():
    """Two positions unmasked together: the error is I(X_1; X_2), and so is the bound."""
    model = ising.ising_model(np.asarray([[0.0, 1.1], [1.1, 0.0]]), np.asarray([0.2, -0.4]))
    p = np.asarray(ising.probabilities(model)).reshape(2, 2)
    mi = float(np.sum(p * np.log(p / np.outer(p.sum(1), p.sum(0)))))
    rule = um.random_order(2, 1)
    assert um.exact_law(model, rule).kl == pytest.approx(mi, abs=1e-12)
    assert um.mutual_information_sum(model) == pytest.approx(2 * mi, abs=1e-12)
    assert um.li_cai_bound(model, rule) == pytest.approx(mi, abs=1e-12)


def test_li_cai_bound_holds_and_vanishes_with_one_position_a_pass(strong_model):
    for T in range(1, N + 1):
        rule = um.random_order(N, T)
        assert um.exact_law(strong_model, rule).kl <= um.li_cai_bound(strong_model, rule) + 1e-12
    assert um.li_cai_bound(strong_model, um.random_order(N, N)) == 0.0
    with pytest.raises(ValueError, match="adaptive"):
        um.li_cai_bound(strong_model, um.threshold(N, 0.9))


def test_schedules_and_dilation():
    assert um.top_k(10, 4).counts == (3, 2, 3, 2)
    assert dilated_passes(8, 8).tolist() == [0, 3, 2, 3, 1, 3, 2, 3]
    assert dilated_passes(5, 2).tolist() == [0, 1, 2, 3, 4]
    assert dilated_passes(10, 4).tolist() == [0, 2, 1, 2, 3, 5, 4, 5, 6, 7]
    assert um.make_rule("dilated", 8, 4.0).label == "dilated (B = 4)"


@pytest.mark.parametrize("call,match", [
    (lambda: um.threshold(4, 1.5), r"tau must be a finite number in \[0, 1\]"),
    (lambda: um.threshold(4, float("nan")), "finite"),
    (lambda: um.factor(4, 0.0), "f must be"),
    (lambda: um.entropy_bound(4, -1.0), "gamma must be"),
    (lambda: um.dilated(4, 3), "power of two"),
    (lambda: um.top_k(4, 5), r"T \(the number of passes\)"),
    (lambda: um.top_k(4, 2.5), r"T \(the number of passes\)"),
    (lambda: um.random_order(0, 1), "n must be"),
    (lambda: um.dependency(4, 0.9, np.ones((3, 3), bool)), "strong must be"),
    (lambda: um.make_rule("dependency", 4, 0.9), "needs strong="),
    (lambda: um.make_rule("greedy", 4, 0.9), "rule must be one of"),
])
def test_bad_rules_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_sampler_refuses_a_rule_for_another_n_and_both_decoders_a_model_that_is_none(strong_model):
    with pytest.raises(ValueError, match=f"rule is for n = {N - 1} positions but the model has n = {N}"):
        um.sampler(strong_model, um.make_rule("random", N - 1, 2))
    for decode in (um.exact_law, um.sampler):  # each checks its model before reading its size
        with pytest.raises(TypeError, match="model must be an IsingModel .*; got ndarray"):
            decode(np.zeros((N, N)), um.make_rule("random", N, 2))


def test_exact_law_stops_when_its_output_loses_mass(strong_model, monkeypatch):
    """The output law is checked to sum to one before its KL and TV are computed: a pass that dropped
    probability mass stops with the rule named, instead of a KL against a law that is not one."""
    spread = um._spread
    monkeypatch.setattr(um, "_spread", lambda *args: (lambda new, patterns, w: (new, patterns, 0.5 * w))(
        *spread(*args)))
    with pytest.raises(RuntimeError, match=r"exact_law lost mass: the output law sums to 0\.\d+, not 1 \(random"):
        um.exact_law(strong_model, um.make_rule("random", N, 2))


def test_site_statistics_of_a_certain_position_are_finite():
    """0 log 0 = 0: a position already certain has confidence 1 and entropy 0, not NaN."""
    for xp in (np, jax.numpy):
        conf, ent = um.site_statistics(xp.asarray([0.0, 1.0, 0.5]))
        assert np.allclose(np.asarray(conf), [1.0, 1.0, 0.5]) and np.allclose(np.asarray(ent), [0.0, 0.0, math.log(2)])


def test_a_rule_that_chooses_nothing_or_an_unmasked_position_is_named(strong_model):
    none = um.Rule("threshold", 0.5, N, lambda conf, ent, masked, t, key: jax.numpy.zeros_like(masked))
    first = um.Rule("threshold", 0.5, N,
                    lambda conf, ent, masked, t, key: jax.numpy.zeros_like(masked).at[..., 0].set(True))
    for rule in (none, first):  # nothing; position 0 again once it is unmasked
        with pytest.raises(RuntimeError, match="chose no masked position or an unmasked one at pass"):
            um.exact_law(strong_model, rule)


def test_rule_and_model_must_agree(strong_model):
    with pytest.raises(ValueError, match="n = 4"):
        um.exact_law(strong_model, um.threshold(5, 0.9))
    with pytest.raises(TypeError, match="Rule"):
        um.exact_law(strong_model, "threshold")
    with pytest.raises(ValueError, match="num_samples"):
        um.sample(jax.random.key(0), strong_model, um.threshold(4, 0.9), 0)
    out, passes = um.sample(jax.random.key(0), strong_model, um.threshold(4, 0.9), 1)  # one decode is a sample
    assert out.shape == (1, N) and set(np.asarray(out).ravel()) <= {-1, 1} and 1 <= int(passes[0]) <= N


def test_envelope_is_the_best_setting_within_the_budget():
    assert um.envelope([1, 2, 4], [0.5, 0.2, 0.0], 2.5) == 0.2
    assert um.envelope([1, 2, 4], [0.5, 0.2, 0.0], 2.0) == 0.2  # a setting that meets the budget exactly
    assert um.envelope([3, 4], [0.5, 0.2], 2.0) == math.inf


def test_families_are_what_they_say():
    fams = um.families(jax.random.key(0), 6)
    assert set(um.STRONG_FAMILIES) <= set(fams)
    assert np.all(np.asarray(fams["independent"].J) == 0)
    # its fields are N(0, field^2): on 400 sites their spread is field to within 20% (sd of the estimate: 3.5%)
    fields = np.asarray(um.families(jax.random.key(1), 400, field=0.5)["independent"].h)
    assert np.std(fields) == pytest.approx(0.5, rel=0.2)
    J = np.asarray(fams["ferromagnet"].J)
    assert np.all(J[~np.eye(6, dtype=bool)] == 0.25) and np.all(np.asarray(fams["ferromagnet"].h) == 0)
    assert np.abs(np.asarray(fams["strong random"].J)).max() > np.abs(np.asarray(fams["weak random"].J)).max()
    assert set(um.families(jax.random.key(0), 2)) == set(fams)  # two sites: the smallest
    coupled = np.abs(np.asarray(fams["clique"].J)).sum(1) > 0
    assert coupled.sum() == 3  # Eq. 6: n // 2 of the 6 sites form the clique
    for bad in (1, 0, 6.0, True):
        with pytest.raises(ValueError, match="n must be an integer >= 2"):
            um.families(jax.random.key(0), bad)


def test_max_batch_and_rhs(strong_model):
    assert um.exact_law(strong_model, um.top_k(N, 2)).max_batch == 2
    assert um.exact_law(strong_model, um.dilated(N, 2)).max_batch == 1
    adaptive = um.exact_law(strong_model, um.threshold(N, 0.5))
    assert adaptive.max_batch == N  # every confidence is >= 0.5: all at once
    assert um.li_cai_rhs(strong_model, 3) == pytest.approx(3 / N * um.mutual_information_sum(strong_model))
    with pytest.raises(ValueError, match="s_max"):
        um.li_cai_rhs(strong_model, 0)


def test_states_of_probability_zero_leave_the_exact_law_exact():
    """Couplings of 1e3 on three sites: six of the eight states' probabilities underflow to 0 in
    float64, and so do the patterns the exact law's conditionals divide by. The exact law of each rule
    stays a probability vector, here the target itself (one site drawn, the others then sure); the
    mutual information sum is 3 log 2 (each site and its complement share one bit)."""
    model = ising.ising_model(1e3 * (1 - np.eye(3)), np.zeros(3))
    target = np.asarray(ising.probabilities(model))
    assert (target == 0).sum() == 6
    for rule, passes in ((um.entropy_bound(3, 0.05), 2), (um.threshold(3, 0.9), 2), (um.top_k(3, 3), 3)):
        exact = um.exact_law(model, rule)
        np.testing.assert_allclose(exact.law, target, atol=1e-15)
        assert exact.passes == passes and exact.kl == pytest.approx(0.0, abs=1e-15)
    assert um.mutual_information_sum(model) == pytest.approx(3 * math.log(2), abs=1e-12)


def test_chi_square_check_pools_the_rare_states_as_written():
    """By hand on two sites (states --, -+, +-, ++ at indices 0 to 3): 100 decodes against the law
    (0.5, 0.46, 0.03, 0.01) expect 50, 46, 3 and 1; the last two (each under 5) form one cell that
    expects 4 and holds their 5 + 2 decodes. A state expecting exactly 5 is not pooled."""
    states = np.array([[-1, -1], [-1, 1], [1, -1], [1, 1]])
    stat, dof, p = um.chi_square_check(np.repeat(states, [48, 45, 5, 2], axis=0), np.array([0.5, 0.46, 0.03, 0.01]))
    want = (48 - 50) ** 2 / 50 + (45 - 46) ** 2 / 46 + (7 - 4) ** 2 / 4
    assert stat == pytest.approx(want, rel=1e-12) and dof == 2
    assert p == pytest.approx(math.exp(-want / 2), rel=1e-9)  # chi-square with 2 degrees of freedom
    # expected 50, 40, 5, 5: no cell pooled (the empty pooled cell expects 0 and is dropped)
    stat, dof, _ = um.chi_square_check(np.repeat(states, [50, 40, 5, 5], axis=0), np.array([0.5, 0.4, 0.05, 0.05]))
    assert stat == pytest.approx(0.0, abs=1e-12) and dof == 3


def test_chi_square_check_accepts_the_law_and_rejects_another(strong_model):
    rule = um.threshold(N, 0.8)
    exact = um.exact_law(strong_model, rule)
    out, _ = um.sample(jax.random.key(11), strong_model, rule, 20_000)
    assert um.chi_square_check(out, exact.law)[2] > 1e-4
    assert um.chi_square_check(out, exact.target)[2] < 1e-6  # the decoder does not sample the model's law
    with pytest.raises(ValueError, match="probability vector"):
        um.chi_square_check(out, exact.law * 2)
    # the pooled cell of rare states counts even when it expects one decode or less
    half = np.array([[1]] * 500 + [[-1]] * 500)
    stat, dof, p = um.chi_square_check(half, np.array([0.999, 0.001]))
    assert dof == 1 and p < 1e-6


def _pick(rule, conf=None, ent=None, masked=None):
    n = rule.n
    conf = np.full(n, 0.5) if conf is None else np.asarray(conf, float)
    ent = np.zeros(n) if ent is None else np.asarray(ent, float)
    masked = np.ones(n, bool) if masked is None else np.asarray(masked)
    args = [jax.numpy.asarray(a) for a in (conf, ent, masked)]  # as the samplers pass them
    return np.flatnonzero(np.asarray(rule.select(*args, 0, jax.random.key(0)))).tolist()


def test_each_rule_takes_a_position_exactly_at_its_bound():
    """The rules' bounds, by hand, at equality (the reference above never meets one: its confidences
    are continuous): threshold takes a confidence equal to tau; factor needs (m + 1)(1 - c_(m)) < f
    strictly; the entropy bound and the dependency rule take a position whose charge equals gamma."""
    assert _pick(um.threshold(3, 0.5), conf=[0.9, 0.5, 0.25]) == [0, 1]
    assert _pick(um.threshold(3, 0.95), conf=[0.9, 0.5, 0.25]) == [0]  # none sure: the most confident
    # sorted confidences 0.75, 0.5: m = 1 gives 2 x 0.25 = 0.5, m = 2 gives 3 x 0.5 = 1.5
    assert _pick(um.factor(2, 1.5), conf=[0.5, 0.75]) == [1]
    assert _pick(um.factor(2, 1.5 + 1e-9), conf=[0.5, 0.75]) == [0, 1]
    assert _pick(um.factor(2, 0.5), conf=[0.5, 0.75]) == [1]  # at least one
    # increasing entropies 0.25, 0.25, 0.5: sum - max over the first m is 0, 0.25, 0.5
    ent = [0.5, 0.25, 0.25]
    assert _pick(um.entropy_bound(3, 0.5), ent=ent) == [0, 1, 2]
    assert _pick(um.entropy_bound(3, 0.5 - 1e-9), ent=ent) == [1, 2]
    every = np.ones((3, 3), bool)  # every pair dependent: the entropy bound itself
    assert _pick(um.dependency(3, 0.5, every), ent=ent) == [0, 1, 2]
    assert _pick(um.dependency(3, 0.5 - 1e-9, every), ent=ent) == [1, 2]
    assert um.threshold(3, 0.9).label == "threshold (τ = 0.9)" and um.top_k(8, 4).label == "top_k (T = 4)"


def test_the_dependency_rule_reads_a_pair_marked_one_way_round_as_dependent_both_ways():
    """``strong`` may mark each pair once (an upper triangle, say): positions 0 and 1 form one group
    whichever way round the pair is marked. Entropies 0.3, 0.2, 0.25 with gamma = 0.1: 1 first, 2 free
    (its own group), 0 would charge 0.2 in the group of 1; with no pair strong, all three are taken."""
    ent = [0.3, 0.2, 0.25]
    one_way = np.zeros((3, 3), bool)
    one_way[0, 1] = True
    for strong in (one_way, one_way.T, one_way | one_way.T):
        assert _pick(um.dependency(3, 0.1, strong), ent=ent) == [1, 2]
    assert _pick(um.dependency(3, 0.1, np.zeros((3, 3), bool)), ent=ent) == [0, 1, 2]


def test_dependent_groups_follow_long_chains_through_masked_positions_only():
    """components() joins the ends of a chain of n = 6 strong pairs (a path of 5 links, past one
    squaring's reach) while every position is masked, and splits it where a position is unmasked."""
    from gmlm_lib.core.unmasking import components

    chain = np.zeros((6, 6), bool)
    for i in range(5):
        chain[i, i + 1] = chain[i + 1, i] = True
    assert np.asarray(components(chain, np.ones(6, bool))).all()
    masked = np.array([True, True, False, True, True, True])
    reach = np.asarray(components(chain, masked))
    assert reach[0, 1] and reach[3, 5] and not reach[1, 3] and not reach[2].any() and not reach[:, 2].any()
    assert reach.sum() == 2 * 2 + 3 * 3


def test_the_exact_law_takes_models_up_to_its_size_limit():
    n = um.MAX_EXACT_UNMASK_N
    assert np.isclose(um._joint(ising.IsingModel(J=np.zeros((n, n)), h=np.zeros(n))).sum(), 1.0)
    with pytest.raises(ValueError, match=f"use n <= {n}; got n = {n + 1}"):
        um._joint(ising.IsingModel(J=np.zeros((n + 1, n + 1)), h=np.zeros(n + 1)))


def test_mutual_information_sum_by_hand_on_a_model_whose_sites_differ():
    """sum_i [H(X_i) + H(X_{-i}) - H(X)] from the enumerated law, on three sites with different fields
    and couplings (a symmetric model cannot tell X_i's marginal from its complement's)."""
    J, h = np.array([[0.0, 0.9, -0.3], [0.9, 0.0, 0.5], [-0.3, 0.5, 0.0]]), np.array([0.7, -0.2, 0.1])
    model = ising.ising_model(J, h)
    p = dict(zip(map(tuple, brute.states(3)), brute.probs(J, h)))  # the law summed by hand, not the library's

    def entropy(keep):  # H of the sites in keep
        marginal = {}
        for s, w in p.items():
            marginal[tuple(s[i] for i in keep)] = marginal.get(tuple(s[i] for i in keep), 0.0) + w
        return -sum(w * math.log(w) for w in marginal.values() if w > 0)

    want = sum(entropy([i]) + entropy([j for j in range(3) if j != i]) - entropy([0, 1, 2]) for i in range(3))
    assert entropy([0]) != pytest.approx(entropy([1, 2]), abs=1e-3)  # the sites differ
    assert um.mutual_information_sum(model) == pytest.approx(want, abs=1e-12)


def test_select_with_gives_the_rules_own_selection_and_refuses_a_rule_without_one_numeric_parameter():
    from gmlm_lib.core import unmasking

    for name, build in (("threshold", um.threshold), ("factor", um.factor), ("entropy", um.entropy_bound)):
        assert unmasking.select_with(name) is build(3, 0.5).select.func
    for name in ("random", "top_k", "dependency"):
        with pytest.raises(ValueError, match="select_with takes a rule with one numeric parameter"):
            unmasking.select_with(name)


@pytest.mark.parametrize("n", [1, 3, 5, 8, 9, 13])
def test_dilated_order_with_the_block_an_operand_selects_as_the_dilated_rule(n):
    """select_with("dilated"), the block size B a traced int32 (the translation decoder's operand, one program
    for every B), chooses exactly as dilated(n, B) for every B and every set of masked positions, including
    a partial last block and blocks wider than n (where its passes are not dense: the order is the same)."""
    from gmlm_lib.core import unmasking

    pick = unmasking.select_with("dilated")
    select = jax.jit(lambda B, masked: pick(B, jnp.zeros(n), jnp.zeros(n), masked, 0, None))
    masks = np.array([[(m >> i) & 1 for i in range(n)] for m in range(1, 2 ** n, max(1, 2 ** n // 300))], bool)
    for B in (2, 4, 8, 16):
        want = unmasking.dilated(n, B).select
        order = np.asarray(unmasking.dilated_order(n, np.int32(B)))
        _, dense = np.unique(order, return_inverse=True)
        np.testing.assert_array_equal(dense.reshape(-1), unmasking.dilated_passes(n, B))
        for masked in masks:
            got = np.asarray(select(jnp.int32(B), masked))
            np.testing.assert_array_equal(got, np.asarray(want(jnp.zeros(n), jnp.zeros(n), masked, 0, None)))
            assert got.any() and not (got & ~masked).any()
    assert select._cache_size() == 1


# --- The error of every pass (batch_correlations) ------------------------------------------------


def _reference_batches(model, name, param):
    """(pass, |A|, mass, total correlation of x_A given x_U, entropy charge) of every batch, by the
    recursion of _reference over partial states, the conditional law of x_A summed from the joint."""
    records = []

    def h(qs):
        return -sum(q * math.log(q) for q in qs if q > 0)

    def visit(t, x, A, mass, pu, p):
        agree = {s: w for s, w in p.items() if all(v == 0 or v == s[i] for i, v in enumerate(x))}
        z = sum(agree.values())
        law = {}
        for s, w in agree.items():
            law[tuple(s[i] for i in A)] = law.get(tuple(s[i] for i in A), 0.0) + w / z
        marginal = [h([pu[i], 1 - pu[i]]) for i in A]
        records.append((t + 1, len(A), mass, sum(marginal) - h(law.values()), sum(marginal) - max(marginal)))

    _reference(model, name, param, visit)
    return np.asarray(records)


@pytest.mark.parametrize("name,param", [("random", 2), ("top_k", 1), ("threshold", 0.7), ("entropy", 0.05),
                                        ("entropy", 1.0), ("dilated", 4), ("dependency", 0.3)])
def test_the_error_of_every_pass_matches_brute_force(strong_model, name, param):
    """Per pass: the chance the decoder runs it, the expected and the largest total correlation of its
    batch, and the expected charge, against the plain recursion over partial states."""
    got = um.batch_correlations(strong_model, _rule(name, param, strong_model))
    ref = _reference_batches(strong_model, name, param)
    assert sorted(set(got["pass"].tolist())) == sorted(set(ref[:, 0].astype(int).tolist()))
    for t in set(got["pass"].tolist()):
        mine, theirs = got["pass"] == t, ref[:, 0] == t
        mass, tc, charge = got["mass"][mine], got["total_correlation"][mine], got["charge"][mine]
        assert mass.sum() == pytest.approx(ref[theirs, 2].sum(), abs=1e-12)
        assert mass @ tc == pytest.approx(ref[theirs, 2] @ ref[theirs, 3], abs=1e-12)
        assert mass @ charge == pytest.approx(ref[theirs, 2] @ ref[theirs, 4], abs=1e-12)
        assert tc.max() == pytest.approx(ref[theirs, 3].max(), abs=1e-12)
        assert mass @ got["size"][mine] == pytest.approx(ref[theirs, 2] @ ref[theirs, 1], abs=1e-12)
    # each pass runs as often as the decoder needs at least that many passes
    tail = np.cumsum(um.exact_law(strong_model, _rule(name, param, strong_model)).pass_law[::-1])[::-1]
    for t in set(got["pass"].tolist()):
        assert got["mass"][got["pass"] == t].sum() == pytest.approx(tail[t], abs=1e-12)


def test_one_pass_over_everything_costs_the_total_correlation_and_one_at_a_time_nothing(strong_model):
    once = um.batch_correlations(strong_model, um.top_k(N, 1))
    assert once["total_correlation"] == pytest.approx([um.exact_law(strong_model, um.top_k(N, 1)).kl], abs=1e-12)
    alone = um.batch_correlations(strong_model, um.top_k(N, N))
    assert np.all(alone["size"] == 1) and np.all(alone["total_correlation"] == 0.0) and np.all(alone["charge"] == 0.0)


@pytest.mark.parametrize("gamma", [0.02, 0.1, 0.5, 2.0])
def test_each_pass_of_the_entropy_bound_and_of_ours_on_the_exact_graph_errs_at_most_gamma(strong_model, gamma):
    """EB-Sampler keeps every batch's charge at most gamma, and the charge bounds the batch's error; our
    rule charges each group of dependent positions apart and, on the exact graph (J_ij != 0), still
    bounds every pass's error by gamma (the Markov property), with larger batches."""
    eb = um.batch_correlations(strong_model, um.entropy_bound(N, gamma))
    assert np.all(eb["total_correlation"] <= eb["charge"] + 1e-12) and np.all(eb["charge"] <= gamma + 1e-12)
    free = ising.ising_model(np.array([[0.0, 1.2, 0.0, 0.0], [1.2, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, -1.0],
                                       [0.0, 0.0, -1.0, 0.0]]), np.array([0.4, -0.3, 0.6, 0.1]))
    ours = um.batch_correlations(free, um.dependency(N, gamma, np.asarray(free.J) != 0))
    assert np.all(ours["total_correlation"] <= gamma + 1e-12)
    plain = um.batch_correlations(free, um.entropy_bound(N, gamma))
    mean_size = {name: r["mass"] @ r["size"] / r["mass"].sum() for name, r in (("ours", ours), ("plain", plain))}
    assert mean_size["ours"] >= mean_size["plain"] - 1e-12


def test_a_swept_rule_parameter_and_model_reuse_one_compiled_decoder():
    """Compile once: the exact law and the sampler take a rule's real parameter and the model as
    operands, so a sweep over ``tau``, ``T`` or ``B``, another rule, or a second model of the same size
    compiles nothing new."""
    from gmlm_lib.core import timing

    first = ising.random_model(jax.random.key(0), 5, 1.0, 0.5)
    second = ising.random_model(jax.random.key(1), 5, 0.5, 0.5)
    for name, value in (("threshold", 0.5), ("entropy", 0.5), ("top_k", 2), ("dilated", 2)):
        um.exact_law(first, um.make_rule(name, 5, value))
        um.sample(jax.random.key(2), first, um.make_rule(name, 5, value), 64)
    clock = timing.compile_clock()
    for name, value in (("threshold", 0.9), ("entropy", 0.05), ("top_k", 4), ("dilated", 4), ("factor", 1.0),
                        ("random", 3)):  # and rule kinds not run before: one program serves every rule
        um.exact_law(second, um.make_rule(name, 5, value))
        um.sample(jax.random.key(3), second, um.make_rule(name, 5, value), 64)
    assert timing.compiles_since(clock)["compilations"] == 0
