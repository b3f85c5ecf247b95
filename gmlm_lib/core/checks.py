"""Checks of arguments at the library's public boundaries, one way for the whole library.

A public function checks what it is given before computing with it, and a refusal names the
argument, what was expected, what came, and (where there is one) the fix. The rules, the same in
both halves of the library:

* a count (:func:`integer`) is a Python or NumPy integer, never a bool, a float or a string: a count
  is never rounded (``steps=2.5``) nor parsed (``"3"``);
* a number (:func:`real`) is finite and inside its stated range; an open end is marked, so
  ``real(x, "rate", low=0, low_open=True)`` refuses 0;
* a mask (:func:`mask`) is boolean, or numeric with every entry 0 or 1 (a mask of 0.5 is refused,
  not read as True), of the stated shape;
* a shape (:func:`shape`) is compared with its pattern, ``None`` standing for any size;
* a key (:func:`key`) is a ``jax.random`` key (typed, or the legacy ``uint32[2]``).

Values under a ``jit`` trace cannot be read: :func:`mask` then checks the dtype and shape only.
Every check raises ``TypeError`` for the wrong kind and ``ValueError`` for the right kind with a
wrong value.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["integer", "real", "mask", "shape", "key", "concrete", "array"]


def _fix(fix: str) -> str:
    return f" {fix}" if fix else ""


def concrete(x) -> bool:
    """True when ``x``'s values can be read (it is not a tracer inside ``jit``/``vmap``/``grad``)."""
    return not isinstance(x, jax.core.Tracer)


def array(x):
    """``x`` as it is when it is a JAX array (or a tracer), else as a NumPy array: read where it lies. Why:
    ``jnp.asarray`` of a host array compiles a program of its own for each shape and dtype (JAX 0.10)."""
    return x if isinstance(x, jax.Array) else np.asarray(x)


def integer(value, name: str, *, low: int | None = None, high: int | None = None, fix: str = "") -> int:
    """``value`` as a Python int, refusing a bool, a float (even ``3.0``), a string, or one outside
    ``[low, high]`` (either end ``None``: unbounded). A 0-d integer array is accepted."""
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0 and concrete(value) \
            and np.issubdtype(np.asarray(value).dtype, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer; got {value!r} ({type(value).__name__}): a count is never "
                        f"rounded or parsed.{_fix(fix)}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        where = (f">= {low}" if high is None else f"<= {high}" if low is None else f"in [{low}, {high}]")
        raise ValueError(f"{name} must be an integer {where}; got {value}.{_fix(fix)}")
    return value


def real(value, name: str, *, low: float = -math.inf, high: float = math.inf, low_open: bool = False,
         high_open: bool = False, fix: str = "") -> float:
    """``value`` as a finite Python float in the interval from ``low`` to ``high`` (closed unless
    ``low_open``/``high_open``), refusing a bool, a string, NaN and infinities. A 0-d array is accepted."""
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0 and concrete(value):
        value = np.asarray(value).item()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number; got {value!r} ({type(value).__name__}).{_fix(fix)}")
    value = float(value)
    below = value < low or (low_open and value == low)
    above = value > high or (high_open and value == high)
    if not math.isfinite(value) or below or above:
        if math.isinf(high) and math.isinf(low):
            where = ""
        elif math.isinf(high):
            where = f" {'>' if low_open else '>='} {low:g}"
        elif math.isinf(low):
            where = f" {'<' if high_open else '<='} {high:g}"
        else:
            where = f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be a finite number{where}; got {value!r}.{_fix(fix)}")
    return value


def shape(x, name: str, expected: tuple, *, what: str = "", fix: str = "") -> None:
    """Refuse ``x`` unless its shape matches ``expected`` (a tuple of sizes, ``None`` for any size).
    ``what`` says what the axes are, e.g. ``"(batch, length)"``."""
    got = tuple(np.shape(x))
    if len(got) != len(expected) or any(e is not None and g != e for g, e in zip(got, expected)):
        pattern = "(" + ", ".join("any" if e is None else str(e) for e in expected) + ("," if len(expected) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape {pattern}{' ' + what if what else ''}; got {got}.{_fix(fix)}")


def mask(x, name: str, expected: tuple | None = None, *, what: str = "", fix: str = "") -> jax.Array:
    """``x`` as a boolean array: a boolean array, or a numeric one whose entries are all 0 or 1
    (refused when any is another value, such as 0.5); of shape ``expected`` when given (see
    :func:`shape`). Under a trace a non-boolean dtype is refused (its values cannot be read)."""
    if isinstance(x, str) or x is None:
        raise TypeError(f"{name} must be a boolean array; got {type(x).__name__}.{_fix(fix)}")
    arr = array(x)
    if expected is not None:
        shape(arr, name, expected, what=what, fix=fix)
    if arr.dtype == bool:
        return arr if isinstance(arr, jax.Array) else jax.device_put(arr)  # jnp.asarray: a program a shape
    if not (np.issubdtype(arr.dtype, np.number)):
        raise TypeError(f"{name} must be a boolean array (or 0/1 numbers); got dtype {arr.dtype}.{_fix(fix)}")
    if not concrete(arr):
        raise TypeError(f"{name} must be a boolean array inside jit (its values cannot be checked there); got "
                        f"dtype {arr.dtype}: pass mask.astype(bool) or mask == 1.{_fix(fix)}")
    values = np.asarray(arr)
    bad = ~((values == 0) | (values == 1))
    if bad.any():
        raise ValueError(f"{name} must be a boolean mask: every entry True/False or 0/1; got {int(bad.sum())} "
                         f"other entries (e.g. {values[bad].flat[0].item()!r}), which would be read as True.{_fix(fix)}")
    return jax.device_put(values.astype(bool))  # copied: jnp.asarray would compile a program a shape


def key(value, name: str = "key") -> jax.Array:
    """Refuse anything but a ``jax.random`` key: a typed key (``jax.random.key``) or a legacy raw
    key (``jax.random.PRNGKey``: ``uint32`` with last axis 2). Returns it unchanged."""
    if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        return value
    if isinstance(value, (jax.Array, np.ndarray)) and value.dtype == np.uint32 and value.shape[-1:] == (2,):
        return value
    raise TypeError(f"{name} must be a jax.random key, e.g. jax.random.key(0); got {value!r} "
                    f"({type(value).__name__}).")
