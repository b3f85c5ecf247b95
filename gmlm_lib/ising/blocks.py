"""Exact sums over the blocks of a mask: the states that agree off ``S``.

For a mask ``S`` the ``2^n`` states split into ``2^(n-|S|)`` blocks ``{y : y_{-S} = x_{-S}}``
of ``2^|S|`` states each. Every exact quantity of the theory chapters (conditional
expectations ``E[f | x_{-S}, S]``, the Hessian ``H_w``, the block-dynamics operator, its
Dirichlet form) is a sum over these blocks with weights ``q_S(y) = p(y) w(S | y)``.

:func:`block_ids` numbers the blocks of each mask ``0 .. 2^(n-|S|)-1`` so that a block sum is a
``segment_sum``. The exact quantities run as a few jitted programs per model size:
:func:`mask_table` lists every mask's block numbers and weight, and each sum over masks is one
``lax.scan`` over that table with ``2^n`` segments (every block number of every mask fits, whatever
``|S|``), so one compiled program serves every model and every mask distribution of the same size
and padded mask count: the table's rows are padded to the next power of 4 (:func:`table_rows`), and
the scan skips the padding rows, so a sweep over ``k`` (``C(n, k)`` masks) compiles a few programs a
size, not one per ``k``; at the small sizes of the theory chapters (``n <= 8``) every table of a size is
padded to the rows of the widest one, ``C(n, n // 2)`` masks, so the sweep compiles one.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core.precision import float64
from gmlm_lib.ising import model as ising
from gmlm_lib.ising.masks import MaskDistribution, check_distribution


def block_ids(subsets) -> np.ndarray:
    """Block number of every state for each mask. (M, n) bool -> (M, 2^n) int32.

    The block of state ``x`` under ``S`` is the binary number formed by ``x_{-S}``, so states
    share a block exactly when they agree off ``S``; numbers run over ``0 .. 2^(n-|S|)-1``.
    """
    s = np.asarray(subsets, dtype=bool)
    n = s.shape[-1]
    bits = (np.asarray(ising.enumerate_states(n)) > 0).astype(np.int64)  # (2^n, n)
    rest = ~s
    rank = np.cumsum(rest[:, ::-1], axis=1)[:, ::-1] - 1  # rank among the rest, last site = 0
    weights = np.where(rest, np.left_shift(1, np.maximum(rank, 0)), 0)  # (M, n)
    return (bits @ weights.T).T.astype(np.int32)


def check_exact_blocks(n: int, limit: int) -> None:
    """Raise a ValueError naming the limit and the alternatives when ``n > limit``: exact sums
    over all ``2^n`` states and all masks are out of reach."""
    if n > limit:
        raise ValueError(
            f"n = {n} is over the limit n <= {limit} for exact sums over all states and all masks; "
            "use the Monte Carlo estimator over masks (e.g. fisher.hessian_monte_carlo) or a smaller model."
        )


class MaskTable(NamedTuple):
    """Every mask of a distribution as arrays, for sums over masks in one jitted program.

    ``ids`` (R, 2^n) int32: the block number of each state under each mask (:func:`block_ids`);
    ``weights``: (R,) for a fixed ``w(S)``, (R, 2^n) for an adaptive ``w(S | x)``; ``live`` (R,) bool:
    which rows are masks (the first M) and which padding (:func:`table_rows`; a padding row has weight 0
    and block 0 for every state, so a weighted sum over rows is the sum over masks). A pytree: pass it
    to jitted functions as an operand, so models and distributions of one shape share a program."""

    ids: jax.Array
    weights: jax.Array
    live: jax.Array


PADDED_ENTRIES = 1 << 24
"""A mask table is padded only while its ``ids`` hold at most this many entries (64 MiB of int32):
past it (large ``n`` with many masks) the rows stay the masks, one program per mask count."""

SHARED_ENTRIES = 1 << 16
"""While the table of the widest uniform law at ``n`` (``C(n, n // 2)`` masks, padded) holds at most this
many entries (``n <= 8``), every table of at most that many masks is padded to its rows: every ``k`` of a
sweep then shares one program a kernel. Past it, the skipped padding rows of a narrow law (``k = 1`` at
``n = 12``: 1,012 skipped rows for 12 masks) would cost more than the programs they save."""


def table_rows(masks: int, n: int) -> int:
    """The rows of the :class:`MaskTable` of ``masks`` masks over ``n`` sites: the next power of 4 (1, 4,
    16, 64, ...), or ``masks`` itself where that table would pass :data:`PADDED_ENTRIES`. Why powers of
    4: a sweep over ``k`` meets ``C(n, k)`` masks, a different count for every ``k``; padded, those counts
    fall on a few rows (n = 12: 12, 66, 220, 495, 792 and 924 masks on 16, 256 and 1024 rows). A padded
    table holds under 4 times the rows of the masks; the arithmetic stays that of the masks, since
    :func:`scan_masks` skips the padding rows. Where the widest uniform law's table is small
    (:data:`SHARED_ENTRIES`), a table of fewer masks takes its rows too (n = 6: 6, 15, 20 and 1 masks all
    on 64 rows), so a sweep over ``k`` at that size compiles one program a kernel."""
    def power_of_4(count):
        rows = 1
        while rows < count:
            rows *= 4
        return rows

    shared = power_of_4(max(masks, math.comb(n, n // 2)))
    if shared << n <= SHARED_ENTRIES:
        return shared
    rows = power_of_4(masks)
    return rows if rows << n <= PADDED_ENTRIES else masks


def mask_table(dist: MaskDistribution, n: int, *, padded: bool = True) -> MaskTable:
    """``dist`` as a :class:`MaskTable` over the ``2^n`` states, masks in ``dist``'s order, then (with
    ``padded``) padding rows up to :func:`table_rows`. ``padded=False``: one row a mask, for kernels whose
    output has a row per mask (:func:`conditional_given_mask`)."""
    check_distribution(dist, n)
    s = np.asarray(dist.subsets, dtype=bool)
    w = np.asarray(dist.weights, dtype=np.float64)  # on the host: a transpose of a device array is a program
    w = w.T if dist.is_adaptive else w
    masks = s.shape[0]
    pad = table_rows(masks, n) - masks if padded else 0
    ids = np.pad(block_ids(s), ((0, pad), (0, 0)))
    w = np.pad(w, ((0, pad),) + ((0, 0),) * (w.ndim - 1))
    live = np.arange(masks + pad) < masks
    return MaskTable(*jax.device_put((ids, w, live)))


def block_moments(q: jax.Array, values: jax.Array, ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mass ``P_B = sum_{y in B} q(y)`` and the ``q``-weighted mean of ``values`` over each block ``B``
    of one mask, indexed by block number, with ``2^n`` segments (``ids``' length): a block number no
    state has, or a block of zero mass (possible under an adaptive ``w``), gets mass 0 and mean 0
    (not 0/0), and so adds nothing to a mass-weighted sum. q (2^n,), values (2^n, ...), ids (2^n,)
    -> (2^n,), (2^n, ...). Traceable: call it inside a jitted function."""
    segments = ids.shape[0]
    mass = jax.ops.segment_sum(q, ids, num_segments=segments)
    safe = jnp.where(mass > 0, mass, 1.0).reshape(mass.shape + (1,) * (values.ndim - 1))
    q = q.reshape(q.shape + (1,) * (values.ndim - 1))
    return mass, jax.ops.segment_sum(q * values, ids, num_segments=segments) / safe


def scan_masks(body: Callable, init, table: MaskTable):
    """``sum_m body(ids_m, w_m)`` over the masks of ``table``, starting from ``init``, as one
    ``lax.scan`` (``w_m`` is a scalar for a fixed ``w``, (2^n,) for an adaptive one); the padding rows
    are skipped (``lax.cond``), not summed. Call it inside a jitted function."""

    def step(acc, row):
        ids, w, live = row
        return jax.lax.cond(live, lambda a: jax.tree.map(jnp.add, a, body(ids, w)), lambda a: a, acc), None

    out, _ = jax.lax.scan(step, init, (table.ids, table.weights, table.live))
    return out


def averaged_expectation(p: jax.Array, table: MaskTable, F: jax.Array) -> jax.Array:
    """The traceable body of :func:`apply_operator`, for use inside other jitted functions."""
    Fb = F.reshape(F.shape[0], -1)

    def body(ids, w):
        _, cond = block_moments(p * w, Fb, ids)
        return jnp.broadcast_to(w, p.shape)[:, None] * cond[ids]

    return scan_masks(body, jnp.zeros_like(Fb), table).reshape(F.shape)


@jax.jit
def apply_operator(p: jax.Array, table: MaskTable, F: jax.Array) -> jax.Array:
    """``(P F)(x) = sum_S w(S | x) E_{q_S}[F | block of x under S]`` for the law ``p`` (2^n,) and the
    masks of ``table``; F (2^n,) or (2^n, B) float64. One program per shape [Definitions 6, 8]."""
    return averaged_expectation(p, table, F)


@jax.jit
def _conditional(p, table: MaskTable):
    W = jnp.broadcast_to(table.weights.reshape(table.weights.shape[0], -1), table.ids.shape)

    def one(ids, w):
        q = p * w
        tot = jax.ops.segment_sum(q, ids, num_segments=ids.shape[0])[ids]
        return jnp.where(tot > 0, q / jnp.where(tot > 0, tot, 1.0), 0.0)

    return jax.vmap(one)(table.ids, W)


def conditional_given_mask(model, dist: MaskDistribution) -> jax.Array:
    """``p(x_S | x_{-S}, S)`` for every mask and state [Lemma 3]: ``q_S(x) / sum_{y in B} q_S(y)``
    with ``q_S(y) = p(y) w(S | y)`` and ``B`` the block of ``x`` under ``S``. (M, 2^n); entry
    ``[m, b]`` is the probability of state ``b`` within its block given mask ``m`` (0 where the
    block has no weight). For a fixed ``w`` it is the plain conditional ``p(x_S | x_{-S})``;
    for an adaptive ``w`` it differs in general [Lemma 2]."""
    return _conditional(ising.probabilities(model), mask_table(dist, model.n, padded=False))


def averaged_conditional_expectation(model, dist: MaskDistribution):
    """``F -> sum_S w(S | x) E_{q_S}[F | block of x under S]`` for F (2^n,) or (2^n, B): the
    block-dynamics transition operator ``P`` [Definitions 6, 8] applied to the columns of ``F``.
    :mod:`gmlm_lib.ising.markov` and :func:`gmlm_lib.ising.fisher.all_masks_score_covariance` (whose
    mask-averaged score is ``T - P T``) both use it. The function calls :func:`apply_operator`, one
    compiled program for every model and distribution of the same shape."""
    n = model.n
    ising.check_exact_n(n)
    table = mask_table(dist, n)
    p = ising.probabilities(model)

    def apply(F):
        return apply_operator(p, table, float64(F))

    return apply
