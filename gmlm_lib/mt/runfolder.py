"""A training run's folder: its lock, checkpoints and their digests, metrics log and provenance record.

A run lives in a folder (written by :func:`gmlm_lib.mt.training.train`):

* ``config.json``: the :class:`~gmlm_lib.mt.training.TrainConfig`;
* ``data.json``: the fingerprint of the batches it trains on (:func:`check_data`);
* ``checkpoints/``: Orbax checkpoints (:func:`checkpoint_manager`), each with a SHA-256 of its
  arrays in ``checkpoint_digests.json`` (:func:`digest`), verified on restore (:func:`restore`); a
  damaged one is moved into ``checkpoints_damaged/`` (:data:`DAMAGED`), never deleted;
* ``metrics.jsonl``: one JSON line per logged update (:func:`read_metrics`);
* ``val.jsonl``: the validation loss of every checkpoint, when the run is validated (same format);
* ``run.json``: provenance, rewritten whole at every checkpoint (:class:`RunRecord`);
* ``.lock``: held by the one process training there (:func:`exclusive`).

File and system errors are translated at this boundary: a missing, cut or unreadable file, a folder
that is a file, a full disk, each is one line naming the file, what is wrong and what to do
(:class:`RunFolderError`, :func:`read_json`, :func:`save_checkpoint`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import pathlib
import socket
import time
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from gmlm_lib.core import records
from gmlm_lib.mt import batching

__all__ = ["RunFolderError", "RunFolderBusy", "DAMAGED", "read_json", "folder", "read_metrics", "keep_metrics",
           "losses", "check_data", "exclusive", "digest", "all_finite", "move_aside", "restore", "restore_step",
           "checkpoint_digests", "checkpoint_manager", "prune", "save_checkpoint", "update_seconds", "RunRecord"]


class RunFolderError(OSError):
    """A run folder, or a file in it, that cannot be used as it is; its message (one line) names the
    file, what is wrong with it and what to do."""


def folder(run_dir: str | os.PathLike, *, must_exist: bool = True) -> pathlib.Path:
    """``run_dir`` as an absolute path, refused (:class:`RunFolderError`) when it is a file, or when
    ``must_exist`` and it does not exist."""
    path = pathlib.Path(run_dir).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"{path} is a file, not a run folder; pass the folder that train() wrote "
                             "(it holds config.json and checkpoints/).")
    if must_exist and not path.exists():
        raise RunFolderError(f"run folder {path} does not exist; pass the folder that train() wrote, or "
                             "train the run there first.")
    return path


def read_json(path: pathlib.Path, what: str, fix: str = "") -> dict:
    """The JSON object in ``path`` (``what`` says what the file is, e.g. "the run's TrainConfig");
    a missing, unreadable, cut or non-object file is a one-line :class:`RunFolderError` naming it,
    with ``fix`` (or the default advice: restore the file from a copy, or train again in a new folder)."""
    fix = fix or "restore it from a copy of the run folder, or train the run again in a new folder."
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RunFolderError(f"{path} does not exist ({what}): {path.parent} is not a complete run "
                             f"folder; {fix}") from None
    except IsADirectoryError:
        raise RunFolderError(f"{path} is a folder, not {what}; {fix}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RunFolderError(f"cannot read {path} ({what}): {err.__class__.__name__}: {err}; {fix}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise RunFolderError(f"{path} ({what}) is not valid JSON ({err.msg} at line {err.lineno}, column "
                             f"{err.colno}): it was cut short or damaged; {fix}") from None
    if not isinstance(value, dict):
        raise RunFolderError(f"{path} ({what}) holds a JSON {type(value).__name__}, not an object; {fix}")
    return value


def _disk_full(err: BaseException) -> bool:
    text = f"{type(err).__name__}: {err}"
    return getattr(err, "errno", None) == errno.ENOSPC or "RESOURCE_EXHAUSTED" in text or "No space left" in text


def save_checkpoint(manager: ocp.CheckpointManager, step: int, state: dict, run_dir: pathlib.Path,
                    last_good: int) -> None:
    """Save ``state`` as checkpoint ``step`` and wait for it. A full disk (Orbax's
    ``RESOURCE_EXHAUSTED`` or ``ENOSPC``) is one line naming the folder, the checkpoint still good
    (``last_good``) and the fix, instead of Orbax's traceback."""
    try:
        manager.save(step, args=ocp.args.StandardSave(state), force=True)
        manager.wait_until_finished()
    except Exception as err:
        if not _disk_full(err):
            raise
        raise RunFolderError(f"no space left on the disk of {run_dir} while writing the checkpoint of "
                             f"step {step}; free disk space (or move the run folder) and call train() "
                             f"again: it resumes from the checkpoint of step {last_good}.") from None


def read_metrics(path: pathlib.Path) -> list[dict]:
    """The lines of ``metrics.jsonl`` (none when it does not exist). A last line cut short (a kill
    while it was written) is dropped with a warning; a bad line before it is an error naming it."""
    if not path.exists():
        return []
    lines = [(i, l) for i, l in enumerate(path.read_text().splitlines(), 1) if l.strip()]
    rows = []
    for pos, (i, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if pos == len(lines) - 1:
                warnings.warn(f"{path}: line {i} is cut short ({err.msg}), as a kill while it was written leaves "
                              "it; it is dropped and the run resumes from its last checkpoint.", stacklevel=3)
                break
            raise ValueError(f"{path}: line {i} is not JSON ({err.msg}); the metrics log is damaged. Remove that "
                             "line (or the whole file, losing the logged losses) and run again.") from None
    return rows


def keep_metrics(path: pathlib.Path, upto: int):
    """Drop metric lines written after step ``upto`` (they belong to the lost part of a killed run)."""
    if path.exists():
        path.write_text("".join(json.dumps(r) + "\n" for r in read_metrics(path) if r["step"] <= upto))


def losses(path: pathlib.Path) -> list[tuple[int, float]]:
    """``(step, loss)`` of every line of ``metrics.jsonl``."""
    return [(r["step"], r["loss"]) for r in read_metrics(path)]


def check_data(run_dir: pathlib.Path, batcher: batching.Batcher, teacher: str = "") -> str | None:
    """The batcher's fingerprint, checked against the one the run folder was started with
    (``data.json``): resuming or reusing a run on other data (other sentences, vocabulary, batch
    size, seed or device count) is an error. A folder with checkpoints but no ``data.json`` was
    trained before fingerprints were recorded: a warning says its data cannot be checked, and
    ``None`` is returned (nothing is recorded for it). ``teacher`` (the fingerprint of the model a
    run starts from, if any) is folded in, so a run cannot resume from another teacher."""
    path = run_dir / "data.json"
    fingerprint = batcher.fingerprint()
    if teacher:
        fingerprint = hashlib.sha256((fingerprint + teacher).encode()).hexdigest()
    if path.exists():
        recorded = read_json(path, "the fingerprint of the data the run trains on").get("fingerprint")
        if not isinstance(recorded, str):
            raise RunFolderError(f"{path} records no data fingerprint; restore it from a copy of the run "
                                 "folder, or train the run again in a new folder.")
        if recorded != fingerprint:
            raise ValueError(f"{run_dir} was trained on other data (batcher fingerprint {recorded[:12]}, this batcher's "
                             f"{fingerprint[:12]}): other sentences, targets, vocabulary, batch size, seed, device "
                             "count or teacher; use a new run folder for new data.")
        return fingerprint
    ckpt = run_dir / "checkpoints"
    if ckpt.is_dir() and any(ckpt.iterdir()):
        warnings.warn(f"{run_dir} has checkpoints but no data.json (trained before data fingerprints were recorded): "
                      "its training data cannot be checked against this batcher's.", stacklevel=3)
        return None
    records.write_record(path, dict(fingerprint=fingerprint, pairs=len(batcher.src), dropped=batcher.dropped))
    return fingerprint


class RunFolderBusy(RuntimeError):
    """Another process is training in the same run folder."""


@contextlib.contextmanager
def exclusive(run_dir: pathlib.Path):
    """Hold an exclusive lock on ``run_dir`` (``run_dir/.lock``, ``fcntl.flock``) while training: a
    second process on the same folder would interleave its metrics and checkpoints. The lock file
    names the holder; the operating system releases the lock when the holder exits or is killed."""
    import fcntl

    path = run_dir / ".lock"
    try:
        f = open(path, "a+")
    except OSError as err:  # a read-only file system, a folder without write permission, ...
        raise RunFolderError(f"cannot lock the run folder {run_dir} for training: {err.strerror} ({path}); train in a "
                             "folder this process can write (run_root or the run folder argument).") from err
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise RunFolderBusy(f"{run_dir} is being trained by {holder}; wait for it to finish (or stop it), or "
                                "train in another run folder.") from None
        f.seek(0)
        f.truncate()
        f.write(f"process {os.getpid()} on {socket.gethostname()}, since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime())}")
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)


def digest(state) -> str:
    """SHA-256 of every array of ``state`` (params and optimiser state), in tree order: written with
    each checkpoint and compared on restore, so a damaged checkpoint cannot pass for a good one."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(state)):
        a = np.asarray(leaf)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def all_finite(tree) -> bool:
    """Whether every floating-point array of ``tree`` is finite, read on the host: one copy of the
    tree (none for host arrays; the checkpoint digest reads the same copy), where an eager check per
    array would dispatch two device programs for each and compile them for each shape."""
    return all(bool(np.isfinite(x).all()) for x in jax.tree.leaves(jax.device_get(tree))
               if jnp.issubdtype(x.dtype, jnp.inexact))


DAMAGED = "checkpoints_damaged"
"""The folder of a run folder where a damaged checkpoint is moved (kept for inspection, never deleted)."""


def move_aside(run_dir: pathlib.Path, step: int) -> pathlib.Path:
    """Move checkpoint ``step`` out of ``checkpoints/`` into ``checkpoints_damaged/<step>`` (a new name
    if that exists), so that training never reads it again and nothing is deleted; returns where it went."""
    src = run_dir / "checkpoints" / str(step)
    aside = run_dir / DAMAGED
    aside.mkdir(exist_ok=True)
    dest, n = aside / str(step), 1
    while dest.exists():
        dest, n = aside / f"{step}.{n}", n + 1
    os.replace(src, dest)
    return dest


def restore(make_manager: Callable[[], ocp.CheckpointManager], run_dir: pathlib.Path, target: dict, *,
             move_damaged: bool = True) -> tuple[int, dict | None, ocp.CheckpointManager]:
    """The newest checkpoint that restores, matches the digest written with it and holds only finite
    numbers: ``(step, state, manager)``, with ``(0, None, manager)`` when the folder has none. A damaged
    newer checkpoint is reported with a warning that says so and where it went (``move_damaged``:
    moved into ``checkpoints_damaged/``, never deleted, for training to write that step again), and
    the previous one is tried with a fresh manager (Orbax's manager keeps what it inferred from a
    damaged checkpoint, which would make every older one look damaged too). A checkpoint without a
    recorded digest (a folder from before digests were written, or a run stopped between writing a
    checkpoint and recording its digest) is used with a warning that says which and that it could not
    be verified beyond its finite numbers. ``make_manager`` opens ``run_dir/checkpoints``."""
    digests = checkpoint_digests(run_dir)
    manager = make_manager()
    skipped: set[int] = set()
    while True:
        candidates = sorted((s for s in manager.all_steps() if s not in skipped), reverse=True)
        if not candidates:
            return 0, None, manager
        step = candidates[0]
        want = digests.get(str(step))
        state, problem = _read_verified(manager, step, target, want)
        if problem is None:
            if want is None:
                why = ("the run stopped after writing it and before recording its digest" if digests
                       else "a run folder from before digests were written")
                warnings.warn(f"{run_dir}: the checkpoint of step {step} has no recorded digest ({why}): only its "
                              "finite numbers could be checked, so equality with an uninterrupted run cannot be "
                              "checked; its config and data were checked against config.json and data.json. "
                              + _record_digest(run_dir, digests, step, state), stacklevel=3)
            return step, state, manager
        manager.close()
        where = f" It was moved to {move_aside(run_dir, step)} (kept, not deleted)." if move_damaged else ""
        skipped.add(step)
        older = [s for s in candidates[1:]]
        warnings.warn(f"{run_dir}: the checkpoint of step {step} is damaged ({problem}).{where} "
                      + (f"Falling back to step {max(older)}." if older else "No older checkpoint: training restarts "
                         "from step 0."), stacklevel=3)
        manager = make_manager()


def _record_digest(run_dir: pathlib.Path, digests: dict, step: int, state) -> str:
    """Record the digest of checkpoint ``step``, read without one, so that every later read verifies it;
    returns the sentence for the warning. A folder that cannot be written keeps working unverified."""
    try:
        records.write_record(run_dir / "checkpoint_digests.json", {**digests, str(step): digest(jax.device_get(state))})
    except OSError as err:
        return f"Its digest could not be recorded ({type(err).__name__}: {err}); later reads stay unverified."
    return "Its digest is recorded now: later reads verify it."


def _read_verified(manager: ocp.CheckpointManager, step: int, target: dict, want: str | None) -> tuple:
    """Checkpoint ``step`` read and checked: ``(state, None)``, or ``(None, what is wrong)`` when it cannot be
    read, differs from the digest ``want`` written with it, or holds non-finite numbers."""
    try:
        state = manager.restore(step, args=ocp.args.StandardRestore(target))
    except Exception as err:  # Orbax/TensorStore raise many kinds on a damaged file
        return None, f"it cannot be read ({type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''})"
    host = jax.device_get(state)  # one copy: the digest and the finiteness check read it
    if want is not None and digest(host) != want:
        return None, "its digest differs from the one written with it"
    if not all_finite(host):
        return None, "it holds non-finite numbers"
    return state, None


def restore_step(manager: ocp.CheckpointManager, run_dir: pathlib.Path, step: int, target: dict, why: str) -> dict:
    """The checkpoint of ``step`` (``why`` says why that one, e.g. "selected on the val split"),
    restored and verified as :func:`restore` verifies the newest: its digest, where one was recorded,
    and finite numbers. A missing or damaged one is a :class:`RunFolderError` naming it, never a
    silent substitute."""
    fix = "train the run again in a new folder, or restore the run folder from a copy."
    if step not in manager.all_steps():
        raise RunFolderError(f"{run_dir}: the checkpoint of step {step} ({why}) is not in checkpoints/ (it holds "
                             f"{sorted(manager.all_steps())}); {fix}")
    state, problem = _read_verified(manager, step, target, checkpoint_digests(run_dir).get(str(step)))
    if problem is not None:
        raise RunFolderError(f"{run_dir}: the checkpoint of step {step} ({why}) is damaged: {problem}; {fix}")
    return state


def checkpoint_digests(run_dir: pathlib.Path) -> dict:
    path = run_dir / "checkpoint_digests.json"
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except json.JSONDecodeError:
        warnings.warn(f"{path} is damaged; the checkpoints are checked for finite numbers only.", stacklevel=3)
        return {}


def checkpoint_manager(run_dir: pathlib.Path, every: int, keep: int | None = 2) -> ocp.CheckpointManager:
    """Orbax, synchronous (a kill during a save leaves the previous checkpoint whole), the newest
    ``keep`` kept; ``keep = None`` keeps every one, for the trainer to :func:`prune` itself (a
    validated run keeps its best checkpoint too)."""
    return ocp.CheckpointManager(
        run_dir / "checkpoints",
        options=ocp.CheckpointManagerOptions(save_interval_steps=every, max_to_keep=keep,
                                             enable_async_checkpointing=False))


def prune(manager: ocp.CheckpointManager, keep: set[int]) -> None:
    """Delete every checkpoint of ``manager`` whose step is not in ``keep``."""
    for step in manager.all_steps():
        if step not in keep:
            manager.delete(step)


def update_seconds(segments: list[dict]) -> float:
    """Wall seconds the ``segments`` of a ``run.json`` spent past compiling: each one's ``wall_s`` less its
    ``compile_s`` (the programs compiled before its first update; absent in a segment that compiled
    nothing, which then counts whole), so the updates with their validation, checkpoints and loss reads.
    The denominator of a run's throughput (``tokens_per_s``) and of its FLOP/s against a peak: compiling
    is a one-off of each process that starts training, not a cost of the updates."""
    total = 0.0
    for i, g in enumerate(segments):
        wall, compiling = float(g["wall_s"]), float(g.get("compile_s") or 0.0)
        if not (math.isfinite(wall) and math.isfinite(compiling) and 0 <= compiling <= wall + 1e-6):
            raise ValueError(f"update_seconds: segment {i} has wall_s {g['wall_s']!r} and compile_s "
                             f"{g.get('compile_s')!r}; compiling is part of the wall time, both finite.")
        total += max(wall - compiling, 0.0)
    return total


class RunRecord:
    """``run.json`` of a run being trained: the segments of earlier calls up to the checkpoint this
    call resumed from, and this call's own segment (its steps, time, tokens, commit and machine).
    :meth:`write` rewrites the whole record at a checkpoint and at the end."""

    def __init__(self, path: pathlib.Path, cfg, batcher: batching.Batcher, start: int, init: dict,
                 fingerprint: str | None, parameters: int, prev: dict):
        self.path, self.cfg, self.batcher, self.init, self.prev = path, cfg, batcher, init, prev
        self.fingerprint, self.parameters = fingerprint, parameters
        # a killed call's segment may run past the checkpoint it is resumed from: cut it there
        self.earlier = [g for g in prev.get("segments", []) if g["start"] < start]
        if self.earlier and self.earlier[-1]["end"] > start:
            self.earlier[-1] = dict(self.earlier[-1], end=start)
        self.segment = dict(start=start, end=start, wall_s=0.0, tokens=0, commit=records.git_commit(),
                            hardware=records.hardware_summary())
        self.t0, self.tokens = time.perf_counter(), 0
        self.validation: dict | None = None  # a validated run's summary (the trainer's), written with the record
        self.extra: dict = {}  # more fields of the finished record (a run of replicas: each one's final loss)

    def write(self, done: int, final_loss: float | None) -> dict:
        """Rewrite ``run.json`` whole for a run ``done`` updates in (``final_loss``: ``None`` until it
        has finished), and return the record as a later call reads it back."""
        self.segment.update(end=done, wall_s=time.perf_counter() - self.t0, tokens=self.tokens)
        segments = self.earlier + [self.segment]
        timed = [g for g in segments if "tokens" in g and g["end"] > g["start"] and update_seconds([g]) > 0]
        record = dict(
            config=self.cfg.to_dict(), commit=self.segment["commit"], hardware=records.environment(), init=self.init,
            data_fingerprint=self.fingerprint or self.prev.get("data_fingerprint"), parameters=self.parameters,
            dropped_pairs=self.batcher.dropped, batches_per_epoch=len(self.batcher), steps=self.cfg.steps, done=done,
            final_loss=final_loss, wall_s=sum(g["wall_s"] for g in segments), segments=segments,
            tokens_per_s=(sum(g["tokens"] for g in timed) / update_seconds(timed)) if timed
            else self.prev.get("tokens_per_s"),
        )
        if self.validation is not None:
            record["validation"] = self.validation
        record.update(self.extra)
        records.write_record(self.path, record)
        return json.loads(json.dumps(record))  # as a later call reads it back (tuples become lists)


