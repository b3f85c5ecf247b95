"""Command line for the book: ``python -m gmlm_lib.book COMMAND``.

Examples::

    python -m gmlm_lib.book run smoke --all
    python -m gmlm_lib.book run full gmlm_ising_testbed -p repeats 200 -p num_samples 4000
    python -m gmlm_lib.book check
    python -m gmlm_lib.book batch run padir stutter --out gpu-out --commit $(git rev-parse HEAD) --data DIR
    python -m gmlm_lib.book batch promote gpu-out
    python -m gmlm_lib.book records compiles benchmarks/gpu_runs/2026-11-27c-h200/run-records.tar.gz
    python -m gmlm_lib.book records digest gpu-out/padir.ipynb > benchmarks/gpu_runs/DATE-h200/padir_cells.json
    python -m gmlm_lib.book records times cpu-out/ablations.ipynb
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from pathlib import Path

from gmlm_lib.book import batch

# Only the standard library and batch (itself stdlib-only) at module level: ``batch run`` starts on a machine
# where it installs the notebook tooling from wheels itself; the other commands import what they use.


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
    return text if type(err).__name__ == "NotebookRunError" else f"{type(err).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    """The ``python -m gmlm_lib.book`` command line; returns the exit status. An error it stops on (a failed
    cell, a bad parameter, a missing or unreadable file, a full disk) is one line on stderr, ``error: ...``,
    and exit status 1; a traceback is left only for a bug of the tools themselves (``GMLM_TRACEBACK=1``
    shows one for every error)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "batch":
            return batch.main(args, argv)
        return _COMMANDS[args.command](args)
    except Exception as err:  # the library's own errors, said in one line; anything else is a bug: traceback
        expected = isinstance(err, (OSError, ValueError, TypeError, KeyError)) \
            or type(err).__name__ == "NotebookRunError"
        if os.environ.get("GMLM_TRACEBACK") == "1" or not expected:
            raise
        print(f"error: {describe(err)}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gmlm_lib.book", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute chapters through papermill")
    run.add_argument("profile", choices=("smoke", "full"))
    run.add_argument("notebooks", nargs="*", help="chapter names (notebooks/NAME.md); none with --all")
    run.add_argument("--all", action="store_true", help="every chapter in _toc.yml")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="override a parameter (value parsed as YAML); repeatable")
    batch.add_parser(sub)
    sub.add_parser("check", help="fail if a chapter's .md and .ipynb disagree or its outputs are stale")
    sub.add_parser("sync", help="copy markdown edits from .md into .ipynb, keeping outputs")
    sub.add_parser("provenance", help="regenerate book/provenance.md from the notebooks' metadata")
    sub.add_parser("labels", help="regenerate book/labels.md, the paper-label index, from the tags")
    rec = sub.add_parser("records", help="the records of runs the book does not show: compiles|digest|times")
    kinds = rec.add_subparsers(dest="kind", required=True)
    compiles = kinds.add_parser("compiles", help="a batch's compilations by chapter process: programs, seconds "
                                "summed over them, and the wall time in which any compiled")
    compiles.add_argument("log", help="a compile log (compiles.tsv) or a batch's run-records.tar.gz holding one")
    dig = kinds.add_parser("digest", help="an executed notebook's cells as JSON on stdout: seconds and printed "
                           "outputs, tables as text (the records of a run kept in benchmarks/)")
    dig.add_argument("notebook", help="an executed notebook (a batch's OUT/NAME.ipynb)")
    dig.add_argument("--note", default="", help="what ran, e.g. 'notebooks/padir.md at 4b3ba06, full profile'")
    times = kinds.add_parser("times", help="put full runs the book does not show (a chapter awaiting an "
                             "accelerator run, rehearsed on other hardware) on the running page's table")
    times.add_argument("notebooks", nargs="+", help="executed chapter notebooks (a batch's OUT/NAME.ipynb)")
    return parser


def _run(args) -> int:
    from gmlm_lib.book import runner, sources

    root = sources.find_root()
    names = sources.toc_notebooks(root) if args.all else args.notebooks
    if not names:
        print("error: name at least one notebook, or pass --all", file=sys.stderr)
        raise SystemExit(2)
    overrides = sources.parameter_overrides(args.parameter)
    for name in names:
        meta = runner.run_notebook(name, args.profile, overrides, root=root)
        print(f"{name}: {args.profile} run finished in {meta['total_wall_time_s']:.1f} s "
              f"-> {runner.output_path(root, name, args.profile).relative_to(root)}")
    return 0


def _check(args) -> int:
    from gmlm_lib.book import checks, sources

    root = sources.find_root()
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


def _sync(args) -> int:
    from gmlm_lib.book import checks, sources

    root = sources.find_root()
    for path in checks.sync(root):
        print(f"updated {path.relative_to(root)}")
    return 0


def _provenance(args) -> int:
    from gmlm_lib.book import checks, sources

    root = sources.find_root()
    print(f"wrote {checks.write_provenance_page(root).relative_to(root)}")
    return 0


def _labels(args) -> int:
    from gmlm_lib.book import labels, sources

    root = sources.find_root()
    print(f"wrote {labels.write_page(root).relative_to(root)}")
    return 0


def _records(args) -> int:
    from gmlm_lib.book import digest, run_times, sources

    if args.kind == "compiles":
        for line in digest.compile_report(Path(args.log)):
            print(line)
    elif args.kind == "digest":
        print(json.dumps(digest.digest(Path(args.notebook), note=args.note), indent=1))
    else:
        for name, key, run in run_times.record(sources.find_root(), [Path(p) for p in args.notebooks]):
            print(f"{name}: {run['wall_s'] / 60:.1f} min on {key} (commit {run['commit'][:12]}) -> "
                  f"{run_times.FILE} and {run_times.PAGE}")
    return 0


_COMMANDS = {"run": _run, "check": _check, "sync": _sync, "provenance": _provenance, "labels": _labels,
             "records": _records}


if __name__ == "__main__":
    sys.exit(main())
