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
        with _environ(**env):
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
        total = time.perf_counter() - t0
        if not rec_path.is_file():
            raise NotebookRunError(f"notebook {name!r} ran but never called provenance.finish(run) in its last cell; "
                                   f"{out} is unchanged.")
        record = json.loads(rec_path.read_text())
        executed = nbformat.read(executed_path, as_version=4)
        for cell in executed.cells:  # papermill's cell of injected parameters is setup too: not shown
            if sources.injected(cell):
                cell.metadata[sources.DISPLAY_KEY] = dict(sources.HIDDEN)
        meta = {
            "profile": profile,
            "provenance": record,
            "total_wall_time_s": round(total, 2),
            "code_sha256": sources.code_hash(executed),
        }
        executed.metadata["gmlm"] = meta
        part = out.with_name(f".{out.name}.part")
        nbformat.write(executed, part)
        os.replace(part, out)  # every cell succeeded: only now is the target replaced, whole
    if profile == "full" and dest is None:
        from gmlm_lib.book import checks

        checks.write_provenance_page(root)
    return meta


TRANSLATION_CHAPTERS = sources.TRANSLATION_CHAPTERS  # what ``make gpu-run`` executes on an accelerator
RECORD_FILES = ("run.json", "config.json", "data.json", "metrics.jsonl", "val.jsonl", "distilled.json",
                "distilled_val.json", "checkpoint_digests.json",
                "sizing.json")  # the last: gmlm_lib.mt.sizing.SIZING_FILE


KERNEL_CWD = "notebooks"
"""The folder, under the book's root, in which a chapter's kernel runs: a relative ``run_root`` such as
the chapters' ``runs/padir`` is a folder beneath it."""


def _records_archive(root: Path, out: Path, compiles: Path | None = None) -> Path | None:
    """``out/run-records.tar.gz``: the small records of every run folder under ``runs/`` where the
    chapters' kernels run (:data:`KERNEL_CWD`; configs, run records, metrics, data fingerprints, sizing
    decisions; no checkpoints), so a run on a lent machine leaves its training curves and provenance
    behind, and ``compiles`` (the batch's :data:`gmlm_lib.core.timing.COMPILE_LOG`, when it exists) as
    ``compiles.tsv``: every program compiled with its time and seconds, for reading where a chapter's
    wall time went beyond the log's sums; ``None`` when there is neither. Run folder members are named
    as the chapters name the folders (``runs/padir/en-de/...``)."""
    import tarfile

    base = root / KERNEL_CWD
    runs = base / "runs"
    files = sorted(p for p in runs.rglob("*") if p.is_file() and p.name in RECORD_FILES) if runs.is_dir() else []
    compiles = compiles if compiles is not None and compiles.is_file() else None
    if not files and compiles is None:
        return None
    path = out / "run-records.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for f in files:
            tar.add(f, arcname=str(f.relative_to(base)))
        if compiles is not None:
            tar.add(compiles, arcname="compiles.tsv")
    return path


CACHE_ARCHIVE = "jax-cache.tar.gz"
"""The batch's compiled programs, packed for a later batch on a machine of the same kind
(:func:`pack_compile_cache`)."""
CACHE_RETURN_BYTES = 15 * 2**20
"""At most this many bytes of programs go into :data:`CACHE_ARCHIVE`: a lent machine sends back files of at
most 16 MiB, and the archive travels to the next one beside the wheels and the corpus (64 MiB in all)."""
_CACHE_SUFFIX, _ATIME_SUFFIX = "-cache", "-atime"  # a program's files in JAX's persistent cache (jax._src.lru_cache)


def pack_compile_cache(cache: Path, dest: Path, limit: int = CACHE_RETURN_BYTES, *,
                       last: frozenset[str] = frozenset()) -> dict:
    """JAX's persistent compilation cache ``cache`` into the gzip tar ``dest``, so that a later batch on a
    machine of the same kind (device, driver, JAX version: they are part of each program's key) reads the
    programs instead of compiling them (:func:`unpack_compile_cache`); on a GPU most of a translation
    chapter's first run is compiling. Programs go in the order they were written, the earliest first
    (the PaDIR chapter's, which every later chapter and a rebuilt run folder share), while their bytes
    stay within ``limit`` (uncompressed, so the archive does too); a program's access-time file goes
    with it. The programs named in ``last`` (file names: those in a batch's cache before its first
    chapter, restored from an earlier batch's archive, which holds them already, and written first) go
    after all the others. Returns ``programs``, ``bytes`` (the whole cache), ``packed``, ``packed_bytes``;
    writes nothing when nothing fits or the cache is empty."""
    import tarfile

    cache, dest = Path(cache), Path(dest)
    entries = sorted(cache.glob(f"*{_CACHE_SUFFIX}"), key=lambda p: (p.name in last, p.stat().st_mtime, p.name)) \
        if cache.is_dir() else []
    total = sum(p.stat().st_size for p in entries)
    chosen, used = [], 0
    for path in entries:
        size = path.stat().st_size
        if used + size <= limit:
            chosen.append(path)
            used += size
    if chosen:
        with tarfile.open(dest, "w:gz") as tar:
            for path in chosen:
                tar.add(path, arcname=path.name)
                atime = path.with_name(path.name.removesuffix(_CACHE_SUFFIX) + _ATIME_SUFFIX)
                if atime.is_file():
                    tar.add(atime, arcname=atime.name)
    return dict(programs=len(entries), bytes=total, packed=len(chosen), packed_bytes=used)


def unpack_compile_cache(archive: Path, cache: Path) -> int:
    """The programs of ``archive`` (a :func:`pack_compile_cache` archive of an earlier batch) into JAX's
    persistent cache folder ``cache``, keeping any program already there; returns how many were added.
    Only plain files named as the cache names them are taken (a member with a path, a link or another
    name is refused by name: the archive is data from another machine)."""
    import tarfile

    archive, cache = Path(archive), Path(cache)
    if not archive.is_file():
        raise FileNotFoundError(f"unpack_compile_cache: {archive} does not exist; pass the {CACHE_ARCHIVE} that an "
                                "earlier gpu-run left in its OUT.")
    cache.mkdir(parents=True, exist_ok=True)
    added = 0
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        bad = [m.name for m in members if not m.isfile() or "/" in m.name or m.name.startswith(".")
               or not m.name.endswith((_CACHE_SUFFIX, _ATIME_SUFFIX))]
        if bad:
            raise ValueError(f"unpack_compile_cache: {archive} holds members that are not compiled programs of JAX's "
                             f"cache: {bad[:5]}; pass an archive made by pack_compile_cache.")
        for m in members:
            target = cache / m.name
            if target.exists():
                continue
            target.write_bytes(tar.extractfile(m).read())
            added += m.name.endswith(_CACHE_SUFFIX)
    return added


def restore_sizing(archive: Path, root: Path) -> list[Path]:
    """Put the sizing decisions (``runs/**/sizing.json``, :func:`gmlm_lib.mt.sizing.fit`) of a previous
    batch's ``run-records.tar.gz`` back into the run folders (beneath ``root / KERNEL_CWD``, where the
    chapters' kernels run), and return their paths. Why: the run folders themselves (their weights)
    cannot leave a lent GPU machine, so a later batch that has to rebuild the PaDIR chapter's folder
    (for the chapters that did not fit in the first one) would time the updates again and may train a
    few more or fewer; with the first batch's decision in place it trains exactly the updates the
    PaDIR chapter's models had. A decision already in place must be the same; an archive without
    one, or a member outside ``runs/``, is refused by name."""
    import tarfile

    from gmlm_lib.mt.sizing import SIZING_FILE

    archive = Path(archive)
    if not archive.is_file():
        raise FileNotFoundError(f"restore_sizing: {archive} does not exist; pass the run-records.tar.gz that a "
                                "batch (make gpu-run) left in its OUT.")
    restored = []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            name = Path(member.name)
            if not member.isfile() or name.name != SIZING_FILE:
                continue
            if name.is_absolute() or ".." in name.parts or name.parts[0] != "runs":
                raise ValueError(f"restore_sizing: {archive} holds {member.name!r}, outside runs/; it is not a "
                                 "run-records.tar.gz that a batch wrote.")
            data = tar.extractfile(member).read()
            target = root / KERNEL_CWD / name
            if target.is_file() and target.read_bytes() != data:
                raise ValueError(f"restore_sizing: {target} holds another sizing decision than {archive}; use a "
                                 "new run folder (move that one away) to train what the archive's run decided.")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            restored.append(target)
    if not restored:
        raise ValueError(f"restore_sizing: {archive} holds no sizing decision (runs/**/sizing.json): the batch "
                         "that wrote it sized no run (train_seconds = 0), or it is not a run-records.tar.gz.")
    return restored


def run_batch(names: list[str], profile: str, out: Path, overrides: dict | None = None,
              root: Path | None = None, *, sizing_from: Path | None = None,
              cache_from: Path | None = None, cache_out: bool = False) -> int:
    """Run chapters ``names`` in order in ``profile`` and gather what a reader of the run needs in the
    folder ``out``: each executed notebook, ``provenance.md`` (full profile), the small records of the
    run folders with every compilation of the batch (``run-records.tar.gz``) and ``log.txt`` (each
    chapter's start, wall time and outcome). A chapter that fails is logged and its executed notebook, with the traceback, goes to
    ``out``; the later chapters still run (a failure in one chapter's last cells must not cost a
    one-shot GPU run the others: they reuse the run folder as far as it got, resuming it, or build
    it). An interrupt (SIGINT: ``make gpu-run``'s deadline) stops the batch. Returns 0 when every
    chapter ran, else 1.
    This is ``make gpu-run``: on a lent GPU machine ``out`` is what comes back.

    A full batch leaves the checkout as it was: each executed notebook goes to ``out`` only, and
    ``out/provenance.md`` is the provenance page as it will read once :func:`promote` has taken the
    batch's notebooks into the book. Why: a batch is the accelerator run of the chapters whose ``.md``
    runs ahead of its notebook until then (:func:`gmlm_lib.book.checks.awaiting`); a rehearsal of it
    on a CPU must not replace the book's notebooks with a CPU run.

    ``sizing_from``: a previous batch's ``run-records.tar.gz``, whose sizing decisions are put back
    into the run folders first (:func:`restore_sizing`).

    With JAX's persistent compilation cache on (``JAX_COMPILATION_CACHE_DIR``, which ``make gpu-run``
    sets): ``cache_from``, an earlier batch's :data:`CACHE_ARCHIVE`, is unpacked into it first
    (:func:`unpack_compile_cache`), and with ``cache_out`` the batch's programs are packed into
    ``out/`` at its end (:func:`pack_compile_cache`), an interrupted batch's too; the log says how many.

    A smoke batch shares the PaDIR chapter's models as a full one does (there every translation
    chapter's defaults name ``runs/padir/<src>-<tgt>``): the padir chapter trains into a temporary
    ``run_root``, and each later chapter with a ``padir_run`` parameter opens the run folder it
    finished, instead of training a stand-in of its own (what an empty ``padir_run``, the smoke
    profile's, does in a chapter run alone). So the rehearsal of ``make gpu-run`` runs the path the
    GPU run takes. Where padir left no finished folder the later chapters train their stand-ins (the
    log says so); an explicit ``run_root`` or ``padir_run`` override turns the sharing off."""
    import shutil
    import sys
    from datetime import datetime, timezone

    root = root or sources.find_root()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    chapters = sources.toc_notebooks(root)
    unknown = [n for n in names if n not in chapters]
    if unknown or not names:
        raise ValueError(f"run_batch: unknown chapter(s) {unknown}; the chapters are {chapters}." if unknown else
                         "run_batch: name at least one chapter.")
    overrides = dict(overrides or {})
    own = {}  # every chapter's share of the overrides, checked (names, types) before anything runs
    takes_run = set()  # the chapters that open the PaDIR chapter's run folder (a padir_run parameter)
    for name in names:
        params = sources.parameters_cell(sources.read_text_notebook(chapter_source(root, name)))
        own[name] = {k: v for k, v in overrides.items() if k in params}
        resolve_parameters(root, name, profile, own[name])
        if "padir_run" in params:
            takes_run.add(name)
    unused = sorted(set(overrides) - {k for mine in own.values() for k in mine})
    if unused:
        raise KeyError(f"run_batch: parameter(s) {unused} belong to none of the chapters {names}.")
    shared = None  # the smoke batch's PaDIR run_root, shared with the chapters after padir (docstring)
    if profile == "smoke" and "padir" in names and not {"run_root", "padir_run"} & set(overrides):
        shared = Path(tempfile.mkdtemp(prefix="gmlm-batch-runs-"))
        own["padir"] = {**own["padir"], "run_root": str(shared)}
    log_path = out / "log.txt"

    def log(line: str) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        print(f"[{stamp}] {line}", flush=True)
        with log_path.open("a") as f:
            f.write(f"[{stamp}] {line}\n")

    from gmlm_lib.core import records

    # the batch reads its device's name and leaves the device's memory to the chapters' kernels, its
    # children: JAX would otherwise preallocate 75% of a GPU to this process for the whole batch
    with _environ(XLA_PYTHON_CLIENT_PREALLOCATE="false"):
        env = records.environment()
    log(f"batch of {len(names)} chapter(s), profile {profile}, commit {records.git_commit()}, "
        f"{records.hardware_summary(env)}, JAX {env['jax_version']}, Flax {env['flax_version']}, Python {env['python']}"
        + "".join(f", {key.upper()}={env[key]}" for key in ("xla_flags", "jax_compilation_cache_dir") if key in env))
    if sizing_from is not None:
        for path in restore_sizing(sizing_from, root):
            log(f"sizing decision {path.relative_to(root)} restored from {sizing_from}: the models train the "
                "updates that batch decided")
    cache_dir = os.environ.get("JAX_COMPILATION_CACHE_DIR", "")
    if (cache_from is not None or cache_out) and not cache_dir:
        raise ValueError("run_batch: cache_from and cache_out need JAX's persistent compilation cache: set "
                         "JAX_COMPILATION_CACHE_DIR (make gpu-run sets it from GPU_JAX_CACHE).")
    if cache_from is not None:
        log(f"compilation cache: {unpack_compile_cache(cache_from, Path(cache_dir))} programs restored from "
            f"{cache_from.name} into {cache_dir} (a machine of another kind or JAX version compiles them again)")
    # the programs in the cache before the first chapter (restored, or left by an earlier run): packed after the
    # chapters' own, which a later batch lacks (an archive it was given holds those already)
    before = frozenset(p.name for p in Path(cache_dir).glob(f"*{_CACHE_SUFFIX}")) if cache_out else frozenset()
    status = 0
    t_all = time.perf_counter()

    in_out: dict[str, Path] = {}  # the chapters' finished full runs, in out only (docstring)

    def gather():
        """What a reader of the run needs so far, into ``out`` (after every chapter: a command killed at
        a time limit keeps the finished chapters' records)."""
        from gmlm_lib.book import checks

        page = root / checks.PROVENANCE_PAGE
        if profile == "full" and in_out:
            try:
                (out / "provenance.md").write_text(checks.provenance_page(root, in_out))
            except Exception as err:  # the runs themselves are in out already: said, and the batch goes on
                log(f"provenance.md: not written ({type(err).__name__}: {err}); make gpu-promote regenerates it")
        elif profile == "full" and page.is_file():
            shutil.copy2(page, out / "provenance.md")
        return _records_archive(root, out, compile_log)

    from gmlm_lib.core import timing

    # every program the chapters' kernels compile (or read from the cache), one line each: summed by
    # program in this log after each chapter, a stopped one included, and kept whole in the records
    compile_log = Path(tempfile.mkdtemp(prefix="gmlm-compiles-")) / "compiles.tsv"
    if profile == "full":
        log(f"each executed notebook goes to {out} only; the book's notebooks/ stay as they are (make gpu-promote "
            "FROM=that folder takes the runs in)")
    for name in names:
        mine = own[name]
        if shared is not None and name in takes_run and names.index(name) > names.index("padir"):
            folder = _finished_run(shared)
            if folder is not None:
                mine = {**mine, "padir_run": str(folder)}
            else:
                log(f"{name}: the padir chapter left no finished run folder in {shared}; this chapter trains "
                    "its own stand-in")
        source = chapter_source(root, name)
        log(f"{name}: started from {source.relative_to(root) if source.is_relative_to(root) else source}"
            + (f" with {mine}" if mine else ""))
        t0, began = time.perf_counter(), time.time()
        try:
            with _environ(**{timing.COMPILE_LOG: str(compile_log)}):
                meta = run_notebook(name, profile, mine, root=root,
                                    **({"dest": out / f"{name}.ipynb"} if profile == "full" else {}))
        except (Exception, KeyboardInterrupt) as err:  # reported; an interrupt stops the batch, an error does not
            interrupted = isinstance(err, KeyboardInterrupt)
            why = ("interrupted (SIGINT: a deadline such as make gpu-run's GPU_DEADLINE, or Ctrl-C)"
                   if interrupted else f"{type(err).__name__}: {err}")
            log(f"{name}: FAILED after {time.perf_counter() - t0:.1f} s: {why}")
            log(f"{name}: compiled or read from the cache: {timing.compile_summary(compile_log, began)}")
            failed = root / "_build" / "failed" / f"{profile}-{name}.ipynb"
            if failed.is_file():
                shutil.copy2(failed, out / failed.name)
            status = 1
            if interrupted:
                break
            gather()
            continue
        if profile == "full":
            in_out[name] = out / f"{name}.ipynb"
        else:
            shutil.copy2(output_path(root, name, profile), out / f"{name}.ipynb")
        rec = meta.get("provenance", {})
        log(f"{name}: finished in {meta['total_wall_time_s']:.1f} s"
            + (f" (compiling {rec['compilations']} programs, {rec['cache_hits']} from the compilation cache: "
               + (f"{rec['compile_wall_s']:.1f} s of wall time, " if rec.get("compile_wall_s") is not None else "")
               + f"{rec['compile_s']:.1f} s summed over programs)" if "compile_s" in rec else ""))
        log(f"{name}: compiled or read from the cache: {timing.compile_summary(compile_log, began)}")
        gather()
    archive = gather()
    if cache_out:
        packed = pack_compile_cache(Path(cache_dir), out / CACHE_ARCHIVE, last=before)
        mib = 2**20
        log(f"compilation cache: {packed['programs']} programs, {packed['bytes'] / mib:.1f} MiB; "
            f"{packed['packed']} of them ({packed['packed_bytes'] / mib:.1f} MiB, the earliest written"
            + (f" first, the {len(before)} there before the first chapter last" if before else "") + ") packed into "
            f"{CACHE_ARCHIVE if packed['packed'] else 'nothing'} for a later batch (make gpu-run GPU_JAX_CACHE_FROM=)")
    shutil.rmtree(compile_log.parent, ignore_errors=True)  # summed in the log after each chapter
    if shared is not None:
        shutil.rmtree(shared, ignore_errors=True)
    log(f"batch {'finished' if status == 0 else 'stopped'} after {time.perf_counter() - t_all:.1f} s"
        + (f"; run records in {archive.name}" if archive else ""))
    sys.stdout.flush()
    return status


def _finished_run(run_root: Path) -> Path | None:
    """The one run folder under ``run_root`` (``<src>-<tgt>``) that holds every part the PaDIR chapter
    trains (:func:`gmlm_lib.mt.pipeline.complete`), else None. Other folders beside it (the chapter's
    ``jax-cache`` where no ``JAX_COMPILATION_CACHE_DIR`` is set) are not run folders."""
    from gmlm_lib.mt import pipeline

    found = [p for p in run_root.iterdir() if p.is_dir() and pipeline.complete(p)] if run_root.is_dir() else []
    return found[0] if len(found) == 1 else None


def promote(root: Path, results: Path) -> list[str]:
    """Take a batch's executed notebooks from ``results`` (what ``make gpu-run`` left in OUT) into the
    book: each ``results/NAME.ipynb`` of a chapter must be a full run whose outputs its code produced,
    made by the current ``notebooks/NAME.md`` (the same code cells); then it replaces
    ``notebooks/NAME.ipynb``, the ``.md``'s text is synced into it (a markdown edit made after the run
    is kept) and ``book/provenance.md`` is regenerated. Nothing is moved unless every notebook passes.
    Returns the chapters promoted."""
    import shutil

    results = Path(results)
    chapters = sources.toc_notebooks(root)
    found = sorted(p for p in results.glob("*.ipynb") if p.stem in chapters)
    if not found:
        raise FileNotFoundError(f"promote: no executed chapter (NAME.ipynb of a chapter in _toc.yml) in {results}.")
    for nb_path in found:
        md = chapter_source(root, nb_path.stem)
        nb = sources.read_notebook(nb_path, "promote")
        meta = nb.metadata.get("gmlm", {})
        if meta.get("profile") != "full" or not sources.outputs_from_code(nb):
            raise ValueError(f"promote: {nb_path} is not a full run whose outputs its code produced "
                             f"(profile {meta.get('profile')!r}); run `make gpu-run` again.")
        if sources.code_cells(sources.read_text_notebook(md)) != sources.code_cells(nb):
            raise ValueError(f"promote: the code of {nb_path} is not that of {md.relative_to(root)}: the run was "
                             "made from other sources; run it again from this tree.")
    for nb_path in found:
        shutil.copy2(nb_path, root / "notebooks" / nb_path.name)
    from gmlm_lib.book import checks

    checks.sync(root, [p.stem for p in found])
    checks.write_provenance_page(root)
    return [p.stem for p in found]
