"""Training the AR baseline and PaDIR [Section 3.2, App. L.1.2-L.2]: losses, optimiser, data
parallelism over ``jax.devices()``, Orbax checkpoints with exact resume, metrics and provenance.

A run lives in a folder: ``config.json`` (the :class:`TrainConfig`), ``checkpoints/`` (Orbax),
``metrics.jsonl`` (one JSON line per logged step), ``data.json`` (the data's fingerprint) and
``run.json`` (provenance: config, commit, hardware, wall time, throughput, one segment per call
that trained). Kill it at any point and call :func:`train` again with the same folder: it
restores the last checkpoint and ends exactly where an uninterrupted run ends (the batch and the
random key of step ``t`` depend only on ``t``). ``run.json`` is rewritten at every checkpoint, so
a kill loses from the record only the time since the last checkpoint, as it loses the steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from gmlm_lib.core import records
from gmlm_lib.core.progress import bar as progress_bar
from gmlm_lib.mt import batching, reductions, seq2seq
from gmlm_lib.mt import vocab as V


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (the model included). ``kind`` is "ar" or "padir".

    PaDIR: ``unmasking_rate`` is the probability that a target position keeps its correct token
    (the rest become random pieces, or ``[MASK]`` with ``fill = "mask"``); ``stages`` = 2 feeds the
    model its own stage-1 argmax [App. L.1.2]; ``length_loss_weight`` weighs the length
    cross-entropy. The learning rate warms up linearly for ``warmup`` steps, then decays by a
    cosine to ``learning_rate * min_lr_ratio`` at ``steps``.

    ``init`` = "teacher" starts a PaDIR model from the AR teacher passed to :func:`train`
    (:func:`gmlm_lib.mt.seq2seq.warm_start`); "random" is the paper's random start [App. L.2]."""

    kind: str
    model: seq2seq.ModelConfig
    steps: int = 4000
    batch_tokens: int = 4096
    optimizer: str = "adamw"
    learning_rate: float = 1e-3
    warmup: int = 400
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    label_smoothing: float = 0.1
    unmasking_rate: float = 0.1
    fill: str = "random"
    stages: int = 2
    length_loss_weight: float = 0.1
    seed: int = 0
    checkpoint_every: int = 500
    log_every: int = 50
    buckets: tuple[int, ...] = batching.DEFAULT_BUCKETS
    init: str = "random"

    def __post_init__(self):
        if self.kind not in ("ar", "padir"):
            raise ValueError(f"TrainConfig.kind must be 'ar' or 'padir'; got {self.kind!r}.")
        if self.model.causal != (self.kind == "ar"):
            raise ValueError(f"TrainConfig.kind = {self.kind!r} needs ModelConfig.causal = {self.kind == 'ar'}.")
        for name in ("steps", "batch_tokens", "checkpoint_every", "log_every", "stages", "warmup", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"TrainConfig.{name} must be an integer; got {value!r} ({type(value).__name__}): a "
                                "count is never rounded silently.")
        for name in ("steps", "batch_tokens", "checkpoint_every", "log_every", "stages"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"TrainConfig.{name} must be a positive integer; got {getattr(self, name)!r}.")
        for name, low, high in (("learning_rate", 0.0, math.inf), ("clip_norm", 0.0, math.inf)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low < value < high):
                raise ValueError(f"TrainConfig.{name} must be a finite number > 0; got {value!r} (a negative "
                                 f"{name} trains uphill).")
        for name, low, high in (("weight_decay", 0.0, math.inf), ("min_lr_ratio", 0.0, 1.0),
                                ("length_loss_weight", 0.0, math.inf)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high) \
                    or not math.isfinite(value):
                raise ValueError(f"TrainConfig.{name} must be a finite number in [{low:g}, {high:g}]; got {value!r}.")
        if not 0 <= self.warmup < self.steps:
            raise ValueError(f"TrainConfig.warmup must be in [0, steps = {self.steps}); got {self.warmup}.")
        if self.optimizer not in ("adamw", "adafactor"):
            raise ValueError(f"TrainConfig.optimizer must be 'adamw' or 'adafactor'; got {self.optimizer!r}.")
        if not 0.0 <= self.unmasking_rate < 1.0:
            raise ValueError(f"TrainConfig.unmasking_rate must be in [0, 1); got {self.unmasking_rate}.")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"TrainConfig.label_smoothing must be in [0, 1); got {self.label_smoothing}.")
        if self.fill not in ("random", "mask"):
            raise ValueError(f"TrainConfig.fill must be 'random' or 'mask'; got {self.fill!r}.")
        if self.init not in ("random", "teacher"):
            raise ValueError(f"TrainConfig.init must be 'random' or 'teacher'; got {self.init!r}.")
        if self.init == "teacher" and self.kind != "padir":
            raise ValueError("TrainConfig.init = 'teacher' starts a PaDIR model from its AR teacher; "
                             f"kind = {self.kind!r} needs init = 'random'.")
        if max(self.buckets) > self.model.max_len:
            raise ValueError(f"TrainConfig.buckets go up to {max(self.buckets)} but ModelConfig.max_len = "
                             f"{self.model.max_len}; lower the buckets or raise max_len.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "TrainConfig":
        """A copy with ``changes`` applied; a name that is a :class:`~gmlm_lib.mt.seq2seq.ModelConfig`
        field (e.g. ``positional_attention``) changes the model. This is how an ablation is written:
        ``base.replace(stages=1)``. An unknown name is an error."""
        own = {f.name for f in dataclasses.fields(self)} - {"model"}
        model_fields = {f.name for f in dataclasses.fields(self.model)}
        unknown = set(changes) - own - model_fields
        if unknown:
            raise ValueError(f"TrainConfig.replace: unknown field(s) {sorted(unknown)}; choose from "
                             f"{sorted(own)} (training) or {sorted(model_fields)} (model).")
        model = dataclasses.replace(self.model, **{k: v for k, v in changes.items() if k in model_fields})
        return dataclasses.replace(self, model=model, **{k: v for k, v in changes.items() if k in own})

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        d["model"] = seq2seq.ModelConfig(**d["model"])
        d["buckets"] = tuple(d.get("buckets", batching.DEFAULT_BUCKETS))
        return cls(**d)


# -- losses ------------------------------------------------------------------------------------------
def cross_entropy(logits, labels, mask, smoothing: float):
    """Label-smoothed cross-entropy summed over ``mask`` and the number of tokens it covers:
    (1 - eps) * NLL + eps * mean over the vocabulary of -log p."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    nll = -jnp.take_along_axis(logp, labels[..., None], -1)[..., 0]
    ce = (1.0 - smoothing) * nll - smoothing * logp.mean(-1)
    return (ce * mask).sum(), mask.sum()


def loss_fn(model: seq2seq.Seq2Seq, cfg: TrainConfig, batch: dict, key):
    """Mean training loss of one batch and its parts. AR: teacher-forced next-token loss on
    ``y [EOS]``. PaDIR: the mean over stages of the per-token loss on all target positions of the
    corrupted (stage 1) or self-predicted (stage 2+) input, plus the weighted length loss."""
    k_enc, k_cor, k_dec = jax.random.split(key, 3)
    src, sm, tgt, tm = batch["src"], batch["src_mask"], batch["tgt"], batch["tgt_mask"]
    enc, enc_mask = model.encode(src, sm, k_enc)
    eps = cfg.label_smoothing
    if cfg.kind == "ar":
        dec_in, out, mask = batching.ar_inputs(tgt, tm)
        logits = model.decode(dec_in, mask, enc, enc_mask, k_dec)
        total, count = cross_entropy(logits, out, mask, eps)
        loss = total / count
        return loss, dict(token_loss=loss, tokens=count)
    hyp = batching.corrupt(k_cor, tgt, tm, cfg.model.vocab, cfg.unmasking_rate, cfg.fill)
    token_loss = 0.0
    for stage, k in enumerate(jax.random.split(k_dec, cfg.stages)):
        logits = model.decode(hyp, tm, enc, enc_mask, k)
        total, count = cross_entropy(logits, tgt, tm, eps)
        token_loss = token_loss + total / count / cfg.stages
        if stage + 1 < cfg.stages:  # the next stage refines this stage's own prediction
            pred = reductions.argmax(logits.at[..., : V.FIRST_PIECE].set(-jnp.inf)).astype(tgt.dtype)
            hyp = jax.lax.stop_gradient(jnp.where(tm, pred, V.PAD))
    lengths = tm.sum(-1)
    length_loss = optax.softmax_cross_entropy_with_integer_labels(model.length_logits(enc), lengths).mean()
    loss = token_loss + cfg.length_loss_weight * length_loss
    return loss, dict(token_loss=token_loss, length_loss=length_loss, tokens=count)


# -- optimiser -----------------------------------------------------------------------------------------
def schedule(cfg: TrainConfig) -> optax.Schedule:
    """Learning rate by update: linear warm-up from 0 over ``warmup`` updates, then a cosine decay
    to ``learning_rate * min_lr_ratio`` at ``steps``."""
    return optax.warmup_cosine_decay_schedule(0.0, cfg.learning_rate, max(cfg.warmup, 1), cfg.steps,
                                              end_value=cfg.learning_rate * cfg.min_lr_ratio)


def optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW (beta2 = 0.98) or Adafactor, on the warm-up-cosine schedule."""
    lr = schedule(cfg)
    if cfg.optimizer == "adamw":
        opt = optax.adamw(lr, b1=0.9, b2=0.98, eps=1e-9, weight_decay=cfg.weight_decay)
    else:
        opt = optax.adafactor(lr, weight_decay_rate=cfg.weight_decay or None)
    return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), opt)


# -- data parallelism ----------------------------------------------------------------------------------
def mesh(devices=None) -> Mesh:
    """A one-axis ("data") mesh over ``devices`` (default: all of ``jax.devices()``)."""
    devices = list(jax.devices() if devices is None else devices)
    return Mesh(np.array(devices), ("data",))


def make_step(graphdef, cfg: TrainConfig, tx):
    """The jitted update ``(params, opt_state, batch, key) -> (params, opt_state, loss, parts)``.
    Sharding follows the inputs: batches split over "data", parameters replicated."""

    def step(params, opt_state, batch, key):
        def f(p):
            return loss_fn(nnx.merge(graphdef, p), cfg, batch, key)

        (loss, parts), grads = jax.value_and_grad(f, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, parts

    return jax.jit(step, donate_argnums=(0, 1))


def flops_per_step(cfg: TrainConfig, batcher: batching.Batcher) -> float:
    """Mean FLOPs of one training update over an epoch's batches, from XLA's cost analysis of the
    lowered step for each bucket (forward, backward and optimiser; one device; no compilation)."""
    model = seq2seq.build(cfg.model, cfg.seed)
    graphdef, params = nnx.split(model)
    tx = optimizer(cfg)
    step = make_step(graphdef, cfg, tx)
    opt_state = tx.init(params)
    counts: dict[int, int] = {}
    for bucket, _ in batcher.epoch(0):
        counts[bucket] = counts.get(bucket, 0) + 1
    total = 0.0
    for bucket, n in counts.items():
        b = batcher.make(bucket, batcher.groups[bucket][: batcher.batch_size(bucket)])
        if len(b.src) < batcher.batch_size(bucket):  # a bucket smaller than one batch
            b = batcher.make(bucket, np.resize(batcher.groups[bucket], batcher.batch_size(bucket)))
        batch = dict(src=b.src, src_mask=b.src_mask, tgt=b.tgt, tgt_mask=b.tgt_mask)
        cost = step.lower(params, opt_state, batch, jax.random.key(0)).cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        total += n * float(cost["flops"])
    return total / sum(counts.values())


# -- the run -------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Result:
    """What :func:`train` returns: the trained model, the logged ``(step, loss)`` pairs, the last
    update's loss and the run's provenance record (``run.json``)."""

    model: seq2seq.Seq2Seq
    losses: list[tuple[int, float]]
    final_loss: float
    record: dict


def _rows(path: pathlib.Path) -> list[dict]:
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


def _jsonl_keep(path: pathlib.Path, upto: int):
    """Drop metric lines written after step ``upto`` (they belong to the lost part of a killed run)."""
    if path.exists():
        path.write_text("".join(json.dumps(r) + "\n" for r in _rows(path) if r["step"] <= upto))


def _losses(path: pathlib.Path) -> list[tuple[int, float]]:
    """``(step, loss)`` of every line of ``metrics.jsonl``."""
    return [(r["step"], r["loss"]) for r in _rows(path)]


def _check_data(run_dir: pathlib.Path, batcher: batching.Batcher, teacher: str = "") -> str | None:
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
        recorded = json.loads(path.read_text())["fingerprint"]
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


def _open_run(cfg: TrainConfig, batcher: batching.Batcher, run_dir: pathlib.Path, devices, teacher) -> tuple:
    """Check that ``run_dir`` may hold this run (same config, same data and teacher, a batch that
    splits over the devices) and record its config; returns ``(mesh, data fingerprint, teacher
    fingerprint)``."""
    cfg_path = run_dir / "config.json"
    if cfg_path.exists() and TrainConfig.from_dict(json.loads(cfg_path.read_text())) != cfg:
        raise ValueError(f"{cfg_path} holds a different TrainConfig; use a new run folder for a new configuration.")
    if (cfg.init == "teacher") != (teacher is not None):
        raise ValueError("train: TrainConfig.init = 'teacher' needs the AR model as teacher=...; "
                         "init = 'random' takes no teacher." if teacher is None else
                         "train: a teacher was given but TrainConfig.init = 'random'; set init = 'teacher' "
                         "(cfg.replace(init='teacher')) or leave the teacher out.")
    m = mesh(devices)
    if batcher.multiple % m.size:
        raise ValueError(f"Batcher.multiple = {batcher.multiple} must be a multiple of the {m.size} devices.")
    _check_token_ids(batcher, cfg.model.vocab)
    teacher_fp = seq2seq.params_fingerprint(teacher) if teacher is not None else ""
    fingerprint = _check_data(run_dir, batcher, teacher_fp)
    cfg_path.write_text(json.dumps(cfg.to_dict(), indent=1))
    return m, fingerprint, teacher_fp


def _check_token_ids(batcher: batching.Batcher, vocab: int) -> None:
    """Every token id of the training pairs is in ``[0, vocab)``: an id beyond the embedding table
    would be clipped silently by the gather and train on garbage."""
    for side in ("src", "tgt"):
        for i, row in enumerate(getattr(batcher, side)):
            if row and (min(row) < 0 or max(row) >= vocab):
                bad = next(t for t in row if t < 0 or t >= vocab)
                raise ValueError(f"train: {side} sequence {i} holds token id {bad}, outside the model's vocabulary "
                                 f"[0, {vocab}); encode the data with the vocabulary the model is built for "
                                 "(ModelConfig.vocab = vocab.size).")


class RunFolderBusy(RuntimeError):
    """Another process is training in the same run folder."""


@contextlib.contextmanager
def _exclusive(run_dir: pathlib.Path):
    """Hold an exclusive lock on ``run_dir`` (``run_dir/.lock``, ``fcntl.flock``) while training: a
    second process on the same folder would interleave its metrics and checkpoints. The lock file
    names the holder; the operating system releases the lock when the holder exits or is killed."""
    import fcntl

    path = run_dir / ".lock"
    with open(path, "a+") as f:
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


def _digest(state) -> str:
    """SHA-256 of every array of ``state`` (params and optimiser state), in tree order: written with
    each checkpoint and compared on restore, so a damaged checkpoint cannot pass for a good one."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(state)):
        a = np.asarray(leaf)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _all_finite(tree) -> bool:
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact))


DAMAGED = "checkpoints_damaged"  # where a damaged checkpoint is moved, kept for inspection


def _move_aside(run_dir: pathlib.Path, step: int) -> pathlib.Path:
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


def _restore(make_manager: Callable[[], ocp.CheckpointManager], run_dir: pathlib.Path, target: dict, *,
             move_damaged: bool = True) -> tuple[int, dict | None, ocp.CheckpointManager]:
    """The newest checkpoint that restores, matches the digest written with it and holds only finite
    numbers: ``(step, state, manager)``, with ``(0, None, manager)`` when the folder has none. A damaged
    newer checkpoint is reported with a warning that says so and where it went (``move_damaged``:
    moved into ``checkpoints_damaged/``, never deleted, for training to write that step again), and
    the previous one is tried with a fresh manager (Orbax's manager keeps what it inferred from a
    damaged checkpoint, which would make every older one look damaged too). A checkpoint without a
    recorded digest (a folder from before digests were written) is used with a warning that it could
    not be verified beyond its finite numbers. ``make_manager`` opens ``run_dir/checkpoints``."""
    digests = _checkpoint_digests(run_dir)
    manager = make_manager()
    skipped: set[int] = set()
    while True:
        candidates = sorted((s for s in manager.all_steps() if s not in skipped), reverse=True)
        if not candidates:
            return 0, None, manager
        step = candidates[0]
        want = digests.get(str(step))
        try:
            state = manager.restore(step, args=ocp.args.StandardRestore(target))
            problem = ("its digest differs from the one written with it" if want is not None and _digest(state) != want
                       else "it holds non-finite numbers" if not _all_finite(state) else None)
        except Exception as err:  # Orbax/TensorStore raise many kinds on a damaged file
            problem = f"it cannot be read ({type(err).__name__}: {str(err).splitlines()[0][:160]})"
        if problem is None:
            if want is None:
                warnings.warn(f"{run_dir}: the checkpoint of step {step} has no recorded digest (a run folder from "
                              "before digests were written): only its finite numbers could be checked; its config "
                              "and data were checked against config.json and data.json.", stacklevel=3)
            return step, state, manager
        manager.close()
        where = f" It was moved to {_move_aside(run_dir, step)} (kept, not deleted)." if move_damaged else ""
        skipped.add(step)
        older = [s for s in candidates[1:]]
        warnings.warn(f"{run_dir}: the checkpoint of step {step} is damaged ({problem}).{where} "
                      + (f"Falling back to step {max(older)}." if older else "No older checkpoint: training restarts "
                         "from step 0."), stacklevel=3)
        manager = make_manager()


def _checkpoint_digests(run_dir: pathlib.Path) -> dict:
    path = run_dir / "checkpoint_digests.json"
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except json.JSONDecodeError:
        warnings.warn(f"{path} is damaged; the checkpoints are checked for finite numbers only.", stacklevel=3)
        return {}


def _initial_state(cfg: TrainConfig, teacher, teacher_fp: str) -> tuple:
    """The model before its first update (random, or warm-started from ``teacher``) and the
    optimiser: ``(graphdef, params, tx, opt_state, init)``, ``init`` describing the start for the record."""
    model = seq2seq.build(cfg.model, cfg.seed)
    init = dict(start=cfg.init)
    if teacher is not None:
        model, kept = seq2seq.warm_start(model, teacher)
        init.update(teacher_fingerprint=teacher_fp, random_parameters=kept)
    graphdef, params = nnx.split(model)
    tx = optimizer(cfg)
    return graphdef, params, tx, tx.init(params), init


def _checkpoint_manager(run_dir: pathlib.Path, cfg: TrainConfig) -> ocp.CheckpointManager:
    """Orbax, synchronous (a kill during a save leaves the previous checkpoint whole), two kept."""
    return ocp.CheckpointManager(
        run_dir / "checkpoints",
        options=ocp.CheckpointManagerOptions(save_interval_steps=cfg.checkpoint_every, max_to_keep=2,
                                             enable_async_checkpointing=False))


class _RunRecord:
    """``run.json`` of a run being trained: the segments of earlier calls up to the checkpoint this
    call resumed from, and this call's own segment (its steps, time, tokens, commit and machine).
    :meth:`write` rewrites the whole record at a checkpoint and at the end."""

    def __init__(self, path: pathlib.Path, cfg: TrainConfig, batcher: batching.Batcher, start: int, init: dict,
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

    def write(self, done: int, final_loss: float | None) -> dict:
        self.segment.update(end=done, wall_s=time.perf_counter() - self.t0, tokens=self.tokens)
        segments = self.earlier + [self.segment]
        timed = [g for g in segments if "tokens" in g and g["end"] > g["start"] and g["wall_s"] > 0]
        record = dict(
            config=self.cfg.to_dict(), commit=self.segment["commit"], hardware=records.environment(), init=self.init,
            data_fingerprint=self.fingerprint or self.prev.get("data_fingerprint"), parameters=self.parameters,
            dropped_pairs=self.batcher.dropped, batches_per_epoch=len(self.batcher), steps=self.cfg.steps, done=done,
            final_loss=final_loss, wall_s=sum(g["wall_s"] for g in segments), segments=segments,
            tokens_per_s=(sum(g["tokens"] for g in timed) / sum(g["wall_s"] for g in timed)) if timed
            else self.prev.get("tokens_per_s"),
        )
        records.write_record(self.path, record)
        return json.loads(json.dumps(record))  # as a later call reads it back (tuples become lists)


def train(cfg: TrainConfig, batcher: batching.Batcher, run_dir: str | pathlib.Path, *, devices=None,
          progress: bool = True, on_step: Callable[[int, float], None] | None = None,
          teacher: seq2seq.Seq2Seq | None = None) -> Result:
    """Train (or resume) the run in ``run_dir`` to ``cfg.steps`` updates. ``batcher`` gives the
    batch of each step; its ``multiple`` must be the number of devices. ``on_step(step, loss)``
    is called for every update once its loss is read, which is after the next update has been
    dispatched (tests raise from it to simulate a kill). ``teacher``: the AR
    model a run with ``cfg.init = "teacher"`` starts from (required there, refused otherwise).

    A folder already holding a run is resumed (or, when finished, reused) only with the same
    ``cfg`` and the same data (:meth:`gmlm_lib.mt.batching.Batcher.fingerprint`, kept in ``data.json``);
    either differing is a ``ValueError``. The batch and the random key of step ``t`` depend only on
    ``t``, so a resumed run ends exactly where an uninterrupted one does.

    Nothing is silent: one process at a time trains in a folder (:class:`RunFolderBusy`); a
    checkpoint is verified on restore against the digest written with it, and a damaged one is moved
    aside into ``checkpoints_damaged/`` (kept, named in a warning) and the previous one used, the
    metrics and the record cut back to it; a non-finite loss or parameters stop the run with
    a ``FloatingPointError`` naming the step, before any checkpoint of them is written, and the
    record is never marked finished."""
    run_dir = pathlib.Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(run_dir):
        return _train_locked(cfg, batcher, run_dir, devices, progress, on_step, teacher)


def _nonfinite(cfg: TrainConfig, run_dir: pathlib.Path, step: int, what: str, last_good: int) -> FloatingPointError:
    return FloatingPointError(
        f"training {cfg.kind} in {run_dir}: {what} at step {step}. Likely causes: a learning rate too high for this "
        f"model (learning_rate = {cfg.learning_rate:g}; try a lower one or a longer warm-up), or damaged inputs. The "
        f"folder keeps its last good checkpoint (step {last_good}) and its record is not marked finished.")


def _train_locked(cfg, batcher, run_dir, devices, progress, on_step, teacher) -> Result:
    m, fingerprint, teacher_fp = _open_run(cfg, batcher, run_dir, devices, teacher)
    replicated, sharded = NamedSharding(m, P()), NamedSharding(m, P("data"))
    graphdef, params, tx, opt_state, init = _initial_state(cfg, teacher, teacher_fp)
    start, restored, manager = _restore(lambda: _checkpoint_manager(run_dir, cfg), run_dir,
                                        {"params": params, "opt_state": opt_state})
    if restored is not None:
        params, opt_state = restored["params"], restored["opt_state"]
    metrics, record_path = run_dir / "metrics.jsonl", run_dir / "run.json"
    prev = json.loads(record_path.read_text()) if record_path.exists() else {}
    final = prev.get("final_loss")
    if (start == cfg.steps and prev.get("done", prev.get("steps")) == cfg.steps and final is not None
            and math.isfinite(final)):
        # finished before: reuse it as it is (its record names the code and machine that trained it)
        manager.close()
        return Result(nnx.merge(graphdef, params), _losses(metrics), final, prev)
    params, opt_state = jax.device_put((params, opt_state), replicated)
    _jsonl_keep(metrics, start)
    record = _RunRecord(record_path, cfg, batcher, start, init, fingerprint,
                        seq2seq.count_params(nnx.merge(graphdef, params)), prev)
    if prev and prev.get("done", prev.get("steps")) != start:
        record.write(start, None)  # the record names the checkpoint resumed from, not a later one that was lost
    digests = {k: v for k, v in _checkpoint_digests(run_dir).items() if int(k) <= start}

    step_fn = make_step(graphdef, cfg, tx)
    base_key = jax.random.key(cfg.seed)
    lr = schedule(cfg)
    losses, loss = [], float("nan")
    bar = progress_bar(range(start, cfg.steps), progress=progress, initial=start, total=cfg.steps,
                       desc=f"train {cfg.kind}", leave=False, mininterval=10)
    with metrics.open("a") as log:

        def settle(done: int, loss_arr, parts) -> float:
            """Read update ``done``'s loss (waiting for it), stop on a non-finite one, log it."""
            step_loss = float(loss_arr)
            if not math.isfinite(step_loss):
                manager.close()
                raise _nonfinite(cfg, run_dir, done, f"the loss is {step_loss}", max(digests, key=int, default=0))
            if done % cfg.log_every == 0 or done == cfg.steps:
                losses.append((done, step_loss))
                row = dict(step=done, loss=step_loss, lr=float(lr(done)), wall_s=time.perf_counter() - record.t0,
                           **{k: float(v) for k, v in parts.items()})
                log.write(json.dumps(row) + "\n")
                log.flush()
                bar.set_postfix(loss=f"{step_loss:.3f}")
            if on_step is not None:
                on_step(done, step_loss)
            return step_loss

        # update t's loss is read after update t + 1 is dispatched: the host prepares the next batch
        # while the device computes, instead of waiting for every update (at a checkpoint and at the
        # end the current update is read first, so a non-finite one is never saved)
        pending = None
        for step in bar:
            b = batcher.at(step)
            batch = jax.device_put(dict(src=b.src, src_mask=b.src_mask, tgt=b.tgt, tgt_mask=b.tgt_mask), sharded)
            params, opt_state, loss_arr, parts = step_fn(params, opt_state, batch, jax.random.fold_in(base_key, step))
            done = step + 1
            record.tokens += int(b.tgt_mask.sum()) + int(b.src_mask.sum())
            if pending is not None:
                loss = settle(*pending)
            pending = (done, loss_arr, parts)
            if done % cfg.checkpoint_every == 0 or done == cfg.steps:
                loss, pending = settle(*pending), None
                state = {"params": params, "opt_state": opt_state}
                if not _all_finite(state):
                    manager.close()
                    raise _nonfinite(cfg, run_dir, done, "the parameters hold non-finite numbers",
                                     max(digests, key=int, default=0))
                manager.save(done, args=ocp.args.StandardSave(state), force=True)
                manager.wait_until_finished()
                digests = {k: v for k, v in digests.items() if int(k) in set(manager.all_steps())}
                digests[str(done)] = _digest(state)
                records.write_record(run_dir / "checkpoint_digests.json", digests)
                if done < cfg.steps:
                    record.write(done, None)
    manager.close()
    # a call that trained nothing (the last checkpoint is the final one but its record was lost)
    # takes the final loss from the metrics
    final_loss = loss if start < cfg.steps else next((l for t, l in _losses(metrics) if t == cfg.steps), None)
    rec = record.write(cfg.steps, final_loss)
    model = nnx.merge(graphdef, jax.device_get(params))
    return Result(model, losses if start < cfg.steps else _losses(metrics), final_loss, rec)


def load(run_dir: str | pathlib.Path) -> tuple[TrainConfig, seq2seq.Seq2Seq]:
    """The config and the last checkpoint's model of a run folder."""
    run_dir = pathlib.Path(run_dir).resolve()
    cfg = TrainConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    model = seq2seq.build(cfg.model, cfg.seed)
    graphdef, params = nnx.split(model)
    tx = optimizer(cfg)
    with ocp.CheckpointManager(run_dir / "checkpoints") as manager:
        if manager.latest_step() is None:
            raise FileNotFoundError(f"no checkpoint in {run_dir / 'checkpoints'}.")
    step, restored, manager = _restore(lambda: ocp.CheckpointManager(run_dir / "checkpoints"), run_dir,
                                       {"params": params, "opt_state": tx.init(params)}, move_damaged=False)
    manager.close()
    if restored is None:
        raise ValueError(f"every checkpoint in {run_dir / 'checkpoints'} is damaged (see the warnings); train the run "
                         "again in a fresh folder.")
    return cfg, nnx.merge(graphdef, restored["params"])
