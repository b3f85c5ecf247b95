"""Text in, text out: batched translation and end-to-end latency for AR and PaDIR models.

A :class:`Method` names a decoding procedure and its settings; :class:`Translator` wraps a model
and its vocabulary. Sources are padded to length buckets and batches to a fixed size, so each
(method, bucket, batch size) compiles once; :meth:`Translator.warm_up` compiles them all before
anything is timed, side by side on the machine's cores, and a batched translation compiles its
buckets' programs side by side before its other batches run.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings

import jax
import numpy as np
from flax import nnx

from gmlm_lib.core import checks, rng, timing
from gmlm_lib.core.progress import bar
from gmlm_lib.mt import batching, decoding
from gmlm_lib.mt import vocab as V


@dataclasses.dataclass(frozen=True)
class Method:
    """``kind``: "greedy" or "beam" (AR, KV cache; ``beam`` width, GNMT ``alpha``) or "padir"
    (``padir``: :class:`~gmlm_lib.mt.decoding.PadirOptions` for plain refinement, or
    :class:`~gmlm_lib.mt.decoding.StrategyOptions` for Mask-Predict and the dependency-aware
    strategy; ``drop_repeats`` merges repeated tokens after the last step)."""

    kind: str
    beam: int = 4
    alpha: float = 0.6
    padir: decoding.PadirOptions | decoding.StrategyOptions = decoding.PadirOptions()
    drop_repeats: bool = True

    def __post_init__(self):
        if self.kind not in ("greedy", "beam", "padir"):
            raise ValueError(f"Method.kind must be 'greedy', 'beam' or 'padir'; got {self.kind!r}.")
        object.__setattr__(self, "beam", checks.integer(self.beam, "Method.beam", low=1, fix="1 is greedy."))
        if not isinstance(self.padir, (decoding.PadirOptions, decoding.StrategyOptions)):
            raise TypeError("Method.padir must be decoding.PadirOptions or decoding.StrategyOptions; got "
                            f"{type(self.padir).__name__}.")
        if not (isinstance(self.alpha, (int, float)) and 0.0 <= self.alpha < float("inf")):
            raise ValueError(f"Method.alpha (the length penalty) must be a finite number >= 0; got {self.alpha!r}.")

    @property
    def label(self) -> str:
        if self.kind == "greedy":
            return "AR greedy"
        if self.kind == "beam":
            return f"AR beam {self.beam}"
        if isinstance(self.padir, decoding.StrategyOptions):
            name = {"mask_predict": "Mask-Predict", "dependency": "dependency-aware"}.get(self.padir.name)
            if name is None:  # a rule strategy: named with its setting, which tells two such methods apart
                field = decoding.RULE_SETTING[self.padir.name]
                name = f"{self.padir.name} {field}={getattr(self.padir, field):g}"
            return f"{name} T={self.padir.steps}, #hyp={self.padir.hyps}"
        return f"PaDIR T={self.padir.steps}, #hyp={self.padir.hyps}" + (", unrolled" if self.padir.unroll else "")


HOST_OUTPUTS = ("auto", "pinned", "copy")
"""How a :class:`Translator` brings a decoder's output to the host: ``"pinned"``, the program writes it
into the device's pinned host memory (:func:`gmlm_lib.mt.decoding.host_sharding`); ``"copy"``, it is
left on the device and copied back with ``jax.device_get``; ``"auto"``, pinned where the device offers
that memory, else the copy."""


DEFAULT_BUCKETS = (16, 32, 64)
"""A :class:`Translator`'s source buckets when none are given (those up to the model's ``max_len``)."""


class Translator:
    """``model`` (a trained :class:`gmlm_lib.mt.seq2seq.Seq2Seq`) with its ``vocab``. Sources are
    padded to the smallest of ``buckets`` (increasing lengths) that holds them; given buckets above the
    model's ``max_len`` are dropped with a warning (it cannot encode longer sources), and a list with
    none at or below it is refused; by default :data:`DEFAULT_BUCKETS` up to ``max_len`` (and
    ``max_len`` itself when none is). ``host_output``: one of :data:`HOST_OUTPUTS`, the way each decode's output
    comes back (the same ids every way).

    A decode copies one array to the device (the padded source: its mask is computed in the program),
    runs one compiled program and brings one array back: at batch 1 on an accelerator each further
    copy, program or host round trip is a fixed cost of the order of the decoder's own work."""

    def __init__(self, model, vocab: V.Vocab, *, buckets=None, seed: int = 0, host_output: str = "copy"):
        if vocab.size != model.cfg.vocab:
            raise ValueError(f"Translator: the vocabulary has {vocab.size:,} pieces but the model was built for "
                             f"{model.cfg.vocab:,} (ModelConfig.vocab); use the SentencePiece model of the run folder "
                             "the model was trained in (its spm.model).")
        self.cfg = model.cfg
        # the weights cast once to the compute dtype, not at every step and pass (the same outputs)
        self.graphdef, self.params = nnx.split(decoding.for_inference(model))
        self.flat = decoding.FlatParams.of(self.params)  # what the decoders are called with: no State flattened a call
        self.vocab = vocab
        if buckets is None:
            buckets = tuple(b for b in DEFAULT_BUCKETS if b <= self.cfg.max_len) or (self.cfg.max_len,)
        buckets = batching.check_buckets(buckets)
        self.buckets = tuple(b for b in buckets if b <= self.cfg.max_len)  # longer sources cannot be encoded
        if not self.buckets:
            raise ValueError(f"Translator: every bucket of {list(buckets)} exceeds the model's max_len = "
                             f"{self.cfg.max_len}; pass buckets up to {self.cfg.max_len}, e.g. ({self.cfg.max_len},).")
        if len(self.buckets) < len(buckets):
            warnings.warn(f"Translator: buckets {[b for b in buckets if b > self.cfg.max_len]} exceed the model's max_len "
                          f"= {self.cfg.max_len} and are dropped (a source that long cannot be encoded: it is refused, "
                          f"not clipped); pass buckets up to {self.cfg.max_len}.", stacklevel=2)
        self.key = rng.key(seed)
        self.widths = decoding.hypothesis_widths(self.buckets, self.cfg.max_len)  # PaDIR's hypothesis widths
        self.host_output = host_output

    @property
    def host_output(self) -> str:
        """``"pinned"`` or ``"copy"``: how decodes bring their output to the host (settable, as
        ``Translator(host_output=...)``; ``"auto"`` resolves to one of the two)."""
        return "pinned" if self.to_host else "copy"

    @host_output.setter
    def host_output(self, value: str):
        if value not in HOST_OUTPUTS:
            raise ValueError(f"Translator: host_output must be one of {HOST_OUTPUTS}; got {value!r}.")
        if value == "pinned" and not decoding.has_host_memory():
            decoding.host_sharding()  # raises, naming the device's memories and the fix
        self.to_host = value == "pinned" or (value == "auto" and decoding.has_host_memory())

    def _check(self, method: Method):
        if (method.kind == "padir") == self.cfg.causal:
            raise ValueError(f"Method.kind = {method.kind!r} does not fit this model "
                             f"({'AR' if self.cfg.causal else 'PaDIR'}).")

    def bucket(self, n: int) -> int:
        for b in self.buckets:
            if n <= b:
                return b
        raise ValueError(f"a source of {n} tokens exceeds the largest bucket ({self.buckets[-1]} = "
                         "ModelConfig.max_len at most); nothing is clipped: shorten the input or raise max_len.")

    def decode_ids(self, src: np.ndarray, method: Method, key=None) -> np.ndarray:
        """Padded sources (B, S), PAD beyond each source (as :func:`gmlm_lib.mt.batching.pad` makes
        them) -> output ids (B, width) as a NumPy array: one copy to the device, one program, one copy
        back (none where the program wrote its output into host memory, ``host_output``). A source row of
        no token (only PAD, or S = 0) is refused: a model would still output a guess."""
        src = np.asarray(src, np.int32)
        if src.ndim != 2 or src.shape[0] == 0:
            raise ValueError(f"decode_ids: src must be (B, S) padded sources with B >= 1; got shape {src.shape}.")
        empty = np.flatnonzero(~np.any(src != V.PAD, axis=-1))
        if empty.size:
            raise ValueError(f"decode_ids: source row {int(empty[0])} holds no token (only PAD, or S = 0): an empty "
                             "source has nothing to translate, and a model would still output a guess; drop it.")
        return self._ids(src, method, key)

    def _ids(self, src: np.ndarray, method: Method, key=None) -> np.ndarray:
        """:meth:`decode_ids` of int32 sources already known to hold a token a row (the text entries refuse
        empty sentences first), so a batch-1 translation pays no second check."""
        # NumPy in: the compiled decoder takes it on its C++ path (a device_put first costs a dispatch)
        out = self.device_ids(src, method, key)
        return np.asarray(out) if self.to_host else jax.device_get(out)

    def device_ids(self, src, method: Method, key=None) -> jax.Array:
        """The compiled decoder of ``method`` on ``src`` as given (int32, PAD beyond each source, on the
        host or already on the device; the mask of real tokens is computed in the program): output ids
        (B, width), not waited for, on the device or in its host memory (``host_output``). What
        :meth:`decode_ids` runs, for timing the decoder alone
        (:func:`gmlm_lib.mt.decode_costs.call_parts`)."""
        self._check(method)
        if method.kind == "greedy":
            return decoding.ar_greedy(self.graphdef, self.flat, src, None, max_len=self.cfg.max_len,
                                      to_host=self.to_host)
        if method.kind == "beam":
            return decoding.ar_beam(self.graphdef, self.flat, src, None, max_len=self.cfg.max_len,
                                    beam=method.beam, alpha=method.alpha, to_host=self.to_host)[0]
        return decoding.padir_ids(self.graphdef, self.flat, src, None, self.key if key is None else key,
                                  options=method.padir, widths=self.widths, to_host=self.to_host)

    def _strip(self, ids, method: Method):
        return decoding.strip(ids, drop_repeats=method.kind == "padir" and method.drop_repeats)

    @staticmethod
    def _check_texts(texts, batch_size: int | None = None, *, empty_ok: bool = False) -> list[str]:
        """``texts`` as a list of strings, refused by name otherwise; an empty (or all-space) one too unless
        ``empty_ok``: an empty source has nothing to translate, and a model would still output a guess."""
        if isinstance(texts, (str, bytes)):
            raise TypeError("texts must be a list of sentences, not one string (it would be translated character "
                            "by character); pass [text], or use translate_one(text).")
        texts = list(texts)
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"texts[{bad}] must be a string; got {type(texts[bad]).__name__}.")
        empty = None if empty_ok else next((i for i, t in enumerate(texts) if not t.strip()), None)
        if empty is not None:
            raise ValueError(f"texts[{empty}] is empty: an empty source has nothing to translate (a model would still "
                             "output a guess); drop it, or give it an empty translation yourself.")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}.")
        return texts

    def batches(self, texts: list[str], batch_size: int):
        """Yield ``(chunk, src, src_mask, key)`` for ``texts`` in batches of ``batch_size`` grouped by
        source bucket, and by source length within a bucket (a batch's decoding loop runs until its
        longest row ends, so mixed lengths would cost every row the longest's steps): ``chunk`` the
        indices of the texts in the batch, ``src``/``src_mask`` (batch_size, bucket) with a last
        partial batch filled with copies of its first row, ``key`` the decoding key (the translator's, for
        every batch: each sentence's noise comes from it and the sentence's own ids,
        :func:`gmlm_lib.mt.decoding.source_keys`, so the outputs do not depend on the batching). Same
        inputs, same batches."""
        texts = self._check_texts(texts, batch_size)
        ids = self.vocab.encode(texts)
        by_bucket: dict[int, list[int]] = {}
        for i, row in enumerate(ids):
            by_bucket.setdefault(self.bucket(len(row)), []).append(i)
        for b, idx in by_bucket.items():
            idx = sorted(idx, key=lambda i: len(ids[i]))  # stable: equal lengths keep their order
            for j in range(0, len(idx), batch_size):
                chunk = idx[j: j + batch_size]
                rows = [ids[i] for i in chunk] + [ids[chunk[0]]] * (batch_size - len(chunk))
                src, mask = batching.pad(rows, b)
                yield chunk, src, mask, self.key

    def _each_batch(self, texts: list[str], batch_size: int, fn):
        """Yield ``(chunk, fn(src, src_mask, key))`` for the :meth:`batches` of ``texts``, the first
        batch of each shape run first, side by side (:func:`gmlm_lib.core.timing.compile_in_parallel`):
        each shape is a program to compile, and they compile in parallel instead of one by one as
        their first batch comes. The outputs do not change (each batch keeps its key)."""
        todo = list(self.batches(texts, batch_size))
        first = {}
        for i, (_, src, _, _) in enumerate(todo):
            first.setdefault(src.shape, i)
        done = {}
        if len(first) > 1:
            def run(i):
                done[i] = fn(*todo[i][1:])

            timing.compile_in_parallel([functools.partial(run, i) for i in first.values()])
        for i, (chunk, src, mask, key) in enumerate(todo):
            yield chunk, done.pop(i) if i in done else fn(src, mask, key)

    def translate(self, texts: list[str], method: Method, *, batch_size: int = 64, progress=None) -> list[str]:
        """Translate ``texts`` in batches of ``batch_size`` (:meth:`batches`; the copies that fill
        a last partial batch are dropped). Same inputs, same outputs."""
        self._check(method)
        texts = self._check_texts(texts, batch_size)
        out: list[str | None] = [None] * len(texts)
        for chunk, res in self._each_batch(texts, batch_size, lambda s, _, k: self._ids(np.asarray(s, np.int32), method, k)):
            for i, text in zip(chunk, self.vocab.decode(self._strip(res, method))):
                out[i] = text
            if progress is not None:
                progress.update(len(chunk))
        return out

    def passes(self, texts: list[str], method: Method, *, batch_size: int = 64) -> np.ndarray:
        """The decoder passes each of ``texts`` needs under a :class:`~gmlm_lib.mt.decoding.StrategyOptions`
        method (what its batch-1 decode runs): (len(texts),) int, at most the strategy's T, fewer
        where an adaptive rule commits every position early (:func:`gmlm_lib.mt.decoding.strategy_passes`)."""
        self._check(method)
        if method.kind != "padir" or not isinstance(method.padir, decoding.StrategyOptions):
            raise ValueError("Translator.passes counts the passes of a StrategyOptions strategy (Method('padir', "
                             "padir=StrategyOptions(...))); plain PaDIR and AR decoding run a fixed loop.")
        texts = self._check_texts(texts, batch_size)
        out = np.zeros(len(texts), dtype=np.int64)

        def passes(src, mask, _):
            return np.asarray(jax.device_get(decoding.strategy_passes(
                self.graphdef, self.flat, np.asarray(src, np.int32), np.asarray(mask, bool),
                options=method.padir, widths=self.widths)))

        for chunk, got in self._each_batch(texts, batch_size, passes):
            out[chunk] = got[: len(chunk)]
        return out

    def adjacent_similarities(self, sources: list[str], outputs: list[str], *,
                              batch_size: int = 64) -> list[np.ndarray]:
        """The dependency statistic of finished translations [Section 3.4]: for each ``outputs[i]``
        (the translation of ``sources[i]``, re-encoded into pieces, at most the model's ``max_len``
        of them), a ``(n - 1,)`` float array for its ``n`` pieces, entry ``j`` the
        :func:`~gmlm_lib.mt.decoding.adjacent_similarity` of pieces ``j`` and ``j + 1``: the cosine
        similarity of their cross-attention distributions, read in one decoder pass over the output
        given its source. Sources are batched as :meth:`batches` batches them (a row's value does
        not depend on the other rows). A PaDIR model only: its decoder reads a whole output at once,
        an AR decoder reads a shifted prefix."""
        if self.cfg.causal:
            raise ValueError("adjacent_similarities reads the statistic in a PaDIR decoder pass over a whole output; "
                             "this Translator holds an AR model (ModelConfig.causal): pass a PaDIR model's Translator.")
        sources, outputs = self._check_texts(sources, batch_size), self._check_texts(outputs, empty_ok=True)
        if len(sources) != len(outputs):
            raise ValueError(f"adjacent_similarities needs one output per source; got {len(sources)} sources and "
                             f"{len(outputs)} outputs.")
        ids = [row[: self.cfg.max_len] for row in self.vocab.encode(outputs)]
        out: list[np.ndarray | None] = [None] * len(sources)
        for chunk, src, mask, _ in self.batches(sources, batch_size):
            rows = [ids[i] for i in chunk] + [ids[chunk[0]]] * (len(src) - len(chunk))  # filled as batches fills src
            tgt, tmask = batching.pad(rows, self.cfg.max_len)
            sim = np.asarray(jax.device_get(decoding.adjacent_similarity(
                self.graphdef, self.params, np.asarray(src, np.int32), np.asarray(mask, bool),
                np.asarray(tgt, np.int32), np.asarray(tmask, bool))))
            for r, i in enumerate(chunk):
                out[i] = sim[r, : max(len(ids[i]) - 1, 0)]
        return out

    def translate_one(self, text: str, method: Method) -> str:
        """End to end for one sentence: tokenise, pad to its bucket, encode and decode, detokenise."""
        if not isinstance(text, str):
            raise TypeError(f"translate_one takes one sentence (a string); got {type(text).__name__}: use translate() "
                            "for a list.")
        self._check_texts([text])
        row = self.vocab.encode([text])[0]
        src, _ = batching.pad([row], self.bucket(len(row)))
        return self.vocab.decode(self._strip(self._ids(np.asarray(src, np.int32), method), method))[0]

    def warm_calls(self, method: Method, batch_sizes=(1,), *, passes: bool = False) -> list:
        """One call (no arguments) per (bucket, batch size) of ``method``, each decoding a dummy
        input of that shape (with ``passes``: counting its passes, :meth:`passes`' program): what
        :meth:`warm_up` runs, to be run side by side with other systems' (:func:`compile_all`)."""
        self._check(method)
        if passes and not (method.kind == "padir" and isinstance(method.padir, decoding.StrategyOptions)):
            raise ValueError("warm_calls(passes=True) compiles the pass count of a StrategyOptions strategy; got "
                             f"{method.label}.")
        calls = []
        for bs in batch_sizes:
            for b in self.buckets:
                src, mask = batching.pad([[V.FIRST_PIECE] * b] * bs, b)
                if passes:
                    calls.append(functools.partial(decoding.strategy_passes, self.graphdef, self.flat,
                                                   np.asarray(src, np.int32), np.asarray(mask, bool),
                                                   options=method.padir, widths=self.widths))
                else:
                    calls.append(functools.partial(self._ids, np.asarray(src, np.int32), method))
        return calls

    def warm_up(self, method: Method, batch_sizes=(1,)):
        """Compile every (bucket, batch size) of ``method`` (PaDIR's program holds every hypothesis
        width), side by side (:func:`gmlm_lib.core.timing.compile_in_parallel`)."""
        timing.compile_in_parallel(self.warm_calls(method, batch_sizes))

    def latency(self, texts: list[str], method: Method) -> np.ndarray:
        """Seconds per sentence at batch 1, end to end (``translate_one``), after :meth:`warm_up`."""
        return latencies({"": (self, method)}, texts, progress=False)[""]

    def throughput(self, texts: list[str], method: Method, batch_size: int = 64) -> float:
        """Sentences per second translating ``texts`` in batches of ``batch_size`` (after a warm-up)."""
        self.warm_up(method, (batch_size,))
        t0 = time.perf_counter()
        self.translate(texts, method, batch_size=batch_size)
        return len(texts) / (time.perf_counter() - t0)


def compile_all(systems, batch_sizes=(1,), *, passes: bool = False) -> float:
    """Compile the programs of every ``(translator, method)`` of ``systems`` (an iterable of pairs)
    for every bucket and each of ``batch_sizes``, all side by side
    (:func:`gmlm_lib.core.timing.compile_in_parallel`; methods that differ only in a traced setting,
    such as T, a threshold or PaDIR's initial hypothesis, share one program, which JAX compiles once),
    and return the wall seconds.
    With ``passes``: the pass-count programs of :meth:`Translator.passes` instead. Why: a chapter
    that compares many strategies compiles one program per strategy, bucket and batch size, each
    for seconds on a GPU; compiled before a sweep they cost about one of them, not all in turn."""
    return timing.compile_in_parallel([c for translator, method in systems
                                       for c in translator.warm_calls(method, batch_sizes, passes=passes)])


def latencies(systems: dict[str, tuple[Translator, Method]], texts: list[str], *,
              progress: bool = True) -> dict[str, np.ndarray]:
    """Seconds per sentence at batch 1, end to end (:meth:`Translator.translate_one`), for each
    ``name: (translator, method)`` of ``systems``, timed in turn: after every system's
    :meth:`~Translator.warm_up`, each sentence is translated by every system, in an order that
    rotates by one system per sentence. A slow spell of the machine then slows all systems alike;
    timed one after another, whole rows of a speed table move (a system that runs more passes can
    then come out faster than one that runs fewer). Returns ``name: (len(texts),)`` seconds."""
    if not systems:
        raise ValueError("latencies: systems is empty; pass at least one name: (translator, method).")
    compile_all(systems.values())  # every system's programs compiled side by side before any timing
    names = list(systems)
    times = {name: np.empty(len(texts)) for name in names}
    for i, text in enumerate(bar(texts, progress=progress, desc="batch-1 latency", leave=False)):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            translator, method = systems[name]
            t0 = time.perf_counter()
            translator.translate_one(text, method)
            times[name][i] = time.perf_counter() - t0
    return times
