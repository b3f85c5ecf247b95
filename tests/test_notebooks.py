"""Smoke execution of every chapter in _toc.yml through papermill, and the strict book build."""

import os
import re
import resource
from pathlib import Path

import nbformat
import pytest

from gmlm_lib.book import runner, sources

ROOT = Path(__file__).resolve().parents[1]
SMOKE_BUDGET_S = 120  # each chapter's smoke profile, on 2 CPU cores
# The XLA programs each chapter's smoke run may compile (its provenance counts them, those read from the
# persistent cache included), with why: the count its smoke run compiled on 2026-12-07 (JAX of requirements.txt)
# and about 15% more. Most of each count is one program per model size (every mask law of a small size shares one
# padded table), the rest the chapter's own key and sampling programs; a change that compiles a program per
# setting where one program served, stages host arrays with jnp.asarray (a program per shape in JAX 0.10) where
# jax.device_put copies them, or runs array code op by op on device arrays (a program per operation and shape),
# shows here as a count past its budget. Lower a budget when a chapter compiles less.
SMOKE_PROGRAMS = {  # measured at smoke size, plus about 15% (a budget, not a target: lower it as counts fall)
    "gmlm_ising_testbed": (25, "22 measured: one k-MPLE program for the k < n, one for k = n, the sampler's checks"),
    "masking_more": (27, "23 measured: one k-MPLE program per k (capacity), exact covariances on one padded table"),
    "efficiency_is_mixing": (30, "26 measured: the exact kernels per model size (one padded table a size up to n = 8)"),
    "adaptive_masking": (21, "18 measured: the exact kernels, once for the three rules (as_adaptive rows)"),
    "conditionals_to_joint": (17, "14 measured: one program a kernel for every k"),
    "one_parallel_step": (43, "37 measured: the pair chain and the small Transformer's training"),
    "kgibbs_vs_parallel": (38, "33 measured: one chain program per sampler structure and chunk length, a benchmark's"),
    "parallel_rules": (17, "14 measured: one decoder for every rule"),
}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", [n for n in sources.toc_notebooks(ROOT) if n not in sources.TRANSLATION_CHAPTERS])
def test_smoke_run(name):
    """The chapter runs without a cell error in the smoke profile, within the budget, and
    ends with its provenance line; the record lands in the notebook's metadata.

    The budget is 2 minutes on 2 CPU cores. CI runs the tests on two workers (pytest-xdist), so a
    chapter's wall time there depends on what the other worker runs beside it: the check is on
    the CPU time of the chapter's kernel (at most 2 x 120 core-seconds) and, when the suite runs
    alone in one process, on the wall time too. The translation chapters are left to the rehearsal
    of the GPU run's command (tests/test_gpu_run.py), which runs them in order from their one source,
    notebooks/NAME.md (which may run ahead of the committed notebook, awaiting an accelerator run; that
    notebook's Colab cell installs the commit that made its outputs)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    meta = runner.run_notebook(name, "smoke", root=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    nb = nbformat.read(runner.output_path(ROOT, name, "smoke"), as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert meta["profile"] == "smoke" and meta["code_sha256"] == sources.code_hash(nb)
    last = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []))
    assert last.startswith("Provenance: profile smoke;"), last
    budget, why = SMOKE_PROGRAMS[name]
    programs = meta["provenance"]["compilations"]
    assert programs <= budget, f"{name}'s smoke run compiled {programs} programs, over its budget of {budget} ({why})"
    assert 0 < cpu_s <= 2 * SMOKE_BUDGET_S, f"{name} smoke run used {cpu_s:.0f} s of CPU (its kernel)"
    if "PYTEST_XDIST_WORKER" not in os.environ:
        assert meta["total_wall_time_s"] <= SMOKE_BUDGET_S, f"{name} smoke run took {meta['total_wall_time_s']} s"


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.xdist_group("book")  # one worker builds the book once for this test and the browser tests
def test_strict_book_build(built_book):
    """The README's build with warnings as errors and nitpicky mode; the chapter page shows
    theorem boxes, rendered equations and figures."""
    proc, html = built_book
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (html / "index.html").is_file()
    for name in sources.toc_notebooks(ROOT):
        page = (html / "notebooks" / f"{name}.html").read_text()
        assert 'class="proof' in page, "no sphinx-proof boxes on the chapter page"
        assert re.search(r"\\\(|\\\[|\$\$", page), "no math on the chapter page"
        assert re.search(r'<img[^>]+src="[^"]*\.png"', page), "no figure on the chapter page"
        assert "What this run found" in page
        assert "colab-badge.svg" in page and "colab.research.google.com/assets" not in page
    api = (html / "book" / "api.html").read_text()  # the library reference: autodoc ran on the docstrings
    for name in ("gmlm_lib.ising.samplers.k_gibbs", "gmlm_lib.ising.mple.pseudolikelihood_loss", "gmlm_lib.mt.decoding.padir",
                 "gmlm_lib.mt.training.train", "gmlm_lib.book.runner.run_notebook"):
        assert f'id="{name}"' in api, f"{name} is not documented on the library reference page"
    # offline: MathJax is served from the build itself, no page loads a script from a CDN
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert (html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2" / "MathJax_Main-Regular.woff").is_file()
    for page_path in html.rglob("*.html"):
        scripts = re.findall(r'<script[^>]+src="([^"]+)"', page_path.read_text())
        remote = [s for s in scripts if s.startswith(("http://", "https://", "//"))]
        assert not remote, f"{page_path.relative_to(html)} loads scripts from the network: {remote}"
    assert "Alias for field number" not in api  # book/_ext/namedtuple_fields.py leaves those entries out
    # book/_ext/long_values.py: a constant's header shows a short value, not one of thousands of characters
    header = {name: re.search(rf'<dt[^>]*id="{re.escape(name)}"[^>]*>(.*?)</dt>', api, flags=re.S).group(1)
              for name in ("gmlm_lib.mt.config.PRESETS", "gmlm_lib.book.labels.PAPER_LABELS",
                           "gmlm_lib.book.sources.COLAB_INSTALL_CELL", "gmlm_lib.core.unmasking.RULES")}
    assert all("=" not in re.sub(r"<[^>]+>", "", h) for n, h in header.items() if not n.endswith("RULES")), header
    assert "'dependency')" in header["gmlm_lib.core.unmasking.RULES"], header["gmlm_lib.core.unmasking.RULES"]


# Phrases that speak of how the book is made (the project's machines, its workflow, its copy of the paper)
# rather than of the science, the hardware and the runs a reader reads; each with why it is refused.
DEV_TALK = {
    "lent": "machines lent to the project are how its runs are scheduled, not what a reader needs",
    "fresh machine": "a machine of the project's scheduling, not the hardware of a run",
    "-minute budget": "a budget of the project's machine time",
    "against a budget of": "a budget of the project's machine time",
    "staged": "the repository's workflow for chapters waiting for a run",
    "extracted text": "how the book's copy of the paper was made",
    "paper text it was built from": "how the book's copy of the paper was made",
    "rehearsal": "the test suite's workflow",
    "one command of": "a limit of the project's machines",
}
# Pages of chapters awaiting their accelerator run, whose shown notebook (the last run's) still says one, until
# that run: the source has the new words already. Each must still show it, so a fixed page leaves this list.
DEV_TALK_UNTIL_RERUN = {"notebooks/padir.html": ("paper text it was built from",),
                        "notebooks/ablations.html": ("against a budget of",)}


def page_text(path: Path) -> str:
    """The words a reader sees on a built page: scripts, styles and tags stripped, entities decoded."""
    import html

    raw = re.sub(r"<script.*?</script>|<style.*?</style>", " ", path.read_text(), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())


def says(text: str, phrase: str) -> bool:
    """Whether ``text`` holds ``phrase`` as words (``lent`` is not in ``silent``)."""
    edge = (r"\b" if phrase[0].isalnum() else "", r"\b" if phrase[-1].isalnum() else "")
    return re.search(edge[0] + re.escape(phrase) + edge[1], text) is not None


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.xdist_group("book")
def test_no_page_speaks_of_how_the_book_is_made(built_book):
    proc, html_dir = built_book
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = {}
    for path in sorted(html_dir.rglob("*.html")):
        rel = path.relative_to(html_dir).as_posix()
        if rel.startswith(("_static/", "_sources/")):
            continue
        text = page_text(path).lower()
        hits = tuple(p for p in DEV_TALK if says(text, p))
        if hits:
            found[rel] = hits
    for page, known in DEV_TALK_UNTIL_RERUN.items():
        assert set(known) <= set(found.get(page, ())), f"{page} no longer shows {known}: remove it from the list"
    unexpected = {page: [f"{p!r} ({DEV_TALK[p]})" for p in hits if p not in DEV_TALK_UNTIL_RERUN.get(page, ())]
                  for page, hits in found.items()}
    assert not {p: h for p, h in unexpected.items() if h}, unexpected


def test_page_text_reads_what_a_reader_sees(tmp_path):
    page = tmp_path / "p.html"
    page.write_text("<html><script>var lent = 1;</script><style>.staged{}</style><p>A &amp; B,\n<b>one</b> run</p>")
    assert page_text(page) == "A & B, one run"
    assert says("a lent machine", "lent") and not says("silent", "lent") and says("an 8-minute budget", "-minute budget")


def test_every_chapter_smoke_tested_here_has_a_program_budget():
    assert set(SMOKE_PROGRAMS) == {n for n in sources.toc_notebooks(ROOT) if n not in sources.TRANSLATION_CHAPTERS}
    assert all(isinstance(b, int) and b > 0 and why for b, why in SMOKE_PROGRAMS.values())
