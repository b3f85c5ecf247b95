"""Float64 for exact numerics, without touching the process from an import.

The Ising side of the library sums over all ``2^n`` states and is checked against brute force
to 1e-9: it needs float64. No module of ``gmlm_lib`` changes JAX's global configuration
when it is imported (a translation model's dtypes must not depend on what was imported first).
Instead, a program that uses the exact numerics switches x64 on itself, once, before it builds
a model; every theory chapter does so in its first code cell::

    jax.config.update("jax_enable_x64", True)

or scoped: ``with jax.enable_x64(True): ...``. The entry points of the exact numerics
(:func:`gmlm_lib.ising.model.ising_model` and everything built on it) call :func:`require_x64` and
raise a clear error instead of silently computing in float32.
"""

from __future__ import annotations

import jax


def x64_enabled() -> bool:
    """Whether JAX's float64 is on here (globally or inside ``jax.enable_x64(True)``)."""
    return bool(jax.config.jax_enable_x64)


def require_x64(what: str) -> None:
    """Raise ``RuntimeError`` naming ``what`` and the fix unless float64 is on."""
    if not x64_enabled():
        raise RuntimeError(
            f"{what} computes exactly in float64, but JAX's x64 mode is off, so arrays would silently be "
            "float32. Call jax.config.update('jax_enable_x64', True) once at the start of the program "
            "(every theory chapter does so in its first code cell), or run it inside `with jax.enable_x64(True):`."
        )
