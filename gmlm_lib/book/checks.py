"""Sync and freshness checks for the chapter pairs, and the generated provenance page.

A chapter fails the check when

- its ``.ipynb`` is missing, or was not produced by a ``full`` run of the runner;
- its ``.md`` and ``.ipynb`` disagree in any code cell (source or tags), in how a code cell is
  shown (its ``mystnb`` metadata: captions, hidden cells) or in any markdown cell, except where the
  chapter is awaiting an accelerator run (:func:`awaiting`);
- the code that produced the ``.ipynb``'s outputs (the SHA-256 stored at run time) is not
  the code the ``.ipynb`` now holds: a code cell was edited without rerunning;
- its full run does not name one clean commit: the sources had uncommitted changes when it
  started (``-dirty``) or changed while it ran, so no commit reproduces its outputs;
- its text shows two glued values with nothing but spaces between them, which a reader takes for
  one run of numbers.

A chapter awaiting an accelerator run is one whose full run needs an accelerator
(:data:`gmlm_lib.book.sources.TRANSLATION_CHAPTERS`) and whose ``.md`` code has moved ahead of its
``.ipynb``: the book and Colab show the ``.ipynb``, whole and fresh (every check above on the notebook
itself still applies), and the next accelerator run executes the ``.md``
(:func:`gmlm_lib.book.batch.promote` takes that run only if the current ``.md`` made it). ``make
check`` lists such chapters with the commit of their last run; any other drift fails it.

``book/provenance.md`` is generated from the notebooks' metadata and must match it, and
``book/labels.md`` from the label tags (:mod:`gmlm_lib.book.labels`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import nbformat

from gmlm_lib.book import labels, provenance, sources

PROVENANCE_PAGE = Path("book") / "provenance.md"
BOOK_RERUN_BUDGET_H = 3.0  # hours on 2 CPU cores (issue 36): the provenance page says whether it is met
RUN_METADATA = ("papermill", "execution")  # per-cell metadata written by a run, not by the text


def awaiting(md: Path, ipynb: Path) -> str | None:
    """The commit of the last full run of the chapter pair ``md``/``ipynb`` when the chapter is awaiting an
    accelerator run (module docstring: its full run needs one, and its ``.md`` code differs from the code
    its ``.ipynb`` ran), else None. Why: a chapter whose code changed must be rerun in full, and where that
    run needs an accelerator the change waits in the chapter's one source, smoke-tested, until it runs."""
    if md.stem not in sources.TRANSLATION_CHAPTERS or not (md.is_file() and ipynb.is_file()):
        return None
    nb = nbformat.read(ipynb, as_version=4)
    if sources.code_cells(sources.read_text_notebook(md)) == sources.code_cells(nb):
        return None
    return nb.metadata.get("gmlm", {}).get("provenance", {}).get("gmlm_lib_commit", "not recorded")


def check_pair(md: Path, ipynb: Path) -> list[str]:
    """Problems with one chapter pair; empty when it is in sync and fresh, or awaiting an accelerator run
    (:func:`awaiting`) with a notebook that is whole and fresh in itself."""
    name = md.stem
    if not md.is_file():
        return [f"{name}: the text source {md} is missing."]
    if not ipynb.is_file():
        return [f"{name}: {ipynb} is missing; run `make full NB={name}`."]
    text = sources.read_text_notebook(md)
    nb = nbformat.read(ipynb, as_version=4)
    ahead = awaiting(md, ipynb) is not None
    problems = adjacent_glue_problems(name, text) + ([] if ahead else _drift_problems(name, md, ipynb, text, nb))
    # the text the book shows must show only values its run glued: the .md's, or the notebook's own while ahead
    missing = sorted(sources.glue_references(nb if ahead else text) - set(sources.glued_values(nb)))
    if missing and nb.metadata.get("gmlm"):
        problems.append(f"{name}: its text shows glued values that its run did not glue: {missing}; glue them in "
                        f"the chapter's code and rerun `make full NB={name}`, or drop them from the text.")
    meta = nb.metadata.get("gmlm")
    if not meta:
        problems.append(f"{name}: {ipynb.name} was not executed by the runner; run `make full NB={name}`.")
        return problems
    if meta.get("profile") != "full":
        problems.append(f"{name}: {ipynb.name} holds a {meta.get('profile')!r} run, not a full one; run `make full NB={name}`.")
    if not sources.outputs_from_code(nb):
        problems.append(
            f"{name}: the outputs of {ipynb.name} were not produced by its current code "
            f"(code changed since the last run); rerun `make full NB={name}`."
        )
    rec = meta.get("provenance", {})
    short = provenance.short_commit
    if rec.get("gmlm_lib_commit", "").endswith("-dirty"):
        problems.append(f"{name}: its full run started from uncommitted sources ({short(rec['gmlm_lib_commit'])}); "
                        f"commit, then rerun `make full NB={name}`.")
    if "gmlm_lib_commit_at_finish" in rec:
        problems.append(f"{name}: the sources changed while its full run went on (started at "
                        f"{short(rec['gmlm_lib_commit'])}, ended at {short(rec['gmlm_lib_commit_at_finish'])}); "
                        f"rerun `make full NB={name}` and leave the tree alone until it ends.")
    return problems


def _drift_problems(name: str, md: Path, ipynb: Path, text, nb) -> list[str]:
    """Where the ``.md`` and the ``.ipynb`` of a chapter disagree (module docstring)."""
    problems = []
    if sources.code_cells(text) != sources.code_cells(nb):
        problems.append(f"{name}: the code cells of {md.name} and {ipynb.name} differ; rerun `make full NB={name}`.")
    if sources.display_settings(text) != sources.display_settings(nb):
        problems.append(f"{name}: how the code cells are shown (mystnb metadata: captions, hidden cells) differs "
                        f"between {md.name} and {ipynb.name}; run `make sync`.")
    if sources.markdown_cells(text) != sources.markdown_cells(nb):
        problems.append(f"{name}: the markdown cells of {md.name} and {ipynb.name} differ; run `make sync`.")
    return problems


def adjacent_glue_problems(name: str, text) -> list[str]:
    """A problem when the markdown of ``text`` (a chapter's text notebook) shows two glued values with
    nothing between them (:func:`gmlm_lib.book.sources.adjacent_glue`)."""
    pairs = sources.adjacent_glue(text)
    if not pairs:
        return []
    shown = ", ".join(f"{a} {b}" for a, b in pairs)
    return [f"{name}: its text shows glued values side by side with nothing between them ({shown}): a reader "
            "sees one run of numbers; put a comma or a word between them (then `make sync`)."]


def _minute(stamp: str) -> str:
    """An ISO time stamp in UTC as ``YYYY-MM-DD HH:MM`` (the table's column stays narrow)."""
    return stamp[:16].replace("T", " ") if stamp.endswith("+00:00") else stamp


def _artifact_key(artifact: dict) -> tuple:
    """One artifact, whatever a chapter calls it: its updates, wall time and commits."""
    return artifact["updates"], artifact["wall_s"], tuple(artifact["commits"])


def made_by_the_run(artifact: dict, rec: dict, others: Sequence[dict] = ()) -> bool:
    """Whether the chapter run ``rec`` made ``artifact`` itself (its wall time then includes the work)
    rather than reusing it: every part of the artifact was made at the run's own commit, and no
    run in ``others`` (the other chapters' records) at that commit that started earlier lists it.
    Why the second rule: a batch (``make gpu-run``) runs several chapters at one commit, and the
    later ones open the run folder the first one trained; their wall times hold none of that work."""
    own = rec.get("gmlm_lib_commit")
    if not (own and artifact["commits"] and all(c == own for c in artifact["commits"])):
        return False
    key, start = _artifact_key(artifact), rec.get("started_at", "")
    return not any(o.get("gmlm_lib_commit") == own and o.get("started_at", "") < start
                   and any(_artifact_key(a) == key for a in o.get("artifacts", {}).values()) for o in others)


def _executed_notebook(root: Path, name: str, runs: dict | None) -> Path:
    """Chapter ``name``'s executed notebook: ``runs[name]`` when given, else the committed one."""
    return Path(runs[name]) if runs and name in runs else root / "notebooks" / f"{name}.ipynb"


def provenance_page(root: Path, runs: dict | None = None) -> str:
    """The text of ``book/provenance.md``, generated from every chapter's metadata. ``runs``: chapter
    name -> an executed notebook read instead of the committed ``notebooks/NAME.ipynb`` (the page a
    batch's runs would give once promoted, :func:`gmlm_lib.book.batch.run_batch`)."""
    lines = [
        "# Provenance of every result",
        "",
        "Every number and figure in this book was produced by the last full run of its chapter.",
        "This page is generated from the notebooks' metadata by `make provenance` (and after every",
        "`make full`), and the test suite fails when it disagrees with them.",
        "",
        "| Chapter | Profile | Wall time (s) | gmlm_lib commit | JAX | Backend (devices) | CPU | Run started (UTC) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    details, used, compiled = [], [], []
    chapter_s, artifact_s, made = 0.0, {}, {}
    found = {name: _executed_notebook(root, name, runs) for name in sources.toc_notebooks(root)}
    metas = {name: nbformat.read(path, as_version=4).metadata.get("gmlm", {})
             for name, path in found.items() if path.is_file()}
    for name in sources.toc_notebooks(root):
        if name not in metas:
            lines.append(f"| {{doc}}`../notebooks/{name}` | not run | | | | | | |")
            continue
        meta = metas[name]
        rec = meta.get("provenance", {})
        others = [m.get("provenance", {}) for other, m in metas.items() if other != name]
        wall_s = meta.get("total_wall_time_s")
        chapter_s += float(wall_s or 0.0)
        wall = "" if wall_s is None else f"{float(wall_s):.1f}"
        lines.append(
            f"| {{doc}}`../notebooks/{name}` | {meta.get('profile', 'not run')} | {wall} | "
            f"`{provenance.short_commit(rec.get('gmlm_lib_commit', ''))}` | {rec.get('jax_version', '')} | "
            f"{rec.get('backend', '')} ({rec.get('device_count', '')} x {rec.get('device_kind', '')}) | "
            f"{rec.get('cpu_model', 'not recorded')} | {_minute(rec.get('started_at', ''))} |"
        )
        for art, a in rec.get("artifacts", {}).items():
            made_here = made_by_the_run(a, rec, others)
            key = _artifact_key(a)
            (made if made_here else artifact_s)[key] = float(a["wall_s"])
            used.append(f"| {{doc}}`../notebooks/{name}` | {art} | {'made in this run' if made_here else 'reused'} | "
                        f"{'' if a['updates'] is None else a['updates']} | "
                        f"{float(a['wall_s']):.1f} | {', '.join(f'`{provenance.short_commit(c)}`' for c in a['commits'])} | "
                        f"{'; '.join(a['hardware'])} |")
        params = rec.get("parameters", {})
        details += [f"**{name}**: " + (", ".join(f"`{k} = {v!r}`" for k, v in params.items()) or "no parameters"), ""]
        if rec.get("compilations") is not None and wall_s:
            compiled.append((name, rec, float(wall_s)))
    lines += _compilation(compiled)
    if used:
        lines += ["", "## Trained models and other artifacts the runs used", "",
                  "The trained models and the distilled corpus behind a chapter's numbers, with what they cost",
                  "and which code and hardware made them (a resumed training run lists each). A chapter that",
                  "reused them from its run folder, made by an earlier execution, leaves that work out of its",
                  "wall time above; one it made in its own run has that work inside its wall time already.", "",
                  "| Chapter | Artifact | Source | Updates | Wall time (s) | gmlm_lib commit(s) | Hardware |",
                  "| --- | --- | --- | --- | --- | --- | --- |", *used]
    # an artifact several chapters reused (the AR teacher) was made once, and not at all when a
    # chapter's own run made it (its wall time holds the work)
    reused_s = sum(v for k, v in artifact_s.items() if k not in made)
    total_s = chapter_s + reused_s
    verdict = "within" if total_s <= BOOK_RERUN_BUDGET_H * 3600 else "over"
    lines += ["", "## Rerunning the whole book", "",
              f"The chapters' wall times above add up to {chapter_s / 3600:.2f} h; the trained models and",
              f"corpora they reused instead of making add {reused_s / 3600:.2f} h (each counted once; those a",
              "chapter made in its own run are inside its wall time).",
              f"Rerunning the whole book from a fresh clone costs their sum, {total_s / 3600:.2f} h of wall time as",
              f"measured by these runs: {verdict} the {BOOK_RERUN_BUDGET_H:g}-hour budget. Each part ran on the hardware",
              "of its row, on its own date (this machine's speed varies from day to day: compare the",
              "same chapter on two dates before reading a change in this total as a change in the code)."]
    lines += ["", "## The translation chapters' runs", "", *translation_runs(root, runs)]
    lines += ["", "## Parameters of each run", "", *details]
    return "\n".join(lines).rstrip() + "\n"


def _compilation(runs: list[tuple[str, dict, float]]) -> list[str]:
    """The provenance page's section on compilation: per chapter ``(name, provenance record, wall s)`` its
    backend, XLA programs, wall time spent compiling and that time's share of its wall time; then the
    totals. No section when no run recorded its compilations."""
    if not runs:
        return []
    rows, programs, spent_total, wall_total = [], 0, 0.0, 0.0
    for name, rec, wall in runs:
        spent = float(rec.get("compile_wall_s", rec.get("compile_s", 0.0)))
        rows.append(f"| {{doc}}`../notebooks/{name}` | {rec.get('backend', '')} | {int(rec['compilations']):,} | "
                    f"{spent:.1f} | {100 * spent / wall:.0f}% |")
        programs, spent_total, wall_total = programs + int(rec["compilations"]), spent_total + spent, wall_total + wall
    return ["", "## Compilation", "",
            "The XLA programs each chapter's run compiled, and the wall time in which one was compiling, as a",
            "share of the chapter's wall time: what a reader rerunning the chapter waits for before the",
            "computation itself.", "",
            "| Chapter | Backend | XLA programs | Compiling (s) | Share of the wall time |",
            "| --- | --- | --- | --- | --- |", *rows, "",
            f"Together: {programs:,} programs, {spent_total:,.0f} s of compiling in {wall_total:,.0f} s of "
            f"wall time ({100 * spent_total / wall_total:.0f}%)."]


def translation_runs(root: Path, runs: dict | None = None) -> list[str]:
    """The provenance page's lines on the translation chapters' full runs: per chapter its hardware, commit,
    start, wall time and the part of it spent compiling (the wall time in which a program was compiling,
    and the seconds summed over the programs, which exceed it where programs compile side by side), then
    the totals. Which commits the runs came from is said, since only one commit makes them one set of
    models. ``runs``: as in :func:`provenance_page`."""
    from gmlm_lib.book import run_times

    found = {}
    for name in sources.TRANSLATION_CHAPTERS:
        ipynb = _executed_notebook(root, name, runs)
        meta = nbformat.read(ipynb, as_version=4).metadata.get("gmlm", {}) if ipynb.is_file() else {}
        if meta.get("total_wall_time_s") is not None:
            found[name] = (meta.get("provenance", {}), float(meta["total_wall_time_s"]))

    def minutes(rec, key):
        return f"{float(rec[key]) / 60:.2f}" if rec.get(key) is not None else "not recorded"

    lines = ["| Chapter | Hardware | gmlm_lib commit | Run started (UTC) | Wall time (min) | Of it compiling (min) "
             "| Compiling, summed over programs (min) | XLA programs (from the cache) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, (rec, wall) in found.items():
        programs = f"{int(rec['compilations']):,} ({int(rec.get('cache_hits', 0)):,})" if "compilations" in rec \
            else "not recorded"
        lines.append(f"| {{doc}}`../notebooks/{name}` | {run_times.hardware_key(rec)} | "
                     f"`{provenance.short_commit(rec.get('gmlm_lib_commit', ''))}` | {_minute(rec.get('started_at', ''))} | "
                     f"{wall / 60:.2f} | {minutes(rec, 'compile_wall_s')} | {minutes(rec, 'compile_s')} | {programs} |")
    missing = [n for n in sources.TRANSLATION_CHAPTERS if n not in found]
    total = sum(wall for _, wall in found.values()) / 60
    commits = sorted({provenance.short_commit(rec.get("gmlm_lib_commit", "")) for rec, _ in found.values()})
    lines += ["", f"Their full runs took {total:.2f} min together, compilation included"
              + (f"; {', '.join(missing)} has no full run." if missing else ".")
              + (f" They ran at {len(commits)} commits ({', '.join(f'`{c}`' for c in commits)}), so their trained "
                 "models are not one set." if len(commits) > 1 else "")]
    return lines


def write_provenance_page(root: Path) -> Path:
    """Write :func:`provenance_page` to ``root / PROVENANCE_PAGE``, the landing page's results
    overview (:func:`gmlm_lib.book.overview.write_page`) and the running page's table of run times
    (:func:`gmlm_lib.book.run_times.write`), all generated from the notebooks; returns the provenance
    page's path."""
    from gmlm_lib.book import overview, run_times

    path = root / PROVENANCE_PAGE
    path.write_text(provenance_page(root))
    overview.write_page(root)
    run_times.write(root)
    return path


def awaiting_all(root: Path) -> dict[str, str]:
    """Chapter -> the commit of its last full run, for every chapter awaiting an accelerator run
    (:func:`awaiting`), in book order: what ``make check`` lists beside its problems."""
    found = {}
    for name in sources.toc_notebooks(root):
        commit = awaiting(root / "notebooks" / f"{name}.md", root / "notebooks" / f"{name}.ipynb")
        if commit is not None:
            found[name] = commit
    return found


def check_all(root: Path) -> list[str]:
    """Every problem in the book's chapters and its provenance page."""
    problems = []
    chapters = sources.toc_notebooks(root)
    for name in chapters:
        problems += check_pair(root / "notebooks" / f"{name}.md", root / "notebooks" / f"{name}.ipynb")
    for md in sorted((root / "notebooks").glob("*.md")):
        if md.stem not in chapters:
            problems.append(f"{md.stem}: notebooks/{md.name} is not listed in _toc.yml.")
    page = root / PROVENANCE_PAGE
    if not page.is_file() or page.read_text() != provenance_page(root):
        problems.append(f"{PROVENANCE_PAGE} does not match the notebooks' metadata; run `make provenance`.")
    from gmlm_lib.book import overview, run_times

    return problems + overview.problems(root) + run_times.problems(root) + labels.problems(root)


def sync(root: Path, names: list[str] | None = None) -> list[Path]:
    """Copy markdown edits and display settings (``mystnb`` cell metadata) from each ``.md`` into its
    ``.ipynb``, keeping outputs and the run's metadata.

    Code cells are taken from the ``.md`` too; if they changed, the freshness check will
    (rightly) report the outputs as stale until the chapter is rerun. A chapter awaiting an accelerator
    run (:func:`awaiting`) is left alone: its notebook keeps the text and code that made its outputs
    until that run is promoted. ``names``: the chapters to sync (default: every chapter).
    """
    import jupytext

    updated = []
    for name in sources.toc_notebooks(root) if names is None else names:
        md, ipynb = root / "notebooks" / f"{name}.md", root / "notebooks" / f"{name}.ipynb"
        if not ipynb.is_file() or awaiting(md, ipynb) is not None:
            continue
        old = nbformat.read(ipynb, as_version=4)
        new = jupytext.combine.combine_inputs_with_outputs(sources.read_text_notebook(md), old, fmt="md:myst")
        new.metadata.pop("jupytext", None)
        new.metadata["gmlm"] = old.metadata.get("gmlm", {})
        # papermill's cell of injected parameters (the full run's install_ref among them) is not in
        # the .md: put it back where the run had it, right after the parameters cell
        injected = [c for c in old.cells if sources.injected(c)]
        if injected:
            at = next((i + 1 for i, c in enumerate(new.cells)
                       if sources.PARAMETERS_TAG in c.metadata.get("tags", [])), 0)
            new.cells[at:at] = injected
        # keep what the run recorded per cell (papermill timings) where the cell is unchanged
        previous = {(c.cell_type, c.source): c.metadata for c in old.cells}
        for cell in new.cells:
            ran = previous.get((cell.cell_type, cell.source), {})
            for key in RUN_METADATA:
                if key in ran:
                    cell.metadata[key] = ran[key]
        if new != old:
            nbformat.write(new, ipynb)
            updated.append(ipynb)
    return updated
