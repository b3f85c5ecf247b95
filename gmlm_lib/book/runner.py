"""Execute chapters through papermill in the ``smoke`` or ``full`` profile.

- ``smoke``: the parameters cell's defaults, overridden by ``params/smoke.yaml`` and then by
  ``-p`` options; the executed notebook goes to ``_build/smoke/NAME.ipynb``.
- ``full``: the defaults, overridden by ``-p`` options only; the executed notebook replaces the
  committed ``notebooks/NAME.ipynb`` only when every cell succeeded (a failed run goes to
  ``_build/failed/``, and nothing that exists is touched), and ``book/provenance.md`` is regenerated. It starts only
  from committed sources (:func:`gmlm_lib.core.records.git_commit` without ``-dirty``).

A chapter must be listed in ``_toc.yml``; a parameter name that is not in the notebook's
``parameters`` cell, or a value not of its default's type, is an error before any cell runs. The executed
notebook's metadata ``gmlm`` holds the provenance record, the profile, the total wall time
and the SHA-256 of the code that ran (the freshness key, see :mod:`gmlm_lib.book.checks`). A full
run sets a chapter's ``install_ref`` parameter, if it has one, to the commit it runs from (see
:mod:`gmlm_lib.book.sources`).
The kernel's ``TMPDIR`` is a folder removed when the run ends, failed or not, so the temporary
run folders of a chapter run with ``run_root = ""`` (as the smoke profile does) never outlive it.
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
from gmlm_lib.core import settings

PROFILES = ("smoke", "full")
KERNEL_CWD = "notebooks"
"""The folder, under the book's root, in which a chapter's kernel runs: a relative ``run_root`` such as
the chapters' ``runs/padir`` is a folder beneath it."""


class NotebookRunError(RuntimeError):
    """A chapter failed to execute; the message names the notebook and the output file."""


@contextmanager
def environ(**values: str):
    """Set environment variables for the block, restoring them after."""
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


def _typed(name: str, param: str, default, value, origin: str):
    """``value`` checked against the type of the parameter's default and converted where that is
    lossless (:func:`gmlm_lib.core.settings.coerce`: an int for a float, YAML 1.1's ``1e-3`` string
    for a float, a tuple for a list, item by item); a ``TypeError`` naming the parameter (and the item),
    the expected type and the origin otherwise. A default of another type (``None``) takes any value."""
    kind = type(default)
    if kind not in settings.KINDS:
        return value
    first = default[0] if isinstance(default, (list, tuple)) and default else None
    item = type(first) if type(first) in settings.KINDS and not isinstance(first, (list, tuple, dict)) else None
    try:
        return settings.coerce(value, kind, item)
    except settings.SettingError as err:
        raise TypeError(f"parameter {param + err.path!r} of notebook {name!r} from {origin} must be {err.expected} "
                        f"(its default is {default!r}); got {err.value!r} ({type(err.value).__name__}).") from None


def chapter_source(root: Path, name: str) -> Path:
    """The MyST source a run of chapter ``name`` executes: ``notebooks/NAME.md``, its one source."""
    return root / "notebooks" / f"{name}.md"


def resolve_parameters(root: Path, name: str, profile: str, overrides: dict | None = None) -> tuple[dict, dict]:
    """``(all parameters, the ones to inject)`` for a run of ``name`` in ``profile``: every override
    must name a parameter of the chapter's ``parameters`` cell and have its default's type
    (``_typed``), checked before any cell runs."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}; got {profile!r}.")
    chapters = sources.toc_notebooks(root)
    if name not in chapters:
        raise FileNotFoundError(f"{name!r} is not a chapter of the book; the chapters (_toc.yml) are: "
                                f"{', '.join(chapters) or 'none'}.")
    md = chapter_source(root, name)
    if not md.is_file():
        raise FileNotFoundError(f"no notebook source {md}; the chapters are: {', '.join(chapters)}.")
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
        inject.update({k: _typed(name, k, defaults[k], v, origin) for k, v in layer.items()})
    return {**defaults, **inject}, inject


def output_path(root: Path, name: str, profile: str) -> Path:
    """Where a run of chapter ``name`` goes: the committed ``notebooks/NAME.ipynb`` for the full
    profile, ``_build/smoke/NAME.ipynb`` for the smoke profile."""
    if profile == "full":
        return root / "notebooks" / f"{name}.ipynb"
    return root / "_build" / "smoke" / f"{name}.ipynb"


def _kernel_manager_class(folder: Path):
    """The kernel manager class for one chapter run: its kernel talks over Unix sockets in ``folder``
    (ZeroMQ's ``ipc`` transport) instead of TCP ports on 127.0.0.1; None where there are no Unix sockets
    (Windows: papermill's default, TCP). Why: with TCP, jupyter_client picks free ports and the kernel
    binds them a moment later, so a kernel started meanwhile by another run (the test suite's two workers
    each run chapters) can take one first, and the kernel dies with "Address already in use" before its
    first cell. Socket files in a folder of this run's own cannot collide. A class, not an instance:
    the notebook client then owns the kernel and shuts it down when the run ends."""
    if os.name != "posix":
        return None
    from jupyter_client.manager import AsyncKernelManager  # papermill's client is asynchronous
    from traitlets import default

    path = str(Path(folder) / "kernel")

    class UnixSocketKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self):
            return "ipc"

        @default("ip")
        def _ip_default(self):
            return path

    return UnixSocketKernelManager


def _finish(name: str, profile: str, executed_path: Path, rec_path: Path, out: Path, wall_s: float) -> dict:
    """Write a run that executed every cell to ``out``, whole (beside it, then renamed), with its record:
    the profile, the chapter's provenance record, the wall time and the hash of the code that ran."""
    if not rec_path.is_file():
        raise NotebookRunError(f"notebook {name!r} ran but never called provenance.finish(run) in its last cell; "
                               f"{out} is unchanged.")
    executed = nbformat.read(executed_path, as_version=4)
    for cell in executed.cells:  # papermill's cell of injected parameters is setup too: not shown
        if sources.injected(cell):
            cell.metadata[sources.DISPLAY_KEY] = dict(sources.HIDDEN)
    meta = {"profile": profile, "provenance": json.loads(rec_path.read_text()), "total_wall_time_s": round(wall_s, 2),
            "code_sha256": sources.code_hash(executed)}
    executed.metadata["gmlm"] = meta
    part = out.with_name(f".{out.name}.part")
    nbformat.write(executed, part)
    os.replace(part, out)  # every cell succeeded: only now is the target replaced, whole
    return meta


def run_notebook(name: str, profile: str = "smoke", overrides: dict | None = None, root: Path | None = None, *,
                 dest: Path | None = None) -> dict:
    """Execute chapter ``name`` through papermill. Returns its ``metadata.gmlm`` record. ``dest``: where
    the executed notebook goes instead of
    :func:`output_path`; then the book's generated pages are left alone too (a full run into
    ``output_path`` regenerates them from the committed notebooks, its own among them)."""
    import papermill

    root = root or sources.find_root()
    params, inject = resolve_parameters(root, name, profile, overrides)
    if profile == "full" and provenance.git_commit().endswith("-dirty"):
        raise ValueError(f"a full run of {name!r} must start from committed sources, but {', '.join(provenance.SOURCES)} "
                         "have uncommitted changes (`git status`); commit them first: the committed outputs must name "
                         "a commit that reproduces them.")
    if profile == "full" and sources.INSTALL_REF in params and sources.INSTALL_REF not in inject:
        # the Colab install cell of the committed notebook installs the commit that made its outputs
        inject[sources.INSTALL_REF] = params[sources.INSTALL_REF] = provenance.git_commit()
    out = output_path(root, name, profile) if dest is None else Path(dest)
    out.parent.mkdir(parents=True, exist_ok=True)
    failed = root / "_build" / "failed" / f"{profile}-{name}.ipynb"
    failed.unlink(missing_ok=True)  # an earlier run's failure is not this run's
    with tempfile.TemporaryDirectory() as tmp:
        executed_path = Path(tmp) / "executed.ipynb"
        src = Path(tmp) / f"{name}.ipynb"
        nb = sources.read_text_notebook(chapter_source(root, name))
        nb.metadata.pop("jupytext", None)
        nbformat.write(nb, src)
        rec_path = Path(tmp) / "provenance.json"
        scratch = Path(tmp) / "scratch"  # the kernel's TMPDIR: a chapter's temporary run folders, removed with it
        scratch.mkdir()
        env = {
            "TMPDIR": str(scratch),
            provenance.ENV_PARAMETERS: json.dumps(params, default=str),
            provenance.ENV_RECORD: str(rec_path),
            provenance.ENV_PROFILE: profile,
            "TQDM_DISABLE": "1",  # progress bars are for interactive runs, not the stored outputs
        }
        manager = _kernel_manager_class(Path(tmp))
        t0 = time.perf_counter()
        with environ(**env):
            try:
                papermill.execute_notebook(
                    str(src), str(executed_path), parameters=inject, kernel_name="python3",
                    cwd=str(root / KERNEL_CWD), progress_bar=False, log_output=False,
                    **({} if manager is None else dict(kernel_manager_class=manager)),
                )
            except papermill.PapermillExecutionError as err:
                failed.parent.mkdir(parents=True, exist_ok=True)
                os.replace(executed_path, failed)
                raise NotebookRunError(
                    f"notebook {name!r} ({profile}) failed in cell {err.exec_count}: {err.ename}: {err.evalue}\n"
                    f"the executed notebook with the traceback is at {failed}; {out} is unchanged"
                ) from None
            except KeyboardInterrupt:  # a deadline (make gpu-run's GPU_DEADLINE) or Ctrl-C
                # keep what ran: the cells that finished, with their outputs and papermill's timings, tell
                # how far the chapter got and what each step cost (papermill saves after every cell)
                if executed_path.is_file():
                    failed.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(executed_path, failed)
                raise
        meta = _finish(name, profile, executed_path, rec_path, out, time.perf_counter() - t0)
    if profile == "full" and dest is None:
        from gmlm_lib.book import checks

        checks.write_provenance_page(root)
    return meta
