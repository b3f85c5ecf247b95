"""Training the AR baseline and PaDIR [Section 3.2, App. L.1.2-L.2]: the run's configuration, the
optimiser and its schedule, data parallelism over ``jax.devices()``, and the training loop with
exact resume.

The objectives live in :mod:`gmlm_lib.mt.objectives`, the run folder (lock, checkpoints and their
digests, metrics, the provenance record) in :mod:`gmlm_lib.mt.runfolder`. Kill a run at any point
and call :func:`train` again with the same folder: it restores the newest checkpoint that verifies
and ends exactly where an uninterrupted run ends (the batch and the random key of step ``t`` depend
only on ``t``). ``run.json`` is rewritten at every checkpoint, so a kill loses from the record only
the time since the last checkpoint, as it loses the steps.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from gmlm_lib.core import checks, records, timing
from gmlm_lib.core.progress import bar as progress_bar
from gmlm_lib.mt import batching, objectives, programs, runfolder, seq2seq
from gmlm_lib.mt.runfolder import DAMAGED, RunFolderBusy, RunFolderError

__all__ = ["TrainConfig", "TRACED", "PROGRAM_FREE", "Program", "FlatUpdate", "clear_programs", "schedule",
           "traced_schedule", "optimizer", "mesh", "make_step", "make_eval", "compile_programs", "validation_loss",
           "VAL_METRIC", "flops_per_step", "Result", "finished", "program_fields", "train", "load", "RunFolderBusy", "RunFolderError", "DAMAGED"]


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
            checks.integer(getattr(self, name), f"TrainConfig.{name}",
                           low=None if name in ("warmup", "seed") else 1)
        for name in ("learning_rate", "clip_norm"):
            checks.real(getattr(self, name), f"TrainConfig.{name}", low=0.0, low_open=True,
                        fix=f"A negative {name} trains uphill.")
        for name, high in (("weight_decay", math.inf), ("min_lr_ratio", 1.0), ("length_loss_weight", math.inf)):
            checks.real(getattr(self, name), f"TrainConfig.{name}", low=0.0, high=high)
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
        object.__setattr__(self, "buckets", batching.check_buckets(self.buckets, "TrainConfig.buckets"))
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
        """The config written by ``to_dict`` (``config.json``); a missing required field or an
        unknown one is a ``ValueError`` naming them."""
        if not isinstance(d, dict) or not isinstance(d.get("model"), dict):
            raise ValueError("TrainConfig.from_dict needs a mapping with a 'model' mapping (what to_dict writes); got "
                             f"{type(d).__name__}{'' if not isinstance(d, dict) else ' without model'}.")
        for what, fields, given in (("TrainConfig", dataclasses.fields(cls), d),
                                    ("ModelConfig", dataclasses.fields(seq2seq.ModelConfig), d["model"])):
            names = {f.name for f in fields}
            required = {f.name for f in fields if f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING}
            unknown, missing = sorted(set(given) - names), sorted(required - set(given))
            if unknown or missing:
                raise ValueError(f"{what}.from_dict: " + "; ".join(
                    ([f"unknown field(s) {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else []))
                    + f" (the fields are {sorted(names)}).")
        d = dict(d)
        d["model"] = seq2seq.ModelConfig(**d["model"])
        d["buckets"] = tuple(d.get("buckets", batching.DEFAULT_BUCKETS))
        return cls(**d)


# -- optimiser -----------------------------------------------------------------------------------------
def schedule(cfg: TrainConfig) -> optax.Schedule:
    """Learning rate by update: linear warm-up from 0 over ``warmup`` updates, then a cosine decay
    to ``learning_rate * min_lr_ratio`` at ``steps`` (:func:`traced_schedule` of ``cfg``'s numbers:
    the rates the update program applies)."""
    return traced_schedule({name: TRACED[name](cfg) for name in _SCHEDULE})


_SCHEDULE = ("learning_rate", "warmup", "steps", "min_lr_ratio")
"""The :data:`TRACED` fields that :func:`traced_schedule` reads."""


def traced_schedule(numbers: dict) -> optax.Schedule:
    """The warm-up-cosine schedule of ``optax.warmup_cosine_decay_schedule`` (to float32 rounding:
    tested) with its numbers as arrays (``numbers``: :data:`TRACED`'s values), so that the update
    program does not depend on ``steps``, ``warmup`` or the rates. Why: a run sized to a time budget
    (:mod:`gmlm_lib.mt.sizing`) then trains with the program its timing compiled, and models that
    differ only in their number of updates (the ablations' against the PaDIR chapter's) share one
    program: on a GPU an update takes far longer to compile than to run."""
    peak, warmup, steps, alpha = (numbers[k] for k in _SCHEDULE)

    def lr(count):
        rising = peak * (jnp.clip(count, 0, warmup) / warmup)
        decay = jnp.maximum(steps - warmup, 1.0)  # 0 only for a 1-update run, which never decays
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * jnp.minimum(count - warmup, decay) / decay))
        return jnp.where(count < warmup, rising, peak * ((1 - alpha) * cosine + alpha))

    return lr


def optimizer(cfg: TrainConfig, learning_rate: optax.Schedule | None = None) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW (beta2 = 0.98) or Adafactor, on the warm-up-cosine schedule
    (``learning_rate``: that schedule as another function of the update count, e.g.
    :func:`traced_schedule`; default :func:`schedule`)."""
    lr = schedule(cfg) if learning_rate is None else learning_rate
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


TRACED = {
    "unmasking_rate": lambda cfg: jnp.asarray(cfg.unmasking_rate, jnp.float32),
    "fill": lambda cfg: jnp.asarray(cfg.fill == "mask"),
    "learning_rate": lambda cfg: jnp.asarray(cfg.learning_rate, jnp.float32),
    "warmup": lambda cfg: jnp.asarray(max(cfg.warmup, 1), jnp.float32),
    "steps": lambda cfg: jnp.asarray(cfg.steps, jnp.float32),
    # the end rate over the peak, as optax computes its alpha
    "min_lr_ratio": lambda cfg: jnp.asarray(cfg.learning_rate * cfg.min_lr_ratio / cfg.learning_rate, jnp.float32),
}
"""The :class:`TrainConfig` fields that are arguments of the compiled update and validation programs,
not constants baked into them, each with the device scalar a config passes for it (``fill`` as a
boolean, true for ``[MASK]``; the schedule's as :func:`traced_schedule` reads them): configs that
differ only in these compile to the same program, which JAX's persistent compilation cache then
shares (the ablations' unmasking-rate and ``[MASK]`` variants train with their baseline's program, a
run sized to a budget with the program its timing compiled). Every other field shapes the program
(layers, stages, label smoothing, the optimiser)."""


class Program:
    """A jitted function of a :class:`TrainConfig` with the config's :data:`TRACED` values bound as
    its last argument (device scalars, made once): call it, or ``lower`` it, with the other arguments.
    An update (:func:`make_step`) also runs on the flat list of its state's leaves (:meth:`flat`),
    as the training loop calls it."""

    def __init__(self, jitted, cfg: TrainConfig):
        self.jitted = jitted
        self.numbers = {name: value(cfg) for name, value in TRACED.items()}

    def __call__(self, *args):
        return self.jitted(*args, self.numbers)

    def lower(self, *args):
        return self.jitted.lower(*args, self.numbers)

    def flat(self, treedef) -> Callable:
        """The update as ``(leaves, batch, key) -> (leaves, loss, parts)`` on the leaves of a
        ``(params, opt_state)`` of structure ``treedef`` (``jax.tree.flatten``; the leaves in are
        donated, the leaves out have the same structure): the program a call of this Program runs,
        without rebuilding the nnx ``State`` pytrees on the host at every update."""
        if not isinstance(self.jitted, FlatUpdate):
            raise TypeError("Program.flat: only an update (make_step) runs on flat leaves.")
        f, numbers = self.jitted.for_tree(treedef), self.numbers
        return lambda leaves, batch, key: f(leaves, batch, key, numbers)


class FlatUpdate:
    """An update ``step(params, opt_state, batch, key, numbers)`` jitted on the flat list of the
    leaves of ``(params, opt_state)`` (:class:`gmlm_lib.mt.programs.FlatJit`), one jitted function per
    state structure (``treedef``), the leaves in donated.

    Why: an nnx ``State`` is a pytree whose nodes JAX flattens and rebuilds in Python; a jitted
    call that takes and returns the parameters and the optimiser state as ``State`` pytrees spends
    milliseconds of host time on them at every update (several times what a plain list of the same
    arrays costs, which takes JAX's C++ path), and a small model on an accelerator waits for the
    host (``benchmarks/train_step.py`` times the update as the loop calls it). Calling it with
    ``(params, opt_state, batch, key, numbers)`` flattens and rebuilds the state around the same
    jitted function (the same compiled program)."""

    def __init__(self, step: Callable):
        self.step = step

        def update(state, batch, key, numbers):
            params, opt_state, loss, parts = step(*state, batch, key, numbers)
            return (params, opt_state), loss, parts

        # named as the update is in logs and the compilation cache; a state of another structure is refused
        self._flat = programs.FlatJit(update, name="step", flat_out=True, donate_argnums=(0,))

    def for_tree(self, treedef):
        """The jitted ``(leaves, batch, key, numbers) -> (leaves, loss, parts)`` for ``treedef``.
        Thread-safe: threads compiling the buckets' updates at once (:func:`compile_programs`) get one
        jitted function, so the programs they compile are the ones the loop calls."""
        return self._flat.for_tree(treedef)

    def __call__(self, params, opt_state, batch, key, numbers):
        leaves, treedef = jax.tree.flatten((params, opt_state))
        out, loss, parts = self.for_tree(treedef)(leaves, batch, key, numbers)
        return (*jax.tree.unflatten(treedef, out), loss, parts)

    def lower(self, params, opt_state, batch, key, numbers):
        return self._flat.lower((params, opt_state), batch, key, numbers)


PROGRAM_FREE = frozenset(TRACED) | {"steps", "batch_tokens", "seed", "checkpoint_every", "log_every", "buckets", "init"}
"""The :class:`TrainConfig` fields that the update and val programs do not depend on: :data:`TRACED`
(arguments of the programs) and what decides only the data, the keys and the bookkeeping around them
(the batches' shapes are the programs' arguments). Configs that differ only in these share one
jitted program in a process (:func:`make_step`, :func:`make_eval`)."""

_PROGRAMS = programs.Programs(kept=32)
"""The update and val programs of this process, the most recent 32 (:func:`_shared`)."""


def program_fields(cfg: TrainConfig) -> tuple:
    """``cfg``'s fields that its update and val programs depend on (all but :data:`PROGRAM_FREE`), as
    ``(name, value)`` pairs: two configs with equal ones (and equal batch shapes) run the same programs."""
    return tuple((f.name, getattr(cfg, f.name)) for f in dataclasses.fields(cfg) if f.name not in PROGRAM_FREE)


def _shared(what: str, graphdef, cfg: TrainConfig, build: Callable) -> Program:
    """``build(cfg)``'s jitted function, made once per ``(what, graphdef, cfg's program fields)`` in
    this process (the most recent :data:`_PROGRAMS_KEPT` kept), bound to ``cfg``'s :data:`TRACED`
    values. Why: a jitted function compiles once per argument shape, so the sizing step's update is
    the one its run trains with, the distilled PaDIR model trains with the raw one's programs and an
    ablation variant that changes a traced field with its baseline's, without reading JAX's persistent
    cache (seconds a program on a GPU) or compiling again where it is off (:mod:`gmlm_lib.mt.programs`)."""
    return Program(_PROGRAMS.get((what, programs.graph_key(graphdef), program_fields(cfg)), lambda: build(cfg)), cfg)


def clear_programs() -> None:
    """Forget the update and val programs :func:`make_step` and :func:`make_eval` keep (the next
    call builds and compiles them again)."""
    _PROGRAMS.clear()


def make_step(graphdef, cfg: TrainConfig) -> Program:
    """The compiled update ``(params, opt_state, batch, key) -> (params, opt_state, loss, parts)`` of
    :func:`optimizer` ``(cfg)`` (its state: ``optimizer(cfg).init(params)``). Sharding follows the
    inputs: batches split over "data", parameters replicated; the state's arrays are donated. The
    fields in :data:`TRACED` are arguments of the program, not constants; configs that differ only in
    :data:`PROGRAM_FREE` share the jitted function (the most recent 32 kept; :func:`clear_programs`
    forgets them). The training loop runs it on the state's flat leaves (:meth:`Program.flat`)."""

    def build(cfg):
        def step(params, opt_state, batch, key, numbers):
            def f(p):
                return objectives.loss_fn(nnx.merge(graphdef, p), cfg, batch, key, numbers=numbers)

            (loss, parts), grads = jax.value_and_grad(f, has_aux=True)(params)
            tx = optimizer(cfg, traced_schedule(numbers))
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss, parts

        return FlatUpdate(step)

    return _shared("step", graphdef, cfg, build)


VAL_METRIC = "token loss on the val split (nats; the training objective without dropout or label smoothing)"
"""What the validation loss of a run measures (:func:`validation_loss`); the run's record names it."""


def make_eval(graphdef, cfg: TrainConfig) -> Program:
    """The compiled ``(params, batch, key) -> (summed token loss, tokens)`` of ``cfg``'s objective
    without dropout or label smoothing: PaDIR's mean over its stages, the AR loss as it is (the
    length loss left out), over the rows ``batch["rows"]`` marks; :data:`TRACED` as in
    :func:`make_step`."""

    def build(cfg):
        plain = cfg.replace(label_smoothing=0.0)

        def f(params, batch, key, numbers):
            _, parts = objectives.loss_fn(nnx.merge(graphdef, params), plain, batch, key, dropout=False,
                                          numbers=numbers)
            return parts["token_loss"] * parts["tokens"], parts["tokens"]

        return jax.jit(f)

    return _shared("eval", graphdef, cfg, build)


def validation_loss(eval_fn, params, batches: list[batching.Batch], key, sharding=None) -> float:
    """The token loss over every pair of ``batches`` (:meth:`gmlm_lib.mt.batching.Batcher.once`),
    each token weighing the same: :data:`VAL_METRIC`. Batch ``i`` draws PaDIR's corruption from
    ``fold_in(key, i)``, so every checkpoint of a run is scored on the same corrupted inputs and
    their losses differ only by the model. ``eval_fn``: :func:`make_eval`."""
    total, tokens = 0.0, 0.0
    for i, b in enumerate(batches):
        arrays = b.arrays() if sharding is None else jax.device_put(b.arrays(), sharding)
        t, n = eval_fn(params, arrays, jax.random.fold_in(key, i))
        total, tokens = total + float(t), tokens + float(n)
    if tokens == 0:
        raise ValueError("validation_loss: the validation batches hold no target token.")
    return total / tokens


def flops_per_step(cfg: TrainConfig, batcher: batching.Batcher) -> float:
    """Mean FLOPs of one training update over an epoch's batches, from XLA's cost analysis of the
    lowered step for each bucket (forward, backward and optimiser; one device; no compilation).

    The step is lowered for the host's CPU client whatever the default backend: the analysis counts
    the operations of the program before any backend's optimisation, so it is the same number
    everywhere, and the plugin clients of GPUs (the PJRT C API) offer no analysis before compiling
    (``Lowered.cost_analysis()`` is ``None`` there), while compiling each bucket's update a second time
    would cost tens of seconds on a GPU."""
    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        return _flops_per_step(cfg, batcher)


def _flops_per_step(cfg: TrainConfig, batcher: batching.Batcher) -> float:
    model = seq2seq.build(cfg.model, cfg.seed)
    graphdef, params = nnx.split(model)
    step = make_step(graphdef, cfg)
    opt_state = optimizer(cfg).init(params)
    counts: dict[int, int] = {}
    for bucket, _ in batcher.epoch(0):
        counts[bucket] = counts.get(bucket, 0) + 1
    total = 0.0
    for bucket, n in counts.items():
        b = batcher.make(bucket, batcher.groups[bucket][: batcher.batch_size(bucket)])
        if len(b.src) < batcher.batch_size(bucket):  # a bucket smaller than one batch
            b = batcher.make(bucket, np.resize(batcher.groups[bucket], batcher.batch_size(bucket)))
        batch = dict(src=b.src, src_mask=b.src_mask, tgt=b.tgt, tgt_mask=b.tgt_mask)
        lowered = step.lower(params, opt_state, batch, jax.random.key(0))
        cost = lowered.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
        if not cost or "flops" not in cost:
            raise RuntimeError(f"flops_per_step: XLA gave no cost analysis for the update of bucket {bucket} "
                               f"(JAX {jax.__version__}, lowered for {jax.default_backend()!r} under the CPU "
                               "default device); the FLOP count is not available with this JAX.")
        total += n * float(cost["flops"])
    return total / sum(counts.values())


# -- the run -------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Result:
    """What :func:`train` returns: the model (the checkpoint selected on the val split when the run
    was validated, else the last), the logged ``(step, loss)`` pairs, the last update's loss, the run's
    provenance record (``run.json``), the ``(step, val loss)`` of every checkpoint (empty without
    validation) and the step of the returned model."""

    model: seq2seq.Seq2Seq
    losses: list[tuple[int, float]]
    final_loss: float
    record: dict
    val_losses: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    selected_step: int = 0


def _open_run(cfg: TrainConfig, batcher: batching.Batcher, run_dir: pathlib.Path, devices, teacher) -> tuple:
    """Check that ``run_dir`` may hold this run (same config, same data and teacher, a batch that
    splits over the devices) and record its config; returns ``(mesh, data fingerprint, teacher
    fingerprint)``."""
    cfg_path = run_dir / "config.json"
    if cfg_path.exists() and _read_config(run_dir) != cfg:
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
    fingerprint = runfolder.check_data(run_dir, batcher, teacher_fp)
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


def finished(cfg: TrainConfig, run_dir: str | pathlib.Path) -> bool:
    """Whether ``run_dir``'s record (``run.json``) says a run finished all ``cfg.steps`` updates with a
    finite final loss: :func:`train` then reuses it and runs no update (a folder whose config differs
    from ``cfg`` is still refused there). Read from the record alone, no checkpoint opened; a chapter
    uses it to compile only the updates that will run (:func:`gmlm_lib.mt.sizing.compile_updates`)."""
    path = pathlib.Path(run_dir) / "run.json"
    return path.is_file() and _record_finished(runfolder.read_json(path, "the run's provenance record"), cfg.steps)


def _record_finished(rec: dict, steps: int) -> bool:
    """A run record that says all ``steps`` updates ran and ended on a finite loss."""
    final = rec.get("final_loss")
    return rec.get("done", rec.get("steps")) == steps and final is not None and math.isfinite(final)


def train(cfg: TrainConfig, batcher: batching.Batcher, run_dir: str | pathlib.Path, *, devices=None,
          progress: bool = True, on_step: Callable[[int, float], None] | None = None,
          teacher: seq2seq.Seq2Seq | None = None, val: batching.Batcher | None = None) -> Result:
    """Train (or resume) the run in ``run_dir`` to ``cfg.steps`` updates. ``batcher`` gives the
    batch of each step; its ``multiple`` must be the number of devices. ``on_step(step, loss)``
    is called for every update once its loss is read, which is after the next update has been
    dispatched (tests raise from it to simulate a kill). ``teacher``: the AR
    model a run with ``cfg.init = "teacher"`` starts from (required there, refused otherwise).

    ``val``: held-out pairs (Multi30k's val split), batched like ``batcher``. With it the number of
    updates is selected on them: every checkpoint is scored by :func:`validation_loss` before it is
    written (``val.jsonl``), the best one is kept besides the newest two, and the model returned (and
    the one :func:`load` gives) is the best; ``run.json``'s ``validation`` names the data, the metric
    and the selected step. A folder validated on other pairs, or trained with(out) validation and
    now called without (with) it, is refused.

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
    run_dir = runfolder.folder(run_dir, must_exist=False)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunFolderError(f"cannot create the run folder {run_dir} ({err.strerror or err}); pick a folder you can "
                             "write to, or free disk space.") from None
    with runfolder.exclusive(run_dir):
        return _train_locked(cfg, batcher, run_dir, devices, progress, on_step, teacher, val)


def _nonfinite(cfg: TrainConfig, run_dir: pathlib.Path, step: int, what: str, last_good: int) -> FloatingPointError:
    return FloatingPointError(
        f"training {cfg.kind} in {run_dir}: {what} at step {step}. Likely causes: a learning rate too high for this "
        f"model (learning_rate = {cfg.learning_rate:g}; try a lower one or a longer warm-up), or damaged inputs. The "
        f"folder keeps its last good checkpoint (step {last_good}) and its record is not marked finished.")


VAL_SALT = 2**31 - 1
"""Folded into the run's key for the validation passes' corruption (no training step reaches it)."""


class _Validation:
    """A validated run's bookkeeping: the val batches, ``val.jsonl`` (cut back to the checkpoint a
    call resumes from) and the best checkpoint so far among those still in the folder."""

    def __init__(self, cfg: TrainConfig, val: batching.Batcher, run_dir: pathlib.Path, graphdef, sharding,
                 start: int, steps_present, prev: dict):
        self.fingerprint, self.pairs = val.fingerprint(), sum(len(ix) for ix in val.groups.values())
        had = prev.get("validation")
        if prev and had is None:
            raise ValueError(f"{run_dir} holds a run trained without validation; train the validated run in a new "
                             "folder, or call train() without val= to go on with this one.")
        if had is not None and had.get("fingerprint") != self.fingerprint:
            raise ValueError(f"{run_dir} was validated on other pairs (fingerprint {str(had.get('fingerprint'))[:12]}, "
                             f"these {self.fingerprint[:12]}); pass the same val split, or use a new run folder.")
        self.batches, self.sharding = val.once(), sharding
        self.eval_fn = make_eval(graphdef, cfg)
        self.key = jax.random.fold_in(jax.random.key(cfg.seed), VAL_SALT)
        self.path = run_dir / "val.jsonl"
        runfolder.keep_metrics(self.path, start)
        self.rows = runfolder.read_metrics(self.path)
        present = set(steps_present)
        self.best = min(((r["val_loss"], r["step"]) for r in self.rows if r["step"] in present), default=None)

    def score(self, step: int, params, wall_s: float) -> float:
        """Score the parameters of update ``step`` and log them (before their checkpoint is written,
        so that a logged score never lacks the checkpoint a resumed call kept)."""
        loss = validation_loss(self.eval_fn, params, self.batches, self.key, self.sharding)
        row = dict(step=step, val_loss=loss, wall_s=wall_s)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        self.rows.append(row)
        if self.best is None or loss < self.best[0]:
            self.best = (loss, step)
        return loss

    def keep(self, steps) -> set[int]:
        """The checkpoints to keep: the newest two (to resume from) and the best."""
        newest = set(sorted(steps)[-2:])
        return newest | ({self.best[1]} if self.best is not None else set())

    def summary(self) -> dict:
        sel = self.best[1] if self.best is not None else None
        return dict(metric=VAL_METRIC, pairs=self.pairs, fingerprint=self.fingerprint, selected_step=sel,
                    selected_loss=self.best[0] if self.best is not None else None,
                    last_step=self.rows[-1]["step"] if self.rows else None,
                    last_loss=self.rows[-1]["val_loss"] if self.rows else None)

    def losses(self) -> list[tuple[int, float]]:
        return [(r["step"], r["val_loss"]) for r in self.rows]


def _train_locked(cfg, batcher, run_dir, devices, progress, on_step, teacher, val) -> Result:
    m, fingerprint, teacher_fp = _open_run(cfg, batcher, run_dir, devices, teacher)
    if val is not None and val.multiple % m.size:
        raise ValueError(f"the val Batcher's multiple = {val.multiple} must be a multiple of the {m.size} devices "
                         "(batch it as the training data).")
    replicated, sharded = NamedSharding(m, P()), NamedSharding(m, P("data"))
    graphdef, params, tx, opt_state, init = _initial_state(cfg, teacher, teacher_fp)
    target = {"params": params, "opt_state": opt_state}
    keep = None if val is not None else 2
    start, restored, manager = runfolder.restore(lambda: runfolder.checkpoint_manager(run_dir, cfg.checkpoint_every, keep),
                                                 run_dir, target)
    if restored is not None:
        params, opt_state = restored["params"], restored["opt_state"]
    metrics, record_path = run_dir / "metrics.jsonl", run_dir / "run.json"
    prev = runfolder.read_json(record_path, "the run's provenance record") if record_path.exists() else {}
    if val is None and prev.get("validation") is not None:
        manager.close()
        raise ValueError(f"{run_dir} holds a run validated on a val split ({prev['validation'].get('pairs')} pairs); "
                         "pass the same pairs as val= to go on with it, or train in a new folder.")
    try:
        validation = None if val is None else _Validation(cfg, val, run_dir, graphdef, sharded, start,
                                                          manager.all_steps(), prev)
    except ValueError:
        manager.close()
        raise
    final = prev.get("final_loss")
    if start == cfg.steps and _record_finished(prev, cfg.steps):
        # finished before: reuse it as it is (its record names the code and machine that trained it)
        selected = cfg.steps
        if validation is not None and validation.best is not None and validation.best[1] != cfg.steps:
            selected = validation.best[1]
            params = runfolder.restore_step(manager, run_dir, selected, target, "selected on the val split")["params"]
        manager.close()
        return Result(nnx.merge(graphdef, params), runfolder.losses(metrics), final, prev,
                      validation.losses() if validation is not None else [], selected)
    params, opt_state = jax.device_put((params, opt_state), replicated)
    runfolder.keep_metrics(metrics, start)
    record = runfolder.RunRecord(record_path, cfg, batcher, start, init, fingerprint,
                        seq2seq.count_params(nnx.merge(graphdef, params)), prev)
    if prev and prev.get("done", prev.get("steps")) != start:
        record.write(start, None)  # the record names the checkpoint resumed from, not a later one that was lost
    digests = {k: v for k, v in runfolder.checkpoint_digests(run_dir).items() if int(k) <= start}

    step_fn = make_step(graphdef, cfg)
    base_key = jax.random.key(cfg.seed)
    if start < cfg.steps:
        # wall seconds compiling the run's programs before its first update (part of the segment's wall_s)
        record.segment["compile_s"] = compile_programs(step_fn, batcher, (params, opt_state), sharded, base_key,
                                                       validation)
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
        # the loop carries the state's flat leaves (Program.flat), rebuilt into params and optimiser
        # state only at a checkpoint and at the end
        pending = None
        leaves, treedef = jax.tree.flatten((params, opt_state))
        update = step_fn.flat(treedef)
        for step in bar:
            b = batcher.at(step)
            batch = jax.device_put(dict(src=b.src, src_mask=b.src_mask, tgt=b.tgt, tgt_mask=b.tgt_mask), sharded)
            leaves, loss_arr, parts = update(leaves, batch, jax.random.fold_in(base_key, step))
            done = step + 1
            record.tokens += int(b.tgt_mask.sum()) + int(b.src_mask.sum())
            if pending is not None:
                loss = settle(*pending)
            pending = (done, loss_arr, parts)
            if done % cfg.checkpoint_every == 0 or done == cfg.steps:
                loss, pending = settle(*pending), None
                params, opt_state = jax.tree.unflatten(treedef, leaves)  # the next update donates these arrays
                state = {"params": params, "opt_state": opt_state}
                host = jax.device_get(state)  # one copy: the finiteness check and the digest read it
                if not runfolder.all_finite(host):
                    manager.close()
                    raise _nonfinite(cfg, run_dir, done, "the parameters hold non-finite numbers",
                                     max(digests, key=int, default=0))
                if validation is not None:
                    val_loss = validation.score(done, params, time.perf_counter() - record.t0)
                    if not math.isfinite(val_loss):
                        manager.close()
                        raise _nonfinite(cfg, run_dir, done, f"the validation loss is {val_loss}",
                                         max(digests, key=int, default=0))
                runfolder.save_checkpoint(manager, done, state, run_dir, max(digests, key=int, default=0))
                if validation is not None:
                    runfolder.prune(manager, validation.keep(manager.all_steps()))
                    record.validation = validation.summary()
                digests = {k: v for k, v in digests.items() if int(k) in set(manager.all_steps())}
                digests[str(done)] = runfolder.digest(host)
                records.write_record(run_dir / "checkpoint_digests.json", digests)
                if done < cfg.steps:
                    record.write(done, None)
        params, opt_state = jax.tree.unflatten(treedef, leaves)
    selected = cfg.steps
    if validation is not None:
        record.validation = validation.summary()
        if validation.best is not None and validation.best[1] != cfg.steps:
            selected = validation.best[1]
            live = {"params": params, "opt_state": opt_state}  # the first target's arrays were donated to the steps
            params = runfolder.restore_step(manager, run_dir, selected, live, "selected on the val split")["params"]
    manager.close()
    # a call that trained nothing (the last checkpoint is the final one but its record was lost)
    # takes the final loss from the metrics
    final_loss = loss if start < cfg.steps else next((l for t, l in runfolder.losses(metrics) if t == cfg.steps), None)
    rec = record.write(cfg.steps, final_loss)
    # on the default device, uncommitted (not on the training mesh): a decoder then runs where its
    # inputs are, and no call copies the parameters from the host again
    model = nnx.merge(graphdef, jax.device_put(jax.device_get(params)))
    return Result(model, losses if start < cfg.steps else runfolder.losses(metrics), final_loss, rec,
                  validation.losses() if validation is not None else [], selected)


def compile_programs(step_fn: Program, batcher: batching.Batcher, state: tuple, sharding, key,
                     validation: "_Validation | None" = None) -> float:
    """Compile every program a run will call, at once, before its first update
    (:func:`gmlm_lib.core.timing.compile_in_parallel`): the update ``step_fn`` for each length
    bucket of ``batcher`` (called as the loop calls it, :meth:`Program.flat`, on a copy of
    ``state = (params, opt_state)``, which it donates, with a batch of that bucket placed by
    ``sharding``) and, with ``validation``, the val program
    for each batch shape of the val split. Each lands in its jit cache, so the loop then runs
    without stopping to compile; the wall seconds are returned. Why: the trainer otherwise compiles
    each bucket's update when its first batch comes, one after another, and on a GPU an update
    compiles in tens of seconds and runs in milliseconds."""
    calls = []
    leaves, treedef = jax.tree.flatten(tuple(state))
    update = step_fn.flat(treedef)  # as the loop calls it
    for bucket, ix in batcher.groups.items():
        b = batcher.make(bucket, np.resize(ix, batcher.batch_size(bucket)))
        batch = jax.device_put(dict(src=b.src, src_mask=b.src_mask, tgt=b.tgt, tgt_mask=b.tgt_mask), sharding)
        # the copy is made in the call's thread, so at most one per running thread is alive
        calls.append(lambda batch=batch: update([jnp.copy(x) for x in leaves], batch, key)[1])
    if validation is not None:
        shapes = {}
        for b in validation.batches:
            shapes.setdefault((b.src.shape, b.tgt.shape), b)
        for b in shapes.values():
            arrays = jax.device_put(b.arrays(), sharding)
            calls.append(lambda arrays=arrays: validation.eval_fn(state[0], arrays, key))
    return round(timing.compile_in_parallel(calls), 3)


def _read_config(run_dir: pathlib.Path) -> TrainConfig:
    """The :class:`TrainConfig` in ``run_dir/config.json``; a missing or damaged file, or one that is not
    a TrainConfig, is one line naming it (:class:`~gmlm_lib.mt.runfolder.RunFolderError`)."""
    path = run_dir / "config.json"
    d = runfolder.read_json(path, "the run's TrainConfig")
    try:
        return TrainConfig.from_dict(d)
    except (KeyError, TypeError, ValueError) as err:
        raise RunFolderError(f"{path} is not a TrainConfig this library can read ({type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else err!r}); restore it from a copy of the run "
                             "folder, or train the run again in a new folder.") from None


def load(run_dir: str | pathlib.Path) -> tuple[TrainConfig, seq2seq.Seq2Seq]:
    """The config and the model of a run folder: the checkpoint selected on the val split when the
    run was validated and has finished (``run.json``'s ``validation``; verified, and refused when it
    is missing or damaged), else the newest checkpoint that verifies (a damaged newer one is reported
    in a warning and left where it is). A folder that does not exist, is a file, lacks
    ``config.json`` or has no usable checkpoint is refused in one line naming what and the fix."""
    run_dir = runfolder.folder(run_dir)
    cfg = _read_config(run_dir)
    model = seq2seq.build(cfg.model, cfg.seed)
    graphdef, params = nnx.split(model)
    tx = optimizer(cfg)
    ckpt = run_dir / "checkpoints"
    if not ckpt.is_dir() or not any(p.name.isdigit() for p in ckpt.iterdir()):
        raise RunFolderError(f"{run_dir} has no checkpoint in checkpoints/ (its training never reached its first "
                             "checkpoint, or the folder was copied without it); train the run (train() resumes "
                             "there), or pass the folder that holds it.")
    target = {"params": params, "opt_state": tx.init(params)}
    record_path = run_dir / "run.json"
    record = runfolder.read_json(record_path, "the run's provenance record") if record_path.exists() else {}
    selected = (record.get("validation") or {}).get("selected_step")
    if selected is not None and record.get("done") == cfg.steps:
        manager = ocp.CheckpointManager(ckpt)
        try:
            restored = runfolder.restore_step(manager, run_dir, selected, target, "selected on the val split")
        finally:
            manager.close()
        return cfg, nnx.merge(graphdef, restored["params"])
    step, restored, manager = runfolder.restore(lambda: ocp.CheckpointManager(ckpt), run_dir, target,
                                                move_damaged=False)
    manager.close()
    if restored is None:
        raise RunFolderError(f"every checkpoint in {ckpt} is damaged (see the warnings); train the run again in a "
                             "fresh folder.")
    return cfg, nnx.merge(graphdef, restored["params"])
