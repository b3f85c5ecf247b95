"""The verdicts of the ablations chapter (``notebooks/ablations.md``) [Section 3.3, Appendix L.2].

Each of the paper's rules of thumb is one row of the chapter's table, compared with the baseline by the
book's one rule (:func:`gmlm_lib.book.findings.rules.compare`: paired bootstrap, p < ALPHA, a zero
difference never significant). The sentences stay in the chapter; this module returns the short words
and numbers they glue.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from gmlm_lib.book.findings.rules import ALPHA, compare, grade, holm, listed
from gmlm_lib.book.findings.reuse import ReuseParams
from gmlm_lib.book.validate import count, finite
from gmlm_lib.core import tables

__all__ = ["ACCELERATOR_SECONDS", "ACCELERATOR_STEPS", "BUDGET_MIN", "CPU_STEPS", "Params", "RESERVED", "STEPS_FLOOR",
           "VARIANTS", "WORDS", "choice_verdict", "rates", "grid", "budget_text", "steps_findings", "findings",
           "family", "family_findings", "front", "front_findings", "present_table"]

BUDGET_MIN = 120.0
"""The chapter's budget: training and evaluation, minutes."""
STEPS_FLOOR = 1200
"""Updates every variant should train for: ten times the 120 of the chapter's first run on 2 CPU cores."""
VARIANTS = {"stage": "1 training stage", "pos": "no positional attention", "dist": "no distillation",
            "remask": "no stutter re-masking", "init": "[MASK] initial hypothesis"}
"""Glue key prefix -> the table row that drops one of the baseline's choices."""
WORDS = {-1: "the baseline's choice is better", 1: "the variant is better here", 0: "no significant difference"}
"""How the variant compares with the baseline (:func:`~gmlm_lib.book.findings.rules.compare` of the variant
minus the baseline)."""


TABLE_FORMATS = {"BLEU": "bleu", "± 95%": "bleu", "Δ BLEU": "{:+.1f}", "p vs baseline": "p", "BLEU, seeds": "bleu",
                 "sd (seeds)": "{:.2f}", "chrF": "bleu", "stutter /100 words": "{:.2f}", "median ms": "ms",
                 "p99 ms": "ms"}
SEED_COLUMNS = ("BLEU, seeds", "sd (seeds)")
"""The one table's columns over the replicas (two or more: the accelerator preset; the CPU preset trains one)."""


def present_table(table: pd.DataFrame):
    """The chapter's one table as it shows it (a ``Styler``; the baseline's own p-value shown as missing),
    with the spread between seeds where the table has it: a lone replica's table has no seed columns."""
    formats = {name: f for name, f in TABLE_FORMATS.items() if name not in SEED_COLUMNS or name in table.columns}
    return tables.present(table, missing="baseline", formats=formats)


def _check(table: pd.DataFrame, columns) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing or "baseline" not in table.index:
        raise ValueError(f"the ablations table must have a 'baseline' row and the columns {list(columns)}; "
                         f"missing columns {missing}, rows {list(table.index)[:8]}.")


def _call(table: pd.DataFrame, name: str) -> int:
    return compare(float(table.loc[name, "BLEU"]) - float(table.loc["baseline", "BLEU"]),
                   float(table.loc[name, "p vs baseline"]))


def choice_verdict(table: pd.DataFrame, name: str) -> str:
    """One of :data:`WORDS`: row ``name`` (a variant) against the baseline row."""
    _check(table, ("BLEU", "p vs baseline"))
    return WORDS[_call(table, name)]


def rates(table: pd.DataFrame, base_rate: float, variant_rates: dict) -> dict:
    """The "mask a lot" rule of thumb. ``variant_rates``: table row -> its unmasking rate (rows with the
    baseline's rate are ignored). A rate above ``base_rate`` masks *less*; the paper's rule says each
    such rate should be worse. Returns ``unmask_line`` (every rate's BLEU, p against the baseline),
    ``unmask_best`` (the rate with the highest BLEU), ``unmask_less_better`` / ``unmask_less_worse`` (the
    rates that mask less and are significantly better / worse) and ``unmask_verdict``: "our numbers
    agree" (every such rate significantly worse), "our numbers partly agree" (some), "our numbers
    disagree" (one significantly better), "the test set cannot tell the rates apart", or "not tested"."""
    _check(table, ("BLEU", "p vs baseline"))
    pairs = sorted([(float(base_rate), "baseline")] + [(float(r), n) for n, r in variant_rates.items()
                                                        if float(r) != float(base_rate)])
    bleu = {n: float(table.loc[n, "BLEU"]) for _, n in pairs}
    line = "; ".join(f"unmasking {r:g} (masking {1 - r:.0%}): {bleu[n]:.1f}"
                     + ("" if n == "baseline" else f" (p = {float(table.loc[n, 'p vs baseline']):.3f})")
                     for r, n in pairs)
    calls = {r: _call(table, n) for r, n in pairs if r > base_rate}
    better, worse = [r for r, c in calls.items() if c > 0], [r for r, c in calls.items() if c < 0]
    if not calls:
        verdict = "not tested"
    elif better:
        verdict = "our numbers disagree"
    elif len(worse) == len(calls):
        verdict = "our numbers agree"
    elif worse:
        verdict = "our numbers partly agree"
    else:
        verdict = "the test set cannot tell the rates apart"
    return dict(unmask_line=line, unmask_best=f"{max(pairs, key=lambda x: bleu[x[1]])[0]:g}",
                unmask_less_better=listed(better), unmask_less_worse=listed(worse), unmask_verdict=verdict)


def grid(cells: pd.DataFrame) -> dict:
    """The refinement grid: ``cells`` one row per (T, #hyp) with ``T``, ``hyps``, ``BLEU`` and
    ``median ms``. Returns the best cell (``grid_best_T``, ``grid_best_hyps``, ``grid_best_bleu``,
    ``grid_best_ms``) and the best single-pass cell (``grid_t1_*``; the best cell when T = 1 was not run)."""
    best = cells.sort_values("BLEU").iloc[-1]
    one = cells[cells["T"] == 1]
    t1 = one.sort_values("BLEU").iloc[-1] if len(one) else best
    out = {}
    for key, row in (("grid_best", best), ("grid_t1", t1)):
        out.update({f"{key}_T": int(row["T"]), f"{key}_hyps": int(row["hyps"]), f"{key}_bleu": float(row["BLEU"]),
                    f"{key}_ms": float(row["median ms"])})
    return out


def budget_text(fitted: dict) -> str:
    """How the updates of every model trained here were fitted to the wall-time budget, in words, from
    the record of :func:`gmlm_lib.mt.sizing.fit_config` (``asked``/``used`` updates a model, ``seconds``,
    ``update_s``)."""
    asked, used, seconds, per = fitted["asked"], fitted["used"], fitted["seconds"], fitted["update_s"]
    if not seconds:
        return f"{used:,} updates a model (no wall-time budget)"
    rate = f"; an update takes {per * 1e3:.1f} ms here" if per else ""
    if used >= asked:
        return f"{used:,} updates a model, within the {seconds:.0f} s budget{rate}"
    return (f"{used:,} updates a model: the {asked:,} asked for would not fit the {seconds:.0f} s budget, so each "
            f"trains {used / asked:.2f} of them{rate}")


def steps_findings(used: int) -> dict:
    """``steps_met``: whether every variant trained for at least :data:`STEPS_FLOOR` updates ("met"/"missed")."""
    return dict(steps_floor=STEPS_FLOOR, steps_met=grade(used, STEPS_FLOOR, at_least=True))


def findings(table: pd.DataFrame, cells: pd.DataFrame, *, base_rate: float, variant_rates: dict, train_min: float,
             eval_min: float) -> dict:
    """Every verdict and derived number of the chapter's recommendations and box: ``{key}_verdict``,
    ``{key}_bleu`` and ``{key}_p`` for each of :data:`VARIANTS` ("not run" and NaN for a row the table
    lacks), :func:`rates`, :func:`grid`, ``choices_supported`` (how many of the four training-time rules,
    mask a lot, two stages, positional attention and distillation, beat their ablation significantly; the
    masking rule only when every rate that masks less is significantly worse), the stutter of the baseline and two variants, the time spent and
    ``budget_met`` against :data:`BUDGET_MIN`, and ``p_significant`` (the book's ALPHA)."""
    _check(table, ("BLEU", "p vs baseline", "stutter /100 words"))
    out = dict(base_bleu=float(table.loc["baseline", "BLEU"]), p_significant=ALPHA, budget_min=BUDGET_MIN,
               total_train_min=float(train_min), eval_min=float(eval_min), total_min=float(train_min + eval_min),
               budget_met=grade(train_min + eval_min, BUDGET_MIN, at_least=False),
               base_stutter=float(table.loc["baseline", "stutter /100 words"]))
    for key, name in VARIANTS.items():
        run = name in table.index
        out[f"{key}_verdict"] = choice_verdict(table, name) if run else "not run"
        out[f"{key}_bleu"] = float(table.loc[name, "BLEU"]) if run else float("nan")
        out[f"{key}_p"] = float(table.loc[name, "p vs baseline"]) if run else float("nan")
        if key in ("dist", "remask"):
            out[f"{key}_stutter"] = float(table.loc[name, "stutter /100 words"]) if run else float("nan")
    out.update(rates(table, base_rate, variant_rates))
    out["choices_supported"] = sum(out[f"{key}_verdict"] == WORDS[-1] for key in ("stage", "pos", "dist")) + \
        (out["unmask_verdict"] == "our numbers agree")
    return {**out, **grid(cells)}


# --- the exercises: the table's verdicts as one family, and the decoding settings worth using -----------

def family(table: pd.DataFrame) -> pd.DataFrame:
    """Exercise ``ex-ablation-family``: every row compared with the baseline, judged together by
    :func:`~gmlm_lib.book.findings.rules.holm` instead of one at a time. The family is each row with a
    nonzero BLEU difference (a difference of exactly zero is never significant by the book's rule, so it
    tests nothing). Holm's table (smallest p first) with the row's ``difference`` (BLEU less the
    baseline's) and ``call``: "better" or "worse" when significant in the family, "no significant
    difference" otherwise."""
    _check(table, ("BLEU", "p vs baseline"))
    difference = table["BLEU"].drop("baseline") - float(table.loc["baseline", "BLEU"])
    tested = difference[difference != 0.0]
    if tested.empty:  # nothing to test: an empty table with the columns
        return pd.DataFrame(columns=["difference", "p", "threshold", "adjusted", "alone", "holm", "call"])
    out = holm({name: float(table.loc[name, "p vs baseline"]) for name in tested.index})
    out.insert(0, "difference", tested.reindex(out.index))
    out["call"] = ["no significant difference" if not kept else "better" if d > 0 else "worse"
                   for d, kept in zip(out["difference"], out["holm"])]
    return out


def family_findings(table: pd.DataFrame) -> dict:
    """The glued values of exercise ``ex-ablation-family`` from :func:`family`'s table: ``ex_family_m`` (tests
    in the family), ``ex_family_alone`` / ``ex_family_holm`` (how many are significant alone / in the
    family) and ``ex_family_lost`` (those significant alone but not in the family, listed; "none")."""
    lost = [name for name, row in table.iterrows() if row["alone"] and not row["holm"]]
    return dict(ex_family_m=len(table), ex_family_alone=int(table["alone"].sum()),
                ex_family_holm=int(table["holm"].sum()), ex_family_lost=listed(lost))


def front(table: pd.DataFrame, rows, *, quality: str = "BLEU", cost: str = "median ms") -> pd.DataFrame:
    """Exercise ``ex-ablation-front``: which of ``rows`` (decoding settings of one model) no other of them
    beats on both counts: higher or equal ``quality`` at lower or equal ``cost``, one of the two strictly
    (the Pareto front). Returns those rows' ``quality`` and ``cost`` with ``on_front``, cheapest first."""
    rows = list(rows)
    _check(table, (quality, cost))
    unknown = [r for r in rows if r not in table.index]
    if not rows or unknown:
        raise ValueError(f"front: rows must name rows of the table; got {rows!r} (unknown: {unknown}).")
    q, c = table.loc[rows, quality].astype(float), table.loc[rows, cost].astype(float)
    if not (q.notna().all() and c.notna().all()):
        raise ValueError(f"front: a {quality!r} or {cost!r} value is missing among {rows}; a front needs both.")

    def beaten(r):
        return any(q[o] >= q[r] and c[o] <= c[r] and (q[o] > q[r] or c[o] < c[r]) for o in rows if o != r)

    out = pd.DataFrame({quality: q, cost: c, "on_front": [not beaten(r) for r in rows]}, index=rows)
    return out.sort_values([cost, quality], ascending=[True, False])


def front_findings(table: pd.DataFrame) -> dict:
    """The glued values of exercise ``ex-ablation-front`` from :func:`front`'s table: ``ex_front`` (the rows
    on the front, cheapest first, listed), ``ex_front_n`` / ``ex_front_of`` (how many, of how many) and
    ``ex_front_baseline`` ("on" or "off": whether the baseline's own setting is on it; "not compared"
    when the baseline is not among the rows)."""
    on = [name for name, flag in table["on_front"].items() if flag]
    base = "not compared" if "baseline" not in table.index else "on" if table.loc["baseline", "on_front"] else "off"
    return dict(ex_front=listed(on), ex_front_n=len(on), ex_front_of=len(table), ex_front_baseline=base)


ACCELERATOR_STEPS = STEPS_FLOOR
"""``variant_steps=None`` on a GPU or TPU: updates of the baseline and of every variant."""
CPU_STEPS = 120
"""``variant_steps=None`` on a CPU: the updates of the chapter's first run, its budget on 2 cores."""
ACCELERATOR_SECONDS = 300.0
"""``train_seconds=None`` on a GPU or TPU: the wall-time budget of every update trained in the chapter (room
for 7 models x 1,200 updates of up to 35 ms; a PaDIR update took 32 ms at the median on the first full-size
H200 run). On a CPU, None means no budget (0)."""
RESERVED = ("baseline", "no distillation", "no stutter re-masking")
"""Row names of the chapter's table that no variant may take (they are rows of their own)."""


@dataclasses.dataclass(frozen=True)
class Params(ReuseParams):
    """The parameters of the ablations chapter (their meaning: its parameters cell), checked when built.
    Three may be None, meaning "by backend": :meth:`resolved` fills them in before the chapter records them."""

    def check(self) -> None:
        self.check_reuse()
        self.need(isinstance(self.run_root, str), "run_root", "a string (empty: a fresh temporary folder)")
        self.need(self.variant_steps is None or count(self.variant_steps, 0), "variant_steps",
                  "None, 0 (the PaDIR chapter's padir_steps) or an integer >= 1 of updates")
        self.need(self.train_seconds is None or (finite(self.train_seconds) and 0 <= self.train_seconds < 1e9),
                  "train_seconds", "None, 0 (no budget) or a number of seconds > 0")
        self.need(isinstance(self.baseline_changes, dict), "baseline_changes", "a dict of TrainConfig or ModelConfig "
                  "fields, e.g. {'unmasking_rate': 0.1}, or {} for the PaDIR chapter's recipe")
        self.need(isinstance(self.variants, dict) and len(self.variants) > 0
                  and all(isinstance(k, str) and isinstance(v, dict) and v for k, v in self.variants.items()),
                  "variants", "a non-empty dict of name: {field: value} changes to the baseline, e.g. "
                  "{'1 training stage': {'stages': 1}}")
        self.need(not set(RESERVED) & set(self.variants), "variants",
                  f"names other than {sorted(RESERVED)} (rows of their own)")
        for name, why in (("eval_steps", "refinement passes"), ("eval_hyps", "length hypotheses"),
                          ("batch_size", "sentences a decoding batch"), ("latency_sentences", "timed at batch 1"),
                          ("bootstrap_samples", "paired-bootstrap resamples")):
            self.integer(name, 1, why=why)
        self.integers("grid_steps", 1)
        self.integers("grid_hyps", 1)

    def resolved(self, backend: str) -> "Params":
        """These parameters with each None filled in for ``backend`` (``jax.default_backend()``):
        ``variant_steps`` (:data:`ACCELERATOR_STEPS` on a GPU or TPU, :data:`CPU_STEPS` on a CPU),
        ``train_seconds`` (:data:`ACCELERATOR_SECONDS`, or 0: no budget) and ``decode_buckets``
        (:meth:`~gmlm_lib.book.findings.reuse.ReuseParams.resolved`: the preset's)."""
        from gmlm_lib.mt.config import ACCELERATORS

        accelerator = backend in ACCELERATORS  # as "auto" resolves the preset
        steps = ACCELERATOR_STEPS if accelerator else CPU_STEPS
        seconds = ACCELERATOR_SECONDS if accelerator else 0.0
        return dataclasses.replace(
            super().resolved(backend), variant_steps=steps if self.variant_steps is None else self.variant_steps,
            train_seconds=seconds if self.train_seconds is None else self.train_seconds)

    # the fields: the parameters cell's names in its order (the shared ones: ReuseParams and ChapterParams)
    variant_steps: int | None
    train_seconds: float | None
    baseline_changes: dict
    variants: dict
    run_root: str
    eval_steps: int
    eval_hyps: int
    grid_steps: list
    grid_hyps: list
    batch_size: int
    latency_sentences: int
    bootstrap_samples: int
