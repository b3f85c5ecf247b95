"""Command line for the book: ``python -m gmlm_lib.book {run,check,sync,provenance,labels}``.

Examples::

    python -m gmlm_lib.book run smoke --all
    python -m gmlm_lib.book run full gmlm_ising_testbed -p repeats 200 -p num_samples 4000
    python -m gmlm_lib.book check
"""

from __future__ import annotations

import argparse
import sys

import yaml

from gmlm_lib.book import checks, labels, runner, sources


def _parse_value(text: str):
    """A ``-p`` value is read as YAML: ``6`` is an int, ``[1, 2]`` a list, ``true`` a bool."""
    return yaml.safe_load(text)


def main(argv: list[str] | None = None) -> int:
    """The ``python -m gmlm_lib.book`` command line (``run``, ``check``, ``sync``, ``provenance``, ``labels``);
    returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m gmlm_lib.book", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute chapters through papermill")
    run.add_argument("profile", choices=runner.PROFILES)
    run.add_argument("notebooks", nargs="*", help="chapter names (notebooks/NAME.md); none with --all")
    run.add_argument("--all", action="store_true", help="every chapter in _toc.yml")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="override a parameter (value parsed as YAML); repeatable")
    sub.add_parser("check", help="fail if a chapter's .md and .ipynb disagree or its outputs are stale")
    sub.add_parser("sync", help="copy markdown edits from .md into .ipynb, keeping outputs")
    sub.add_parser("provenance", help="regenerate book/provenance.md from the notebooks' metadata")
    sub.add_parser("labels", help="regenerate book/labels.md, the paper-label index, from the tags")
    args = parser.parse_args(argv)
    root = sources.find_root()

    if args.command == "run":
        names = sources.toc_notebooks(root) if args.all else args.notebooks
        if not names:
            parser.error("name at least one notebook, or pass --all")
        overrides = {k: _parse_value(v) for k, v in args.parameter}
        for name in names:
            meta = runner.run_notebook(name, args.profile, overrides, root=root)
            print(f"{name}: {args.profile} run finished in {meta['total_wall_time_s']:.1f} s "
                  f"-> {runner.output_path(root, name, args.profile).relative_to(root)}")
        return 0
    if args.command == "check":
        problems = checks.check_all(root)
        for p in problems:
            print(p, file=sys.stderr)
        print(f"check: {len(sources.toc_notebooks(root))} chapters, {len(problems)} problem(s).")
        return 1 if problems else 0
    if args.command == "sync":
        for path in checks.sync(root):
            print(f"updated {path.relative_to(root)}")
        return 0
    if args.command == "provenance":
        print(f"wrote {checks.write_provenance_page(root).relative_to(root)}")
        return 0
    if args.command == "labels":
        print(f"wrote {labels.write_page(root).relative_to(root)}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
