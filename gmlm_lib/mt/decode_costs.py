"""Where batch-1 decoding time goes: the unit costs of AR and PaDIR decoding, measured [Section 3.3].

An AR greedy translation of ``m`` pieces costs one encoder call and ``m + 1`` cached decoder
steps (EOS included); a PaDIR translation costs one encoder call (with the length predictor and
the cross-attention projections of its hypotheses) and up to ``T`` decoder passes over ``#hyp x
width`` positions. :func:`unit_costs` times each unit on its own at batch 1 (jitted, warm, its
fastest call in interleaved rounds: this 2-core machine's load moves the median of the same unit
by up to 2x from run to run, the fastest call much less); :func:`speedup_bound` turns them into
the batch-1 speed-up the units allow, whatever the overheads around them.

A standalone call includes one dispatch from Python, which the decoders' loops do not pay per
step, so these are upper bounds on the in-loop costs (:func:`dispatch_floor` measures that
dispatch). :func:`call_parts` measures what a whole translation costs around the decoder's
program: the host's side, new input buffers and a call that runs no kernel.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from gmlm_lib.core import timing
from gmlm_lib.mt import batching, decoding
from gmlm_lib.mt import vocab as V


def _fastest_ms(units: list, *, min_time: float) -> list[float]:
    """``units``: ``(fn, args)`` pairs, compiled side by side
    (:func:`gmlm_lib.core.timing.compile_in_parallel`: on a GPU each small program compiles for
    seconds), then timed by :func:`gmlm_lib.core.timing.best_times` (interleaved rounds, so a slow
    spell of the machine hits every unit alike); each unit's fastest call in milliseconds."""
    calls = {i: (lambda fn=fn, args=args: jax.block_until_ready(fn(*args))) for i, (fn, args) in enumerate(units)}
    timing.compile_in_parallel(list(calls.values()))
    best = timing.best_times(calls, min_time)
    return [1e3 * best[i] for i in range(len(units))]


def _ar_encode(graphdef, params, src, src_mask):
    model = nnx.merge(graphdef, params)
    enc, enc_mask = model.encode(src, src_mask)
    return model.cross_kv(enc), enc_mask


def _ar_step(graphdef, params, token, t, cache, cross, enc_mask):
    """One cached step and its greedy choice, as :func:`gmlm_lib.mt.decoding.ar_greedy` runs it."""
    model = nnx.merge(graphdef, params)
    logits, cache = model.decode_step(token, t, cache, cross, enc_mask)
    return decoding.ar_next_token(logits), cache


def _padir_encode(graphdef, params, src, src_mask, *, hyps: int):
    """PaDIR's once-per-sentence work: encoder, length predictor and the cross-attention keys and
    values of the ``hyps`` copies of the encoder states, as :func:`gmlm_lib.mt.decoding.padir_refine`
    projects them before its passes."""
    enc, enc_mask, lengths = decoding.padir_encode(graphdef, params, src, src_mask, hyps=hyps)
    cross, enc_mask = decoding.hypothesis_cross_kv(nnx.merge(graphdef, params), enc, enc_mask, hyps)
    return cross, enc_mask, lengths


def _padir_pass(graphdef, params, hyp, tmask, enc_mask, cross):
    """One refinement pass exactly as :func:`gmlm_lib.mt.decoding.padir_refine` runs it."""
    return decoding.refine_pass(nnx.merge(graphdef, params), hyp, tmask, enc_mask, cross)


def _noop(x):
    return x + 1


def dispatch_floor(min_time: float = 0.3) -> float:
    """Milliseconds of the fastest call of a trivial jitted function (the per-call overhead of dispatch)."""
    return _fastest_ms([(jax.jit(_noop), (jax.device_put(np.int32(0)),))], min_time=min_time)[0]


def _empty_call(leaves, src, *rest):
    """A program that takes a decoder's arguments and does nothing with them but read one entry of the
    source (an output that is an input as it is would be forwarded by JAX without running anything)."""
    return src[0, 0]


_EMPTY = jax.jit(_empty_call)


def call_parts(translator, method, text: str, *, min_time: float = 0.3) -> dict:
    """Where a batch-1 translation of ``text`` spends its time around the device's own work, in ms,
    each the fastest of calls interleaved over ``min_time`` seconds (:func:`gmlm_lib.core.timing.best_times`,
    as :func:`unit_costs` times the units): ``translate_ms`` the whole call
    (:meth:`gmlm_lib.mt.translate.Translator.translate_one`: tokenising, padding, the copy of the
    source to the device, the compiled decoder, its output brought to the host, detokenising);
    ``fresh_ms`` the compiled decoder (:meth:`~gmlm_lib.mt.translate.Translator.device_ids`) given the
    padded source as a NumPy array, as ``translate_one`` gives it, so each call copies it into a new
    device buffer, waited for with ``block_until_ready``;
    ``program_ms`` the same on the source already on the device, the same buffer every call; ``empty_ms`` a
    compiled program that takes the same arguments (every parameter array, the source, PaDIR's key and
    numeric settings) and only reads one entry of the source: what a call costs before the
    decoder's kernels run. ``translate_ms - fresh_ms`` is the host's side of a translation;
    ``fresh_ms - program_ms`` what new input buffers cost (their copy, and on a GPU whatever XLA redoes for
    buffers that moved, such as re-recording the CUDA graphs it runs kernels in); ``program_ms`` less
    ``empty_ms`` and the device's busy time (:func:`gmlm_lib.core.devtrace.trace_calls`) is the waiting
    inside the program (kernel launches, a loop's condition read back to the host).
    ``translator``: a :class:`~gmlm_lib.mt.translate.Translator`; ``method``: its
    :class:`~gmlm_lib.mt.translate.Method` (greedy, beam or PaDIR)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"call_parts: text must be a non-empty sentence; got {text!r}.")
    if not (isinstance(min_time, (int, float)) and 0 < min_time < float("inf")):
        raise ValueError(f"call_parts: min_time must be a positive number of seconds; got {min_time!r}.")
    tr = translator
    tr._check(method)
    row = tr.vocab.encode([text])[0]
    host = np.asarray(batching.pad([row], tr.bucket(len(row)))[0], np.int32)
    src = jax.device_put(host)
    # PaDIR's empty call also takes the decoder's key and numeric settings
    extra = (tr.key, decoding._dynamic(method.padir)[1]) if method.kind == "padir" else ()
    fns = dict(translate_ms=lambda: tr.translate_one(text, method),
               fresh_ms=lambda: tr.device_ids(host, method), program_ms=lambda: tr.device_ids(src, method),
               empty_ms=lambda: _EMPTY(tr.flat.leaves, src, *extra))
    waited = {name: (lambda fn=fn: jax.block_until_ready(fn())) for name, fn in fns.items()}
    for fn in waited.values():  # compiled and warm before anything is timed
        fn()
    return {name: 1e3 * s for name, s in timing.best_times(waited, 3 * min_time).items()}


def choose_host_output(translator, method, text: str, *, others=(), min_time: float = 0.3) -> dict:
    """Which way of bringing a batch-1 translation's output to the host is faster here, measured on the
    decoder itself: ``text`` translated by ``translator`` with ``method`` (as
    :meth:`~gmlm_lib.mt.translate.Translator.translate_one`), its output written by the program into the
    device's pinned host memory or left on the device and copied back
    (:data:`gmlm_lib.mt.translate.HOST_OUTPUTS`), each way's fastest call over ``min_time`` seconds in
    interleaved rounds; then ``translator`` and every translator of ``others`` is set to the faster way.
    Returns ``{"choice": "pinned" or "copy", "ms": {way: fastest ms}, "error": str or None}``; a device
    without pinned host memory, or a compiler that refuses the placement (``error`` says what it said),
    keeps the copy. The outputs are the same either way; only the fixed cost of a call differs, which on
    a GPU can be as large as a short decode (JAX issue 36651)."""
    tr = translator
    tr._check(method)
    translators = [tr, *others]

    def way(name):
        def call():
            tr.host_output = name
            return tr.translate_one(text, method)
        return call

    way("copy")()  # compiled and warm before anything is timed; a bad text is refused here, by name
    ways, error = ["copy"], None
    if decoding.has_host_memory():
        try:
            way("pinned")()  # compiled and run once: a placement the compiler refuses shows here
            ways.append("pinned")
        except Exception as err:  # noqa: BLE001 - reported in the result; the copy is kept
            error = f"{type(err).__name__}: {str(err)[:300]}"
    else:
        error = f"the device has no {decoding.HOST_MEMORY!r} memory"
    best = timing.best_times({name: way(name) for name in ways}, min_time)
    choice = min(ways, key=best.get)
    for t in translators:
        t.host_output = choice
    return dict(choice=choice, ms={name: 1e3 * best[name] for name in ways}, error=error)


def unit_costs(ar_model, padir_model, *, widths=(16, 32, 64), hyps=(1, 3), min_time: float = 0.5) -> list[dict]:
    """Time each unit of batch-1 decoding for the two models (:class:`gmlm_lib.mt.seq2seq.Seq2Seq`,
    AR and PaDIR). ``widths`` are source buckets and PaDIR hypothesis widths (each at most
    ``max_len``); ``hyps`` the numbers of PaDIR hypotheses. Returns rows ``{"unit", "width",
    "hyps", "ms"}``: ``"AR encoder"`` (encoder and cross-attention keys and values, per source
    width), ``"AR step"`` (one cached step at position ``width // 2`` of a ``max_len`` cache),
    ``"PaDIR encoder"`` (encoder, length predictor and the cross-attention keys and values of
    its hypotheses, per source width) and ``"PaDIR pass"``
    (one refinement pass over ``hyps`` hypotheses of ``width`` positions, sources of 16). Each unit
    is timed for ``min_time`` seconds in all."""
    if not ar_model.cfg.causal or padir_model.cfg.causal:
        raise ValueError("unit_costs(ar_model, padir_model): pass the AR model first and the PaDIR model second.")
    for name, model in (("ar_model", ar_model), ("padir_model", padir_model)):
        too_long = [w for w in widths if w > model.cfg.max_len]
        if too_long:
            raise ValueError(f"unit_costs: widths {too_long} exceed {name}.cfg.max_len = {model.cfg.max_len}; "
                             "nothing is clipped: pass widths up to max_len.")
    ga, pa = nnx.split(decoding.for_inference(ar_model))  # as the Translator decodes (weights cast once)
    gp, pp = nnx.split(decoding.for_inference(padir_model))
    # as the Translator calls them: a unit's time is then its program's, not the host flattening a State
    pa, pp = decoding.FlatParams.of(pa), decoding.FlatParams.of(pp)
    enc_ar = decoding.jitted(_ar_encode, ga)
    enc_padir = decoding.jitted(_padir_encode, gp, hyps=max(hyps))
    sources = {w: jax.device_put(tuple(batching.pad([[V.FIRST_PIECE] * w], w))) for w in widths}
    src16, mask16 = jax.device_put(tuple(batching.pad([[V.FIRST_PIECE] * 16], 16)))
    # the encoders' outputs are the steps' and passes' inputs: compiled side by side first, then run
    encoded = {("ar", w): (lambda w=w: enc_ar(pa, *sources[w])) for w in widths}
    encoded.update({("padir", h): (lambda h=h: decoding.jitted(_padir_encode, gp, hyps=h)(pp, src16, mask16))
                    for h in hyps})
    timing.compile_in_parallel(list(encoded.values()))
    done = {k: f() for k, f in encoded.items()}
    labels, units = [], []
    # the steps' and passes' other inputs made on the host and copied: made on the device, op by op, each
    # would compile a program of its own
    cache = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype),
                         jax.eval_shape(lambda: ar_model.init_cache(1, ar_model.cfg.max_len)))
    for w in widths:
        cross, enc_mask = done[("ar", w)]
        step_args = (pa, *jax.device_put((np.full((1,), V.FIRST_PIECE, np.int32), np.int32(w // 2), cache)),
                     cross, enc_mask)
        labels += [("AR encoder", w, 1), ("AR step", w, 1), ("PaDIR encoder", w, max(hyps))]
        units += [(enc_ar, (pa, *sources[w])), (decoding.jitted(_ar_step, ga), step_args),
                  (enc_padir, (pp, *sources[w]))]
    for h in hyps:
        cross, enc_mask, _ = done[("padir", h)]
        for w in widths:
            labels.append(("PaDIR pass", w, h))
            tokens, keep = jax.device_put((np.full((h, w), V.FIRST_PIECE, np.int32), np.ones((h, w), bool)))
            units.append((decoding.jitted(_padir_pass, gp), (pp, tokens, keep, enc_mask, cross)))
    times = _fastest_ms(units, min_time=min_time)
    return [dict(unit=u, width=w, hyps=h, ms=ms) for (u, w, h), ms in zip(labels, times)]


def speedup_bound(costs: list[dict], *, ar_steps: float, padir_passes: float, width: int, hyps: int = 1) -> float:
    """The batch-1 speed-up of PaDIR over AR greedy that the unit ``costs`` (:func:`unit_costs`)
    allow for a sentence in source bucket and hypothesis width ``width``: ``(AR encoder + ar_steps
    x AR step) / (PaDIR encoder + padir_passes x PaDIR pass)``, with no overhead on either side."""
    def cost(unit, **kw):
        found = [r["ms"] for r in costs if r["unit"] == unit and all(r[k] == v for k, v in kw.items())]
        if not found:
            raise ValueError(f"speedup_bound: no {unit!r} cost for {kw} in costs; measure it with unit_costs.")
        return found[0]

    ar = cost("AR encoder", width=width) + ar_steps * cost("AR step", width=width)
    return ar / (cost("PaDIR encoder", width=width) + padir_passes * cost("PaDIR pass", width=width, hyps=hyps))
