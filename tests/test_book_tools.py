"""The book machinery: parameters cells, the runner's parameter resolution, provenance,
and the sync/freshness check (an edited, unrerun notebook must fail it)."""

import ast
import json
import re
import shutil
import signal
import time
from pathlib import Path

import nbformat
import pytest

from conftest import checkout_ignore
from gmlm_lib.book import checks, provenance, runner, sources
import browser

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sources.toc_notebooks(ROOT)


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def _params_cell(src):
    return nbformat.v4.new_code_cell(src, metadata={"tags": ["parameters"]})


def test_library_reference_lists_every_module():
    """book/api.md renders the docstrings of every module of gmlm_lib (a new module must be added there)."""
    import pkgutil
    import re

    import gmlm_lib

    listed = re.findall(r"^\.\. automodule:: (\S+)$", (ROOT / "book" / "api.md").read_text(), flags=re.M)
    modules = {m.name for m in pkgutil.walk_packages(gmlm_lib.__path__, "gmlm_lib.")
               if not m.ispkg and not m.name.endswith("__main__")}
    assert len(listed) == len(set(listed)), "a module is listed twice in book/api.md"
    assert set(listed) == modules, (f"missing from book/api.md: {sorted(modules - set(listed))}; "
                                    f"not modules: {sorted(set(listed) - modules)}")


def _next_source(name):
    """The chapter's one source, which its next run executes (it may run ahead of its notebook, awaiting an
    accelerator run)."""
    return runner.chapter_source(ROOT, name)


@pytest.mark.parametrize("name", CHAPTERS)
def test_every_figure_has_a_caption(name):
    """A cell that draws a figure carries a ``mystnb: figure: caption:`` saying what it shows and asks."""
    nb = sources.read_text_notebook(_next_source(name))
    for cell in nb.cells:
        if cell.cell_type == "code" and "plt.show()" in cell.source:
            caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption", "")
            assert caption.strip(), f"{name}: a figure without a caption:\n{cell.source[:200]}"


@pytest.mark.parametrize("name", CHAPTERS)
def test_a_figure_cell_shows_only_its_figure(name):
    """myst-nb puts a cell's caption under each of its outputs: a table or text shown by the figure's cell
    would become a captioned figure too, and every later figure number would be off by one. So a cell
    with a caption draws one figure and shows nothing else (a table goes in the next cell)."""
    nb = sources.read_text_notebook(_next_source(name))
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("mystnb", {}).get("figure"):
            shows = cell.source.count("plt.show()")
            shown = [call for call in ("present(", "display(", "print(") if call in cell.source]
            assert shows == 1 and not shown, \
                f"{name}: a captioned cell shows {shows} figures and {shown}:\n{cell.source[:200]}"


FIGURE_PX = browser.FIGURE_WIDTH  # the widest a figure is shown on the browser check's 1400 px screen (CSS px)
MIN_TEXT_PT = browser.MIN_TEXT_PT  # the browser check's bar, here for each chapter's next run, before it is built
# Chapters whose next run (their source) still draws text that shows under 9 pt, with why
# (each must still break the rule, so a change that fixes it must also remove it here). None at present.
SMALL_TEXT_UNTIL_RERUN: dict[str, str] = {}


def figure_text_pt(source: str) -> tuple[float, float]:
    """(width in inches, smallest text in CSS points as shown) of the figure a cell draws (the style's
    ``figure.figsize`` where the cell names no ``figsize``). A notebook figure is a retina PNG drawn at
    the style's ``figure.dpi`` CSS px an inch, plus the 0.1 in that the inline backend's tight bounding
    box may pad each side with, shown at that size or scaled down to ``FIGURE_PX``: text set at s pt
    shows at s * dpi / 96 * min(1, FIGURE_PX / ((width + 0.2) * dpi)) pt. The smallest set size is the
    least of the sizes the cell names (``fontsize=``, ``labelsize=``, ``size=``, ``{"size": ...}``, named
    sizes) and the style's tick-label size, which every axis shows."""
    import matplotlib as mpl
    from matplotlib.font_manager import FontProperties

    from gmlm_lib.core import plotting

    widths = [float(w) for w in re.findall(r"figsize\s*=\s*\(\s*([\d.]+)\s*,", source)]
    with mpl.rc_context():
        plotting.set_style()
        dpi = mpl.rcParams["figure.dpi"]
        widths = widths or [mpl.rcParams["figure.figsize"][0]]
        ticks = FontProperties(size=mpl.rcParams["xtick.labelsize"]).get_size_in_points()
        named = [FontProperties(size=n).get_size_in_points() for n in
                 re.findall(r"\b(?:fontsize|labelsize|size)\s*=\s*[\"']((?:xx?-)?(?:small|large)|medium)[\"']", source)]
    numbers = re.findall(r"\b(?:fontsize|labelsize|size|title_fontsize)\s*=\s*([\d.]+)", source)
    numbers += re.findall(r"[\"']size[\"']\s*:\s*([\d.]+)", source)
    smallest = min([ticks, *named, *(float(n) for n in numbers)])
    width = max(widths)
    return width, smallest * dpi / 96 * min(1.0, FIGURE_PX / ((width + 0.2) * dpi))


def test_figure_text_size_is_what_the_formula_says():
    assert figure_text_pt("plt.plot()") == (6.4, pytest.approx(11 * 110 / 96))  # matplotlib's 6.4 in
    w, pt = figure_text_pt("fig, ax = plt.subplots(figsize=(6.5, 3))")  # shown at its own size: 11 pt ticks
    assert w == 6.5 and pt == pytest.approx(11 * 110 / 96)
    wide = figure_text_pt("plt.subplots(figsize=(13.8, 3)); ax.legend(fontsize=9)")  # scaled to the column
    assert wide[1] == pytest.approx(9 * FIGURE_PX / 14 / 96)
    assert figure_text_pt('plt.subplots(figsize=(6.5, 3)); ax.legend(fontsize="xx-small")')[1] == pytest.approx(
        12 * 0.579 * 110 / 96, rel=1e-3)  # matplotlib's xx-small: 0.579 of the 12 pt base
    capsize = figure_text_pt("plt.subplots(figsize=(6.5, 3)); ax.errorbar(x, y, capsize=3)")  # not a font size
    assert capsize[1] == pytest.approx(11 * 110 / 96)


@pytest.mark.parametrize("name", CHAPTERS)
def test_figure_text_reads_at_9pt_at_the_column_width(name):
    """Every figure a chapter's next run draws shows its smallest text at 9 pt or more at the column's
    width, estimated from its source (the browser check reads what a built page shows, from the size a
    run recorded in each PNG; this holds a source awaiting its run to the same bar): a figure wider than
    the column is scaled down with its text, so draw it at most 6.8 in wide."""
    nb = sources.read_text_notebook(_next_source(name))
    small = [(w, round(pt, 1)) for cell in nb.cells if cell.cell_type == "code" and "plt.show()" in cell.source
             for w, pt in [figure_text_pt(cell.source)] if pt < MIN_TEXT_PT]
    if name in SMALL_TEXT_UNTIL_RERUN:
        assert small, f"{name}'s figures now read at 9 pt: remove it from SMALL_TEXT_UNTIL_RERUN"
    else:
        assert not small, f"{name}: figures (width in, smallest text pt as shown) under {MIN_TEXT_PT} pt: {small}"


def unformatted_counts(values: dict, markdown: str) -> list[str]:
    """The glued names, among ``values``, holding a whole number of 1,000 or more that ``markdown`` shows
    through ``{glue:text}`` with no format (so as 1000, not 1,000)."""
    counts = {k for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 1000}
    return sorted({m for m in re.findall(r"\{glue:text\}`([A-Za-z_][A-Za-z0-9_]*)`", markdown) if m in counts})


def test_unformatted_counts_are_found():
    text = "{glue:text}`steps` updates, {glue:text}`n:,` sentences, {glue:text}`small`, {glue:text}`bleu:.1f`"
    values = {"steps": 2640, "n": 1000, "small": 999, "bleu": 35.0, "flag": True}
    assert unformatted_counts(values, text) == ["steps"]
    assert unformatted_counts({"steps": -1000}, "{glue:text}`steps`") == ["steps"]


@pytest.mark.parametrize("name", CHAPTERS)
def test_glued_counts_show_thousands_separators(name):
    """A whole number of 1,000 or more glued into the prose (updates, sentences, samples) reads 1,000, as
    the tables and the rest of the text write it (issue 46, item 3: one format per quantity): each
    reference names a format (``{glue:text}`name:,```), in the committed source and in the next run's.
    The values are those of the committed notebook's last full run."""
    values = sources.glued_values(nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4))
    for path in {ROOT / "notebooks" / f"{name}.md", _next_source(name)}:
        markdown = "\n".join(sources.markdown_cells(sources.read_text_notebook(path)))
        assert not unformatted_counts(values, markdown), \
            f"{path.relative_to(ROOT)}: write {{glue:text}}`name:,` for {unformatted_counts(values, markdown)}"


def _exercises(path, nb=None):
    """The labels of a chapter source's exercises (or of ``nb``, the notebook the book renders from it),
    after checking that each has exactly one gated solution, closed before the next one opens, with at
    least one code cell inside it."""
    import re

    name = path.relative_to(ROOT)
    nb = sources.read_text_notebook(path) if nb is None else nb
    exercises, starts, code_cells, current = [], {}, {}, None
    for cell in nb.cells:
        if cell.cell_type == "code":
            if current is not None:
                code_cells[current] = code_cells.get(current, 0) + 1
            continue
        # an exercise fenced either way (``:::`` or backticks), so that neither form escapes the check
        events = (r"^(?::::|```)\{exercise\}\n:label: (?P<exercise>\S+)$|^```\{solution-start\} (?P<start>\S+)$"
                  r"|^```\{solution-(?P<end>end)\}$")
        for event in re.finditer(events, cell.source, flags=re.M):  # in the order they appear
            if event["exercise"]:
                exercises.append(event["exercise"])
            elif event["start"]:
                assert current is None, f"{name}: the solution of {current} is not closed"
                current = event["start"]
                assert current in exercises, f"{name}: a solution to an unknown exercise {current}"
                starts[current] = starts.get(current, 0) + 1
            else:
                assert current is not None, f"{name}: solution-end without solution-start"
                current = None
    assert current is None, f"{name}: the solution of {current} is not closed"
    for label in exercises:
        assert starts.get(label, 0) == 1, f"{name}: exercise {label} has {starts.get(label, 0)} solutions"
        assert code_cells.get(label, 0) >= 1, f"{name}: the solution of {label} runs no code"
    return exercises


@pytest.mark.parametrize("name", CHAPTERS)
def test_every_exercise_has_one_solution_that_runs_code(name):
    """Exercises (sphinx-exercise) each have exactly one gated solution, closed before the next one
    opens, with at least one code cell inside it: the answer is computed, not typed. Checked in the
    source the chapter's next run executes (a chapter awaiting an accelerator run has a committed notebook
    from its previous version, which that run replaces)."""
    _exercises(_next_source(name))


@pytest.mark.parametrize("name", CHAPTERS)
def test_every_chapter_sets_exercises(name):
    """Every chapter closes with exercises, as the book's chapter shape asks (docs/conventions: claim,
    statement, computation, figures, exercises), in the source its next run executes."""
    assert _exercises(_next_source(name)), f"{_next_source(name).relative_to(ROOT)} sets no exercise"


def _intro_exercise_phrase(with_exercises: dict[str, bool]) -> str | None:
    """What the landing page must say of where exercises are, given for each part of the book (its
    numeral) whether every chapter of it that the book renders sets exercises; None: no part does."""
    parts = [numeral for numeral, every in with_exercises.items() if every]
    if parts and len(parts) == len(with_exercises):
        return "Every chapter ends with exercises"
    if not parts:
        return None
    names = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"The chapters of Part{'s' if len(parts) > 1 else ''} {names} end with exercises"


def test_the_intro_phrase_names_the_parts_whose_chapters_all_set_exercises():
    assert _intro_exercise_phrase({"I": True, "II": True, "III": False}) == \
        "The chapters of Parts I and II end with exercises"
    assert _intro_exercise_phrase({"I": True, "II": False, "III": False}) == "The chapters of Part I end with exercises"
    assert _intro_exercise_phrase({"I": True, "II": True, "III": True}) == "Every chapter ends with exercises"
    assert _intro_exercise_phrase({"I": False, "II": False}) is None


def test_the_landing_page_says_which_chapters_end_with_exercises():
    """book/intro.md says which parts' chapters end with exercises, as the committed chapters (the ones
    the book renders) set them: once the GPU run promotes the translation chapters' next versions, which add
    exercises to Part III, the sentence must say every chapter, and this test fails until it does."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    with_exercises = {}
    for part in toc["parts"]:
        names = [Path(c["file"]).name for c in part["chapters"] if c["file"].startswith("notebooks/")]
        if names:
            numeral = re.match(r"Part ([IVX]+):", part["caption"]).group(1)
            with_exercises[numeral] = all(_exercises(ROOT / "notebooks" / f"{n}.ipynb",
                                                     nbformat.read(ROOT / "notebooks" / f"{n}.ipynb", as_version=4))
                                          for n in names)
    intro = " ".join((ROOT / "book" / "intro.md").read_text().split())
    phrase = _intro_exercise_phrase(with_exercises)
    if phrase is None:
        assert "exercises" not in intro, "book/intro.md mentions exercises, but no part's chapters all set them"
    else:
        assert phrase in intro, f"book/intro.md should say '{phrase}' (parts whose chapters all set exercises: " \
                                f"{[p for p, every in with_exercises.items() if every]})"


def test_citation_file_names_the_paper_as_the_bibliography_does():
    """CITATION.cff's preferred citation and book/references.bib's li2024promises agree (title, authors, year)."""
    import re

    import yaml

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())["preferred-citation"]
    bib = (ROOT / "book" / "references.bib").read_text()
    entry = bib[bib.index("{li2024promises,"):]
    field = {k: re.search(rf"{k}\s*=\s*{{(.+?)}},?\n", entry).group(1) for k in ("title", "author", "year")}
    assert cff["title"] == field["title"]
    assert [f"{a['family-names']}, {a['given-names']}" for a in cff["authors"]] == field["author"].split(" and ")
    assert str(cff["year"]) == field["year"]


def test_benchmarks_readme_names_every_benchmark():
    """``benchmarks/README.md`` says what each script of ``benchmarks/`` measures, and where the GPU
    runs' records are: a new benchmark that is not named there fails here."""
    rows = [line for line in (ROOT / "benchmarks" / "README.md").read_text().splitlines() if line.startswith("| `")]
    named = {line.split("`")[1] for line in rows}
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        assert script.name in named, f"benchmarks/README.md does not name {script.name}"
    assert {"gpu_runs/", "cpu_runs/"} <= named


def test_make_book_rebuilds_every_page_when_only_the_books_css_changed(tmp_path):
    """Sphinx copies book/_static into the build only when it rewrites a page, so ``make book`` builds
    every page (``--all``) when a static file differs from its built copy or has none; with every copy
    current it builds only what changed."""
    import subprocess

    built = tmp_path / "_static"
    shutil.copytree(ROOT / "book" / "_static", built)

    def build_command():
        dry = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(ROOT), "book", f"BUILT_STATIC={built}"],
                             capture_output=True, text=True)
        assert dry.returncode == 0, dry.stderr
        return next(line for line in dry.stdout.splitlines() if "jupyter-book build" in line)

    assert not build_command().endswith("--all")
    css = built / "book.css"
    css.write_text(css.read_text() + "/* an older copy */\n")
    assert build_command().endswith(" --all")
    css.unlink()
    assert build_command().endswith(" --all")
    shutil.rmtree(built)
    assert build_command().endswith(" --all")


def test_github_workflow_runs_the_readme_commands_and_publishes_what_make_book_builds():
    """.github/workflows/book.yml runs the README's two set-up commands (one job each), uploads
    the folder ``make book`` writes, and deploys it only from a push to main, after both jobs."""
    import re

    import yaml

    readme = (ROOT / "README.md").read_text()
    setup = readme[readme.index("## Set up"):]
    block = re.search(r"```bash\n(.*?)```", setup, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make book", "make test"], commands

    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    jobs = wf["jobs"]
    runs = {name: [s["run"] for s in job["steps"] if "run" in s] for name, job in jobs.items()}
    for command in commands:
        assert [name for name, r in runs.items() if any(x.startswith(command + " ") or x == command for x in r)], \
            f"no job of the workflow runs {command!r}"
    uploads = [s for job in jobs.values() for s in job["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert len(uploads) == 1
    makefile = (ROOT / "Makefile").read_text()
    book_recipe = makefile[makefile.index("\nbook:"):].split("\n\n")[0]
    assert f"$(CURDIR)/{uploads[0]['with']['path']}/index.html" in book_recipe
    deploy = jobs["deploy"]
    assert set(deploy["needs"]) == set(jobs) - {"deploy"}
    assert "refs/heads/main" in deploy["if"] and "push" in deploy["if"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert wf["permissions"] == {"contents": "read"}


#: The stderr messages a committed run may hold: environment notices the rendered book leaves out
#: (``nb_output_stderr: remove`` in _config.yml). Anything else must be looked at, not hidden.
BENIGN_STDERR = (
    "TqdmWarning: IProgress not found. Please update jupyter and ipywidgets.",  # tqdm.auto without ipywidgets
    "UserWarning: The figure layout has changed to tight",  # matplotlib: tight_layout on a constrained figure
    # XLA's GPU autotuner timing a candidate kernel while compiling: its delay kernel gave up, so that
    # measurement is less accurate (the choice of kernel, not any result; openxla/xla#26466)
    "cuda_timer.cc:88] Delay kernel timed out: measured time has sub-optimal accuracy.",
)


def benign_stderr(text: str) -> bool:
    """True when every line of a stderr stream, apart from the indented source lines Python prints
    under a warning, is one of :data:`BENIGN_STDERR`."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("  ")]
    return bool(lines) and all(any(b in line for b in BENIGN_STDERR) for line in lines)


def test_rendered_book_leaves_out_stderr_and_committed_runs_have_only_benign_stderr():
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["config"]["nb_output_stderr"] == "remove"
    unexpected = []
    for name in CHAPTERS:
        nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        for i, cell in enumerate(nb.cells):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream" and out.get("name") == "stderr" and not benign_stderr(out.text):
                    unexpected.append(f"{name} cell {i}: {out.text[:300]!r}")
    assert not unexpected, ("stderr the book would hide; fix its cause or, if it is harmless, add it to "
                            "BENIGN_STDERR:\n" + "\n".join(unexpected))


@pytest.mark.parametrize("text, ok", [
    ("/x/tqdm/auto.py:21: TqdmWarning: IProgress not found. Please update jupyter and ipywidgets. See https://x\n"
     "  from .autonotebook import tqdm as notebook_tqdm\n", True),
    ("/tmp/ipykernel_1/2.py:12: UserWarning: The figure layout has changed to tight\n  fig.tight_layout()\n", True),
    ("/x/ising.py:3: RuntimeWarning: overflow encountered in exp\n  z = np.exp(a)\n", False),
    ("/x/tqdm/auto.py:21: TqdmWarning: IProgress not found. Please update jupyter and ipywidgets.\n"
     "  from .autonotebook import tqdm\n/x/m.py:1: RuntimeWarning: divide by zero\n  y = 1 / x\n", False),
    ("W1127 21:49:07.483002     944 cuda_timer.cc:88] Delay kernel timed out: measured time has sub-optimal accuracy. "
     "There may be a missing warmup execution, please investigate in Nsight Systems.\n", True),
    ("W1127 21:49:07.483002     944 cuda_timer.cc:88] Delay kernel timed out\nE1127 pjrt.cc:1] INTERNAL: bad\n", False),
    ("decode: 100%|##########| 8/8 [00:01<00:00]\n", False),
    ("Traceback (most recent call last):\n", False),
])
def test_benign_stderr_accepts_only_the_listed_notices(text, ok):
    assert benign_stderr(text) is ok


def test_toc_lists_chapters_with_sources():
    assert CHAPTERS, "no chapters under notebooks/ in _toc.yml"
    for name in CHAPTERS:
        assert (ROOT / "notebooks" / f"{name}.md").is_file()


def test_parameters_cell_literals_only():
    nb = _nb(_params_cell("a = 1  # comment\nb = [1, 2]\nc = 'x'\nd = {'k': 0.5}"))
    assert sources.parameters_cell(nb) == {"a": 1, "b": [1, 2], "c": "x", "d": {"k": 0.5}}
    with pytest.raises(ValueError, match="'b' must be a literal.*Compute derived values in a later cell"):
        sources.parameters_cell(_nb(_params_cell("a = 2\nb = a * 2")))
    with pytest.raises(ValueError, match="only hold `name = literal`"):
        sources.parameters_cell(_nb(_params_cell("import os")))
    with pytest.raises(ValueError, match="exactly one cell tagged 'parameters'; found 2"):
        sources.parameters_cell(_nb(_params_cell("a = 1"), _params_cell("b = 2")))
    with pytest.raises(ValueError, match="found 0"):
        sources.parameters_cell(_nb(nbformat.v4.new_code_cell("a = 1")))


@pytest.mark.parametrize("source", [f"notebooks/{name}.md" for name in CHAPTERS])
def test_every_chapter_is_runnable_by_the_book_rules(source):
    """One literal parameters cell; smoke overrides name real parameters; the Colab badge
    points at this notebook in the configured repository; the first code cell installs only
    on Colab; the last code cell ends by closing the provenance record. In the chapters' sources."""
    import yaml

    name = Path(source).stem
    nb = sources.read_text_notebook(ROOT / source)
    params = sources.parameters_cell(nb)
    smoke = sources.smoke_overrides(ROOT)
    assert name in smoke, f"params/smoke.yaml has no entry for {name}"
    assert set(smoke[name]) <= set(params)
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    badge = f"https://colab.research.google.com/github/{repo.removeprefix('https://github.com/')}/blob/main/notebooks/{name}.ipynb"
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    assert badge in first_md.source and "](../book/_static/colab-badge.svg)" in first_md.source  # self-hosted
    code = [c for c in nb.cells if c.cell_type == "code"]
    colab = next(i for i, c in enumerate(code) if 'if "google.colab" in sys.modules:' in c.source)
    early = "".join(c.source for c in code[:colab])
    assert not re.search(r"^\s*(from|import) gmlm_lib", early, flags=re.M), "gmlm_lib is imported before the Colab cell"
    assert "provenance.start(" in "".join(c.source for c in code)
    last = ast.parse(code[-1].source).body[-1]  # the last statement of the last code cell closes the record
    assert isinstance(last, ast.Expr) and ast.unparse(last.value).startswith("provenance.finish(run"), code[-1].source


# Chapters whose Colab cell still installs the newest `main`: each is pinned (sources.COLAB_INSTALL_CELL)
# when its code is next changed, since that needs its full rerun anyway.
UNPINNED: set[str] = set()  # every chapter is pinned; a new chapter starts pinned


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    strict=True, reason="its Colab cell still installs main: pinned at its next full run")) if n in UNPINNED else n
    for n in CHAPTERS])
def test_colab_cell_installs_the_commit_of_the_outputs(name):
    """Right after the parameters cell, the Colab cell installs gmlm-book at ``install_ref`` (a full
    run sets it to its commit: the committed outputs name the code that made them), keeping Colab's jax."""
    nb = sources.read_text_notebook(ROOT / "notebooks" / f"{name}.md")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []) and sources.INSTALL_REF in sources.parameters_cell(nb)
    assert code[1].source.strip() == sources.COLAB_INSTALL_CELL.strip()
    ipynb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    injected = next(c.source for c in ipynb.cells if sources.INJECTED_TAG in c.metadata.get("tags", []))
    commit = ipynb.metadata["gmlm"]["provenance"]["gmlm_lib_commit"]
    assert f'{sources.INSTALL_REF} = "{commit}"' in injected


@pytest.mark.parametrize("name", CHAPTERS)
def test_papermill_sees_every_parameter(name):
    """papermill parses the parameters cell line by line for ``--help-notebook`` and warns
    "Passed unknown parameter" for every name it could not parse (an ``=`` in a comment was
    enough): it must find exactly the names the cell assigns."""
    from papermill.translators import PythonTranslator

    nb = sources.read_text_notebook(ROOT / "notebooks" / f"{name}.md")
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    seen = [p.name for p in PythonTranslator.inspect(cell)]
    assert seen == list(sources.parameters_cell(nb)), f"papermill cannot parse {set(sources.parameters_cell(nb)) - set(seen)}"


@pytest.mark.parametrize("path", sorted((ROOT / "params" / "padir").glob("*.yaml")), ids=lambda p: p.name)
def test_documented_parameter_sets_name_real_parameters(path):
    """``papermill -f`` injects any name it is given, so a misspelt key in a documented set would
    silently leave the default in force: every key must be a parameter of the PaDIR chapter, with
    a value of the default's type (an int where a float is expected is fine)."""
    import yaml

    from gmlm_lib.mt import config

    chapter = ROOT / "notebooks" / "padir.md"
    defaults = sources.parameters_cell(sources.read_text_notebook(chapter))
    values = yaml.safe_load(path.read_text())
    assert values, f"{path.name} sets nothing"
    assert set(values) <= set(defaults), f"{path.name}: not parameters of padir: {sorted(set(values) - set(defaults))}"
    for key, value in values.items():
        default = defaults[key]
        if default is None:  # a setting that takes its preset's value: its type is the Experiment field's
            continue
        ok = type(value) in (int, float) if type(default) is float else type(value) is type(default)
        assert ok, f"{path.name}: {key} = {value!r}, the default is {default!r}"
    config.from_yaml(path)  # names, types and ranges of every setting, as the chapter checks them


def test_smoke_yaml_only_names_chapters():
    assert set(sources.smoke_overrides(ROOT)) <= set(CHAPTERS)


def test_unknown_parameter_is_an_error():
    name = CHAPTERS[0]
    with pytest.raises(KeyError, match="unknown parameter\\(s\\) \\['no_such_thing'\\].*from the command line"):
        runner.resolve_parameters(ROOT, name, "smoke", {"no_such_thing": 1})
    with pytest.raises(ValueError, match="profile must be one of"):
        runner.resolve_parameters(ROOT, name, "fast")
    with pytest.raises(FileNotFoundError, match="not a chapter of the book"):
        runner.resolve_parameters(ROOT, "missing_chapter", "smoke")


def test_profiles_layer_parameters():
    name = CHAPTERS[0]
    defaults = sources.parameters_cell(sources.read_text_notebook(ROOT / "notebooks" / f"{name}.md"))
    smoke = sources.smoke_overrides(ROOT)[name]
    full, inject_full = runner.resolve_parameters(ROOT, name, "full")
    assert full == defaults and inject_full == {}
    key = next(k for k, v in smoke.items() if isinstance(v, int) and not isinstance(v, bool))
    params, inject = runner.resolve_parameters(ROOT, name, "smoke", {key: smoke[key] + 1})
    assert params[key] == smoke[key] + 1 and inject[key] == smoke[key] + 1
    assert {k: params[k] for k in smoke if k != key} == {k: v for k, v in smoke.items() if k != key}


def test_provenance_start_checks_names(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv(provenance.ENV_PARAMETERS, json.dumps({"a": 1, "b": 2}))
    with pytest.raises(ValueError, match="missing \\['b'\\], extra \\['c'\\]"):
        provenance.start({"a": 1, "c": 3})
    out = tmp_path / "rec.json"
    monkeypatch.setenv(provenance.ENV_RECORD, str(out))
    rec = provenance.finish(provenance.start({"a": 1, "b": 2}))
    line = capsys.readouterr().out
    assert line.startswith("Provenance:") and "a=1, b=2" in line and "JAX" in line
    assert json.loads(out.read_text())["parameters"] == {"a": 1, "b": 2}
    for key in ("wall_time_s", "gmlm_lib_commit", "jax_version", "backend", "device_kind", "cpu_model"):
        assert key in rec
    assert rec["cpu_model"].strip() and rec["cpu_model"] in line  # two CPUs with as many cores can time 2x apart
    assert rec["cpu_model"] in provenance.hardware_summary()
    assert rec["compilations"] >= 0 and rec["compile_s"] >= 0 and rec["cache_hits"] >= 0
    assert provenance.hardware_summary(dict(device_count=1, device_kind="cpu", backend="cpu", cpu_count=2)) == \
        "1 x cpu (cpu, 2 CPU cores)"  # a record made before the CPU model was recorded
    assert "artifacts" not in rec


def _gpu_runs(book_copy, seconds, commits, **compiles):
    """Mark the translation chapters' committed runs as GPU runs of ``seconds`` each, chapter i at
    ``commits[i]``, started one minute apart in the order of ``sources.TRANSLATION_CHAPTERS``, each with
    ``compiles`` in its record (default: 15 s of compiling 40 programs, summed; no wall time recorded)."""
    for i, (name, commit) in enumerate(zip(sources.TRANSLATION_CHAPTERS, commits)):
        ipynb = book_copy / "notebooks" / f"{name}.ipynb"
        nb = nbformat.read(ipynb, as_version=4)
        nb.metadata["gmlm"]["provenance"].pop("compile_wall_s", None)
        nb.metadata["gmlm"]["provenance"].update(backend="gpu", device_count=1, device_kind="NVIDIA H100 80GB HBM3",
                                                 **{**dict(compile_s=15.0, compilations=40, cache_hits=5), **compiles},
                                                 gmlm_lib_commit=commit, started_at=f"2026-11-28T10:{i:02d}:00+00:00")
        nb.metadata["gmlm"]["total_wall_time_s"] = seconds
        nbformat.write(nb, ipynb)
    return nb, ipynb


def test_provenance_page_lists_the_translation_runs_with_their_compile_time_and_commits(book_copy):
    """Each translation chapter's run with its hardware, wall time and compile time (the wall time in which
    a program compiled, "not recorded" for runs that kept only the summed seconds), the total, and the
    commits when the runs came from more than one; a chapter without a full run is named."""
    nb, ipynb = _gpu_runs(book_copy, 120.0, ["a" * 40] * 4)
    text = " ".join(checks.translation_runs(book_copy))
    assert "| {doc}`../notebooks/stutter` | 1 x NVIDIA H100 80GB HBM3 | `aaaaaaaaaaaa` | 2026-11-28 10:01 | 2.00 | " \
           "not recorded | 0.25 | 40 (5) |" in text
    assert "Their full runs took 8.00 min together, compilation included." in text and "commits" not in text
    _gpu_runs(book_copy, 120.0, ["a" * 40] * 3 + ["b" * 40], compile_wall_s=6.0)
    text = " ".join(checks.translation_runs(book_copy))
    assert "| 2.00 | 0.10 | 0.25 | 40 (5) |" in text
    assert "They ran at 2 commits (`aaaaaaaaaaaa`, `bbbbbbbbbbbb`), so their trained models are not one set." in text
    del nb.metadata["gmlm"]["total_wall_time_s"]  # a record of its hardware but no finished run
    nbformat.write(nb, ipynb)
    assert "8.00 min" not in " ".join(checks.translation_runs(book_copy))
    assert "ablations has no full run." in " ".join(checks.translation_runs(book_copy))


def test_provenance_page_names_the_cpu_of_each_run(book_copy):
    """The page has a CPU column: the model a run recorded, or "not recorded" for older runs."""
    name = CHAPTERS[0]
    ipynb = book_copy / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.metadata["gmlm"]["provenance"]["cpu_model"] = "Some CPU 9000"
    nbformat.write(nb, ipynb)
    row = next(r for r in checks.provenance_page(book_copy).splitlines() if r.startswith(f"| {{doc}}`../notebooks/{name}`"))
    assert "| Some CPU 9000 |" in row
    del nb.metadata["gmlm"]["provenance"]["cpu_model"]
    nbformat.write(nb, ipynb)
    row = next(r for r in checks.provenance_page(book_copy).splitlines() if r.startswith(f"| {{doc}}`../notebooks/{name}`"))
    assert "| not recorded |" in row


def test_provenance_page_shows_wall_times_with_one_decimal(book_copy):
    """Wall times in seconds with one decimal in both tables, however the run recorded them."""
    name = CHAPTERS[0]
    ipynb = book_copy / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.metadata["gmlm"]["total_wall_time_s"] = 298.2249
    nb.metadata["gmlm"]["provenance"]["artifacts"] = {
        "AR teacher": dict(updates=2800, wall_s=52, commits=["a" * 40], hardware=["1 x cpu (cpu, 2 CPU cores)"])}
    nbformat.write(nb, ipynb)
    page = checks.provenance_page(book_copy)
    row = next(r for r in page.splitlines() if r.startswith(f"| {{doc}}`../notebooks/{name}` | full"))
    assert "| full | 298.2 |" in row
    assert f"| {{doc}}`../notebooks/{name}` | AR teacher | reused | 2800 | 52.0 |" in page


def test_provenance_records_the_artifacts_a_run_used(capsys):
    """A reused model's training cost, commits and hardware (each segment of a resumed run) and a
    distilled corpus' record reach the run's record and its visible line; a record without the
    fields is an error that says what to pass."""
    env = dict(device_count=1, device_kind="cpu", backend="cpu", cpu_count=2)
    model = {"done": 1600, "wall_s": 1871.15, "commit": "b" * 40, "hardware": env,
             "segments": [{"commit": "a" * 40, "hardware": "1 x cpu (cpu, 2 CPU cores)", "wall_s": 1176.2},
                          {"commit": "b" * 40, "hardware": "1 x H100 (gpu, 16 CPU cores)", "wall_s": 695.0}]}
    corpus = {"wall_s": 390.6, "commit": "c" * 40, "hardware": "1 x cpu (cpu, 2 CPU cores)", "sentences": 29000}
    rec = provenance.finish(provenance.start({}), artifacts={"PaDIR distilled": model, "distillation": corpus})
    assert rec["artifacts"]["PaDIR distilled"] == dict(updates=1600, wall_s=1871.2, commits=["a" * 40, "b" * 40],
                                                       hardware=["1 x cpu (cpu, 2 CPU cores)",
                                                                 "1 x H100 (gpu, 16 CPU cores)"])
    assert rec["artifacts"]["distillation"] == dict(updates=None, wall_s=390.6, commits=["c" * 40],
                                                    hardware=["1 x cpu (cpu, 2 CPU cores)"])
    out = capsys.readouterr().out
    assert "used PaDIR distilled: 1600 updates, 1871 s, gmlm_lib aaaaaaaaaaaa, bbbbbbbbbbbb" in out
    assert "used distillation: 391 s" in out
    with pytest.raises(ValueError, match=r"lacks \['commit', 'hardware'\]"):
        provenance.artifact_summary({"wall_s": 1.0})


# --- freshness -----------------------------------------------------------------------------


def test_committed_book_is_in_sync_and_fresh():
    assert checks.check_all(ROOT) == []


@pytest.fixture
def book_copy(tmp_path):
    """A minimal copy of the book: config, toc, params, the chapter pairs, and the tagged sources."""
    for f in ("_toc.yml", "_config.yml"):
        shutil.copy(ROOT / f, tmp_path / f)
    for name in ("notebooks", "book", "params", "gmlm_lib", "tests"):  # the label index is generated from tags
        shutil.copytree(ROOT / name, tmp_path / name, ignore=checkout_ignore())
    assert checks.check_all(tmp_path) == []
    return tmp_path


def test_make_provenance_writes_all_three_generated_pages(book_copy):
    """The provenance page, the landing page's results overview and the running page's table of run times,
    each rewritten from the notebooks (check_all names each page that is out of date)."""
    from gmlm_lib.book import overview, run_times

    for page in (checks.PROVENANCE_PAGE, overview.PAGE, run_times.PAGE):
        (book_copy / page).write_text("stale\n")
    (book_copy / run_times.FILE).write_text("{}\n")  # a store that holds no run
    assert len(checks.check_all(book_copy)) == 4
    assert checks.write_provenance_page(book_copy) == book_copy / checks.PROVENANCE_PAGE
    assert checks.check_all(book_copy) == []
    assert (book_copy / overview.PAGE).read_text() == overview.page(book_copy)
    assert (book_copy / run_times.PAGE).read_text() == run_times.page(book_copy)


def test_the_provenance_page_lists_a_chapter_never_run_as_not_run(book_copy):
    (book_copy / "notebooks" / "stutter.ipynb").unlink()
    assert "| {doc}`../notebooks/stutter` | not run | | | | | | |" in checks.provenance_page(book_copy)


def _edit_first_code_cell(nb):
    cell = next(c for c in nb.cells if c.cell_type == "code"
                and not {"parameters", sources.INJECTED_TAG} & set(c.metadata.get("tags", [])))
    cell.source += "\nprint('edited')"


def test_editing_code_without_rerunning_fails(book_copy):
    """Edit a code cell in both files (in sync, as jupytext would leave them) but do not rerun:
    the outputs were produced by other code, and the check must say so."""
    name = CHAPTERS[0]
    md, ipynb = book_copy / "notebooks" / f"{name}.md", book_copy / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    _edit_first_code_cell(nb)
    nbformat.write(nb, ipynb)
    text = sources.read_text_notebook(md)
    _edit_first_code_cell(text)
    import jupytext

    jupytext.write(text, md, fmt="md:myst")
    problems = checks.check_all(book_copy)
    assert any("not produced by its current code" in p for p in problems), problems
    assert not any("code cells" in p and "differ" in p for p in problems), problems


def test_editing_the_text_source_only_fails(book_copy):
    name = CHAPTERS[0]
    md = book_copy / "notebooks" / f"{name}.md"
    md.write_text(md.read_text().replace("import jax\n", "import jax  # changed\n", 1))
    problems = checks.check_all(book_copy)
    assert any("code cells" in p and "differ" in p for p in problems), problems


def test_markdown_edit_then_sync_passes(book_copy):
    name = CHAPTERS[0]
    md = book_copy / "notebooks" / f"{name}.md"
    md.write_text(md.read_text().replace("## Why Ising models", "## Why Ising models (edited)", 1))
    assert any("markdown cells" in p for p in checks.check_all(book_copy))
    assert checks.sync(book_copy) == [book_copy / "notebooks" / f"{name}.ipynb"]
    assert checks.check_all(book_copy) == []


def test_text_showing_a_value_its_run_did_not_glue_fails_after_sync(book_copy):
    name = CHAPTERS[0]
    md = book_copy / "notebooks" / f"{name}.md"
    md.write_text(md.read_text().replace("## Why Ising models", "## Why Ising models {glue:text}`never_glued:.2f`",
                                         1))
    checks.sync(book_copy)
    problems = checks.check_all(book_copy)
    assert any("did not glue: ['never_glued']" in p for p in problems), problems


def test_glued_values_side_by_side_are_found_in_pairs():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "at T = {glue:text}`t` {glue:text}`b:.1f`; **{glue:text}`x`**\n**{glue:text}`y`** {glue}`z` and "
        "{glue:text}`u`, {glue:text}`v` or {glue:text}`p` of {glue:text}`q`")])
    assert sources.adjacent_glue(nb) == [("t", "b"), ("x", "y"), ("y", "z")]


def test_text_showing_glued_values_side_by_side_fails_in_a_chapter_in_step_or_ahead_of_its_notebook(book_copy):
    name = CHAPTERS[0]
    md = book_copy / "notebooks" / f"{name}.md"
    text = sources.read_text_notebook(md)
    first = sorted(sources.glue_references(text))[0]  # a value the chapter's run glued
    md.write_text(md.read_text().replace("## Why Ising models", f"## Why Ising models {{glue:text}}`{first}` "
                                         f"{{glue:text}}`{first}`", 1))
    checks.sync(book_copy)
    problems = checks.check_all(book_copy)
    assert problems == [f"{name}: its text shows glued values side by side with nothing between them ({first} "
                        f"{first}): a reader sees one run of numbers; put a comma or a word between them (then "
                        "`make sync`)."]
    md.write_text(md.read_text().replace(f"`{first}` {{glue", f"`{first}`, {{glue", 1))
    checks.sync(book_copy)
    assert checks.check_all(book_copy) == []
    ahead = book_copy / "notebooks" / "padir.md"  # ahead of its notebook (its next version, awaiting its run)
    assert checks.awaiting(ahead, ahead.with_suffix(".ipynb")) is not None
    ahead.write_text(ahead.read_text().replace("`eval_T_long`, {glue", "`eval_T_long` {glue", 1))
    assert checks.check_all(book_copy) == [
        "padir: its text shows glued values side by side with nothing between them (eval_T_long "
        "dist_bleu_long): a reader sees one run of numbers; put a comma or a word between them (then `make sync`)."]


def _move_ahead(md: Path) -> None:
    """The chapter's next version: a code cell more, and a box that tags a paper label."""
    md.write_text(md.read_text() + "\n```{prf:remark} A remark of the next version [Theorem 1]\n:label: rem-next\n\n"
                  "Text.\n```\n\n```{code-cell} ipython3\n_ = 0\n```\n")


def test_only_a_translation_chapter_may_run_ahead_of_its_notebook_and_check_lists_it(book_copy):
    """A translation chapter whose .md has moved on waits for its accelerator run: the check stays clean
    and lists it with its last run's commit, sync and the label index leave its notebook's text as the
    book shows it, and that notebook must still be whole and fresh in itself; a theory chapter whose code
    moved on fails the check."""
    from gmlm_lib.book import labels

    md, ipynb = book_copy / "notebooks" / "ablations.md", book_copy / "notebooks" / "ablations.ipynb"
    _move_ahead(md)
    commit = nbformat.read(ipynb, as_version=4).metadata["gmlm"]["provenance"]["gmlm_lib_commit"]
    assert checks.awaiting(md, ipynb) == commit
    assert checks.check_all(book_copy) == [] and checks.awaiting_all(book_copy)["ablations"] == commit
    assert "rem-next" not in labels.page(book_copy)  # the index describes the notebook the book shows
    before = ipynb.read_bytes()
    assert ipynb not in checks.sync(book_copy) and ipynb.read_bytes() == before
    nb = nbformat.read(ipynb, as_version=4)  # a code cell of the shown notebook edited without a rerun
    cell = next(c for c in nb.cells if c.cell_type == "code" and not sources.injected(c))
    cell.source += "  # edited"
    nbformat.write(nb, ipynb)
    assert [p for p in checks.check_all(book_copy) if p.startswith("ablations:")] == [
        "ablations: the outputs of ablations.ipynb were not produced by its current code (code changed since the "
        "last run); rerun `make full NB=ablations`."]
    ipynb.write_bytes(before)
    theory = book_copy / "notebooks" / f"{CHAPTERS[0]}.md"
    _move_ahead(theory)
    assert checks.awaiting(theory, theory.with_suffix(".ipynb")) is None
    assert f"{CHAPTERS[0]}: the code cells of {theory.name} and {CHAPTERS[0]}.ipynb differ; rerun " \
           f"`make full NB={CHAPTERS[0]}`." in checks.check_all(book_copy)


def test_glue_references_find_roles_and_directives():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "A {glue:text}`a_1:.2f` and {glue}`b`, not `c`.\n\n```{glue:figure} fig_x\n:name: f\n```\n")])
    assert sources.glue_references(nb) == {"a_1", "b", "fig_x"}
    out = nbformat.v4.new_output("display_data", data={sources.GLUE_RECORD: "1"},
                                 metadata={"scrapbook": {"name": "a_1", "mime_prefix": ""}})
    assert sources.glued_values(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("", outputs=[out])])) == {"a_1": 1}


def test_smoke_output_is_not_a_committed_run(book_copy):
    name = CHAPTERS[0]
    ipynb = book_copy / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.metadata["gmlm"]["profile"] = "smoke"
    nbformat.write(nb, ipynb)
    problems = checks.check_all(book_copy)
    assert any("not a full one" in p for p in problems)
    assert any("provenance.md does not match" in p for p in problems)


def test_full_run_refuses_uncommitted_sources(monkeypatch, tmp_path):
    """A full run's outputs replace the committed notebook, so they must name a clean commit;
    refusing up front saves a long run that the check would reject."""
    name = CHAPTERS[0]
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / f"{name}.md", tmp_path / "notebooks")
    shutil.copy(ROOT / "_toc.yml", tmp_path)
    monkeypatch.setattr(provenance, "git_commit", lambda: "e" * 40 + "-dirty")
    with pytest.raises(ValueError, match="must start from committed sources.*commit them first"):
        runner.run_notebook(name, "full", root=tmp_path)
    assert not (tmp_path / "notebooks" / f"{name}.ipynb").exists()


def test_the_book_root_is_the_nearest_folder_up_with_both_the_toc_and_the_notebooks(tmp_path, monkeypatch):
    """Commands run from anywhere inside the book; a folder with only one of the two is not its root
    (a notebooks/ folder of another project, a stray _toc.yml), and none at all is named."""
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "book"
    (inner / "notebooks" / "deep").mkdir(parents=True)
    (inner / "_toc.yml").write_text("root: intro\n")
    (outer / "_toc.yml").write_text("root: intro\n")  # a _toc.yml without notebooks/ above the book
    assert sources.find_root(inner / "notebooks" / "deep") == inner.resolve()
    monkeypatch.chdir(inner / "notebooks")
    assert sources.find_root() == inner.resolve()
    (inner / "_toc.yml").unlink()  # notebooks/ without _toc.yml: not a root either
    with pytest.raises(FileNotFoundError, match="no book root .* at or above"):
        sources.find_root(inner / "notebooks" / "deep")


class _Started(Exception):
    """Raised by a stand-in for papermill: the run got as far as executing the notebook."""


def test_chapter_kernels_talk_over_unix_sockets_in_a_folder_of_their_own(monkeypatch, tmp_path):
    """run_notebook hands papermill a kernel manager whose kernel uses ZeroMQ's ipc transport with its socket
    files in the run's temporary folder: over TCP a kernel started by the other test worker can take a port
    between jupyter_client choosing it and the kernel binding it ("Address already in use", the kernel dead
    before its first cell). Two kernels started side by side through it both run, each over its own sockets."""
    import concurrent.futures

    import papermill

    name = CHAPTERS[0]
    (tmp_path / "book" / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / f"{name}.md", tmp_path / "book" / "notebooks")
    shutil.copy(ROOT / "_toc.yml", tmp_path / "book")
    shutil.copytree(ROOT / "params", tmp_path / "book" / "params")
    handed = []

    def execute(src, dst, **kw):
        handed.append(kw["kernel_manager_class"](kernel_name="python3"))
        raise _Started

    with monkeypatch.context() as patched:
        patched.setattr(papermill, "execute_notebook", execute)
        with pytest.raises(_Started):
            runner.run_notebook(name, "smoke", root=tmp_path / "book")
    km = handed[0]
    assert km.transport == "ipc" and Path(km.ip).name == "kernel"
    assert not Path(km.ip).parent.exists(), "the run's temporary folder (and the sockets in it) is removed"
    # the real thing: a kernel reports the transport of its connection file
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import json, ipykernel.connect\n"
        "print(json.load(open(ipykernel.connect.get_connection_file()))['transport'])")])
    nbformat.write(nb, tmp_path / "probe.ipynb")

    def run(i):
        folder = tmp_path / f"k{i}"
        folder.mkdir()
        papermill.execute_notebook(str(tmp_path / "probe.ipynb"), str(folder / "out.ipynb"), kernel_name="python3",
                                   progress_bar=False, kernel_manager_class=runner._kernel_manager_class(folder))
        out = nbformat.read(folder / "out.ipynb", as_version=4)
        return "".join(o.get("text", "") for o in out.cells[0].outputs).strip()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert list(pool.map(run, range(2))) == ["ipc", "ipc"]


def test_a_full_run_pins_the_install_cell_to_its_commit_and_a_smoke_run_does_not(monkeypatch, tmp_path):
    """What papermill is handed: a full run sets ``install_ref`` to the commit it runs (unless the
    caller sets it), a smoke run leaves the chapter's default; uncommitted sources stop only a full run
    (its outputs replace the committed notebook), so a smoke run of them starts."""
    import papermill

    name = CHAPTERS[0]
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / f"{name}.md", tmp_path / "notebooks")
    shutil.copy(ROOT / "_toc.yml", tmp_path)
    shutil.copytree(ROOT / "params", tmp_path / "params")
    handed = []

    def execute(src, dst, *, parameters, **kw):
        handed.append(dict(parameters))
        raise _Started

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.setattr(provenance, "git_commit", lambda: "f" * 40)
    for profile, overrides, want in (("full", {}, "f" * 40), ("full", {sources.INSTALL_REF: "v1.0"}, "v1.0"),
                                     ("smoke", {}, None)):
        with pytest.raises(_Started):
            runner.run_notebook(name, profile, overrides, root=tmp_path)
        assert handed[-1].get(sources.INSTALL_REF) == want, profile
    monkeypatch.setattr(provenance, "git_commit", lambda: "e" * 40 + "-dirty")
    with pytest.raises(_Started):
        runner.run_notebook(name, "smoke", root=tmp_path)
    assert not (tmp_path / "notebooks" / f"{name}.ipynb").exists()


def test_provenance_names_the_commit_the_run_started_with(monkeypatch):
    """A commit made while a long run goes on must not be credited with its results."""
    monkeypatch.setattr(provenance, "git_commit", lambda: "a" * 40)
    run = provenance.start({})
    assert "gmlm_lib_commit_at_finish" not in provenance.record(run)
    monkeypatch.setattr(provenance, "git_commit", lambda: "b" * 40)
    rec = provenance.record(run)
    assert rec["gmlm_lib_commit"] == "a" * 40 and rec["gmlm_lib_commit_at_finish"] == "b" * 40
    assert "sources changed while it ran" in provenance.summary_line(rec)
    rec["gmlm_lib_commit"] = "a" * 40 + "-dirty"  # the visible line keeps the mark too
    assert f"gmlm_lib {'a' * 12}-dirty;" in provenance.summary_line(rec)


def test_the_record_times_the_run_and_its_line_says_what_compiling_took(monkeypatch):
    monkeypatch.setattr(provenance, "git_commit", lambda: "a" * 40)
    run = provenance.start({"n": 2})
    run.started -= 5.0  # as if the run had begun 5 s ago
    rec = provenance.record(run)
    assert 5.0 <= rec["wall_time_s"] < 60.0
    assert rec["compile_wall_s"] <= rec["compile_s"] + 0.01
    rec.update(wall_time_s=12.0, compile_s=2.0, compile_wall_s=2.0, compilations=3, cache_hits=1)
    line = provenance.summary_line(rec)
    assert "wall time 12.0 s (2.0 s of it compiling 3 XLA programs, 1 read from the compilation cache); " in line
    assert "n=2" in line
    rec["cache_hits"] = 0
    assert "(2.0 s of it compiling 3 XLA programs); gmlm_lib aaaaaaaaaaaa;" in provenance.summary_line(rec)
    rec["compile_wall_s"] = 0.8  # three programs compiled side by side: 0.8 s of wall time, 2 s of compiling summed
    assert "(0.8 s of it compiling 3 XLA programs; 2.0 s summed over programs compiled side by side); " in \
        provenance.summary_line(rec)
    del rec["compile_wall_s"]  # a record from before the wall time was counted: the sum, called a sum
    assert "(compiling 3 XLA programs: 2.0 s summed over the programs); " in provenance.summary_line(rec)
    for key in ("compile_s", "compilations", "cache_hits"):  # a record from before compilations were counted
        del rec[key]
    assert "wall time 12.0 s; gmlm_lib" in provenance.summary_line(rec)


@pytest.mark.parametrize("field, value, message", [
    ("gmlm_lib_commit", "c" * 40 + "-dirty", "uncommitted sources (cccccccccccc-dirty)"),
    ("gmlm_lib_commit_at_finish", "d" * 40, "changed while its full run went on"),
])
def test_full_run_without_one_clean_commit_fails(book_copy, field, value, message):
    name = CHAPTERS[0]
    ipynb = book_copy / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.metadata["gmlm"]["provenance"][field] = value
    nbformat.write(nb, ipynb)
    assert any(p.startswith(name) and message in p for p in checks.check_all(book_copy))
    if field == "gmlm_lib_commit":  # the provenance page keeps the mark instead of cutting it off
        assert f"`{'c' * 12}-dirty`" in checks.provenance_page(book_copy)


def test_unlisted_notebook_source_fails(book_copy):
    (book_copy / "notebooks" / "stray.md").write_text("# stray\n")
    assert any("stray" in p and "not listed in _toc.yml" in p for p in checks.check_all(book_copy))


def test_provenance_page_lists_the_artifacts_a_run_used(book_copy):
    """A chapter that reused a trained model shows its training cost beside its own wall time."""
    name = CHAPTERS[0]
    ipynb = book_copy / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.metadata["gmlm"]["provenance"]["artifacts"] = {
        "AR teacher": dict(updates=2800, wall_s=2364.0, commits=["a" * 40, "b" * 40 + "-dirty"],
                           hardware=["1 x cpu (cpu, 2 CPU cores)"])}
    nbformat.write(nb, ipynb)
    page = checks.provenance_page(book_copy)
    assert "## Trained models and other artifacts the runs used" in page
    assert (f"| {{doc}}`../notebooks/{name}` | AR teacher | reused | 2800 | 2364.0 | `{'a' * 12}`, `{'b' * 12}-dirty` | "
            "1 x cpu (cpu, 2 CPU cores) |") in page
    assert any("provenance.md does not match" in p for p in checks.check_all(book_copy))


def _page_hours(page: str, words: str) -> float:
    """The hours the provenance page shows right after `words` ("costs their sum," is its total)."""
    return float(re.search(re.escape(words) + r" ([0-9.]+) h", page).group(1))


PAGE_TOTAL = "costs their sum,"
PAGE_REUSED = "reused instead of making add"
PAGE_CHAPTERS = "wall times above add up to"


def test_the_book_rerun_time_counts_each_reused_artifact_once(book_copy):
    """The total on the provenance page is every chapter's wall time plus each reused artifact once
    (the AR teacher several chapters load was trained once), graded against the 3-hour budget; the
    page's two parts, in hours, add up to it."""
    teacher = dict(updates=2800, wall_s=3600.0 * 2, commits=["a" * 40], hardware=["1 x cpu (cpu, 2 CPU cores)"])
    first = checks.provenance_page(book_copy)
    before, reused_before = _page_hours(first, PAGE_TOTAL), _page_hours(first, PAGE_REUSED)
    for name in CHAPTERS[:2]:
        ipynb = book_copy / "notebooks" / f"{name}.ipynb"
        nb = nbformat.read(ipynb, as_version=4)
        nb.metadata["gmlm"]["provenance"]["artifacts"] = {"AR teacher": teacher}
        nbformat.write(nb, ipynb)
    page = checks.provenance_page(book_copy)
    assert _page_hours(page, PAGE_TOTAL) == pytest.approx(before + 2.0, abs=0.01)
    assert _page_hours(page, PAGE_REUSED) == pytest.approx(reused_before + 2.0, abs=0.01)
    for shown in (first, page):  # each part is rounded to 0.01 h on its own
        parts = _page_hours(shown, PAGE_CHAPTERS) + _page_hours(shown, PAGE_REUSED)
        assert parts == pytest.approx(_page_hours(shown, PAGE_TOTAL), abs=0.011)
    verdict = "within" if _page_hours(page, PAGE_TOTAL) <= checks.BOOK_RERUN_BUDGET_H else "over"
    assert verdict + " the 3-hour budget" in page


@pytest.mark.parametrize("first_s, verdict", [(3 * 3600.0, "within"), (3 * 3600.0 + 0.1, "over")])
def test_the_book_rerun_time_is_graded_with_the_budget_itself_within(book_copy, first_s, verdict):
    """Chapters that take exactly the 3-hour budget together are within it; 0.1 s more is over it."""
    for i, name in enumerate(CHAPTERS):
        ipynb = book_copy / "notebooks" / f"{name}.ipynb"
        nb = nbformat.read(ipynb, as_version=4)
        nb.metadata["gmlm"]["total_wall_time_s"] = first_s if i == 0 else 0.0
        nb.metadata["gmlm"]["provenance"].pop("artifacts", None)  # nothing reused: the total is the chapters'
        nbformat.write(nb, ipynb)
    page = checks.provenance_page(book_copy)
    assert f"costs their sum, 3.00 h of wall time as\nmeasured by these runs: {verdict} the 3-hour budget" in page


def test_the_book_rerun_time_does_not_count_what_a_run_made_itself(book_copy):
    """A model a chapter trained in its own run (at the run's commit) is inside that chapter's wall
    time: it is listed as made there and adds nothing, not even when a later chapter reuses it."""
    before = _page_hours(checks.provenance_page(book_copy), PAGE_TOTAL)
    first, second = (book_copy / "notebooks" / f"{name}.ipynb" for name in CHAPTERS[:2])
    nb = nbformat.read(first, as_version=4)
    own = nb.metadata["gmlm"]["provenance"]["gmlm_lib_commit"]
    teacher = dict(updates=1200, wall_s=3600.0, commits=[own], hardware=["1 x cpu (cpu, 2 CPU cores)"])
    nb.metadata["gmlm"]["provenance"]["artifacts"] = {"AR teacher": teacher}
    nbformat.write(nb, first)
    nb = nbformat.read(second, as_version=4)
    nb.metadata["gmlm"]["provenance"]["gmlm_lib_commit"] = "b" * 40
    nb.metadata["gmlm"]["provenance"]["artifacts"] = {"AR teacher": teacher}
    nbformat.write(nb, second)
    page = checks.provenance_page(book_copy)
    assert _page_hours(page, PAGE_TOTAL) == pytest.approx(before, abs=0.01)
    assert f"| {{doc}}`../notebooks/{CHAPTERS[0]}` | AR teacher | made in this run |" in page
    assert f"| {{doc}}`../notebooks/{CHAPTERS[1]}` | AR teacher | reused |" in page


def test_a_batch_chapter_that_opened_an_earlier_chapters_models_reused_them(book_copy):
    """Two chapters of one batch (one commit): the first trained the AR teacher, the second opened
    its run folder. Only the first made it; the second reused it, and the total counts it nowhere
    (it is inside the first chapter's wall time). The order is the runs' start times."""
    before = _page_hours(checks.provenance_page(book_copy), PAGE_TOTAL)
    paths = [book_copy / "notebooks" / f"{name}.ipynb" for name in CHAPTERS[:2]]
    teacher = dict(updates=1200, wall_s=3600.0, commits=["c" * 40], hardware=["1 x NVIDIA H200 (gpu)"])
    for path, start in zip(paths, ("2026-11-27T21:53:39+00:00", "2026-11-27T21:42:47+00:00")):  # the second began first
        nb = nbformat.read(path, as_version=4)
        nb.metadata["gmlm"]["provenance"].update(gmlm_lib_commit="c" * 40, started_at=start,
                                                 artifacts={"AR teacher": teacher})
        nbformat.write(nb, path)
    page = checks.provenance_page(book_copy)
    assert f"| {{doc}}`../notebooks/{CHAPTERS[1]}` | AR teacher | made in this run |" in page
    assert f"| {{doc}}`../notebooks/{CHAPTERS[0]}` | AR teacher | reused |" in page
    assert _page_hours(page, PAGE_TOTAL) == pytest.approx(before, abs=0.01)
    recs = [nbformat.read(p, as_version=4).metadata["gmlm"]["provenance"] for p in paths]
    assert checks.made_by_the_run(teacher, recs[0]) and not checks.made_by_the_run(teacher, recs[0], [recs[1]])
    assert checks.made_by_the_run(teacher, recs[1], [recs[0]])
    assert not checks.made_by_the_run(dict(teacher, commits=["d" * 40]), recs[1], [recs[0]])


def test_display_settings_need_a_sync_not_a_rerun(book_copy):
    """Showing a hidden cell changes how the page shows it, not what it computes: the check asks
    for `make sync` (not a rerun), and after the sync the chapter is fresh again."""
    name = CHAPTERS[0]
    md = book_copy / "notebooks" / f"{name}.md"
    md.write_text(md.read_text().replace("remove_code_outputs: true", "remove_code_outputs: false", 1))
    problems = checks.check_all(book_copy)
    assert any(p.startswith(name) and "how the code cells are shown" in p and "make sync" in p for p in problems), problems
    assert not any("not produced by its current code" in p for p in problems), problems
    assert checks.sync(book_copy) == [book_copy / "notebooks" / f"{name}.ipynb"]
    assert checks.check_all(book_copy) == []


def test_a_notebook_not_made_by_the_runner_is_named_with_the_command_that_makes_it(book_copy):
    """An .ipynb whose code and text match its source but which the runner did not write (no run record:
    saved from Jupyter, or converted by hand) is not a result of the book."""
    name = CHAPTERS[0]
    ipynb = book_copy / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    del nb.metadata["gmlm"]
    nbformat.write(nb, ipynb)
    assert checks.check_pair(book_copy / "notebooks" / f"{name}.md", ipynb) == [
        f"{name}: {name}.ipynb was not executed by the runner; run `make full NB={name}`."]


def test_smoke_overrides_that_are_not_a_mapping_are_refused(tmp_path):
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "smoke.yaml").write_text("- padir\n- stutter\n")
    with pytest.raises(ValueError, match=r"params/smoke.yaml must map notebook names to parameter overrides"):
        sources.smoke_overrides(tmp_path)
    (tmp_path / "params" / "smoke.yaml").write_text("")
    assert sources.smoke_overrides(tmp_path) == {}


def _setup_kind(source: str) -> str | None:
    """What makes a code cell setup: the Colab install, the run's start or end, or only imports,
    parameter range checks (``require``) and glue calls."""
    import ast

    if "google.colab" in source:
        return "Colab install"
    if "provenance.start(" in source or source.strip().startswith("provenance.finish("):
        return "provenance"
    body = ast.parse(source).body

    def kind(stmt):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return "imports"
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            return {"glue": "glue", "require": "range checks", "plotting.set_style": "imports",
                    "jax.config.update": "imports"}.get(ast.unparse(stmt.value.func))
        if isinstance(stmt, ast.For) and len({kind(s) for s in stmt.body}) == 1:
            return kind(stmt.body[0])
        return None

    kinds = {kind(s) for s in body}
    if not body or None in kinds:
        return None
    return " and ".join(sorted(kinds))


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapters_hide_their_setup(name):
    """A rendered chapter opens with its claim: the Colab install, the imports, the run's start and end
    and the glue-only cells are still run (and in the .ipynb) but hidden from the page (MyST-NB's
    ``remove_code_source`` and ``remove_code_outputs``, or the ``remove-cell`` tag). The parameters cell is on the page, collapsed
    (``hide-input``), so the values the text names are one click away. Checked in
    each chapter's source (the version its next run executes)."""
    nb = sources.read_text_notebook(ROOT / "notebooks" / f"{name}.md")
    shown, parameters = [], []
    for cell, display in zip([c for c in nb.cells if c.cell_type == "code"], sources.display_settings(nb)):
        tags = cell.metadata.get("tags", [])
        hidden = (display.get("remove_code_source") and display.get("remove_code_outputs")) or "remove-cell" in tags
        if "parameters" in tags:
            parameters.append(not hidden and "hide-input" in tags)
        elif _setup_kind(cell.source) and not hidden:
            shown.append(f"{_setup_kind(cell.source)}: {cell.source.strip().splitlines()[0]}")
    assert not shown, f"{name} shows setup cells: {shown}"
    assert parameters == [True], f"{name}: its one parameters cell must be on the page, collapsed (hide-input)"


def _tiny_book(root: Path, cells: list[str]) -> None:
    """A one-chapter book in ``root``: chapter ``tiny`` with these code cells (the first its parameters
    cell, one parameter ``n`` of smoke value 2)."""
    for folder in ("notebooks", "book", "params"):
        (root / folder).mkdir()
    (root / "params" / "smoke.yaml").write_text("tiny: {n: 2}\n")
    (root / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n- file: notebooks/tiny\n")
    header = "---\nkernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n# Tiny\n\n"
    (root / "notebooks" / "tiny.md").write_text(header + "\n\n".join(f"```{{code-cell}} ipython3\n{c}\n```"
                                                                     for c in cells))


def test_a_chapter_listed_without_its_source_is_refused_by_name(tmp_path):
    _tiny_book(tmp_path, ["---\ntags: [parameters]\n---\nn = 1"])
    (tmp_path / "notebooks" / "tiny.md").unlink()
    with pytest.raises(FileNotFoundError, match=r"no notebook source .*notebooks/tiny\.md; the chapters are: tiny\."):
        runner.run_notebook("tiny", "smoke", root=tmp_path)


def test_a_chapter_that_never_finishes_its_record_is_refused_and_writes_nothing(tmp_path):
    """A chapter whose cells all ran but whose last cell never called provenance.finish(run) is not a
    finished run: refused by name, no executed notebook written; an earlier run's failed notebook is not
    left behind as if it were this run's."""
    _tiny_book(tmp_path, ["---\ntags: [parameters]\n---\nn = 1", "print('ran', n)"])
    failed = tmp_path / "_build" / "failed" / "smoke-tiny.ipynb"
    failed.parent.mkdir(parents=True)
    failed.write_text("an earlier run's failure")
    with pytest.raises(runner.NotebookRunError,
                       match=r"notebook 'tiny' ran but never called provenance.finish\(run\) in its last cell; "
                             r".*_build/smoke/tiny\.ipynb is unchanged"):
        runner.run_notebook("tiny", "smoke", root=tmp_path)
    assert not failed.exists() and not runner.output_path(tmp_path, "tiny", "smoke").exists()


@pytest.mark.slow
def test_full_run_pins_the_colab_install_to_its_commit(monkeypatch, tmp_path):
    """A full run sets ``install_ref`` to the commit it runs from, so the committed notebook's Colab
    cell installs the library that produced its outputs, records its wall time and rewrites the provenance
    page; papermill's injected cell is hidden."""
    _tiny_book(tmp_path, ['---\ntags: [parameters]\n---\ninstall_ref = "main"\nn = 1',
                          "from gmlm_lib.book import provenance\n"
                          "run = provenance.start(dict(install_ref=install_ref, n=n))\nprint('installs', install_ref)",
                          "provenance.finish(run);"])
    monkeypatch.setattr(provenance, "git_commit", lambda: "a" * 40)
    t0 = time.perf_counter()
    meta = runner.run_notebook("tiny", "full", root=tmp_path)
    assert 0 < meta["total_wall_time_s"] <= time.perf_counter() - t0 + 0.005  # the run's own time, to 0.01 s
    nb = nbformat.read(tmp_path / "notebooks" / "tiny.ipynb", as_version=4)
    assert (tmp_path / checks.PROVENANCE_PAGE).read_text() == checks.provenance_page(tmp_path)  # rewritten by the run
    assert meta["provenance"]["parameters"] == {"install_ref": "a" * 40, "n": 1}
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert f"installs {'a' * 40}" in printed
    injected = [c for c in nb.cells if sources.injected(c)]
    assert len(injected) == 1 and injected[0].metadata[sources.DISPLAY_KEY] == sources.HIDDEN
    # a value given on the command line wins, and a smoke run injects nothing
    runner.run_notebook("tiny", "full", {"install_ref": "v1"}, root=tmp_path)
    assert "installs v1" in "".join(o.get("text", "") for c in nbformat.read(tmp_path / "notebooks" / "tiny.ipynb",
                                                                        as_version=4).cells for o in c.get("outputs", []))
    assert runner.run_notebook("tiny", "smoke", root=tmp_path)["provenance"]["parameters"]["install_ref"] == "main"


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in this process during the test, as it does in the batch under
    make gpu-run's deadline (`timeout` gives its child SIGINT's default action: tests/test_gpu_run.py).
    Needed because a pytest started as a background job of a non-interactive shell (``nohup make
    test &``) inherits SIGINT ignored (POSIX), and a Python started so ignores it too."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupted_run_keeps_the_cells_that_finished(tmp_path, sigint_raises):
    """SIGINT during a chapter (make gpu-run's deadline) stops the run with KeyboardInterrupt, and the
    cells that finished, their outputs and papermill's timings, stay in _build/failed/ (run_batch
    brings them back with the log): what an interrupted GPU run cost, step by step."""
    _tiny_book(tmp_path, ["---\ntags: [parameters]\n---\nn = 1",
                          "from gmlm_lib.book import provenance\nrun = provenance.start(dict(n=n))\n"
                          "print('first step done')",
                          "import os, signal, time\n"
                          "os.kill(os.getppid(), signal.SIGINT)  # the runner's process, as timeout does\ntime.sleep(60)",
                          "provenance.finish(run);"])
    failed = tmp_path / "_build" / "failed" / "smoke-tiny.ipynb"
    assert not failed.parent.exists()  # the runner makes the folder (an earlier failure in it: the never-finishes test)
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        runner.run_notebook("tiny", "smoke", root=tmp_path)
    assert time.perf_counter() - t0 < 50  # the kernel does not sleep on
    nb = nbformat.read(failed, as_version=4)
    assert "jupytext" not in nb.metadata  # the source's jupytext header stays in the .md, as in the committed notebooks
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "first step done" in "".join(o.get("text", "") for o in code[-3].get("outputs", []))
    assert code[-3].metadata.papermill["duration"] is not None
    assert not (tmp_path / "notebooks" / "tiny.ipynb").exists()


def test_sync_keeps_the_injected_parameters(book_copy):
    """A full run's injected cell (install_ref and any -p value) is not in the .md; a sync after a
    markdown edit must keep it, right after the parameters cell."""
    name = CHAPTERS[0]
    ipynb = book_copy / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    if not any(sources.INJECTED_TAG in c.metadata.get("tags", []) for c in nb.cells):
        from papermill.parameterize import parameterize_notebook

        nb = parameterize_notebook(nb, {"install_ref": "a" * 40})
        nbformat.write(nb, ipynb)
    md = book_copy / "notebooks" / f"{name}.md"
    md.write_text(md.read_text().replace("# ", "# Edited: ", 1))
    checks.sync(book_copy)
    cells = nbformat.read(ipynb, as_version=4).cells
    at = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    assert sources.INJECTED_TAG in cells[at + 1].metadata.get("tags", [])
    assert "install_ref" in cells[at + 1].source
