"""The accelerator run: a batch of chapters from one commit, on a machine with no network, no git
metadata and no notebook tooling, and what comes back of it. One command line,
``python -m gmlm_lib.book batch run|start|wait|probe|promote`` (the Makefile's ``gpu-*`` targets are
one line each over it; ``benchmarks/gpu_runs/README.md`` is the runbook, with the values an accelerator
machine's limits ask for):

- ``run``: install the notebook tooling from wheels (``--wheels``) into a folder of its own, set the
  environment (the commit the tree was copied at, the corpus, JAX's persistent compilation cache,
  ``XLA_FLAGS``, optionally chosen by ``benchmarks/compile_probe.py`` first), then run the chapters in
  order (:func:`run_batch`) until they end or ``--deadline`` seconds have passed, gathering the
  executed notebooks, the provenance page, the run folders' records and a log in ``--out``;
- ``start`` / ``wait``: the same run detached from the command that started it, for machines whose
  commands may stop sooner than the machine; ``wait`` copies what the run has made so far into
  ``--out`` as it changes, so a command cut short still returns every file that had finished;
- ``probe``: the compile probe alone; ``promote``: take a run's notebooks into the book
  (:func:`promote`: only notebooks the current sources made).

Only the standard library is imported here at module level: ``run`` starts before the wheels it
installs are importable.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

RECORD_FILES = ("run.json", "config.json", "data.json", "metrics.jsonl", "val.jsonl", "distilled.json",
                "distilled_val.json", "checkpoint_digests.json",
                "sizing.json")  # the last: gmlm_lib.mt.sizing.SIZING_FILE


def _records_archive(root: Path, out: Path, compiles: Path | None = None) -> Path | None:
    """``out/run-records.tar.gz``: the small records of every run folder under ``runs/`` where the
    chapters' kernels run (:data:`gmlm_lib.book.runner.KERNEL_CWD`; configs, run records, metrics, data
    fingerprints, sizing decisions; no checkpoints), so a run on a remote machine leaves its training
    curves and provenance behind, and ``compiles`` (the batch's :data:`gmlm_lib.core.timing.COMPILE_LOG`, when it exists) as
    ``compiles.tsv``: every program compiled with its time and seconds, for reading where a chapter's
    wall time went beyond the log's sums; ``None`` when there is neither. Run folder members are named
    as the chapters name the folders (``runs/padir/en-de/...``)."""
    from gmlm_lib.book.runner import KERNEL_CWD

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


REUSE_ONLY = {"GMLM_REUSE_ONLY": "1"}
"""The environment of a chapter after the PaDIR chapter in a batch (:data:`gmlm_lib.mt.pipeline.REUSE_ONLY`,
named here without importing JAX): it opens the run folder the PaDIR chapter finished and fails rather than
train a second copy of its models."""

CACHE_ARCHIVE = "jax-cache.tar.gz"
"""The batch's compiled programs, packed for a later batch on a machine of the same kind
(:func:`pack_compile_cache`)."""
_CACHE_SUFFIX, _ATIME_SUFFIX = "-cache", "-atime"  # a program's files in JAX's persistent cache (jax._src.lru_cache)


def pack_compile_cache(cache: Path, dest: Path, limit: int, *,
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
    do not come back from the accelerator machine, so a later batch that has to rebuild the PaDIR chapter's folder
    (for the chapters that did not fit in the first one) would time the updates again and may train a
    few more or fewer; with the first batch's decision in place it trains exactly the updates the
    PaDIR chapter's models had. A decision already in place must be the same; an archive without
    one, or a member outside ``runs/``, is refused by name."""
    from gmlm_lib.book.runner import KERNEL_CWD
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


class _Batch:
    """One batch's folder ``out``, its log and its compile log (:func:`run_batch`)."""

    def __init__(self, root: Path, profile: str, out: Path):
        self.root, self.profile, self.out = root, profile, out
        self.compile_log = Path(tempfile.mkdtemp(prefix="gmlm-compiles-")) / "compiles.tsv"
        self.finished: dict[str, Path] = {}  # the chapters' finished full runs, in out only

    def log(self, line: str) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        print(f"[{stamp}] {line}", flush=True)
        with (self.out / "log.txt").open("a") as f:
            f.write(f"[{stamp}] {line}\n")

    def gather(self) -> Path | None:
        """What a reader of the run needs so far, into ``out`` (after every chapter: a command killed at a
        time limit keeps the finished chapters' records): the provenance page as the book's will read once
        the runs are promoted, and the run folders' records with the compile log."""
        from gmlm_lib.book import checks

        if self.profile == "full" and self.finished:
            try:
                (self.out / "provenance.md").write_text(checks.provenance_page(self.root, self.finished))
            except Exception as err:  # the runs themselves are in out already: said, and the batch goes on
                self.log(f"provenance.md: not written ({type(err).__name__}: {err}); make gpu-promote regenerates it")
        return _records_archive(self.root, self.out, self.compile_log)

    def chapter(self, name: str, params: dict, env: dict | None = None) -> bool:
        """Run one chapter (``env``: environment variables its kernel gets besides), log how it went and what
        it compiled; False when it failed (an interrupt is logged and raised again: it stops the batch)."""
        from gmlm_lib.book import runner
        from gmlm_lib.core import timing

        self.log(f"{name}: started from notebooks/{name}.md" + (f" with {params}" if params else ""))
        t0, began = time.perf_counter(), time.time()
        dest = self.out / f"{name}.ipynb"
        try:
            with runner.environ(**{timing.COMPILE_LOG: str(self.compile_log), **(env or {})}):
                meta = runner.run_notebook(name, self.profile, params, root=self.root,
                                           **({"dest": dest} if self.profile == "full" else {}))
        except (Exception, KeyboardInterrupt) as err:
            interrupted = isinstance(err, KeyboardInterrupt)
            why = ("interrupted (the batch's --deadline, make gpu-run's GPU_DEADLINE, or Ctrl-C)"
                   if interrupted else f"{type(err).__name__}: {err}")
            self.log(f"{name}: FAILED after {time.perf_counter() - t0:.1f} s: {why}")
            self.log(f"{name}: compiled or read from the cache: {timing.compile_summary(self.compile_log, began)}")
            failed = self.root / "_build" / "failed" / f"{self.profile}-{name}.ipynb"
            if failed.is_file():
                shutil.copy2(failed, self.out / failed.name)
            if interrupted:
                raise
            return False
        if self.profile == "full":
            self.finished[name] = dest
        else:
            shutil.copy2(runner.output_path(self.root, name, self.profile), dest)
        rec = meta.get("provenance", {})
        self.log(f"{name}: finished in {meta['total_wall_time_s']:.1f} s"
                 + (f" (compiling {rec['compilations']} programs, {rec['cache_hits']} from the compilation cache: "
                    + (f"{rec['compile_wall_s']:.1f} s of wall time, " if rec.get("compile_wall_s") is not None else "")
                    + f"{rec['compile_s']:.1f} s summed over programs)" if "compile_s" in rec else ""))
        self.log(f"{name}: compiled or read from the cache: {timing.compile_summary(self.compile_log, began)}")
        return True


def _chapter_overrides(root: Path, names: list[str], profile: str, overrides: dict) -> tuple[dict[str, dict], set]:
    """Every chapter's share of ``overrides``, checked (names, types) before anything runs, and the chapters
    that open the PaDIR chapter's run folder (a ``padir_run`` parameter)."""
    from gmlm_lib.book import runner, sources

    chapters = sources.toc_notebooks(root)
    unknown = [n for n in names if n not in chapters]
    if unknown or not names:
        raise ValueError(f"run_batch: unknown chapter(s) {unknown}; the chapters are {chapters}." if unknown else
                         "run_batch: name at least one chapter.")
    own, takes_run = {}, set()
    for name in names:
        params = sources.parameters_cell(sources.read_text_notebook(runner.chapter_source(root, name)))
        own[name] = {k: v for k, v in overrides.items() if k in params}
        runner.resolve_parameters(root, name, profile, own[name])
        if "padir_run" in params:
            takes_run.add(name)
    unused = sorted(set(overrides) - {k for mine in own.values() for k in mine})
    if unused:
        raise KeyError(f"run_batch: parameter(s) {unused} belong to none of the chapters {names}.")
    return own, takes_run


def _start_log(batch: _Batch, names: list[str], sizing_from: Path | None, cache_from: Path | None,
               cache_dir: str) -> None:
    """The batch's first lines: what runs where, and what it restored before its first chapter."""
    from gmlm_lib.book.runner import environ
    from gmlm_lib.core import records

    # the batch reads its device's name and leaves the device's memory to the chapters' kernels, its
    # children: JAX would otherwise preallocate 75% of a GPU to this process for the whole batch
    with environ(XLA_PYTHON_CLIENT_PREALLOCATE="false"):
        env = records.environment()
    batch.log(f"batch of {len(names)} chapter(s), profile {batch.profile}, commit {records.git_commit()}, "
              f"{records.hardware_summary(env)}, JAX {env['jax_version']}, Flax {env['flax_version']}, "
              f"Python {env['python']}"
              + "".join(f", {key.upper()}={env[key]}" for key in ("xla_flags", "jax_compilation_cache_dir")
                        if key in env))
    if sizing_from is not None:
        for path in restore_sizing(sizing_from, batch.root):
            batch.log(f"sizing decision {path.relative_to(batch.root)} restored from {sizing_from}: the models train "
                      "the updates that batch decided")
    if cache_from is not None:
        batch.log(f"compilation cache: {unpack_compile_cache(cache_from, Path(cache_dir))} programs restored from "
                  f"{cache_from.name} into {cache_dir} (a machine of another kind or JAX version compiles them again)")
    if batch.profile == "full":
        batch.log(f"each executed notebook goes to {batch.out} only; the book's notebooks/ stay as they are "
                  "(make gpu-promote FROM=that folder takes the runs in)")


def run_batch(names: list[str], profile: str, out: Path, overrides: dict | None = None,
              root: Path | None = None, *, sizing_from: Path | None = None,
              cache_from: Path | None = None, cache_out_bytes: int = 0) -> int:
    """Run chapters ``names`` in order in ``profile`` and gather in ``out`` what a reader of the run needs:
    each executed notebook, ``provenance.md`` (full profile), the run folders' small records with every
    compilation of the batch (``run-records.tar.gz``) and ``log.txt`` (each chapter's start, wall time,
    programs compiled and outcome). A chapter that fails is logged, its failed notebook goes to ``out``,
    and the later chapters still run (they reuse the run folder as far as it got); an interrupt (the
    deadline's SIGINT) stops the batch. Returns 0 when every chapter ran, else 1.

    A full batch leaves the checkout as it was: each executed notebook goes to ``out`` only, and
    ``out/provenance.md`` is the provenance page as it will read once :func:`promote` has taken the runs
    in (a run of the batch on a CPU must not replace the book's accelerator notebooks with a CPU run).

    ``sizing_from``: an earlier batch's ``run-records.tar.gz``, whose sizing decisions are put back
    first (:func:`restore_sizing`). With JAX's persistent compilation cache on
    (``JAX_COMPILATION_CACHE_DIR``): ``cache_from``, an earlier batch's :data:`CACHE_ARCHIVE`, is unpacked
    into it first, and with ``cache_out_bytes`` > 0 the batch's programs are packed into ``out`` at its
    end, at most that many bytes (:func:`pack_compile_cache`), an interrupted batch's too.

    A smoke batch shares the PaDIR chapter's models as a full one does: padir trains into a temporary
    ``run_root`` and each later chapter with a ``padir_run`` parameter opens the folder it finished
    (where it left none, they train their stand-ins, said in the log); an explicit ``run_root`` or
    ``padir_run`` override turns the sharing off."""
    from gmlm_lib.book import sources

    root = root or sources.find_root()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = dict(overrides or {})
    own, takes_run = _chapter_overrides(root, names, profile, overrides)
    shared = None  # the smoke batch's PaDIR run_root, shared with the chapters after padir (docstring)
    if profile == "smoke" and "padir" in names and not {"run_root", "padir_run"} & set(overrides):
        shared = Path(tempfile.mkdtemp(prefix="gmlm-batch-runs-"))
        own["padir"] = {**own["padir"], "run_root": str(shared)}
    cache_dir = os.environ.get("JAX_COMPILATION_CACHE_DIR", "")
    if (cache_from is not None or cache_out_bytes) and not cache_dir:
        raise ValueError("run_batch: cache_from and cache_out need JAX's persistent compilation cache: set "
                         "JAX_COMPILATION_CACHE_DIR (make gpu-run sets it from GPU_JAX_CACHE).")
    batch = _Batch(root, profile, out)
    _start_log(batch, names, sizing_from, cache_from, cache_dir)
    # the programs in the cache before the first chapter (restored, or left by an earlier run): packed after the
    # chapters' own, which a later batch lacks (an archive it was given holds those already)
    before = frozenset(p.name for p in Path(cache_dir).glob(f"*{_CACHE_SUFFIX}")) if cache_out_bytes else frozenset()
    status, t_all = 0, time.perf_counter()
    try:
        for name in names:
            mine = own[name]
            if shared is not None and name in takes_run and names.index(name) > names.index("padir"):
                folder = _finished_run(shared)
                if folder is not None:
                    mine = {**mine, "padir_run": str(folder)}
                else:
                    batch.log(f"{name}: the padir chapter left no finished run folder in {shared}; this chapter "
                              "trains its own stand-in")
            # after the PaDIR chapter, a chapter reads its run folder and never trains a second copy of its models
            later = "padir" in names and names.index(name) > names.index("padir")
            status |= 0 if batch.chapter(name, mine, REUSE_ONLY if later else {}) else 1
            batch.gather()
    except KeyboardInterrupt:
        status = 1
    archive = batch.gather()
    if cache_out_bytes:
        _pack_log(batch, pack_compile_cache(Path(cache_dir), out / CACHE_ARCHIVE, cache_out_bytes, last=before), before)
    shutil.rmtree(batch.compile_log.parent, ignore_errors=True)  # summed in the log after each chapter
    if shared is not None:
        shutil.rmtree(shared, ignore_errors=True)
    batch.log(f"batch {'finished' if status == 0 else 'stopped'} after {time.perf_counter() - t_all:.1f} s"
              + (f"; run records in {archive.name}" if archive else ""))
    sys.stdout.flush()
    return status


def _pack_log(batch: _Batch, packed: dict, before: frozenset) -> None:
    mib = 2**20
    batch.log(f"compilation cache: {packed['programs']} programs, {packed['bytes'] / mib:.1f} MiB; "
              f"{packed['packed']} of them ({packed['packed_bytes'] / mib:.1f} MiB, the earliest written"
              + (f" first, the {len(before)} there before the first chapter last" if before else "") + ") packed into "
              f"{CACHE_ARCHIVE if packed['packed'] else 'nothing'} for a later batch "
              "(make gpu-run GPU_JAX_CACHE_FROM=)")


# --- the command line: preparing a machine, a deadline, running detached -------------------------------------

def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _check_inputs(args) -> str | None:
    """What ``run``/``start`` lack, said with the Makefile's variable and the option, or None."""
    if getattr(args, "out", "") is None:
        return "batch run needs --out folder (make gpu-run: OUT=folder): the executed notebooks and log go there"
    if not args.commit:
        return ("batch run needs --commit (make gpu-run: COMMIT=$(git rev-parse HEAD)) of the clean tree copied "
                "here: it names the sources where git metadata did not travel")
    return _data_problem("run", args.data)


def install_wheels(wheels: Path, site: Path) -> bool:
    """Install the wheels in ``wheels`` (the notebook tooling, built for this Python where there is a
    network: ``make gpu-wheels``) into ``site`` with this Python's pip, offline, and put ``site`` first on
    this process's path and on ``PYTHONPATH`` and ``PATH`` for the kernels; False when there are none."""
    found = sorted(Path(wheels).glob("*.whl")) if wheels else []
    if not found:
        return False
    print(f"gpu-run: installing {len(found)} wheels from {wheels}/ into {site}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, found)], check=True)
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    os.environ["PATH"] = os.pathsep.join([str(Path(site) / "bin"), os.environ.get("PATH", "")])
    return True


def _probe_command(root: Path, probe: str, json_path: Path) -> list[str]:
    return [sys.executable, str(root / "benchmarks" / "compile_probe.py"), *shlex.split(probe),
            "--json", str(json_path)]


def choose_flags(root: Path, args) -> str:
    """``XLA_FLAGS`` chosen by the compile probe (``benchmarks/compile_probe.py --choose``), its rows in
    ``out/probe.json``; XLA's defaults ("") when it fails, said, so the run goes on."""
    print(f"gpu-run: choosing XLA_FLAGS with the compile probe (its rows in {args.out}/probe.json)", flush=True)
    with tempfile.NamedTemporaryFile("r", suffix=".flags") as chosen:
        cmd = _probe_command(root, args.probe, Path(args.out) / "probe.json") + ["--choose", chosen.name,
                                                                               "--timeout", str(args.probe_timeout)]
        if args.jax_cache:
            cmd += ["--cache", str(Path(args.jax_cache).resolve())]
        if subprocess.run(cmd).returncode != 0:
            print("gpu-run: the compile probe failed (above); the chapters run with XLA's defaults", file=sys.stderr)
            return ""
        return Path(chosen.name).read_text().strip()


def _copied_tree(root: Path, data: str, commit: str) -> None:
    """The environment of a program run on a copy of the tree: ``commit`` names its sources (``GIT_DIR``
    points git at nothing, so a stale copy of ``.git`` is not read), ``data`` is the corpus, and the
    copy's own ``gmlm_lib`` comes first on the path of every process it starts."""
    os.environ.update(GIT_DIR=str(root / ".no-git-read"), GMLM_MULTI30K_DIR=str(Path(data).resolve()),
                      PYTHONUNBUFFERED="1", **({"GMLM_COMMIT": commit} if commit else {}))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))


def _data_problem(verb: str, data: str) -> str | None:
    """Why ``data`` is not a folder holding Multi30k, in the words of ``batch VERB`` and its make target."""
    if (Path(data) / "train.en.gz").is_file():
        return None
    return (f"batch {verb} needs --data (make gpu-{verb}: DATA=folder holding Multi30k: train.en.gz, ...); "
            f"got '{data}'")


def prepare(root: Path, args) -> None:
    """The environment of a run on a copy of the tree (commit, corpus, path), the compilation cache and
    the wheels."""
    _copied_tree(root, args.data, args.commit)
    if args.wheels:
        install_wheels(Path(args.wheels), Path(args.site))
    if args.jax_cache:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(Path(args.jax_cache).resolve())
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(args.cache_min_s)


@contextmanager
def deadline(seconds: float):
    """Raise KeyboardInterrupt in this process ``seconds`` from now (none when 0): the batch then logs the
    chapter it stopped in and keeps what finished. SIGALRM, not SIGINT, so a run started in the background
    by a shell (which starts it with SIGINT ignored) is interrupted all the same."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGALRM, interrupt) if seconds > 0 else None
    if seconds > 0:
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        if old is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def run(args) -> int:
    """``batch run``: prepare this machine, then the batch under its deadline (module docstring)."""
    start = time.monotonic()
    problem = _check_inputs(args)
    if problem:
        return _fail(problem)
    root = Path.cwd().resolve()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    status = 1
    try:
        prepare(root, args)
        flags = choose_flags(root, args) if args.xla_flags == "auto" else args.xla_flags
        if flags:
            os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), flags]))
            print(f"gpu-run: XLA_FLAGS={os.environ['XLA_FLAGS']}", flush=True)
        from gmlm_lib.book.sources import parameter_overrides

        left = args.deadline - (time.monotonic() - start) if args.deadline else 0
        with deadline(max(left, 0.01) if args.deadline else 0):
            status = run_batch(args.chapters or list(_translation_chapters()), args.profile, Path(args.out),
                               parameter_overrides(args.parameter), root,
                               sizing_from=Path(args.sizing_from).resolve() if args.sizing_from else None,
                               cache_from=Path(args.cache_from).resolve() if args.cache_from else None,
                               cache_out_bytes=int(args.cache_out_mib * 2**20))
    except KeyboardInterrupt:  # the deadline past the chapters (while the batch packed its records): said, status 1
        print("gpu-run: interrupted by its deadline after the chapters; what finished is in --out", file=sys.stderr)
        status = 1
    finally:
        if args.status:
            Path(args.status).write_text(f"{status}\n")
    return status


def _translation_chapters() -> tuple[str, ...]:
    from gmlm_lib.book import sources

    return sources.TRANSLATION_CHAPTERS


def start(args) -> int:
    """``batch start``: ``batch run`` with the same options in a process session of its own, which outlives
    the command that started it; its files go to ``--run-dir``/out, its console to ``console.log``."""
    problem = _check_inputs(args)
    if problem:
        return _fail(problem.replace("batch run", "batch start").replace("make gpu-run", "make gpu-start"))
    run_dir = Path(args.run_dir)
    forwarded = args.argv[1:]  # the options after the verb
    return start_detached(run_dir, [sys.executable, "-m", "gmlm_lib.book", "batch", "run", *forwarded,
                                    "--out", str(run_dir / "out"), "--status", str(run_dir / "status")])


def start_detached(run_dir: Path, command: list[str]) -> int:
    """Start ``command`` in a new process session, its pid in ``run_dir/pid``; refused while an earlier
    one started there still runs."""
    pid = run_dir / "pid"
    if pid.is_file() and not (run_dir / "status").is_file() and _alive(int(pid.read_text())):
        return _fail(f"the batch started in {run_dir} (pid {pid.read_text().strip()}) still runs; "
                     "make gpu-wait OUT=dir WAIT=seconds")
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    with open(run_dir / "console.log", "w") as console:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                start_new_session=True)
    pid.write_text(f"{proc.pid}\n")
    print(f"gpu-start: the batch runs in the background (pid {proc.pid}, console in {run_dir}/console.log); "
          "make gpu-wait OUT=dir WAIT=seconds")
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child of this process that has ended is a zombie until reaped: not alive
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def _gather(source: Path, dest: Path) -> None:
    """Copy each file of ``source`` that differs from its copy in ``dest``, whole (written beside, then
    renamed), so a command killed meanwhile leaves no half file under the name."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(source.glob("*")) if source.is_dir() else []:
        target = dest / f.name
        if f.is_file() and not (target.is_file() and target.read_bytes() == f.read_bytes()):
            part = target.with_name(target.name + ".part")
            shutil.copy2(f, part)
            os.replace(part, target)


def wait(args) -> int:
    """``batch wait``: wait at most ``--wait`` seconds for the batch ``start`` began, copying into ``--out``
    what it has made so far each second; print its log; 0 once it has ended well, 1 while it still runs
    (wait again) or when it ended badly."""
    run_dir, out = Path(args.run_dir), Path(args.out)
    pid_file = run_dir / "pid"
    if not pid_file.is_file():
        return _fail(f"no batch was started in {run_dir}; make gpu-start first")
    pid, end = int(pid_file.read_text()), time.monotonic() + args.wait
    status = run_dir / "status"
    while True:
        _gather(run_dir / "out", out)
        if status.is_file() or not _alive(pid) or time.monotonic() >= end:
            break
        time.sleep(1)
    _gather(run_dir / "out", out)
    log = run_dir / "out" / "log.txt"
    console = run_dir / "console.log"
    print(log.read_text() if log.is_file() else _tail(console))
    if status.is_file():
        code = status.read_text().strip()
        print(f"gpu-wait: the batch ended with status {code}")
        if code != "0":
            print(_tail(console))
        return 0 if code == "0" else 1
    if _alive(pid):
        print("gpu-wait: the batch still runs; make gpu-wait again")
        return 1
    print("error: the batch ended without a status (killed?); its console:\n" + _tail(console), file=sys.stderr)
    return 1


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.is_file() else ""


def probe(args) -> int:
    """``batch probe``: the compile probe alone, its table in ``--out/probe.md`` and printed, its rows in
    ``--out/probe.json`` (``benchmarks/compile_probe.py``)."""
    if args.out is None:
        return _fail("batch probe needs --out folder (make gpu-probe: OUT=folder): probe.json and probe.md go there")
    if _data_problem("probe", args.data):
        return _fail(_data_problem("probe", args.data))
    root = Path.cwd().resolve()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _copied_tree(root, args.data, args.commit)
    proc = subprocess.run(_probe_command(root, args.probe, out / "probe.json"), stdout=subprocess.PIPE, text=True)
    (out / "probe.md").write_text(proc.stdout)
    print(proc.stdout, end="")
    return proc.returncode


def add_parser(sub) -> None:
    """The ``batch`` command and its subcommands, on the book's command line."""
    batch = sub.add_parser("batch", help="the accelerator run: run|start|wait|probe|promote "
                           "(benchmarks/gpu_runs/README.md)")
    verbs = batch.add_subparsers(dest="verb", required=True)
    for verb in ("run", "start"):
        p = verbs.add_parser(verb, help="run chapters in order, gathering notebooks, records and a log" if verb == "run"
                             else "the same run, detached; make gpu-wait gathers it")
        p.add_argument("chapters", nargs="*", help="chapter names, in order (default: the translation chapters)")
        p.add_argument("--profile", choices=("smoke", "full"), default="full")
        if verb == "run":
            p.add_argument("--out", help="folder for the executed notebooks, records and log.txt")
            p.add_argument("--status", help=argparse.SUPPRESS)  # batch start: the run's exit status, written at its end
        p.add_argument("--run-dir", default=str(Path(tempfile.gettempdir()) / "gmlm-gpu-run"),
                       help="batch start: where the detached run keeps its files")
        p.add_argument("--commit", default="", help="the commit of the clean tree copied to this machine")
        p.add_argument("--data", default="", help="folder holding Multi30k (train.en.gz, ...)")
        p.add_argument("--wheels", default="", help="folder of wheels (make gpu-wheels) installed first into --site")
        p.add_argument("--site", default=str(Path(tempfile.gettempdir()) / "gmlm-site"))
        p.add_argument("--deadline", type=float, default=0, help="seconds after which the batch is interrupted and "
                       "keeps what finished (0: none)")
        p.add_argument("--xla-flags", default="", help="XLA_FLAGS added for the run; 'auto': chosen by the probe")
        p.add_argument("--probe", default="", help="benchmarks/compile_probe.py's options (with --xla-flags auto)")
        p.add_argument("--probe-timeout", type=float, default=600, help="seconds one probed setting may take")
        p.add_argument("--jax-cache", default="", help="JAX's persistent compilation cache folder (empty: off)")
        p.add_argument("--cache-min-s", type=float, default=0.2, help="programs that compile faster are not cached")
        p.add_argument("--sizing-from", help="an earlier batch's run-records.tar.gz: its sizing decisions first")
        p.add_argument("--cache-from", help=f"an earlier batch's {CACHE_ARCHIVE}: its programs into --jax-cache first")
        p.add_argument("--cache-out-mib", type=float, default=0,
                       help=f"pack the batch's programs into --out/{CACHE_ARCHIVE}, at most this many MiB (0: no)")
        p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                       help="override a parameter of every chapter that has it (value parsed as YAML); repeatable")
    w = verbs.add_parser("wait", help="wait for the batch start began, copying what it made into --out")
    w.add_argument("--out", required=True)
    w.add_argument("--wait", type=float, default=0, help="seconds to wait at most")
    w.add_argument("--run-dir", default=str(Path(tempfile.gettempdir()) / "gmlm-gpu-run"))
    pr = verbs.add_parser("probe", help="the compile probe alone (benchmarks/compile_probe.py)")
    pr.add_argument("--out")
    pr.add_argument("--data", default="")
    pr.add_argument("--commit", default="")
    pr.add_argument("--probe", default="", help="benchmarks/compile_probe.py's options")
    pm = verbs.add_parser("promote", help="take a batch's notebooks into the book, made by the current sources")
    pm.add_argument("results", help="the folder holding the executed NAME.ipynb files")


def main(args, argv: list[str]) -> int:
    """Dispatch ``python -m gmlm_lib.book batch VERB``."""
    args.argv = argv[argv.index("batch") + 1:]
    if args.verb == "promote":
        from gmlm_lib.book.sources import find_root

        for name in promote(find_root(), Path(args.results)):
            print(f"promoted {name}: notebooks/{name}.ipynb")
        return 0
    return {"run": run, "start": start, "wait": wait, "probe": probe}[args.verb](args)


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
    from gmlm_lib.book import checks, sources
    from gmlm_lib.book.runner import chapter_source

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
    checks.sync(root, [p.stem for p in found])
    checks.write_provenance_page(root)
    return [p.stem for p in found]
