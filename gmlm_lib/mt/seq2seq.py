"""The encoder-decoder Transformer behind PaDIR and its autoregressive baseline [Section 3.2, App. L.1-L.2].

One code base, two decoders, chosen by :class:`ModelConfig`:

* ``causal=True``: the AR decoder (causal self-attention; a KV cache for incremental decoding);
* ``causal=False``: the PaDIR decoder (bidirectional self-attention over the hypothesis,
  positional attention in every layer, a length predictor reading the ``[LENGTH]`` token that is
  prepended to every source).

Shapes: sources ``(B, S)`` int32 with a boolean mask ``(B, S)``; targets ``(B, L)`` int32 with a
mask ``(B, L)``; logits ``(B, L, V)`` float32. Parameters are float32; activations use
``ModelConfig.dtype`` (``"bfloat16"`` on accelerators). Dropout takes an explicit key (``None``
turns it off), so a module call is a pure function of parameters, inputs and key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from gmlm_lib.core import checks
from gmlm_lib.core.rng import key as random_key
from gmlm_lib.mt import vocab as V

NEG = -1e9  # logit of a masked attention key; exp underflows to exactly 0 in float32


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Everything that defines a model. ``max_len`` bounds source and target lengths (tokens,
    EOS included for AR targets); the length predictor has ``max_len + 1`` classes."""

    vocab: int
    causal: bool
    d_model: int = 256
    heads: int = 4
    enc_layers: int = 3
    dec_layers: int = 3
    d_ff: int = 1024
    max_len: int = 64
    dropout: float = 0.1
    positional_attention: bool = True
    dtype: str = "float32"
    dropout_rng: str = "threefry"

    def __post_init__(self):
        for name in ("vocab", "d_model", "heads", "enc_layers", "dec_layers", "d_ff", "max_len"):
            checks.integer(getattr(self, name), f"ModelConfig.{name}", low=1)
        for name in ("causal", "positional_attention"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"ModelConfig.{name} must be True or False; got {getattr(self, name)!r}.")
        if self.vocab <= V.FIRST_PIECE:
            raise ValueError(f"ModelConfig.vocab = {self.vocab} must exceed the {V.FIRST_PIECE} special ids.")
        if self.d_model % self.heads:
            raise ValueError(f"ModelConfig.d_model = {self.d_model} must be divisible by heads = {self.heads}.")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ModelConfig.dropout must be in [0, 1); got {self.dropout}.")
        if self.dropout_rng not in ("threefry", "hash"):
            raise ValueError(f"ModelConfig.dropout_rng must be 'threefry' or 'hash'; got {self.dropout_rng!r}.")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"ModelConfig.dtype must be 'float32' or 'bfloat16'; got {self.dtype!r}.")

    @property
    def compute_dtype(self):
        return jnp.dtype(self.dtype)


def _fmix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: a bijection of uint32 under which every output bit depends
    on every input bit (its avalanche property)."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def dropout_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """uint32 bits of ``shape`` for dropout masks, a counter hash: two words drawn from ``key``
    (one Threefry call) seed ``fmix32(fmix32(i ^ s0) + s1)`` for the element counter ``i``.
    Deterministic in ``key``; element ``i`` depends only on ``i`` and the key, so the bits do not
    change when the batch is sharded over devices. About a tenth of the integer work of drawing
    every element with Threefry, which at this model's size is a sizeable part of a training
    update on a CPU; not a cryptographic or general-purpose generator."""
    size = math.prod(shape)
    if size >= 2**32:
        raise ValueError(f"dropout_bits: {size} elements exceed the 2^32 counters of the hash.")
    s = jax.random.bits(key, (2,), jnp.uint32)
    counter = jax.lax.iota(jnp.uint32, size).reshape(shape)
    return _fmix32(_fmix32(counter ^ s[0]) + s[1])


def dropout(x: jax.Array, rate: float, key: jax.Array | None, rng: str = "threefry") -> jax.Array:
    """Inverted dropout: each element is zeroed with probability ``rate`` (the rest scaled by
    ``1 / (1 - rate)``); the identity when ``key`` is None or ``rate`` is 0. ``rng``: "threefry"
    (``jax.random.bernoulli``) or "hash" (:func:`dropout_bits`; an element is dropped when its
    bits fall below ``round(rate * 2^32)``, so the rate is exact to 2^-32)."""
    if key is None or rate == 0.0:
        return x
    if rng == "hash":
        keep = dropout_bits(key, x.shape) >= jnp.uint32(round(rate * 2**32))
    else:
        keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


def _split(key, n):
    return [None] * n if key is None else list(jax.random.split(key, n))


class Attention(nnx.Module):
    """Multi-head attention. ``mask`` (B, 1 or H, Q, K) is True where a query may see a key.
    Softmax in float32; returns ``(out (B, Q, D), weights (B, H, Q, K) or None)``."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        kw = dict(dtype=cfg.compute_dtype, param_dtype=jnp.float32, rngs=rngs)
        self.heads, self.dh = cfg.heads, cfg.d_model // cfg.heads
        self.q, self.k, self.v, self.o = (nnx.Linear(cfg.d_model, cfg.d_model, **kw) for _ in range(4))

    def project_kv(self, xk, xv):
        b = xk.shape[0]
        return (self.k(xk).reshape(b, -1, self.heads, self.dh), self.v(xv).reshape(b, -1, self.heads, self.dh))

    def __call__(self, xq, xk, xv, mask, *, kv=None, return_weights=False):
        b = xq.shape[0]
        q = self.q(xq).reshape(b, -1, self.heads, self.dh)
        k, v = kv if kv is not None else self.project_kv(xk, xv)
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / math.sqrt(self.dh)
        w = jax.nn.softmax(jnp.where(mask, logits, NEG), axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", w.astype(v.dtype), v).reshape(b, -1, self.heads * self.dh)
        return self.o(out), (w if return_weights else None)


class MLP(nnx.Module):
    """The position-wise feed-forward block: ``d_model -> d_ff`` (GELU, dropout) ``-> d_model``."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        kw = dict(dtype=cfg.compute_dtype, param_dtype=jnp.float32, rngs=rngs)
        self.up = nnx.Linear(cfg.d_model, cfg.d_ff, **kw)
        self.down = nnx.Linear(cfg.d_ff, cfg.d_model, **kw)
        self.rng = cfg.dropout_rng

    def __call__(self, h, rate, key):
        return self.down(dropout(jax.nn.gelu(self.up(h)), rate, key, self.rng))


def _norm(cfg: ModelConfig, rngs):
    return nnx.LayerNorm(cfg.d_model, dtype=cfg.compute_dtype, param_dtype=jnp.float32, rngs=rngs)


class EncoderBlock(nnx.Module):
    """Pre-LayerNorm block: self-attention over the source, then the MLP."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.rate, self.rng = cfg.dropout, cfg.dropout_rng
        self.ln1, self.attn, self.ln2, self.mlp = _norm(cfg, rngs), Attention(cfg, rngs=rngs), _norm(cfg, rngs), MLP(cfg, rngs=rngs)

    def __call__(self, h, mask, key=None):
        k1, k2, k3 = _split(key, 3)
        x = self.ln1(h)
        h = h + dropout(self.attn(x, x, x, mask)[0], self.rate, k1, self.rng)
        return h + dropout(self.mlp(self.ln2(h), self.rate, k2), self.rate, k3, self.rng)


class DecoderBlock(nnx.Module):
    """Self-attention (causal or bidirectional), positional attention (queries and keys from the
    position embeddings, values from the residual stream; PaDIR), cross-attention, MLP."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.rate, self.rng = cfg.dropout, cfg.dropout_rng
        self.ln1, self.self_attn = _norm(cfg, rngs), Attention(cfg, rngs=rngs)
        self.has_pos = cfg.positional_attention
        if self.has_pos:
            self.ln_pos, self.pos_attn = _norm(cfg, rngs), Attention(cfg, rngs=rngs)
        self.ln_x, self.cross = _norm(cfg, rngs), Attention(cfg, rngs=rngs)
        self.ln2, self.mlp = _norm(cfg, rngs), MLP(cfg, rngs=rngs)

    def __call__(self, h, pos, enc, self_mask, cross_mask, key=None, *, cache=None, t=None,
                 cross_kv=None, return_weights=False):
        k1, k2, k3, k4, k5 = _split(key, 5)
        x = self.ln1(h)
        if cache is not None:  # incremental (AR): write this step's key/value at position t
            k_new, v_new = self.self_attn.project_kv(x, x)
            cache = (jax.lax.dynamic_update_slice_in_dim(cache[0], k_new.astype(cache[0].dtype), t, axis=1),
                     jax.lax.dynamic_update_slice_in_dim(cache[1], v_new.astype(cache[1].dtype), t, axis=1))
            a, w_self = self.self_attn(x, None, None, self_mask, kv=cache, return_weights=return_weights)
        else:
            a, w_self = self.self_attn(x, x, x, self_mask, return_weights=return_weights)
        h = h + dropout(a, self.rate, k1, self.rng)
        if self.has_pos:
            h = h + dropout(self.pos_attn(pos, pos, self.ln_pos(h), self_mask)[0], self.rate, k2, self.rng)
        c, w_cross = self.cross(self.ln_x(h), enc, enc, cross_mask, kv=cross_kv, return_weights=return_weights)
        h = h + dropout(c, self.rate, k3, self.rng)
        h = h + dropout(self.mlp(self.ln2(h), self.rate, k4), self.rate, k5, self.rng)
        return h, cache, (w_self, w_cross)


class Seq2Seq(nnx.Module):
    """Encoder plus AR or PaDIR decoder (``cfg.causal``), tied input/output embeddings."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.causal and cfg.positional_attention:
            cfg = dataclasses.replace(cfg, positional_attention=False)  # positional attention is a PaDIR component
        self.cfg = cfg
        kw = dict(dtype=cfg.compute_dtype, param_dtype=jnp.float32, rngs=rngs)
        self.embed = nnx.Embed(cfg.vocab, cfg.d_model, **kw)
        self.pos_enc = nnx.Embed(cfg.max_len + 1, cfg.d_model, **kw)
        self.pos_dec = nnx.Embed(cfg.max_len + 1, cfg.d_model, **kw)
        self.encoder = nnx.List([EncoderBlock(cfg, rngs=rngs) for _ in range(cfg.enc_layers)])
        self.decoder = nnx.List([DecoderBlock(cfg, rngs=rngs) for _ in range(cfg.dec_layers)])
        self.ln_enc, self.ln_dec = _norm(cfg, rngs), _norm(cfg, rngs)
        if not cfg.causal:
            self.length_head = nnx.Linear(cfg.d_model, cfg.max_len + 1, **kw)

    # -- encoder --------------------------------------------------------------------------------
    def encode(self, src: jax.Array, src_mask: jax.Array, key=None) -> tuple[jax.Array, jax.Array]:
        """(B, S) ids and mask -> encoder states (B, S + 1, D) and mask (B, S + 1); position 0
        holds the ``[LENGTH]`` token."""
        b, s = src.shape
        if s > self.cfg.max_len:
            raise ValueError(f"source length {s} exceeds ModelConfig.max_len = {self.cfg.max_len}.")
        src = jnp.concatenate([jnp.full((b, 1), V.LENGTH, src.dtype), src], axis=1)
        mask = jnp.concatenate([jnp.ones((b, 1), bool), src_mask.astype(bool)], axis=1)
        keys = _split(key, len(self.encoder) + 1)
        h = dropout(self.embed(src) + self.pos_enc(jnp.arange(s + 1))[None], self.cfg.dropout, keys[0],
                    self.cfg.dropout_rng)
        attn_mask = mask[:, None, None, :]
        for block, k in zip(self.encoder, keys[1:]):
            h = block(h, attn_mask, k)
        return self.ln_enc(h), mask

    def length_logits(self, enc: jax.Array) -> jax.Array:
        """(B, S + 1, D) -> (B, max_len + 1) float32 logits over target lengths (PaDIR)."""
        if self.cfg.causal:
            raise ValueError("length_logits: the AR model has no length predictor (ModelConfig.causal = True).")
        return self.length_head(enc[:, 0]).astype(jnp.float32)

    # -- decoder --------------------------------------------------------------------------------
    def self_mask(self, tgt_mask: jax.Array) -> jax.Array:
        """(B, L) -> (B, 1, L, L): causal for AR; for PaDIR every position sees every real one."""
        length = tgt_mask.shape[1]
        keys = tgt_mask.astype(bool)[:, None, None, :]
        if self.cfg.causal:
            return keys & jnp.tril(jnp.ones((length, length), bool))[None, None]
        return jnp.broadcast_to(keys, (tgt_mask.shape[0], 1, length, length))

    def logits(self, h: jax.Array) -> jax.Array:
        return self.embed.attend(self.ln_dec(h)).astype(jnp.float32)

    def decode(self, tgt: jax.Array, tgt_mask: jax.Array, enc: jax.Array | None, enc_mask: jax.Array, key=None,
               *, cross_kv: list | None = None, return_attention: bool = False):
        """Teacher-forced (AR) or one refinement pass (PaDIR): (B, L) -> logits (B, L, V).

        ``cross_kv`` (:meth:`cross_kv` of the encoder states) replaces ``enc`` (pass None), so that
        PaDIR's T passes over the same source project its states once. With ``return_attention``
        also returns a list over layers of ``(self (B, H, L, L), cross (B, H, L, S + 1))``
        attention weights."""
        if (enc is None) == (cross_kv is None):
            raise ValueError("decode: pass the encoder states as enc or their projections as cross_kv "
                             "(Seq2Seq.cross_kv(enc)), exactly one of the two.")
        if cross_kv is not None and len(cross_kv) != len(self.decoder):
            raise ValueError(f"decode: cross_kv has {len(cross_kv)} entries for {len(self.decoder)} decoder layers; "
                             "build it with Seq2Seq.cross_kv(enc) of this model.")
        b, length = tgt.shape
        if length > self.cfg.max_len + 1:
            raise ValueError(f"target length {length} exceeds ModelConfig.max_len + 1 = {self.cfg.max_len + 1}.")
        keys = _split(key, len(self.decoder) + 1)
        pos = self.pos_dec(jnp.arange(length))[None]
        h = dropout(self.embed(tgt) + pos, self.cfg.dropout, keys[0], self.cfg.dropout_rng)
        pos = jnp.broadcast_to(pos, h.shape)
        smask, cmask = self.self_mask(tgt_mask), enc_mask.astype(bool)[:, None, None, :]
        weights = []
        kvs = [None] * len(self.decoder) if cross_kv is None else cross_kv
        for block, k, kv in zip(self.decoder, keys[1:], kvs):
            h, _, w = block(h, pos, enc, smask, cmask, k, cross_kv=kv, return_weights=return_attention)
            weights.append(w)
        out = self.logits(h)
        return (out, weights) if return_attention else out

    # -- incremental AR decoding ---------------------------------------------------------------
    def init_cache(self, batch: int, length: int) -> list[tuple[jax.Array, jax.Array]]:
        """Per layer (keys, values), each (batch, length, H, D/H), zeros."""
        if not self.cfg.causal:
            raise ValueError("init_cache: only the AR decoder (causal = True) decodes incrementally.")
        shape = (batch, length, self.cfg.heads, self.cfg.d_model // self.cfg.heads)
        return [(jnp.zeros(shape, self.cfg.compute_dtype), jnp.zeros(shape, self.cfg.compute_dtype))
                for _ in self.decoder]

    def cross_kv(self, enc: jax.Array) -> list[tuple[jax.Array, jax.Array]]:
        """Per layer, the cross-attention keys and values of the encoder states (computed once)."""
        return [block.cross.project_kv(enc, enc) for block in self.decoder]

    def decode_step(self, token: jax.Array, t: jax.Array, cache: list, cross_kv: list, enc_mask: jax.Array):
        """One AR step: token (B,) at position t -> logits (B, V) and the updated cache."""
        length = cache[0][0].shape[1]
        h = self.embed(token[:, None]) + self.pos_dec(jnp.reshape(t, (1,)))[None]
        smask = (jnp.arange(length) <= t)[None, None, None, :]
        cmask = enc_mask.astype(bool)[:, None, None, :]
        new_cache = []
        for block, c, kv in zip(self.decoder, cache, cross_kv):
            h, c, _ = block(h, None, None, smask, cmask, cache=c, t=t, cross_kv=kv)
            new_cache.append(c)
        return self.logits(h)[:, 0], new_cache


def count_params(model: nnx.Module) -> int:
    """Number of trainable scalars (``nnx.Param`` leaves) in ``model``."""
    return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def params_fingerprint(model: nnx.Module) -> str:
    """SHA-256 of every parameter's path, shape, dtype and values (in path order)."""
    h = hashlib.sha256()
    for path, var in sorted(nnx.to_flat_state(nnx.state(model, nnx.Param)), key=lambda kv: tuple(map(str, kv[0]))):
        x = np.asarray(var[...])
        h.update(repr(("/".join(map(str, path)), x.shape, str(x.dtype))).encode())
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def build(cfg: ModelConfig, seed: int = 0) -> Seq2Seq:
    """A freshly initialised :class:`Seq2Seq` for ``cfg``; ``seed`` fixes the initial weights: those of
    ``Seq2Seq(cfg, rngs=nnx.Rngs(seed))`` to float32 rounding (tested; compiled, XLA may fold a draw's
    scaling into one product). Built by one compiled program per config, the key an operand: constructed
    op by op, a Transformer's initialisation dispatches a program per parameter shape and initialiser
    (some thirty a model)."""
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"build: cfg must be a ModelConfig; got {type(cfg).__name__}.")
    return _build(cfg, random_key(seed))


@nnx.jit(static_argnums=0)
def _build(cfg: ModelConfig, key: jax.Array) -> Seq2Seq:
    return Seq2Seq(cfg, rngs=nnx.Rngs(key))


SHAPE_FIELDS = ("vocab", "d_model", "heads", "enc_layers", "dec_layers", "d_ff", "max_len")


def warm_start(model: Seq2Seq, teacher: Seq2Seq) -> tuple[Seq2Seq, list[str]]:
    """``model`` with every parameter that ``teacher`` also has (same path, same shape) copied from
    ``teacher``; returns the new model and the paths of the parameters it kept (a PaDIR model
    started from the AR teacher keeps its positional attention and length predictor).

    The output projection of each kept positional attention is zeroed, so that the started model
    computes what the teacher's layers compute (with bidirectional self-attention) until training
    moves it. This departs from the paper, which initialises PaDIR randomly [App. L.2], for
    budgets far shorter than its 500k steps (Guo et al., AAAI 2020, study starting a
    non-autoregressive model from an autoregressive one, with a curriculum; this is the plain
    start). The two configs must agree on every size (``SHAPE_FIELDS``)."""
    diff = [f"{f} ({getattr(model.cfg, f)} here, {getattr(teacher.cfg, f)} in the teacher)"
            for f in SHAPE_FIELDS if getattr(model.cfg, f) != getattr(teacher.cfg, f)]
    if diff:
        raise ValueError("warm_start: the teacher's ModelConfig differs in " + ", ".join(diff) +
                         "; train the model from a random start or use a teacher of the same size.")
    model = nnx.clone(model)  # the caller's model is left as it was
    source = dict(nnx.to_flat_state(nnx.state(teacher, nnx.Param)))
    kept, copied, zeroed = [], [], []
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        if path in source and source[path][...].shape == var[...].shape:
            copied.append((var, source[path][...]))
        else:
            kept.append("/".join(map(str, path)))
            if "pos_attn" in path and path[-2] == "o":
                zeroed.append(var)
    # own buffers (training donates them), made by one program rather than one per parameter shape
    copies, zeros = _copy_arrays([value for _, value in copied], [var[...] for var in zeroed])
    for var, value in zip([var for var, _ in copied] + zeroed, copies + zeros):
        var.set_value(value)  # the array itself: var[...] = value scatters into the old one where shardings differ
    return model, kept


@jax.jit
def _copy_arrays(arrays: list, zero: list) -> tuple[list, list]:
    """Fresh copies of ``arrays`` (a jitted function's outputs never alias its inputs), and zeros shaped as
    ``zero``'s arrays."""
    return [jnp.copy(a) for a in arrays], [jnp.zeros_like(a) for a in zero]
