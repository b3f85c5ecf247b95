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
