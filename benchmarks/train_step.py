"""Where a training update's time goes, and what each of the trainer's savings buys, on this machine.

    python benchmarks/train_step.py                        # AR and PaDIR, the PaDIR chapter's model and data
    python benchmarks/train_step.py --kinds padir --rounds 5 --json train_step.json
    python benchmarks/train_step.py --preset multi30k_gpu       # the GPU recipe's model (bf16) on a GPU

One run times one update of the PaDIR chapter's model (``--preset``, default ``"multi30k_cpu"``:
``gmlm_lib.mt.config.get()``) on Multi30k en-de batches with each saving on and off, and prints real
(unpadded) source and target tokens per second, and that figure per GFLOP/s of the float32 matmul
peak measured in the same run (so machines of different speed compare). The savings:

* ``late read``: the trainer reads update t's loss after dispatching update t + 1, so the host
  prepares the next batch while the device computes, instead of waiting for every update;
* ``hash dropout``: dropout masks from a counter hash (``ModelConfig.dropout_rng = "hash"``)
  instead of one Threefry hash per element (``"threefry"``);
* ``fine buckets``: length buckets every 2-8 tokens (``FINE``) instead of ``COARSE``, so less of
  each batch is padding (Multi30k's sentences are short: most fall below 24 pieces).

Timing: for every length bucket, a chain of ``--chain`` updates on a real batch of that bucket
(the batch assembled on the host and sent to the device inside the chain, as the trainer does),
its fastest time over ``--rounds`` rounds in which all settings take turns, so a slow spell of a
shared machine does not land on one setting only. An epoch's time is then the sum over its
batches of their bucket's update time, and tokens/s the epoch's real tokens over it. Compilation
is excluded (the trainer compiles each bucket once per run).
"""

from __future__ import annotations

import argparse
import json
import os
import time

COARSE = (16, 24, 32, 48, 64)
FINE = (10, 12, 14, 16, 18, 20, 24, 28, 32, 40, 48, 64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", nargs="+", choices=["ar", "padir"], default=["ar", "padir"])
    ap.add_argument("--preset", default="multi30k_cpu", help="a preset of gmlm_lib.mt.config.PRESETS, or auto")
    ap.add_argument("--sentences", type=int, default=0, help="training pairs used (0: all of them)")
    ap.add_argument("--coarse", type=int, nargs="+", default=list(COARSE), help="the coarse length buckets")
    ap.add_argument("--fine", type=int, nargs="+", default=list(FINE), help="the fine length buckets")
    ap.add_argument("--data-dir", default=os.environ.get("GMLM_MULTI30K_DIR"),
                    help="Multi30k folder (default: GMLM_MULTI30K_DIR, else the download cache)")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds; each setting keeps its fastest")
    ap.add_argument("--chain", type=int, default=3, help="updates timed back to back per bucket and round")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.rounds < 1 or args.chain < 2 or args.sentences < 0:
        ap.error("--rounds must be >= 1, --chain >= 2 (a late read needs a next update) and --sentences >= 0")
    if sorted(set(args.coarse)) != args.coarse or sorted(set(args.fine)) != args.fine or min(args.coarse + args.fine) < 1:
        ap.error("--coarse and --fine must be increasing lists of lengths >= 1")

    import jax  # after parsing: --help does not start JAX
    from flax import nnx

    from gmlm_lib.core import records, timing
    from gmlm_lib.mt import batching, config, corpus, seq2seq, training
    from gmlm_lib.mt import vocab as V

    start = time.time()
    try:
        exp = config.get(args.preset)
    except ValueError as err:
        ap.error(str(err))
    pairs = corpus.multi30k("train", exp.src_lang, exp.tgt_lang, root=args.data_dir)
    if args.sentences:
        pairs = pairs.take(args.sentences)
    vocab = V.train(pairs.src + pairs.tgt, exp.vocab_size)
    src, tgt = vocab.encode(pairs.src), vocab.encode(pairs.tgt)
    fine, coarse = tuple(args.fine), tuple(args.coarse)
    # the settings: (dropout rng, buckets, read every loss)
    settings = {
        "before (all off)": ("threefry", coarse, True),
        "late read only": ("threefry", coarse, False),
        "hash dropout only": ("hash", coarse, True),
        "fine buckets only": ("threefry", fine, True),
        "after (all on)": ("hash", fine, False),
    }
    results, peaks = [], []
    for kind in args.kinds:
        base = exp.train_config(kind, vocab.size).replace(replicas=1)  # one model's update, whatever the preset's seeds
        units = {}  # (rng, buckets) -> {bucket: (step fn, state, batch indices, batcher)}
        for rng, buckets, _ in settings.values():
            if (rng, buckets) in units:
                continue
            cfg = base.replace(dropout_rng=rng, buckets=buckets)
            batcher = batching.Batcher(src, tgt, cfg.batch_tokens, seed=cfg.seed, buckets=buckets,
                                       multiple=len(jax.devices()))
            graphdef, params = nnx.split(seq2seq.build(cfg.model, cfg.seed))
            tx = training.optimizer(cfg)
            step = training.make_step(graphdef, cfg)
            first = {}
            for bucket, ix in batcher.epoch(0):
                first.setdefault(bucket, ix)
            per = {}
            t0 = time.perf_counter()
            for bucket, ix in first.items():
                state = [params, tx.init(params)]
                state[0] = jax.tree.map(lambda x: x.copy(), state[0])  # donated: each bucket owns its copy
                b = batcher.make(bucket, ix)
                out = step(*state, dict(src=b.src, src_mask=b.src_mask, tgt=b.tgt, tgt_mask=b.tgt_mask),
                           jax.random.key(0))
                float(out[2])
                leaves, treedef = jax.tree.flatten(tuple(out[:2]))
                per[bucket] = [step.flat(treedef), leaves, ix, batcher, bucket]  # the loop's flat call
            print(f"{kind}: compiled {len(per)} buckets with dropout_rng={rng} in {time.perf_counter() - t0:.0f} s",
                  flush=True)
            units[(rng, buckets)] = per

        def chain(unit, every: bool) -> float:
            update, _, ix, batcher, bucket = unit
            t0 = time.perf_counter()
            pending = None
            for i in range(args.chain):
                b = batcher.make(bucket, ix)
                batch = jax.device_put(dict(src=b.src, src_mask=b.src_mask, tgt=b.tgt, tgt_mask=b.tgt_mask))
                unit[1], loss, _ = update(unit[1], batch, jax.random.key(i))
                if every:
                    float(loss)
                elif pending is not None:
                    float(pending)
                pending = loss
            float(loss)
            return (time.perf_counter() - t0) / args.chain

        best = {name: {} for name in settings}
        for r in range(args.rounds):
            peaks.append(timing.matmul_peak(min_time=min(1.0, 0.1 * args.chain), dtype=exp.compute_dtype))
            for name, (rng, buckets, every) in settings.items():
                for bucket, unit in units[(rng, buckets)].items():
                    t = chain(unit, every)
                    best[name][bucket] = min(best[name].get(bucket, float("inf")), t)
            print(f"{kind}: round {r + 1}/{args.rounds} done", flush=True)
        for name, (rng, buckets, every) in settings.items():
            batcher = next(iter(units[(rng, buckets)].values()))[3]
            real = seconds = 0.0
            for bucket, ix in batcher.epoch(0):
                b = batcher.make(bucket, ix)
                real += float(b.src_mask.sum() + b.tgt_mask.sum())
                seconds += best[name][bucket]
            results.append(dict(kind=kind, setting=name, dropout_rng=rng, buckets=list(buckets), every_read=every,
                                batches_per_epoch=len(batcher), epoch_s=seconds, tokens_per_s=real / seconds,
                                step_ms={str(k): 1e3 * v for k, v in best[name].items()}))
    peak = max(peaks)
    print(f"\nmatmul peak measured in this run: {peak / 1e9:.0f} GFLOP/s ({exp.compute_dtype}, 2048 x 2048, fastest of "
          f"{len(peaks)}); {json.dumps(timing.machine())}")
    print(f"{'kind':<6}{'setting':<20}{'epoch s':>9}{'tokens/s':>10}{'per GFLOP/s':>13}{'x before':>10}")
    for r in results:
        r["tokens_per_gflop"] = r["tokens_per_s"] / (peak / 1e9)
        before = next(x for x in results if x["kind"] == r["kind"] and x["setting"].startswith("before"))
        r["speedup"] = r["tokens_per_s"] / before["tokens_per_s"]
        print(f"{r['kind']:<6}{r['setting']:<20}{r['epoch_s']:>9.0f}{r['tokens_per_s']:>10.0f}"
              f"{r['tokens_per_gflop']:>13.2f}{r['speedup']:>10.2f}")
    if args.json:
        record = dict(results=results, peak_flops=peak, params=vars(args), machine=timing.machine(),
                      commit=records.short_commit(records.git_commit()), wall_s=time.time() - start)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
