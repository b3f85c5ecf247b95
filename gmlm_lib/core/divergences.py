"""Divergences between laws on a finite state space, as arrays of probabilities.

Concrete inputs (not under ``jit``) are checked: a NaN or a negative entry is a ``ValueError``
naming the argument, never a silent 0. Under a trace a NaN propagates to the result.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _check_law(name: str, a) -> jax.Array:
    a = jnp.asarray(a)
    if not isinstance(a, jax.core.Tracer):
        values = np.asarray(a)
        if np.isnan(values).any() or (values < -1e-12).any():
            raise ValueError(f"{name} must hold probabilities (no NaN, none negative); it has "
                             f"{int(np.isnan(values).sum())} NaN and {int((values < -1e-12).sum())} negative entries (below -1e-12).")
    return a


def kl(q: jax.Array, p: jax.Array) -> jax.Array:
    """``KL(q || p) = sum q log(q / p)`` with ``0 log 0 = 0``. (..., S) -> (...)."""
    q, p = _check_law("q", q), _check_law("p", p)
    return jnp.sum(jnp.where(q == 0, 0.0, q * (jnp.log(jnp.where(q == 0, 1.0, q)) - jnp.log(p))), axis=-1)


def tv(q: jax.Array, p: jax.Array) -> jax.Array:
    """Total variation ``sum |q - p| / 2``. (..., S) -> (...)."""
    q, p = _check_law("q", q), _check_law("p", p)
    return 0.5 * jnp.sum(jnp.abs(q - p), axis=-1)
