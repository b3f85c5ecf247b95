"""What one PaDIR refinement pass costs against one cached AR step, at batch 1, on this machine.

    python benchmarks/decode_units.py                     # the PaDIR chapter's model (d 256, 3 + 3 layers, 8k)
    python benchmarks/decode_units.py --preset base       # Transformer-base (App. L.2): d 512, 6 + 6 layers, 32k
    python benchmarks/decode_units.py --preset base --dtype bfloat16 --json units.json

The PaDIR chapter's batch-1 speed-up targets (3x at the median, 5x at p99 over AR greedy with a
KV cache, T = 4) rest on a property of the hardware: that a pass over every position of a
hypothesis costs about what one cached AR step costs, because at batch 1 both are bound by
reading the weights. This script measures that property without training anything: the units'
costs depend on shapes only (fixed widths, no early stop), so untrained models of the chosen
size stand in for trained ones. It prints the units (:func:`gmlm_lib.mt.decode_costs.unit_costs`),
the pass-to-step ratio, and the speed-up over AR greedy that the units allow with ``T'`` passes
(:func:`gmlm_lib.mt.decode_costs.speedup_bound`, no overheads, #hyp = 1), with the machine it ran
on; ``--json`` also writes them with the parameters, the commit and the wall time.
"""

from __future__ import annotations

import argparse
import json
import time

PRESETS = {
    # the PaDIR chapter's full profile (notebooks/padir.md); median AR output: 15 pieces (Multi30k)
    "chapter": dict(vocab=8000, d_model=256, heads=4, layers=3, d_ff=1024, max_len=64, widths=[16, 32, 64]),
    # Transformer-base as in the paper's Appendix L.2 and params/padir/colab-tpu-wmt14.yaml
    "base": dict(vocab=32000, d_model=512, heads=8, layers=6, d_ff=2048, max_len=128, widths=[32, 64, 128]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="chapter")
    for name in ("vocab", "d_model", "heads", "layers", "d_ff", "max_len"):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"overrides the preset's {name}")
    ap.add_argument("--widths", type=int, nargs="+", help="source buckets and hypothesis widths (default: the preset's)")
    ap.add_argument("--hyps", type=int, nargs="+", default=[1, 3], help="numbers of PaDIR hypotheses")
    ap.add_argument("--ar-steps", type=float, default=15.0,
                    help="AR steps of the sentence the bound is for (default 15: the median AR output of the "
                         "chapter's last full run, Multi30k test, EOS included)")
    ap.add_argument("--passes", type=int, nargs="+", default=[1, 2, 4], help="PaDIR passes T' in the bound")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="compute dtype")
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds each unit is timed, in 3 interleaved rounds")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    from gmlm_lib.core import records, timing  # after parsing: --help does not start JAX
    from gmlm_lib.mt import decode_costs, seq2seq

    size = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in PRESETS[args.preset].items()}
    if args.widths:
        size["widths"] = args.widths
    start = time.time()
    models = {causal: seq2seq.build(seq2seq.ModelConfig(
        vocab=size["vocab"], causal=causal, d_model=size["d_model"], heads=size["heads"], enc_layers=size["layers"],
        dec_layers=size["layers"], d_ff=size["d_ff"], max_len=size["max_len"], dropout=0.0, dtype=args.dtype))
        for causal in (True, False)}
    rows = decode_costs.unit_costs(models[True], models[False], widths=tuple(size["widths"]),
                                   hyps=tuple(sorted({1, *args.hyps})), min_time=args.min_time)
    ms = {(r["unit"], r["width"], r["hyps"]): r["ms"] for r in rows}
    machine = timing.machine()
    print(f"{args.preset} size {size}, {args.dtype}, {seq2seq.count_params(models[True]):,} AR parameters; "
          f"{machine['backend']} {machine['devices']}")
    print(f"{'unit':<15}{'hyps':>5}" + "".join(f"{w:>10}" for w in size["widths"]) + "   (ms, fastest call)")
    for unit, hyps in sorted({(r["unit"], r["hyps"]) for r in rows}):
        print(f"{unit:<15}{hyps:>5}" + "".join(f"{ms[(unit, w, hyps)]:>10.3f}" for w in size["widths"]))
    ratios, bounds = {}, {}
    for w in size["widths"]:
        ratios[w] = ms[("PaDIR pass", w, 1)] / ms[("AR step", w, 1)]
        bounds[w] = {p: decode_costs.speedup_bound(rows, ar_steps=args.ar_steps, padir_passes=p, width=w)
                     for p in args.passes}
        print(f"width {w:>4}: one pass (#hyp 1) = {ratios[w]:.2f} AR steps; speed-up bound at {args.ar_steps:g} "
              "AR steps: " + ", ".join(f"T'={p}: {b:.2f}x" for p, b in bounds[w].items()))
    print(json.dumps(machine))
    if args.json:
        commit = records.short_commit(records.git_commit())
        record = dict(rows=rows, pass_per_step=ratios, bound=bounds, size=size, params=vars(args), machine=machine,
                      dispatch_ms=decode_costs.dispatch_floor(), commit=commit, wall_s=time.time() - start)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
