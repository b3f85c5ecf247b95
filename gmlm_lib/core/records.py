"""Run records shared by both halves of the library: the commit of the code, the machine, and
whole-file JSON writes. A trained model's ``run.json``, a benchmark's JSON and a chapter's
provenance all name the code and hardware that made them with these functions."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from importlib import metadata as _metadata
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parents[2]
SOURCES = ("gmlm_lib", "notebooks/*.md", "params", "pyproject.toml")  # what a -dirty commit mark looks at
ENV_COMMIT = "GMLM_COMMIT"  # the commit of a copy of the sources without git metadata (``make gpu-run COMMIT=...``)


def passed_commit() -> str | None:
    """The commit passed in ``$GMLM_COMMIT`` (40 hexadecimal digits), or ``None`` when it is unset; any
    other value is a ``ValueError`` naming the variable: a record must never name a commit that is
    not one."""
    value = os.environ.get(ENV_COMMIT)
    if value is None or value == "":
        return None
    if len(value) != 40 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"{ENV_COMMIT} = {value!r} is not a commit: pass the 40 hex digits of `git rev-parse HEAD` "
                         "of the clean tree that was copied here.")
    return value


def git_commit(path: Path = _PACKAGE_DIR) -> str:
    """Commit of the gmlm_lib source: ``git rev-parse HEAD`` (with ``-dirty`` when the library
    or notebook sources differ from it); in a copy without git metadata (the GPU machine) the commit
    passed in ``$GMLM_COMMIT`` (:func:`passed_commit`); else the commit pip recorded for a VCS install,
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
    passed = passed_commit()
    if passed is not None:
        return passed
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
    """JAX and Flax versions, backend, device kind and count, Python version, host platform and CPU,
    and the XLA and compilation settings from the environment when set (``XLA_FLAGS``,
    ``JAX_COMPILATION_CACHE_DIR``, ``GMLM_COMPILE_THREADS``): the GPU run uses the machine's own JAX
    and Flax, and these settings can change both the timings and the compile time a record reports."""
    from importlib.metadata import PackageNotFoundError, version

    import jax

    devices = jax.devices()
    try:
        flax_version = version("flax")
    except PackageNotFoundError:
        flax_version = "not installed"
    settings = {key.lower(): os.environ[key] for key in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR",
                                                         "GMLM_COMPILE_THREADS") if os.environ.get(key)}
    return {
        "jax_version": jax.__version__,
        "flax_version": flax_version,
        **settings,
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
