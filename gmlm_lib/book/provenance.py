"""Provenance of a notebook run: parameters, wall time, gmlm_lib commit, JAX, backend, device.

Used inside notebooks::

    run = provenance.start(dict(seed=seed, n=n))   # right after the parameters cell
    ...
    provenance.finish(run)                          # last cell: prints one visible line

When the notebook is executed by :mod:`gmlm_lib.book.runner`, ``start`` checks that the
names it is given are exactly the notebook's ``parameters`` cell, and ``finish`` hands the
record to the runner, which stores it in the notebook's metadata (``metadata.gmlm``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from gmlm_lib.core import timing
from gmlm_lib.core.records import (  # noqa: F401  (re-exported for the chapters)
    SOURCES,
    cpu_model,
    environment,
    git_commit,
    hardware_summary,
    short_commit,
    write_record,
)

ENV_PARAMETERS = "GMLM_PARAMETERS"  # JSON of the parameters the runner executed with
ENV_RECORD = "GMLM_PROVENANCE_FILE"  # where finish() writes its record for the runner
ENV_PROFILE = "GMLM_PROFILE"  # "smoke" or "full"


@dataclass
class Run:
    """An open notebook run: its parameters, start time, and the commit of the code it started
    with (:func:`~gmlm_lib.core.records.git_commit` at :func:`start`: a commit or edit made while a long run is going
    must not be credited with its results)."""

    parameters: dict
    started: float = field(default_factory=time.perf_counter)
    commit: str = field(default_factory=lambda: git_commit())
    started_at: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    compiles: dict = field(default_factory=timing.compile_clock)


def start(parameters: dict) -> Run:
    """Open a run with the notebook's parameters (a dict of the ``parameters`` cell's names).

    Under the runner, a name missing from or extra to the ``parameters`` cell is an error,
    so the record can never silently omit a parameter.
    """
    expected = os.environ.get(ENV_PARAMETERS)
    if expected is not None:
        want = set(json.loads(expected))
        got = set(parameters)
        if want != got:
            raise ValueError(
                "provenance.start() must receive exactly the parameters cell's names; "
                f"missing {sorted(want - got)}, extra {sorted(got - want)}."
            )
    return Run(parameters=dict(parameters))


def record(run: Run) -> dict:
    """The provenance record of ``run`` as a JSON-able dict. ``gmlm_lib_commit`` is the commit
    the run started with; when the sources changed while it ran (a new commit, or edits), the
    commit found at the end is added as ``gmlm_lib_commit_at_finish``."""
    rec = {
        "parameters": run.parameters,
        "profile": os.environ.get(ENV_PROFILE, "interactive"),
        "wall_time_s": round(time.perf_counter() - run.started, 2),
        "started_at": run.started_at,
        "gmlm_lib_commit": run.commit,
        **environment(),
        **timing.compiles_since(run.compiles),
    }
    now = git_commit()
    if now != run.commit:
        rec["gmlm_lib_commit_at_finish"] = now
    return rec


def artifact_summary(record: dict) -> dict:
    """What the provenance page shows of an artifact a chapter used rather than made in its own
    execution: a trained model's ``run.json`` (:func:`gmlm_lib.mt.training.train`) or another record
    with ``wall_s``, ``commit`` and ``hardware`` (the distilled corpus' ``distilled.json``).

    Returns ``updates`` (the optimiser steps done, or ``None``), ``wall_s`` (the time the work took,
    summed over the segments of a resumed run), ``commits`` and ``hardware`` (every distinct one
    that did part of the work, in order)."""
    missing = [k for k in ("wall_s", "commit", "hardware") if k not in record]
    if missing:
        raise ValueError(f"artifact record lacks {missing}; pass a run.json (training.train) or distilled.json record.")
    parts = record.get("segments") or [dict(commit=record["commit"], hardware=record["hardware"])]
    hardware = [h if isinstance(h, str) else hardware_summary(h) for h in (s["hardware"] for s in parts)]
    return dict(updates=record.get("done"), wall_s=round(float(record["wall_s"]), 1),
                commits=list(dict.fromkeys(s["commit"] for s in parts)), hardware=list(dict.fromkeys(hardware)))


def compiling_phrase(rec: dict) -> str:
    """What a run record (:func:`record`) says of its compilations, for the line it ends with and the
    batch log: the wall seconds in which a program was compiling (``compile_wall_s``), and beside them
    the seconds summed over the programs where that is more (programs compiled side by side overlap).
    A record from before the wall seconds were counted has the sum only, and says so."""
    hits = f", {rec['cache_hits']} read from the compilation cache" if rec.get("cache_hits") else ""
    summed, wall = float(rec["compile_s"]), rec.get("compile_wall_s")
    if wall is None:
        return f"compiling {rec['compilations']} XLA programs{hits}: {summed:.1f} s summed over the programs"
    side = f"; {summed:.1f} s summed over programs compiled side by side" if summed >= float(wall) + 0.05 else ""
    return f"{float(wall):.1f} s of it compiling {rec['compilations']} XLA programs{hits}{side}"


def summary_line(rec: dict) -> str:
    """The one visible line a notebook ends with."""
    params = ", ".join(f"{k}={v!r}" for k, v in rec["parameters"].items())
    return (
        f"Provenance: profile {rec['profile']}; parameters {params}; wall time {rec['wall_time_s']:.1f} s"
        + (f" ({compiling_phrase(rec)}); " if "compile_s" in rec else "; ")
        + f"gmlm_lib {short_commit(rec['gmlm_lib_commit'])}; JAX {rec['jax_version']} on {rec['backend']} "
        f"({rec['device_count']} x {rec['device_kind']}{'; ' + rec['cpu_model'] if rec.get('cpu_model') else ''}); "
        f"run started {rec['started_at']}."
        + (f" The sources changed while it ran (now {short_commit(rec['gmlm_lib_commit_at_finish'])}): no commit reproduces it."
           if "gmlm_lib_commit_at_finish" in rec else "")
        + ("".join(f"\n  used {name}: " + (f"{a['updates']} updates, " if a["updates"] is not None else "")
                   + f"{a['wall_s']:.0f} s, gmlm_lib {', '.join(short_commit(c) for c in a['commits'])}, "
                   + "; ".join(a["hardware"]) for name, a in rec.get("artifacts", {}).items()))
    )


def finish(run: Run, artifacts: dict[str, dict] | None = None) -> dict:
    """Close ``run``: print the visible provenance line, hand the record to the runner. Returns it.

    ``artifacts`` names the records of what the chapter used but did not make in this execution
    (trained models it reused, a distilled corpus: see :func:`artifact_summary`); their training
    cost, commits and hardware then appear beside the run's own on the provenance page."""
    rec = record(run)
    if artifacts:
        rec["artifacts"] = {name: artifact_summary(r) for name, r in artifacts.items()}
    print(summary_line(rec))
    out = os.environ.get(ENV_RECORD)
    if out:
        Path(out).write_text(json.dumps(rec, indent=1, default=str))
    return rec
