"""The book's notebook sources: where they are, their parameters, and the hash of their code.

A chapter is a pair ``notebooks/NAME.md`` (MyST markdown, the one source you edit) and
``notebooks/NAME.ipynb`` (the outputs of its last full run, which the book and Colab show). The
chapters are the ``notebooks/...`` entries of ``_toc.yml``. The ``.md`` of a chapter whose full run
needs an accelerator (:data:`TRANSLATION_CHAPTERS`) may run ahead of its ``.ipynb`` until that run
(:func:`gmlm_lib.book.checks.awaiting`); the book then shows the ``.ipynb`` (:func:`shown_text`).

What a code cell *does* is its source and its tags (``parameters`` among them): together they are
the freshness key (:func:`code_hash`). How the book *shows* a cell is its ``mystnb`` metadata
(MyST-NB's cell-level settings: ``remove_code_source``/``remove_code_outputs`` for setup and glue
cells, a figure's ``caption`` and ``name``): it is left out of the key, so hiding a cell or
rewording a caption needs ``make sync``, not a rerun, and the check compares it separately.

A full run injects ``install_ref`` (``INSTALL_REF``), the commit it ran from, into a chapter
that defines that parameter: its Colab install cell then installs the library that produced the
outputs the reader sees, not whatever ``main`` holds later.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path

import nbformat
import yaml

INJECTED_TAG = "injected-parameters"  # papermill's tag for the cell it adds
PARAMETERS_TAG = "parameters"
INSTALL_REF = "install_ref"  # the parameter a full run sets to its commit (the Colab install pins it)
COLAB_INSTALL_CELL = """\
# On Colab (TPU or GPU) this installs gmlm_lib at `install_ref`, the commit whose full run made the
# outputs shown here, keeping Colab's own jax and jaxlib; elsewhere it does nothing.
import sys

if "google.colab" in sys.modules:
    import os
    import subprocess
    from importlib.metadata import version

    repository = os.environ.get("GMLM_REPOSITORY", "https://github.com/gmlm-book/gmlm-book")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"gmlm-book @ git+{repository}@{install_ref}",
                    f"jax=={version('jax')}", f"jaxlib=={version('jaxlib')}"], check=True)"""
"""The Colab cell of every chapter, right after its parameters cell (it reads ``install_ref``). Pinning
``jax`` and ``jaxlib`` to the installed versions makes pip pick versions of flax, optax and orbax that
work with Colab's accelerator-enabled jax instead of replacing it."""
DISPLAY_KEY = "mystnb"  # cell metadata that says how a cell is shown, not what it does
HIDDEN = {"remove_code_source": True, "remove_code_outputs": True}  # the display setting of a setup cell


TRANSLATION_CHAPTERS = ("padir", "stutter", "dependency_decoding", "ablations")
"""The translation chapters, in the order a batch runs them (the later ones open the PaDIR chapter's run
folder): their full run needs an accelerator, so their ``.md`` may run ahead of their ``.ipynb``."""


def injected(cell) -> bool:
    """True for papermill's cell of injected parameters (not in the .md, not part of the freshness key)."""
    return INJECTED_TAG in cell.get("metadata", {}).get("tags", [])


def find_root(start: Path | None = None) -> Path:
    """The book's root: the nearest folder upward holding ``_toc.yml`` and ``notebooks/``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").is_file() and (folder / "notebooks").is_dir():
            return folder
    raise FileNotFoundError(f"no book root (a folder with _toc.yml and notebooks/) at or above {here}.")


def _toc_files(entries) -> list[str]:
    files = []
    for entry in entries or []:
        if "file" in entry:
            files.append(entry["file"])
        for key in ("chapters", "sections", "parts"):
            files.extend(_toc_files(entry.get(key)))
    return files


def toc_notebooks(root: Path) -> list[str]:
    """Names of the chapters (``notebooks/NAME``) listed in ``_toc.yml``, in book order."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = _toc_files([toc])
    return [Path(f).name for f in files if Path(f).parent.as_posix() == "notebooks"]


def read_text_notebook(path: Path) -> nbformat.NotebookNode:
    """Read a MyST-markdown notebook with jupytext."""
    import jupytext

    return jupytext.read(path, fmt="md:myst")


def shown_text(root: Path, name: str) -> str:
    """The MyST text of chapter ``name`` as the book renders it: its ``.ipynb`` (the notebook of its last
    full run) written as MyST markdown where there is one, else its ``.md``. They differ only for a
    chapter whose ``.md`` runs ahead of its notebook, awaiting an accelerator run: the pages generated
    from the chapters' text (the label index) describe what a reader sees, not the next version."""
    import jupytext

    ipynb = root / "notebooks" / f"{name}.ipynb"
    if not ipynb.is_file():
        return (root / "notebooks" / f"{name}.md").read_text()
    return jupytext.writes(nbformat.read(ipynb, as_version=4), fmt="md:myst")


def code_cells(nb) -> list[dict]:
    """The code cells that are the notebook's own (papermill's injected cell excluded):
    their source (trailing whitespace dropped) and tags."""
    cells = []
    for cell in nb.cells:
        tags = list(cell.get("metadata", {}).get("tags", []))
        if cell.cell_type != "code" or injected(cell):
            continue
        cells.append({"source": cell.source.rstrip(), "tags": sorted(tags)})
    return cells


def display_settings(nb) -> list[dict]:
    """The ``mystnb`` cell metadata of the notebook's own code cells, in order: how the book shows
    each cell (hidden source or outputs, a figure's caption). Not part of :func:`code_hash`."""
    return [cell.get("metadata", {}).get(DISPLAY_KEY, {}) for cell in nb.cells
            if cell.cell_type == "code" and not injected(cell)]


def markdown_cells(nb) -> list[str]:
    """The stripped sources of the notebook's markdown cells, in order (what ``sync`` compares)."""
    return [cell.source.strip() for cell in nb.cells if cell.cell_type == "markdown"]


_GLUE_ROLE = re.compile(r"\{glue(?::[a-z]+)?\}`([A-Za-z_][A-Za-z0-9_]*)")
_GLUE_DIRECTIVE = re.compile(r"^[`:]{3,}\{glue(?::[a-z]+)?\}\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def glue_references(nb) -> set[str]:
    """The names the notebook's markdown shows through glue (``{glue:text}`name:.2f```, ``{glue}`name```,
    a ``{glue:figure} name`` directive): each must be glued by the notebook's run."""
    names: set[str] = set()
    for text in markdown_cells(nb):
        names |= set(_GLUE_ROLE.findall(text)) | set(_GLUE_DIRECTIVE.findall(text))
    return names


# a glue role, then (looked ahead, so that three in a row give two pairs) nothing but spaces and bold marks
# before the next one
_GLUE_PAIR = re.compile(r"\{glue(?::[a-z]+)?\}`([A-Za-z_][A-Za-z0-9_]*)[^`]*`"
                        r"(?=\**\s+\**\{glue(?::[a-z]+)?\}`([A-Za-z_][A-Za-z0-9_]*))")


def adjacent_glue(nb) -> list[tuple[str, str]]:
    """The pairs of glued values that the notebook's markdown shows with nothing but spaces (or bold
    marks) between them, in order: a reader sees "at T = 10 35.1" as one run of numbers, where a comma
    or a word says which is which."""
    return [m.groups() for text in markdown_cells(nb) for m in _GLUE_PAIR.finditer(text)]


GLUE_RECORD = "application/papermill.record/text/plain"
"""The MIME type under which ``myst_nb.glue`` keeps a glued value's text."""


def glued_values(nb) -> dict:
    """The values an executed notebook glued (``myst_nb.glue`` outputs, named in their metadata), by
    name: numbers and strings as Python literals (``nan`` as a float NaN); a value glued without a
    text form (a figure) as its MIME bundle."""
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is None:
                continue
            text = o.get("data", {}).get(GLUE_RECORD)
            if text is None:
                out[name] = dict(o.get("data", {}))
                continue
            try:
                out[name] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                out[name] = float("nan") if text == "nan" else text
    return out


def code_hash(nb) -> str:
    """SHA-256 of the notebook's own code cells (sources and tags), the freshness key."""
    blob = json.dumps(code_cells(nb), sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()


def outputs_from_code(nb) -> bool:
    """Whether an executed notebook's outputs were made by the code it holds now: the hash the runner
    recorded when it ran (``metadata.gmlm.code_sha256``) is :func:`code_hash` of its code cells."""
    return nb.metadata.get("gmlm", {}).get("code_sha256") == code_hash(nb)


def read_notebook(path: Path, what: str) -> nbformat.NotebookNode:
    """The executed notebook at ``path`` (a batch's ``OUT/NAME.ipynb``), or an error naming ``path`` and
    ``what`` reads it: no such file, or not a notebook (damaged JSON, cells that are not a list, ...)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what}: {path} is not a file; pass an executed notebook (a batch's OUT/NAME.ipynb).")
    try:
        return nbformat.read(path, as_version=4)
    except Exception as err:  # nbformat raises several kinds for a damaged file
        raise ValueError(f"{what}: {path} is not a readable notebook ({type(err).__name__}: {err}).") from None


def parameters_cell(nb) -> dict:
    """The defaults of the single cell tagged ``parameters``, as a dict.

    Each statement must be ``name = <literal>``: no derived values, no imports, no calls.
    """
    tagged = [c for c in nb.cells if c.cell_type == "code" and PARAMETERS_TAG in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise ValueError(f"a notebook must have exactly one cell tagged 'parameters'; found {len(tagged)}.")
    params = {}
    for stmt in ast.parse(tagged[0].source).body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            raise ValueError(f"the parameters cell may only hold `name = literal` lines; got: {ast.unparse(stmt)!r}.")
        name = stmt.targets[0].id
        try:
            params[name] = ast.literal_eval(stmt.value)
        except ValueError:
            raise ValueError(
                f"parameter {name!r} must be a literal (a number, string, bool, None, list, tuple or dict); "
                f"got {ast.unparse(stmt.value)!r}. Compute derived values in a later cell."
            ) from None
    return params


def smoke_overrides(root: Path) -> dict:
    """``params/smoke.yaml``: ``{notebook name: {parameter: value}}``."""
    path = root / "params" / "smoke.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} must map notebook names to parameter overrides.")
    return data


def _parse_value(text: str, name: str = ""):
    """A ``-p`` value is read as YAML: ``6`` is an int, ``[1, 2]`` a list, ``true`` a bool; text that is
    not YAML is an error naming the parameter."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        problem = str(err).splitlines()[0]
        raise SystemExit(f"error: -p {name} {text!r}: the value is read as YAML and this is not YAML ({problem}); "
                         "quote a string, write a list as [1, 2].") from None


def parameter_overrides(pairs: list[list[str]]) -> dict:
    """The ``-p NAME VALUE`` options as a dict; a name given twice is an error, not the last one winning."""
    seen = [name for name, _ in pairs]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:
        raise SystemExit(f"error: -p {', '.join(twice)} given more than once; give each parameter once.")
    return {name: _parse_value(value, name) for name, value in pairs}
