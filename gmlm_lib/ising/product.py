"""What one parallel step can do: product transitions and their distance to a joint update
[Propositions 3-4, Appendix I].

One forward pass of a parallel-decoding Transformer followed by sampling each position on its
own gives a *product* transition ``Q(y | x) = prod_i q_i(y_i | x)``. For any target transition
``P(. | x)`` the product closest in ``KL(P || Q)`` is the product of ``P``'s one-site marginals
(``KL(P || Q) = KL(P || prod_i P_i) + sum_i KL(P_i || q_i)``), and its distance
``KL(P || prod_i P_i)`` (the total correlation of ``P(. | x)``) is a floor no product transition,
learned or not, can go below. Rows are laws on ``{-1,+1}^n`` in
:func:`gmlm_lib.ising.model.enumerate_states` order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core.divergences import kl, tv
from gmlm_lib.core.precision import float64
from gmlm_lib.ising import model as ising


def _n_of(rows: jax.Array) -> int:
    size = rows.shape[-1]
    n = size.bit_length() - 1
    if 2**n != size:
        raise ValueError(f"rows must be laws over 2^n states; the last axis has {size} entries.")
    return n


def site_marginals(rows: jax.Array) -> jax.Array:
    """``P(y_i = +1 | x)`` for every site. rows (..., 2^n) -> (..., n)."""
    rows = float64(rows)
    _n_of(rows)
    return _site_marginals(rows)


@jax.jit
def _site_marginals(rows):
    n = _n_of(rows)
    return rows @ (ising.states_from_index(jnp.arange(2**n), n) > 0).astype(jnp.float64)  # (2^n, n) of +1 sites


def product_law(marginals: jax.Array) -> jax.Array:
    """The product law with ``P(y_i = +1) = marginals[..., i]``: what one parallel step can
    implement given the state [Proposition 4]. (..., n) -> (..., 2^n)."""
    m = float64(marginals)
    if not isinstance(m, jax.core.Tracer):
        values = np.asarray(m)
        if not np.all((values >= -1e-12) & (values <= 1 + 1e-12)):  # NaN fails too
            raise ValueError(f"marginals must be probabilities P(y_i = +1) in [0, 1]; got values from "
                             f"{np.nanmin(values):.6g} to {np.nanmax(values):.6g}"
                             f"{' and NaN' if np.isnan(values).any() else ''}.")
    ising.check_exact_n(m.shape[-1])
    return _product_law(m)


@jax.jit
def _product_law(m):
    n = m.shape[-1]
    plus = ising.states_from_index(jnp.arange(2**n), n) > 0  # (2^n, n)
    per_site = jnp.where(plus, m[..., None, :], 1.0 - m[..., None, :])  # (..., 2^n, n)
    return jnp.prod(per_site, axis=-1)


def closest_product(rows: jax.Array) -> jax.Array:
    """The product transition minimising ``KL(P(.|x) || Q(.|x))`` row by row: the product of the
    marginals. rows (..., 2^n) -> (..., 2^n)."""
    return product_law(site_marginals(rows))


def kl_floor(rows: jax.Array) -> jax.Array:
    """``min_Q KL(P(.|x) || Q(.|x))`` over product ``Q``, row by row (the total correlation): how far
    a transition is from any one parallel step [Proposition 4]. (...,)."""
    rows = float64(rows)
    _n_of(rows)
    return kl(rows, _closest(rows))  # kl checks that the rows are laws


@jax.jit
def _closest(rows):
    return _product_law(_site_marginals(rows))


def min_tv_pair(joint: np.ndarray, grid: int = 801) -> tuple[float, float, float]:
    """``min TV(joint, a (x) b)`` over products of two one-site laws, for a law on ``{-1,+1}^2``
    (4,) in enumerate_states order: a grid over ``P(y_1 = +1), P(y_2 = +1)`` in [0, 1] with
    ``grid`` points each, refined twice around the best point. Returns (TV, a, b)."""
    joint = np.asarray(joint, dtype=np.float64)
    if joint.shape != (4,):
        raise ValueError(f"joint must be a law over the 4 states of a pair; got shape {joint.shape}.")
    lo_a, hi_a, lo_b, hi_b = 0.0, 1.0, 0.0, 1.0
    best = (np.inf, 0.0, 0.0)
    for _ in range(3):
        a = np.linspace(lo_a, hi_a, grid)[:, None]
        b = np.linspace(lo_b, hi_b, grid)[None, :]
        q = [(1 - a) * (1 - b), (1 - a) * b, a * (1 - b), a * b]  # states (--, -+, +-, ++)
        t = 0.5 * sum(np.abs(joint[s] - q[s]) for s in range(4))
        i, j = np.unravel_index(np.argmin(t), t.shape)
        if t[i, j] < best[0]:
            best = (float(t[i, j]), float(a[i, 0]), float(b[0, j]))
        da, db = (hi_a - lo_a) * 4 / grid, (hi_b - lo_b) * 4 / grid
        lo_a, hi_a = max(0.0, best[1] - da), min(1.0, best[1] + da)
        lo_b, hi_b = max(0.0, best[2] - db), min(1.0, best[2] + db)
    return best


def distances(target: jax.Array, learned: jax.Array, weights: jax.Array | None = None) -> dict:
    """Average ``KL(P || Q)`` and ``TV(P, Q)`` of a learned transition ``Q`` and of the floor
    (the closest product) over rows weighted by ``weights`` (default uniform). rows (R, 2^n)."""
    target, learned = float64(target), float64(learned)
    # the weights and the averages on the host, in float64: on the device each operation is a program of its own
    w = np.full(target.shape[0], 1.0 / target.shape[0]) if weights is None else np.asarray(weights, np.float64)
    w = w / w.sum()
    best = closest_product(target)
    return {
        "kl_learned": float(w @ np.asarray(kl(target, learned))),
        "kl_floor": float(w @ np.asarray(kl(target, best))),
        "tv_learned": float(w @ np.asarray(tv(target, learned))),
        "tv_closest_product": float(w @ np.asarray(tv(target, best))),
    }
