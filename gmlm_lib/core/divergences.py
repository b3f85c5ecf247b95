"""Divergences between laws on a finite state space, as arrays of probabilities.

Concrete inputs (not under ``jit``) are checked: a NaN or a negative entry, or a row that does not
sum to 1 (within ``1e-6``, ``1e-4`` below float64), is a ``ValueError`` naming the argument, never a
silent 0; so is a pair of arrays over different state spaces (their last axes differ, or the leading
axes do not broadcast). Under a trace a NaN propagates to the result.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _check_law(name: str, a) -> jax.Array:
    a = a if isinstance(a, jax.Array) else jax.device_put(np.asarray(a))  # copied: jnp.asarray compiles a program
    if a.ndim < 1:
        raise ValueError(f"{name} must be a law: an array (..., S) of probabilities over S states; got a scalar.")
    if not isinstance(a, jax.core.Tracer):
        values = np.asarray(a)
        if np.isnan(values).any() or (values < -1e-12).any():
            raise ValueError(f"{name} must hold probabilities (no NaN, none negative); it has "
                             f"{int(np.isnan(values).sum())} NaN and {int((values < -1e-12).sum())} negative entries (below -1e-12).")
        tol = 1e-6 if values.dtype == np.float64 else 1e-4
        sums = np.atleast_1d(values.sum(-1, dtype=np.float64)).ravel()
        worst = sums[np.argmax(np.abs(sums - 1.0))]
        if abs(worst - 1.0) > tol:
            raise ValueError(f"{name} must be a law: each row (last axis) summing to 1; a row sums to {worst:.6g} "
                             f"(tolerance {tol:g}). Normalise it (a / a.sum(-1, keepdims=True)) if it is a law up to "
                             "a constant.")
    return a


def _pair(q, p) -> tuple[jax.Array, jax.Array]:
    q, p = _check_law("q", q), _check_law("p", p)
    try:
        np.broadcast_shapes(q.shape, p.shape)
    except ValueError:
        ok = False
    else:
        ok = q.shape[-1] == p.shape[-1]
    if not ok:
        raise ValueError(f"q and p must be laws on the same states: last axes equal, leading axes broadcastable; "
                         f"got shapes {q.shape} and {p.shape}.")
    return q, p


def kl(q: jax.Array, p: jax.Array) -> jax.Array:
    """``KL(q || p) = sum q log(q / p)`` with ``0 log 0 = 0``. (..., S) -> (...)."""
    return _kl(*_pair(q, p))


def tv(q: jax.Array, p: jax.Array) -> jax.Array:
    """Total variation ``sum |q - p| / 2``. (..., S) -> (...)."""
    return _tv(*_pair(q, p))


# each one program per shape (run op by op, every operation would be a program of its own)
@jax.jit
def _kl(q, p):
    return jnp.sum(jnp.where(q == 0, 0.0, q * (jnp.log(jnp.where(q == 0, 1.0, q)) - jnp.log(p))), axis=-1)


@jax.jit
def _tv(q, p):
    return 0.5 * jnp.sum(jnp.abs(q - p), axis=-1)
