"""Float64 for exact numerics, asked of the program, never imposed by an import.

The Ising side of the library sums over all ``2^n`` states and is checked against brute force
to 1e-9: it needs float64. No module of ``gmlm_lib`` touches JAX's configuration when it is
imported (a translation model's dtypes must not depend on what was imported first). A program
that uses the exact numerics turns JAX's 64-bit mode on itself, once, before it builds a model:
every theory chapter does so in its first code cell, and ``with jax.enable_x64(True):`` does it
for a block of code. The entry points of the exact numerics
(:func:`gmlm_lib.ising.model.ising_model` and everything built on it) call :func:`require_x64`
and raise a clear error instead of silently computing in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import dtypes


def x64_enabled() -> bool:
    """Whether JAX's 64-bit mode is on here (globally or inside ``jax.enable_x64(True)``): read off
    what JAX makes of a float64 request, without naming or touching the setting."""
    return dtypes.canonicalize_dtype(jnp.float64) == jnp.float64


def require_x64(what: str) -> None:
    """Raise ``RuntimeError`` naming ``what`` and the fix unless 64-bit mode is on."""
    if not x64_enabled():
        raise RuntimeError(
            f"{what} computes exactly in float64, but JAX's 64-bit mode is off, so arrays would silently be "
            "float32. Turn it on once at the start of the program, as the first code cell of every theory "
            "chapter does (or set the environment variable JAX_ENABLE_X64=1 before starting Python), or run "
            "the code inside `with jax.enable_x64(True):`."
        )


def float64(x) -> jax.Array:
    """``x`` as a float64 array on the device: a device array (or a tracer) already of float64 as it is,
    another converted; a host array (NumPy, a list) converted on the host and copied. Why: in JAX 0.10
    ``jnp.asarray`` of a host array compiles a program of its own a shape and dtype, and so does a
    conversion of a device array run outside a jitted function; a chapter that passes NumPy arrays to the
    exact kernels would pay one for every shape it meets."""
    if isinstance(x, jax.Array):
        return x if x.dtype == jnp.float64 else jnp.asarray(x, dtype=jnp.float64)
    return jax.device_put(np.asarray(x, dtype=np.float64))
