"""The PaDIR chapter's verdicts (``notebooks/padir.md``) [Sections 3.2-3.3, Appendix L].

:func:`findings` turns the chapter's quality, speed and cost tables into every number and word its
box glues, graded against :data:`TARGETS` by :func:`gmlm_lib.book.findings.rules.grade`; :func:`graded`
grades the quality targets again from every replica of the models and the test sentences together
(:func:`gmlm_lib.book.findings.rules.grade_interval`), the verdicts the box shows.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from gmlm_lib.book.findings.reuse import preset_names
from gmlm_lib.book.findings.rules import grade, grade_interval, listed, seed_sentence_interval, significant
from gmlm_lib.book.validate import ChapterParams, finite, require
from gmlm_lib.core import rng, tables
from gmlm_lib.mt import config

TARGETS = dict(
    beam_bleu_lc=39.0,  # AR beam, lowercased BLEU: the published Transformer-tiny on this test set reaches 41.0
    gap_greedy=1.0,  # distilled PaDIR at T = 4 at most this many (cased) BLEU below AR greedy
    median_speedup=2.0,  # batch-1 speed-up of PaDIR T = 4, #hyp = 1 over AR greedy; the paper: more than 2x
    p99_speedup=3.0,  # the same at the 99th percentile (the paper: more than 5x on TPU v3, WMT)
    latency_vs_bound=0.9,  # measured speed-up over the one the unit costs allow
    budget_min=120.0,  # training and distillation, minutes
)
"""The targets the chapter's box grades: ``*_speedup``, ``beam_bleu_lc`` and ``latency_vs_bound`` are
floors, ``gap_greedy`` and ``budget_min`` ceilings."""

PARITY = 0.05
"""A speed-up within this fraction of 1 (0.95x to 1.05x) is reported as parity, neither faster nor slower."""

SPEED_DECIMALS = 2
"""The decimals the chapter shows a speed-up with (its glue format ``:.2f``); :func:`speed_word` reads a
speed-up at them, and a test holds the chapter to them."""


def _one(frame: pd.DataFrame, what: str, **match) -> pd.Series:
    rows = frame
    for column, value in match.items():
        rows = rows[rows[column] == value]
    if len(rows) != 1:
        raise ValueError(f"findings: {what}: expected one row with {match}, found {len(rows)}.")
    return rows.iloc[0]


PASS_STEP_BAR = 1.5
"""A refinement pass over the first width costing less than this many cached AR steps reads "about what a
step costs": the premise of the paper's speed-ups, that on an accelerator at batch 1 both are bound by
reading the weights."""


def pass_reading(pass_per_step: float) -> str:
    """How the measured cost of one refinement pass, in cached AR steps, reads in a sentence: "about what a
    step costs" (below :data:`PASS_STEP_BAR`) or "more than a step"."""
    if not math.isfinite(pass_per_step) or pass_per_step <= 0:
        raise ValueError(f"pass_reading: a pass's cost in AR steps must be a positive number; got {pass_per_step!r}.")
    return "about what a step costs" if pass_per_step < PASS_STEP_BAR else "more than a step"


BUSY_BAR = 0.5
"""A traced batch-1 decode whose device was busy for less than this fraction of its wall time reads as
waiting-bound (launches, host round trips, copies set its latency), at or above it as compute-bound."""


def trace_reading(busy_fraction: float) -> str:
    """How the busy fraction of a traced batch-1 decode (:class:`gmlm_lib.core.devtrace.TraceSummary`)
    reads in a sentence: below :data:`BUSY_BAR` the device "mostly waited" (the operations' own time is
    not what sets the latency), else it "mostly computed"."""
    if not math.isfinite(busy_fraction) or not 0.0 <= busy_fraction <= 1.0 + 1e-6:
        raise ValueError(f"trace_reading: a busy fraction is a number from 0 to 1; got {busy_fraction!r}.")
    return "mostly waited" if busy_fraction < BUSY_BAR else "mostly computed"


def trace_texts(summary) -> tuple[str, str]:
    """A traced batch-1 decode (a :class:`gmlm_lib.core.devtrace.TraceSummary`, or ``None`` when the
    profiler recorded nothing) in two short texts for a sentence: its busy milliseconds of the untraced
    wall time ("1.2 of 4.0 ms (30%)") and :func:`trace_reading`'s words; ``("not measured", "was not
    traced")`` for ``None``."""
    if summary is None:
        return "not measured", "was not traced"
    return (f"{summary.busy_ms:.1f} of {summary.wall_ms:.1f} ms ({summary.busy_fraction:.0%})",
            trace_reading(summary.busy_fraction))


SPLIT_PARTS = {"busy_ms": "the device's work", "wait_ms": "waiting inside the program",
               "call_ms": "the call itself", "inputs_ms": "new input buffers", "host_ms": "the host's side"}
"""The shares of a batch-1 translation's time that :func:`time_split` separates, and their words."""


def time_split(parts: dict, busy_ms: float | None) -> dict:
    """Where one batch-1 translation's milliseconds go, from :func:`gmlm_lib.mt.decode_costs.call_parts`
    (``parts``: ``translate_ms``, ``program_ms``, ``empty_ms``, and ``fresh_ms`` when measured) and the
    device's busy time of the same translation (``busy_ms``, :class:`gmlm_lib.core.devtrace.TraceSummary`;
    ``None`` when it was not traced). Returns ``translate_ms`` and the shares of :data:`SPLIT_PARTS`, which
    add up to it: ``host_ms`` = translate - fresh (tokenising, detokenising, the copy of the output back);
    ``inputs_ms`` = fresh - program, what the decoder's call costs more on new input buffers than on the
    same ones (their copy to the device, and what the compiler redoes for buffers that moved); of the rest
    (the program on inputs already on the device), ``call_ms`` the empty call (a call with the decoder's
    arguments that runs none of its kernels), ``busy_ms`` the device's work and ``wait_ms`` what remains
    (kernel launches, a loop's condition read back to the host). Without ``fresh_ms``, ``inputs_ms`` is
    ``None`` and the host's side is translate - program. Each share is capped by what the ones before it
    leave, so none is below 0: the call times are fastest calls and the busy time a mean over traced
    calls, so their differences carry noise, and on a CPU the busy time is an upper bound (the profiler
    slows the operations there). ``busy_ms`` and ``wait_ms`` are ``None`` when not traced (then
    ``call_ms`` and the rest of the program are not told apart); ``largest``: the words of the largest
    share ("not traced" without a busy time)."""
    need = ("translate_ms", "program_ms", "empty_ms")
    missing = [k for k in need if k not in parts]
    if missing:
        raise ValueError(f"time_split: parts lacks {missing}; pass what decode_costs.call_parts returns.")
    given = [(k, parts[k]) for k in (*need, "fresh_ms") if k in parts]
    for name, value in given + ([("busy_ms", busy_ms)] if busy_ms is not None else []):
        if not finite(value) or value < 0:
            raise ValueError(f"time_split: {name} must be a finite number of ms >= 0; got {value!r}.")
    translate, program, empty = (float(parts[k]) for k in need)
    fresh = min(float(parts.get("fresh_ms", program)), translate)
    rest = min(program, fresh)
    call = min(empty, rest)
    inputs = fresh - rest if "fresh_ms" in parts else None
    out = dict(translate_ms=translate, host_ms=translate - fresh, inputs_ms=inputs, call_ms=call, busy_ms=None,
               wait_ms=None, largest="not traced")
    if busy_ms is not None:
        busy = min(float(busy_ms), rest - call)
        out.update(busy_ms=busy, wait_ms=rest - call - busy)
        out["largest"] = SPLIT_PARTS[max((k for k in SPLIT_PARTS if out[k] is not None), key=lambda k: out[k])]
    return out


def split_text(split: dict) -> str:
    """A :func:`time_split` in a short text for a sentence: "device 1.0, waiting 1.9, call 0.1, inputs 0.2,
    host 0.4 of 3.6 ms" (one decimal; no inputs share when it was not measured), or without a busy time
    "program 3.0, inputs 0.2, host 0.4 of 3.6 ms"."""
    inputs = "" if split.get("inputs_ms") is None else f"inputs {split['inputs_ms']:.1f}, "
    if split["busy_ms"] is None:
        program = split["translate_ms"] - split["host_ms"] - (split.get("inputs_ms") or 0.0)
        return f"program {program:.1f}, {inputs}host {split['host_ms']:.1f} of {split['translate_ms']:.1f} ms"
    return (f"device {split['busy_ms']:.1f}, waiting {split['wait_ms']:.1f}, call {split['call_ms']:.1f}, "
            f"{inputs}host {split['host_ms']:.1f} of {split['translate_ms']:.1f} ms")


def split_texts(split: dict | None) -> tuple[str, str]:
    """A :func:`time_split` (``None`` when the system was not measured) as the chapter glues it: its
    :func:`split_text` and the words of its largest share; ``("not measured", "not measured")`` for ``None``."""
    if split is None:
        return "not measured", "not measured"
    return split_text(split), split["largest"]


SPLIT_COLUMNS = {"translate_ms": "translation", "busy_ms": "device busy", "wait_ms": "waiting in program",
                 "call_ms": "empty call", "inputs_ms": "new inputs", "host_ms": "host side"}
"""The columns of :func:`split_table`, in order, each in milliseconds."""


def split_table(splits: dict) -> pd.DataFrame:
    """One row per system (``splits``: label -> :func:`time_split`), the :data:`SPLIT_COLUMNS` in ms
    (NaN where not traced) and the largest share in words."""
    if not splits:
        raise ValueError("split_table: no system to show; pass {label: time_split(...)}.")
    rows = {label: {**{title: (math.nan if s.get(k) is None else s[k]) for k, title in SPLIT_COLUMNS.items()},
                    "largest share": s["largest"]} for label, s in splits.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


def host_output_text(choice: dict) -> str:
    """The way outputs came back to the host, in words, from
    :func:`gmlm_lib.mt.decode_costs.choose_host_output`'s result: the way taken and each way's fastest
    batch-1 translation, or why pinned host memory was not tried."""
    ms = choice.get("ms") if isinstance(choice, dict) else None
    if not (isinstance(ms, dict) and choice.get("choice") in ms and "copy" in ms and set(ms) <= {"pinned", "copy"}
            and finite(list(ms.values()))):
        raise ValueError(f"host_output_text: choice must be what decode_costs.choose_host_output returned; got {choice!r}.")
    way = "written into pinned host memory" if choice["choice"] == "pinned" else "copied back"
    if "pinned" not in ms:
        return f"{way}: pinned host memory was not used ({choice.get('error') or 'not offered'})"
    return (f"{way}: a translation took {ms['pinned']:.3f} ms with its output in pinned host memory and "
            f"{ms['copy']:.3f} ms copied back, each its fastest call")


def speed_word(speedup: float) -> str:
    """How a batch-1 speed-up reads in a sentence: "faster than", "slower than" or "at parity with"
    (within :data:`PARITY` of 1, both ends included). The speed-up is read as the chapter shows it, to
    :data:`SPEED_DECIMALS` decimals, so that a shown "1.05x" is never called faster (``abs(1.05 - 1.0)``
    is above 0.05 in floating point)."""
    if not math.isfinite(speedup) or speedup <= 0:
        raise ValueError(f"speed_word: a speed-up must be a positive number; got {speedup!r}.")
    shown = round(speedup, SPEED_DECIMALS)
    if 1.0 - PARITY <= shown <= 1.0 + PARITY:
        return "at parity with"
    return "faster than" if shown > 1.0 else "slower than"


def sizing_text(record: dict) -> str:
    """How the run's updates were fitted to its wall-time budget (the record of
    :func:`gmlm_lib.mt.sizing.fit`), in words for a sentence."""
    asked, f = record["asked"], float(record["factor"])
    recipe = f"{asked['ar_steps']:,} AR and {asked['padir_steps']:,} PaDIR updates"
    if not asked["train_seconds"]:
        return f"the recipe's {recipe} (no wall-time budget)"
    budget = f"{asked['train_seconds']:.0f} s"
    per = record["measured"].get("ar", {}).get("update_s")
    rate = f"; an AR update takes {per * 1e3:.1f} ms here" if per else ""
    if f >= 1.0:
        return f"the recipe's {recipe}, within the {budget} budget ({record['planned_s']:.0f} s planned{rate})"
    chosen = record["chosen"]
    return (f"{chosen['ar_steps']:,} AR and {chosen['padir_steps']:,} PaDIR updates: the recipe's {recipe} would "
            f"take {record['planned_s']:.0f} s here, over the {budget} budget, so each model trains {f:.2f} of "
            f"them{rate}")


TAIL = 0.25
"""The last fraction of a model's updates over which :func:`convergence` measures how much its val loss still fell."""
CONVERGED_GAIN = 0.01
"""A model whose val loss fell by this fraction or more over the last :data:`TAIL` of its updates reads
"still improving" (more updates would likely lower it further); one whose loss rose by as much, "past its
best" (it overfits: an earlier checkpoint is selected); in between, "converged"."""


def convergence(curve, steps: int, *, tail: float = TAIL, gain: float = CONVERGED_GAIN) -> dict:
    """How a validated model's training ended, from its val losses ``curve`` (``(step, loss)`` for each
    checkpoint, ``steps`` updates in all):

    * ``selected_step``, ``selected_loss``: the lowest loss, the earlier checkpoint on a tie (the one the
      trainer keeps, :func:`gmlm_lib.mt.training.train`);
    * ``tail_gain``: the relative fall of the val loss over the last ``tail`` of the updates, from the
      last checkpoint at or before ``(1 - tail) * steps`` to the lowest one after it (negative when the
      loss rose: the model overfits and an earlier checkpoint is selected);
    * ``verdict``: "still improving" when ``tail_gain >= gain``, "past its best" when ``tail_gain <= -gain``,
      else "converged". Only "still improving" says that the model was not trained long enough.

    A curve without a checkpoint on each side of ``(1 - tail) * steps`` cannot say: a ``ValueError``
    asks for checkpoints often enough (``checkpoint_every``)."""
    curve = sorted((int(t), float(v)) for t, v in curve)
    if not 0.0 < tail < 1.0 or not gain > 0.0:
        raise ValueError(f"convergence: tail must be in (0, 1) and gain > 0; got tail = {tail!r}, gain = {gain!r}.")
    if any(not math.isfinite(v) for _, v in curve):
        raise ValueError(f"convergence: a val loss is not finite ({curve}); a verdict is never drawn from it.")
    cut = (1.0 - tail) * steps
    before = [(t, v) for t, v in curve if t <= cut]
    after = [(t, v) for t, v in curve if t > cut]
    if not before or not after:
        raise ValueError(f"convergence: needs a scored checkpoint at or before update {cut:g} and one after it (of "
                         f"{steps}); got checkpoints {[t for t, _ in curve]}: checkpoint more often "
                         "(checkpoint_every).")
    best = min(curve, key=lambda tv: (tv[1], tv[0]))
    ref = before[-1][1]
    tail_gain = (ref - min(v for _, v in after)) / ref
    verdict = "still improving" if tail_gain >= gain else "past its best" if tail_gain <= -gain else "converged"
    return dict(selected_step=best[0], selected_loss=best[1], tail_gain=tail_gain, verdict=verdict)


def selection(curves: dict) -> pd.DataFrame:
    """The chapter's table of the number of updates selected on the val split: ``curves`` maps a model's
    label to ``(val curve, updates)``; one row a model with ``updates``, ``selected_step``,
    ``selected_loss``, ``tail_gain`` and ``verdict`` (:func:`convergence`)."""
    if not curves:
        raise ValueError("selection: no validated model (train with val= to select on the val split).")
    rows = {label: dict(updates=int(steps), **convergence(curve, steps)) for label, (curve, steps) in curves.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


def selection_findings(table: pd.DataFrame | None, ar_updates: int) -> dict:
    """The glued words of :func:`selection`'s table: ``converged_met`` ("met" when no model reads
    "still improving", "missed" otherwise, "not measured" without a val split: ``table`` ``None``),
    ``still_improving`` (those that do not, listed; "none"), ``n_validated``, and the AR teacher's
    ``ar_selected_step`` of its ``ar_updates`` (the last one without a val split) and ``ar_verdict``, how
    its training ended (:func:`convergence`'s verdict; "not measured" without a val split): the box reads
    the AR BLEU target beside it, since a teacher still improving was stopped before its best."""
    out = dict(target_converged_gain=CONVERGED_GAIN, converged_tail=TAIL, ar_updates=int(ar_updates))
    if table is None or table.empty:
        return dict(out, converged_met="not measured", still_improving="not measured", n_validated=0,
                    ar_selected_step=int(ar_updates), ar_verdict="not measured")
    still = [label for label, v in table["verdict"].items() if v == "still improving"]
    selected = int(table.loc["AR", "selected_step"]) if "AR" in table.index else int(ar_updates)
    verdict = str(table.loc["AR", "verdict"]) if "AR" in table.index else "not measured"
    return dict(out, converged_met=grade(len(still), 0, at_least=False), still_improving=listed(still),
                n_validated=len(table), ar_selected_step=selected, ar_verdict=verdict)


def findings(quality: pd.DataFrame, speed: pd.DataFrame, cost: pd.DataFrame, *, eval_steps, eval_hyps: int,
             beam: int, distill_s: float, latency_vs_bound: float) -> dict:
    """Every glued value of the PaDIR chapter's box.

    ``quality``: one row a (``model``, ``decoding``) with ``BLEU``, ``BLEU_lc`` and ``stutter``; the
    models "AR", "PaDIR raw", "PaDIR distilled" (and optionally "AR deep-shallow"), the PaDIR settings
    named ``"T=<t>, #hyp=<eval_hyps>"``. ``speed``: indexed by system label ("AR greedy",
    "PaDIR T=4, #hyp=1", optionally "AR deep-shallow greedy" and the graded PaDIR row with its passes
    unrolled, "PaDIR T=4, #hyp=1, unrolled", reported beside it as ``unrolled_text``, ungraded) with
    ``median_ms`` and ``p99_ms``.
    ``cost``: indexed by run with ``wall_min`` and ``fraction_of_peak``. The PaDIR row graded is T = 4
    (else the first of ``eval_steps``); its speed, T = 4 with one hypothesis (else the smallest T timed)."""
    t = 4 if 4 in eval_steps else eval_steps[0]
    ar = _one(quality, "AR greedy", model="AR", decoding="greedy")
    ar_beam = _one(quality, "AR beam", model="AR", decoding=f"beam {beam}")
    dist = _one(quality, "distilled PaDIR", model="PaDIR distilled", decoding=f"T={t}, #hyp={eval_hyps}")
    raw = _one(quality, "raw PaDIR", model="PaDIR raw", decoding=f"T={t}, #hyp={eval_hyps}")
    longest = max(eval_steps)
    dist_long = _one(quality, "distilled PaDIR, most passes", model="PaDIR distilled",
                     decoding=f"T={longest}, #hyp={eval_hyps}")
    timed = [s for s in speed.index if s.startswith("PaDIR T=") and s.endswith(", #hyp=1")]
    if not timed:
        raise ValueError("findings: no 'PaDIR T=<t>, #hyp=1' row in the speed table; time #hyp = 1.")
    fast = "PaDIR T=4, #hyp=1" if "PaDIR T=4, #hyp=1" in speed.index else \
        min(timed, key=lambda s: int(s.removeprefix("PaDIR T=").split(",")[0]))
    greedy = speed.loc["AR greedy"]
    median_speedup = float(greedy["median_ms"] / speed.loc[fast, "median_ms"])
    p99_speedup = float(greedy["p99_ms"] / speed.loc[fast, "p99_ms"])
    shallow = "AR deep-shallow greedy" in speed.index
    deep_shallow_speedup = (float(speed.loc["AR deep-shallow greedy", "median_ms"] / speed.loc[fast, "median_ms"])
                            if shallow else float("nan"))
    deep_shallow_bleu, deep_shallow_met = float("nan"), "not comparable"  # no deep-shallow model in this run
    if shallow and ((quality["model"] == "AR deep-shallow") & (quality["decoding"] == "greedy")).any():
        deep_shallow_bleu = float(_one(quality, "AR deep-shallow greedy", model="AR deep-shallow",
                                       decoding="greedy")["BLEU"])
        # the fair AR baseline at batch 1 (Kasai et al., 2021): PaDIR should be faster at no more than the
        # quality gap the chapter allows against AR greedy
        deep_shallow_met = "met" if (grade(deep_shallow_speedup, 1.0, at_least=True) == "met" and grade(
            deep_shallow_bleu - float(dist["BLEU"]), TARGETS["gap_greedy"], at_least=False) == "met") else "missed"
    unrolled = f"{fast}, unrolled"
    unrolled_text = (f"{float(greedy['median_ms'] / speed.loc[unrolled, 'median_ms']):.2f}x median, "
                     f"{float(greedy['p99_ms'] / speed.loc[unrolled, 'p99_ms']):.2f}x p99"
                     if unrolled in speed.index else "not measured")
    total_min = float(cost["wall_min"].sum()) + distill_s / 60.0
    gap_greedy = float(ar["BLEU"] - dist["BLEU"])
    out = dict(
        eval_T=t, eval_T_long=longest, eval_hyps=eval_hyps, beam=beam,
        ar_bleu=float(ar["BLEU"]), ar_beam_bleu=float(ar_beam["BLEU"]), ar_beam_bleu_lc=float(ar_beam["BLEU_lc"]),
        dist_bleu=float(dist["BLEU"]), dist_bleu_long=float(dist_long["BLEU"]), raw_bleu=float(raw["BLEU"]),
        gap_greedy=gap_greedy, gap_beam=float(ar_beam["BLEU"] - dist["BLEU"]),
        fast_label=fast, median_speedup=median_speedup, p99_speedup=p99_speedup,
        speed_word=speed_word(median_speedup),
        deep_shallow_speedup=deep_shallow_speedup, deep_shallow_bleu=deep_shallow_bleu,
        deep_shallow_met=deep_shallow_met, unrolled_text=unrolled_text,
        deep_shallow_text=(f"{deep_shallow_speedup:.2f}x its median latency" if shallow
                           else "not measured (no deep-shallow model in this run)"),
        ar_stutter=float(ar["stutter"]), padir_stutter=float(dist["stutter"]),
        stutter_compare=("less" if dist["stutter"] < ar["stutter"] else
                         "more" if dist["stutter"] > ar["stutter"] else "no more"),  # "stutters ... than AR"
        total_min=total_min, mfu=float(cost["fraction_of_peak"].mean()), latency_vs_bound=float(latency_vs_bound),
    )
    out.update(
        beam_lc_met=grade(out["ar_beam_bleu_lc"], TARGETS["beam_bleu_lc"], at_least=True),
        gap_greedy_met=grade(gap_greedy, TARGETS["gap_greedy"], at_least=False),
        median_target_met=grade(median_speedup, TARGETS["median_speedup"], at_least=True),
        p99_target_met=grade(p99_speedup, TARGETS["p99_speedup"], at_least=True),
        latency_bound_met=grade(latency_vs_bound, TARGETS["latency_vs_bound"], at_least=True),
        budget_met="within" if grade(total_min, TARGETS["budget_min"], at_least=False) == "met" else "over",
    )
    out.update({f"target_{k}": v for k, v in TARGETS.items()})
    return out


RESAMPLES = 1000
"""Test-set resamples of the paired bootstrap behind :func:`graded` (as SacreBLEU's default)."""

QUALITY_COLUMNS = ("BLEU", "BLEU_lc", "chrF", "stutter")
"""The quality table's scores, each averaged over replicas by :func:`replica_mean`."""


def replica_mean(by_replica: pd.DataFrame) -> pd.DataFrame:
    """The quality table: one row a (``model``, ``decoding``), in first-seen order, each score of
    :data:`QUALITY_COLUMNS` averaged over the rows of every ``replica``; with two or more replicas,
    ``BLEU_sd``, the standard deviation of BLEU between them (ddof 1): the spread between seeds."""
    missing = sorted({"model", "decoding", "replica", *QUALITY_COLUMNS} - set(by_replica.columns))
    if missing or by_replica.empty:
        raise ValueError(f"replica_mean: the table needs one row a (model, decoding, replica) with {list(QUALITY_COLUMNS)}; "
                         f"{'it is empty' if by_replica.empty else f'missing {missing}'}.")
    grouped = by_replica.groupby(["model", "decoding"], sort=False)
    out = grouped[list(QUALITY_COLUMNS)].mean()
    if by_replica["replica"].nunique() > 1:
        out.insert(1, "BLEU_sd", grouped["BLEU"].std(ddof=1))
    return out.reset_index()


def present_quality(quality: pd.DataFrame):
    """The quality table of :func:`replica_mean` as the chapter shows it (a ``Styler``): BLEU and chrF with
    one decimal, stutter per 100 words, and the spread between seeds where the table has one (two or more
    replicas; a lone run's table has no ``BLEU_sd`` column, and its page shows none)."""
    formats = dict(BLEU="bleu", BLEU_lc="bleu", chrF="bleu", stutter="{:.2f}")
    labels = dict(BLEU_lc="BLEU lowercased", stutter="stutter /100 words")
    if "BLEU_sd" in quality.columns:
        formats["BLEU_sd"], labels["BLEU_sd"] = "{:.2f}", "BLEU sd (seeds)"
    return tables.present(quality, formats=formats, labels=labels)


REPLICA_LATENCY_SENTENCES = 100
"""Test sentences on which every replica's batch-1 speed-up is timed beside replica 0's full timing (at
batch 1 the weights change the time only through the output lengths, so a hundred sentences show the
spread between seeds at a small cost)."""


def replica_speed_text(speedups) -> str:
    """Every replica's median speed-up as the box reads it: ``"1.48x to 1.61x over 4 replicas"``, or
    ``"1.52x (one replica)"``. A non-finite or non-positive speed-up is refused."""
    values = [float(x) for x in speedups]
    if not values or not all(math.isfinite(x) and x > 0 for x in values):
        raise ValueError(f"speedups must be one positive, finite speed-up a replica; got {values}.")
    if len(values) == 1:
        return f"{values[0]:.{SPEED_DECIMALS}f}x (one replica)"
    return f"{min(values):.{SPEED_DECIMALS}f}x to {max(values):.{SPEED_DECIMALS}f}x over {len(values)} replicas"


def interval_text(interval: tuple[float, float] | None, digits: int = 1) -> str:
    """A 95% interval as the box reads it, ``"lo to hi"``; ``"one run"`` without one (a single replica)."""
    return "one run" if interval is None else f"{interval[0]:.{digits}f} to {interval[1]:.{digits}f}"


def graded(samples: dict, *, eval_steps, eval_hyps: int, beam: int, deep_shallow_speedup: float = float("nan"),
           improving=(), key) -> dict:
    """The box's verdicts on quality, from every replica and the test sentences together (issue 125, item 2).

    ``samples[(model, decoding)]``: ``dict(BLEU=..., BLEU_lc=...)``, each an (S, B) array, replica ``s``'s
    BLEU on B test-set resamples (:func:`gmlm_lib.mt.metrics.bleu_resamples`, the same resamples for every
    system and replica), with the chapter's (model, decoding) names (:func:`findings`). A difference between
    two systems pairs replica ``s`` of one with replica ``s`` of the other (PaDIR replica ``s`` started from
    teacher replica ``s``). Each number's 95% interval is :func:`~gmlm_lib.book.findings.rules.seed_sentence_interval`'s
    (a bootstrap over seeds and sentences), and its verdict :func:`~gmlm_lib.book.findings.rules.grade_interval`'s:
    **not comparable** when a model it reads is in ``improving`` (still improving at the end of its budget:
    :func:`selection`'s verdict), :data:`~gmlm_lib.book.findings.rules.ONE_RUN` with one replica.

    Returns ``seeds``; ``gap_greedy_interval`` (text) and ``gap_greedy_met`` (AR greedy less distilled PaDIR
    at T = 4, against :data:`TARGETS` ``gap_greedy``); ``beam_lc_interval`` and ``beam_lc_met`` (AR beam,
    lowercased, against ``beam_bleu_lc``); ``deep_shallow_gap_interval`` ("not measured" without a
    deep-shallow model) and, with one, ``deep_shallow_met``: missed when PaDIR is not faster (``deep_shallow_speedup`` below 1, one latency
    measurement), else the verdict of deep-shallow greedy less distilled PaDIR against ``gap_greedy``."""
    t = 4 if 4 in eval_steps else eval_steps[0]
    names = dict(dist=("PaDIR distilled", f"T={t}, #hyp={eval_hyps}"), greedy=("AR", "greedy"),
                 beam=("AR", f"beam {beam}"), shallow=("AR deep-shallow", "greedy"))
    for what in ("dist", "greedy", "beam"):
        if names[what] not in samples:
            raise ValueError(f"graded: no resampled BLEU for {names[what]}; score every replica of it on the resamples.")
    arrays = {k: {m: np.asarray(v[m], np.float64) for m in ("BLEU", "BLEU_lc")} for k, v in samples.items()}
    shapes = {a.shape for v in arrays.values() for a in v.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"graded: every sample must be one (replicas, resamples) array of one shape; got {sorted(shapes)}.")
    seeds = next(iter(shapes))[0]
    keys = (rng.fold_in(key, i) for i in range(3))

    def verdict(x, bar, at_least, models):
        interval = seed_sentence_interval(x, next(keys)) if seeds >= 2 else None
        return interval_text(interval), grade_interval(interval, bar, at_least=at_least,
                                                      improving=any(m in improving for m in models))

    dist = arrays[names["dist"]]["BLEU"]
    out = dict(seeds=int(seeds))
    out["gap_greedy_interval"], out["gap_greedy_met"] = verdict(
        arrays[names["greedy"]]["BLEU"] - dist, TARGETS["gap_greedy"], False, ("AR", "PaDIR distilled"))
    out["beam_lc_interval"], out["beam_lc_met"] = verdict(
        arrays[names["beam"]]["BLEU_lc"], TARGETS["beam_bleu_lc"], True, ("AR",))
    if names["shallow"] in arrays:
        text, quality = verdict(arrays[names["shallow"]]["BLEU"] - dist, TARGETS["gap_greedy"], False,
                                ("AR deep-shallow", "PaDIR distilled"))
        faster = math.isfinite(deep_shallow_speedup) and deep_shallow_speedup >= 1.0
        out.update(deep_shallow_gap_interval=text, deep_shallow_met=quality if faster else "missed")
    else:
        out["deep_shallow_gap_interval"] = "not measured"
    return out


@dataclasses.dataclass(frozen=True)
class Params(ChapterParams):
    """The PaDIR chapter's own parameters, beside its :class:`~gmlm_lib.mt.config.Experiment` (every other
    name of its parameters cell, built and checked by :func:`gmlm_lib.mt.config.from_parameters`, its
    errors under the cell's names because they are the same names): the preset, whether to train the
    deep-shallow baseline (None: on a GPU or TPU only) and the widths and seconds of the unit-cost
    measurements; ``seed`` (None: the preset's) and ``install_ref`` as every chapter's."""

    NONE_SEED = "the preset's"

    def check(self) -> None:
        names = preset_names()
        self.need(self.preset in names, "preset", f"one of {list(names)} ('auto': the GPU preset on a GPU or TPU)")
        self.need(self.deep_shallow is None or isinstance(self.deep_shallow, bool), "deep_shallow",
                  "True, False or None (None: on a GPU or TPU only)")
        self.integers("unit_widths", 1, why="widths at which the trained models' units are timed")
        self.integers("base_unit_widths", 1, why="hypothesis widths of the Transformer-base units")
        self.number("base_unit_seconds", why="seconds each unit is timed, > 0")
        self.need(self.base_unit_seconds > 0, "base_unit_seconds", "a number of seconds > 0")

    def resolved(self, exp: config.Experiment, backend: str):
        """These parameters as the run with ``exp`` uses them on ``backend`` (``jax.default_backend()``):
        ``preset`` resolved (:func:`gmlm_lib.mt.config.resolve`), ``deep_shallow`` None set to whether
        ``backend`` is an accelerator, ``seed`` the experiment's; and what depends on the experiment
        checked: the latency table times one hypothesis (the bound is for it), and the units' widths fit
        the models' ``max_len = max(train_buckets)``."""
        require(1 in exp.latency_hyps, "latency_hyps", list(exp.latency_hyps),
                "a list that includes 1 (the latency bound is for one hypothesis)")
        self.integers("unit_widths", 1, max(exp.train_buckets), why="widths up to the models' max_len = "
                      "max(train_buckets)")
        deep = backend in config.ACCELERATORS if self.deep_shallow is None else self.deep_shallow
        return dataclasses.replace(self, preset=config.resolve(self.preset, backend), deep_shallow=deep, seed=exp.seed)

    # the chapter's own fields, in its parameters cell's order (seed and install_ref: ChapterParams)
    preset: str
    deep_shallow: Any
    unit_widths: list
    base_unit_widths: list
    base_unit_seconds: float


def record(exp: config.Experiment, own: Params) -> dict:
    """Every parameter of the chapter as its run uses it, for :func:`gmlm_lib.book.provenance.start`: the
    experiment's settings (none left at None) and the chapter's own, resolved."""
    return {**{name: getattr(exp, name) for name in config.FIELDS}, **own.record()}


TRAINING_COLUMNS = {"steps": "updates", "final_loss": "final loss (nats)", "wall_s": "wall time",
                    "tokens_per_s": "tokens/s", "parameters": "parameters"}
"""The fields of a training record (:func:`gmlm_lib.mt.training.train`'s ``run.json``) that
:func:`training_table` shows, and their column names."""
TRAINING_FORMATS = {"updates": "count", "final loss (nats)": "{:.3f}", "wall time": "s", "tokens/s": "count",
                    "parameters": "count"}
"""The formats of :func:`training_table`'s columns, for :func:`gmlm_lib.core.tables.present`."""


def training_table(records: dict) -> pd.DataFrame:
    """One row a trained model (``records``: label -> its training record) with the fields of
    :data:`TRAINING_COLUMNS`; a field the record lacks is NaN (shown as missing, not as a number)."""
    if not records:
        raise ValueError("training_table: no training record to show.")
    rows = {label: {name: rec.get(key, float("nan")) for key, name in TRAINING_COLUMNS.items()}
            for label, rec in records.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


SETTINGS_LEFT_OUT = ("data_dir", "run_root")
"""The settings :func:`settings_table` does not show: folders of the machine that ran the chapter."""


def settings_table(exp: config.Experiment) -> pd.Series:
    """The run's :class:`~gmlm_lib.mt.config.Experiment` (after the preset, the overrides and the
    wall-time budget) as text, one row a setting, so that a reader sees the value of each setting the
    chapter's text cites (its parameters cell shows ``None`` for those the preset decides): a list
    joined by commas, an empty list or text as "none", a ``*_sentences`` of 0 as "all". The folders
    (``data_dir``, ``run_root``) are left out: where this machine kept its files says nothing about
    the run."""
    if not isinstance(exp, config.Experiment):
        raise TypeError(f"settings_table: exp must be a gmlm_lib.mt.config.Experiment; got {type(exp).__name__}.")

    def text(name: str, value) -> str:
        if name.endswith("_sentences") and value == 0:
            return "all"
        shown = ", ".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)
        return shown or "none"

    values = {field.name: text(field.name, getattr(exp, field.name)) for field in dataclasses.fields(exp)
              if field.name not in SETTINGS_LEFT_OUT}
    return pd.Series(values, name="value").rename_axis("setting")


# --- the exercises: speed and quality by sentence length -------------------------------------------------

LENGTH_GROUPS = 4
"""The exercises split the sentences into this many groups of equal size by length (quartiles)."""


def length_groups(lengths, groups: int = LENGTH_GROUPS) -> np.ndarray:
    """(n,) int: the group of each of ``n`` sentences by its length in pieces, 0 the shortest, ``g - 1`` the
    longest, ``g = min(groups, n)`` groups of equal size (to one sentence). Sentences of equal length are
    split by their order where a group boundary falls among them, so every group is filled and two
    neighbouring groups can share a length."""
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.size == 0 or not np.issubdtype(lengths.dtype, np.integer) or (lengths < 0).any():
        raise ValueError(f"length_groups: lengths must be a non-empty 1-D array of piece counts (integers >= 0); "
                         f"got {lengths.dtype} of shape {lengths.shape}.")
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"length_groups: groups must be a whole number >= 1; got {groups!r}.")
    g = min(int(groups), lengths.size)
    out = np.empty(lengths.size, int)
    out[np.argsort(lengths, kind="stable")] = np.arange(lengths.size) * g // lengths.size
    return out


def _span(lengths) -> str:
    lo, hi = int(np.min(lengths)), int(np.max(lengths))
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _grouped(lengths, groups: int, row) -> pd.DataFrame:
    """One row per length group (shortest first) and one for all sentences: ``pieces`` (the lengths'
    range), ``sentences`` and ``row(index array)``'s columns."""
    lengths = np.asarray(lengths)
    group = length_groups(lengths, groups)
    parts = [(f"group {g + 1}", np.flatnonzero(group == g)) for g in range(group.max() + 1)]
    parts.append(("all", np.arange(lengths.size)))
    return pd.DataFrame.from_dict({name: dict(pieces=_span(lengths[idx]), sentences=idx.size, **row(idx))
                                   for name, idx in parts}, orient="index").rename_axis("length group")


def speedup_by_length(ar_seconds, padir_seconds, lengths, groups: int = LENGTH_GROUPS) -> pd.DataFrame:
    """Exercise ``ex-padir-length-speedup``: the batch-1 speed-up of PaDIR over AR greedy by the length of
    AR's output. ``ar_seconds``, ``padir_seconds``: (n,) seconds of the same sentences, in the same order
    (:func:`gmlm_lib.mt.translate.latencies`); ``lengths``: (n,) pieces of AR greedy's output for each
    (its decoder runs one step a piece, and one more). Rows: :func:`length_groups`, then "all"; columns
    ``pieces``, ``sentences``, ``ar_ms`` and ``padir_ms`` (median milliseconds) and ``speedup`` (their
    ratio: a ratio of medians, as the chapter's speed table computes it)."""
    ar, padir = np.asarray(ar_seconds, np.float64), np.asarray(padir_seconds, np.float64)
    lengths = np.asarray(lengths)
    if not ar.ndim == padir.ndim == lengths.ndim == 1 or not ar.size == padir.size == lengths.size:
        raise ValueError(f"speedup_by_length: ar_seconds, padir_seconds and lengths must be 1-D, one entry a "
                         f"sentence; got shapes {ar.shape}, {padir.shape}, {lengths.shape}.")
    if not (np.isfinite(ar).all() and np.isfinite(padir).all() and (ar > 0).all() and (padir > 0).all()):
        raise ValueError("speedup_by_length: every time must be a positive number of seconds; a NaN or a zero "
                         "means a sentence was not timed.")

    def row(idx):
        a, p = 1e3 * np.median(ar[idx]), 1e3 * np.median(padir[idx])
        return dict(ar_ms=a, padir_ms=p, speedup=a / p)

    return _grouped(lengths, groups, row)


def speedup_length_findings(table: pd.DataFrame, ar_seconds, padir_seconds, lengths) -> dict:
    """The glued values of exercise ``ex-padir-length-speedup``: ``ex_speedup_short`` and
    ``ex_speedup_long`` (the shortest and the longest group's speed-up in ``table``, from
    :func:`speedup_by_length`, and their ``*_pieces``), ``ex_speedup_tau`` and ``ex_speedup_p`` (Kendall's
    rank correlation of each sentence's speed-up with its length, and its p-value: exact for a few
    sentences without ties, so that three sentences in order never read as a trend) and
    ``ex_speedup_trend``: "rises with the length" or "falls with the length" when that correlation is
    significant by the book's rule (:func:`~gmlm_lib.book.findings.rules.significant`), "shows no
    significant trend with the length" otherwise (and with fewer than 3 sentences, or the lengths or the
    speed-ups all equal, where no correlation exists: NaN), and ``ex_speedup_corr``, the correlation in
    words for a sentence (``"Kendall's τ = 0.41, p < 0.001"``)."""
    groups = [name for name in table.index if name != "all"]
    ratio = np.asarray(ar_seconds, np.float64) / np.asarray(padir_seconds, np.float64)
    lengths = np.asarray(lengths)
    tau, p = math.nan, math.nan
    if ratio.size >= 3 and np.ptp(lengths) > 0 and np.ptp(ratio) > 0:
        result = stats.kendalltau(lengths, ratio)
        tau, p = float(result.statistic), float(result.pvalue)
    trend = ("shows no significant trend with the length" if math.isnan(p) or not significant(p)
             else "rises with the length" if tau > 0 else "falls with the length")
    corr = ("no correlation is defined: the lengths or the speed-ups are all equal" if math.isnan(p) else
            f"Kendall's τ = {tau:.2f}, p {'< 0.001' if p < 0.001 else f'= {p:.3f}'}")
    return dict(ex_speedup_short=float(table.loc[groups[0], "speedup"]),
                ex_speedup_long=float(table.loc[groups[-1], "speedup"]),
                ex_speedup_short_pieces=str(table.loc[groups[0], "pieces"]),
                ex_speedup_long_pieces=str(table.loc[groups[-1], "pieces"]),
                ex_speedup_tau=tau, ex_speedup_p=p, ex_speedup_trend=trend,
                ex_speedup_corr=corr)


def bleu_by_length(ar_hyps, padir_hyps, refs, lengths, groups: int = LENGTH_GROUPS) -> pd.DataFrame:
    """Exercise ``ex-padir-length-quality``: corpus BLEU (cased SacreBLEU, :func:`gmlm_lib.mt.metrics.bleu`)
    of AR greedy's and PaDIR's outputs ``ar_hyps``, ``padir_hyps`` against ``refs`` (one a test sentence,
    in the same order) within each group of :func:`length_groups` of the references' ``lengths`` in pieces,
    and over all; columns ``pieces``, ``sentences``, ``ar_bleu``, ``padir_bleu`` and ``gap`` (AR less
    PaDIR). BLEU over a quarter of the test set is noisier than over all of it."""
    from gmlm_lib.mt import metrics

    lengths = np.asarray(lengths)
    if not len(ar_hyps) == len(padir_hyps) == len(refs) == lengths.size:
        raise ValueError(f"bleu_by_length: ar_hyps, padir_hyps, refs and lengths must have one entry a sentence; "
                         f"got {len(ar_hyps)}, {len(padir_hyps)}, {len(refs)}, {lengths.size}.")

    def row(idx):
        refs_ = [refs[i] for i in idx]
        ar = metrics.bleu([ar_hyps[i] for i in idx], refs_).score
        padir = metrics.bleu([padir_hyps[i] for i in idx], refs_).score
        return dict(ar_bleu=ar, padir_bleu=padir, gap=ar - padir)

    return _grouped(lengths, groups, row)


def bleu_length_findings(table: pd.DataFrame) -> dict:
    """The glued values of exercise ``ex-padir-length-quality`` from :func:`bleu_by_length`'s table: the
    shortest and the longest group's gap (``ex_gap_short``, ``ex_gap_long``), their pieces, and
    ``ex_gap_wider``: the group whose gap is the larger ("the longest", "the shortest", "neither")."""
    groups = [name for name in table.index if name != "all"]
    short, long_ = float(table.loc[groups[0], "gap"]), float(table.loc[groups[-1], "gap"])
    wider = "the longest" if long_ > short else "the shortest" if short > long_ else "neither"
    return dict(ex_gap_short=short, ex_gap_long=long_, ex_gap_short_pieces=str(table.loc[groups[0], "pieces"]),
                ex_gap_long_pieces=str(table.loc[groups[-1], "pieces"]), ex_gap_wider=wider)
