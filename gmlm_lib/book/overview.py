"""The results overview on the book's landing page: the paper's headline claims against this book's
runs, one row a claim, generated from the values the chapters glued in their last full runs.

``book/results.md`` is written by :func:`write_page` (with the provenance page, after every full run,
and by ``make provenance``) and included at the top of ``book/intro.md``; ``make check`` fails when it
disagrees with the notebooks. Each row (:data:`ROWS`) names the chapter, quotes the paper's claim,
formats the chapter's glued numbers, and takes its verdict from the chapter's own graded words or
grades it here with :func:`gmlm_lib.book.findings.rules.grade`: **met** (the paper's claim holds in
this run, or the book's target for it is reached), **missed**, or **not comparable** (the book's run
is too far from the paper's setting for a verdict). A row of Part III grades numbers of trained models,
which move with the seed that trained them: its verdict stands only where the chapter's run trained
replicas (a glued ``seeds`` of at least 2, its verdicts from
:func:`gmlm_lib.book.findings.rules.grade_interval`, which adds **within noise**); a run of one model
is graded :data:`~gmlm_lib.book.findings.rules.ONE_RUN` instead of met or missed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import nbformat

from gmlm_lib.book import run_times, sources
from gmlm_lib.book.findings.bounds import SLACK
from gmlm_lib.book.findings.kgibbs_vs_parallel import FIGURE3_CLAIMS
from gmlm_lib.book.findings.parallel_rules import frontiers_agree
from gmlm_lib.book.findings.rules import ONE_RUN, VERDICTS, grade
from gmlm_lib.core import tables

PAGE = Path("book") / "results.md"
PART3_PAGE = Path("book") / "experiments_results.md"
"""Part III's scale and rows of the overview, included at the top of Part III's opening page."""
AGREEMENT = Path("book") / "rules_agreement.md"
"""The sentence on whether the exact Ising comparison of the 2025 rules and the translation frontier
agree, generated from both chapters' runs and included in both chapters (:func:`agreement`)."""


def _ratio(value) -> str:
    """A ratio as ``1.23x``; an infinite one (glued as the text "inf") says why it is infinite."""
    number = float(value)
    return "∞ (ours has no setting within a budget that a 2025 rule meets)" if number == float("inf") else \
        f"{number:.3g}x"


def glued(ipynb: Path) -> dict:
    """The values a chapter's run glued, by name (:func:`gmlm_lib.book.sources.glued_values`)."""
    return sources.glued_values(nbformat.read(ipynb, as_version=4))


def hardware(ipynb: Path) -> str:
    """The run's hardware in a few words: ``2 CPU cores`` or ``1 x NVIDIA H200`` (from its provenance)."""
    return run_times.hardware_key(nbformat.read(ipynb, as_version=4).metadata.get("gmlm", {}).get("provenance", {}))


@dataclasses.dataclass(frozen=True)
class Row:
    """One headline claim: where the book treats it, the paper's words, ours, and the verdict."""

    claim: str
    chapter: str
    paper: str
    ours: Callable[[dict], str]
    verdict: Callable[[dict], str]


def _graded(g: dict) -> str:
    """How many of Figure 3's graded claims (:data:`~gmlm_lib.book.findings.kgibbs_vs_parallel.FIGURE3_CLAIMS`) are met."""
    return f"{sum(g[name] == 'met' for name in FIGURE3_CLAIMS)} of {len(FIGURE3_CLAIMS)} met"


def _stutter_verdict(g: dict) -> str:
    """[Section 3.2] PaDIR stutters at least twice as often as AR greedy: ``padir >= 2 x ar``, compared
    without dividing, so an AR greedy that never stutters is graded (met when PaDIR stutters at all)."""
    padir, ar = float(g["padir_stutter"]), float(g["ar_stutter"])
    return "missed" if padir == 0.0 else grade(padir, 2.0 * ar, at_least=True)


ROWS: tuple[Row, ...] = (
    Row("Theorem 2: masking more never hurts", "masking_more",
        "Γₖ ⪰ Γₖ₊₁ for every k (a proof)",
        lambda g: (f"smallest eigenvalue of Γₖ − Γₖ₊₁ {g['min_lambda']:.1e}, i.e. {g['min_envelopes']:.2f} float64 "
                   f"rounding envelopes (bar: at least -{g['order_slack']:.0f}), over {g['num_models']} models, exact"),
        lambda g: g["order_verdict"]),
    Row("Theorem 1: the C_P bound", "efficiency_is_mixing",
        "Γₖ ⪯ C_P(k) Γ_MLE (a proof)",
        lambda g: f"largest ratio to the bound {g['max_tightness']:.4f} (at most 1 up to rounding), exact",
        lambda g: grade(g["max_tightness"], 1.0 + SLACK, at_least=False)),
    Row("Figure 3: k-Gibbs against independent parallel", "kgibbs_vs_parallel",
        "k-Gibbs with k ≥ c reaches the heavy mode, slower with J, faster with k; independent parallel is "
        "stuck (qualitative)",
        lambda g: (f"k ≥ c within the budget in {g['fig3_reach_count']} settings (median at most "
                   f"{g['kg_ratio_hi']:.2f} x its scale); independent parallel stuck at J = {g['max_coupling']:g}, "
                   f"by clique size: {g['fig3_stuck_by_clique']}; the four claims graded {_graded(g)}"),
        lambda g: g["fig3_verdict"]),
    Row("PaDIR's quality (Table 1)", "padir",
        "PaDIR and AR reach similar BLEU (WMT, 67M parameters)",
        lambda g: f"distilled PaDIR T = 4 {g['gap_greedy']:.1f} BLEU below AR greedy ({g['ar_bleu']:.1f}), Multi30k",
        lambda g: g["gap_greedy_met"]),
    Row("PaDIR's median batch-1 speed-up", "padir",
        "more than 2x at T = 4 (TPU v3)",
        lambda g: f"{g['median_speedup']:.2f}x ({g['fast_label']})",
        lambda g: grade(g["median_speedup"], 2.0, at_least=True)),
    Row("PaDIR's p99 batch-1 speed-up", "padir",
        "more than 5x at T = 4 (TPU v3)",
        lambda g: f"{g['p99_speedup']:.2f}x ({g['fast_label']})",
        lambda g: grade(g["p99_speedup"], 5.0, at_least=True)),
    Row("PaDIR against deep-shallow AR", "padir",
        "not in the paper (the fair AR baseline at batch 1, Kasai et al. 2021: the book's bar is PaDIR T = 4 "
        "faster, within 1.0 BLEU)",
        lambda g: (f"PaDIR T = 4 at {float(g['deep_shallow_speedup']):.2f}x deep-shallow AR greedy's median latency"
                   + (f", {float(g['deep_shallow_bleu']) - float(g['dist_bleu']):+.1f} BLEU for deep-shallow"
                      if "deep_shallow_bleu" in g else "")),
        lambda g: g.get("deep_shallow_met") or grade(float(g["deep_shallow_speedup"]), 1.0, at_least=True)),
    Row("Stutter, PaDIR against AR", "padir",
        "2 or more times as frequent for PaDIR (Section 3.2)",
        lambda g: f"PaDIR {g['padir_stutter']:.2f}, AR greedy {g['ar_stutter']:.2f} stuttered words per 100",
        _stutter_verdict),
    Row("Stutter and self-attention (Tables 4-5)", "stutter",
        "hypothesis 1 unlikely: no larger self-attention between stutter pairs",
        lambda g: (f"hypothesis 1 {g['h1']} (AUROC {g['auc_self']:.3f} from i to i+1, "
                   f"{g['auc_self_bwd']:.3f} back)"),
        # stutter pairs attending significantly *less* to each other (contradicted) also agrees with "unlikely";
        # larger attention one way and smaller the other (mixed) does not: the claim is no larger attention
        lambda g: "met" if g["h1"] in ("not supported", "contradicted") else "missed"),
    Row("Stutter and cross-attention (Tables 4-5)", "stutter",
        "hypothesis 2 promising: stutter pairs read more similar sources",
        lambda g: f"hypothesis 2 {g['h2']} (TV AUROC {g['auc_tv']:.3f})",
        lambda g: "met" if g["h2"] == "supported" else "missed"),
    Row("Design choices (ablations)", "ablations",
        "mask a lot, two stages, positional attention and distillation each help (500k updates)",
        lambda g: f"{int(g['choices_supported'])} of 4 choices better than their ablation, at "
                  f"{g['variant_steps_used']} updates",
        lambda g: "not comparable"),
    Row("Dependency-aware decoding (this book's rule)", "dependency_decoding",
        "not in the paper (the book's bar: +1.0 BLEU over plain PaDIR at T = 4)",
        lambda g: f"{g['dep_gain_bleu']:+.1f} BLEU against plain PaDIR ({tables.p_text(g['dep_p_value'])})",
        lambda g: g["gain_met"]),
    Row("Li and Cai's bound on parallel unmasking (2025)", "parallel_rules",
        "not in the paper: KL error at most the mutual-information bound of their Theorem 1",
        lambda g: f"{g['li_cai_violations']} families with a violation (exact, random rule, every T)",
        lambda g: "met" if g["li_cai_violations"] == 0 else "missed"),
    Row("This book's rule against the 2025 rules (exact, Ising)", "parallel_rules",
        "not in the paper (the book's target: exact KL at most the best 2025 rule's at equal passes)",
        lambda g: f"largest ratio of our exact KL to the best 2025 rule's: {_ratio(g['ours_vs_best_kl'])}",
        lambda g: g["ours_target"]),
    Row("This book's rule against the 2025 rules (translation)", "dependency_decoding",
        "not in the paper (the book's target: not significantly worse than the best 2025 rule at any T)",
        lambda g: (f"{g['ours_vs_best_bleu']:+.1f} BLEU against {g['best_2025_at_T']} at T = 4 "
                   f"(p = {g['ours_vs_best_p']:.3f}); significantly worse at {g['ours_worse_at']}"),
        lambda g: g["rules_target"]),
)
"""The headline claims of the overview, in the book's order."""


def replicated(values: dict) -> bool:
    """Whether a translation chapter's run trained replicas of its models (its glued ``seeds``, at least 2),
    so that its verdicts know the spread between seeds."""
    seeds = values.get("seeds", 1)
    return isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 2


def rows(root: Path) -> list[tuple[Row, str, str, str, str]]:
    """``(row, where, ours, hardware, verdict)`` for every row of :data:`ROWS` whose chapter is in the
    book; ``problem`` rows (a chapter not run, or a run that lacks a value the row needs) carry their
    reason in ``ours`` and ``"—"`` as verdict, and :func:`problems` reports them."""
    out = []
    cache: dict[str, tuple[dict, str] | None] = {}
    chapters = sources.toc_notebooks(root)
    for row in ROWS:
        if row.chapter not in chapters:
            continue  # a book without that chapter (a test's partial copy): no row
        if row.chapter not in cache:
            ipynb = root / "notebooks" / f"{row.chapter}.ipynb"
            cache[row.chapter] = (glued(ipynb), hardware(ipynb)) if ipynb.is_file() else None
        found = cache[row.chapter]
        where = f"{{doc}}`{row.claim} <../notebooks/{row.chapter}>`"
        if found is None:
            out.append((row, where, "not run", "", "—"))
            continue
        values, hw = found
        try:
            ours, verdict = row.ours(values), row.verdict(values)
        except (KeyError, ValueError, ZeroDivisionError, TypeError) as err:
            out.append((row, where, f"not available: its last run lacks {err}", hw, "—"))
            continue
        if verdict not in VERDICTS:
            raise ValueError(f"overview row {row.claim!r}: verdict {verdict!r} is not one of {VERDICTS}.")
        if row.chapter in sources.TRANSLATION_CHAPTERS and verdict != "not comparable" and not replicated(values):
            verdict = ONE_RUN
        out.append((row, where, ours, hw, f"**{verdict}**"))
    return out


PAPER_SCALE = {"Model": "a Transformer of 67M parameters", "Training": "500k updates at batch size 2,048",
               "Data": "WMT (three language pairs)", "Hardware": "TPU v3"}
"""The scale of the paper's translation experiments (its Appendix L.2 and Section 3.3), beside which
:func:`scale` sets the book's."""


def scale(root: Path) -> str:
    """A table of the scale of Part III's models (the PaDIR chapter's last full run: its glued parameter count
    and updates, its recorded language pair and hardware) beside the paper's (:data:`PAPER_SCALE`); a
    sentence saying so when that chapter has not run."""
    ipynb = root / "notebooks" / "padir.ipynb"
    if "padir" not in sources.toc_notebooks(root) or not ipynb.is_file():
        return "Part III's scale: the PaDIR chapter has not run."
    g, meta = glued(ipynb), nbformat.read(ipynb, as_version=4).metadata.get("gmlm", {})
    params = meta.get("provenance", {}).get("parameters", {})
    try:
        ours = {"Model": f"a Transformer of {int(g['ar_parameters']) / 1e6:.1f}M parameters (the AR teacher)",
                "Training": f"{int(g['ar_steps']):,} AR and {int(g['padir_steps']):,} PaDIR updates "
                            f"({float(g['ar_epochs']):.0f} epochs of the AR teacher)",
                "Data": f"Multi30k, {params['src_lang']}→{params['tgt_lang']}",
                "Hardware": hardware(ipynb)}
    except (KeyError, ValueError, TypeError) as err:
        return f"Part III's scale: the PaDIR chapter's last run lacks {err}."
    rows = [f"| {what} | {PAPER_SCALE[what]} | {ours[what]} |" for what in PAPER_SCALE]
    return "\n".join(["| Part III | The paper | This book |", "| --- | --- | --- |", *rows])


COLUMNS = ("Claim", "Verdict", "The paper", "This book's last run", "Hardware")
"""The overview table's headers. On a phone (``book/_static/book.css``, class :data:`CSS_CLASS`) each row
is a card whose cells after the first open with these words, since the header row is not shown there."""
CSS_CLASS = "gmlm-overview"
"""The class of the container around the overview table, which the book's CSS lays out as cards on a phone."""


def table(root: Path, chapters: tuple[str, ...] | None = None) -> str:
    """The overview table (markdown, in a container of class :data:`CSS_CLASS`) from the chapters' committed
    notebooks (only the rows of ``chapters`` when given). The verdict comes second, beside its claim. On a phone a five-column table is five narrow
    columns of tall rows that scroll sideways, so there each row is a card instead: the claim, then each
    other cell on its own line after its header's words."""
    lines = [f":::{{container}} {CSS_CLASS}", "| " + " | ".join(COLUMNS) + " |",
             "| " + " | ".join("---" for _ in COLUMNS) + " |"]
    lines += [f"| {where} | {verdict} | {row.paper} | {ours} | {hw} |" for row, where, ours, hw, verdict in rows(root)
              if chapters is None or row.chapter in chapters]
    return "\n".join(lines + [":::"])


def page(root: Path) -> str:
    """The text of ``book/results.md`` (included at the top of the landing page)."""
    return "\n".join([
        "<!-- generated by `make provenance` from the chapters' last full runs (gmlm_lib/book/overview.py) -->",
        "",
        scale(root),
        "",
        table(root),
        "",
        "*Verdict*: **met** when the paper's claim holds in the book's run (or the book's stated target for it",
        "is reached), **missed** when it does not, **not comparable** when the run is too far from the paper's",
        "setting to tell. A translation result moves with the seed that trained its models: graded from several",
        "trained replicas it is met or missed only when its 95% interval over seeds and sentences lies on one side",
        "of the bar, and **within noise** when the interval straddles it; from one trained model it is",
        f"**{ONE_RUN}**, whichever side of the bar the number fell. The paper's figures are its own (WMT, TPU v3,",
        "67M-parameter models); the book's are from the runs named on the {doc}`provenance` page.",
        "",
    ])


def part3_page(root: Path) -> str:
    """The text of ``book/experiments_results.md``: Part III's scale (:func:`scale`) and its rows of the overview."""
    return "\n".join(["<!-- generated by `make provenance` from the chapters' last full runs "
                      "(gmlm_lib/book/overview.py) -->", "", scale(root), "", table(root, sources.TRANSLATION_CHAPTERS),
                      "", "*Verdict*: as on the {doc}`landing page <intro>`.", ""])


def agreement(root: Path) -> str:
    """Whether the parallel-rules chapter's exact comparison (``ours_target``) and the dependency-aware
    chapter's translation frontier (``rules_target``) agree on our rule against the best 2025 rule
    (:func:`gmlm_lib.book.findings.parallel_rules.frontiers_agree`), with the numbers of both runs:
    one paragraph (markdown)."""
    need = ("parallel_rules", "dependency_decoding")
    chapters = sources.toc_notebooks(root)
    if any(c not in chapters or not (root / "notebooks" / f"{c}.ipynb").is_file() for c in need):
        return "**Ising and translation:** not compared (a chapter of the two has not run)."
    ising, trans = (glued(root / "notebooks" / f"{c}.ipynb") for c in need)
    try:
        word, how = frontiers_agree(ising["ours_target"], trans["rules_target"])
        return (f"**Ising and translation {word}:** {how} (from both chapters' last runs; exact, on the Ising "
                f"testbed: our KL up to {_ratio(ising['ours_vs_best_kl'])} the best 2025 rule's at equal expected "
                f"passes, target at most 1; translation at T = 4: {trans['ours_vs_best_bleu']:+.1f} BLEU against "
                f"{trans['best_2025_at_T']}, p = {trans['ours_vs_best_p']:.3f}, significantly worse at "
                f"{trans['ours_worse_at']}).")
    except (KeyError, ValueError, TypeError) as err:
        return f"**Ising and translation:** not compared (a last run lacks {err})."


def agreement_page(root: Path) -> str:
    """The text of ``book/rules_agreement.md``."""
    return "\n".join(["<!-- generated by `make provenance` from the chapters' last full runs "
                      "(gmlm_lib/book/overview.py) -->", "", agreement(root), ""])


def write_page(root: Path) -> Path:
    """Write :func:`page` to ``root / PAGE``, :func:`part3_page` to ``root / PART3_PAGE`` and
    :func:`agreement_page` to ``root / AGREEMENT``; returns the first path."""
    path = root / PAGE
    path.write_text(page(root))
    (root / PART3_PAGE).write_text(part3_page(root))
    (root / AGREEMENT).write_text(agreement_page(root))
    return path


def problems(root: Path) -> list[str]:
    """``book/results.md`` missing or out of date, and every row whose chapter has not run or whose
    last run lacks a value the row needs."""
    out = [f"{PAGE}: row {row.claim!r} of {row.chapter} has no result ({ours}); rerun the chapter or update "
           "gmlm_lib/book/overview.py." for row, _, ours, _, verdict in rows(root) if verdict == "—"]
    path = root / PAGE
    if not path.is_file() or path.read_text() != page(root):
        out.append(f"{PAGE} does not match the chapters' last runs; run `make provenance`.")
    for name, text in ((PART3_PAGE, part3_page), (AGREEMENT, agreement_page)):
        path = root / name
        if not path.is_file() or path.read_text() != text(root):
            out.append(f"{name} does not match the chapters' last runs; run `make provenance`.")
    return out


__all__ = ["PAGE", "AGREEMENT", "ROWS", "Row", "PAPER_SCALE", "PART3_PAGE", "scale", "part3_page", "COLUMNS", "CSS_CLASS", "glued", "hardware", "replicated", "rows",
           "table", "page",
           "agreement", "agreement_page", "write_page", "problems"]
