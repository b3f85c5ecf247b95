"""An executed chapter notebook as a small JSON record: each code cell's seconds and what it printed,
tables as text. Why: a run the book does not show (a chapter awaiting an accelerator run rehearsed on a CPU, a GPU run that
stopped at its deadline) is kept in ``benchmarks/`` as its records, not as a notebook of half a
megabyte of figures; this record says where the time went and what each cell printed, and the GPU
run's records are read from it (``python -m gmlm_lib.book records digest OUT/NAME.ipynb``).
"""

from __future__ import annotations

import datetime
import tarfile
from html.parser import HTMLParser
from pathlib import Path

from gmlm_lib.book import sources


class _Tables(HTMLParser):
    """The rows of every ``<table>`` in an HTML output, each row its cells' text."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th") and self.rows:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_tables(html: str) -> str:
    """The tables of ``html`` as text, a line a row with its cells joined by ``" | "``; empty when it
    holds none."""
    parser = _Tables()
    parser.feed(html)
    return "\n".join(" | ".join(row) for row in parser.rows if row)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def output_text(output) -> str | None:
    """What one cell output shows as text: a stream's text, an error's name and message, a table of an
    HTML output as rows, else the plain-text form; None for an output with no text (a figure)."""
    kind = output.get("output_type")
    if kind == "stream":
        return _text(output.get("text", ""))
    if kind == "error":
        return f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
    data = output.get("data", {})
    if "text/html" in data:
        tables = html_tables(_text(data["text/html"]))
        if tables:
            return tables + "\n"
    if "text/plain" in data and "image/png" not in data and "image/svg+xml" not in data:
        return _text(data["text/plain"])
    return None


def cells(nb) -> list[dict]:
    """Each code cell of an executed notebook that has a source: its index among all cells, its first
    line, its seconds (papermill's record; None where it did not run) and its outputs as text."""
    out = []
    for i, cell in enumerate(nb.cells):
        source = _text(cell.get("source", "")).strip()
        if cell.get("cell_type") != "code" or not source:
            continue
        seconds = cell.get("metadata", {}).get("papermill", {}).get("duration")
        texts = [t for t in (output_text(o) for o in cell.get("outputs", [])) if t is not None]
        out.append(dict(cell=i, first_line=source.splitlines()[0], seconds=seconds, outputs=texts))
    return out


def digest(path: Path, *, note: str = "") -> dict:
    """The record of the executed notebook at ``path``: ``notebook`` (``note``, e.g. which source and
    profile ran, else the file's name), ``commit``, ``profile``, ``wall_s`` (the run's wall time, None
    for a run that did not finish), ``code_matches`` (whether its outputs come from its code),
    ``stopped`` (the first error a cell printed, else None) and ``cells`` (:func:`cells`)."""
    path = Path(path)
    nb = sources.read_notebook(path, "digest")
    meta = nb.metadata.get("gmlm", {})
    rows = cells(nb)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    return dict(notebook=note or path.name, commit=meta.get("provenance", {}).get("gmlm_lib_commit"),
                profile=meta.get("profile"), wall_s=meta.get("total_wall_time_s"),
                code_matches=sources.outputs_from_code(nb),
                stopped=output_text(errors[0]) if errors else None, cells=rows)


__all__ = ["html_tables", "output_text", "cells", "digest"]


def compile_report(path: Path) -> list[str]:
    """One line per process of the compile log at ``path`` (``compiles.tsv``, or the ``run-records.tar.gz``
    of a batch, which holds it): :func:`gmlm_lib.core.timing.compile_log_processes`, with UTC times."""
    from gmlm_lib.core import timing

    if path.name.endswith(".tar.gz"):
        try:
            with tarfile.open(path) as tar:
                member = tar.extractfile("compiles.tsv")
                lines = member.read().decode().splitlines() if member is not None else None
        except KeyError:
            lines = None
        except tarfile.TarError as err:
            raise ValueError(f"{path} is not a readable .tar.gz ({err}).") from None
        if lines is None:
            raise ValueError(f"{path} holds no compiles.tsv; pass a batch's "
                             "run-records.tar.gz or its compile log.")
    else:
        lines = path.read_text().splitlines()
    found = timing.compile_log_processes(lines)
    if not found:
        raise ValueError(f"{path} logs no compilation (lines of time, pid, program and seconds, tab-separated).")

    def utc(t):
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

    return [f"pid {pid}: {r['programs']} program{'s' if r['programs'] != 1 else ''}, {r['summed_s']:.1f} s summed, "
            f"{r['wall_s']:.1f} s of wall time, {utc(r['first'])} to {utc(r['last'])} UTC" for pid, r in found.items()]
