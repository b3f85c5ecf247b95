"""Decoding: AR greedy and beam search with a KV cache; PaDIR iterative refinement [App. L.1.1].

Each decoder is a pure jitted function of ``(graphdef, params, src, src_mask, ...)`` (from
``nnx.split(model)``), compiled once per model structure, static setting and input shape
(:mod:`gmlm_lib.mt.programs` keeps them). Outputs are fixed-size arrays; :func:`strip` turns them
into id lists (up to EOS, repeats dropped for PaDIR if asked).

The graphdef is closed over rather than passed to ``jax.jit`` as a static argument: a static
argument is hashed and compared on every call, and hashing an nnx graphdef costs on the order of
a millisecond, a sizeable part of a batch-1 translation on a CPU. :func:`jitted` looks each
graphdef up by identity (:func:`gmlm_lib.mt.programs.graph_key`). For the same reason a caller that
decodes many times with one model passes its parameters as :class:`FlatParams` (made once): an nnx
``State`` is flattened in Python at every call, a list of its arrays on JAX's C++ path.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from gmlm_lib.core import checks, unmasking
from gmlm_lib.mt import programs, reductions
from gmlm_lib.mt import vocab as V

#: ids a PaDIR position may never take (they mean padding or control, not text)
_PADIR_FORBIDDEN = (V.PAD, V.EOS, V.BOS, V.MASK, V.LENGTH)
#: ids an AR step may never emit (EOS ends the sentence and stays allowed)
_AR_FORBIDDEN = (V.PAD, V.BOS, V.MASK, V.LENGTH)


def _forbid(logits, ids):
    """``logits`` with the entries of ``ids`` on the last axis set to -inf (an elementwise select)."""
    banned = np.isin(np.arange(logits.shape[-1]), ids)
    return jnp.where(banned, -jnp.inf, logits)


def ar_next_token(logits):
    """The greedy AR choice: (B, V) logits -> (B,) int32, the best id an AR step may emit."""
    return reductions.argmax(_forbid(logits, _AR_FORBIDDEN))


_COMPILED = programs.Programs()
"""The decoders compiled in this process, one per (graphdef, decoder, static settings, output memory)."""


@dataclasses.dataclass(frozen=True, eq=False)
class FlatParams:
    """A model's parameters (an nnx ``State``) as the flat list of their arrays and the ``State``'s
    structure, for the decoders' ``params`` argument (any decoder of this module takes either).
    Make it once per model (:meth:`of`) and reuse it: a jitted call flattens an nnx ``State`` in
    Python every time, which at batch 1 on an accelerator is a share of the decoding time itself
    (and would inflate the unit costs of :mod:`gmlm_lib.mt.decode_costs`); a list of arrays takes
    JAX's C++ path. The decoder rebuilds the ``State`` inside its compiled program. Every leaf is a
    device array: a host (NumPy) leaf is put on the default device once here, since a jitted call
    copies host arguments to the device on every call (for a 10M-parameter model, milliseconds a
    call on a GPU: more than a batch-1 decoding step itself)."""

    leaves: list
    treedef: object

    @classmethod
    def of(cls, params) -> FlatParams:
        """The flat form of ``params`` (an nnx ``State``; a ``FlatParams`` is returned as it is)."""
        if isinstance(params, FlatParams):
            return params
        leaves, treedef = jax.tree.flatten(params)
        return cls([x if isinstance(x, jax.Array) else jax.device_put(x) for x in leaves], treedef)


#: the layers that cast their parameters to their compute dtype at every call (flax's ``promote_dtype``)
_CASTING_LAYERS = ((nnx.Linear, ("kernel", "bias")), (nnx.Embed, ("embedding",)))


def _uncast(model) -> list:
    """``(variable, compute dtype)`` for each parameter of ``model``'s casting layers not yet in its layer's
    compute dtype."""
    return [(variable, jnp.dtype(node.dtype)) for _, node in nnx.iter_graph(model)
            for kind, names in _CASTING_LAYERS if isinstance(node, kind) and node.dtype is not None
            for variable in (getattr(node, name, None) for name in names)
            if variable is not None and variable.get_value().dtype != jnp.dtype(node.dtype)]


def for_inference(model):
    """``model`` (a :class:`~gmlm_lib.mt.seq2seq.Seq2Seq`) for decoding: a copy whose ``nnx.Linear`` and
    ``nnx.Embed`` parameters are cast once to the layer's compute dtype (``ModelConfig.dtype``), every
    other parameter (the LayerNorms', which compute in float32) as it is; ``model`` itself is not changed,
    and a model that computes in its parameters' dtype is returned as it is.

    Why: those layers cast their parameters to the compute dtype at every call, and in a compiled
    decoder XLA leaves most of those casts inside the loop, so each AR step and each PaDIR pass would
    convert every weight again, one small kernel each (at batch 1 on a GPU, mostly launch time). The
    layers compute with the same bits either way, so the outputs do not change."""
    if not _uncast(model):
        return model
    copy = nnx.clone(model)
    for variable, dtype in _uncast(copy):
        variable.set_value(variable.get_value().astype(dtype))
    return copy


class _Decoder:
    """A decoder ``fn`` with its graphdef and static settings bound, jitted: called with an nnx
    ``State`` as its first argument, or with :class:`FlatParams` (then jitted on the list of arrays,
    :class:`gmlm_lib.mt.programs.FlatJit`)."""

    def __init__(self, fn, graphdef, static: dict, to_host: bool = False):
        bound = functools.partial(fn, graphdef, **static)
        # to_host: every output written by the program into the host memory of the default device
        kwargs = dict(out_shardings=host_sharding()) if to_host else {}
        self._plain = jax.jit(bound, **kwargs)
        self._flat = programs.FlatJit(bound, name=fn.__name__, **kwargs)  # the decoder's name in logs and caches

    def _for(self, treedef):
        return self._flat.for_tree(treedef)

    def __call__(self, params, *args):
        if isinstance(params, FlatParams):
            return self._flat.for_tree(params.treedef)(params.leaves, *args)
        return self._plain(params, *args)

    def _cache_size(self) -> int:
        """Programs compiled, over both calling forms."""
        return self._plain._cache_size() + self._flat._cache_size()


def jitted(fn, graphdef, *, to_host: bool = False, **static):
    """``jax.jit(fn)`` with ``graphdef`` and the ``static`` settings bound, one per (equal graphdef,
    ``fn``, settings, ``to_host``): models of the same structure share their compilations, and a call
    costs a dictionary lookup by ``id(graphdef)`` instead of hashing the graphdef. Its first argument
    is the parameters, an nnx ``State`` or :class:`FlatParams`. With ``to_host`` the program writes its
    outputs into the default device's pinned host memory (:func:`host_sharding`). Thread-safe: threads
    asking for the same decoder at once get the same jitted function (so its compilations are shared)."""
    key = (programs.graph_key(graphdef), fn, tuple(sorted(static.items())), bool(to_host))
    return _COMPILED.get(key, lambda: _Decoder(fn, graphdef, static, bool(to_host)))


HOST_MEMORY = "pinned_host"
"""The JAX memory kind a decoder called with ``to_host=True`` writes its output into."""


def has_host_memory(device=None) -> bool:
    """Whether ``device`` (default: the first of ``jax.devices()``) offers :data:`HOST_MEMORY`, memory
    on the host that its programs can write their outputs into."""
    device = jax.devices()[0] if device is None else device
    return HOST_MEMORY in [m.kind for m in device.addressable_memories()]


def host_sharding():
    """The sharding of an output left in the pinned host memory of the default device (the first of
    ``jax.devices()``). Why: a batch-1 translation's output is a few hundred bytes, and bringing a
    device array back with ``jax.device_get`` goes through a staging buffer and a host callback on a GPU
    (JAX issue 36651), a fixed cost that can take as long as the decoder itself; an output the program
    writes into host memory is read there (JAX's memory kinds, PR 22114). ``ValueError`` where the
    device has no such memory."""
    device = jax.devices()[0]
    if not has_host_memory(device):
        raise ValueError(f"the device {device} offers no {HOST_MEMORY!r} memory (it has "
                         f"{[m.kind for m in device.addressable_memories()]}); decode with to_host=False "
                         "(Translator(host_output='copy')).")
    return jax.sharding.SingleDeviceSharding(device, memory_kind=HOST_MEMORY)


def clear_compiled() -> int:
    """Drop every compiled decoder (this module's and JAX's caches); returns how many were held.

    Why: each static setting (a strategy's kind and hypotheses; T, thresholds, block size and refill
    are arguments, see ``_dynamic``), input width and batch shape is its own executable, and on the
    CPU backend every executable keeps its machine code in memory mappings of its own. A sweep over
    many settings (strategies x buckets, batched and then batch 1 for timing) can reach the
    kernel's limit on mappings per process (``vm.max_map_count``, 65,530 by default), where LLVM
    fails with "Cannot allocate memory" and the process dies. Clearing between the phases of such a
    sweep keeps only one phase's programs alive; the next call of a setting compiles it again. A
    strategy's decoder of the CPU preset's size (three widths) holds about 540 mappings, so a process
    reaches the limit past a hundred such programs, where the book's chapters hold a few dozen."""
    held = _COMPILED.clear()
    _SPLITS.clear()
    jax.clear_caches()
    return held


def _source_mask(src, src_mask):
    """``src_mask`` as given, or where it is ``None`` the mask of real tokens computed in the program,
    ``src != PAD`` (what :func:`gmlm_lib.mt.batching.pad` makes on the host): a call then copies one
    input to the device, the source, not two."""
    return src != V.PAD if src_mask is None else src_mask


def _length_penalty(length, alpha):
    """GNMT length penalty ``((5 + |y|) / 6) ** alpha``."""
    return ((5.0 + length) / 6.0) ** alpha


def ar_greedy(graphdef, params, src, src_mask, *, max_len: int, to_host: bool = False):
    """Greedy AR decoding with the KV cache. (B, S) -> ids (B, max_len), PAD after EOS; stops
    early once every row has emitted EOS. ``src_mask`` ``None``: ``src != PAD``, computed in the
    program; ``to_host``: the ids written into pinned host memory (:func:`host_sharding`)."""
    return jitted(_ar_greedy, graphdef, max_len=max_len, to_host=to_host)(params, src, src_mask)


def _check_max_len(model, max_len):
    """A decode may not run past the decoder's position embeddings (``ModelConfig.max_len``): JAX
    would clamp the position index and decode on with a wrong position, silently."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or not 1 <= max_len <= model.cfg.max_len:
        raise ValueError(f"max_len must be an integer in [1, {model.cfg.max_len}] (ModelConfig.max_len, the "
                         f"positions the model has); got {max_len!r}.")


def _ar_greedy(graphdef, params, src, src_mask, *, max_len: int):
    model = nnx.merge(graphdef, params)
    _check_max_len(model, max_len)
    b = src.shape[0]
    enc, enc_mask = model.encode(src, _source_mask(src, src_mask))
    cross = model.cross_kv(enc)
    out = jnp.full((b, max_len), V.PAD, jnp.int32)

    def cond(c):
        t, _, _, done, _ = c
        return (t < max_len) & ~jnp.all(done)

    def body(c):
        t, token, cache, done, out = c
        logits, cache = model.decode_step(token, t, cache, cross, enc_mask)
        nxt = ar_next_token(logits)
        nxt = jnp.where(done, V.PAD, nxt)
        out = out.at[:, t].set(nxt)
        return t + 1, nxt, cache, done | (nxt == V.EOS), out

    init = (jnp.int32(0), jnp.full((b,), V.BOS, jnp.int32), model.init_cache(b, max_len), jnp.zeros((b,), bool), out)
    return jax.lax.while_loop(cond, body, init)[-1]


def ar_beam(graphdef, params, src, src_mask, *, max_len: int, beam: int = 4, alpha: float = 0.6,
            to_host: bool = False):
    """Beam search with the GNMT length penalty. (B, S) -> (ids (B, max_len), scores (B,)): the best
    finished hypothesis by ``log p / ((5 + |y|) / 6) ** alpha`` (``|y|`` counts EOS). A row stops once it
    has ``beam`` finished hypotheses (fairseq's rule) or none of its alive beams can win: from then on its
    finished hypotheses are kept as they are while other rows of the batch go on, so a sentence's output
    does not depend on the sentences decoded beside it. ``src_mask`` and ``to_host``: as :func:`ar_greedy`."""
    checks.integer(beam, "beam", low=1, fix="A beam search keeps at least one hypothesis (beam = 1 is greedy).")
    return jitted(_ar_beam, graphdef, max_len=max_len, beam=beam, to_host=to_host)(params, src, src_mask, alpha)


def _ar_beam(graphdef, params, src, src_mask, alpha, *, max_len: int, beam: int):
    model = nnx.merge(graphdef, params)
    _check_max_len(model, max_len)
    b, k = src.shape[0], beam
    enc, enc_mask = model.encode(src, _source_mask(src, src_mask))
    enc, enc_mask = jnp.repeat(enc, k, 0), jnp.repeat(enc_mask, k, 0)
    cross = model.cross_kv(enc)
    neg = jnp.float32(-1e9)

    def stopped(alive_lp, fin_score):
        # a row is done when it holds `beam` finished hypotheses (as in fairseq), or when no alive
        # beam can beat its best finished one even at the longest length (alpha >= 0)
        full = fin_score[:, k - 1] > neg / 2
        hopeless = fin_score[:, 0] >= alive_lp[:, 0] / _length_penalty(max_len, alpha)
        return full | hopeless

    def cond(c):
        t, _, alive_lp, _, fin_score, _, _ = c
        return (t < max_len) & ~jnp.all(stopped(alive_lp, fin_score))

    def body(c):
        t, alive, alive_lp, cache, fin_score, fin, _ = c
        done = stopped(alive_lp, fin_score)  # these rows keep their finished hypotheses (fairseq drops the row)
        logits, cache = model.decode_step(alive[:, :, t].reshape(-1), t, cache, cross, enc_mask)
        logp = jax.nn.log_softmax(_forbid(logits, _AR_FORBIDDEN)).reshape(b, k, -1)
        vocab = logp.shape[-1]
        cand = (alive_lp[:, :, None] + logp).reshape(b, k * vocab)
        top_lp, top_i = jax.lax.top_k(cand, 2 * k)
        parent, token = top_i // vocab, (top_i % vocab).astype(jnp.int32)
        seqs = jnp.take_along_axis(alive, parent[:, :, None], 1).at[:, :, t + 1].set(token)
        is_eos = token == V.EOS
        # finished: old finished plus the EOS candidates, best k by penalised score
        # as in fairseq, only an EOS among the k best candidates finishes a hypothesis (so a beam
        # of 1 is greedy search)
        ends = is_eos & (jnp.arange(2 * k) < k)[None]
        new_fin_score = jnp.where(ends, top_lp / _length_penalty(t + 1.0, alpha), neg)
        all_score = jnp.concatenate([fin_score, new_fin_score], 1)
        all_seq = jnp.concatenate([fin, seqs], 1)
        fs, fi = jax.lax.top_k(all_score, k)
        fs = jnp.where(done[:, None], fin_score, fs)
        fin = jnp.where(done[:, None, None], fin, jnp.take_along_axis(all_seq, fi[:, :, None], 1))
        # alive: the best k candidates that did not end
        alive_cand = jnp.where(is_eos, neg, top_lp)
        alp, ai = jax.lax.top_k(alive_cand, k)
        alive = jnp.take_along_axis(seqs, ai[:, :, None], 1)
        src_beam = jnp.take_along_axis(parent, ai, 1)  # (b, k) index into the old beams
        flat = (jnp.arange(b)[:, None] * k + src_beam).reshape(-1)
        cache = [(kk[flat], vv[flat]) for kk, vv in cache]
        return t + 1, alive, alp, cache, fs, fin, None

    alive = jnp.full((b, k, max_len + 1), V.PAD, jnp.int32).at[:, :, 0].set(V.BOS)
    alive_lp = jnp.tile(jnp.array([0.0] + [-1e9] * (k - 1), jnp.float32), (b, 1))
    fin = jnp.full((b, k, max_len + 1), V.PAD, jnp.int32)
    init = (jnp.int32(0), alive, alive_lp, model.init_cache(b * k, max_len), jnp.full((b, k), neg), fin, None)
    t, alive, alive_lp, _, fin_score, fin, _ = jax.lax.while_loop(cond, body, init)
    # rows with nothing finished (ran into max_len) fall back to their best alive beam
    alive_score = alive_lp[:, 0] / _length_penalty(jnp.float32(max_len), alpha)
    use_fin = fin_score[:, 0] > neg / 2
    ids = jnp.where(use_fin[:, None], fin[:, 0, 1:], alive[:, 0, 1:])
    return ids, jnp.where(use_fin, fin_score[:, 0], alive_score)


@dataclasses.dataclass(frozen=True)
class PadirOptions:
    """Inference settings of PaDIR [App. L.1.1]: ``steps`` T, ``hyps`` top-l lengths, initial
    hypothesis ``init`` ("random" tokens or "mask"), stutter re-masking between steps, early
    stop when the prediction stops changing.

    ``unroll``: compile the T passes as straight-line code instead of a device loop whose number of
    iterations depends on the data (the early stop), and (in :func:`padir_ids`, the translation
    decoder) over one hypothesis width, the widest, instead of a branch per width chosen on the
    device: a program with no loop and no branch, of which nothing waits on the host. The outputs are
    the same: after an early stop the remaining passes are computed and their results discarded, and
    a hypothesis' padding positions are attended by none of its real ones. Why: on a GPU, XLA can run
    such a loop from the host, reading its condition back after every iteration (unless it captures
    the loop in a CUDA graph), and a branch reads its index back the same way, while a fixed sequence
    of passes is launched at once; the price is the discarded passes, passes over the widest width
    (at batch 1 on an accelerator a pass costs about the same at any width), and one program per T
    (T is then a constant of the program, not an argument)."""

    steps: int = 4
    hyps: int = 3
    init: str = "random"
    remask_stutter: bool = True
    early_stop: bool = True
    unroll: bool = False

    def __post_init__(self):
        checks.integer(self.steps, "PadirOptions.steps", low=1)
        checks.integer(self.hyps, "PadirOptions.hyps", low=1)
        if self.init not in ("random", "mask"):
            raise ValueError(f"PadirOptions.init must be 'random' or 'mask'; got {self.init!r}.")
        for name in ("remask_stutter", "early_stop", "unroll"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"PadirOptions.{name} must be True or False; got {getattr(self, name)!r}.")


STRATEGIES = ("mask_predict", "dependency", "threshold", "factor", "entropy", "dilated", "dependency_entropy")

RULE_STRATEGIES = ("threshold", "factor", "entropy", "dilated", "dependency_entropy")
"""The strategies that choose each pass's positions by a :mod:`gmlm_lib.core.unmasking` rule."""

RULE_SETTING = {"threshold": "confidence", "factor": "factor", "entropy": "entropy", "dilated": "block",
                "dependency_entropy": "entropy"}
"""The :class:`StrategyOptions` field that holds each rule strategy's one setting (what a grid over the
rule tunes): the Fast-dLLM confidence threshold and factor, the entropy bound, the DUS block size."""


@dataclasses.dataclass(frozen=True)
class StrategyOptions:
    """A PaDIR decoding strategy other than plain refinement (:class:`PadirOptions`), with at most
    ``steps`` passes T over ``hyps`` length hypotheses, every hypothesis starting from ``[MASK]``.

    * ``"mask_predict"`` (Mask-Predict, Ghazvininejad et al., 2019): each pass predicts the masked
      positions; after pass ``t`` the ``floor(n (T - t) / T)`` least confident of the ``n`` positions
      are masked again, a linearly decaying count.
    * ``"dependency"`` (this book's, beyond the paper): each pass commits the positions that are
      confident (probability of their argmax at least ``confidence``) and not dependent on a
      position committed in the same pass, most confident first; two positions are dependent when
      the cosine similarity of their cross-attention distributions (averaged over layers and
      heads: the statistic that flags stutter, Section 3.4) exceeds ``dependency``. A dependent
      position waits for a later pass, where it is predicted again given what was committed, as
      a k-Gibbs block is drawn site by site (:func:`gmlm_lib.ising.samplers.dependency_aware`).
      The uncommitted positions are fed back as their latest prediction (``refill =
      "prediction"``, as plain PaDIR refines) or as ``[MASK]`` (``"mask"``, as Mask-Predict).
    * the rules of :mod:`gmlm_lib.core.unmasking`, on each position's confidence (probability of its
      argmax) and entropy (of its predicted distribution over the vocabulary, nats):
      ``"threshold"`` (Fast-dLLM, arXiv 2505.22618: every position with confidence at least
      ``confidence``), ``"factor"`` (Fast-dLLM's factor rule with ``f = factor``), ``"entropy"``
      (EB-Sampler, arXiv 2505.24857: ``sum H - max H <= entropy``), ``"dilated"`` (DUS, arXiv
      2506.19037: blocks of ``block`` positions) and ``"dependency_entropy"`` (ours: the entropy bound
      charged only within groups of positions joined by cross-attention similarity above
      ``dependency`` through uncommitted positions, the translation form of
      :func:`gmlm_lib.core.unmasking.dependency`). Committed positions are fixed, the others fed back
      as ``[MASK]``, as these masked-diffusion decoders do.

    Every strategy but Mask-Predict commits at least ``ceil(n t / T)`` positions after pass ``t`` (the
    most confident first), so all are committed by pass T; a decode stops early once all are, so
    the adaptive rules can use fewer passes than T.
    """

    name: str
    steps: int = 4
    hyps: int = 1
    confidence: float = 0.5
    dependency: float = 0.9
    refill: str = "prediction"
    factor: float = 1.0
    entropy: float = 0.1
    block: int = 8

    def __post_init__(self):
        if self.name not in STRATEGIES:
            raise ValueError(f"StrategyOptions.name must be one of {STRATEGIES} (plain refinement: PadirOptions); "
                             f"got {self.name!r}.")
        for field in ("steps", "hyps", "block"):
            object.__setattr__(self, field, checks.integer(getattr(self, field), f"StrategyOptions.{field}", low=1))
        for field in ("confidence", "dependency"):
            object.__setattr__(self, field, checks.real(getattr(self, field), f"StrategyOptions.{field}", low=0.0,
                                                        high=1.0))
        for field in ("factor", "entropy"):
            object.__setattr__(self, field, checks.real(getattr(self, field), f"StrategyOptions.{field}", low=0.0,
                                                        low_open=True))
        if self.block < 2 or self.block & (self.block - 1):
            raise ValueError(f"StrategyOptions.block (the DUS block size) must be a power of two >= 2; "
                             f"got {self.block!r}.")
        if self.refill not in ("prediction", "mask"):
            raise ValueError(f"StrategyOptions.refill must be 'prediction' or 'mask'; got {self.refill!r}.")

    @classmethod
    def for_rule(cls, name: str, setting, **fields) -> "StrategyOptions":
        """The options of rule strategy ``name`` (one of :data:`RULE_STRATEGIES`) with its one setting
        (the field :data:`RULE_SETTING` names) at ``setting``; ``fields`` sets the others (``steps``,
        ``hyps``, and for ``"dependency_entropy"`` its ``dependency`` threshold). The setting is checked
        as its field is: a DUS block size must be an integer power of two, never a rounded float."""
        if name not in RULE_SETTING:
            raise ValueError(f"StrategyOptions.for_rule: name must be one of {RULE_STRATEGIES}; got {name!r} "
                             "(Mask-Predict and the dependency-aware strategy have no single setting: construct "
                             "StrategyOptions directly).")
        if RULE_SETTING[name] in fields:
            raise TypeError(f"StrategyOptions.for_rule: {RULE_SETTING[name]!r} is the {name!r} rule's setting; pass "
                            "it as setting, not among the other fields.")
        return cls(name, **{RULE_SETTING[name]: setting}, **fields)


#: the settings of each options class that a compiled decoder takes as arguments (traced), not as
#: constants: a sweep over T or over a rule's threshold compiles once, not once per value. ``hyps``
#: stays a constant: it sets how many rows are decoded (B * hyps), and a count traced up to a compiled
#: maximum would decode the unused hypotheses too, so the graded batch-1 latency of #hyp 1 would pay
#: for the widest setting's work
_NUMERIC = {PadirOptions: ("steps",),
            StrategyOptions: ("steps", "confidence", "dependency", "factor", "entropy", "block")}
_INTEGER = ("steps", "block")
_SPLITS: dict = {}


def _settings(options) -> dict:
    """The settings of ``options`` a compiled decoder takes as operands, as host scalars: the numeric ones
    (``_NUMERIC``), for a :class:`PadirOptions` its ``init`` (``True``: ``"mask"``), ``remask_stutter`` and
    ``early_stop``, for a :class:`StrategyOptions` its ``refill`` (``True``: ``"mask"``) and, for a rule of
    :data:`SHARED_RULES`, which rule (``rule``). None when ``unroll``: an unrolled decoder is compiled for
    its settings (its T shapes the program)."""
    kind = type(options)
    if getattr(options, "unroll", False):
        return {}
    values = {name: (np.int32 if name in _INTEGER else np.float32)(getattr(options, name)) for name in _NUMERIC[kind]}
    if kind is PadirOptions:  # True: "mask"; the stutter re-masking and the early stop on or off
        values.update(init=np.bool_(options.init == "mask"), remask_stutter=np.bool_(options.remask_stutter),
                      early_stop=np.bool_(options.early_stop))
    if kind is StrategyOptions:
        values["refill"] = np.bool_(options.refill == "mask")
        if options.name in SHARED_RULES:  # one program for the four: the rule an operand
            values["rule"] = np.int32(SHARED_RULES.index(options.name))
    return values


def _dynamic(options):
    """``(structure, numbers)``: ``options`` with the settings a decoder takes as operands (:func:`_settings`:
    T, a strategy's thresholds, block size, refill and rule) at their class defaults, the static part a
    decoder is compiled for, and those settings as device scalars, the decoder's arguments. Why: each
    static setting is its own executable, and a frontier over T and a threshold grid compiled one decoder
    (a ``lax.switch`` over every hypothesis width) per value; on an accelerator compiling costs seconds,
    running milliseconds. The scalars are made once per options (uncommitted, so they follow the other
    arguments to their device)."""
    split = _SPLITS.get(options)
    if split is None:  # once per options: a batch-1 decode pays a dictionary lookup, not a validation
        kind, values = type(options), _settings(options)
        kept = {f.name: getattr(options, f.name) for f in dataclasses.fields(kind) if f.name not in values}
        if "rule" in values:
            kept["name"] = SHARED_RULES[0]
        numbers = {name: jax.device_put(v) for name, v in values.items()}  # copied, not staged (a program each)
        split = _SPLITS[options] = (kind(**kept), numbers)
    return split


SHARED_RULES = ("threshold", "factor", "entropy", "dilated")
"""The rule strategies that share one compiled decoder, which rule an operand (``numbers["rule"]``):
each chooses a pass's positions from the confidences, the entropies or the positions alone, with one
numeric setting (:data:`RULE_SETTING`), also an operand."""


def _shared_rule_select(numbers):
    """``select(conf, ent, masked, t, key)`` of the shared rule ``numbers["rule"]`` (an index into
    :data:`SHARED_RULES`) with its setting from ``numbers``: every rule's choice computed and the named
    one kept, by elementwise selects (a branch would read its index back to the host on a GPU, each pass)."""

    def select(conf, ent, masked, t, key):
        chosen = [unmasking.select_with(name)(numbers[RULE_SETTING[name]], conf, ent, masked, t, key)
                  for name in SHARED_RULES]
        kept = chosen[-1]
        for index in range(len(SHARED_RULES) - 2, -1, -1):
            kept = jnp.where(numbers["rule"] == index, chosen[index], kept)
        return kept

    return select


def _predict(model, hyp, tmask, enc_mask, cross_kv, with_attention: bool, with_entropy: bool = False):
    """One pass: argmax over the allowed ids (N, W), its log-probability (N, W), if asked the
    cross-attention distributions averaged over layers and heads (N, W, S + 1), and with
    ``with_entropy`` a fourth value: the entropy of each position's distribution (N, W), nats."""
    out = model.decode(hyp, tmask, None, enc_mask, cross_kv=cross_kv, return_attention=with_attention)
    logits, weights = out if with_attention else (out, None)
    logits = _forbid(logits, _PADIR_FORBIDDEN)
    top = jnp.max(logits, -1, keepdims=True)
    logp = -jnp.log(jnp.sum(jnp.exp(logits - top), -1))
    cross = None if weights is None else jnp.mean(jnp.stack([c for _, c in weights]), axis=(0, 2))
    pred = jnp.where(tmask, reductions.argmax(logits), V.PAD)
    if not with_entropy:
        return pred, logp, cross
    logq = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    ent = -jnp.sum(jnp.where(jnp.isfinite(logq), jnp.exp(logq) * logq, 0.0), -1)
    return pred, logp, cross, ent


def cross_attention_similarity(cross: jax.Array) -> jax.Array:
    """(N, W, S) attention distributions -> (N, W, W) cosine similarities between positions."""
    unit = cross / jnp.maximum(jnp.linalg.norm(cross, axis=-1, keepdims=True), 1e-30)
    return jnp.einsum("nis,njs->nij", unit, unit)


def adjacent_similarity(graphdef, params, src, src_mask, tgt, tgt_mask) -> jax.Array:
    """The dependency statistic of given outputs: (B, S) sources and (B, W) targets (PAD after each
    output) -> (B, W - 1), entry i the :func:`cross_attention_similarity` of positions i and i + 1,
    their cross-attention distributions averaged over layers and heads, read in one decoder pass over
    the targets given the source. The statistic the dependency-aware strategy thresholds, measured on
    a finished output [Section 3.4]; compiled once per input shape."""
    return jitted(_adjacent_similarity, graphdef)(params, src, src_mask, tgt, tgt_mask)


def _adjacent_similarity(graphdef, params, src, src_mask, tgt, tgt_mask):
    model = nnx.merge(graphdef, params)
    enc, enc_mask = model.encode(src, src_mask)
    _, weights = model.decode(tgt, tgt_mask, None, enc_mask, cross_kv=model.cross_kv(enc), return_attention=True)
    cross = jnp.mean(jnp.stack([c for _, c in weights]), axis=(0, 2))  # (B, W, S + 1)
    return jnp.diagonal(cross_attention_similarity(cross), offset=1, axis1=1, axis2=2)


def _commit(p, dep, eligible, quota, threshold):
    """One row: which eligible positions to commit, visiting them most confident first; a
    position is committed while fewer than ``quota`` are, or when it is confident and depends on
    no position committed before it in this pass. p (W,), dep (W, W) bool, eligible (W,) -> (W,)."""
    order = jnp.argsort(-jnp.where(eligible, p, -jnp.inf))

    def body(k, chosen):
        i = order[k]
        free = ~jnp.any(dep[i] & chosen)
        ok = eligible[i] & ((chosen.sum() < quota) | ((p[i] >= threshold) & free))
        return chosen.at[i].set(ok)

    return jax.lax.fori_loop(0, p.shape[0], body, jnp.zeros(p.shape, bool))


def _ceil_div(a, b: int):
    """``ceil(a / b)`` for non-negative integers, in integer arithmetic: in float32 ``7 * 1 / 7`` can
    round above 1 and its ceiling be 2, which would commit a position too many."""
    return (a + b - 1) // b


def _strategy_refine(model, enc, enc_mask, lengths, options: StrategyOptions, width: int, numbers=None) -> dict:
    """The passes of a :class:`StrategyOptions` strategy over ``B * hyps`` hypotheses of ``width``
    positions; returns ``ids`` (B, width), ``length`` (B,), ``score`` (B,) (mean log-probability
    of the chosen hypothesis' tokens, each when it was last predicted), ``steps`` (the passes the
    batch ran) and ``passes`` (B,): the passes each sentence needed, i.e. what a batch-1 decode of it
    runs (its hypotheses decode together, so the most any of them needed). ``numbers``: the
    strategy's numeric settings as traced scalars (``_dynamic``); ``None`` takes them from
    ``options``."""
    if numbers is None:
        numbers = _settings(options)
    b, l = lengths.shape
    lengths = lengths.reshape(-1)
    cross, enc_mask = hypothesis_cross_kv(model, enc, enc_mask, l)
    tmask = jnp.arange(width)[None, :] < lengths[:, None]
    n = tmask.sum(-1)
    T = numbers["steps"]
    hyp = jnp.where(tmask, V.MASK, V.PAD)
    dependency = options.name == "dependency"
    rule_based = options.name in RULE_STRATEGIES
    attention = options.name in ("dependency", "dependency_entropy")
    if options.name in SHARED_RULES:  # threshold, factor, entropy or dilated: numbers["rule"] says which
        select = _shared_rule_select(numbers)

    def cond(c):
        t, _, _, done, _, _ = c
        return (t < T) & ~jnp.all(done | ~tmask)

    def body(c):
        t, hyp, logp, done, tokens, used = c
        used = used + jnp.any(tmask & ~done, -1).astype(jnp.int32)  # rows still open run this pass
        if rule_based:
            pred, lp, att, ent = _predict(model, hyp, tmask, enc_mask, cross, attention, with_entropy=True)
            tokens = jnp.where(done, tokens, pred)
            logp = jnp.where(done, logp, lp)
            open_ = tmask & ~done
            if options.name == "dependency_entropy":
                strong = cross_attention_similarity(att) > numbers["dependency"]
                chosen = jax.vmap(lambda e, m, st: unmasking.dependency_select(e, m, st, numbers["entropy"]))(
                    ent, open_, strong)
            else:
                chosen = jax.vmap(lambda c_, e, m: select(c_, e, m, t, None))(jnp.exp(lp), ent, open_)
            chosen = chosen & open_
            # at least ceil(n (t + 1) / T) committed after this pass: the most confident open ones first
            need = _ceil_div(n * (t + 1), T) - done.sum(-1) - chosen.sum(-1)
            rest = open_ & ~chosen
            order = jnp.argsort(jnp.argsort(jnp.where(rest, -lp, jnp.inf), -1), -1)
            done = done | chosen | (rest & (order < need[:, None]))
            return t + 1, jnp.where(done, tokens, jnp.where(tmask, V.MASK, V.PAD)), logp, done, tokens, used
        pred, lp, att = _predict(model, hyp, tmask, enc_mask, cross, dependency)
        if not dependency:  # Mask-Predict: the masked positions take their new prediction
            masked = (hyp == V.MASK) & tmask
            tokens = jnp.where(masked, pred, tokens)
            logp = jnp.where(masked, lp, logp)
            remask = (n * (T - 1 - t)) // T  # after the last pass: none
            rank = jnp.argsort(jnp.argsort(jnp.where(tmask, logp, jnp.inf), -1), -1)
            again = tmask & (rank < remask[:, None])
            return t + 1, jnp.where(again, V.MASK, tokens), logp, ~again & tmask, tokens, used
        tokens = jnp.where(done, tokens, pred)
        logp = jnp.where(done, logp, lp)
        sim = cross_attention_similarity(att)
        open_ = tmask & ~done
        dep = (sim > numbers["dependency"]) & open_[:, :, None] & open_[:, None, :] & ~jnp.eye(width, dtype=bool)
        quota = _ceil_div(n * (t + 1), T) - done.sum(-1)
        new = jax.vmap(_commit, in_axes=(0, 0, 0, 0, None))(jnp.exp(logp), dep, open_, quota, numbers["confidence"])
        done = done | new
        refill = jnp.where(numbers["refill"], jnp.where(tmask, V.MASK, V.PAD), tokens)  # True: "mask"
        return t + 1, jnp.where(done, tokens, refill), logp, done, tokens, used

    init = (jnp.int32(0), hyp, jnp.zeros(hyp.shape, jnp.float32), jnp.zeros(hyp.shape, bool), hyp,
            jnp.zeros(hyp.shape[0], jnp.int32))
    steps, _, logp, _, tokens, used = jax.lax.while_loop(cond, body, init)
    score = (logp * tmask).sum(-1) / n
    pick = jnp.arange(b) * l + jnp.argmax(score.reshape(b, l), -1)
    return dict(ids=tokens[pick], length=lengths[pick], score=score[pick], steps=steps,
                passes=used.reshape(b, l).max(-1))


def source_keys(key, src, src_mask):
    """(B,) keys, one a source sentence: ``fold_in(key, h)`` with ``h`` a 32-bit hash of the row's ids
    (its real positions only). PaDIR's random initial hypotheses are drawn from these, so a sentence's
    translation depends on the seed and on its own ids, not on the batch it is decoded in, its place
    there or the padding: the same model, T and hypotheses give the same output at every batch size
    and in every chapter. (B, S) ids and mask."""
    return _source_keys(key, jax.device_put(src), jax.device_put(src_mask))


@jax.jit
def _source_keys(key, src, src_mask):
    ids = jnp.where(src_mask, src.astype(jnp.uint32) + 1, 0).astype(jnp.uint32)
    powers = jnp.cumprod(jnp.full(src.shape[-1], _HASH_BASE, jnp.uint32), dtype=jnp.uint32)  # wraps mod 2**32
    return jax.vmap(jax.random.fold_in, (None, 0))(key, (ids * powers).sum(-1, dtype=jnp.uint32))


_HASH_BASE = 0x01000193
"""The multiplier of :func:`source_keys`' polynomial hash (FNV's 32-bit prime)."""


def _row_keys(key, rows: int):
    """(rows,) keys: ``key`` itself when it is a batch of keys already, else ``fold_in(key, row)``."""
    return key if key.ndim == 1 else jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(rows, dtype=jnp.uint32))


def initial_hypothesis(keys, hyps: int, width: int, mask, vocab_size, init, full_width: int | None = None):
    """(B * hyps, width) ids: uniform random pieces (or ``[MASK]``) where ``mask``, PAD elsewhere. Row
    ``b``'s ``hyps`` hypotheses are drawn from ``keys[b]`` at ``full_width`` positions (default
    ``width``) and cut to ``width``, so with the same ``full_width`` a sentence starts from the same
    pieces whatever width its batch refines it at. ``keys``: (B,). ``init``: ``"random"`` or ``"mask"``,
    or a boolean (traced or not), true for ``[MASK]``."""
    if isinstance(init, str):
        init = init == "mask"
    if isinstance(init, (bool, np.bool_)) and init:
        return jnp.where(mask, np.int32(V.MASK), np.int32(V.PAD))
    full = width if full_width is None else max(full_width, width)
    draw = jax.vmap(lambda k: jax.random.randint(k, (hyps, full), V.FIRST_PIECE, vocab_size, jnp.int32))(keys)
    return jnp.where(mask, jnp.where(init, V.MASK, draw[:, :, :width].reshape(mask.shape)), V.PAD)


def stutter_positions(ids, mask):
    """(B, L) bool: position i > 0 repeats the token at i - 1 (both real positions): the stutter
    rule of :func:`gmlm_lib.mt.metrics.stutter_pairs` on the device, with no reference (pair
    (i - 1, i) is flagged at i)."""
    same = ids[:, 1:] == ids[:, :-1]
    rep = same & mask[:, 1:] & mask[:, :-1]
    return jnp.concatenate([jnp.zeros_like(rep[:, :1]), rep], axis=1)


def refine_pass(model, hyp, tmask, enc_mask, cross_kv):
    """One PaDIR refinement pass: hypotheses (N, W) with mask ``tmask``, the encoder mask (N, S + 1)
    and the cross-attention keys and values of the encoder states (``model.cross_kv(enc)``,
    computed once for all passes) -> the argmax over the allowed ids (N, W) (PAD outside
    ``tmask``) and the mean log-probability of that argmax over the real positions (N,).

    The argmax's log-probability is ``-log sum_v exp(logit_v - max_v logit_v)``, the same value
    (to the bit) as the maximum of ``jax.nn.log_softmax``, without the (N, W, V) array."""
    pred, best_logp, _ = _predict(model, hyp, tmask, enc_mask, cross_kv, with_attention=False)
    return pred, (best_logp * tmask).sum(-1) / tmask.sum(-1)


def hypothesis_cross_kv(model, enc, enc_mask, hyps: int):
    """The encoder side of PaDIR's passes, computed once per call: ``hyps`` copies of each source's
    states projected to cross-attention keys and values (a list over decoder layers of (B * hyps,
    S + 1, H, D/H) pairs) and the repeated mask (B * hyps, S + 1)."""
    return model.cross_kv(jnp.repeat(enc, hyps, 0)), jnp.repeat(enc_mask, hyps, 0)


def padir_encode(graphdef, params, src, src_mask, *, hyps: int):
    """PaDIR phase 1: encode and predict the top-``hyps`` target lengths (at least 1).
    (B, S) -> enc (B, S + 1, D), enc_mask (B, S + 1), lengths (B, hyps)."""
    return jitted(_padir_encode, graphdef, hyps=hyps)(params, src, src_mask)


def _padir_encode(graphdef, params, src, src_mask, *, hyps: int):
    return _encode_lengths(nnx.merge(graphdef, params), src, _source_mask(src, src_mask), hyps)


def _encode_lengths(model, src, src_mask, hyps: int):
    if hyps > model.cfg.max_len + 1:  # at trace time: the config is static
        raise ValueError(f"hyps = {hyps} exceeds the {model.cfg.max_len + 1} target lengths the model's length "
                         f"predictor chooses from (max_len + 1); use at most {model.cfg.max_len + 1} hypotheses.")
    enc, enc_mask = model.encode(src, src_mask)
    len_logits = model.length_logits(enc).at[:, 0].set(-jnp.inf)  # a translation has at least one token
    return enc, enc_mask, jax.lax.top_k(len_logits, hyps)[1].astype(jnp.int32)


def padir_refine(graphdef, params, enc, enc_mask, lengths, key, *, options: PadirOptions, width: int,
                 return_attention: bool = False, records: int | None = None):
    """PaDIR phase 2: T refinement passes over ``B * hyps`` hypotheses of ``width`` positions
    (``width`` >= every length; positions beyond a hypothesis' length are padding that no real
    position attends to). ``key``: (B,) keys, one a sentence (:func:`source_keys`), or one key whose
    ``fold_in`` with the row's index keys each row. Returns a dict with ``ids`` (B, width) (PAD beyond the chosen length),
    ``length`` (B,), ``score`` (B,) the mean log-probability of the chosen hypothesis, ``steps``
    (the passes run), ``history`` (R, B, width) the chosen hypothesis' argmax after each pass,
    ``pass_best`` (R, B, width) and ``pass_best_score`` (R, B), with R = ``records``: row t is the
    hypothesis that scores best after pass t + 1 and its score, i.e. what a decode with
    ``steps = t + 1`` and the same key returns (the chosen one may be another length hypothesis; rows
    after an early stop, and rows past T, repeat the last pass, as do those of ``history``), and, with
    ``return_attention``, ``attention``: the chosen hypotheses' weights in the final pass (the one
    whose argmax is the output), a list over decoder layers of ``(self (B, H, width, width),
    cross (B, H, width, S + 1))``, each row over real keys summing to one, and ``final_input``
    (B, width), that pass's input hypothesis [Section 3.4, App. L.5].
    The attention pass runs only with ``return_attention`` (a separate compilation), so the
    default path does the same work as without it.

    ``records`` (default T): the rows of the per-pass records, at least T; rows past the passes run
    repeat the last one. T is an operand of the compiled program (``_dynamic``) and ``records`` a
    constant, so decodes of several T with the same ``records`` share one program a width."""
    records = pass_records(options, records)
    structure, numbers = _dynamic(options)
    return jitted(_padir_refine, graphdef, options=structure, width=width, return_attention=return_attention,
                  records=records)(params, enc, enc_mask, lengths, key, numbers)


def pass_records(options: PadirOptions, records) -> int:
    """The per-pass records' rows: ``options.steps`` by default; refused by name when fewer than T."""
    if records is None:
        return options.steps
    records = checks.integer(records, "records", low=1)
    if records < options.steps:
        raise ValueError(f"records = {records} is fewer than the {options.steps} passes (options.steps) it records; "
                         f"pass records >= options.steps, or leave it None.")
    if options.unroll and records != options.steps:
        raise ValueError(f"records = {records} with unrolled passes: an unrolled decode records its "
                         f"options.steps = {options.steps} passes; leave records None.")
    return records


def _padir_refine(graphdef, params, enc, enc_mask, lengths, key, numbers, *, options: PadirOptions, width: int,
                  return_attention: bool, records: int):
    return _refine(nnx.merge(graphdef, params), enc, enc_mask, lengths, key, options, width,
                   history=True, return_attention=return_attention, numbers=numbers, records=records)


def _refine(model, enc, enc_mask, lengths, key, options: PadirOptions, width: int, *, history: bool,
            return_attention: bool = False, numbers=None, records: int | None = None) -> dict:
    """The refinement loop of :func:`padir_refine`; without ``history`` only ``ids``, ``length``,
    ``score`` and ``steps`` are kept (the same passes, none of the per-pass records). ``numbers``
    (:func:`_settings`, traced: ``_dynamic``) replace the settings of ``options`` they name: the number of
    passes T, ``init``, ``remask_stutter`` and ``early_stop``; with a traced T the records have ``records``
    rows (a constant, at least T: checked by the caller)."""
    numbers = numbers or {}
    if "steps" in numbers and history and records is None:
        raise ValueError("_refine: a traced number of passes with history needs records (the rows of the records).")
    if "steps" in numbers and options.unroll:
        raise ValueError("_refine: unrolled passes need a constant T (options.steps), not a traced one.")
    T = numbers.get("steps", options.steps)
    early_stop = numbers.get("early_stop", options.early_stop)
    remask = numbers.get("remask_stutter", options.remask_stutter)
    b, l = lengths.shape
    lengths = lengths.reshape(-1)
    # cross-attention keys and values of the encoder states repeated per hypothesis: projected once for all T passes
    cross, enc_mask = hypothesis_cross_kv(model, enc, enc_mask, l)
    tmask = jnp.arange(width)[None, :] < lengths[:, None]
    hyp = initial_hypothesis(_row_keys(key, b), l, width, tmask, model.cfg.vocab, numbers.get("init", options.init),
                             full_width=model.cfg.max_len)
    rows = (records or options.steps) if history else 1  # without history the records are one dummy row

    def cond(c):
        t, _, _, _, stop, _, _, _ = c
        return (t < T) & ~stop

    def body(c):
        t, hyp, prev, _, _, hist, hist_score, last_in = c
        pred, score = refine_pass(model, hyp, tmask, enc_mask, cross)
        stop = jnp.all(pred == prev) & early_stop
        nxt = jnp.where(stutter_positions(pred, tmask) & remask, V.MASK, pred)
        if history:
            hist, hist_score = hist.at[t].set(pred), hist_score.at[t].set(score)
        return t + 1, nxt, pred, score, stop, hist, hist_score, (hyp if return_attention else last_in)

    hist = jnp.full((rows, b * l, width), V.PAD, jnp.int32)
    hist_score = jnp.zeros((rows, b * l), jnp.float32)
    init = (jnp.int32(0), hyp, jnp.full_like(hyp, -1), jnp.zeros((b * l,), jnp.float32), jnp.bool_(False), hist,
            hist_score, hyp if return_attention else jnp.zeros((), jnp.int32))
    if options.unroll:  # T passes in a row, each kept only while the loop would have run it
        c = init
        for _ in range(options.steps):
            go, nxt = cond(c), body(c)
            c = jax.tree.map(lambda new, old: jnp.where(go, new, old), nxt, c)
        steps, _, pred, score, _, hist, hist_score, last_in = c
    else:
        steps, _, pred, score, _, hist, hist_score, last_in = jax.lax.while_loop(cond, body, init)
    pick = jnp.arange(b) * l + jnp.argmax(score.reshape(b, l), -1)
    out = dict(ids=pred[pick], length=lengths[pick], score=score[pick], steps=steps)
    if not history:
        return out
    ran = jnp.arange(rows) < steps  # rows after an early stop or past T repeat the last pass
    hist = jnp.where(ran[:, None, None], hist, pred[None])
    hist_score = jnp.where(ran[:, None], hist_score, score[None])
    # each pass's own best hypothesis: what a decode stopped after that pass returns
    top = jnp.arange(b)[None, :] * l + jnp.argmax(hist_score.reshape(rows, b, l), -1)  # (rows, B)
    out.update(history=hist[:, pick], pass_best=jnp.take_along_axis(hist, top[..., None], 1),
               pass_best_score=jnp.take_along_axis(hist_score, top, 1))
    if return_attention:  # the final pass again, on its own input, to read its weights (no dropout: the same pass)
        _, weights = model.decode(last_in[pick], tmask[pick], None, enc_mask[pick], return_attention=True,
                                  cross_kv=[(k[pick], v[pick]) for k, v in cross])
        out["attention"] = weights
        out["final_input"] = last_in[pick]
    return out


def hypothesis_widths(buckets, max_len: int) -> tuple[int, ...]:
    """The hypothesis widths PaDIR decodes with: the ``buckets`` up to ``max_len``, and ``max_len``
    (which holds every length the length predictor can choose)."""
    return tuple(sorted({w for w in buckets if w < max_len} | {max_len}))


def padir_ids(graphdef, params, src, src_mask, key, *, options: PadirOptions | StrategyOptions,
              widths: tuple[int, ...], to_host: bool = False):
    """Both PaDIR phases in one compiled program, for translation: (B, S) sources -> ids
    (B, max(widths)), PAD beyond each chosen hypothesis' length; the same ids as
    ``padir(...)["ids"]`` with ``buckets = widths``. The hypothesis width (the smallest of
    ``widths`` holding the longest predicted length) is chosen on the device by a
    ``lax.switch`` over one branch per width, so a translation is a single call with no host
    round trip between encoding and refining, and keeps no per-pass records. ``widths``:
    :func:`hypothesis_widths`. Each sentence's initial hypotheses come from ``key`` and its own ids
    (:func:`source_keys`). With :class:`StrategyOptions` the passes are that strategy's
    (``key`` unused: its hypotheses start from ``[MASK]``). With ``PadirOptions(unroll=True)`` only the
    widest of ``widths`` is used (no branch in the program). ``src_mask`` and ``to_host``: as
    :func:`ar_greedy`."""
    widths = _checked_widths(widths)
    if getattr(options, "unroll", False):
        widths = widths[-1:]  # one straight-line program: no branch over widths
    structure, numbers = _dynamic(options)
    return jitted(_padir_ids, graphdef, options=structure, widths=widths, to_host=to_host)(
        params, src, src_mask, key, numbers)


def _checked_widths(widths) -> tuple[int, ...]:
    """``widths`` sorted, refused by name when empty (``lax.switch`` needs a branch)."""
    widths = tuple(sorted(checks.integer(w, "widths[i]", low=1) for w in widths))
    if not widths:
        raise ValueError("widths must hold at least one hypothesis width; pass hypothesis_widths(buckets, max_len).")
    return widths


def _check_fits(model, widths: tuple[int, ...]) -> None:
    """At trace time (the model's config is static): the widths fit the model's ``max_len``."""
    if widths[-1] > model.cfg.max_len:
        raise ValueError(f"widths go up to {widths[-1]} but the model's max_len = {model.cfg.max_len}; pass "
                         "hypothesis_widths(buckets, max_len).")


def _width_index(widths: tuple[int, ...], lengths):
    """On the device: the index in ``widths`` (sorted) of the smallest width that holds the longest of
    ``lengths``, the last where none does (the branch :func:`jax.lax.switch` takes). ``compare_all``:
    no loop in the program for a handful of widths."""
    index = jnp.searchsorted(jnp.asarray(widths), jnp.max(lengths), method="compare_all")
    return jnp.minimum(index, len(widths) - 1)


def _padir_ids(graphdef, params, src, src_mask, key, numbers, *, options, widths: tuple[int, ...]):
    model = nnx.merge(graphdef, params)
    _check_fits(model, widths)
    src_mask = _source_mask(src, src_mask)
    enc, enc_mask, lengths = _encode_lengths(model, src, src_mask, options.hyps)

    def branch(width):
        def run(_):
            if isinstance(options, StrategyOptions):
                ids = _strategy_refine(model, enc, enc_mask, lengths, options, width, numbers)["ids"]
            else:
                ids = _refine(model, enc, enc_mask, lengths, _source_keys(key, src, src_mask), options, width,
                              history=False, numbers=numbers)["ids"]  # none when unrolled: T is constant
            return jnp.pad(ids, ((0, 0), (0, widths[-1] - width)), constant_values=V.PAD)
        return run

    return jax.lax.switch(_width_index(widths, lengths), [branch(w) for w in widths], None)


def strategy_passes(graphdef, params, src, src_mask, *, options: StrategyOptions, widths: tuple[int, ...]):
    """The decoder passes each sentence of a :class:`StrategyOptions` decode needs: (B, S) -> (B,)
    int32, at most ``options.steps`` (fewer when an adaptive rule commits every position early).
    The same passes as :func:`padir_ids` with the same ``widths``; a batch-1 decode runs that many."""
    if not isinstance(options, StrategyOptions):
        raise TypeError(f"strategy_passes counts the passes of a StrategyOptions strategy; got "
                        f"{type(options).__name__} (plain PaDIR runs its T passes unless it stops early).")
    widths = _checked_widths(widths)
    structure, numbers = _dynamic(options)
    return jitted(_strategy_passes, graphdef, options=structure, widths=widths)(params, src, src_mask, numbers)


def _strategy_passes(graphdef, params, src, src_mask, numbers, *, options, widths: tuple[int, ...]):
    model = nnx.merge(graphdef, params)
    _check_fits(model, widths)
    enc, enc_mask, lengths = _encode_lengths(model, src, _source_mask(src, src_mask), options.hyps)
    branches = [lambda _, w=w: _strategy_refine(model, enc, enc_mask, lengths, options, w, numbers)["passes"]
                for w in widths]
    return jax.lax.switch(_width_index(widths, lengths), branches, None)


def padir(graphdef, params, src, src_mask, key, *, options: PadirOptions, max_len: int, buckets=(),
          return_attention: bool = False, records: int | None = None) -> dict:
    """Both PaDIR phases; the hypothesis width is the smallest of ``buckets`` that holds the
    longest predicted length (else ``max_len``, the model's), so short sentences cost short passes.
    Each sentence's initial hypotheses come from ``key`` and its own ids (:func:`source_keys`).
    ``records``: as :func:`padir_refine`."""
    records = pass_records(options, records)  # refused before the encoder runs
    enc, enc_mask, lengths = padir_encode(graphdef, params, src, src_mask, hyps=options.hyps)
    longest = int(np.max(jax.device_get(lengths)))
    width = next((w for w in sorted(buckets) if w >= longest), max_len)
    return padir_refine(graphdef, params, enc, enc_mask, lengths, source_keys(key, src, src_mask), options=options,
                        width=width, return_attention=return_attention, records=records)


def strip(ids: np.ndarray, *, drop_repeats: bool = False) -> list[list[int]]:
    """Rows of ids -> lists up to (not including) the first EOS or PAD; with ``drop_repeats``
    consecutive repeated tokens are merged (PaDIR's post-processing after the last step). (B, L) ids."""
    ids = np.asarray(ids)
    checks.shape(ids, "ids", (None, None), what="(batch, length): one row of token ids a sentence")
    rows = []
    for row in ids:
        out = []
        for tok in row.tolist():
            if tok in (V.EOS, V.PAD):
                break
            if drop_repeats and out and out[-1] == tok:
                continue
            out.append(tok)
        rows.append(out)
    return rows
