"""Execute chapters through papermill in the ``smoke`` or ``full`` profile.

- ``smoke``: the parameters cell's defaults, overridden by ``params/smoke.yaml`` and then by
  ``-p`` options; the executed notebook goes to ``_build/smoke/NAME.ipynb``.
- ``full``: the defaults, overridden by ``-p`` options only; the executed notebook replaces the
  committed ``notebooks/NAME.ipynb``, and ``book/provenance.md`` is regenerated. It starts only
  from committed sources (:func:`gmlm_lib.core.records.git_commit` without ``-dirty``).

A parameter name that is not in the notebook's ``parameters`` cell is an error. The executed
notebook's metadata ``gmlm`` holds the provenance record, the profile, the total wall time
and the SHA-256 of the code that ran (the freshness key, see :mod:`gmlm_lib.book.checks`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import nbformat

from gmlm_lib.book import provenance, sources

PROFILES = ("smoke", "full")


class NotebookRunError(RuntimeError):
    """A chapter failed to execute; the message names the notebook and the output file."""


@contextmanager
def _environ(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def resolve_parameters(root: Path, name: str, profile: str, overrides: dict | None = None) -> tuple[dict, dict]:
    """``(all parameters, the ones to inject)`` for a run of ``name`` in ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}; got {profile!r}.")
    md = root / "notebooks" / f"{name}.md"
    if not md.is_file():
        known = ", ".join(sources.toc_notebooks(root)) or "none"
        raise FileNotFoundError(f"no notebook source {md}; the chapters are: {known}.")
    defaults = sources.parameters_cell(sources.read_text_notebook(md))
    layers = []
    if profile == "smoke":
        layers.append(("params/smoke.yaml", sources.smoke_overrides(root).get(name) or {}))
    layers.append(("the command line", dict(overrides or {})))
    inject = {}
    for origin, layer in layers:
        unknown = sorted(set(layer) - set(defaults))
        if unknown:
            raise KeyError(
                f"unknown parameter(s) {unknown} for notebook {name!r} from {origin}; "
                f"its parameters cell defines {sorted(defaults)}."
            )
        inject.update(layer)
    return {**defaults, **inject}, inject


def output_path(root: Path, name: str, profile: str) -> Path:
    """Where a run of chapter ``name`` goes: the committed ``notebooks/NAME.ipynb`` for the full
    profile, ``_build/smoke/NAME.ipynb`` for the smoke profile."""
    if profile == "full":
        return root / "notebooks" / f"{name}.ipynb"
    return root / "_build" / "smoke" / f"{name}.ipynb"


def run_notebook(name: str, profile: str = "smoke", overrides: dict | None = None, root: Path | None = None) -> dict:
    """Execute chapter ``name`` through papermill. Returns its ``metadata.gmlm`` record."""
    import papermill

    root = root or sources.find_root()
    params, inject = resolve_parameters(root, name, profile, overrides)
    if profile == "full" and provenance.git_commit().endswith("-dirty"):
        raise ValueError(f"a full run of {name!r} must start from committed sources, but {', '.join(provenance.SOURCES)} "
                         "have uncommitted changes (`git status`); commit them first: the committed outputs must name "
                         "a commit that reproduces them.")
    out = output_path(root, name, profile)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{name}.ipynb"
        nb = sources.read_text_notebook(root / "notebooks" / f"{name}.md")
        nb.metadata.pop("jupytext", None)
        nbformat.write(nb, src)
        rec_path = Path(tmp) / "provenance.json"
        env = {
            provenance.ENV_PARAMETERS: json.dumps(params, default=str),
            provenance.ENV_RECORD: str(rec_path),
            provenance.ENV_PROFILE: profile,
            "TQDM_DISABLE": "1",  # progress bars are for interactive runs, not the stored outputs
        }
        t0 = time.perf_counter()
        with _environ(**env):
            try:
                papermill.execute_notebook(
                    str(src), str(out), parameters=inject, kernel_name="python3",
                    cwd=str(root / "notebooks"), progress_bar=False, log_output=False,
                )
            except papermill.PapermillExecutionError as err:
                raise NotebookRunError(
                    f"notebook {name!r} ({profile}) failed in cell {err.exec_count}: {err.ename}: {err.evalue}\n"
                    f"the executed notebook with the traceback is at {out}"
                ) from None
        total = time.perf_counter() - t0
        if not rec_path.is_file():
            raise NotebookRunError(f"notebook {name!r} ran but never called provenance.finish(run) in its last cell.")
        record = json.loads(rec_path.read_text())
    executed = nbformat.read(out, as_version=4)
    meta = {
        "profile": profile,
        "provenance": record,
        "total_wall_time_s": round(total, 2),
        "code_sha256": sources.code_hash(executed),
    }
    executed.metadata["gmlm"] = meta
    nbformat.write(executed, out)
    if profile == "full":
        from gmlm_lib.book import checks

        checks.write_provenance_page(root)
    return meta
