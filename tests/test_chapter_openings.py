"""Every chapter opens, under its title and Colab badge, with a verdict a reader can take in at a glance:
a paragraph that starts "**Verdict of this run.**", glues its numbers and verdicts from the run, and
names the run's setting ("**Setting:**"), short enough to sit above the fold at 1400 x 900. Checked in
each chapter's source, notebooks/NAME.md, the version its next run executes."""

from __future__ import annotations

import pathlib
import re

import pytest

from gmlm_lib.book import runner, sources

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 12  # source lines of about 100 characters: about ten rendered lines at 1400 px


def _source(name: str) -> pathlib.Path:
    return runner.chapter_source(ROOT, name)


def _opening(text: str) -> str:
    """The first paragraph after the H1 title and the badge line."""
    body = text[text.index("\n# "):].split("\n\n")
    paragraphs = [p.strip() for p in body[1:] if p.strip() and not p.strip().startswith("[![Open In Colab]")]
    return paragraphs[0]


@pytest.mark.parametrize("name", sources.toc_notebooks(ROOT))
def test_a_chapter_opens_with_its_verdict_and_setting(name):
    opening = _opening(_source(name).read_text())
    assert opening.startswith("**Verdict of this run.**"), f"{name}: the first paragraph is not the verdict: {opening[:80]!r}"
    assert "**Setting:**" in opening, f"{name}: the verdict paragraph does not name the run's setting"
    assert re.search(r"\{glue:text\}`[a-z_0-9]+", opening), f"{name}: the verdict glues nothing from the run"
    assert "hardware" in opening, f"{name}: the setting does not glue the hardware the run used"
    assert len(opening.splitlines()) <= MAX_LINES, f"{name}: the verdict paragraph is too long to sit above the fold"


def test_the_opening_is_read_from_after_the_badge():
    text = "---\nx: 1\n---\n\n# Title\n\n[![Open In Colab](b.svg)](u)\n\n**Verdict of this run.** A.\n\nMore."
    assert _opening(text) == "**Verdict of this run.** A."


def test_a_parts_opening_page_links_every_chapter_of_its_part():
    """A part that opens with a page of prose (book/theory.md, book/experiments.md) links each of its
    chapters from it, by a {doc} reference that renders the chapter's title, so a reader sees the
    whole part from its first page."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    checked = 0
    for part in toc["parts"]:
        files = [c["file"] for c in part["chapters"]]
        chapters = [f.removeprefix("notebooks/") for f in files if f.startswith("notebooks/")]
        if not (files[0].startswith("book/") and chapters):  # a part of chapters only, or the appendix
            continue
        page = (ROOT / f"{files[0]}.md").read_text()
        missing = [c for c in chapters if f"{{doc}}`../notebooks/{c}`" not in page]
        assert not missing, f"{files[0]}.md ({part['caption']}) does not link {missing}"
        checked += 1
    assert checked >= 2  # Part I and Part III open with such a page
