"""Parallel unmasking rules: which masked positions one pass of a masked-diffusion decoder unmasks.

A rule is a pure function of the per-position confidences ``c_i = max_v p(x_i = v | x_U)`` and
entropies ``H_i`` of the masked positions' conditionals (and, for fixed schedules, the pass index):

========================  ====================================================================
``random``  (T)           ``s_t`` positions uniformly at random, ``s_t`` a fixed schedule of
                          ``T`` passes (the forward process of Li and Cai, 2025, arXiv 2505.21400)
``top_k``  (T)            the ``s_t`` most confident (Mask-Predict's and MaskGIT's order)
``threshold``  (tau)      every position with confidence ``>= tau`` (Fast-dLLM, Wu et al. 2025,
                          arXiv 2505.22618, threshold rule; its scripts use tau = 0.9)
``factor``  (f)           the ``m`` most confident while ``(m + 1)(1 - c_(m)) < f`` (Fast-dLLM's
                          factor rule)
``entropy``  (gamma)      by increasing entropy while ``sum H - max H <= gamma`` (EB-Sampler,
                          Ben-Hamu et al. 2025, arXiv 2505.24857)
``dilated``  (B)          a fixed schedule: each block of ``B = 2^L`` positions in ``L + 1`` passes
                          of non-adjacent positions (DUS, Luxembourg et al. 2025, arXiv 2506.19037)
``dependency``  (gamma)   this book's: the entropy bound charged only within groups of
                          positions joined by strong couplings through masked positions
========================  ====================================================================

Every rule unmasks at least the first position of its order, so a decode ends within ``n``
passes. The same ``select`` functions run on the Ising testbed, where
:mod:`gmlm_lib.ising.unmasking` computes the exact law each rule samples, and in the PaDIR decoder
(:class:`gmlm_lib.mt.decoding.StrategyOptions`), on a trained model's conditionals.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core import checks
from gmlm_lib.core.precision import float64

__all__ = ["RULES", "RULES_2025", "Rule", "make_rule", "random_order", "top_k", "threshold", "factor",
           "entropy_bound", "dilated", "dependency", "dependency_select", "components", "dilated_passes",
           "dilated_order", "select_with"]

RULES = ("random", "top_k", "threshold", "factor", "entropy", "dilated", "dependency")
"""The rule names :func:`make_rule` accepts. The 2025 rules are ``threshold``, ``factor``,
``entropy`` and ``dilated``; ``random`` and ``top_k`` are the fixed-schedule baselines."""

RULES_2025 = ("threshold", "factor", "entropy", "dilated")
"""The 2025 rules (Fast-dLLM's two, EB-Sampler's, DUS), against which the book's rule is compared."""


class Rule(NamedTuple):
    """A parallel unmasking rule on ``n`` positions.

    ``select(conf, ent, masked, t, key) -> chosen``: confidences and entropies (n,) float (read only
    where ``masked``), ``masked`` (n,) bool, ``t`` the pass index (0-based), ``key`` a PRNG key (used
    by ``random`` only) -> (n,) bool, a non-empty subset of ``masked`` when any position is masked.
    ``counts`` (T,) for the fixed-size rules (``random``, ``top_k``): positions unmasked in pass t;
    ``None`` for the adaptive ones.
    """

    name: str
    param: float
    n: int
    select: Callable
    counts: tuple | None = None

    @property
    def label(self) -> str:
        symbol = {"random": "T", "top_k": "T", "threshold": "τ", "factor": "f", "entropy": "γ", "dilated": "B",
                  "dependency": "γ"}[self.name]
        value = int(self.param) if self.name in ("random", "top_k", "dilated") else self.param
        return f"{self.name} ({symbol} = {value:g})"


def _check_n(n) -> int:
    return checks.integer(n, "n", low=1, fix="n is the number of positions.")


def _check_unit(name: str, value, *, low_open: bool = False) -> float:
    return checks.real(value, name, low=0.0, high=1.0, low_open=low_open)


def _check_positive(name: str, value) -> float:
    return checks.real(value, name, low=0.0, low_open=True)


def _rank(score, masked):
    """Rank of every masked position by ``score``, highest first (ties by position); unmasked
    positions rank after all masked ones. (n,) -> (n,) int."""
    order = jnp.argsort(jnp.where(masked, -score, jnp.inf), stable=True)
    return jnp.zeros(score.shape[0], jnp.int32).at[order].set(jnp.arange(score.shape[0], dtype=jnp.int32))


def _first(score, masked, count):
    """The ``count`` masked positions of highest ``score`` (at least one when any is masked)."""
    return masked & (_rank(score, masked) < jnp.maximum(count, 1))


def _schedule(n: int, T) -> tuple[int, ...]:
    """Positions unmasked in each of ``T`` passes: ``ceil(n (t + 1) / T) - ceil(n t / T)``."""
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or not 1 <= T <= n:
        raise ValueError(f"T (the number of passes) must be an integer in [1, n = {n}]; got {T!r}.")
    done = [math.ceil(n * t / T) for t in range(T + 1)]
    return tuple(done[t + 1] - done[t] for t in range(T))


def random_order(n: int, T: int) -> Rule:
    """``s_t`` uniformly random masked positions in pass ``t``, ``s_t`` from a balanced schedule of
    ``T`` passes (``ceil(n (t + 1) / T) - ceil(n t / T)`` in pass ``t``): the sampler of Li and Cai's
    theorem (arXiv 2505.21400), and the
    paper's independent parallel step applied to a growing context."""
    n = _check_n(n)
    counts = _schedule(n, T)
    return Rule("random", float(T), n, functools.partial(_random_select, _count_table(counts, n)), counts)


def _count_table(counts: tuple, n: int) -> jax.Array:
    """The schedule's count of every pass ``0 .. n``: ``counts`` then zeros, (n + 1,) int32, one shape
    whatever ``T``, so one compiled selection serves every number of passes."""
    return jnp.asarray(counts + (0,) * (n + 1 - len(counts)), dtype=jnp.int32)


def _random_select(table, conf, ent, masked, t, key):
    score = jax.random.uniform(key, masked.shape)
    return _first(score, masked, table[jnp.minimum(t, table.shape[0] - 1)])


def _top_k_select(table, conf, ent, masked, t, key):
    return _first(conf, masked, table[jnp.minimum(t, table.shape[0] - 1)])


def top_k(n: int, T: int) -> Rule:
    """The ``s_t`` most confident masked positions in pass ``t``, the same balanced schedule of
    ``T`` passes: Mask-Predict's order (Ghazvininejad et al., 2019) without re-masking."""
    n = _check_n(n)
    counts = _schedule(n, T)
    return Rule("top_k", float(T), n, functools.partial(_top_k_select, _count_table(counts, n)), counts)


def threshold(n: int, tau: float) -> Rule:
    """Fast-dLLM's threshold rule (Wu et al. 2025, arXiv 2505.22618): unmask every masked position
    whose confidence is at least ``tau``; when none is, the most confident one."""
    n, tau = _check_n(n), _check_unit("tau", tau)
    return Rule("threshold", tau, n, functools.partial(_threshold_select, tau))


def _threshold_select(tau, conf, ent, masked, t, key):
    sure = masked & (conf >= tau)
    return sure | (_first(conf, masked, 1) & ~jnp.any(sure))


def factor(n: int, f: float) -> Rule:
    """Fast-dLLM's factor rule (arXiv 2505.22618): with ``c_(1) >= c_(2) >= ...`` the masked
    confidences, unmask the ``m`` most confident for the largest ``m`` with
    ``(m + 1)(1 - c_(m)) < f`` (at least one). The left side grows with ``m``, so the rule takes
    a prefix of the confidence order."""
    n, f = _check_n(n), _check_positive("f", f)
    return Rule("factor", f, n, functools.partial(_factor_select, f))


def _factor_select(f, conf, ent, masked, t, key):
    rank = _rank(conf, masked)
    ok = masked & ((rank + 2) * (1.0 - conf) < f)
    return _first(conf, masked, jnp.sum(ok))


def entropy_bound(n: int, gamma: float) -> Rule:
    """EB-Sampler's rule (Ben-Hamu et al. 2025, arXiv 2505.24857) with entropy as the error proxy:
    take masked positions in order of increasing entropy while ``sum_j H_j - max_j H_j <= gamma``
    over the ones taken, a bound on the mutual information among them. The first is always taken
    (its sum minus max is 0)."""
    n, gamma = _check_n(n), _check_positive("gamma", gamma)
    return Rule("entropy", gamma, n, functools.partial(_entropy_select, gamma))


def _entropy_select(gamma, conf, ent, masked, t, key):
    order = jnp.argsort(jnp.where(masked, ent, jnp.inf), stable=True)
    h = jnp.where(masked[order], ent[order], 0.0)
    before = jnp.cumsum(h) - h  # sum of the lower entropies = sum - max over the first m
    count = jnp.sum(masked[order] & (before <= gamma))
    return _first(-ent, masked, count)


def select_with(name: str) -> Callable:
    """``select(param, conf, ent, masked, t, key)``: the selection of rule ``name`` (``threshold``,
    ``factor``, ``entropy`` or ``dilated``) with its parameter as an argument, which may be a traced
    array, so one compiled decoder serves every value of a swept parameter (``tau``, ``f``, ``gamma``, the
    block size ``B`` as int32) instead of one compilation per value. For the first three the same
    function :func:`make_rule`'s rule binds its checked parameter to, for ``dilated`` the same selections
    (:func:`dilated_order`); the caller checks the value (e.g. :class:`gmlm_lib.mt.decoding.StrategyOptions`)."""
    if name not in _PARAMETRIC:
        raise ValueError(f"select_with takes a rule with one numeric parameter, one of {tuple(_PARAMETRIC)}; got "
                         f"{name!r} (the others fix a schedule of counts or dependent pairs: use make_rule).")
    return _PARAMETRIC[name]


def selection(rule: Rule) -> tuple[Callable, tuple]:
    """``(fn, args)`` with ``rule.select(...) == fn(*args, ...)``, for a jitted caller that takes ``fn`` as
    a static argument and ``args`` as operands. For every rule of this module ``fn`` is one function,
    :func:`any_select`, and ``args`` say which rule and hold its settings (the parameter, the schedule
    or the dilation's passes, the dependent pairs) in shapes that depend on ``n`` only: one compiled
    decoder serves every rule and every setting. A rule built elsewhere gives its own ``select`` and no
    arguments."""
    sel = rule.select
    if not (isinstance(sel, functools.partial) and sel.func in _SELECTIONS and not sel.keywords):
        return sel, ()
    n = rule.n  # the arguments built on the host and copied: on the device each would be a program of its own
    param, table, strong = float64(0.0), *jax.device_put((np.zeros(n + 1, np.int32), np.zeros((n, n), bool)))
    if sel.func in (_random_select, _top_k_select):
        table = sel.args[0]
    elif sel.func is _dilated_select:
        table = jax.device_put(np.concatenate([np.asarray(sel.args[0], np.int32), np.zeros(1, np.int32)]))
    elif sel.func is _dependency_rule_select:
        strong, param = sel.args[0], float64(sel.args[1])
    else:
        param = float64(sel.args[0])
    return any_select, (jax.device_put(np.int32(_SELECTIONS.index(sel.func))), param, table, strong)


def any_select(which, param, table, strong, conf, ent, masked, t, key):
    """The selection of this module's rule number ``which`` (:func:`selection` builds the arguments): one
    ``lax.switch`` over the rules, each reading its own settings. conf, ent (n,), masked (n,) bool -> (n,) bool."""
    n = masked.shape[0]
    branches = [
        lambda: _random_select(table, conf, ent, masked, t, key),
        lambda: _top_k_select(table, conf, ent, masked, t, key),
        lambda: _threshold_select(param, conf, ent, masked, t, key),
        lambda: _factor_select(param, conf, ent, masked, t, key),
        lambda: _entropy_select(param, conf, ent, masked, t, key),
        lambda: _dilated_select(table[:n], conf, ent, masked, t, key),
        lambda: _dependency_rule_select(strong, param, conf, ent, masked, t, key),
    ]
    return jax.lax.switch(which, branches)


def dilated_passes(n: int, B: int) -> np.ndarray:
    """The pass of every position under DUS with blocks of ``B = 2^L``: block ``b`` takes passes
    ``b (L + 1) .. b (L + 1) + L``; within it, offset 0 goes first and offset ``j > 0`` in pass
    ``L - v(j)``, ``v(j)`` the number of trailing zero bits of ``j``. For ``B = 8`` the passes are
    {0}, {4}, {2, 6}, {1, 3, 5, 7}: each pass halves the gaps, and no two positions of a pass are
    adjacent. Empty passes (a partial last block) are dropped. (n,) int."""
    L = B.bit_length() - 1
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        b, j = divmod(i, B)
        out[i] = b * (L + 1) + (0 if j == 0 else L - ((j & -j).bit_length() - 1))
    _, dense = np.unique(out, return_inverse=True)
    return dense.reshape(-1)


def dilated(n: int, B: int) -> Rule:
    """DUS (Luxembourg et al. 2025, arXiv 2506.19037): a content-free schedule that unmasks each block
    of ``B = 2^L`` positions, blocks left to right, in ``L + 1 = O(log B)`` passes of non-adjacent
    positions (:func:`dilated_passes`; our reading of its dilation schedule), about
    ``n (L + 1) / B`` passes in all. ``B = 2`` is left-to-right AR."""
    n = _check_n(n)
    if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 2 or B & (B - 1):
        raise ValueError(f"B (the DUS block size) must be a power of two >= 2; got {B!r}.")
    return Rule("dilated", float(B), n, functools.partial(_dilated_select,
                                                             jax.device_put(np.asarray(dilated_passes(n, int(B))))))


def _dilated_select(passes, conf, ent, masked, t, key):
    first = jnp.min(jnp.where(masked, passes, jnp.iinfo(jnp.int32).max))
    return masked & (passes == first)


def dilated_order(n: int, B) -> jax.Array:
    """(n,) int32: the DUS pass of each of ``n`` positions with blocks of ``B = 2^L`` (a Python int or a
    traced int32; checked by the caller), computed on the device: block ``b`` takes passes
    ``b (L + 1) .. b (L + 1) + L``, offset ``j > 0`` in pass ``L - v(j)``. :func:`dilated_passes` with the
    empty passes of a partial last block kept: the same order, so every selection of the rule is the same,
    and ``B`` may be an operand (one compiled decoder for every block size)."""
    i = jnp.arange(n, dtype=jnp.int32)
    B = jnp.asarray(B, jnp.int32)
    levels = jax.lax.population_count(B - 1)  # L = log2 B
    j = i % B
    zeros = jax.lax.population_count((j & -j) - 1)  # trailing zero bits of j > 0
    return (i // B) * (levels + 1) + jnp.where(j == 0, 0, levels - zeros)


def _dilated_block_select(B, conf, ent, masked, t, key):
    return _dilated_select(dilated_order(masked.shape[0], B), conf, ent, masked, t, key)


#: the selections of the rules with one numeric parameter (a real, or DUS's block size), that parameter first
_PARAMETRIC = {"threshold": _threshold_select, "factor": _factor_select, "entropy": _entropy_select,
               "dilated": _dilated_block_select}


def components(strong, masked):
    """``reach`` (n, n) bool: ``reach[i, j]`` when masked ``i`` and ``j`` are joined by a path of
    ``strong`` pairs through masked positions only (``reach[i, i]`` for every masked ``i``). By
    repeated squaring of the adjacency, jittable. strong (n, n) bool, masked (n,) bool."""
    n = masked.shape[0]
    reach = (strong & masked[:, None] & masked[None, :]) | jnp.diag(masked)
    for _ in range(max(1, math.ceil(math.log2(n)))):  # paths of length up to 2^k >= n
        reach = (reach.astype(jnp.int32) @ reach.astype(jnp.int32)) > 0
    return reach


def dependency(n: int, gamma: float, strong) -> Rule:
    """This book's rule (beyond the paper): the entropy bound of :func:`entropy_bound`, charged only
    within groups of dependent positions. Two masked positions are dependent when a path of
    ``strong`` pairs (fixed, (n, n) bool, a pair marked either way round; on the Ising testbed
    ``J_ij != 0`` or ``|J_ij| > delta``) joins them through *masked* positions; the groups are the
    components of that graph. Visit the masked positions in order of increasing entropy and take each
    one while ``sum over groups g of (sum_{i in A, g} H_i - max_{i in A, g} H_i) <= gamma`` (the first
    always).

    Why: one pass's error is the total correlation of the positions it draws, given the unmasked
    ones. In a Markov random field, masked positions in different components of the graph
    restricted to the masked ones are independent given the unmasked values, so the total
    correlation of ``A`` is the sum of its groups' and each group's is at most its entropy sum
    minus its largest entropy. With ``strong = (J != 0)`` the rule therefore bounds each pass's
    error by ``gamma`` exactly as EB-Sampler does, while taking independent groups in parallel for
    free; with every pair strong it *is* EB-Sampler; with none it takes every position at once
    (exact, since they are independent). A ``delta > 0`` drops weak couplings from the graph: more
    parallel, no longer a bound. (The translation decoder's form,
    ``decoding.StrategyOptions("dependency")``, reads dependent pairs off the cross-attention.)"""
    n, gamma = _check_n(n), _check_positive("gamma", gamma)
    strong = np.asarray(strong)
    if strong.shape != (n, n) or strong.dtype != bool:
        raise ValueError(f"strong must be an ({n}, {n}) bool matrix (True for dependent pairs); "
                         f"got {strong.dtype} of shape {strong.shape}.")
    strong = jax.device_put((strong | strong.T) & ~np.eye(n, dtype=bool))  # copied: jnp.asarray would compile a program
    return Rule("dependency", gamma, n, functools.partial(_dependency_rule_select, strong, gamma))


def _dependency_rule_select(strong, gamma, conf, ent, masked, t, key):
    return dependency_select(ent, masked, strong, gamma)


#: every selection this module's rules bind their settings to (:func:`selection`)
_SELECTIONS = (_random_select, _top_k_select, _threshold_select, _factor_select, _entropy_select, _dilated_select,
               _dependency_rule_select)


def dependency_select(ent, masked, strong, gamma):
    """The choice of :func:`dependency` for one state, with the dependent pairs ``strong`` (n, n)
    bool given per call (the translation decoder reads them off each pass's cross-attention).
    ent (n,), masked (n,) bool -> (n,) bool."""
    n = masked.shape[0]
    reach = components(strong & ~jnp.eye(n, dtype=bool), masked)
    order = jnp.argsort(jnp.where(masked, ent, jnp.inf), stable=True)

    def body(k, carry):
        chosen, charged = carry
        i = order[k]
        # in increasing-entropy order the newcomer is its group's largest, so the group's charge
        # (sum - max) grows by the group's previous largest entropy (0 for a group not yet drawn)
        extra = jnp.max(jnp.where(reach[i] & chosen, ent, 0.0))
        take = masked[i] & ((k == 0) | (charged + extra <= gamma))
        return chosen.at[i].set(take), charged + jnp.where(take, extra, 0.0)

    return jax.lax.fori_loop(0, n, body, (jnp.zeros(n, bool), jnp.zeros((), ent.dtype)))[0]


def make_rule(name: str, n: int, param, *, strong=None) -> Rule:
    """The rule ``name`` (one of :data:`RULES`) with its one parameter; ``strong`` for ``dependency``."""
    if name == "dependency":
        if strong is None:
            raise ValueError("make_rule('dependency', ...) needs strong=, the (n, n) bool matrix of strongly coupled "
                             "pairs (e.g. np.abs(model.J) > delta).")
        return dependency(n, param, strong)
    builders = {"random": random_order, "top_k": top_k, "threshold": threshold, "factor": factor,
                "entropy": entropy_bound, "dilated": dilated}
    if name not in builders:
        raise ValueError(f"rule must be one of {RULES}; got {name!r}.")
    if name in ("random", "top_k", "dilated") and isinstance(param, float) and param.is_integer():
        param = int(param)
    return builders[name](n, param)
