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
import platform
import subprocess
import time
from dataclasses import dataclass, field
from importlib import metadata as _metadata
from pathlib import Path

ENV_PARAMETERS = "GMLM_PARAMETERS"  # JSON of the parameters the runner executed with
ENV_RECORD = "GMLM_PROVENANCE_FILE"  # where finish() writes its record for the runner
ENV_PROFILE = "GMLM_PROFILE"  # "smoke" or "full"

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
SOURCES = ("gmlm_lib", "notebooks/*.md", "params", "pyproject.toml")  # what a -dirty commit mark looks at


def git_commit(path: Path = _PACKAGE_DIR) -> str:
    """Commit of the gmlm_lib source: ``git rev-parse HEAD`` (with ``-dirty`` when the library
    or notebook sources differ from it), else the commit pip recorded for a VCS install,
    else ``"unknown"``."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True, check=True).stdout.strip()
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=top, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", *SOURCES],
            cwd=top, capture_output=True, text=True, check=True,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    try:
        direct = json.loads(_metadata.distribution("gmlm-book").read_text("direct_url.json") or "{}")
        return direct.get("vcs_info", {}).get("commit_id", "unknown")
    except (_metadata.PackageNotFoundError, ValueError):
        return "unknown"


def short_commit(commit: str) -> str:
    """A commit for tables and messages: 12 hex digits, keeping a ``-dirty`` mark."""
    return commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")


def cpu_model() -> str:
    """The host CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``,
    else the architecture): timings on two CPUs with the same core count can differ by 2x or more."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment() -> dict:
    """JAX version, backend, device kind and count, Python version, host platform and CPU."""
    import jax

    devices = jax.devices()
    return {
        "jax_version": jax.__version__,
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
    }


def hardware_summary(env: dict | None = None) -> str:
    """One line for tables and records, e.g. ``"1 x cpu (cpu, 2 CPU cores, AMD EPYC 7B13)"``, from
    :func:`environment` (called when ``env`` is not given); records made before the CPU model
    was recorded give the line without it."""
    env = environment() if env is None else env
    cpu = f", {env['cpu_model']}" if env.get("cpu_model") else ""
    return f"{env['device_count']} x {env['device_kind']} ({env['backend']}, {env['cpu_count']} CPU cores{cpu})"


def write_record(path: str | os.PathLike, record: dict) -> None:
    """Write a JSON record (``run.json``, ``data.json``, ``distilled.json``) whole: a temporary
    file beside it, then a rename, so a kill leaves the old file or the new, never half of one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


@dataclass
class Run:
    """An open notebook run: its parameters, start time, and the commit of the code it started
    with (:func:`git_commit` at :func:`start`: a commit or edit made while a long run is going
    must not be credited with its results)."""

    parameters: dict
    started: float = field(default_factory=time.perf_counter)
    commit: str = field(default_factory=lambda: git_commit())
    started_at: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


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
    }
    now = git_commit()
    if now != run.commit:
        rec["gmlm_lib_commit_at_finish"] = now
    return rec


def artifact_summary(record: dict) -> dict:
    """What the provenance page shows of an artifact a chapter used rather than made in its own
    execution: a trained model's ``run.json`` (:func:`gmlm_lib.training.train`) or another record
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


def summary_line(rec: dict) -> str:
    """The one visible line a notebook ends with."""
    params = ", ".join(f"{k}={v!r}" for k, v in rec["parameters"].items())
    return (
        f"Provenance: profile {rec['profile']}; parameters {params}; wall time {rec['wall_time_s']:.1f} s; "
        f"gmlm_lib {short_commit(rec['gmlm_lib_commit'])}; JAX {rec['jax_version']} on {rec['backend']} "
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
