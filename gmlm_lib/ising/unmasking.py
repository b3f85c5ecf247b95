"""Parallel unmasking rules of masked diffusion decoders, and the exact law each one samples.

A masked-diffusion decoder starts from every position masked. Each pass it reads the conditional
law of every masked position given the unmasked ones, ``p(x_i | x_U)`` (the other masked positions
summed out: what a perfectly trained mask predictor returns), picks a set ``A`` of masked positions
by a *rule*, and draws ``x_A`` from the product of those conditionals: one parallel step is a
product law [Propositions 3-4], so the draw ignores the dependence among the positions of ``A``.
The rules (:mod:`gmlm_lib.core.unmasking`, re-exported here) differ only in how they choose ``A``:
a confidence threshold or factor (Fast-dLLM), an entropy bound (EB-Sampler), a dilated schedule
(DUS), fixed random or top-k schedules, and this book's dependency-aware rule, which on the Ising
testbed calls a pair strongly dependent when ``|J_ij| > delta``.

:func:`exact_law` enumerates every path of a rule on an Ising model of ``n <=``
:data:`MAX_EXACT_UNMASK_N` sites: the exact law of its output and of its number of passes,
in float64. :func:`sampler` is the same decoder as BlackJAX-style ``init``/``step`` pure functions
(for Monte Carlo checks of the exact law), built on the same ``select`` functions.
:func:`li_cai_bound` is the right-hand side of Li and Cai's Theorem 1 for the ``random`` rule.
"""

from __future__ import annotations

import itertools
import math
from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core import divergences, rng
from gmlm_lib.core.precision import require_x64
from gmlm_lib.core.unmasking import (RULES, RULES_2025, Rule, dependency, dilated, entropy_bound, factor,  # noqa: F401
                                     make_rule, random_order, selection, threshold, top_k)
from gmlm_lib.ising import model as ising
from gmlm_lib.ising.model import IsingModel

MAX_EXACT_UNMASK_N = 12
"""Largest n for :func:`exact_law`: it visits up to ``3^n`` partial states (531,441 at n = 12)."""

__all__ = ["MAX_EXACT_UNMASK_N", "site_statistics", "ExactLaw", "exact_law", "batch_correlations", "UnmaskState",
           "Unmasker", "sampler", "sample", "chi_square_check", "mutual_information_sum", "li_cai_rhs", "li_cai_bound",
           "families", "STRONG_FAMILIES", "envelope"]


def _binary_entropy(p):
    """Entropy in nats of a {-1, +1} variable with ``P(+1) = p`` (0 log 0 = 0). Works on NumPy and JAX arrays."""
    xp = jnp if isinstance(p, jax.Array) else np
    q = 1.0 - p
    return -(xp.where(p > 0, p * xp.log(xp.where(p > 0, p, 1.0)), 0.0)
             + xp.where(q > 0, q * xp.log(xp.where(q > 0, q, 1.0)), 0.0))


def site_statistics(p_up):
    """Confidence ``max(p, 1 - p)`` and entropy (nats) of each position's conditional ``P(+1) = p_up``."""
    xp = jnp if isinstance(p_up, jax.Array) else np
    return xp.maximum(p_up, 1.0 - p_up), _binary_entropy(p_up)


# --- The exact law of a rule ---------------------------------------------------------------------


def _joint(model: IsingModel) -> np.ndarray:
    ising.check_model(model)
    if model.n > MAX_EXACT_UNMASK_N:
        raise ValueError(f"exact_law enumerates up to 3^n partial states: use n <= {MAX_EXACT_UNMASK_N}; "
                         f"got n = {model.n}.")
    return np.asarray(ising.probabilities(model), dtype=np.float64).reshape((2,) * model.n)


class _Marginals:
    """Marginal tables ``p(x_S)`` of the joint (axes = the sites of S in increasing order), cached."""

    def __init__(self, joint: np.ndarray):
        self.joint, self.n, self.cache = joint, joint.ndim, {}

    def __call__(self, sites: tuple[int, ...]) -> np.ndarray:
        if sites not in self.cache:
            other = tuple(i for i in range(self.n) if i not in sites)
            self.cache[sites] = self.joint.sum(axis=other) if other else self.joint
        return self.cache[sites]

    def p_up(self, sites: tuple[int, ...], masked: list[int]) -> np.ndarray:
        """``P(x_i = +1 | x_S)`` for every value of ``x_S`` (rows, enumerate_states order) and masked i."""
        base = self(sites).reshape(-1)
        out = np.empty((base.shape[0], len(masked)))
        for c, i in enumerate(masked):
            both = tuple(sorted(sites + (i,)))
            table = np.moveaxis(self(both), both.index(i), -1).reshape(-1, 2)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[:, c] = np.where(base > 0, table[:, 1] / np.where(base > 0, base, 1.0), 0.5)
        return out


def _positions(bits: int, n: int) -> tuple[int, ...]:
    return tuple(i for i in range(n) if bits >> i & 1)


def _spread(mass: np.ndarray, p_up: np.ndarray, U: tuple, A: tuple, n: int):
    """Mass of rows (R,) over x_U times the product law of x_A (R, |A|) -> (new sites, flat mass over
    x_{U+A} with repeated entries summed)."""
    new = tuple(sorted(U + A))
    R, a = p_up.shape
    patterns = ((np.arange(2 ** a)[:, None] >> np.arange(a - 1, -1, -1)) & 1)  # (2^a, a), site order of A
    prob = np.prod(np.where(patterns[None] == 1, p_up[:, None, :], 1.0 - p_up[:, None, :]), axis=-1)  # (R, 2^a)
    return new, patterns, prob * mass[:, None]


def _index(rows_bits: np.ndarray, U: tuple, patterns: np.ndarray, A: tuple, new: tuple) -> np.ndarray:
    """Flat index over x_new (site order, first site most significant) of every (row, pattern)."""
    m = len(new)
    weight = {s: 1 << (m - 1 - k) for k, s in enumerate(new)}
    wu = np.asarray([weight[s] for s in U], dtype=np.int64)
    wa = np.asarray([weight[s] for s in A], dtype=np.int64)
    return (rows_bits @ wu)[:, None] + (patterns @ wa)[None, :]


class ExactLaw(NamedTuple):
    """What :func:`exact_law` returns: ``law`` (2^n,) the output's law in enumerate_states order,
    ``passes`` its expected number of passes, ``pass_law`` (n + 1,) P(passes = k), ``target`` (2^n,)
    the model's law, ``kl`` = KL(target || law) (the direction of Li and Cai's theorem), ``tv``, and
    ``max_batch`` the most positions any path with positive probability unmasks in one pass."""

    law: np.ndarray
    passes: float
    pass_law: np.ndarray
    target: np.ndarray
    kl: float
    tv: float
    max_batch: int


def exact_law(model: IsingModel, rule: Rule, *, on_batch: Callable | None = None) -> ExactLaw:
    """The exact law of the output of decoding ``model`` with ``rule`` from all-masked, by enumerating
    every reachable partial state pass by pass: pass ``t`` holds, for each unmasked set ``U``, the
    probability of every value of ``x_U``; the rule's choice ``A`` for each value (its
    ``select``, the same function the sampler calls) sends that mass to ``U + A`` times the product of
    the conditionals on ``A``. ``random`` averages over every ``s_t``-subset. float64,
    ``n <=`` :data:`MAX_EXACT_UNMASK_N`; cost about ``4^n``. A KL below zero by rounding is returned as 0.

    ``on_batch(t, U, A, values, mass)``, when given, is called for every batch the decoder draws with
    positive probability: pass ``t`` (from 0), the unmasked sites ``U`` and the batch ``A`` (tuples,
    increasing), ``values`` (R, len(U)) the values of ``x_U`` that choose ``A`` (1 for +1, in the sites'
    order) and ``mass`` (R,) the decoder's probability of reaching each (:func:`batch_correlations`)."""
    require_x64("gmlm_lib.ising.unmasking.exact_law")
    if not isinstance(rule, Rule):
        raise TypeError(f"rule must be a Rule (make_rule(name, n, param)); got {type(rule).__name__}.")
    joint = _joint(model)
    n = model.n
    if rule.n != n:
        raise ValueError(f"rule is for n = {rule.n} positions but the model has n = {n}: build it with n = {n}.")
    marg = _Marginals(joint)
    full = (1 << n) - 1
    layer = {0: np.ones(1)}
    out = np.zeros(2 ** n)
    pass_law = np.zeros(n + 1)
    max_batch = 0
    select_fn, select_args = selection(rule)
    key = rng.key(0)
    for t in range(n + 1):
        if not layer:
            break
        nxt: dict[int, np.ndarray] = {}
        for bits, mass in layer.items():
            if bits == full:
                out += mass
                pass_law[t] += mass.sum()
                continue
            U = _positions(bits, n)
            masked = [i for i in range(n) if not bits >> i & 1]
            live = np.nonzero(mass > 0)[0]
            if live.size == 0:
                continue
            mass = mass[live]
            rows_bits = ((live[:, None] >> np.arange(len(U) - 1, -1, -1)) & 1).astype(np.int64)
            p_full = np.full((live.size, n), 0.5)
            p_full[:, masked] = marg.p_up(U, masked)[live]
            if rule.name == "random":
                subsets = list(itertools.combinations(masked, rule.counts[t]))  # t < T while any is masked
                choices = [(A, np.arange(live.size), 1.0 / len(subsets)) for A in subsets]
            else:
                conf, ent = site_statistics(p_full)
                mvec = np.zeros(n, dtype=bool)
                mvec[masked] = True
                width = 1 << (n - 1)  # rows padded to the most a partial state can have: one compilation
                pad = lambda a: np.concatenate([a, np.repeat(a[:1], width - a.shape[0], 0)])
                rows_in = (pad(conf), pad(ent), np.broadcast_to(mvec, (width, n)))  # copied, not staged op by op
                chosen = np.asarray(_select_rows(select_fn, select_args, *jax.device_put(rows_in), t, key))[:live.size]
                if np.any(chosen & ~mvec) or not np.all(chosen.any(1)):
                    raise RuntimeError(f"rule {rule.label} chose no masked position or an unmasked one at pass {t}: "
                                       "a rule must return a non-empty subset of the masked positions.")
                keys, groups = np.unique(chosen, axis=0, return_inverse=True)
                groups = np.asarray(groups).reshape(-1)
                choices = [(tuple(np.nonzero(keys[g])[0].tolist()), np.nonzero(groups == g)[0], 1.0)
                           for g in range(keys.shape[0])]
            for A, rows, weight in choices:
                max_batch = max(max_batch, len(A))
                if on_batch is not None:
                    on_batch(t, U, A, rows_bits[rows], mass[rows] * weight)
                new, patterns, w = _spread(mass[rows] * weight, p_full[rows][:, list(A)], U, A, n)
                idx = _index(rows_bits[rows], U, patterns, A, new)
                nb = sum(1 << s for s in new)
                if nb not in nxt:
                    nxt[nb] = np.zeros(2 ** len(new))
                np.add.at(nxt[nb], idx.reshape(-1), w.reshape(-1))
        layer = nxt
    target = joint.reshape(-1)
    if not np.isclose(out.sum(), 1.0, atol=1e-9):
        raise RuntimeError(f"exact_law lost mass: the output law sums to {out.sum():.12f}, not 1 ({rule.label}).")
    kl = float(divergences.kl(target, out))
    return ExactLaw(out, float(np.arange(n + 1) @ pass_law), pass_law, target, max(kl, 0.0),
                    float(divergences.tv(out, target)), max_batch)


@partial(jax.jit, static_argnums=0)
def _select_rows(fn, args, conf, ent, masked, t, key):
    """A rule's choice for every row (R, n): one program per selection function and width, its
    parameter ``args`` an operand (:func:`gmlm_lib.core.unmasking.selection`)."""
    return jax.vmap(lambda c, e, m: fn(*args, c, e, m, t, key))(conf, ent, masked)


def batch_correlations(model: IsingModel, rule: Rule) -> dict[str, np.ndarray]:
    """The error of every pass of decoding ``model`` with ``rule``, exactly, path by path: for each batch
    ``A`` drawn with positive probability after ``x_U`` (:func:`exact_law`'s ``on_batch``), the total
    correlation of ``x_A`` given ``x_U``, ``sum_{i in A} H(X_i | x_U) - H(X_A | x_U)`` in nats: the KL
    from the true conditional law of ``x_A`` to the product of its marginals that the pass draws from,
    so the error of that one pass. Beside it the entropy bound's *charge*
    ``sum_{i in A} H(X_i | x_U) - max_{i in A} H(X_i | x_U)``, which bounds it from above (``H(X_A | x_U)``
    is at least its largest marginal entropy): EB-Sampler keeps the charge at most its ``gamma``
    [Ben-Hamu et al., 2025], so it bounds each pass's error by ``gamma``.

    Returns arrays of one entry a (pass, ``x_U``, ``A``): ``pass`` (from 1), ``size`` (``|A|``), ``mass``
    (the decoder's probability of that state and batch; summed over a pass, the probability that the
    decoder runs it), ``total_correlation`` (a rounding below 0 returned as 0) and ``charge``. float64,
    ``n <=`` :data:`MAX_EXACT_UNMASK_N`."""
    require_x64("gmlm_lib.ising.unmasking.batch_correlations")
    marg = _Marginals(_joint(model))
    out = {k: [] for k in ("pass", "size", "mass", "total_correlation", "charge")}

    def entropies(p: np.ndarray) -> np.ndarray:  # rows of laws -> (R,) entropy, nats
        return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)

    def record(t, U, A, values, mass):
        sites = tuple(sorted(U + A))
        table = np.transpose(marg(sites), [sites.index(s) for s in U + A]).reshape(2 ** len(U), 2 ** len(A))
        index = values @ (1 << np.arange(len(U) - 1, -1, -1)) if U else np.zeros(len(mass), np.int64)
        rows = table[index]
        law = rows / rows.sum(axis=1, keepdims=True)  # (R, 2^|A|): x_A given x_U, A's first site most significant
        cube = law.reshape((-1,) + (2,) * len(A))
        sites_h = np.stack([entropies(np.moveaxis(cube, k + 1, -1).reshape(len(law), -1, 2).sum(axis=1))
                            for k in range(len(A))], axis=1)  # (R, |A|): H(X_i | x_U)
        out["pass"].append(np.full(len(mass), t + 1))
        out["size"].append(np.full(len(mass), len(A)))
        out["mass"].append(np.asarray(mass, np.float64))
        out["total_correlation"].append(np.maximum(sites_h.sum(axis=1) - entropies(law), 0.0))
        out["charge"].append(sites_h.sum(axis=1) - sites_h.max(axis=1))

    exact_law(model, rule, on_batch=record)
    return {k: np.concatenate(v) for k, v in out.items()}


# --- The same decoder as a sampler ---------------------------------------------------------------


class UnmaskState(NamedTuple):
    """A decode in progress: ``x`` (n,) int8, 0 where masked, else -1/+1; ``passes`` () int32 run."""

    x: jax.Array
    passes: jax.Array


class Unmasker(NamedTuple):
    """BlackJAX-style: ``init() -> UnmaskState`` (all masked); ``step(key, state) -> (state, chosen)``
    one pass (a no-op once nothing is masked). ``rule`` the :class:`~gmlm_lib.core.unmasking.Rule` it applies."""

    rule: Rule
    init: Callable
    step: Callable


def sampler(model: IsingModel, rule: Rule) -> Unmasker:
    """The decoder of :func:`exact_law` as pure functions: each pass computes ``P(x_i = +1 | x_U)`` for
    every masked ``i`` by summing the model's law over the states that agree with ``x_U`` (so
    ``n <=`` :data:`gmlm_lib.ising.model.MAX_EXACT_N`), applies ``rule.select`` and draws the chosen
    positions independently."""
    ising.check_model(model)
    n = model.n
    if rule.n != n:
        raise ValueError(f"rule is for n = {rule.n} positions but the model has n = {n}: build it with n = {n}.")
    with np.errstate(divide="ignore"):  # a state of probability 0 has log-probability -inf, as jnp.log gives
        logp = jax.device_put(np.log(np.asarray(ising.probabilities(model))))  # on the host: no program
    fn, args = selection(rule)

    def init() -> UnmaskState:
        return UnmaskState(jnp.zeros(n, jnp.int8), jnp.int32(0))

    def step(key, state: UnmaskState):
        return _unmask_step(fn, args, logp, key, state)

    return Unmasker(rule, init, step)


def _unmask_step(fn, args, logp, key, state: UnmaskState):
    """One pass of :func:`sampler`'s decoder with the model's log-law ``logp`` (2^n,) and the rule's
    selection ``fn(*args, ...)`` (:func:`gmlm_lib.core.unmasking.selection`). Returns (state, chosen)."""
    n = state.x.shape[0]
    states = ising.states_from_index(jnp.arange(2**n), n)
    masked = state.x == 0
    agree = jnp.all((states == state.x[None]) | masked[None], axis=1)
    lw = jnp.where(agree, logp, -jnp.inf)
    up = jax.nn.logsumexp(jnp.where(states > 0, lw[:, None], -jnp.inf), axis=0)
    p_up = jnp.exp(up - jax.nn.logsumexp(lw))
    conf, ent = site_statistics(p_up)
    k_select, k_draw = jax.random.split(key)
    chosen = fn(*args, conf, ent, masked, state.passes, k_select) & masked
    draw = jnp.where(jax.random.uniform(k_draw, (n,), dtype=p_up.dtype) < p_up, 1, -1).astype(jnp.int8)
    active = jnp.any(masked)
    x = jnp.where(chosen & active, draw, state.x)
    return UnmaskState(x, state.passes + active.astype(jnp.int32)), chosen


def sample(key: jax.Array, model: IsingModel, rule: Rule, num_samples: int) -> tuple[jax.Array, jax.Array]:
    """``num_samples`` independent decodes: outputs (num_samples, n) int8 and passes (num_samples,).
    One compiled program per selection function, model size and sample count: the model and a rule's
    real parameter are operands."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1; got {num_samples!r}.")
    sampler(model, rule)  # checks the model and the rule
    fn, args = selection(rule)
    return _decodes(fn, args, jnp.log(ising.probabilities(model)), jax.random.split(key, int(num_samples)))


@partial(jax.jit, static_argnums=0)
def _decodes(fn, args, logp, keys):
    n = int(round(math.log2(logp.shape[0])))

    def one(k):
        def body(state, kt):
            return _unmask_step(fn, args, logp, kt, state)[0], None

        state, _ = jax.lax.scan(body, UnmaskState(jnp.zeros(n, jnp.int8), jnp.int32(0)), jax.random.split(k, n))
        return state.x, state.passes

    # in batches of 1024 decodes: a pass holds a (2^n, n) table per decode
    return jax.lax.map(one, keys, batch_size=1024)


def chi_square_check(outputs, law, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson's chi-square test of decoded ``outputs`` (S, n) in {-1, +1} against an exact ``law``
    (2^n,): states whose expected count is below ``min_expected`` are pooled into one cell, so the
    test's chi-square approximation holds. Returns ``(statistic, degrees of freedom, p-value)``;
    a small p-value says the decoder does not sample ``law``."""
    import scipy.stats

    law = np.asarray(law, dtype=np.float64)
    idx = np.asarray(ising.index_from_states(jnp.asarray(outputs)))
    num = idx.shape[0]
    if num < 1 or law.ndim != 1 or not np.isclose(law.sum(), 1.0, atol=1e-9):
        raise ValueError(f"outputs must hold at least one decode and law must be a probability vector; got "
                         f"{num} decodes and a law summing to {law.sum():.6g}.")
    counts = np.bincount(idx, minlength=law.shape[0]).astype(np.float64)
    expected = law * num
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    stat, p = scipy.stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum())
    return float(stat), int(keep.sum() - 1), float(p)


# --- Li and Cai's bound ---------------------------------------------------------------------------


def _entropy(p: np.ndarray) -> float:
    p = p.reshape(-1)
    return float(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)))


def mutual_information_sum(model: IsingModel) -> float:
    """``sum_i I(X_i; X_{-i})`` in nats under the model's law, exactly: ``H(X_i) + H(X_{-i}) - H(X)``
    for each site. The information quantity of Li and Cai's Theorem 1 (arXiv 2505.21400)."""
    require_x64("gmlm_lib.ising.unmasking.mutual_information_sum")
    joint = _joint(model)
    n, h = model.n, _entropy(joint)
    total = 0.0
    for i in range(n):
        rest = tuple(j for j in range(n) if j != i)
        total += _entropy(joint.sum(axis=rest)) + (_entropy(joint.sum(axis=i)) if n > 1 else 0.0) - h
    return total


def li_cai_rhs(model: IsingModel, s_max: int) -> float:
    """The right-hand side of Li and Cai's Theorem 1 (arXiv 2505.21400, v1) with an exact mask
    predictor (training error 0): ``(2^ceil(log2 s_max) - 1) / n * sum_i I(X_i; X_{-i})``, ``s_max``
    the largest number of positions unmasked in one pass. For two positions unmasked together it
    equals ``I(X_1; X_2)``, the exact error: the bound is tight there."""
    if isinstance(s_max, bool) or not isinstance(s_max, (int, np.integer)) or not 1 <= s_max <= model.n:
        raise ValueError(f"s_max must be an integer in [1, n = {model.n}]; got {s_max!r}.")
    return (2 ** math.ceil(math.log2(int(s_max))) - 1) / model.n * mutual_information_sum(model)


def li_cai_bound(model: IsingModel, rule: Rule) -> float:
    """:func:`li_cai_rhs` at the largest batch of a fixed size schedule. The theorem covers the
    ``random`` rule (masks drawn uniformly, sizes fixed in advance); ``top_k`` has the same sizes but
    chooses by confidence, outside its hypotheses. An adaptive rule's largest batch depends on the
    path: use ``li_cai_rhs(model, exact_law(model, rule).max_batch)``, also outside them."""
    if rule.counts is None:
        raise ValueError(f"li_cai_bound needs a fixed size schedule (rule 'random' or 'top_k'); {rule.label} is "
                         "adaptive: its largest batch depends on the path (use li_cai_rhs with exact_law's "
                         "max_batch).")
    return li_cai_rhs(model, max(rule.counts))


# --- The book's Ising families and frontiers ----------------------------------------------------


STRONG_FAMILIES = ("strong random", "clique", "ferromagnet")
"""The families of :func:`families` with strong couplings, where the issue's target compares rules."""


def families(key: jax.Array, n: int, *, weak: float = 0.1, strong: float = 1.0, field: float = 0.5,
             clique_J: float = 1.0, ferro_J: float = 0.25) -> dict[str, IsingModel]:
    """The Ising families of the book on ``n`` sites: ``independent`` (no couplings, fields
    ``N(0, field^2)``), ``weak random`` and ``strong random`` (``J_ij ~ N(0, weak^2)`` or
    ``N(0, strong^2)``, :func:`gmlm_lib.ising.model.random_model`), ``clique`` (Eq. 6: ``n // 2`` sites
    coupled by ``clique_J``, field 0.2 on every site) and ``ferromagnet`` (every pair coupled by
    ``ferro_J``, no field: two modes, all up and all down, once ``ferro_J (n - 1) > 1``)."""
    require_x64("gmlm_lib.ising.unmasking.families")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (the number of sites); got {n!r}.")
    k = rng.split(key, 3)
    return {
        "independent": ising.ising_model(np.zeros((n, n)), field * np.asarray(jax.random.normal(k[0], (n,)))),
        "weak random": ising.random_model(k[1], n, weak, field),
        "strong random": ising.random_model(k[2], n, strong, field),
        "clique": ising.clique_plus_independent(n, max(2, n // 2), clique_J, 0.2),
        "ferromagnet": ising.ising_model(ferro_J * (1 - np.eye(n)), np.zeros(n)),
    }


def envelope(passes, kl, budget: float) -> float:
    """The best exact KL a rule reaches within ``budget`` expected passes over its parameter values:
    ``min {kl_j : passes_j <= budget}`` (``inf`` if none fits). A step function, not an
    interpolation: a rule is only credited with a budget one of its settings meets."""
    passes, kl = np.asarray(passes, dtype=float), np.asarray(kl, dtype=float)
    fits = passes <= budget + 1e-9
    return float(kl[fits].min()) if fits.any() else math.inf
