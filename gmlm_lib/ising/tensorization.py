"""Block approximate tensorization of entropy [Definition 9] and the key step of Theorem 4.

For a model ``p`` and a fixed mask distribution ``w``, and any law ``q`` on ``{-1,+1}^n``:

    D_w(q || p) = E_{x~q} E_{S~w} KL( q(.|x_{-S}) || p(.|x_{-S}) )
                = sum_S w(S) [ KL(q || p) - KL(q_{-S} || p_{-S}) ]      (chain rule of KL),

with ``q_{-S}`` the marginal of ``x_{-S}``. ``C_AT`` is the smallest constant with
``KL(q || p) <= C_AT D_w(q || p)`` for every ``q``, so every ``q`` gives a lower bound
``KL / D <= C_AT`` (:func:`lower_bound` maximises it by gradient ascent on the logits of ``q``)
and two computable sandwiches hold:

* ``C_P <= C_AT`` (take ``q = p (1 + eps f)`` with ``f`` the slowest mode; ``eps -> 0``);
* ``C_AT <= C_LS <= C_P log(1/p_min - 1) / (1 - 2 p_min)`` (:func:`upper_bound`): for the
  heat-bath block dynamics, ``Var(sqrt f | x_{-S}) <= Ent(f | x_{-S})`` turns the log-Sobolev
  inequality into block tensorization, and Diaconis & Saloff-Coste (1996, Thm. A.1) bound the
  log-Sobolev constant by the spectral gap.

With ``q = p*`` and ``p = p_theta``, ``D_w(p* || p_theta) = L(theta) - L(theta*)``, the excess
population k-pseudolikelihood loss, so ``KL(p* || p_theta) <= C_AT(p_theta) (L(theta) - L(theta*))``:
the key step of Theorem 4. Exact sums over all states: n <= :data:`MAX_N`.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from gmlm_lib.core.precision import float64
from gmlm_lib.core.divergences import kl, tv  # noqa: F401  (tv: the laws' other distance, kept beside kl)
from gmlm_lib.ising import blocks, markov
from gmlm_lib.ising import model as ising
from gmlm_lib.ising.masks import MaskDistribution
from gmlm_lib.ising.model import IsingModel

MAX_N = 10
"""Largest n for the exact tensorization quantities (sums over 2^n states and every mask)."""


def _check(model: IsingModel, dist: MaskDistribution) -> None:
    ising.check_model(model)
    blocks.check_exact_blocks(model.n, MAX_N)
    if dist.is_adaptive:
        raise ValueError("Definition 9 is stated here for a fixed mask distribution w; got an adaptive one.")


def conditional_kl_fn(model_or_p, dist: MaskDistribution):
    """A function ``q (2^n,) -> (KL(q||p), D_w(q||p))`` for the model (or the law ``p`` (2^n,))
    [Definition 9]; it calls one compiled program per shape (:func:`conditional_kl`)."""
    if isinstance(model_or_p, IsingModel):
        n = model_or_p.n
        p = ising.probabilities(model_or_p)
    else:
        p = float64(model_or_p)
        n = int(round(math.log2(p.shape[0])))
    table = blocks.mask_table(dist, n)
    return lambda q: conditional_kl(p, table, float64(q))


def _conditional_kl(p, table: blocks.MaskTable, q):
    total = kl(q, p)
    segments = p.shape[0]

    def per_mask(ids):  # KL of the laws of x_{-S}: block sums, 2^n segments (unused ones are 0 under both)
        return kl(jax.ops.segment_sum(q, ids, num_segments=segments), jax.ops.segment_sum(p, ids, num_segments=segments))

    return total, total - jnp.sum(table.weights * jax.vmap(per_mask)(table.ids))


conditional_kl = jax.jit(_conditional_kl)
"""``(KL(q||p), D_w(q||p))`` for the law ``p`` (2^n,), a fixed ``w``'s :class:`~gmlm_lib.ising.blocks.MaskTable`
and a law ``q`` (2^n,) [Definition 9]; jitted, one program per shape."""


def ratio(model: IsingModel, dist: MaskDistribution, q: jax.Array) -> float:
    """``KL(q || p) / D_w(q || p)``: a lower bound on ``C_AT`` for any ``q != p`` [Definition 9]."""
    _check(model, dist)
    q = ising.check_state_function(q, model.n, "q")
    if bool(jnp.any(q < 0)) or abs(float(q.sum()) - 1.0) > 1e-9:
        raise ValueError(f"q must be a probability law over the 2^{model.n} states (non-negative, summing to 1); got "
                         f"min {float(q.min()):.3g}, sum {float(q.sum()):.12g}.")
    a, d = conditional_kl_fn(model, dist)(q)
    if float(d) == 0.0:
        raise ValueError("ratio: D_w(q || p) = 0, so q = p on every conditional the masks see; the ratio is defined "
                         "for q != p only.")
    return float(a / d)


class LowerBound(NamedTuple):
    """Result of :func:`lower_bound`: the best ratio found, its ``q`` (2^n,), every restart's final
    ratio (R,), and the Poincaré lower bound ``C_P`` (the ``q -> p`` limit) for comparison."""

    value: float
    q: jax.Array
    restarts: np.ndarray
    poincare: float


def lower_bound(key: jax.Array, model: IsingModel, dist: MaskDistribution, *, restarts: int = 32, steps: int = 400,
                learning_rate: float = 0.05, spread: float = 3.0) -> LowerBound:
    """Maximise ``KL(q||p) / D_w(q||p)`` over ``q = softmax(logits)`` by Adam, from ``restarts``
    starts ``log p + spread * N(0, 1) * r`` with ``r`` spread evenly over (0, 1] (near ``p`` and far).

    The result is a certified lower bound on ``C_AT`` (it is the ratio of an explicit ``q``), not
    an estimate of it; the slowest-mode limit ``C_P`` is returned beside it.
    """
    _check(model, dist)
    if restarts < 1 or steps < 0:
        raise ValueError(f"restarts must be >= 1 and steps >= 0; got restarts={restarts}, steps={steps}.")
    for name, value in (("learning_rate", learning_rate), ("spread", spread)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"{name} must be a finite number > 0; got {value!r}.")
    p = ising.probabilities(model)
    table = blocks.mask_table(dist, model.n)
    settings = jax.device_put((np.float64(learning_rate), np.float64(spread)))  # copied: jnp.asarray compiles a program
    values, qs = jax.device_get(_ascend(p, table, key, ising.log_weights(model), *settings, restarts=int(restarts),
                                        steps=int(steps)))
    best = int(np.argmax(values))
    return LowerBound(float(values[best]), jax.device_put(qs[best]), values,
                      markov.poincare_constant(model, dist, method="dense"))


@partial(jax.jit, static_argnames=("restarts", "steps"))
def _ascend(p, table, key, logp, learning_rate, spread, *, restarts: int, steps: int):
    """:func:`lower_bound`'s restarts, one program per model size, restart count and step count: the
    model, masks, learning rate and spread are operands. Returns every restart's ratio (-inf where it
    is not finite) and its ``q``."""
    scales = spread * jnp.linspace(1.0 / restarts, 1.0, restarts)
    init = logp + scales[:, None] * jax.random.normal(key, (restarts, logp.shape[0]), dtype=jnp.float64)
    opt = optax.adam(learning_rate)

    def neg_log_ratio(logits):
        a, d = _conditional_kl(p, table, jax.nn.softmax(logits))
        return jnp.log(d) - jnp.log(a)

    def run(logits):
        def body(carry, _):
            z, s = carry
            g = jax.grad(neg_log_ratio)(z)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            u, s = opt.update(g, s, z)
            return (optax.apply_updates(z, u), s), None

        (z, _), _ = jax.lax.scan(body, (logits, opt.init(logits)), None, length=steps)
        return z

    qs = jax.nn.softmax(jax.vmap(run)(init), axis=-1)
    vals = jax.vmap(lambda q: jnp.divide(*_conditional_kl(p, table, q)))(qs)
    return jnp.where(jnp.isfinite(vals), vals, -jnp.inf), qs


def upper_bound(model: IsingModel, dist: MaskDistribution) -> float:
    """``C_P log(1/p_min - 1) / (1 - 2 p_min)`` >= ``C_LS`` >= ``C_AT`` (see the module docstring);
    ``C_P`` by the dense eigensolver. ``inf`` when the chain's gap is not resolvable."""
    _check(model, dist)
    p_min = float(np.min(np.asarray(ising.probabilities(model))))
    cp = markov.poincare_constant(model, dist, method="dense")
    return cp * math.log(1.0 / p_min - 1.0) / (1.0 - 2.0 * p_min)


def excess_loss(truth: IsingModel, model: IsingModel, dist: MaskDistribution) -> tuple[float, float]:
    """``(KL(p* || p_theta), L(theta) - L(theta*))`` exactly, the latter the excess population
    pseudolikelihood loss under ``w`` (equal to ``D_w(p* || p_theta)``): the two sides of the key step
    of Theorem 4, ``KL <= C_AT (L(theta) - L(theta*))`` [Theorem 4; Proposition 1]."""
    _check(model, dist)
    a, d = conditional_kl_fn(model, dist)(ising.probabilities(truth))
    return float(a), float(d)
