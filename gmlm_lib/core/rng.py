"""JAX random keys made from Python integers without a program per call.

``jax.random.key(7)`` and ``jax.random.fold_in(key, 7)`` stage their Python integer on the device
first, and each staging and each key operation is a program of its own (``stage``, ``_threefry_seed``,
``_threefry_fold_in``, a ``convert_element_type``), compiled again in every process and for every
integer type it meets. Here each is one jitted function, shared by every caller in the process, its
integer copied to the device with ``jax.device_put`` (which compiles nothing). The keys are JAX's:
:func:`key` ``(s)`` equals ``jax.random.key(s)`` and :func:`fold_in` equals ``jax.random.fold_in``
(tested), and :func:`split` returns ``jax.random.split``'s keys as a tuple, for unpacking, from one
program (unpacking the array ``jax.random.split`` returns is a program of its own). A seed outside
``[0, 2**32)`` (negative, or past 32 bits) is passed to ``jax.random.key`` as it is, which then stages it
as before.
"""

from __future__ import annotations

import jax
import numpy as np

from gmlm_lib.core import checks

__all__ = ["key", "keys", "fold_in", "split"]

_KEY = jax.jit(jax.random.key)
_KEYS = jax.jit(jax.vmap(jax.random.key))
_FOLD = jax.jit(jax.random.fold_in)
_FOLD_EACH = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))
_SPLIT = jax.jit(lambda key, num: tuple(jax.random.split(key, num)), static_argnums=1)


def key(seed: int) -> jax.Array:
    """``jax.random.key(seed)``: a typed key, shape ()."""
    seed = checks.integer(seed, "seed")
    if not 0 <= seed < 2**32:
        return jax.random.key(seed)
    return _KEY(jax.device_put(np.uint32(seed)))


def keys(seed: int, count: int) -> jax.Array:
    """``(count,)`` keys, ``jax.random.key(seed + i)`` for ``i < count``: the keys of ``count`` runs that
    differ only in their seed (a replicated training run's, one a replica)."""
    seed, count = checks.integer(seed, "seed"), checks.integer(count, "count", low=1)
    if not (0 <= seed and seed + count <= 2**32):
        return jax.numpy.stack([jax.random.key(seed + i) for i in range(count)])
    return _KEYS(jax.device_put(np.arange(seed, seed + count, dtype=np.uint32)))


def fold_in(key: jax.Array, data: int) -> jax.Array:
    """``jax.random.fold_in(key, data)`` for one typed key (shape ()), or for each of a batch of typed
    keys (shape (n,)), with ``data`` in ``[0, 2**32)``. A legacy raw key (``jax.random.PRNGKey``) is passed
    to ``jax.random.fold_in`` as it is."""
    key = checks.key(key)
    data = checks.integer(data, "data", low=0, high=2**32 - 1,
                          fix="fold_in mixes an unsigned 32-bit integer into the key.")
    data = jax.device_put(np.uint32(data))
    if not jax.numpy.issubdtype(key.dtype, jax.dtypes.prng_key) or key.ndim > 1:
        return jax.random.fold_in(key, data)
    return (_FOLD_EACH if key.ndim == 1 else _FOLD)(key, data)


def split(key: jax.Array, num: int = 2) -> tuple[jax.Array, ...]:
    """``tuple(jax.random.split(key, num))``: ``num`` typed keys (shape () each) from one typed key, made by
    one program a ``num``, for ``a, b = split(key)``. A legacy raw key is split by ``jax.random.split``."""
    key = checks.key(key)
    num = checks.integer(num, "num", low=1, fix="split makes num new keys.")
    if not jax.numpy.issubdtype(key.dtype, jax.dtypes.prng_key) or key.ndim:
        return tuple(jax.random.split(key, num))
    return _SPLIT(key, num)
