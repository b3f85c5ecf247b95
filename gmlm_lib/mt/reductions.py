"""Reductions over the vocabulary that XLA's CPU backend runs slowly in their library form.

``jnp.argmax`` lowers to one variadic reduction over (value, index) pairs (jax-ml/jax#3611; on GPU
JAX keeps the two-pass form). XLA's CPU backend runs that reduction many times slower than a
plain max over the same logits. :func:`argmax` is the two-pass form (a max, then the first index
that attains it), with the same result; on a CPU it makes the tail of a PaDIR pass (forbidden ids,
argmax, mean log-probability) several times cheaper.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def argmax(x: jax.Array) -> jax.Array:
    """``jnp.argmax(x, axis=-1)`` as int32, in two plain reductions: the index of the largest
    entry of each row over the last axis, the first one on ties; a row holding NaN gives its
    first NaN, as ``jnp.argmax`` does. ``(..., V) -> (...)``."""
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"argmax: x needs a non-empty last axis; got shape {x.shape}.")
    top = jnp.max(x, axis=-1, keepdims=True)
    hit = (x == top) | jnp.isnan(x)
    index = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
    return jnp.min(jnp.where(hit, index, x.shape[-1]), axis=-1)
