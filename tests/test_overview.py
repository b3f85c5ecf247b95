"""The landing page's results overview (gmlm_lib.book.overview): generated from the chapters' glued
values, every verdict met / missed / not comparable, checked against the committed notebooks."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from gmlm_lib.book import overview, sources
from gmlm_lib.book.findings import rules

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_page_is_the_one_the_notebooks_give():
    assert overview.problems(ROOT) == []
    text = (ROOT / overview.PAGE).read_text()
    assert text.count("\n| {doc}") == len(overview.ROWS)
    assert "{include} results.md" in (ROOT / "book" / "intro.md").read_text()


def test_on_a_phone_each_cell_of_a_card_opens_with_its_headers_words():
    """The phone layout hides the header row, so book.css names each cell after the claim with its header's
    words: the same words, in the same order, as overview.COLUMNS (a renamed header renames its card label),
    inside the media query for phones and for the container class the page uses."""
    css = (ROOT / "book" / "_static" / "book.css").read_text()
    start = css.index(f".{overview.CSS_CLASS} table")
    query = css.rfind("@media", 0, start)
    assert re.match(r"@media \(max-width: 576px\)", css[query:]), "the cards are for phones only"
    labels = dict(re.findall(rf"\.{overview.CSS_CLASS} td:nth-child\((\d)\)::before \{{\s*content: \"([^\"]*)\";", css))
    shown = {int(n): re.sub(r"\\2019", "'", text) for n, text in labels.items()}
    assert shown == {n: f"{overview.COLUMNS[n - 1]}: " for n in range(2, len(overview.COLUMNS) + 1)}, shown


def test_the_verdict_stands_beside_its_claim():
    """Second of five columns, beside the claim, in a container of the class the phone layout reads."""
    opening, header, _, *body, closing = overview.table(ROOT).splitlines()
    assert (opening, closing) == (f":::{{container}} {overview.CSS_CLASS}", ":::")
    assert [c.strip() for c in header.strip("|").split("|")] == list(overview.COLUMNS)
    assert overview.COLUMNS[:2] == ("Claim", "Verdict")
    assert len(body) == len(overview.ROWS)
    for line in body:
        assert line.strip("|").split(" | ")[1].strip() in [f"**{v}**" for v in rules.VERDICTS] + ["—"], line


def test_every_row_names_a_chapter_and_every_verdict_is_one_of_three():
    chapters = sources.toc_notebooks(ROOT)
    for row in overview.ROWS:
        assert row.chapter in chapters
        values = overview.glued(ROOT / "notebooks" / f"{row.chapter}.ipynb")
        assert row.verdict(values) in ("met", "missed", "not comparable"), row.claim
        assert row.ours(values)


def test_glued_values_are_read_back_as_numbers_and_text():
    values = overview.glued(ROOT / "notebooks" / "padir.ipynb")
    assert isinstance(values["ar_bleu"], float) and isinstance(values["gap_greedy_met"], str)
    assert values["gap_greedy_met"] in ("met", "missed")
    values = overview.glued(ROOT / "notebooks" / "masking_more.ipynb")
    assert math.isnan(values["peaky_ratio_k1"])  # a glued NaN stays a NaN, never a number


@pytest.mark.parametrize("speedup, want", [(2.0, "met"), (1.999, "missed"), (5.001, "met")])
def test_speedup_rows_grade_the_papers_floor(speedup, want):
    row = next(r for r in overview.ROWS if r.claim == "PaDIR's median batch-1 speed-up")
    assert row.verdict(dict(median_speedup=speedup)) == want


@pytest.mark.parametrize("padir, ar, want", [(2.0, 1.0, "met"), (1.99, 1.0, "missed"), (1.0, 0.5, "met"),
                                             (0.99, 0.5, "missed"), (0.1, 0.0, "met"), (0.0, 0.0, "missed")])
def test_stutter_row_grades_the_papers_ratio(padir, ar, want):
    """PaDIR at least twice AR greedy's stutter; an AR greedy that never stutters is graded, not divided by."""
    row = next(r for r in overview.ROWS if r.claim == "Stutter, PaDIR against AR")
    assert row.verdict(dict(padir_stutter=padir, ar_stutter=ar)) == want


@pytest.mark.parametrize("claim, key, word, want", [
    ("Stutter and self-attention (Tables 4-5)", "h1", "not supported", "met"),
    ("Stutter and self-attention (Tables 4-5)", "h1", "contradicted", "met"),  # less attention: still "unlikely"
    ("Stutter and self-attention (Tables 4-5)", "h1", "supported", "missed"),
    ("Stutter and cross-attention (Tables 4-5)", "h2", "supported", "met"),
    ("Stutter and cross-attention (Tables 4-5)", "h2", "not supported", "missed"),
    ("Stutter and cross-attention (Tables 4-5)", "h2", "contradicted", "missed"),
    ("Li and Cai's bound on parallel unmasking (2025)", "li_cai_violations", 0, "met"),
    ("Li and Cai's bound on parallel unmasking (2025)", "li_cai_violations", 1, "missed"),
])
def test_the_word_rows_follow_the_papers_direction(claim, key, word, want):
    row = next(r for r in overview.ROWS if r.claim == claim)
    assert row.verdict({key: word}) == want


def test_the_ablations_row_shows_the_count_the_chapter_glued():
    """The count of supported choices is the chapter's own (gmlm_lib.book.findings.ablations, glued as
    choices_supported), not recounted here; a run without it shows as not available (rows() reports it)."""
    row = next(r for r in overview.ROWS if r.chapter == "ablations")
    run = dict(choices_supported=3, variant_steps_used=1200)
    assert row.ours(run) == "3 of 4 choices better than their ablation, at 1200 updates"
    assert row.verdict(run) == "not comparable"
    with pytest.raises(KeyError, match="choices_supported"):
        row.ours(dict(variant_steps_used=1200))


def test_the_pages_are_written_and_a_missing_one_is_reported(tmp_path, monkeypatch):
    (tmp_path / "book").mkdir()
    pair = ("parallel_rules", "dependency_decoding")  # in the book, not run: no notebook in tmp_path
    monkeypatch.setattr(overview.sources, "toc_notebooks", lambda root: list(pair))
    assert overview.write_page(tmp_path) == tmp_path / overview.PAGE and overview.problems(tmp_path) == [
        f"{overview.PAGE}: row {row.claim!r} of {row.chapter} has no result (not run); rerun the chapter or update "
        "gmlm_lib/book/overview.py." for row in overview.ROWS if row.chapter in pair]
    assert "not compared (a chapter of the two has not run)" in (tmp_path / overview.AGREEMENT).read_text()
    for page in (overview.PAGE, overview.AGREEMENT):
        (tmp_path / page).unlink()
        assert any(p.startswith(f"{page} does not match") for p in overview.problems(tmp_path))


def test_a_translation_row_from_one_trained_model_says_so_and_from_replicas_keeps_its_verdict(monkeypatch):
    """A translation result from one trained model is not graded met or missed (one seed cannot tell a
    difference from the spread between seeds); from a run of two or more replicas the chapter's verdict
    stands; a theory row and a not-comparable row are left as they are."""
    verdicts = {r.claim: v for r, _, _, _, v in overview.rows(ROOT)}
    assert verdicts["PaDIR's quality (Table 1)"] == f"**{rules.ONE_RUN}**"
    assert verdicts["Design choices (ablations)"] == "**not comparable**"
    assert verdicts["Theorem 1: the C_P bound"] in ("**met**", "**missed**")
    real = overview.glued
    monkeypatch.setattr(overview, "glued", lambda path: {**real(path), "seeds": 4})
    assert {r.claim: v for r, _, _, _, v in overview.rows(ROOT)}["PaDIR's quality (Table 1)"] in \
        ("**met**", "**missed**", "**within noise**")
    for seeds, want in [(1, False), (True, False), (2, True), ("4", False)]:
        assert overview.replicated({"seeds": seeds}) is want


def test_a_row_whose_verdict_is_not_one_of_the_three_is_refused(monkeypatch):
    row = overview.ROWS[0]
    monkeypatch.setattr(overview, "ROWS", (overview.Row(row.claim, row.chapter, row.paper, row.ours,
                                                        lambda g: "almost met"),))
    with pytest.raises(ValueError, match=r"overview row 'Theorem 2: masking more never hurts': verdict 'almost met' "
                                         r"is not one of \('met', 'missed', 'within noise'"):
        overview.rows(ROOT)


def test_a_run_without_a_needed_value_is_shown_and_reported(monkeypatch):
    monkeypatch.setattr(overview, "glued", lambda path: {})
    table = overview.table(ROOT)  # the page can always be written (the provenance page is written with it)
    assert "not available: its last run lacks 'min_lambda'" in table
    found = overview.problems(ROOT)
    assert any("row 'Theorem 2: masking more never hurts' of masking_more has no result" in p for p in found)


def test_the_rules_agreement_is_generated_from_both_chapters_and_included_in_both():
    text = (ROOT / overview.AGREEMENT).read_text()
    assert text == overview.agreement_page(ROOT) and "**Ising and translation " in text
    for chapter in ("parallel_rules", "dependency_decoding"):
        assert "```{include} ../book/rules_agreement.md" in (ROOT / "notebooks" / f"{chapter}.md").read_text()


def test_the_rules_agreement_follows_the_two_verdicts(monkeypatch):
    values = {"parallel_rules": dict(ours_target="met", ours_vs_best_kl=0.8),
              "dependency_decoding": dict(rules_target="missed", ours_vs_best_bleu=-0.67, best_2025_at_T="factor",
                                          ours_vs_best_p=0.008, ours_worse_at="T = 4")}
    monkeypatch.setattr(overview, "glued", lambda path: values.get(Path(path).stem, {}))
    said = overview.agreement(ROOT)
    assert said.startswith("**Ising and translation disagree:** ours matches the best 2025 rule exactly")
    assert "our KL up to 0.8x" in said and "-0.7 BLEU against factor, p = 0.008" in said
    assert any(str(overview.AGREEMENT) in p for p in overview.problems(ROOT))  # the committed page says otherwise
    values["dependency_decoding"] = {}
    assert "not compared (a last run lacks 'rules_target')" in overview.agreement(ROOT)


def test_rows_show_bleu_with_one_decimal_and_the_order_in_rounding_envelopes():
    """BLEU differences read as the chapters show them (one decimal, as the agreement paragraph); a
    negative smallest eigenvalue of Γₖ − Γₖ₊₁ is shown with its size in rounding envelopes and the bar."""
    rows = {r.claim: r for r in overview.ROWS}
    dep = rows["Dependency-aware decoding (this book's rule)"].ours(dict(dep_gain_bleu=-0.904, dep_p_value=0.0021))
    assert dep == "-0.9 BLEU against plain PaDIR (p = 0.002)"
    rules = rows["This book's rule against the 2025 rules (translation)"].ours(
        dict(ours_vs_best_bleu=-0.67, best_2025_at_T="factor", ours_vs_best_p=0.008, ours_worse_at="T = 4"))
    assert rules.startswith("-0.7 BLEU against factor at T = 4 (p = 0.008)")
    order = rows["Theorem 2: masking more never hurts"].ours(
        dict(min_lambda=-6.6e-11, min_envelopes=-0.6848, order_slack=10.0, num_models=20))
    assert order == ("smallest eigenvalue of Γₖ − Γₖ₊₁ -6.6e-11, i.e. -0.68 float64 rounding envelopes "
                     "(bar: at least -10), over 20 models, exact")


def test_the_landing_page_sets_part_iiis_scale_beside_the_papers(tmp_path, monkeypatch):
    """The scale table: the PaDIR chapter's glued parameter count and updates, its recorded language pair and
    hardware, beside the paper's; a book whose PaDIR chapter has not run says so."""
    text = overview.scale(ROOT)
    g = overview.glued(ROOT / "notebooks" / "padir.ipynb")
    assert text.splitlines()[:2] == ["| Part III | The paper | This book |", "| --- | --- | --- |"]
    assert f"{int(g['ar_parameters']) / 1e6:.1f}M parameters" in text and f"{int(g['ar_steps']):,} AR" in text
    assert "| Model | a Transformer of 67M parameters |" in text and "Multi30k, en→de" in text
    assert text in overview.page(ROOT)
    monkeypatch.setattr(overview.sources, "toc_notebooks", lambda root: ["masking_more"])
    assert overview.scale(ROOT) == "Part III's scale: the PaDIR chapter has not run."


def test_only_a_chapter_whose_verdicts_read_every_replica_glues_seeds():
    """The overview grades a translation chapter's verdicts from intervals over seeds only when it glues
    ``seeds`` >= 2 (overview.replicated). The PaDIR chapter's quality verdicts read every replica; stutter,
    dependency_decoding and ablations read replica 0 (their count of replicas is glued under another name),
    so a glued ``seeds`` there would dress a one-model verdict as one that knows the spread between seeds."""
    for name in sources.TRANSLATION_CHAPTERS:
        text = (ROOT / "notebooks" / f"{name}.md").read_text()
        assert ('glue("seeds"' in text or "padir_findings.graded(" in text) == (name == "padir"), name
