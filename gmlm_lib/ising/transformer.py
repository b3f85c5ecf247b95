"""A small bidirectional Transformer that maps a sequence to per-position distributions in one
forward pass: the "parallel decoder" of Propositions 3-4 [Section 2.4.1, Appendix I].

Sampling each position from its own softmax makes the transition ``Q(y | x) = prod_i q_i(y_i | x)``
a product over positions, whatever the weights. Flax ``nnx`` modules with float32 parameters and
activations set explicitly (the exact-numerics modules switch JAX to x64), Optax for training.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from gmlm_lib.core import checks, rng
from gmlm_lib.core.progress import bar as progress_bar

DTYPE = jnp.float32


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything that defines a :class:`ParallelDecoder`: ``vocab`` input tokens, ``outputs``
    classes per position, ``length`` positions, width, heads, layers, MLP width."""

    vocab: int
    outputs: int
    length: int
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    d_ff: int = 128

    def __post_init__(self):
        for name in ("vocab", "outputs", "length", "d_model", "heads", "layers", "d_ff"):
            object.__setattr__(self, name, checks.integer(getattr(self, name), f"Config.{name}", low=1))
        if self.d_model % self.heads:
            raise ValueError(f"Config.d_model = {self.d_model} must be divisible by heads = {self.heads}.")


class Block(nnx.Module):
    """Pre-LayerNorm Transformer block: bidirectional self-attention, then a GELU MLP."""

    def __init__(self, cfg: Config, *, rngs: nnx.Rngs):
        kw = dict(dtype=DTYPE, param_dtype=DTYPE, rngs=rngs)
        self.ln1 = nnx.LayerNorm(cfg.d_model, **kw)
        self.attn = nnx.MultiHeadAttention(cfg.heads, cfg.d_model, decode=False, **kw)
        self.ln2 = nnx.LayerNorm(cfg.d_model, **kw)
        self.up = nnx.Linear(cfg.d_model, cfg.d_ff, **kw)
        self.down = nnx.Linear(cfg.d_ff, cfg.d_model, **kw)

    def __call__(self, h: jax.Array) -> jax.Array:
        h = h + self.attn(self.ln1(h))
        return h + self.down(jax.nn.gelu(self.up(self.ln2(h))))


class ParallelDecoder(nnx.Module):
    """Tokens (B, L) int -> logits (B, L, outputs) float32, every position at once, no mask: sampling
    each position from its logits is a product transition given the tokens [Propositions 3-4]."""

    def __init__(self, cfg: Config, *, rngs: nnx.Rngs):
        kw = dict(dtype=DTYPE, param_dtype=DTYPE, rngs=rngs)
        self.cfg = cfg
        self.tok = nnx.Embed(cfg.vocab, cfg.d_model, **kw)
        self.pos = nnx.Embed(cfg.length, cfg.d_model, **kw)
        self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.layers)])
        self.ln = nnx.LayerNorm(cfg.d_model, **kw)
        self.head = nnx.Linear(cfg.d_model, cfg.outputs, **kw)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        tokens = jnp.asarray(tokens)
        if tokens.ndim != 2 or tokens.shape[1] != self.cfg.length:
            raise ValueError(f"tokens must have shape (batch, {self.cfg.length}); got {tokens.shape}.")
        h = self.tok(tokens) + self.pos(jnp.arange(self.cfg.length))[None]
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln(h))


def build(cfg: Config, seed: int) -> ParallelDecoder:
    """A :class:`ParallelDecoder` for ``cfg`` initialised from ``seed``, built in one compiled program
    (module construction run eagerly compiles one program per initialiser operation and shape)."""
    if not isinstance(cfg, Config):
        raise TypeError(f"cfg must be a transformer.Config; got {type(cfg).__name__}.")
    return _build(cfg, rng.key(checks.integer(seed, "seed", low=0)))


@nnx.jit(static_argnums=0)
def _build(cfg: Config, key: jax.Array) -> ParallelDecoder:
    return ParallelDecoder(cfg, rngs=nnx.Rngs(key))


@nnx.jit
def predict(model: ParallelDecoder, tokens: jax.Array) -> jax.Array:
    """``model(tokens)``, jitted: logits (B, L, outputs) for tokens (B, L); one program per model
    structure and batch shape."""
    return model(tokens)


@jax.jit
def product_log_probs(logits: jax.Array) -> jax.Array:
    """Per-position log-probabilities (B, L, C) from logits, in float64 for exact distances; jitted, one
    program a shape (op by op, a conversion and the softmax's operations would each be one)."""
    return jax.nn.log_softmax(jnp.asarray(logits, dtype=jnp.float64), axis=-1)


def train(model: ParallelDecoder, batches: Iterator[tuple[np.ndarray, np.ndarray]], steps: int, *,
          learning_rate: float = 3e-3, warmup: int = 100, weight_decay: float = 1e-4,
          log_every: int = 100, progress: bool = True, on_log: Callable | None = None) -> dict:
    """Minimise the mean per-position cross-entropy on ``(tokens (B, L), targets (B, L))`` batches
    with AdamW, linear warm-up (``warmup`` steps, at most a tenth of the run) and cosine decay. Returns {"losses": [(step, loss)], "wall_s"}."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1; got {steps}.")
    for name, value in (("learning_rate", learning_rate), ("weight_decay", weight_decay)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf") \
                or (name == "learning_rate" and value == 0):
            raise ValueError(f"{name} must be a finite number{' > 0' if name == 'learning_rate' else ' >= 0'}; got {value!r}.")
    warm = max(1, min(warmup, steps // 10))  # the warm-up never takes more than a tenth of the run
    schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, warm, max(steps, warm + 1))
    tx = optax.adamw(schedule, weight_decay=weight_decay)
    opt = nnx.jit(lambda m: nnx.Optimizer(m, tx, wrt=nnx.Param))(model)  # one program, not one per moment's shape

    @nnx.jit
    def step(model, opt, tokens, targets):
        def loss_fn(model):
            logits = model(tokens)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss

    losses, start = [], time.perf_counter()
    for t in progress_bar(range(1, steps + 1), progress=progress, desc="training", leave=False):
        tokens, targets = next(batches)
        loss = step(model, opt, np.asarray(tokens, np.int32), np.asarray(targets, np.int32))  # cast on the host
        if t % log_every == 0 or t == steps:
            losses.append((t, float(loss)))
            if on_log is not None:
                on_log(t, float(loss))
    return {"losses": losses, "wall_s": time.perf_counter() - start}
