"""The verdicts of the chapter on the 2025 parallel-decoding rules (``notebooks/parallel_rules.md``),
from its exact tables: whether Li and Cai's bound holds, how our rule compares with the best 2025
rule at equal expected passes, and which rule is best at each budget of passes.

Input tables (pandas):

* ``frontier``: one row per (family, rule, parameter) with columns ``family``, ``rule``, ``param``,
  ``passes`` (expected passes) and ``kl`` (exact KL(p || q)), from
  :func:`gmlm_lib.ising.unmasking.exact_law`;
* ``li_cai``: one row per (family, T) of the ``random`` rule with ``family``, ``T``, ``kl`` and
  ``bound`` (:func:`gmlm_lib.ising.unmasking.li_cai_bound`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from gmlm_lib.book.findings.rules import compare, grade
from gmlm_lib.book.validate import ChapterParams, numbers, positive_ints
from gmlm_lib.core.unmasking import RULES_2025
from gmlm_lib.ising.unmasking import MAX_EXACT_UNMASK_N, envelope

__all__ = ["RATIO_TARGET", "FLOOR", "Params", "ours_vs_best", "best_by_budget", "li_cai_check", "findings",
           "best_2025_by_T", "translation", "frontiers_agree", "delta_grid", "delta_by_budget", "delta_findings",
           "pass_errors", "pass_error_findings"]

RATIO_TARGET = 1.0
"""Ours "at least matches" the best 2025 rule when its exact KL is at most the best one's at every
budget of expected passes on the strong-coupling families: a ratio of at most 1."""

FLOOR = 1e-12
"""KLs at or below this are exact to rounding: two of them compare as equal."""

_FRONTIER = ("family", "rule", "param", "passes", "kl")
_LI_CAI = ("family", "T", "kl", "bound")


def _check(table, columns, name):
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame; got {type(table).__name__}.")
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"{name} lacks the columns {missing}; it needs {list(columns)}.")
    if table.empty:
        raise ValueError(f"{name} is empty: there is nothing to judge.")
    if table[[c for c in columns if c in ("passes", "kl", "bound")]].isna().any().any():
        raise ValueError(f"{name} has a missing passes/kl/bound value: a verdict is never drawn from one.")


def _budgets(budgets) -> list[float]:
    if not budgets or any(isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0 for b in budgets):
        raise ValueError(f"budgets must be a non-empty list of numbers of passes > 0; got {budgets!r}.")
    return [float(b) for b in budgets]


def ours_vs_best(frontier: pd.DataFrame, budgets, families, ours: str = "dependency",
                 rivals=RULES_2025) -> pd.DataFrame:
    """For each family and budget: our rule's best KL within the budget, the best rival's (by default
    over :data:`gmlm_lib.core.unmasking.RULES_2025` and their settings), which rule that is, and the
    ratio (ours over best; 1.0 when both are exact to rounding, ``inf`` when ours has no setting
    within the budget and the 2025 rule has)."""
    _check(frontier, _FRONTIER, "frontier")
    rows = []
    for family in families:
        part = frontier[frontier.family == family]
        if part.empty:
            raise ValueError(f"frontier has no rows for family {family!r}.")
        for budget in _budgets(budgets):
            mine = part[part.rule == ours]
            a = envelope(mine.passes, mine.kl, budget)
            best, best_rule = math.inf, None
            for rule in rivals:
                sub = part[part.rule == rule]
                b = envelope(sub.passes, sub.kl, budget)
                if b < best:
                    best, best_rule = b, rule
            if a <= FLOOR and best <= FLOOR:
                ratio = 1.0
            elif math.isinf(a):
                ratio = math.inf
            else:
                ratio = a / max(best, FLOOR)
            rows.append(dict(family=family, budget=budget, ours=a, best_2025=best, best_rule=best_rule, ratio=ratio))
    return pd.DataFrame(rows)


def best_by_budget(frontier: pd.DataFrame, budgets) -> pd.DataFrame:
    """For each family and budget, the rule (ours included) whose best setting within the budget has
    the smallest exact KL, and that KL; rules within :data:`FLOOR` of it are listed together."""
    _check(frontier, _FRONTIER, "frontier")
    rows = []
    for family, part in frontier.groupby("family", sort=False):
        for budget in _budgets(budgets):
            env = {rule: envelope(sub.passes, sub.kl, budget) for rule, sub in part.groupby("rule", sort=False)}
            best = min(env.values())
            winners = [r for r, v in env.items() if v <= best + FLOOR] if math.isfinite(best) else []
            rows.append(dict(family=family, budget=budget, best=", ".join(winners) or "none within budget", kl=best))
    return pd.DataFrame(rows)


def li_cai_check(li_cai: pd.DataFrame) -> pd.DataFrame:
    """``li_cai`` with ``ratio`` = kl / bound (0 when both vanish) and ``holds`` = kl <= bound (+1e-12)."""
    _check(li_cai, _LI_CAI, "li_cai")
    out = li_cai.copy()
    out["holds"] = out.kl <= out.bound + FLOOR
    out["ratio"] = [0.0 if b <= FLOOR and k <= FLOOR else (k / b if b > 0 else math.inf)
                    for k, b in zip(out.kl, out.bound)]
    return out


def findings(frontier: pd.DataFrame, li_cai: pd.DataFrame, budgets, strong_families) -> dict:
    """Every value and verdict the chapter glues:

    * ``li_cai_violations`` (int) and ``li_cai_verdict`` ("holds on every model tested" or which fail);
      ``li_cai_tightest`` / ``li_cai_loosest``: the (family, T) with the largest and smallest ratio;
    * ``ours_vs_best_kl``: the largest ratio over the strong-coupling families and budgets,
      ``ours_target`` met/missed against :data:`RATIO_TARGET`, ``ours_missed_at``: where it is above 1;
    * ``best_rule_by_budget``: a short text, per budget, of the best rule on each strong-coupling family;
    * ``ours_vs_entropy``: the largest ratio of ours to EB-Sampler's rule alone over every family and
      budget, ``ours_beats_entropy`` in how many of the ``comparisons`` ours is strictly better.
    """
    checked = li_cai_check(li_cai)
    bad = checked[~checked.holds]
    violations = int(bad.family.nunique())
    positive = checked[checked.bound > FLOOR]
    tight = positive.loc[positive.ratio.idxmax()] if not positive.empty else None
    loose = positive.loc[positive.ratio.idxmin()] if not positive.empty else None
    versus = ours_vs_best(frontier, budgets, strong_families)
    worst = float(versus.ratio.max())
    families = list(dict.fromkeys(frontier.family))
    eb = ours_vs_best(frontier, budgets, families, rivals=("entropy",))
    above = versus[versus.ratio > RATIO_TARGET]
    best = best_by_budget(frontier[frontier.family.isin(list(strong_families))], budgets)
    by_budget = []
    for budget, part in best.groupby("budget", sort=True):
        winners: dict[str, list[str]] = {}
        for row in part.itertuples():
            winners.setdefault(row.best, []).append(row.family)
        by_budget.append(f"{budget:g} passes: " + ", ".join(f"{rule} ({', '.join(fams)})"
                                                            for rule, fams in winners.items()))
    return dict(
        li_cai_violations=violations,
        li_cai_verdict=("holds on every model tested" if violations == 0 else
                        "fails on " + ", ".join(sorted(bad.family.unique()))),
        li_cai_tightest=None if tight is None else f"{tight.family}, T = {int(tight['T'])} (KL / bound = {tight.ratio:.2f})",
        li_cai_loosest=None if loose is None else f"{loose.family}, T = {int(loose['T'])} (KL / bound = {loose.ratio:.3f})",
        ours_vs_best_kl=worst,
        ours_target="missed" if math.isinf(worst) else grade(worst, RATIO_TARGET, at_least=False),
        ours_missed_at=("nowhere" if above.empty else
                        "; ".join(f"{r.family} at {r.budget:g} passes ({'no setting' if math.isinf(r.ratio) else f'{r.ratio:.2f}x'})"
                                  for r in above.itertuples())),
        best_rule_by_budget="; ".join(by_budget),
        ours_vs_entropy=float(eb.ratio.max()),
        ours_beats_entropy=int((eb.ratio < 1.0 - 1e-9).sum()),
        comparisons=int(eb.shape[0]),
    )


# --- the exercises: how far to drop weak couplings, and how tight the entropy bound is ----------------

def delta_grid(couplings) -> list[float]:
    """Exercise ``ex-rules-delta``: the thresholds ``delta`` at which to try our rule, from the exact graph
    to no graph: 0 (every coupled pair), the quartiles of the couplings' sizes ``|J_ij|`` (``couplings``,
    one a pair), and the next float above the largest (no pair: every position at once). Increasing,
    without repeats."""
    sizes = np.abs(np.asarray(couplings, dtype=np.float64)).reshape(-1)
    if sizes.size == 0 or not np.isfinite(sizes).all():
        raise ValueError(f"delta_grid: couplings must be a non-empty array of finite |J_ij|; got {couplings!r}.")
    grid = [0.0, *np.quantile(sizes, [0.25, 0.5, 0.75]).tolist(), float(np.nextafter(sizes.max(), np.inf))]
    return sorted(set(float(d) for d in grid))


def delta_by_budget(sweep: pd.DataFrame, budgets) -> pd.DataFrame:
    """Exercise ``ex-rules-delta``: ``sweep`` one row per (``delta``, ``gamma``) of our rule with its
    exact ``passes`` and ``kl``; for each ``delta`` (rows, increasing) and budget (columns), the best
    exact KL of its settings within the budget (:func:`gmlm_lib.ising.unmasking.envelope`; ``inf``
    when none fits)."""
    _check(sweep, ("delta", "gamma", "passes", "kl"), "sweep")
    budgets = _budgets(budgets)
    rows = {float(d): {b: envelope(part.passes, part.kl, b) for b in budgets}
            for d, part in sweep.groupby("delta", sort=True)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("delta")


def delta_findings(table: pd.DataFrame) -> dict:
    """The glued values of exercise ``ex-rules-delta`` from :func:`delta_by_budget`'s table:
    ``ex_delta_best`` (per budget, the thresholds whose KL is the smallest, within :data:`FLOOR`: "2
    passes: 0.05; ..."; "none fits" where no setting meets the budget) and ``ex_delta_exact_best`` /
    ``ex_delta_budgets`` (at how many of the budgets the exact graph, ``delta = 0``, is among the best)."""
    if 0.0 not in table.index:
        raise ValueError("delta_findings: the table has no row delta = 0 (the exact graph) to compare with.")
    parts, exact_best = [], 0
    for budget in table.columns:
        column = table[budget].astype(float)
        best = float(column.min())
        if math.isinf(best):
            parts.append(f"{budget:g} passes: none fits")
            continue
        winners = [d for d, v in column.items() if v <= best + FLOOR]
        exact_best += 0.0 in winners
        parts.append(f"{budget:g} passes: " + ", ".join(f"{d:.3g}" for d in winners))
    return dict(ex_delta_best="; ".join(parts), ex_delta_exact_best=int(exact_best), ex_delta_budgets=len(table.columns))


def pass_errors(records: dict, gamma: float) -> dict:
    """Exercise ``ex-rules-entropy``: one rule's pass-by-pass errors, from
    :func:`gmlm_lib.ising.unmasking.batch_correlations` (arrays ``pass``, ``size``, ``mass``,
    ``total_correlation``, ``charge``) of a rule run with entropy budget ``gamma``: ``passes`` (expected),
    ``largest`` (the largest total correlation of any batch drawn with positive probability),
    ``largest_over_gamma``, ``mean`` (its mean over the passes the decoder runs, each weighted by its
    probability), ``mean_over_gamma``, ``mean_charge`` and ``holds`` (``largest <= gamma`` up to
    :data:`FLOOR`: every pass errs by at most ``gamma``)."""
    gamma = float(gamma)
    if not math.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"pass_errors: gamma must be a positive number of nats; got {gamma!r}.")
    missing = [k for k in ("pass", "mass", "total_correlation", "charge") if k not in records]
    if missing:
        raise ValueError(f"pass_errors: records lack {missing} (pass batch_correlations' output).")
    mass, tc = np.asarray(records["mass"], np.float64), np.asarray(records["total_correlation"], np.float64)
    if mass.size == 0 or not (np.isfinite(mass).all() and np.isfinite(tc).all()):
        raise ValueError("pass_errors: no batch, or a non-finite mass or error: nothing to judge.")
    live = mass > 0
    largest = float(tc[live].max())
    mean = float(mass @ tc / mass.sum())
    return dict(gamma=gamma, passes=float(mass.sum()), largest=largest, largest_over_gamma=largest / gamma,
                mean=mean, mean_over_gamma=mean / gamma,
                mean_charge=float(mass @ np.asarray(records["charge"], np.float64) / mass.sum()),
                holds=bool(largest <= gamma + FLOOR))


def pass_error_findings(table: pd.DataFrame) -> dict:
    """The glued values of exercise ``ex-rules-entropy`` from one row of :func:`pass_errors` per (``rule``,
    ``gamma``): ``ex_tc_holds`` ("on every path of every setting" or where it fails), and per rule
    ``ex_tc_<rule>_largest`` / ``ex_tc_<rule>_mean``: the largest ``largest_over_gamma`` and
    ``mean_over_gamma`` over its settings (how much of its budget a pass uses at most, and on average)."""
    _check(table, ("rule", "gamma", "largest_over_gamma", "mean_over_gamma", "holds"), "table")
    failed = table[~table.holds.astype(bool)]
    out = dict(ex_tc_holds="on every path of every setting" if failed.empty else
               "not everywhere: " + "; ".join(f"{r.rule} at gamma = {r.gamma:g}" for r in failed.itertuples()))
    for rule, part in table.groupby("rule", sort=False):
        out[f"ex_tc_{rule}_largest"] = float(part.largest_over_gamma.max())
        out[f"ex_tc_{rule}_mean"] = float(part.mean_over_gamma.max())
    return out


def best_2025_by_T(table: pd.DataFrame) -> dict:
    """T -> the 2025 rule with the highest BLEU at that T (``table``: columns ``T``, ``rule``, ``BLEU``;
    the translation rule names of :data:`gmlm_lib.mt.decoding.RULE_STRATEGIES`)."""
    _check(table, ("T", "rule", "BLEU"), "table")
    out = {}
    for T, part in table.groupby("T", sort=True):
        rivals = part[part.rule.isin(RULES_2025)]
        if rivals.empty:
            raise ValueError(f"table has no 2025 rule at T = {T}: nothing to compare ours with.")
        out[int(T)] = str(rivals.loc[rivals.BLEU.idxmax(), "rule"])
    return out


def translation(table: pd.DataFrame, p_values: dict, *, ours: str = "dependency_entropy", at_T: int = 4) -> dict:
    """The translation verdicts: ``table`` one row per (T, rule) with ``BLEU`` (test set);
    ``p_values`` T -> the paired-bootstrap p-value of ours against the best 2025 rule at that T
    (:func:`best_2025_by_T`). Returns ``ours_vs_best_bleu`` and ``ours_vs_best_p`` (at ``at_T``),
    ``best_rule_by_T`` (the best rule at each T, ours included), ``ours_worse_at`` (the T where ours
    is significantly worse), and ``rules_target``: met when ours is significantly worse at no T."""
    _check(table, ("T", "rule", "BLEU"), "table")
    best = best_2025_by_T(table)
    if set(best) != {int(t) for t in p_values}:
        raise ValueError(f"p_values must give one p-value for each T of the table {sorted(best)}; got "
                         f"{sorted(p_values)}.")
    bleu = {(int(t), r): float(b) for t, r, b in zip(table["T"], table.rule, table.BLEU)}
    if at_T not in best or (at_T, ours) not in bleu:
        raise ValueError(f"the table needs ours ({ours!r}) and a 2025 rule at T = {at_T}.")
    worse = [T for T in sorted(best) if (T, ours) in bleu
             and compare(bleu[(T, ours)] - bleu[(T, best[T])], p_values[T]) < 0]
    by_T = []
    for T, part in table.groupby("T", sort=True):
        top = part.loc[part.BLEU.idxmax()]
        by_T.append(f"T = {int(T)}: {top.rule} ({top.BLEU:.1f})")
    return dict(
        ours_vs_best_bleu=bleu[(at_T, ours)] - bleu[(at_T, best[at_T])],
        ours_vs_best_p=float(p_values[at_T]),
        best_2025_at_T=best[at_T],
        best_rule_by_T="; ".join(by_T),
        ours_worse_at=", ".join(f"T = {T}" for T in worse) or "no T",
        rules_target="missed" if worse else "met",
    )


def frontiers_agree(ising_target: str, translation_target: str) -> tuple[str, str]:
    """Whether the exact Ising comparison and the translation frontier tell the same story about our
    rule against the best 2025 rule: ``ising_target`` is :func:`findings`' ``ours_target`` (met: its
    exact KL at most the best rule's at every budget on the strong-coupling families) and
    ``translation_target`` is :func:`translation`'s ``rules_target`` (met: significantly worse at no
    T). Returns ``("agree" or "disagree", a clause saying how)``."""
    for name, value in (("ising_target", ising_target), ("translation_target", translation_target)):
        if value not in ("met", "missed"):
            raise ValueError(f"{name} must be 'met' or 'missed' (a graded target of the chapters); got {value!r}.")
    return {
        ("met", "met"): ("agree", "ours matches the best 2025 rule in both"),
        ("missed", "missed"): ("agree", "ours falls short of the best 2025 rule in both"),
        ("met", "missed"): ("disagree", "ours matches the best 2025 rule exactly on the Ising testbed but is "
                                        "significantly worse on translation"),
        ("missed", "met"): ("disagree", "ours falls short of the best 2025 rule on the Ising testbed but is not "
                                        "significantly worse on translation"),
    }[(ising_target, translation_target)]


@dataclasses.dataclass(frozen=True)
class Params(ChapterParams):
    """The parameters of ``notebooks/parallel_rules.md`` (their meaning: its parameters cell), checked when
    built: exact enumeration visits ``3^n`` partial states (``n`` at most
    :data:`gmlm_lib.ising.unmasking.MAX_EXACT_UNMASK_N`), the fixed schedules take at most ``n`` passes,
    the thresholds are probabilities, DUS blocks are powers of two."""

    def check(self) -> None:
        self.integer("n", 4, MAX_EXACT_UNMASK_N, "exact enumeration visits 3^n partial states")
        for name in ("weak", "strong", "field", "clique_J", "ferro_J", "delta"):
            self.number(name, 0)
        self.integers("schedules", 1, self.n, "numbers of passes")
        for name in ("taus", "factors", "gammas", "budgets"):
            self.need(numbers(getattr(self, name)) and min(getattr(self, name)) > 0, name,
                      "a non-empty list of numbers > 0")
        self.need(max(self.taus) <= 1, "taus", "confidence thresholds in (0, 1]")
        self.need(positive_ints(self.blocks, 2) and all(b & (b - 1) == 0 for b in self.blocks), "blocks",
                  "a list of powers of two >= 2")
        self.integer("mc_samples", 100)

    # the fields: the parameters cell's names in its order (seed and install_ref: ChapterParams)
    n: int
    weak: float
    strong: float
    field: float
    clique_J: float
    ferro_J: float
    delta: float
    schedules: list
    taus: list
    factors: list
    gammas: list
    blocks: list
    budgets: list
    mc_samples: int
