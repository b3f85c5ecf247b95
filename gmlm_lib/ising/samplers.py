"""Markov-chain samplers of Ising models [Definitions 6, 8, 10, 11], in the style of BlackJAX.

Each sampler is a :class:`Sampler`: pure functions ``init(x) -> state`` and
``step(key, state) -> (state, info)`` over pytrees, for one chain; :func:`run_chains` runs many
chains with ``vmap`` and ``lax.scan``. Every step has the same two parts:

1. choose the block ``S`` to update (a uniform k-subset, a draw from ``w`` or ``w(. | x)``, or
   every site), and
2. draw the new ``x_S`` from the sampler's update law on ``S`` (log-probabilities over the
   ``2^|S|`` patterns), leaving ``x_{-S}`` as it is.

``Sampler.kernel(x)`` enumerates both parts exactly with the same update-law function the step
samples from, which gives each sampler's exact transition matrix (:func:`transition_matrix`,
n <= :data:`MAX_KERNEL_N`). The independent parallel sampler's update law is a product over
sites and its step samples the sites independently from the same per-site conditionals.

States are (n,) ``int8`` vectors of ``-1``/``+1``; a batch of chains is (C, n).
"""

from __future__ import annotations

import math
import os
from functools import lru_cache, partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from gmlm_lib.core import checks
from gmlm_lib.core.progress import bar as progress_bar
from gmlm_lib.ising import model as ising
from gmlm_lib.ising import product
from gmlm_lib.ising.masks import MaskDistribution, all_k_subsets, check_distribution, check_k
from gmlm_lib.ising.model import IsingModel

MAX_KERNEL_N = 6
"""Largest n for exact transition matrices (64 x 64), built by enumerating every block and pattern."""

MAX_JOINT_K = 16
"""Largest block for a joint resample: the update law has ``2^k`` patterns."""


class ChainState(NamedTuple):
    """The state of one chain: ``x`` (n,) int8 in {-1, +1}."""

    x: jax.Array


class StepInfo(NamedTuple):
    """What a step did: ``sites`` (n,) bool, the block ``S`` that was resampled."""

    sites: jax.Array


class Sampler(NamedTuple):
    """A Markov chain on ``{-1,+1}^n``.

    ``init(x) -> ChainState``; ``step(key, state) -> (ChainState, StepInfo)``, one chain, pure,
    jittable and vmappable; ``kernel(x) -> (2^n,)`` the exact law of the next state from ``x``
    (for n <= :data:`MAX_KERNEL_N`), built from the same update law the step samples.
    """

    name: str
    n: int
    init: Callable
    step: Callable
    kernel: Callable
    passes: int = 1
    """Parallel passes one step costs a model that gives per-site conditionals (a Transformer
    pass): a joint draw of ``m`` sites costs ``m`` passes by the chain rule (site by site, the
    sites not yet drawn masked), so k-Gibbs costs ``k``; independent parallel costs 1."""
    core: Callable | None = None
    """``core(params, key, state)``, the step with the model's arrays as an operand, one function per
    structure (``n``, ``k``, dtype) whatever the model: :func:`run_chains` compiles it once for every
    model of that structure. ``None`` where the step is a closure over its model."""
    params: object = None
    """The operand ``core`` takes: the model's arrays (a pytree)."""
    kernel_core: Callable | None = None
    """``kernel_core(exact, x)``, ``kernel`` with the model's float64 arrays ``exact`` as an operand, one
    function per structure: :func:`transition_matrix` compiles it once for every model of that
    structure. ``None`` where the kernel is a closure over its model."""
    exact: object = None
    """The operand ``kernel_core`` takes: the model's arrays in float64."""


def _check_model(model: IsingModel) -> IsingModel:
    if not isinstance(model, IsingModel):
        raise TypeError(f"model must be an IsingModel (build it with ising.ising_model); got {type(model).__name__}.")
    return model


def _init(n: int):
    def init(x) -> ChainState:
        x = jnp.asarray(x)
        if x.shape != (n,):
            raise ValueError(
                f"the start state must have shape ({n},) for an n = {n} model; got {x.shape}. "
                "For many chains, pass a (C, n) batch to run_chains."
            )
        return ChainState(ising.check_spins(x, n).astype(jnp.int8))

    return init


def _write(x: jax.Array, idx: jax.Array, pattern: jax.Array) -> jax.Array:
    """``x`` with ``x[idx] = pattern``; slots padded with ``n`` are dropped. x (n,), idx/pattern (m,)."""
    return x.at[idx].set(pattern.astype(x.dtype), mode="drop")


def _mask_of(idx: jax.Array, n: int) -> jax.Array:
    return jnp.zeros(n, dtype=bool).at[idx].set(True, mode="drop")


def _cast(model: IsingModel, dtype) -> IsingModel:
    dtype = jnp.dtype(dtype)
    if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise ValueError(f"dtype must be float32 or float64; got {dtype}.")
    if model.J.dtype == dtype and model.h.dtype == dtype:
        return model
    if not (checks.concrete(model.J) and checks.concrete(model.h)):
        return IsingModel.unchecked(model.J.astype(dtype), model.h.astype(dtype))
    # converted on the host and copied (the same rounding): on the device, a program for each shape and dtype
    J, h = (np.asarray(a).astype(dtype) for a in (model.J, model.h))
    return IsingModel.unchecked(*jax.device_put((J, h)))


def _joint_update(model: IsingModel, m: int, dtype=jnp.float64):
    """The joint-resample law ``log p(x_S = c | x_{-S})`` over the ``2^m`` patterns ``c`` of the
    slots ``idx`` (m,) (padded with n), from :func:`gmlm_lib.ising.model.completion_log_weights`,
    computed in ``dtype``."""
    padded = ising.padded(_cast(model, dtype))
    patterns = ising.enumerate_states(m)
    return patterns, lambda x, idx: _completion_log_probs(padded, patterns, x, idx)


def _completion_log_probs(padded, patterns, x, idx):
    """``log p(x_S = c | x_{-S})`` for every pattern ``c`` (P, m) of the slots ``idx`` (m,) (padded with
    n), from the model's padded arrays ``(Jpad, hpad)``: (P,)."""
    lw, _ = ising.completion_log_weights(*padded, x[None], idx[None], patterns)
    return jax.nn.log_softmax(lw[0])


def _kernel_from_blocks(n: int, patterns: jax.Array, blocks: jax.Array, block_log_weights, log_probs):
    """Exact next-state law from ``x``: sum over blocks (M, m) of ``w(S | x)`` times the update law.

    ``block_log_weights(x) -> (M,)``; ``log_probs(x, idx, j) -> (2^m,)``. Returns (2^n,).
    """

    def kernel(x):
        x = jnp.asarray(x, dtype=jnp.int8)
        lw = block_log_weights(x)

        def one(j):
            idx = blocks[j]
            new = jax.vmap(lambda c: _write(x, idx, c))(patterns)  # (2^m, n)
            to = ising.index_from_states(new)
            return jnp.zeros(2**n).at[to].add(jnp.exp(log_probs(x, idx, j)))

        rows = jax.vmap(one)(jnp.arange(blocks.shape[0]))  # (M, 2^n)
        return jnp.exp(lw) @ rows

    return kernel


def _uniform_subset(bits: jax.Array, n: int, k: int) -> jax.Array:
    """A uniform k-subset of ``range(n)`` by Floyd's algorithm from ``k`` random uint32 words:
    step ``t`` draws ``r`` uniform on ``0 .. n-k+t`` and takes ``r``, or ``n-k+t`` if ``r`` is taken.
    O(k^2), no permutation of n. Returns (k,) int32 in no particular order. (The modulo bias is
    below ``n / 2^32``.)"""
    chosen = []
    for t in range(k):  # k is static and small: unrolled
        j = n - k + t
        r = (bits[t] % jnp.uint32(j + 1)).astype(jnp.int32)
        taken = jnp.zeros((), dtype=bool)
        for c in chosen:
            taken = taken | (c == r)
        chosen.append(jnp.where(taken, jnp.int32(j), r))
    return jnp.stack(chosen)


def _draw(u: jax.Array, probs: jax.Array) -> jax.Array:
    """Inverse-CDF draw from ``probs`` (P,) with one uniform ``u``: the index ``c`` with
    ``cdf[c-1] <= u < cdf[c]``. One uniform per draw instead of Gumbel-max's P."""
    cdf = jnp.cumsum(probs)
    return jnp.minimum(jnp.sum(cdf <= u * cdf[-1]), probs.shape[0] - 1)


def _uniform01(bits: jax.Array, dtype) -> jax.Array:
    """A uniform on [0, 1) from one uint32 word (resolution 2^-32)."""
    return bits.astype(dtype) * jnp.asarray(2.0**-32, dtype)


def k_gibbs(model: IsingModel, k: int, dtype=jnp.float64) -> Sampler:
    """The k-Gibbs sampler [Definition 10; Eq. 3]: draw a uniform k-subset ``S``, then resample
    ``x_S`` jointly from ``p(x_S | x_{-S})`` over its ``2^k`` completions.

    ``1 <= k <= n`` and ``k <=`` :data:`MAX_JOINT_K`. Cost per step O(k n + 2^k k^2).
    It is block dynamics with ``w`` uniform over k-subsets, so it leaves ``p`` invariant.
    ``dtype`` (float64 or float32) is the arithmetic of the step; the exact ``kernel`` is float64.
    """
    model = _check_model(model)
    n = model.n
    k = check_k(k, n)
    if k > MAX_JOINT_K:
        raise ValueError(f"k = {k} needs 2^k = {2**k:,} completions per step; use k <= {MAX_JOINT_K}.")
    fast = _cast(model, dtype)
    core, params = _k_gibbs_core(n, k, fast.J.dtype), ising.padded(fast)

    def step(key, state):
        return core(params, key, state)

    exact = ising.padded(_cast(model, jnp.float64))
    kernel_core = _exact_kernel(n, lambda: _k_gibbs_kernel(n, k))
    return Sampler(f"{k}-Gibbs", n, _init(n), step, partial(kernel_core, exact), passes=k, core=core, params=params,
                   kernel_core=kernel_core, exact=exact)


@lru_cache(maxsize=None)
def _k_gibbs_kernel(n: int, k: int) -> Callable:
    """k-Gibbs's exact next-state law as ``kernel((Jpad, hpad), x) -> (2^n,)`` (float64 padded arrays),
    one function per ``(n, k)``: block dynamics over the uniform k-subsets [Definition 6]."""
    patterns = ising.enumerate_states(k)
    blocks = jax.device_put(np.nonzero(np.asarray(all_k_subsets(n, k)))[1].reshape(-1, k))
    lw = np.full(blocks.shape[0], -math.log(blocks.shape[0]))

    def kernel(exact, x):
        return _kernel_from_blocks(n, patterns, blocks, lambda x: lw,
                                   lambda x, idx, j: _completion_log_probs(exact, patterns, x, idx))(x)

    return kernel


@lru_cache(maxsize=None)
def _k_gibbs_core(n: int, k: int, dtype) -> Callable:
    """k-Gibbs's step for every model of ``n`` sites as ``core((Jpad, hpad), key, state)``: one
    function per ``(n, k, dtype)``, so that its compiled programs serve every model."""
    patterns = np.asarray(ising.enumerate_states(k))

    def core(params, key, state):
        bits = jax.random.bits(key, (k + 1,), dtype=jnp.uint32)
        idx = _uniform_subset(bits, n, k)
        log_probs = _completion_log_probs(params, jnp.asarray(patterns), state.x, idx)
        c = _draw(_uniform01(bits[k], dtype), jnp.exp(log_probs))
        return ChainState(_write(state.x, idx, jnp.asarray(patterns)[c])), StepInfo(_mask_of(idx, n))

    return core


def block_dynamics(model: IsingModel, dist: MaskDistribution) -> Sampler:
    """Weighted block dynamics [Definition 6]: draw ``S ~ w`` from a fixed mask distribution,
    resample ``x_S ~ p(x_S | x_{-S})``. For an adaptive ``w(S | x)`` use :func:`adaptive_block_dynamics`."""
    model = _check_model(model)
    check_distribution(dist, model.n)
    if dist.is_adaptive:
        raise ValueError("dist is adaptive (weights depend on x): use adaptive_block_dynamics(model, dist).")
    return _block_sampler(model, dist, "block dynamics")


def adaptive_block_dynamics(model: IsingModel, dist: MaskDistribution) -> Sampler:
    """Adaptive block dynamics [Definition 8]: draw ``S ~ w(. | x)``, then resample ``x_S`` from
    ``p(x_S | x_{-S}, S)``, proportional to ``p(y) w(S | y)`` over the completions ``y`` [Lemma 3].

    ``dist`` from :func:`gmlm_lib.ising.masks.adaptive` (its table has 2^n rows, so n <= 20).
    A fixed ``dist`` is accepted too (then this is :func:`block_dynamics`)."""
    model = _check_model(model)
    check_distribution(dist, model.n)
    return _block_sampler(model, dist, "adaptive block dynamics")


def _block_sampler(model: IsingModel, dist: MaskDistribution, name: str) -> Sampler:
    n = model.n
    subsets = np.asarray(dist.subsets, dtype=bool)
    m = int(subsets.sum(1).max())
    if m > MAX_JOINT_K:
        raise ValueError(f"a mask has {m} sites: 2^{m} completions per step; use masks of at most {MAX_JOINT_K} sites.")
    blocks = ising.mask_to_indices(subsets, m)  # (M, m) padded with n, built on the host
    log_w = jnp.log(jnp.asarray(dist.weights))  # (M,) or (2^n, M)
    patterns, plain = _joint_update(model, m)

    if dist.is_adaptive:

        def block_log_weights(x):
            return log_w[ising.index_from_states(x)]

        def log_probs(x, idx, j):
            completions = jax.vmap(lambda c: _write(x, idx, c))(patterns)
            return jax.nn.log_softmax(plain(x, idx) + log_w[ising.index_from_states(completions), j])

    else:

        def block_log_weights(x):
            return log_w

        def log_probs(x, idx, j):
            return plain(x, idx)

    def step(key, state):
        u = _uniform01(jax.random.bits(key, (2,), dtype=jnp.uint32), jnp.float64)
        j = _draw(u[0], jnp.exp(block_log_weights(state.x)))
        idx = blocks[j]
        c = _draw(u[1], jnp.exp(log_probs(state.x, idx, j)))
        return ChainState(_write(state.x, idx, patterns[c])), StepInfo(_mask_of(idx, n))

    kernel = _exact_kernel(n, lambda: _kernel_from_blocks(n, patterns, blocks, block_log_weights, log_probs))
    return Sampler(name, n, _init(n), step, kernel, passes=m)


def _exact_kernel(n: int, build: Callable) -> Callable:
    """``build()`` for n <= :data:`MAX_KERNEL_N`; above it, a kernel that raises a clear error
    (the one place the limit is enforced)."""
    if n <= MAX_KERNEL_N:
        return build()

    def too_big(*_):  # x, or (exact, x) as a kernel_core
        raise ValueError(f"exact transition matrices need n <= {MAX_KERNEL_N} (2^n x 2^n); got n = {n}.")

    return too_big


def local_fields(model: IsingModel, x: jax.Array) -> jax.Array:
    """``h_i + sum_j J_ij x_j`` for every site, in the model's dtype. x (n,) -> (n,).
    ``p(x_i = +1 | x_{-i}) = sigmoid(2 field_i)``."""
    return model.h + model.J @ x.astype(model.J.dtype)


def site_log_probs(model: IsingModel, x: jax.Array) -> jax.Array:
    """``log p(x_i = -1 | x_{-i})`` and ``log p(x_i = +1 | x_{-i})`` for every site. x (n,) -> (n, 2),
    columns ordered (-1, +1), from :func:`local_fields`."""
    field = local_fields(model, x)
    return jnp.stack([jax.nn.log_sigmoid(-2 * field), jax.nn.log_sigmoid(2 * field)], axis=-1)


def independent_parallel(model: IsingModel, dtype=jnp.float64) -> Sampler:
    """The independent parallel sampler [Definition 11; Eq. 4]: every site at once,
    ``x'_i ~ p(x_i | x_{-i})``, all conditioned on the same current ``x``.

    Its transition is a product over sites; its stationary law is in general not ``p``.
    Cost per step O(n^2) (one matrix-vector product). ``dtype`` (float64 or float32) is the
    arithmetic of the step; the exact ``kernel`` is float64. The step draws ``x'_i = +1`` when
    ``u_i < sigmoid(2 field_i)``, the same law as ``site_log_probs`` with one ``exp`` per site.
    """
    model = _check_model(model)
    n = model.n
    fast = _cast(model, dtype)
    core = _parallel_core(n)

    def step(key, state):
        return core(fast, key, state)

    exact = _cast(model, jnp.float64)
    kernel_core = _exact_kernel(n, lambda: _parallel_kernel)
    return Sampler("independent parallel", n, _init(n), step, partial(kernel_core, exact), core=core, params=fast,
                   kernel_core=kernel_core, exact=exact)


def _parallel_kernel(model: IsingModel, x) -> jax.Array:
    """Independent parallel's exact next-state law from ``x``: the product of the site conditionals
    [Eq. 4]. (n,) -> (2^n,)."""
    lp = site_log_probs(model, jnp.asarray(x, dtype=jnp.int8))  # (n, 2)
    return product.product_law(jnp.exp(lp[:, 1]))


@lru_cache(maxsize=None)
def _parallel_core(n: int) -> Callable:
    """The independent parallel step as ``core(model, key, state)``, one function per ``n`` (the
    model, in the step's dtype, is the operand)."""

    def core(model, key, state):
        p_up = jax.nn.sigmoid(2 * local_fields(model, state.x))
        up = _uniform01(jax.random.bits(key, (n,), dtype=jnp.uint32), p_up.dtype) < p_up
        return ChainState(jnp.where(up, 1, -1).astype(jnp.int8)), StepInfo(jnp.ones(n, dtype=bool))

    return core


def dependency_groups(model: IsingModel, threshold: float) -> list[tuple[int, ...]]:
    """The connected components of the strong-coupling graph, whose edges are the pairs with
    ``|J_ij| > threshold``: sites that depend strongly on each other, directly or through a chain.
    Sorted lists of sites, in order of their smallest site. A site coupled to nothing strongly is
    a group of its own."""
    model = _check_model(model)
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite number >= 0 (couplings with |J_ij| above it are strong); "
                         f"got {threshold!r}.")
    strong = np.abs(np.asarray(model.J)) > threshold
    seen, groups = set(), []
    for start in range(model.n):
        if start in seen:
            continue
        group, todo = set(), [start]
        while todo:
            i = todo.pop()
            if i not in group:
                group.add(i)
                todo += [int(j) for j in np.nonzero(strong[i])[0] if j not in group]
        seen |= group
        groups.append(tuple(sorted(group)))
    return groups


def dependency_partitions(model: IsingModel) -> list[tuple[float, list[tuple[int, ...]]]]:
    """Every distinct grouping :func:`dependency_groups` gives as its threshold rises from 0 (every
    coupled pair strong) past the largest ``|J_ij|`` (every site alone): ``(threshold, groups)`` at 0 and
    at each ``|J_ij|`` where the groups change, the smallest threshold of each grouping. The groups only
    change there: a pair stops being strong when the threshold reaches its ``|J_ij|``."""
    model = _check_model(model)
    sizes = np.abs(np.asarray(model.J, dtype=np.float64))[np.triu_indices(model.n, 1)]
    out: list[tuple[float, list[tuple[int, ...]]]] = []
    for threshold in [0.0, *sorted(set(float(v) for v in sizes if v > 0))]:
        groups = dependency_groups(model, threshold)
        if not out or groups != out[-1][1]:
            out.append((threshold, groups))
    return out


def _check_groups(groups, n: int) -> list[tuple[int, ...]]:
    """``groups`` as tuples of ints when they split the sites ``0 .. n-1`` into non-empty groups."""
    groups = [tuple(int(i) for i in g) for g in groups]
    if sorted(i for g in groups for i in g) != list(range(n)) or any(len(g) == 0 for g in groups):
        raise ValueError(f"groups must split the sites 0..{n - 1} into non-empty groups, each site in exactly one; "
                         f"got {groups}.")
    return groups


def dependency_aware(model: IsingModel, threshold: float | None = None, *, groups=None,
                     dtype=jnp.float64) -> Sampler:
    """The dependency-aware parallel sampler (this book's, beyond the paper): sites that depend
    strongly on each other are drawn one after another, sites that do not are drawn in parallel.

    The sites are split into ``groups`` (default: :func:`dependency_groups` of ``threshold``, the
    components of the graph of couplings ``|J_ij| > threshold``). One step is a sweep of
    ``L = max |G|`` parallel passes. In pass ``t`` every group with more than ``t`` sites draws its
    site ``g_t`` from ``p(x_{g_t} | x_{-G}, x_{g_<t})``, its own later sites summed out (masked),
    conditioned on the current state of everything else; the groups draw independently of each
    other given that state (one parallel pass: a product over sites, what a Transformer pass can
    implement [Propositions 3-4]). By the chain rule a sweep resamples each group jointly from its
    conditional, so when no coupling joins two groups a sweep is an exact Gibbs block update of
    every group at once and leaves ``p`` invariant [Definition 6]; couplings between groups (at
    most ``threshold`` each) make it an approximation, as independent parallel is [Definition 11].
    With every site its own group it *is* independent parallel; with one group holding every site
    a sweep draws exactly from ``p``. ``passes`` = ``L`` per step; ``kernel`` the sweep's exact law
    (the product of the passes' transition matrices), for n <= :data:`MAX_KERNEL_N`."""
    model = _check_model(model)
    n = model.n
    if (threshold is None) == (groups is None):
        raise ValueError("dependency_aware: pass threshold (groups from the couplings) or groups, exactly one.")
    groups = _check_groups(dependency_groups(model, threshold) if groups is None else groups, n)
    L = max(len(g) for g in groups)
    if L > MAX_JOINT_K:
        raise ValueError(f"a group has {L} sites: its conditionals sum over up to 2^{L - 1} patterns; use groups of at "
                         f"most {MAX_JOINT_K} sites (raise threshold, or split the group).")
    core, sweep_matrix = _dependency_program(n, tuple(groups))
    fast, exact = _cast(model, dtype), _cast(model, jnp.float64)

    def step(key, state):
        return core(fast, key, state)

    kernel_core = _exact_kernel(n, lambda: _sweep_kernel(sweep_matrix))
    label = f"dependency-aware ({len(groups)} groups, {L} passes)"
    return Sampler(label, n, _init(n), step, partial(kernel_core, exact), passes=L, core=core, params=fast,
                   kernel_core=kernel_core, exact=exact)


@lru_cache(maxsize=None)
def _sweep_kernel(sweep_matrix: Callable) -> Callable:
    """The sweep's exact next-state law from ``x`` as ``kernel(exact, x)``: row ``x`` of its matrix."""
    def kernel(exact, x):
        return sweep_matrix(exact)[ising.index_from_states(jnp.asarray(x, dtype=jnp.int8))]

    return kernel


@lru_cache(maxsize=None)
def _dependency_program(n: int, groups: tuple[tuple[int, ...], ...]) -> tuple[Callable, Callable]:
    """The dependency-aware sampler's step as ``core(model, key, state)`` and its sweep's exact matrix as
    ``sweep_matrix(exact) -> (2^n, 2^n)`` (jitted), one pair per ``(n, groups)``: the model is an operand,
    so every model split into the same groups shares their programs."""
    L = max(len(g) for g in groups)
    slots = np.asarray([list(g) + [n] * (L - len(g)) for g in groups], dtype=np.int32)  # (m, L) padded with n
    patterns = ising.enumerate_states(L)  # (2^L, L)
    active = [slots[:, t] < n for t in range(L)]  # the groups that draw in pass t (NumPy: fixed by the groups)

    def pass_up_probs(m: IsingModel, x, t: int):
        """P(x_{g_t} = +1 | ...) for every group (m,), in ``m``'s dtype; slots before t are fixed."""
        Jpad, hpad = ising.padded(m)
        idx = jnp.where(jnp.arange(L)[None] >= t, slots, n)  # drawn sites and padding read as fixed/absent
        lw, _ = ising.completion_log_weights(Jpad, hpad, jnp.broadcast_to(x, (idx.shape[0], n)), idx, patterns)
        up = patterns[:, t] > 0
        return jnp.exp(jax.nn.logsumexp(jnp.where(up[None], lw, -jnp.inf), -1) - jax.nn.logsumexp(lw, -1))

    def core(model, key, state):
        x = state.x
        bits = jax.random.bits(key, (L, slots.shape[0]), dtype=jnp.uint32)
        for t in range(L):
            p_up = pass_up_probs(model, x, t)
            new = jnp.where(_uniform01(bits[t], p_up.dtype) < p_up, 1, -1).astype(x.dtype)
            x = x.at[jnp.where(active[t], slots[:, t], n)].set(new, mode="drop")
        return ChainState(x), StepInfo(jnp.ones(n, dtype=bool))

    # the sweep's matrix as one compiled program: run op by op, each pass's few dozen operations would
    # compile as programs of their own, and on an accelerator compiling a program costs far more than running it
    @jax.jit
    def sweep_matrix(exact: IsingModel):
        states = ising.enumerate_states(n)
        M = jnp.eye(2**n, dtype=exact.J.dtype)
        for t in range(L):
            sites = slots[:, t][active[t]]  # the sites drawn in pass t
            pats = ising.enumerate_states(int(sites.shape[0]))

            def row(x, t=t, sites=sites, pats=pats):
                p_up = pass_up_probs(exact, x, t)[active[t]]
                probs = jnp.prod(jnp.where(pats > 0, p_up[None], 1 - p_up[None]), axis=-1)  # (2^k,)
                to = ising.index_from_states(jax.vmap(lambda c: _write(x, sites, c))(pats))
                return jnp.zeros(2**n, dtype=probs.dtype).at[to].add(probs)

            M = M @ jax.vmap(row)(states)
        return M

    return core, sweep_matrix


def transition_matrix(sampler: Sampler) -> jax.Array:
    """The exact transition matrix ``P[a, b] = P(X_1 = state b | X_0 = state a)``, states in
    :func:`gmlm_lib.ising.model.enumerate_states` order. (2^n, 2^n); n <= :data:`MAX_KERNEL_N`.
    A sampler with a ``kernel_core`` compiles one program per structure, its model an operand."""
    states = ising.enumerate_states(sampler.n)
    if sampler.kernel_core is not None:
        return _matrix_program(sampler.kernel_core)(sampler.exact, states)
    return jax.jit(jax.vmap(sampler.kernel))(states)


@lru_cache(maxsize=None)
def _matrix_program(kernel_core: Callable) -> Callable:
    """``kernel_core`` over every state, jitted once per kernel function (so per structure)."""
    return jax.jit(jax.vmap(kernel_core, in_axes=(None, 0)))


def stationary_law(P: jax.Array) -> jax.Array:
    """The stationary law of an ergodic transition matrix (the left eigenvector for eigenvalue 1),
    by a linear solve in float64. (S, S) -> (S,)."""
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] != P.shape[1]:
        raise ValueError(f"P must be a square (S, S) transition matrix; got shape {P.shape}.")
    rows = P.sum(1)
    if not (np.all(np.isfinite(P)) and np.all(P >= -1e-12) and np.allclose(rows, 1.0, atol=1e-9)):
        raise ValueError(f"P must be a stochastic matrix (finite, non-negative, rows summing to 1); its row sums "
                         f"range from {rows.min():.6g} to {rows.max():.6g} and its smallest entry is {P.min():.3g}.")
    S = P.shape[0]
    A = np.vstack([P.T - np.eye(S), np.ones((1, S))])
    b = np.zeros(S + 1)
    b[-1] = 1.0
    pi, *_ = np.linalg.lstsq(A, b, rcond=None)
    return jax.device_put(pi)


# --- Running many chains ------------------------------------------------------------------------


class ChainRun(NamedTuple):
    """Result of :func:`run_chains`.

    ``final`` (C, n) last states; ``observations``: the pytree ``observe`` returned, stacked over
    the recorded steps ``0, thin, 2 thin, ...`` (leading axis ``num_steps // thin + 1``; NumPy arrays);
    ``hitting_time`` (C,) int32, the first step at which ``target`` held (0 if it held at the
    start), ``-1`` if it never did within ``num_steps``; ``recorded_steps`` the step numbers.
    """

    final: jax.Array
    observations: object
    hitting_time: jax.Array | None
    recorded_steps: np.ndarray


def use_cpu_cores_as_devices(count: int | None = None) -> int:
    """Expose ``count`` CPU cores (default: every core this process may run on) to JAX as that
    many CPU devices, so that :func:`run_chains` shards its chains over them.

    XLA runs the k-Gibbs steps (row gathers and reductions, no dense product) mostly on one core
    of a CPU device; as several devices, the cores share the chains (``gmlm_lib.ising.bench.throughput``
    measures the gain on a given machine). Dense products (the
    independent parallel sampler) already use every core either way. Call it right after
    ``import jax``, before JAX computes anything (once JAX runs, only a call asking for the count
    it already has succeeds); accelerators (GPU, TPU) are not affected. Returns the number of
    CPU devices.
    """
    count = len(os.sched_getaffinity(0)) if count is None else checks.integer(count, "count", low=1)
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError as e:
        if len(jax.devices("cpu")) == count:  # already so (a notebook run again in the same kernel)
            return count
        raise RuntimeError(
            "use_cpu_cores_as_devices must run before JAX computes anything (it sets the number of "
            "CPU devices, fixed when JAX starts its backends): call it right after `import jax`, or "
            "restart the kernel."
        ) from e
    return len(jax.devices("cpu"))


def chain_sharding(num_chains: int) -> NamedSharding | None:
    """How :func:`run_chains` lays out a (num_chains, n) batch: split by chains over
    ``jax.devices()`` when there are several and they divide ``num_chains``, else ``None``."""
    devices = jax.devices()
    if len(devices) > 1 and num_chains % len(devices) == 0:
        return NamedSharding(Mesh(np.asarray(devices), ("chains",)), PartitionSpec("chains"))
    return None


def _no_observation(xs):
    return ()


def _hit_update(target, hit, xs, t):
    if target is None:
        return hit
    return jnp.where((hit < 0) & target(xs), t, hit).astype(jnp.int32)


@partial(jax.jit, static_argnums=(0, 1))
def _start(target, observe, x0):
    """The start states as int8, the hitting times after step 0 (-1 for a chain not yet in ``target``) and the
    observation of step 0, in one program (outside one, each operation would be a program of its own)."""
    x0 = x0.astype(jnp.int8)
    return x0, _hit_update(target, jnp.full(x0.shape[0], -1, dtype=jnp.int32), x0, 0), observe(x0)


def chain_keys(key: jax.Array, t, num_chains: int) -> jax.Array:
    """The keys of step ``t`` for chains ``0 .. num_chains - 1``: ``fold_in(fold_in(key, t), c)``,
    so a chain's randomness depends on neither the chunking nor the number of chains. (C,) keys."""
    step_key = jax.random.fold_in(key, t)
    return jax.vmap(lambda c: jax.random.fold_in(step_key, c))(jnp.arange(num_chains))


@partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _run_chunk(core, observe, target, thin, params, key, carry, starts):
    """Steps ``starts[0] .. starts[-1] + thin - 1`` of every chain, recording ``observe`` after each
    ``thin`` steps. Compiled once per (step's core, observe, target, thin) and chunk length: a
    sampler with a ``core`` passes its model as ``params``, so its models share the program."""
    step = core if params is None else partial(core, params)

    def one_step(carry, t):
        xs, hit = carry
        keys = chain_keys(key, t, xs.shape[0])
        xs = jax.vmap(step)(keys, ChainState(xs))[0].x
        return (xs, _hit_update(target, hit, xs, t + 1)), None

    def record(carry, t0):
        carry, _ = jax.lax.scan(one_step, carry, t0 + jnp.arange(thin))
        return carry, observe(carry[0])

    return jax.lax.scan(record, carry, starts)


def run_chains(
    key: jax.Array,
    sampler: Sampler,
    x0: jax.Array,
    num_steps: int,
    *,
    observe: Callable | None = None,
    target: Callable | None = None,
    thin: int = 1,
    chunk: int = 1000,
    progress: bool = False,
    stop_when_all_hit: bool = False,
) -> ChainRun:
    """Run ``C`` independent chains for ``num_steps`` steps without storing every state.

    x0 (C, n) start states. ``observe(xs (C, n)) -> pytree`` is recorded at step 0 and every
    ``thin`` steps (e.g. the fraction of chains in a set); ``num_steps`` = 0 runs no step (the chains stay
    at x0, observed at step 0 only); ``target(xs (C, n)) -> (C,) bool`` defines the hitting times. Chain ``c`` at step ``t`` uses :func:`chain_keys`, so results do
    not depend on ``chunk`` or ``thin``. The chains are sharded over ``jax.devices()`` when ``C``
    divides evenly; ``progress`` shows a tqdm bar over chunks.
    ``stop_when_all_hit`` ends the run after the first chunk in which every chain has hit
    ``target``: the hitting times are then complete and the observations stop there.
    """
    x0 = checks.array(x0)
    n = sampler.n
    if x0.ndim != 2 or x0.shape[1] != n:
        raise ValueError(f"x0 must be a (num_chains, {n}) batch of start states; got shape {x0.shape}.")
    x0 = ising.check_spins(x0, n, "x0")
    key = checks.key(key)
    num_steps = checks.integer(num_steps, "num_steps", low=0)
    thin = checks.integer(thin, "thin", low=1)
    chunk = checks.integer(chunk, "chunk", low=1)
    if num_steps % thin:
        raise ValueError(f"thin must be a positive divisor of num_steps = {num_steps}; got {thin}.")
    C = x0.shape[0]
    sharding = chain_sharding(C)
    if sharding is not None:
        x0 = jax.device_put(x0, sharding)
    observe = observe or _no_observation
    x0, hits, first = _start(target, observe, x0)
    carry = (x0, hits)
    starts = np.arange(0, num_steps, thin)
    per_chunk = max(1, int(chunk) // thin)
    pieces, done = [], 0
    structure = (sampler.core, sampler.params) if sampler.core is not None else (sampler.step, None)
    chunk_program = (structure[0], observe, target, thin, structure[1])
    bar = progress_bar(progress=progress, total=num_steps, desc=sampler.name, leave=False)
    for lo in range(0, len(starts), per_chunk):
        block = starts[lo : lo + per_chunk]
        carry, obs = _run_chunk(*chunk_program, key, carry, jax.device_put(block))
        pieces.append(obs)
        bar.update(len(block) * thin)
        done = lo + len(block)
        if stop_when_all_hit and target is not None and bool(np.all(np.asarray(carry[1]) >= 0)):
            break
    else:
        done = len(starts)
    bar.close()
    # stacked on the host (the observations are read there; on the device each piece's copy and the
    # concatenation would be programs of their own a shape)
    stacked = jax.tree.map(lambda a, *rest: np.concatenate([np.asarray(a)[None], *map(np.asarray, rest)]),
                           first, *pieces)
    return ChainRun(
        carry[0], stacked, carry[1] if target is not None else None, np.arange(0, done * thin + 1, thin)
    )


def median_hitting_time(hitting_time) -> float:
    """Median of hitting times [Figure 3] where ``-1`` means "not within the budget": ``inf`` when fewer than
    half of the chains hit (the median is censored), else the exact median. No chains: refused."""
    t = np.asarray(hitting_time, dtype=np.float64)
    if t.size == 0:
        raise ValueError("hitting_time holds no chain: a median of no hitting times is undefined; run at least one chain.")
    t = np.where(t < 0, np.inf, t)
    return float(np.median(t))
