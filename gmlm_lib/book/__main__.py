"""Command line for the book: ``python -m gmlm_lib.book {run,batch,promote,check,sync,provenance,labels,compiles,
digest,times}``.

Examples::

    python -m gmlm_lib.book run smoke --all
    python -m gmlm_lib.book run full gmlm_ising_testbed -p repeats 200 -p num_samples 4000
    python -m gmlm_lib.book check
    python -m gmlm_lib.book batch full padir stutter dependency_decoding ablations --out gpu-out
    python -m gmlm_lib.book promote gpu-out
    python -m gmlm_lib.book compiles benchmarks/gpu_runs/2026-11-27c-h200/run-records.tar.gz
    python -m gmlm_lib.book digest gpu-out/padir.ipynb > benchmarks/gpu_runs/DATE-h200/padir_cells.json
    python -m gmlm_lib.book times cpu-out/ablations.ipynb
"""

from __future__ import annotations

import argparse
import datetime as _dt
import errno
import json
import os
import sys
import tarfile
from pathlib import Path

import yaml

from gmlm_lib.book import checks, digest, labels, run_times, runner, sources
from gmlm_lib.core import timing


def _parse_value(text: str, name: str = ""):
    """A ``-p`` value is read as YAML: ``6`` is an int, ``[1, 2]`` a list, ``true`` a bool; text that is
    not YAML is an error naming the parameter."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        problem = str(err).splitlines()[0]
        raise SystemExit(f"error: -p {name} {text!r}: the value is read as YAML and this is not YAML ({problem}); "
                         "quote a string, write a list as [1, 2].") from None


def _overrides(pairs: list[list[str]]) -> dict:
    """The ``-p NAME VALUE`` options as a dict; a name given twice is an error, not the last one winning."""
    seen = [name for name, _ in pairs]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:
        raise SystemExit(f"error: -p {', '.join(twice)} given more than once; give each parameter once.")
    return {name: _parse_value(value, name) for name, value in pairs}


_ADVICE = {errno.ENOSPC: "free disk space and run again; nothing committed was replaced (a run writes its "
                         "notebook only once every cell has succeeded)",
           errno.EACCES: "check the permissions of that path, or run from a folder you can write to",
           errno.EROFS: "the file system is read-only: run from a writable copy of the book",
           errno.ENOENT: "check the path (a chapter is notebooks/NAME.md; run folders are under runs/)"}


def describe(err: BaseException) -> str:
    """One line for an error the command line stops on: the library's own message (which names the
    file or argument and the fix) or, for a bare system error, what failed, on which file and what to do."""
    if isinstance(err, OSError) and err.errno in _ADVICE and err.strerror:
        where = f" ({err.filename})" if err.filename else ""
        return f"{err.strerror}{where}: {_ADVICE[err.errno]}."
    message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)  # a KeyError's str is a repr
    text = " ".join(str(message).split("\n")).strip() or type(err).__name__
    return text if isinstance(err, runner.NotebookRunError) else f"{type(err).__name__}: {text}"


def compile_report(path: Path) -> list[str]:
    """One line per process of the compile log at ``path`` (``compiles.tsv``, or the ``run-records.tar.gz``
    of a batch, which holds it): :func:`gmlm_lib.core.timing.compile_log_processes`, with UTC times."""
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
        return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

    return [f"pid {pid}: {r['programs']} program{'s' if r['programs'] != 1 else ''}, {r['summed_s']:.1f} s summed, "
            f"{r['wall_s']:.1f} s of wall time, {utc(r['first'])} to {utc(r['last'])} UTC" for pid, r in found.items()]


def main(argv: list[str] | None = None) -> int:
    """The ``python -m gmlm_lib.book`` command line (``run``, ``batch``, ``promote``, ``check``, ``sync``,
    ``provenance``, ``labels``, ``compiles``, ``digest``, ``times``);
    returns the exit status. An error it stops on (a failed cell, a bad parameter, a missing or unreadable
    file, a full disk) is one line on stderr, ``error: ...``, and exit status 1; a traceback is left only
    for a bug of the tools themselves (``GMLM_TRACEBACK=1`` shows one for every error)."""
    try:
        return _main(argv)
    except (runner.NotebookRunError, OSError, ValueError, TypeError, KeyError) as err:
        if os.environ.get("GMLM_TRACEBACK") == "1":
            raise
        print(f"error: {describe(err)}", file=sys.stderr)
        return 1


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmlm_lib.book", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute chapters through papermill")
    run.add_argument("profile", choices=runner.PROFILES)
    run.add_argument("notebooks", nargs="*", help="chapter names (notebooks/NAME.md); none with --all")
    run.add_argument("--all", action="store_true", help="every chapter in _toc.yml")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="override a parameter (value parsed as YAML); repeatable")
    batch = sub.add_parser("batch", help="run chapters in order, gathering notebooks, records and a log in --out "
                           "(make gpu-run)")
    batch.add_argument("profile", choices=runner.PROFILES)
    batch.add_argument("notebooks", nargs="*", help="chapter names, in order (default: the translation chapters)")
    batch.add_argument("--out", required=True, help="folder for the executed notebooks, records and log.txt")
    batch.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                       help="override a parameter of every chapter that has it (value parsed as YAML); repeatable")
    batch.add_argument("--sizing-from", metavar="ARCHIVE",
                       help="a previous batch's run-records.tar.gz: its run folders' sizing decisions are restored "
                            "first, so a rebuilt run folder trains the updates that batch decided")
    batch.add_argument("--cache-from", metavar="ARCHIVE",
                       help=f"an earlier batch's {runner.CACHE_ARCHIVE}: its compiled programs are put into "
                            "JAX_COMPILATION_CACHE_DIR first, so a machine of the same kind reads them instead of "
                            "compiling them")
    batch.add_argument("--cache-out", action="store_true",
                       help=f"pack the batch's compiled programs into --out/{runner.CACHE_ARCHIVE} at its end (at most "
                            f"{runner.CACHE_RETURN_BYTES // 2**20} MiB, the earliest written first; those in the "
                            "cache before the first chapter, such as --cache-from's, last)")
    promote = sub.add_parser("promote", help="take a batch's executed notebooks (make gpu-run's OUT) into the book, "
                             "made by their current sources")
    promote.add_argument("results", help="the folder holding the executed NAME.ipynb files")
    sub.add_parser("check", help="fail if a chapter's .md and .ipynb disagree or its outputs are stale")
    sub.add_parser("sync", help="copy markdown edits from .md into .ipynb, keeping outputs")
    sub.add_parser("provenance", help="regenerate book/provenance.md from the notebooks' metadata")
    sub.add_parser("labels", help="regenerate book/labels.md, the paper-label index, from the tags")
    compiles = sub.add_parser("compiles", help="a batch's compilations by chapter process: programs, seconds summed "
                              "over them, and the wall time in which any compiled")
    compiles.add_argument("log", help="a compile log (compiles.tsv) or a batch's run-records.tar.gz holding one")
    dig = sub.add_parser("digest", help="an executed notebook's cells as JSON on stdout: seconds and printed "
                         "outputs, tables as text (the records of a run kept in benchmarks/)")
    dig.add_argument("notebook", help="an executed notebook (a batch's OUT/NAME.ipynb)")
    dig.add_argument("--note", default="", help="what ran, e.g. 'notebooks/padir.md at 4b3ba06, full profile, preset auto'")
    times = sub.add_parser("times", help="put full runs the book does not show (a chapter awaiting an accelerator run, rehearsed on "
                           "other hardware) on the running page's table of run times")
    times.add_argument("notebooks", nargs="+", help="executed chapter notebooks (a batch's OUT/NAME.ipynb)")
    args = parser.parse_args(argv)
    root = sources.find_root()

    if args.command == "run":
        names = sources.toc_notebooks(root) if args.all else args.notebooks
        if not names:
            parser.error("name at least one notebook, or pass --all")
        overrides = _overrides(args.parameter)
        for name in names:
            meta = runner.run_notebook(name, args.profile, overrides, root=root)
            print(f"{name}: {args.profile} run finished in {meta['total_wall_time_s']:.1f} s "
                  f"-> {runner.output_path(root, name, args.profile).relative_to(root)}")
        return 0
    if args.command == "batch":
        overrides = _overrides(args.parameter)
        return runner.run_batch(args.notebooks or list(runner.TRANSLATION_CHAPTERS), args.profile,
                                Path(args.out), overrides, root=root,
                                sizing_from=Path(args.sizing_from).resolve() if args.sizing_from else None,
                                cache_from=Path(args.cache_from).resolve() if args.cache_from else None,
                                cache_out=args.cache_out)
    if args.command == "promote":
        for name in runner.promote(root, Path(args.results)):
            print(f"promoted {name}: notebooks/{name}.md and notebooks/{name}.ipynb")
        return 0
    if args.command == "check":
        problems = checks.check_all(root)
        for p in problems:
            print(p, file=sys.stderr)
        ahead = checks.awaiting_all(root)
        for name, commit in ahead.items():
            print(f"{name}: awaiting an accelerator run (notebooks/{name}.md has moved ahead of its notebook, the "
                  f"full run of {commit[:12]}, which the book shows until that run is promoted)")
        print(f"check: {len(sources.toc_notebooks(root))} chapters, {len(problems)} problem(s)"
              + (f", {len(ahead)} awaiting an accelerator run." if ahead else "."))
        return 1 if problems else 0
    if args.command == "sync":
        for path in checks.sync(root):
            print(f"updated {path.relative_to(root)}")
        return 0
    if args.command == "provenance":
        print(f"wrote {checks.write_provenance_page(root).relative_to(root)}")
        return 0
    if args.command == "compiles":
        for line in compile_report(Path(args.log)):
            print(line)
        return 0
    if args.command == "digest":
        print(json.dumps(digest.digest(Path(args.notebook), note=args.note), indent=1))
        return 0
    if args.command == "times":
        for name, key, run in run_times.record(root, [Path(p) for p in args.notebooks]):
            print(f"{name}: {run['wall_s'] / 60:.1f} min on {key} (commit {run['commit'][:12]}) -> "
                  f"{run_times.FILE} and {run_times.PAGE}")
        return 0
    if args.command == "labels":
        print(f"wrote {labels.write_page(root).relative_to(root)}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
