"""Divergences between laws on a finite state space, as arrays of probabilities."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def kl(q: jax.Array, p: jax.Array) -> jax.Array:
    """``KL(q || p) = sum q log(q / p)`` with ``0 log 0 = 0``. (..., S) -> (...)."""
    return jnp.sum(jnp.where(q > 0, q * (jnp.log(jnp.where(q > 0, q, 1.0)) - jnp.log(p)), 0.0), axis=-1)


def tv(q: jax.Array, p: jax.Array) -> jax.Array:
    """Total variation ``sum |q - p| / 2``. (..., S) -> (...)."""
    return 0.5 * jnp.sum(jnp.abs(q - p), axis=-1)
