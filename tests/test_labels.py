"""The paper-label index (gmlm_lib.book.labels, book/labels.md): tags parsed right, every label of the
paper listed, and the page fails the check when code, tests or chapters drift from it."""

from __future__ import annotations

import pathlib
import re

import pytest

from gmlm_lib.book import labels

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAPER = ROOT.parent / "shared" / "paper"


@pytest.mark.parametrize("text, want", [
    ("[Definition 2]", ["Definition 2"]),
    ("[Definitions 4-6, 8; Theorems 1, 3 (App. C.4)]",
     ["Definition 4", "Definition 5", "Definition 6", "Definition 8", "Theorem 1", "Theorem 3"]),
    ("[Props. 3-4] and [Definition 12, Eq. 5; Eq. 6]", ["Proposition 3", "Proposition 4", "Definition 12"]),
    ("[Section 3.4, App. L.5, Tables 4-5]", ["Table 4", "Table 5"]),
    ("Theorem 2 in prose, no brackets", []),
    ("[Theorem (App. C.4)] has no number; [Figure 3]", ["Figure 3"]),
    # the appendices' unnumbered results, named by their appendix; a numbered item's appendix is not one
    ("[Lemma, Appendix A] [Lemma 1, Appendix J] [Theorem 2, Appendix B]", ["Lemma (App. A)", "Lemma 1", "Theorem 2"]),
    ("[Propositions in Section 2.4.2, Apps. F-G; Corollary, App. H]",
     ["Proposition (App. F)", "Proposition (App. G)", "Corollary (App. H)"]),
    ("[Caputo & Parisi 2021; Prop. (App. C.3)] [Theorem 3, Appendix C.4; Lemma, Appendix C.2] [Assumptions 5-7]",
     ["Proposition (App. C.3)", "Theorem 3", "Lemma (App. C.2)", "Assumption 5", "Assumption 6", "Assumption 7"]),
])
def test_tags_are_parsed(text, want):
    assert labels.labels_in(text) == want


def test_inventory_is_the_acceptance_list():
    """Every numbered item, the seven assumptions (each stated in words with the chapters that rest on it)
    and the appendices' unnumbered results; reconstructed numbers are listed with how."""
    want = ([f"Definition {i}" for i in range(1, 13)] + [f"Theorem {i}" for i in range(1, 6)]
            + [f"Lemma {i}" for i in range(1, 10)] + [f"Proposition {i}" for i in range(1, 5)]
            + [f"Corollary {i}" for i in range(1, 3)] + [f"Assumption {i}" for i in range(1, 8)]
            + list(labels.APPENDIX_RESULTS.values()) + [f"Figure {i}" for i in range(1, 4)]
            + [f"Table {i}" for i in range(1, 6)])
    assert sorted(labels.PAPER_LABELS) == sorted(want)
    assert set(labels.NOT_TREATED) <= set(labels.PAPER_LABELS)
    assert sorted(labels.ASSUMPTIONS) == [f"Assumption {i}" for i in range(1, 8)]
    assert set(labels.RECONSTRUCTED) == {"Theorem 1", "Theorem 3"}
    page = labels.page(ROOT)
    assert "## Assumptions" in page and "Theorem 1 (number reconstructed: " in page


@pytest.mark.skipif(not PAPER.is_dir(), reason="the paper's text is not beside the project")
def test_every_label_the_paper_text_uses_has_a_row():
    """Labels of the paper's own results in its text (a cited "Theorem 1 in (Liu et al.)" or Van der Vaart's
    "Theorem 5.23" is another work's)."""
    text = " ".join(p.read_text() for p in PAPER.glob("*.txt"))
    used = set()
    for m in re.finditer(r"\b(Definition|Theorem|Lemma|Proposition|Corollary|Figure|Table) (\d+)\b(?!\.\d)(?! in \()", text):
        used.add(f"{m.group(1)} {m.group(2)}")
    used.discard("Theorem 8")  # "compare the statement to Theorem 8": a cross-reference the extraction garbled (not in the acceptance list)
    assert used - set(labels.PAPER_LABELS) == set()


def test_page_is_up_to_date_and_every_label_accounted_for():
    assert labels.problems(ROOT) == []


def test_write_page_writes_the_generated_page(monkeypatch, tmp_path):
    (tmp_path / "book").mkdir()
    monkeypatch.setattr(labels, "page", lambda root: f"# the index of {root.name}\n")
    assert labels.write_page(tmp_path) == tmp_path / labels.PAGE
    assert (tmp_path / labels.PAGE).read_text() == f"# the index of {tmp_path.name}\n"


def test_a_new_docstring_tag_or_a_removed_test_fails_the_check(monkeypatch):
    real_lib, real_tests = labels.library_tags, labels.test_tags
    monkeypatch.setattr(labels, "library_tags", lambda root: {**real_lib(root), "Lemma 4": ["gmlm_lib.x.hoeffding"]})
    assert any("labels.md does not match" in p for p in labels.problems(ROOT))
    monkeypatch.setattr(labels, "library_tags", real_lib)
    tests = real_tests(ROOT)
    gone = {k: v[1:] for k, v in tests.items()}  # the first test of every label deleted
    monkeypatch.setattr(labels, "test_tags", lambda root: gone)
    assert any("labels.md does not match" in p for p in labels.problems(ROOT))


def test_a_tag_the_paper_lacks_or_an_unexplained_gap_fails(monkeypatch):
    real_lib = labels.library_tags
    monkeypatch.setattr(labels, "library_tags", lambda root: {**real_lib(root), "Theorem 9": ["gmlm_lib.x.f"]})
    assert any("Theorem 9" in p for p in labels.problems(ROOT))
    monkeypatch.setattr(labels, "library_tags", real_lib)
    monkeypatch.setattr(labels, "NOT_TREATED", {k: v for k, v in labels.NOT_TREATED.items() if k != "Lemma 4"})
    assert any("Lemma 4 is neither" in p for p in labels.problems(ROOT))


def test_a_table_measured_in_another_setting_is_called_an_analogue():
    """The translation tables run on Multi30k, not the paper's WMT: the index says analogue, never reproduced."""
    assert labels._where("padir", "analogue", "Quality [paper Tables 1-3, on Multi30k]") == \
        "analogue on Multi30k: {doc}`../notebooks/padir`, *Quality*"
    assert labels._where("masking_more", "section", "Figures [paper Figures 1-2]") == \
        "{doc}`../notebooks/masking_more`, *Figures*"
    tags = labels.chapter_tags(ROOT)
    for table in ("Table 1", "Table 2", "Table 3", "Table 4", "Table 5"):
        assert any(kind == "analogue" for _, kind, _ in tags[table]), table
    assert all(kind != "analogue" for _, kind, _ in tags["Figure 3"])


def test_results_beyond_the_paper_are_listed_and_checked(monkeypatch):
    """The label index lists the book's own rule and the 2025 rules and theory, each with code and tests
    that exist; a name that does not resolve, a missing test or box is a problem."""
    text = labels.page(ROOT)
    assert "## Beyond the paper" in text and "Li and Cai (2025), Theorem 1" in text
    broken = {**labels.BEYOND, "X": dict(box="no-such-box", code=["gmlm_lib.ising.unmasking.nothing"],
                                        tests=["tests/test_unmasking.py::test_nothing"])}
    monkeypatch.setattr(labels, "BEYOND", broken)
    found = labels.problems(ROOT)
    assert any("no-such-box" in p for p in found)
    assert any("gmlm_lib.ising.unmasking.nothing does not exist" in p for p in found)
    assert any("test_nothing does not exist" in p for p in found)


def test_a_label_the_library_implements_needs_a_chapter_or_a_reason(monkeypatch):
    """The page promises that its last column says where the book treats each label or why it does not:
    Definition 1 (the MLE, stated in the k-pseudolikelihood box) without its chapter tag and without a
    reason would leave that cell empty, and the check says so; with a reason it passes."""
    real_book = labels.chapter_tags(ROOT)
    assert "Definition 1" in real_book and "Definition 1" in labels.library_tags(ROOT)
    without = {k: v for k, v in real_book.items() if k != "Definition 1"}
    monkeypatch.setattr(labels, "chapter_tags", lambda root: without)
    row = next(line for line in labels.page(ROOT).splitlines() if line.startswith("| Definition 1 |"))
    assert row.endswith("| — |")
    assert [p for p in labels.problems(ROOT) if "Definition 1" in p] == [
        "labels: Definition 1 is implemented but no chapter states it (no prf box title or heading carries it) and "
        "NOT_TREATED gives no reason; tag the chapter where it is used or say why not."]
    monkeypatch.setattr(labels, "NOT_TREATED", {**labels.NOT_TREATED, "Definition 1": "a reason"})
    assert not [p for p in labels.problems(ROOT) if "Definition 1" in p and "no chapter states it" in p]


def test_a_label_nothing_treats_needs_a_reason(monkeypatch):
    """A label that neither the library nor a chapter tags, and that NOT_TREATED does not explain, is a
    problem, named with whether a test still tags it; a reason makes it none."""
    lib, book, tests = labels.library_tags(ROOT), labels.chapter_tags(ROOT), labels.test_tags(ROOT)
    assert "Definition 2" in lib and "Definition 2" in book and "Definition 2" in tests

    def drop(tags):
        return {k: v for k, v in tags.items() if k != "Definition 2"}

    monkeypatch.setattr(labels, "library_tags", lambda root: drop(lib))
    monkeypatch.setattr(labels, "chapter_tags", lambda root: drop(book))
    says = "labels: Definition 2 is neither implemented nor stated in the book{}, and NOT_TREATED gives no reason; " \
           "tag it where it is treated or say why not."
    assert [p for p in labels.problems(ROOT) if "Definition 2 is" in p] == [says.format(" (only a test tags it)")]
    monkeypatch.setattr(labels, "test_tags", lambda root: drop(tests))
    assert [p for p in labels.problems(ROOT) if "Definition 2 is" in p] == [says.format("")]
    monkeypatch.setattr(labels, "NOT_TREATED", {**labels.NOT_TREATED, "Definition 2": "a reason"})
    assert [p for p in labels.problems(ROOT) if "Definition 2 is" in p] == []


def test_not_treated_is_refused_only_for_a_label_both_implemented_and_stated(monkeypatch):
    """NOT_TREATED may keep a label that only the library or only a chapter mentions (a helper, a
    remark), and the page shows its reason beside where it appears; a label both implemented and
    stated in the book is treated, and the check says NOT_TREATED is wrong."""
    real_lib, real_book = labels.library_tags(ROOT), labels.chapter_tags(ROOT)
    assert "Lemma 4" in labels.NOT_TREATED and "Lemma 4" not in real_lib and "Lemma 4" not in real_book
    for in_lib, in_book in ((True, False), (False, True), (True, True)):
        lib = {**real_lib, **({"Lemma 4": ["gmlm_lib.x.hoeffding"]} if in_lib else {})}
        book = {**real_book, **({"Lemma 4": [("padir", "section", "Bounds")]} if in_book else {})}
        monkeypatch.setattr(labels, "library_tags", lambda root, lib=lib: lib)
        monkeypatch.setattr(labels, "chapter_tags", lambda root, book=book: book)
        flagged = [p for p in labels.problems(ROOT) if "NOT_TREATED says" in p]
        assert flagged == (["labels: Lemma 4 is treated (library and book) but NOT_TREATED says it is not."]
                           if in_lib and in_book else []), (in_lib, in_book)
        row = next(line for line in labels.page(ROOT).splitlines() if line.startswith("| Lemma 4 |"))
        reason = f"not treated: {labels.NOT_TREATED['Lemma 4']}"
        assert row.endswith((f"| {{doc}}`../notebooks/padir`, *Bounds*<br>{reason} |" if in_book else f"| {reason} |"))
