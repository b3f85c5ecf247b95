"""Ising models with exact numerics [Definition 12, Eq. 5; Eq. 6].

``p_{J,h}(x) = exp(sum_{i<j} J_ij x_i x_j + sum_i h_i x_i) / Z(J, h)`` over ``x in {-1,+1}^n``.

Everything here is float64 and exact (x64 must be on: see :mod:`gmlm_lib.core.precision`):
sums over all ``2^n`` states, up to :data:`MAX_EXACT_N` sites. States are ``int8`` arrays of
``-1``/``+1``; state number ``b`` of :func:`enumerate_states` has ``x_i = +1`` exactly when bit
``n-1-i`` of ``b`` is set, so the order is lexicographic with ``-1 < +1``.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core import checks
from gmlm_lib.core.precision import float64, require_x64

__all__ = [
    "MAX_EXACT_N",
    "IsingModel",
    "ising_model",
    "random_model",
    "num_params",
    "to_theta",
    "from_theta",
    "sufficient_statistics",
    "state_statistics",
    "energy",
    "check_exact_n",
    "states_from_index",
    "index_from_states",
    "enumerate_states",
    "log_weights",
    "log_partition",
    "log_prob",
    "probabilities",
    "marginal",
    "moments",
    "sample",
    "check_spins",
    "check_model",
    "check_state_function",
    "check_matrix",
    "mask_to_indices",
    "resolve_max_size",
    "padded",
    "completion_log_weights",
    "conditional_log_probs",
    "log_conditional",
    "clique_plus_independent",
    "clique_plus_independent_log_partition",
    "clique_magnetisation_law",
    "light_mode_states",
    "in_heavy_mode",
    "curie_weiss",
    "two_clusters",
    "two_modes",
    "spin_glass",
    "pair_chain",
]

MAX_EXACT_N = 20
"""Largest number of sites for exact enumeration (2^20 = 1,048,576 states)."""

_CHUNK_BITS = 16  # states are summed over in chunks of 2^16 to bound memory

MAX_ENERGY = 1e6
"""Largest ``sum |J_ij| / 2 + sum |h_i|`` (a bound on ``|E(x)|``) a model may have: at that scale float64
log-weights keep about 1e-10 absolute accuracy, the book's exactness; far above it they do not."""


class _IsingFields(NamedTuple):
    J: jax.Array
    h: jax.Array


def _concrete_arrays(*values) -> list | None:
    """``values`` as NumPy arrays when each is concrete data (an array, a list), else ``None``: JAX's
    tracers, and the axis numbers or ``None`` of a ``vmap`` specification built with the constructor,
    are not checked by value."""
    if any(isinstance(v, jax.core.Tracer) or v is None or isinstance(v, (int, float)) for v in values):
        return None
    return [np.asarray(v) for v in values]


class IsingModel(_IsingFields):
    """Parameters of an Ising model: ``J`` (..., n, n) symmetric, zero diagonal; ``h`` (..., n)
    (leading axes: a batch of models).

    A pytree, so it passes through ``jit``/``vmap``/``grad``. :func:`ising_model` builds one in float64
    with every check (also the range the exact numerics can represent); the constructor checks what
    makes a model one at all, on concrete arrays: shapes that fit, finite entries, a symmetric ``J``
    with a zero diagonal (``ValueError`` naming the field and the fix). Under a transformation (traced
    arrays) only the shapes are checked, and JAX rebuilds models from their leaves without checks.
    """

    __slots__ = ()

    def __new__(cls, J, h):
        arrays = _concrete_arrays(J, h)
        if arrays is not None:
            _check_fields(*arrays)
        elif hasattr(J, "shape") and hasattr(h, "shape"):
            _check_shapes(J.shape, h.shape)
        return super().__new__(cls, J, h)

    @classmethod
    def unchecked(cls, J, h) -> "IsingModel":
        """A model from fields already known to be one (a validating factory's, a cast of a model's,
        :func:`from_theta`'s symmetric fill), without the constructor's checks."""
        return tuple.__new__(cls, (J, h))

    @property
    def n(self) -> int:
        return self.h.shape[-1]


def _check_shapes(j_shape, h_shape) -> None:
    if len(j_shape) < 2 or j_shape[-1] != j_shape[-2]:
        raise ValueError(f"IsingModel: J must be a square (n, n) matrix (or a batch of them); got shape "
                         f"{tuple(j_shape)}.")
    if tuple(h_shape) != tuple(j_shape[:-1]):
        raise ValueError(f"IsingModel: h must have shape {tuple(j_shape[:-1])} to match J of shape {tuple(j_shape)}; "
                         f"got {tuple(h_shape)}.")


def _check_fields(J: np.ndarray, h: np.ndarray, atol: float = 1e-12) -> None:
    for name, value in (("J", J), ("h", h)):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"IsingModel: {name} must hold numbers; got dtype {value.dtype} (build models with "
                            "ising_model(J, h), which converts and checks them).")
    _check_shapes(J.shape, h.shape)
    for name, value in (("J", J), ("h", h)):
        if not np.all(np.isfinite(value)):
            raise ValueError(f"IsingModel: {name} must be finite (no NaN or inf entries).")
    if J.size:
        asym = float(np.max(np.abs(J - np.swapaxes(J, -1, -2))))
        if asym > atol:
            raise ValueError(f"IsingModel: J must be symmetric: max |J - J^T| = {asym:.3g}; pass (J + J.T) / 2 if "
                             "you meant the symmetric part.")
        diag = float(np.max(np.abs(np.diagonal(J, axis1=-2, axis2=-1))))
        if diag > atol:
            raise ValueError(f"IsingModel: J must have a zero diagonal: max |J_ii| = {diag:.3g}; set it to 0 "
                             "(self-couplings are constant on {-1,+1}^n).")


# JAX rebuilds a model from its leaves (outputs of jit, vmap, scan...) without the constructor's checks:
# the leaves may be tracers, abstract values or placeholders there
jax.tree_util.register_pytree_with_keys(
    IsingModel,
    lambda m: (((jax.tree_util.GetAttrKey("J"), m.J), (jax.tree_util.GetAttrKey("h"), m.h)), None),
    lambda _, leaves: IsingModel.unchecked(*leaves),
    flatten_func=lambda m: ((m.J, m.h), None))


def _is_concrete(*arrays) -> bool:
    return not any(isinstance(a, jax.core.Tracer) for a in arrays)


def ising_model(J, h, *, atol: float = 1e-12) -> IsingModel:
    """Validated :class:`IsingModel` in float64 [Definition 12].

    ``J`` must be a finite, symmetric (n, n) matrix with zero diagonal (the model has no
    self-couplings; ``x_i^2 = 1`` would only shift ``log Z``), ``h`` a finite (n,) vector.
    """
    require_x64("gmlm_lib.ising.model.ising_model")
    for name, value in (("J", J), ("h", h)):
        kind = np.asarray(value).dtype.kind if not isinstance(value, jax.core.Tracer) else "f"
        if kind not in "biuf":
            raise TypeError(f"{name} must hold numbers; got an array of dtype {np.asarray(value).dtype} (strings are "
                            "not parsed: convert them with np.asarray(..., dtype=float) if you mean numbers).")
    J, h = float64(J), float64(h)
    if J.ndim != 2 or J.shape[0] != J.shape[1]:
        raise ValueError(f"J must be a square (n, n) matrix; got shape {J.shape}.")
    n = J.shape[0]
    if n < 1:
        raise ValueError("J must have at least one site (n >= 1).")
    if h.shape != (n,):
        raise ValueError(f"h must have shape ({n},) to match J of shape {J.shape}; got {h.shape}.")
    if _is_concrete(J, h):
        Jn, hn = np.asarray(J), np.asarray(h)
        _check_fields(Jn, hn, atol)  # finite, symmetric, zero diagonal: what the constructor checks
        with np.errstate(over="ignore"):  # a sum past float64's range is reported below, not warned about
            scale = 0.5 * float(np.abs(Jn).sum()) + float(np.abs(hn).sum())
        if scale > MAX_ENERGY:
            raise ValueError(
                f"the couplings and fields are too large for exact numerics: |E(x)| can reach {scale:.3g}"
                f"{' (past float64)' if math.isinf(scale) else ''}, and "
                f"above {MAX_ENERGY:g} float64 log-probabilities lose their last digits (at 1e16 a whole unit), "
                "so probabilities would come out wrong. Scale J and h down (|E| <= 1e6: sum |J_ij| / 2 + "
                "sum |h_i|).")
    return IsingModel.unchecked(J, h)


def random_model(key: jax.Array, n: int, coupling_scale: float, field_scale: float) -> IsingModel:
    """A random Ising model: ``J_ij ~ N(0, coupling_scale^2)`` for i<j, ``h_i ~ N(0, field_scale^2)``."""
    require_x64("gmlm_lib.ising.model.random_model")
    key = checks.key(key)
    n = checks.integer(n, "n", low=1, fix="n is the number of sites.")
    coupling_scale = checks.real(coupling_scale, "coupling_scale", low=0.0,
                                 fix="It is the standard deviation of the couplings J_ij.")
    field_scale = checks.real(field_scale, "field_scale", low=0.0,
                              fix="It is the standard deviation of the fields h_i.")
    J, h = _random_fields(key, n, coupling_scale, field_scale)
    return ising_model(J, h)


@partial(jax.jit, static_argnums=1)
def _random_fields(key, n: int, coupling_scale, field_scale):
    """:func:`random_model`'s draw as one program per ``n`` (the scales are operands)."""
    kj, kh = jax.random.split(key)
    iu, ju = np.triu_indices(n, k=1)
    upper = coupling_scale * jax.random.normal(kj, (len(iu),), dtype=jnp.float64)
    J = jnp.zeros((n, n), dtype=jnp.float64).at[iu, ju].set(upper).at[ju, iu].set(upper)
    return J, field_scale * jax.random.normal(kh, (n,), dtype=jnp.float64)


def num_params(n: int) -> int:
    """Dimension of ``theta = (J_ij for i<j, h_i)``: ``n(n-1)/2 + n``."""
    return n * (n - 1) // 2 + n


@jax.jit
def to_theta(model: IsingModel) -> jax.Array:
    """Flatten to the exponential-family vector ``theta`` (p,): ``J_ij`` for i<j (row-major), then ``h``.
    Compiled (one program a shape), not a gather and a concatenation run op by op."""
    iu, ju = np.triu_indices(model.n, k=1)
    return jnp.concatenate([model.J[..., iu, ju], model.h], axis=-1)


def from_theta(theta: jax.Array, n: int) -> IsingModel:
    """Inverse of :func:`to_theta`: (..., p) -> :class:`IsingModel` (no validation; traceable). A concrete
    ``theta`` is unpacked on the host and the model copied to the device (op by op on device arrays, the
    scatter would compile a program of each of its operations a shape)."""
    if np.shape(theta)[-1] != num_params(n):
        raise ValueError(f"theta must have {num_params(n)} entries for n = {n}; got {np.shape(theta)[-1]}.")
    iu, ju = np.triu_indices(n, k=1)
    m = len(iu)
    if checks.concrete(theta):
        t = np.asarray(theta, dtype=np.float64)
        J = np.zeros(t.shape[:-1] + (n, n))
        J[..., iu, ju] = J[..., ju, iu] = t[..., :m]
        return IsingModel.unchecked(*jax.device_put((J, t[..., m:])))
    theta = jnp.asarray(theta, dtype=jnp.float64)
    J = jnp.zeros(theta.shape[:-1] + (n, n), dtype=theta.dtype)
    J = J.at[..., iu, ju].set(theta[..., :m]).at[..., ju, iu].set(theta[..., :m])
    return IsingModel.unchecked(J, theta[..., m:])  # symmetric by construction; traceable


@jax.jit
def sufficient_statistics(x: jax.Array) -> jax.Array:
    """``T(x) = (x_i x_j for i<j, x_i)``. (..., n) -> (..., p), float64, ordered as :func:`to_theta`.
    Jitted: one program per shape (op by op, each of its operations would compile one)."""
    x = jnp.asarray(x, dtype=jnp.float64)
    iu, ju = np.triu_indices(x.shape[-1], k=1)
    return jnp.concatenate([x[..., iu] * x[..., ju], x], axis=-1)


def energy(model: IsingModel, x: jax.Array) -> jax.Array:
    """``E(x) = -(sum_{i<j} J_ij x_i x_j + sum_i h_i x_i)``, so ``p(x) ∝ exp(-E(x))``. (..., n) -> (...).
    ``x`` is checked (:func:`check_spins`) when it is a concrete array."""
    return _energy(model, check_spins(x, model.n))


@jax.jit
def _energy(model: IsingModel, x: jax.Array) -> jax.Array:
    x = jnp.asarray(x, dtype=jnp.float64)
    return -(0.5 * jnp.einsum("...i,ij,...j->...", x, model.J, x) + x @ model.h)


def state_statistics(n: int) -> jax.Array:
    """``T(x)`` of every state, in :func:`enumerate_states` order: (2^n, p) float64, one compiled
    program per ``n`` (the table the exact numerics of :mod:`gmlm_lib.ising.fisher` sum against)."""
    check_exact_n(n)
    return _state_statistics(int(n))


@partial(jax.jit, static_argnums=0)
def _state_statistics(n: int) -> jax.Array:
    return sufficient_statistics(states_from_index(jnp.arange(2**n), n))


def check_exact_n(n: int) -> None:
    """Raise a clear error when ``n`` is too large for exact enumeration, or float64 is off."""
    require_x64("exact enumeration (gmlm_lib.ising)")
    n = checks.integer(n, "n", low=0, fix="n is the number of sites; 0 enumerates the one empty pattern.")
    if n > MAX_EXACT_N:
        raise ValueError(
            f"n = {n} is too large for exact enumeration: the limit is n <= {MAX_EXACT_N} "
            f"({2**MAX_EXACT_N:,} states). Use a sampler, or a model with a closed form "
            "such as clique_plus_independent_log_partition."
        )


def states_from_index(index: jax.Array, n: int) -> jax.Array:
    """State number(s) -> states. (...,) int -> (..., n) int8 in {-1,+1}."""
    shifts = jnp.arange(n - 1, -1, -1, dtype=jnp.int64)
    bits = (jnp.asarray(index, dtype=jnp.int64)[..., None] >> shifts) & 1
    return (2 * bits - 1).astype(jnp.int8)


def index_from_states(x: jax.Array) -> jax.Array:
    """Inverse of :func:`states_from_index`. (..., n) -> (...,) int64. One compiled program a shape (run
    op by op it would dispatch seven)."""
    return _index_from_states(checks.array(x))


@jax.jit
def _index_from_states(x: jax.Array) -> jax.Array:
    n = x.shape[-1]
    weights = jnp.left_shift(jnp.int64(1), jnp.arange(n - 1, -1, -1, dtype=jnp.int64))
    return jnp.sum((x > 0).astype(jnp.int64) * weights, axis=-1)


def enumerate_states(n: int) -> jax.Array:
    """All ``2^n`` states. Returns (2^n, n) int8; at most :data:`MAX_EXACT_N` sites. Made on the host
    (NumPy) and copied once: the same values as :func:`states_from_index` of every state number, without
    running its operations one by one as programs of their own (and a constant inside a trace)."""
    check_exact_n(n)
    bits = (np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n - 1, -1, -1, dtype=np.int64)) & 1
    return jax.device_put((2 * bits - 1).astype(np.int8))


@jax.jit
def _log_weights(model: IsingModel) -> jax.Array:
    n = model.n
    x = states_from_index(jnp.arange(2**n), n).astype(jnp.float64)
    return 0.5 * jnp.einsum("si,ij,sj->s", x, model.J, x) + x @ model.h


def _finite(values: jax.Array, model: IsingModel, what: str) -> jax.Array:
    """``values`` when finite (or traced); else a ``ValueError`` that says which parameters caused it."""
    if _is_concrete(values) and not np.all(np.isfinite(np.asarray(values))):
        bad = [name for name, a in (("J", model.J), ("h", model.h))
               if _is_concrete(a) and not np.all(np.isfinite(np.asarray(a)))]
        cause = (f"{' and '.join(bad)} hold NaN or inf" if bad else
                 "the couplings and fields are too large for float64 (build the model with ising_model, which "
                 f"refuses |E(x)| above {MAX_ENERGY:g})")
        raise ValueError(f"{what} is not finite: {cause}. Build the model with ising_model(J, h), which validates.")
    return values


def log_weights(model: IsingModel) -> jax.Array:
    """Unnormalised log-probabilities ``-E(x)`` of all states. Returns (2^n,) float64; one compiled
    program per model size. A model whose weights are not finite is refused (a ``ValueError``)."""
    check_exact_n(model.n)
    return _finite(_log_weights(model), model, "log_weights(model)")


def log_partition(model: IsingModel) -> jax.Array:
    """``log Z(J, h)`` by a log-sum-exp over all ``2^n`` states (Eq. 5). Returns ().

    States are generated and summed in chunks of ``2^16`` so that n = 20 needs no more
    than a few MB; each chunk and the total use the max-shifted log-sum-exp, so values of
    ``|E|`` in the thousands (``|J| = 10`` at n = 20) stay exact to float64 rounding. One compiled
    program per model size; a model whose ``log Z`` is not finite is refused (a ``ValueError``).
    """
    check_exact_n(model.n)
    return _finite(_log_partition(model), model, "log_partition(model)")


@jax.jit
def _log_partition(model: IsingModel) -> jax.Array:
    n = model.n
    chunk_bits = min(n, _CHUNK_BITS)
    num_chunks = 2 ** (n - chunk_bits)
    offsets = jnp.arange(2**chunk_bits, dtype=jnp.int64)

    def chunk_lse(c):
        x = states_from_index(c * 2**chunk_bits + offsets, n)
        return jax.nn.logsumexp(-energy(model, x))

    if num_chunks == 1:
        return chunk_lse(jnp.int64(0))
    return jax.nn.logsumexp(jax.lax.map(chunk_lse, jnp.arange(num_chunks, dtype=jnp.int64)))


def log_prob(model: IsingModel, x: jax.Array) -> jax.Array:
    """Exact ``log p(x)``. (..., n) -> (...)."""
    return -energy(model, x) - log_partition(model)


@jax.jit
def _probabilities(model: IsingModel) -> jax.Array:
    lw = _log_weights(model)
    return jnp.exp(lw - jax.nn.logsumexp(lw))


def probabilities(model: IsingModel) -> jax.Array:
    """``p(x)`` for every state, in :func:`enumerate_states` order. Returns (2^n,); one compiled program
    per model size. A model whose law is not finite (NaN or inf in ``J`` or ``h``) is refused."""
    check_exact_n(model.n)
    return _finite(_probabilities(model), model, "probabilities(model)")


def _check_subset(subset, n: int) -> np.ndarray:
    raw = np.asarray(subset)
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        raise TypeError(f"subset must hold site indices (integers); got {subset!r}.")
    s = raw.astype(np.int64).reshape(-1)
    if s.size == 0:
        raise ValueError("subset must name at least one site.")
    if np.any((s < 0) | (s >= n)):
        raise ValueError(f"subset entries must lie in [0, {n - 1}]; got {s.tolist()}.")
    if len(np.unique(s)) != len(s):
        raise ValueError(f"subset must not repeat a site; got {s.tolist()}.")
    return s


def marginal(model: IsingModel, subset) -> jax.Array:
    """Exact marginal law of ``x_S``. Returns (2^|S|,), ordered as ``enumerate_states(|S|)``
    over the sites of ``subset`` in the order given."""
    s = _check_subset(subset, model.n)
    p = probabilities(model)
    sub_index = index_from_states(enumerate_states(model.n)[:, s])
    return jnp.zeros(2 ** len(s), dtype=p.dtype).at[sub_index].add(p)


def moments(model: IsingModel) -> jax.Array:
    """``E_p[T(X)]``: the means of ``x_i x_j`` (i<j) and ``x_i``, ordered as :func:`to_theta`. (p,)."""
    return probabilities(model) @ sufficient_statistics(enumerate_states(model.n))


def sample(model: IsingModel, key: jax.Array, num_samples: int) -> jax.Array:
    """Exact i.i.d. samples by inverse-CDF over all ``2^n`` states. Returns (num_samples, n) int8."""
    num_samples = checks.integer(num_samples, "num_samples", low=0)
    key = checks.key(key)
    return _sample(probabilities(model), key, num_samples)


@partial(jax.jit, static_argnums=2)
def _sample(p: jax.Array, key: jax.Array, num_samples: int) -> jax.Array:
    cdf = jnp.cumsum(p)
    u = jax.random.uniform(key, (num_samples,), dtype=jnp.float64) * cdf[-1]
    index = jnp.minimum(jnp.searchsorted(cdf, u, side="right"), cdf.shape[0] - 1)
    return states_from_index(index, int(round(math.log2(p.shape[0]))))


# --- Conditionals p(x_S | x_{-S}) -------------------------------------------------------------


def check_spins(x: jax.Array, n: int, name: str = "x") -> jax.Array:
    """Validate a batch of states: shape (..., n), entries in {-1, +1}; errors call it ``name``. A device
    array (or a tracer) is returned as it is, a host array as a NumPy array (``jnp.asarray`` would compile
    a program for it)."""
    x = checks.array(x)
    if x.ndim < 1 or x.shape[-1] != n:
        raise ValueError(f"{name} must have shape (..., {n}) for an n = {n} model; got {x.shape}.")
    if _is_concrete(x):
        xn = np.asarray(x)
        if not np.all((xn == 1) | (xn == -1)):
            raise ValueError(f"{name} must contain only -1 and +1 (Ising spins); map {{0,1}} data by 2x - 1.")
    return x


def check_model(model, name: str = "model") -> "IsingModel":
    """``model`` if it is an :class:`IsingModel`, else a ``TypeError`` naming ``name`` and the fix."""
    if not isinstance(model, IsingModel):
        raise TypeError(f"{name} must be an IsingModel (build it with ising_model(J, h) or random_model); "
                        f"got {type(model).__name__}.")
    return model


def check_state_function(f, n: int, name: str = "f") -> jax.Array:
    """A function on the ``2^n`` states, one value per state in :func:`enumerate_states` order:
    shape (2^n,), real and finite, returned as float64; otherwise a ``ValueError`` naming ``name``."""
    f = checks.array(f)  # a host array stays on the host until float64 copies it
    if f.shape != (2**n,):
        raise ValueError(f"{name} must hold one value per state, shape ({2**n},) for n = {n} (in enumerate_states "
                         f"order); got {f.shape}.")
    if not jnp.issubdtype(f.dtype, jnp.number) or jnp.issubdtype(f.dtype, jnp.complexfloating):
        raise TypeError(f"{name} must be real numbers; got dtype {f.dtype}.")
    if _is_concrete(f) and not np.all(np.isfinite(np.asarray(f, dtype=np.float64))):
        raise ValueError(f"{name} holds non-finite values (nan or inf); every state needs a finite value.")
    return float64(f)


def check_matrix(A, name: str, size: int | None = None) -> jax.Array:
    """A square, finite, real matrix (``size x size`` when given); otherwise an error naming ``name``. A
    device array (or a tracer) is returned as it is, anything else as a NumPy array (``jnp.asarray`` would
    compile a program)."""
    A = checks.array(A)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or (size is not None and A.shape[0] != size):
        want = f"({size}, {size})" if size is not None else "square (d, d)"
        raise ValueError(f"{name} must be a {want} matrix; got shape {A.shape}.")
    if _is_concrete(A) and not np.all(np.isfinite(np.asarray(A, dtype=np.float64))):
        raise ValueError(f"{name} holds non-finite values (nan or inf); it cannot be used.")
    return A


def mask_to_indices(mask: jax.Array, size: int) -> jax.Array:
    """Positions of the masked sites, padded with ``n``. (..., n) bool -> (..., size) int64."""
    if _is_concrete(mask):  # NumPy: no program compiled per batch shape for a table built once
        mask = np.asarray(mask, dtype=bool)
        n = mask.shape[-1]
        flat = mask.reshape(-1, n)
        flat = np.pad(flat, ((0, 0), (0, max(0, size - n))))  # more slots than sites: padding columns
        order = np.argsort(~flat, axis=1, kind="stable")[:, :size]  # masked sites first, in site order
        idx = np.where(np.take_along_axis(flat, order, 1), order, n)
        return jnp.asarray(idx.reshape(mask.shape[:-1] + (size,)), dtype=jnp.int64)
    mask = jnp.asarray(mask, dtype=bool)
    n = mask.shape[-1]
    flat = mask.reshape(-1, n)
    idx = jax.vmap(lambda m: jnp.nonzero(m, size=size, fill_value=n)[0])(flat)
    return idx.reshape(mask.shape[:-1] + (size,))


def resolve_max_size(mask: jax.Array, max_size: int | None) -> int:
    """The number of completion slots for a batch of masks: ``max_size`` or the largest ``|S|``."""
    if max_size is None:
        if not _is_concrete(mask):
            raise ValueError("mask is traced (inside jit/vmap): pass max_size, the largest |S|, as a static int.")
        return int(np.max(np.sum(np.asarray(mask, dtype=bool), axis=-1), initial=0))
    max_size = int(max_size)
    if _is_concrete(mask):
        largest = int(np.max(np.sum(np.asarray(mask, dtype=bool), axis=-1), initial=0))
        if largest > max_size:
            raise ValueError(f"a mask has {largest} sites but max_size = {max_size}; raise max_size.")
    return max_size


@jax.jit
def padded(model: IsingModel) -> tuple[jax.Array, jax.Array]:
    """``J`` (n+1, n+1) and ``h`` (n+1,) with a zero extra site ``n``: the target of padded
    slots in :func:`completion_log_weights`. Samplers compute these once, not per step (one program)."""
    return jnp.pad(model.J, ((0, 1), (0, 1))), jnp.pad(model.h, (0, 1))


def completion_log_weights(Jpad: jax.Array, hpad: jax.Array, x: jax.Array, idx: jax.Array, patterns: jax.Array):
    """Log-weights of the completions of ``x`` on slots ``idx``, up to a term in ``x_{-S}``.

    ``Jpad``, ``hpad`` from :func:`padded`; x (B, n) spins in {-1, +1}, idx (B, m) padded with
    n, patterns (P, m) -> (B, P), and the observed pattern's log-weight (B,). Uses only the local
    fields ``h_i + sum_{j not in S} J_ij x_j`` of the slots and the couplings inside ``S``,
    so the cost is O(B m n + B P m^2), not O(B n^2).
    """
    xf = x.astype(Jpad.dtype)  # float64 for exact work; a sampler may pass float32 arrays
    xobs = jnp.take_along_axis(xf, idx, axis=-1, mode="fill", fill_value=0)  # padding slot reads 0
    rows = Jpad[idx][..., :-1]  # (B, m, n): J_ij for slot i, every site j
    Js = Jpad[idx[:, :, None], idx[:, None, :]]  # (B, m, m); the padding site n has no couplings
    # sum_j J_ij x_j with x_j = +-1 as a signed sum: XLA fuses the row gather into this reduction,
    # where a product with x (einsum) first materialises the (B, m, n) rows (1.3-1.8x slower steps).
    field = jnp.sum(jnp.where(x[:, None, :] > 0, rows, -rows), axis=-1)
    f = hpad[idx] + field - jnp.einsum("bij,bj->bi", Js, xobs)
    c = patterns.astype(Jpad.dtype)
    lw = f @ c.T + 0.5 * jnp.einsum("pi,bij,pj->bp", c, Js, c)
    lw_obs = jnp.sum(f * xobs, -1) + 0.5 * jnp.einsum("bi,bij,bj->b", xobs, Js, xobs)
    return lw, lw_obs


def _completion_log_weights(model: IsingModel, x: jax.Array, idx: jax.Array, patterns: jax.Array):
    return completion_log_weights(*padded(model), x, idx, patterns)


def conditional_log_probs(model: IsingModel, x: jax.Array, idx: jax.Array) -> jax.Array:
    """``log p(x_S = c | x_{-S})`` for every pattern ``c`` of the slots ``idx``.

    x (B, n); idx (B, m) site indices, padded with ``n`` where ``|S| < m``. Returns (B, 2^m),
    patterns in ``enumerate_states(m)`` order. A padded slot does not change the state, so
    each distinct completion appears ``2^(m - |S|)`` times and each copy gets an equal share
    of its probability: rows sum to one, and sampling a pattern is sampling a completion.
    """
    patterns = enumerate_states(idx.shape[-1])
    lw, _ = _completion_log_weights(model, x, idx, patterns)
    return lw - jax.nn.logsumexp(lw, axis=-1, keepdims=True)


def log_conditional(model: IsingModel, x: jax.Array, mask: jax.Array, max_size: int | None = None) -> jax.Array:
    """Exact ``log p(x_S | x_{-S})`` of the observed ``x_S``, one mask per state.

    x (B, n) in {-1,+1}; mask (B, n) bool or (n,) bool (broadcast), ``S = {i : mask_i}``.
    ``max_size`` (static) bounds ``|S|``; it defaults to the largest mask, which needs a
    concrete mask. Inside ``jit`` a row with more than ``max_size`` sites gives NaN.
    Returns (B,). The sum runs over ``2^max_size`` completions.
    """
    x = check_spins(x, model.n)
    rows = (1, model.n) if x.ndim == 1 else x.shape
    mask = checks.mask(mask, "mask", fix="(one row of n sites per state, or one (n,) row for all)")
    if mask.shape not in ((model.n,), rows):
        raise ValueError(f"mask must have shape ({model.n},) or {rows} (one row a state of x); got {mask.shape}.")
    return _log_conditional(model, x, mask, resolve_max_size(mask, max_size))


@partial(jax.jit, static_argnums=3)
def _log_conditional(model: IsingModel, x: jax.Array, mask: jax.Array, m: int) -> jax.Array:
    """:func:`log_conditional` of checked arguments, the row of one state (n,) and a mask shared by the rows
    broadcast here: inside the program (outside, each is a program of its own a shape)."""
    squeeze = x.ndim == 1
    x = jnp.atleast_2d(x)
    mask = jnp.broadcast_to(mask, x.shape)
    idx = mask_to_indices(mask, m)
    lw, lw_obs = _completion_log_weights(model, x, idx, states_from_index(jnp.arange(2**m), m))
    k = jnp.sum(mask, axis=-1)
    out = jnp.where(k > m, jnp.nan, lw_obs - jax.nn.logsumexp(lw, axis=-1) + (m - k) * jnp.log(2.0))
    return out[0] if squeeze else out


# --- The clique-plus-independent model (Eq. 6) --------------------------------------------------


def _check_clique(n: int, c: int) -> None:
    checks.integer(n, "n", fix="n is the number of sites.")
    checks.integer(c, "c", fix="c is the clique's number of sites.")
    if c < 1:
        raise ValueError(f"the clique must have at least one site: c = {c}; use 1 <= c <= n.")
    if c > n:
        raise ValueError(f"the clique size c = {c} exceeds the number of sites n = {n}; use 1 <= c <= n.")


def clique_plus_independent(n: int, c: int, J: float, h: float, h_rest: float | None = None) -> IsingModel:
    """The clique-plus-independent Ising model [Eq. 6].

    Sites ``0..c-1`` form a clique with ``J_ij = J`` for every pair; sites ``c..n-1`` are
    independent (no edges). Every clique site has field ``h`` and every other site
    ``h_rest`` (default ``h``). With ``J > 0`` (ferromagnetic) and ``h > 0`` the two modes
    ``X_+ = {x_C = +1}`` and ``X_- = {x_C = -1}`` [Eqs. 7-8] carry almost all the mass
    when ``J`` is large, and ``X_+`` is the heavier one. (The paper's formula was lost in
    extraction; this is the form its Appendix G uses: a clique site in ``X_-`` flips with
    probability ``sigmoid(-2(J(c-1) - h))``.)
    """
    _check_clique(n, c)
    h_rest = h if h_rest is None else h_rest
    in_c = np.arange(n) < c
    Jm = float(J) * np.outer(in_c, in_c)
    np.fill_diagonal(Jm, 0.0)
    hv = np.where(in_c, float(h), float(h_rest))
    return ising_model(Jm, hv)


def _clique_log_weights(c: int, J: float, h: float) -> np.ndarray:
    """log of the total weight of clique configurations with m sites at +1, m = 0..c. (c+1,)."""
    m = np.arange(c + 1)
    s = 2 * m - c
    log_binom = np.array([math.lgamma(c + 1) - math.lgamma(k + 1) - math.lgamma(c - k + 1) for k in m])
    return log_binom + J * (s * s - c) / 2.0 + h * s


def clique_plus_independent_log_partition(n: int, c: int, J: float, h: float, h_rest: float | None = None) -> float:
    """Closed-form ``log Z`` of :func:`clique_plus_independent`, for any n (no enumeration).

    The clique contributes ``sum_m C(c,m) exp(J (s^2 - c)/2 + h s)`` with ``s = 2m - c``; each
    independent site ``2 cosh(h_rest)``. Computed with log-sum-exp in float64.
    """
    _check_clique(n, c)
    h_rest = h if h_rest is None else h_rest
    lw = _clique_log_weights(c, float(J), float(h))
    top = lw.max()
    log_z_clique = top + math.log(np.exp(lw - top).sum())
    log_2cosh = abs(h_rest) + math.log1p(math.exp(-2 * abs(h_rest)))  # log(e^h + e^-h)
    return float(log_z_clique + (n - c) * log_2cosh)


def clique_magnetisation_law(c: int, J: float, h: float) -> np.ndarray:
    """Exact law of the number of clique sites at +1 under Eq. 6. Returns (c+1,) probabilities;
    entry ``c`` is ``P(X_+)`` and entry ``0`` is ``P(X_-)`` (the independent sites do not matter)."""
    _check_clique(c, c)
    lw = _clique_log_weights(c, float(J), float(h))
    w = np.exp(lw - lw.max())
    return w / w.sum()


def light_mode_states(chains: int, n: int, c: int) -> np.ndarray:
    """``chains`` copies of the light mode's start of :func:`clique_plus_independent` [Eq. 8]: the
    clique sites ``0..c-1`` at -1, the other sites at +1. Returns (chains, n) int8, the start from
    which the paper's Figure 3 and its hitting times are measured, on the host: a sampler's run lays it
    out over the devices (:func:`gmlm_lib.ising.samplers.run_chains`), where a device array would be split
    by a program of its own."""
    _check_clique(n, c)
    chains = checks.integer(chains, "chains", low=1)
    x = np.ones((chains, int(n)), dtype=np.int8)
    x[:, :c] = -1
    return x


def in_heavy_mode(xs: jax.Array, c: int) -> jax.Array:
    """Whether each state is in the heavy mode ``X_+ = {x_C = +1}`` of :func:`clique_plus_independent`
    [Eq. 7]: every clique site ``0..c-1`` at +1. (..., n) -> (...) bool; traceable, so it serves as a
    sampler's hitting target (``functools.partial(in_heavy_mode, c=c)``)."""
    c = checks.integer(c, "c", low=1, high=xs.shape[-1], fix=f"c is a clique size of the n = {xs.shape[-1]} sites.")
    return jnp.all(xs[..., :c] > 0, axis=-1)


def curie_weiss(n: int, J: float, h: float) -> IsingModel:
    """The Curie-Weiss model: every pair of the ``n`` sites coupled with the same ``J``
    (``J_ij = J`` for i != j) and every site the field ``h``. Ferromagnetic for ``J > 0``, with two
    modes (all +1, all -1) once ``J (n - 1)`` is well above 1; pass ``J = beta / (n - 1)`` for the
    mean-field scaling, whose critical point ``beta = 1`` does not move with ``n``."""
    n = checks.integer(n, "n", low=1, fix="n is the number of sites.")
    return ising_model(float(J) * (np.ones((n, n)) - np.eye(n)), np.full(n, float(h)))


def two_clusters(n: int, J_in: float, J_out: float, h: float) -> IsingModel:
    """Two clusters, sites ``0 .. n // 2 - 1`` and the rest: every pair inside a cluster coupled with
    ``J_in``, every pair across with ``J_out``, every site the field ``h``. The model of the adaptive-masking
    chapter, where a rule that masks a cluster's sites together is compared with uniform masks."""
    n = checks.integer(n, "n", low=2, fix="n is the number of sites, at least one in each of the two clusters.")
    cluster = np.arange(n) < n // 2
    J = np.where(cluster[:, None] == cluster[None, :], float(J_in), float(J_out)) * (1 - np.eye(n))
    return ising_model(J, np.full(n, float(h)))


def two_modes(key: jax.Array, n: int, coupling: float, noise: float = 0.1) -> IsingModel:
    """A ferromagnet with two modes (all +1, all -1) and random noise: :func:`random_model` with scale
    ``noise`` for its couplings and fields, plus ``coupling`` on every pair. The *peaky* truth of the
    chapter on Theorem 2, where maximum likelihood's advantage over small masks is largest."""
    base = random_model(key, n, noise, noise)
    return ising_model(np.asarray(base.J) + float(coupling) * (1 - np.eye(n)), base.h)


def spin_glass(key: jax.Array, n: int, J: float, h: float) -> IsingModel:
    """A frustrated model with many local modes: couplings ``J * g_ij`` with ``g`` one fixed pattern
    of standard Gaussians (the couplings of :func:`random_model` with scale 1, drawn from ``key``:
    the same key, the same pattern at every ``J``, so a sweep over ``J`` scales one landscape), and
    every site the field ``h``. The second family of the chapter on Theorem 1, beside
    :func:`curie_weiss`."""
    pattern = np.asarray(random_model(key, n, 1.0, 0.0).J)
    return ising_model(float(J) * pattern, np.full(pattern.shape[0], float(h)))


def pair_chain(pairs: int, coupling: float, link: float, h: float) -> IsingModel:
    """A chain of ``pairs`` pairs of sites (``2 * pairs`` sites: pair ``a`` is sites ``2a`` and
    ``2a + 1``): ``coupling`` inside each pair, ``link`` between the second site of a pair and the
    first of the next, every site the field ``h``. The model of the chapter on one parallel step,
    whose 2-Gibbs step resamples one pair jointly given the rest."""
    pairs = checks.integer(pairs, "pairs", low=1, fix="pairs is the number of coupled pairs, 2 sites each.")
    n = 2 * pairs
    J = np.zeros((n, n))
    inside, across = np.arange(0, n, 2), np.arange(1, n - 1, 2)
    J[inside, inside + 1] = J[inside + 1, inside] = float(coupling)
    J[across, across + 1] = J[across + 1, across] = float(link)
    return ising_model(J, np.full(n, float(h)))
