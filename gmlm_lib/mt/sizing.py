"""Fitting a run's number of updates to a wall-time budget on the device at hand.

A preset names the updates its recipe wants (``ar_steps``, ``padir_steps``); ``train_seconds`` caps
the time they may take. Before anything trains, :func:`updates_seconds` times the updates of each
model the run trains as the training loop runs them (all compiled first, side by side, so
compilation is not counted), and :func:`factor` gives the one factor by which every model's
updates (and its warm-up and checkpoint
interval, so the schedule keeps its shape and the val split still scores as many checkpoints)
shrink to fit. A fast device keeps the recipe (factor 1); a slower one trains proportionally less,
and says so: the run's record names the budget, the measured seconds per update and the factor.
A run is sized once:
:func:`fit` keeps its decision in the run folder (``sizing.json``), so the chapters that reuse the
folder, or a resumed run, train exactly the same updates. A chapter that trains several runs one after
another (the ablations' variants) compiles their updates side by side first, with
:func:`compile_updates`, so that no loop stops to compile.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import pathlib
import time

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from gmlm_lib.core import records, rng, timing
from gmlm_lib.mt import batching, training

__all__ = ["update_seconds", "updates_seconds", "compile_updates", "factor", "scaled", "fit", "fit_config", "SIZING_FILE"]

SIZING_FILE = "sizing.json"
"""Where :func:`fit` keeps a run folder's sizing decision."""


def update_seconds(cfg: training.TrainConfig, batcher: batching.Batcher, *, repeats: int = 10) -> dict:
    """Seconds one update of ``cfg`` takes on this machine's devices (:func:`updates_seconds` for
    one model)."""
    return updates_seconds({"": (cfg, batcher)}, repeats=repeats)[""]


def updates_seconds(models: dict, *, repeats: int = 10) -> dict:
    """Seconds one update takes on this machine's devices, for each ``name: (cfg, batcher)`` of
    ``models``, on a batch of the bucket that the batcher's epochs use most (every batch holds about
    ``batch_tokens`` padded tokens, so the buckets cost about the same). All updates are compiled
    first, side by side (:func:`gmlm_lib.core.timing.compile_in_parallel`; ``compile_s``, their wall
    seconds, the same for every model), then each runs ``repeats`` updates back to back as the
    training loop runs them (the batch sent from the host, the state's flat leaves,
    :meth:`gmlm_lib.mt.training.Program.flat`, and each loss read after the next update is
    dispatched): ``update_s`` is their wall time over ``repeats``, what an update costs the loop,
    not one update waited for alone (which also pays the host's dispatch the loop overlaps). The
    models start from random weights whatever ``cfg.init`` says (the weights do not change the time);
    nothing is written anywhere. Returns ``name: dict(update_s, compile_s, bucket, batch)``."""
    if repeats < 1:
        raise ValueError(f"updates_seconds(repeats=...) must be >= 1; got {repeats!r}.")
    jobs = _update_jobs(models)
    compile_s = _compile_updates(jobs)
    out = {}
    for name, j in jobs.items():
        update, leaves, pending, sharded = j["update"], j["leaves"], None, j["sharding"]
        leaves, loss, _ = update(leaves, jax.device_put(j["host"], sharded), j["key"])  # a first call, untimed
        _read(loss)
        t0 = time.perf_counter()
        for i in range(repeats):
            leaves, loss, _ = update(leaves, jax.device_put(j["host"], sharded), rng.fold_in(j["key"], i))
            if pending is not None:
                _read(pending)
            pending = loss
        _read(loss)
        out[name] = dict(update_s=(time.perf_counter() - t0) / repeats, compile_s=round(compile_s, 3),
                         bucket=j["bucket"], batch=j["size"])
    return out


def _read(loss) -> float:
    """An update's loss read on the host (waiting for it, as the training loop does): one loss, or the
    sum of a run of replicas' (S,)."""
    return float(loss) if np.ndim(loss) == 0 else float(np.asarray(loss).sum())


def _common_bucket(batcher: batching.Batcher) -> int:
    """The length bucket the batcher's epochs use most (the longer one on a tie)."""
    counts: dict[int, int] = {}
    for bucket, _ in batcher.epoch(0):
        counts[bucket] = counts.get(bucket, 0) + 1
    return max(counts, key=lambda b: (counts[b], b))


def _update_jobs(models: dict, buckets: dict | None = None) -> dict:
    """For each ``name: (cfg, batcher)``: the update as the training loop calls it (on the flat leaves
    of a fresh state, replicated over :func:`gmlm_lib.mt.training.mesh`), that state's leaves, a
    batch as the host sends it, of the bucket ``buckets[name]`` (default: the one the batcher's
    epochs use most), and the key."""
    m = training.mesh()
    jobs = {}
    for name, (cfg, batcher) in models.items():
        bucket = (buckets or {}).get(name) or _common_bucket(batcher)
        ix = np.resize(batcher.groups[bucket], batcher.batch_size(bucket))
        b = batcher.make(bucket, ix)
        host = training.host_batch(b if cfg.replicas == 1 else [b] * cfg.replicas)  # what the loop sends
        graphdef, params, opt_state = training.fresh_state(cfg)
        leaves, treedef = jax.tree.flatten(jax.device_put((params, opt_state), NamedSharding(m, P())))
        jobs[name] = dict(update=training.make_step(graphdef, cfg).flat(treedef), leaves=leaves, host=host,
                          key=training.run_keys(cfg), bucket=int(bucket), size=len(ix),
                          sharding=training.batch_sharding(m, cfg))
    return jobs


def _compile_updates(jobs: dict) -> float:
    return timing.compile_in_parallel(
        [lambda j=j: j["update"](training.copy_leaves(j["leaves"]), jax.device_put(j["host"], j["sharding"]),
                                 j["key"])[1] for j in jobs.values()])


def compile_updates(models: dict) -> dict:
    """Compile the update of every ``name: (cfg, batcher)`` of ``models`` now, side by side
    (:func:`gmlm_lib.core.timing.compile_in_parallel`), for every length bucket of its batcher, as the
    training loop will call it: a :func:`gmlm_lib.mt.training.train` of that config and batcher in
    this process then starts without compiling its update. Configs that differ only in fields the
    update does not depend on (:data:`gmlm_lib.mt.training.PROGRAM_FREE`: the traced numbers, the
    data's settings) share one program a batch shape, compiled once. Returns ``dict(programs,
    compile_s)``: the distinct programs and the wall seconds. Why: a chapter that trains variants one
    after another (the ablations) otherwise compiles each variant's update when its loop starts, one
    after another; on a GPU each takes tens of seconds and the updates of a variant little more."""
    distinct: dict = {}
    for name, (cfg, batcher) in models.items():
        program = training.program_fields(cfg)
        for bucket in batcher.groups:
            distinct.setdefault((program, bucket, batcher.batch_size(bucket)), (f"{name} @ {bucket}", cfg, batcher, bucket))
    chosen = {label: (cfg, batcher) for label, cfg, batcher, _ in distinct.values()}
    jobs = _update_jobs(chosen, {label: bucket for label, _, _, bucket in distinct.values()})
    return dict(programs=len(jobs), compile_s=round(_compile_updates(jobs), 3))


def factor(seconds: float, planned: dict[str, tuple[int, float]]) -> float:
    """The factor (at most 1) by which every model's updates shrink so that they take at most
    ``seconds``: ``planned`` maps a model to ``(updates, seconds per update)``. ``seconds`` = 0 means
    no budget (factor 1)."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not seconds >= 0 \
            or not math.isfinite(seconds):
        raise ValueError(f"train_seconds must be a finite number >= 0 (0: no budget); got {seconds!r}.")
    for name, (steps, per) in planned.items():
        if steps < 0 or not per > 0 or not math.isfinite(per):
            raise ValueError(f"factor: model {name!r} needs updates >= 0 and a positive time per update; got "
                             f"{steps!r} updates at {per!r} s.")
    need = sum(steps * per for steps, per in planned.values())
    return 1.0 if seconds == 0 or need <= seconds else seconds / need


def scaled(steps: int, warmup: int, checkpoint_every: int, f: float) -> dict:
    """``steps`` updates with ``warmup`` and ``checkpoint_every`` shrunk by ``f`` together: the updates
    rounded down (at least 2), the warm-up and the checkpoint interval in proportion (at least 1; the
    warm-up below the updates), so the schedule keeps its shape and the run as many checkpoints."""
    if not 0.0 < f <= 1.0:
        raise ValueError(f"scaled: the factor must be in (0, 1]; got {f!r}.")
    if f == 1.0:
        return dict(steps=steps, warmup=warmup, checkpoint_every=checkpoint_every)
    new = max(2, int(steps * f))
    return dict(steps=new, warmup=min(max(1, round(warmup * f)) if warmup else 0, new - 1),
                checkpoint_every=max(1, min(new, round(checkpoint_every * f))))


def fit(exp, vocab_size: int, batchers: dict, root: str | pathlib.Path) -> tuple:
    """The experiment ``exp`` (:class:`gmlm_lib.mt.config.Experiment`) with ``ar_steps``,
    ``padir_steps``, ``warmup`` and ``checkpoint_every`` shrunk to fit ``exp.train_seconds`` on this
    device, and the record of the decision. ``batchers`` maps each model kind the run trains
    ("ar", "ar_shallow", "padir"; PaDIR counted twice, raw and distilled) to its training batches.
    No budget (0): ``exp`` as it is. The decision is kept in ``root/sizing.json``: a later call with the
    same experiment reuses it without timing again (the chapters that reuse a run folder train what
    the first one decided); one with another experiment is refused, as the trainer refuses another
    configuration."""
    root = pathlib.Path(root)
    path = root / SIZING_FILE
    asked = dict(train_seconds=exp.train_seconds, ar_steps=exp.ar_steps, padir_steps=exp.padir_steps,
                 warmup=exp.warmup, checkpoint_every=exp.checkpoint_every)
    if path.exists():
        from gmlm_lib.mt import runfolder

        kept = runfolder.read_json(path, "the run's sizing decision")
        if kept.get("asked") != asked:
            raise ValueError(f"{path} was decided for other settings ({kept.get('asked')}; now {asked}); use a new "
                             "run folder for a new budget or recipe.")
        return dataclasses.replace(exp, **kept["chosen"]), kept
    if not exp.train_seconds:
        return exp, dict(asked=asked, factor=1.0, chosen={}, measured={}, planned_s=None)
    measured = updates_seconds({kind: (exp.train_config(kind, vocab_size), data) for kind, data in batchers.items()})
    planned = {kind: (exp.padir_steps * 2 if kind == "padir" else exp.ar_steps, m["update_s"])
               for kind, m in measured.items()}
    f = factor(exp.train_seconds, planned)
    ar = scaled(exp.ar_steps, exp.warmup, exp.checkpoint_every, f)
    padir = scaled(exp.padir_steps, exp.warmup, exp.checkpoint_every, f)
    # one warm-up and one checkpoint interval serve both kinds (Experiment holds one of each)
    chosen = dict(ar_steps=ar["steps"], padir_steps=padir["steps"], warmup=min(ar["warmup"], padir["warmup"]),
                  checkpoint_every=min(ar["checkpoint_every"], padir["checkpoint_every"])) if f < 1.0 else {}
    record = dict(asked=asked, factor=f, chosen=chosen, measured=measured, models=sorted(batchers),
                  planned_s=sum(s * p for s, p in planned.values()), hardware=records.hardware_summary())
    root.mkdir(parents=True, exist_ok=True)
    records.write_record(path, record)
    return dataclasses.replace(exp, **chosen), json.loads(json.dumps(record))


def fit_config(cfg: training.TrainConfig, batcher: batching.Batcher, models: int,
               seconds: float) -> tuple[training.TrainConfig, dict]:
    """``cfg`` with its updates shrunk (warm-up, checkpoint and log intervals in proportion) so that
    ``models`` runs like it (variants that cost about as much an update) take at most ``seconds`` on
    this device, its updates timed on ``batcher`` first (:func:`update_seconds`); no budget (0):
    ``cfg`` as it is, nothing timed. The record: ``asked`` and ``used`` updates a model, ``seconds``,
    ``update_s`` (``None`` when not timed) and ``factor``."""
    if models < 1:
        raise ValueError(f"fit_config(models=...) must be >= 1; got {models!r}.")
    record = dict(asked=cfg.steps, used=cfg.steps, seconds=seconds, update_s=None, factor=1.0)
    if not seconds:
        factor(seconds, {})  # checks the budget
        return cfg, record
    per = update_seconds(cfg, batcher)["update_s"]
    f = factor(seconds, {"every model": (models * cfg.steps, per)})
    if f < 1.0:
        new = scaled(cfg.steps, cfg.warmup, cfg.checkpoint_every, f)
        cfg = cfg.replace(**new, log_every=max(1, new["steps"] // 50))
    return cfg, dict(record, used=cfg.steps, update_s=per, factor=f)
