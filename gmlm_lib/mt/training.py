"""Training the AR baseline and PaDIR [Section 3.2, App. L.1.2-L.2]: the run's configuration, the
optimiser and its schedule, data parallelism over ``jax.devices()``, and the training loop with
exact resume.

The objectives live in :mod:`gmlm_lib.mt.objectives`, the run folder (lock, checkpoints and their
digests, metrics, the provenance record) in :mod:`gmlm_lib.mt.runfolder`. Kill a run at any point
and call :func:`train` again with the same folder: it restores the newest checkpoint that verifies
and ends exactly where an uninterrupted run ends (the batch and the random key of step ``t`` depend
only on ``t``). ``run.json`` is rewritten at every checkpoint, so a kill loses from the record only
the time since the last checkpoint, as it loses the steps.

A run may train several **replicas** of its model at once (``replicas`` of :class:`TrainConfig`): models that
differ only in their seed (initial weights, dropout and corruption draws, the pairs in each batch),
their parameters and optimiser states stacked on a leading axis and updated by one ``jax.vmap``-ed
program, as PureJaxRL trains a population of agents in one program (Lu et al., 2022). Replica ``r``
equals the lone run :func:`replica_config` ``(cfg, r)`` trained on ``batcher.replicas(S)[r]`` (to
float rounding: tested), so the spread between replicas is the spread between seeds, for the cost of
one program: a small model leaves most of an accelerator idle.
"""

from __future__ import annotations

import dataclasses
import hashlib
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

from gmlm_lib.core import checks, records, rng, timing
from gmlm_lib.core.progress import bar as progress_bar
from gmlm_lib.mt import batching, objectives, programs, runfolder, seq2seq
from gmlm_lib.mt.runfolder import DAMAGED, RunFolderBusy, RunFolderError

__all__ = ["TrainConfig", "replica_config", "TRACED", "PROGRAM_FREE", "Program", "FlatUpdate", "clear_programs", "schedule",
           "traced_schedule", "optimizer", "mesh", "make_step", "make_eval", "copy_leaves", "compile_programs",
           "validation_loss",
           "VAL_METRIC", "flops_per_step", "Result", "finished", "program_fields", "fresh_state", "host_batch",
           "run_keys", "batch_sharding", "train",
           "load", "load_replicas", "RunFolderBusy", "RunFolderError", "DAMAGED"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (the model included). ``kind`` is "ar" or "padir".

    PaDIR: ``unmasking_rate`` is the probability that a target position keeps its correct token
    (the rest become random pieces, or ``[MASK]`` with ``fill = "mask"``); ``stages`` = 2 feeds the
    model its own stage-1 argmax [App. L.1.2]; ``length_loss_weight`` weighs the length
    cross-entropy. The learning rate warms up linearly for ``warmup`` steps, then decays by a
    cosine to ``learning_rate * min_lr_ratio`` at ``steps``.

    ``init`` = "teacher" starts a PaDIR model from the AR teacher passed to :func:`train`
    (:func:`gmlm_lib.mt.seq2seq.warm_start`); "random" is the paper's random start [App. L.2].

    ``replicas``: how many models the run trains at once, replica ``r`` with seed ``seed + r``
    (:func:`replica_config`); 1 is a lone run, its state unstacked."""

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
    replicas: int = 1

    def __post_init__(self):
        if self.kind not in ("ar", "padir"):
            raise ValueError(f"TrainConfig.kind must be 'ar' or 'padir'; got {self.kind!r}.")
        if self.model.causal != (self.kind == "ar"):
            raise ValueError(f"TrainConfig.kind = {self.kind!r} needs ModelConfig.causal = {self.kind == 'ar'}.")
        for name in ("steps", "batch_tokens", "checkpoint_every", "log_every", "stages", "warmup", "seed", "replicas"):
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


def replica_config(cfg: TrainConfig, r: int) -> TrainConfig:
    """The lone run that replica ``r`` of ``cfg`` equals: seed ``cfg.seed + r``, one replica (trained on
    replica ``r``'s batcher, :meth:`gmlm_lib.mt.batching.Batcher.replicas`)."""
    r = checks.integer(r, "r", low=0)
    if r >= cfg.replicas:
        raise ValueError(f"replica_config: r = {r} but the run has {cfg.replicas} replica(s) (0 .. {cfg.replicas - 1}).")
    return cfg.replace(seed=cfg.seed + r, replicas=1)


@jax.jit
def _learning_rate(numbers: dict, count):
    """The rate :func:`traced_schedule` gives at update ``count``, for the log: one program for every
    config (its numbers are operands), where the schedule called on the host dispatches one per operation."""
    return traced_schedule(numbers)(count)


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


TRACED = {  # copied to the device (jnp.asarray would compile a program per field)
    "unmasking_rate": lambda cfg: jax.device_put(np.float32(cfg.unmasking_rate)),
    "fill": lambda cfg: jax.device_put(np.bool_(cfg.fill == "mask")),
    "learning_rate": lambda cfg: jax.device_put(np.float32(cfg.learning_rate)),
    "warmup": lambda cfg: jax.device_put(np.float32(max(cfg.warmup, 1))),
    "steps": lambda cfg: jax.device_put(np.float32(cfg.steps)),
    # the end rate over the peak, as optax computes its alpha
    "min_lr_ratio": lambda cfg: jax.device_put(np.float32(cfg.learning_rate * cfg.min_lr_ratio / cfg.learning_rate)),
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
        self.jitted, self.replicas = jitted, cfg.replicas
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
    forgets them). The training loop runs it on the state's flat leaves (:meth:`Program.flat`).

    With ``cfg.replicas`` = S > 1 the update is ``jax.vmap``-ed over a leading replica axis of the state,
    the batch (S, B, L) and the key (S,): one program updates every replica (the loss and its parts
    come back with shape (S,))."""

    def build(cfg):
        def step(params, opt_state, batch, key, numbers):
            def f(p):
                return objectives.loss_fn(nnx.merge(graphdef, p), cfg, batch, key, numbers=numbers)

            (loss, parts), grads = jax.value_and_grad(f, has_aux=True)(params)
            tx = optimizer(cfg, traced_schedule(numbers))
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss, parts

        return FlatUpdate(step if cfg.replicas == 1 else jax.vmap(step, in_axes=(0, 0, 0, 0, None)))

    return _shared("step", graphdef, cfg, build)


VAL_METRIC = "token loss on the val split (nats; the training objective without dropout or label smoothing)"
"""What the validation loss of a run measures (:func:`validation_loss`); the run's record names it."""


def make_eval(graphdef, cfg: TrainConfig) -> Program:
    """The compiled ``(params, batch, key) -> (summed token loss, tokens)`` of ``cfg``'s objective
    without dropout or label smoothing: PaDIR's mean over its stages, the AR loss as it is (the
    length loss left out), over the rows ``batch["rows"]`` marks; :data:`TRACED` as in
    :func:`make_step`. With replicas, the parameters and the key have a leading replica axis, the
    batch is shared, and both outputs have shape (S,)."""

    def build(cfg):
        plain = cfg.replace(label_smoothing=0.0)

        def f(params, batch, key, numbers):
            _, parts = objectives.loss_fn(nnx.merge(graphdef, params), plain, batch, key, dropout=False,
                                          numbers=numbers)
            return parts["token_loss"] * parts["tokens"], parts["tokens"]

        return jax.jit(f if cfg.replicas == 1 else jax.vmap(f, in_axes=(0, None, 0, None)))

    return _shared("eval", graphdef, cfg, build)


def validation_loss(eval_fn, params, batches: list[batching.Batch], key, sharding=None) -> float | np.ndarray:
    """The token loss over every pair of ``batches`` (:meth:`gmlm_lib.mt.batching.Batcher.once`),
    each token weighing the same: :data:`VAL_METRIC`. Batch ``i`` draws PaDIR's corruption from
    ``fold_in(key, i)``, so every checkpoint of a run is scored on the same corrupted inputs and
    their losses differ only by the model. ``eval_fn``: :func:`make_eval`. Replicas (``key`` of shape
    (S,), ``params`` stacked): an (S,) array, one loss a replica."""
    total, tokens = 0.0, 0.0
    for i, b in enumerate(batches):
        arrays = b.arrays() if sharding is None else jax.device_put(b.arrays(), sharding)
        t, n = eval_fn(params, arrays, rng.fold_in(key, i))
        total, tokens = total + np.asarray(t, np.float64), tokens + np.asarray(n, np.float64)
    if np.any(tokens == 0):
        raise ValueError("validation_loss: the validation batches hold no target token.")
    loss = total / tokens
    return float(loss) if np.ndim(loss) == 0 else loss


def run_keys(cfg: TrainConfig, salt: int | None = None):
    """The run's base key (replica ``r``'s from seed ``cfg.seed + r``; stacked to (S,) with replicas),
    with ``salt`` folded in when given."""
    keys = rng.key(cfg.seed) if cfg.replicas == 1 else rng.keys(cfg.seed, cfg.replicas)
    return keys if salt is None else rng.fold_in(keys, salt)


def host_batch(b: batching.Batch | list[batching.Batch]) -> dict:
    """The arrays an update takes (``src``, ``src_mask``, ``tgt``, ``tgt_mask``) of one batch, or of each
    replica's batch stacked on a leading axis (a list: one batch a replica, of one shape)."""
    many = list(b) if isinstance(b, (list, tuple)) else [b]
    one = [dict(src=x.src, src_mask=x.src_mask, tgt=x.tgt, tgt_mask=x.tgt_mask) for x in many]
    return one[0] if not isinstance(b, (list, tuple)) else {k: np.stack([d[k] for d in one]) for k in one[0]}


def batch_sharding(m: Mesh, cfg: TrainConfig) -> NamedSharding:
    """A batch split over the mesh's "data" axis on its rows (after the replica axis, with replicas)."""
    return NamedSharding(m, P("data") if cfg.replicas == 1 else P(None, "data"))


def flops_per_step(cfg: TrainConfig, batcher: batching.Batcher) -> float:
    """Mean FLOPs of one training update over an epoch's batches, from XLA's cost analysis of the
    lowered step for each bucket (forward, backward and optimiser; one device; no compilation; every
    replica's, with replicas).

    The step is lowered for the host's CPU client whatever the default backend: the analysis counts
    the operations of the program before any backend's optimisation, so it is the same number
    everywhere, and the plugin clients of GPUs (the PJRT C API) offer no analysis before compiling
    (``Lowered.cost_analysis()`` is ``None`` there), while compiling each bucket's update a second time
    would cost tens of seconds on a GPU."""
    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        return _flops_per_step(cfg, batcher)


def _flops_per_step(cfg: TrainConfig, batcher: batching.Batcher) -> float:
    graphdef, params, opt_state = _state_shapes(cfg)  # lowering needs shapes, not S initialised replicas
    step = make_step(graphdef, cfg)
    counts: dict[int, int] = {}
    for bucket, _ in batcher.epoch(0):
        counts[bucket] = counts.get(bucket, 0) + 1
    total = 0.0
    for bucket, n in counts.items():
        b = batcher.make(bucket, batcher.groups[bucket][: batcher.batch_size(bucket)])
        if len(b.src) < batcher.batch_size(bucket):  # a bucket smaller than one batch
            b = batcher.make(bucket, np.resize(batcher.groups[bucket], batcher.batch_size(bucket)))
        batch = host_batch(b if cfg.replicas == 1 else [b] * cfg.replicas)
        lowered = step.lower(params, opt_state, batch, run_keys(cfg))
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
    validation) and the step of the returned model. With replicas, the model, the step and the losses
    are replica 0's and the mean over replicas; ``models`` and ``selected_steps`` hold each replica's
    (one item for a lone run)."""

    model: seq2seq.Seq2Seq
    losses: list[tuple[int, float]]
    final_loss: float
    record: dict
    val_losses: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    selected_step: int = 0
    models: list = dataclasses.field(default_factory=list)
    selected_steps: list[int] = dataclasses.field(default_factory=list)


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
    if cfg.replicas > 1 and batcher.replica:
        raise ValueError(f"train: a run of {cfg.replicas} replicas takes replica 0's batcher (it makes the others, "
                         f"Batcher.replicas); got replica {batcher.replica}.")
    if isinstance(teacher, (list, tuple)) and len(teacher) != cfg.replicas:
        raise ValueError(f"train: teacher= holds {len(teacher)} models for {cfg.replicas} replica(s); pass one model "
                         "(every replica starts from it) or one a replica.")
    _check_token_ids(batcher, cfg.model.vocab)
    teacher_fp = _teacher_fingerprint(teacher)
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


def _teacher_fingerprint(teacher) -> str:
    """The teacher's parameter fingerprint (one model, or one a replica: their fingerprints hashed in
    order); empty without a teacher."""
    if teacher is None:
        return ""
    if not isinstance(teacher, (list, tuple)):
        return seq2seq.params_fingerprint(teacher)
    return hashlib.sha256(" ".join(seq2seq.params_fingerprint(t) for t in teacher).encode()).hexdigest()


def _stack(trees: list):
    """Pytrees of one structure stacked leaf by leaf on a new leading axis, on the host (one tree: itself).
    On the host, not with ``jnp.stack``: that would compile one program per leaf shape."""
    return trees[0] if len(trees) == 1 else jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def _unstack(tree, r: int):
    """Replica ``r``'s slice of a stacked pytree, as host arrays (one copy of the whole tree to the host, then
    NumPy views: no program per leaf)."""
    return jax.tree.map(lambda x: x[r], jax.device_get(tree))


def _state_shapes(cfg: TrainConfig) -> tuple:
    """``(graphdef, params, opt_state)`` of ``cfg`` with ``jax.ShapeDtypeStruct`` leaves, stacked on a
    leading axis with replicas: what lowering an update or restoring a checkpoint needs. Abstract
    (``nnx.eval_shape``): no model is initialised only to be overwritten, and nothing is compiled."""
    graphdef, params = nnx.split(nnx.eval_shape(lambda: seq2seq.Seq2Seq(cfg.model, rngs=nnx.Rngs(cfg.seed))))
    opt_state = jax.eval_shape(optimizer(cfg).init, params)
    if cfg.replicas > 1:
        params, opt_state = jax.tree.map(lambda x: jax.ShapeDtypeStruct((cfg.replicas, *x.shape), x.dtype),
                                         (params, opt_state))
    return graphdef, params, opt_state


def fresh_state(cfg: TrainConfig, teacher=None) -> tuple:
    """``(graphdef, params, opt_state)`` of ``cfg`` before its first update: replica ``r`` built with seed
    ``cfg.seed + r`` and warm-started from ``teacher`` (one model for every replica, or one a replica;
    :func:`gmlm_lib.mt.seq2seq.warm_start`), stacked on a leading axis when ``cfg.replicas > 1``."""
    return _initial_state(cfg, teacher, "")[:3]


def _initial_state(cfg: TrainConfig, teacher, teacher_fp: str) -> tuple:
    """The models before their first update (random, or warm-started from ``teacher``) and their
    optimiser states, stacked with replicas: ``(graphdef, params, opt_state, init, parameters)``,
    ``init`` describing the start for the record, ``parameters`` the count of one replica."""
    teachers = teacher if isinstance(teacher, (list, tuple)) else [teacher] * cfg.replicas
    init, tx, params, states = dict(start=cfg.init), optimizer(cfg), [], []
    for r in range(cfg.replicas):
        model = seq2seq.build(cfg.model, cfg.seed + r)
        if teachers[r] is not None:
            model, kept = seq2seq.warm_start(model, teachers[r])
            init.update(teacher_fingerprint=teacher_fp, random_parameters=kept)
        graphdef, p = nnx.split(model)
        params.append(p)
        states.append(_optimizer_init(cfg, tx)(p))
    return graphdef, _stack(params), _stack(states), init, seq2seq.count_params(nnx.merge(graphdef, params[0]))


_OPT_INITS = programs.Programs(kept=8)


def _optimizer_init(cfg: TrainConfig, tx: optax.GradientTransformation) -> Callable:
    """``tx.init`` (``tx = optimizer(cfg)``) as one compiled program for every config of one optimiser:
    run op by op it dispatches a program per parameter shape; the rates and clipping, which differ
    between configs, do not enter an optimiser's initial state."""
    return _OPT_INITS.get((cfg.optimizer, cfg.weight_decay, cfg.clip_norm), lambda: jax.jit(tx.init))


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
    call resumes from) and each replica's best checkpoint so far among those still in the folder.
    A row of ``val.jsonl`` holds ``val_loss`` (with replicas their mean, and ``val_losses``, one a
    replica)."""

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
        self.batches, self.sharding, self.replicas = val.once(), sharding, cfg.replicas
        self.eval_fn = make_eval(graphdef, cfg)
        self.key = run_keys(cfg, VAL_SALT)
        self.path = run_dir / "val.jsonl"
        runfolder.keep_metrics(self.path, start)
        self.rows = runfolder.read_metrics(self.path)
        present = set(steps_present)
        self.best = [min(((self._loss(row, r), row["step"]) for row in self.rows if row["step"] in present),
                         default=None) for r in range(self.replicas)]

    def _loss(self, row: dict, r: int) -> float:
        return row["val_loss"] if self.replicas == 1 else row["val_losses"][r]

    def score(self, step: int, params, wall_s: float) -> np.ndarray:
        """Score the parameters of update ``step`` and log them (before their checkpoint is written,
        so that a logged score never lacks the checkpoint a resumed call kept); one loss a replica."""
        loss = np.atleast_1d(validation_loss(self.eval_fn, params, self.batches, self.key, self.sharding))
        row = dict(step=step, val_loss=float(loss.mean()), wall_s=wall_s)
        if self.replicas > 1:
            row["val_losses"] = [float(x) for x in loss]
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        self.rows.append(row)
        self.best = [(float(x), step) if b is None or x < b[0] else b for x, b in zip(loss, self.best)]
        return loss

    def keep(self, steps) -> set[int]:
        """The checkpoints to keep: the newest two (to resume from) and each replica's best."""
        return set(sorted(steps)[-2:]) | {b[1] for b in self.best if b is not None}

    def selected(self, last: int) -> list[int]:
        """Each replica's selected step (``last`` where nothing was scored)."""
        return [last if b is None else b[1] for b in self.best]

    def summary(self) -> dict:
        best, last = self.best[0], self.rows[-1] if self.rows else None
        out = dict(metric=VAL_METRIC, pairs=self.pairs, fingerprint=self.fingerprint,
                   selected_step=best[1] if best is not None else None,
                   selected_loss=best[0] if best is not None else None,
                   last_step=last["step"] if last else None, last_loss=last["val_loss"] if last else None)
        if self.replicas > 1:  # the scalars above are replica 0's (the last loss the mean)
            out.update(selected_steps=[b[1] if b is not None else None for b in self.best],
                       selected_losses=[b[0] if b is not None else None for b in self.best],
                       last_losses=last["val_losses"] if last else None)
        return out

    def losses(self) -> list[tuple[int, float]]:
        return [(r["step"], r["val_loss"]) for r in self.rows]


def _train_locked(cfg, batcher, run_dir, devices, progress, on_step, teacher, val) -> Result:
    m, fingerprint, teacher_fp = _open_run(cfg, batcher, run_dir, devices, teacher)
    if val is not None and val.multiple % m.size:
        raise ValueError(f"the val Batcher's multiple = {val.multiple} must be a multiple of the {m.size} devices "
                         "(batch it as the training data).")
    replicated, sharded = NamedSharding(m, P()), batch_sharding(m, cfg)
    graphdef, params, opt_state, init, parameters = _initial_state(cfg, teacher, teacher_fp)
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
        validation = None if val is None else _Validation(cfg, val, run_dir, graphdef, NamedSharding(m, P("data")),
                                                          start, manager.all_steps(), prev)
    except ValueError:
        manager.close()
        raise
    if start == cfg.steps and _record_finished(prev, cfg.steps):
        # finished before: reuse it as it is (its record names the code and machine that trained it)
        return _result(cfg, run_dir, manager, graphdef, params, opt_state, validation, prev.get("final_loss"), prev,
                       runfolder.losses(metrics))
    params, opt_state = jax.device_put((params, opt_state), replicated)
    runfolder.keep_metrics(metrics, start)
    record = runfolder.RunRecord(record_path, cfg, batcher, start, init, fingerprint, parameters, prev)
    if prev and prev.get("done", prev.get("steps")) != start:
        record.write(start, None)  # the record names the checkpoint resumed from, not a later one that was lost
    loop = _Loop(cfg, batcher, run_dir, manager, record, validation, sharded, on_step, start)
    if start < cfg.steps:
        # wall seconds compiling the run's programs before its first update (part of the segment's wall_s)
        record.segment["compile_s"] = compile_programs(loop.step_fn(graphdef), batcher, (params, opt_state), sharded,
                                                       loop.base_key, validation)
    bar = progress_bar(range(start, cfg.steps), progress=progress, initial=start, total=cfg.steps,
                       desc=f"train {cfg.kind}", leave=False, mininterval=10)
    with metrics.open("a") as log:
        params, opt_state = loop.run(bar, log, graphdef, params, opt_state, start)
    final_loss = loop.loss if start < cfg.steps else None
    if final_loss is None:  # a call that trained nothing (the last checkpoint is the final one, its record lost)
        final_loss = next((l for t, l in runfolder.losses(metrics) if t == cfg.steps), None)
    record.validation = validation.summary() if validation is not None else None
    if cfg.replicas > 1:  # each replica's final loss (from the metrics when this call trained nothing)
        last = next((r.get("losses") for r in runfolder.read_metrics(metrics) if r["step"] == cfg.steps), None)
        record.extra["final_losses"] = loop.replica_losses if start < cfg.steps else last
    rec = record.write(cfg.steps, final_loss)
    return _result(cfg, run_dir, manager, graphdef, params, opt_state, validation, final_loss, rec,
                   loop.losses if start < cfg.steps else runfolder.losses(metrics))


def _result(cfg, run_dir, manager, graphdef, params, opt_state, validation, final_loss, rec, losses) -> Result:
    """The finished run's :class:`Result`: each replica's selected checkpoint (the last one without
    validation), restored where it is not the state at hand; closes ``manager``."""
    steps = validation.selected(cfg.steps) if validation is not None else [cfg.steps] * cfg.replicas
    chosen = {}
    for step in set(steps) - {cfg.steps}:
        live = {"params": params, "opt_state": opt_state}  # a target of the right structure
        chosen[step] = runfolder.restore_step(manager, run_dir, step, live, "selected on the val split")["params"]
    manager.close()
    host = {step: jax.device_get(p) for step, p in {**chosen, cfg.steps: params}.items() if step in steps}
    # on the default device, uncommitted (not on the training mesh): a decoder then runs where its
    # inputs are, and no call copies the parameters from the host again
    models = [nnx.merge(graphdef, jax.device_put(host[s] if cfg.replicas == 1 else _unstack(host[s], r)))
              for r, s in enumerate(steps)]
    return Result(models[0], losses, final_loss, rec, validation.losses() if validation is not None else [],
                  steps[0], models, steps)


class _Loop:
    """The updates of one call of :func:`train`, from its first step to ``cfg.steps``: batches (each
    replica's stacked), keys, the losses read one update late, the checkpoints with their digests and
    val scores, and the stop on a non-finite number."""

    def __init__(self, cfg, batcher, run_dir, manager, record, validation, sharded, on_step, start):
        self.cfg, self.run_dir, self.manager, self.record = cfg, run_dir, manager, record
        self.validation, self.sharded, self.on_step = validation, sharded, on_step
        self.batchers = batcher.replicas(cfg.replicas) if cfg.replicas > 1 else [batcher]
        self.base_key, self.numbers = run_keys(cfg), {name: TRACED[name](cfg) for name in _SCHEDULE}
        self.losses, self.loss, self.replica_losses, self.log, self.bar = [], float("nan"), None, None, None
        self.digests = {k: v for k, v in runfolder.checkpoint_digests(run_dir).items() if int(k) <= start}

    def step_fn(self, graphdef) -> Program:
        return make_step(graphdef, self.cfg)

    def last_good(self) -> int:
        return max(self.digests, key=int, default=0)

    def stop(self, done: int, what: str) -> FloatingPointError:
        self.manager.close()
        return _nonfinite(self.cfg, self.run_dir, done, what, self.last_good())

    def settle(self, done: int, loss_arr, parts) -> float:
        """Read update ``done``'s loss (waiting for it), stop on a non-finite one, log it."""
        each = np.atleast_1d(np.asarray(loss_arr, np.float64))
        if not np.all(np.isfinite(each)):
            bad = int(np.flatnonzero(~np.isfinite(each))[0])
            raise self.stop(done, f"the loss is {each[bad]}" + (f" (replica {bad})" if self.cfg.replicas > 1 else ""))
        loss = float(each.mean())
        self.replica_losses = [float(x) for x in each]
        if done % self.cfg.log_every == 0 or done == self.cfg.steps:
            self.losses.append((done, loss))
            row = dict(step=done, loss=loss, lr=float(_learning_rate(self.numbers, np.float32(done))),
                       wall_s=time.perf_counter() - self.record.t0,
                       **{k: float(np.mean(np.asarray(v))) for k, v in parts.items()})
            if self.cfg.replicas > 1:
                row["losses"] = self.replica_losses
            self.log.write(json.dumps(row) + "\n")
            self.log.flush()
            self.bar.set_postfix(loss=f"{loss:.3f}")
        if self.on_step is not None:
            self.on_step(done, loss)
        self.loss = loss
        return loss

    def checkpoint(self, done: int, params, opt_state) -> None:
        """Check, score (with validation) and save the state after update ``done``, with its digest."""
        state = {"params": params, "opt_state": opt_state}
        host = jax.device_get(state)  # one copy: the finiteness check and the digest read it
        if not runfolder.all_finite(host):
            raise self.stop(done, "the parameters hold non-finite numbers")
        v = self.validation
        if v is not None:
            val_loss = np.atleast_1d(v.score(done, params, time.perf_counter() - self.record.t0))
            if not np.all(np.isfinite(val_loss)):
                raise self.stop(done, f"the validation loss is {val_loss.tolist() if self.cfg.replicas > 1 else val_loss[0]}")
        runfolder.save_checkpoint(self.manager, done, state, self.run_dir, self.last_good())
        if v is not None:
            runfolder.prune(self.manager, v.keep(self.manager.all_steps()))
            self.record.validation = v.summary()
        self.digests = {k: d for k, d in self.digests.items() if int(k) in set(self.manager.all_steps())}
        self.digests[str(done)] = runfolder.digest(host)
        records.write_record(self.run_dir / "checkpoint_digests.json", self.digests)
        if done < self.cfg.steps:
            self.record.write(done, None)

    def run(self, bar, log, graphdef, params, opt_state, start: int) -> tuple:
        """Run updates ``start .. cfg.steps``; returns the final ``(params, opt_state)``.

        Update t's loss is read after update t + 1 is dispatched: the host prepares the next batch
        while the device computes (at a checkpoint and at the end the current update is read first, so
        a non-finite one is never saved). The loop carries the state's flat leaves (:meth:`Program.flat`),
        rebuilt into parameters and optimiser state only at a checkpoint and at the end."""
        self.bar, self.log, cfg = bar, log, self.cfg
        pending = None
        leaves, treedef = jax.tree.flatten((params, opt_state))
        update = self.step_fn(graphdef).flat(treedef)
        for step in bar:
            parts = [b.at(step) for b in self.batchers]
            batch = jax.device_put(host_batch(parts if cfg.replicas > 1 else parts[0]), self.sharded)
            leaves, loss_arr, aux = update(leaves, batch, rng.fold_in(self.base_key, step))
            done = step + 1
            self.record.tokens += sum(int(b.tgt_mask.sum()) + int(b.src_mask.sum()) for b in parts)
            if pending is not None:
                self.settle(*pending)
            pending = (done, loss_arr, aux)
            if done % cfg.checkpoint_every == 0 or done == cfg.steps:
                self.settle(*pending)
                pending = None
                params, opt_state = jax.tree.unflatten(treedef, leaves)  # the next update donates these arrays
                self.checkpoint(done, params, opt_state)
        return jax.tree.unflatten(treedef, leaves)


@jax.jit
def copy_leaves(leaves: list) -> list:
    """Fresh copies of ``leaves`` (an update donates its state), in one program: ``jnp.copy`` leaf by leaf
    compiles one a shape."""
    return [jnp.copy(x) for x in leaves]


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
    replicas = step_fn.replicas
    for bucket, ix in batcher.groups.items():
        b = batcher.make(bucket, np.resize(ix, batcher.batch_size(bucket)))
        batch = jax.device_put(host_batch(b if replicas == 1 else [b] * replicas), sharding)
        # the copy is made in the call's thread, so at most one per running thread is alive
        calls.append(lambda batch=batch: update(copy_leaves(leaves), batch, key)[1])
    if validation is not None:
        shapes = {}
        for b in validation.batches:
            shapes.setdefault((b.src.shape, b.tgt.shape), b)
        for b in shapes.values():
            arrays = jax.device_put(b.arrays(), validation.sharding)  # the val batches are shared by the replicas
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
    """The config and the model of a run folder (replica 0's of a run of replicas: :func:`load_replicas`)."""
    cfg, models = load_replicas(run_dir)
    return cfg, models[0]


def load_replicas(run_dir: str | pathlib.Path) -> tuple[TrainConfig, list[seq2seq.Seq2Seq]]:
    """The config and the models of a run folder, one a replica: each the checkpoint selected on the val
    split when the run was validated and has finished (``run.json``'s ``validation``; verified, and
    refused when it is missing or damaged), else the newest checkpoint that verifies (a damaged newer
    one is reported in a warning and left where it is). A folder that does not exist, is a file, lacks
    ``config.json`` or has no usable checkpoint is refused in one line naming what and the fix."""
    run_dir = runfolder.folder(run_dir)
    cfg = _read_config(run_dir)
    graphdef, params, opt_state = _state_shapes(cfg)  # a run of replicas restores into abstract stacked arrays
    ckpt = run_dir / "checkpoints"
    if not ckpt.is_dir() or not any(p.name.isdigit() for p in ckpt.iterdir()):
        raise RunFolderError(f"{run_dir} has no checkpoint in checkpoints/ (its training never reached its first "
                             "checkpoint, or the folder was copied without it); train the run (train() resumes "
                             "there), or pass the folder that holds it.")
    target = {"params": params, "opt_state": opt_state}
    record_path = run_dir / "run.json"
    record = runfolder.read_json(record_path, "the run's provenance record") if record_path.exists() else {}
    validation = record.get("validation") or {}
    selected = validation.get("selected_steps") or [validation.get("selected_step")] * cfg.replicas
    if None not in selected and record.get("done") == cfg.steps:
        manager = ocp.CheckpointManager(ckpt)
        try:
            restored = {step: runfolder.restore_step(manager, run_dir, step, target, "selected on the val split")["params"]
                        for step in sorted(set(selected))}
        finally:
            manager.close()
        chosen = [restored[step] for step in selected]
    else:
        step, state, manager = runfolder.restore(lambda: ocp.CheckpointManager(ckpt), run_dir, target,
                                                 move_damaged=False)
        manager.close()
        if state is None:
            raise RunFolderError(f"every checkpoint in {ckpt} is damaged (see the warnings); train the run again in a "
                                 "fresh folder.")
        chosen = [state["params"]] * cfg.replicas
    if cfg.replicas == 1:
        return cfg, [nnx.merge(graphdef, chosen[0])]
    return cfg, [nnx.merge(graphdef, jax.device_put(_unstack(p, r))) for r, p in enumerate(chosen)]
