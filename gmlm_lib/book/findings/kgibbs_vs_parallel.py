"""The verdicts of the k-Gibbs chapter (``notebooks/kgibbs_vs_parallel.md``): the paper's Figure 3 on the
clique-plus-independent model [Eq. 6], and the samplers' throughput.

**Figure 3** [App. L.7] is qualitative: from the light mode, k-Gibbs "can often reach the larger mode
within a relatively small number of steps (though [...] larger J are slower to sample). Moreover, larger
k is faster than smaller k. By contrast, [...] the independent parallel sampler cannot reach [it] within
the compute budget". :func:`hitting` grades each of those four sentences on the chapter's table of
median hitting times (:data:`FIGURE3_CLAIMS`), in the form the theory gives them [Props. in Section
2.4.2, Apps. F-H]: for ``k >= c`` the scale ``C(n, k) / C(n - c, k - c)`` does not depend on J, so
"slower with J" is graded where a barrier is crossed (``k < c`` and independent parallel), and "stuck" at
the strongest coupling swept, clique size by clique size (the paper does not say which it ran, so the
verdict says where independent parallel is stuck and where it is not). Ties count as agreeing (medians
are whole steps); a median beyond the budget is larger than every finite one.

**Throughput**: the book's own target (the paper times no samplers): the JAX samplers at least
:data:`SPEED_BAR` times the per-chain NumPy loop. Where the independent parallel sampler misses it, the
chapter's "ceilings" (the fastest XLA programs measured that do only the step's arithmetic and random
words, or only its matrix product) say whether the step's bare work, as XLA compiles it on that machine,
already misses it (measurements of one program each, not bounds on every implementation).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from gmlm_lib.book.findings.rules import listed
from gmlm_lib.book.validate import ChapterParams, finite

__all__ = ["FIGURE3_CLAIMS", "IP", "SPEED_BAR", "Params", "benchmark", "first_flip", "gibbs_scale", "hitting",
           "parallel_scale", "parallel_table"]

IP = "independent parallel"
"""The ``sampler`` name of the independent parallel rows of a hitting table (k-Gibbs rows: ``"{k}-Gibbs"``)."""
FIGURE3_CLAIMS = {
    "fig3_reach": "k-Gibbs with k ≥ c reaches the heavy mode within its budget",
    "fig3_coupling": "slower as J grows where a barrier is crossed (k < c; independent parallel)",
    "fig3_k": "faster as k grows",
    "fig3_stuck": "independent parallel past its budget at the strongest coupling, for every clique size",
}
"""The four sentences of the paper's Figure 3 paragraph [App. L.7] that :func:`hitting` grades, by the
name of the glued verdict."""
_HIT_COLUMNS = ("c", "J", "sampler", "k", "median", "budget", "scale")


def gibbs_scale(n: int, k: int, c: int) -> float:
    """k-Gibbs' hitting scale from the light mode [Prop., App. F]: ``C(n, k) / C(n - c, k - c)``, the mean
    number of steps until a uniform k-subset holds the whole clique; NaN for ``k < c`` (no such scale)."""
    return math.comb(n, k) / math.comb(n - c, k - c) if k >= c else float("nan")


def parallel_scale(J: float, c: int, field: float) -> float:
    """Independent parallel's scale [Prop., App. G]: ``exp(2 (J (c - 1) - h))``, the inverse of the
    probability (up to a constant) that one clique site flips to +1 from the light mode."""
    return math.exp(2 * (J * (c - 1) - field))


def first_flip(J, c, field: float):
    """The exact mean number of independent parallel steps from the light mode to the first clique
    site turning +1: each of the ``c`` sites does so with ``q = sigmoid(-2 (J (c - 1) - h))`` per step,
    independently, so ``1 / (1 - (1 - q)^c)``. Scalars or arrays (broadcast)."""
    J, c = np.asarray(J, dtype=np.float64), np.asarray(c, dtype=np.float64)
    q = 1 / (1 + np.exp(2 * (J * (c - 1) - field)))
    return 1 / (1 - (1 - q) ** c)


SPEED_BAR = 20.0
"""The speed-up over the per-chain NumPy loop that the chapter grades against."""
_COLUMNS = ("n", "sampler", "dtype", "speedup_vs_loop", "speedup_vs_vectorised", "ceiling_vs_loop",
            "product_ceiling_vs_loop")


def _rounds(frame: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """The lowest and highest speed-up over the loop of each row across its timing rounds."""
    one = frame["speedup_vs_loop"]
    return frame.get("speedup_vs_loop_lo", one), frame.get("speedup_vs_loop_hi", one)


def _meets(frame: pd.DataFrame, unit: str = "") -> str:
    """How many rows reach the bar, "m of n": a row whose speed-up is at the bar in every timing round
    (``speedup_vs_loop_lo``, where the table has it; else its one speed-up); the rows whose rounds fall
    on both sides of the bar are counted apart, "(j more within timing noise)", neither met nor missed."""
    lo, hi = _rounds(frame)
    met, noise = int((lo >= SPEED_BAR).sum()), int(((lo < SPEED_BAR) & (hi >= SPEED_BAR)).sum())
    said = f"{met} of {len(frame)}" + (f" {unit}" if unit else "")
    return said + (f" ({noise} more within timing noise)" if noise else "")


def benchmark(speed: pd.DataFrame) -> dict:
    """``speed``: one row per (n, sampler, dtype) with the columns of ``_COLUMNS`` (speed-ups as ratios;
    the ceilings NaN for k-Gibbs). Returns ``speed_bar``; float64 ranges against the loop and the
    vectorised NumPy (``bench_min_loop`` ... ``bench_max_vec``); how many rows reach the bar
    (``bench_meets``, ``bench_meets32``, ``bench_kg_meets``, ``bench_ip_meets``, as "m of n", a row met when
    every timing round reaches it: optional columns ``speedup_vs_loop_lo`` and ``speedup_vs_loop_hi``, the
    range over rounds of :func:`gmlm_lib.ising.bench.throughput`; rows whose rounds straddle the bar are
    said apart as within timing noise); the
    independent parallel sampler's sizes below the bar (``bench_ip_missed``, "none" when it never misses)
    and whether its ceiling is below the bar at every one of them (``bench_ip_ceiling``: "below",
    "above", or "not needed"); and the (dtype, n) where even the matrix product alone is below the bar
    (``bench_ip_product_blocked``, "none"); the range of the independent parallel sampler's float64
    speed-ups over the loop (``bench_ip_lo``, ``bench_ip_hi``) and of its product ceilings over every
    size and precision (``bench_ip_product_lo``, ``bench_ip_product_hi``; NaN without such rows)."""
    missing = [c for c in _COLUMNS if c not in speed.columns]
    if missing:
        raise ValueError(f"the speed table lacks the columns {missing}.")
    f64, f32 = speed[speed.dtype == "float64"], speed[speed.dtype == "float32"]
    if f64.empty:
        raise ValueError("the speed table has no float64 rows: nothing to grade.")
    kg64, ip64 = f64[f64.sampler != "independent parallel"], f64[f64.sampler == "independent parallel"]
    miss = ip64[_rounds(ip64)[1] < SPEED_BAR]  # below the bar in every round
    ip_all = speed[speed.sampler == "independent parallel"]
    blocked = ip_all[ip_all.product_ceiling_vs_loop < SPEED_BAR]
    ceiling = ("not needed" if miss.empty else "below" if bool((miss.ceiling_vs_loop < SPEED_BAR).all())
               else "above")
    return dict(
        speed_bar=SPEED_BAR,
        bench_min_loop=float(f64.speedup_vs_loop.min()), bench_max_loop=float(f64.speedup_vs_loop.max()),
        bench_min_vec=float(f64.speedup_vs_vectorised.min()), bench_max_vec=float(f64.speedup_vs_vectorised.max()),
        bench_meets=_meets(f64), bench_meets32=_meets(f32), bench_kg_meets=_meets(kg64),
        bench_kg_min=float(kg64.speedup_vs_loop.min()) if len(kg64) else float("nan"),
        bench_ip_meets=_meets(ip64, "sizes"),
        bench_ip_share=f"{(ip64.speedup_vs_loop / ip64.ceiling_vs_loop).min():.0%}" if len(ip64) else "n/a",
        bench_ip_missed=listed([int(v) for v in miss.n]),
        bench_ip_ceiling=ceiling,
        bench_ip_product_blocked=listed([f"{r.dtype} at n = {r.n}" for r in blocked.itertuples()]),
        bench_ip_lo=float(ip64.speedup_vs_loop.min()) if len(ip64) else float("nan"),
        bench_ip_hi=float(ip64.speedup_vs_loop.max()) if len(ip64) else float("nan"),
        bench_ip_product_lo=float(ip_all.product_ceiling_vs_loop.min()) if len(ip_all) else float("nan"),
        bench_ip_product_hi=float(ip_all.product_ceiling_vs_loop.max()) if len(ip_all) else float("nan"),
    )


def _hit_table(hits: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in _HIT_COLUMNS if c not in hits.columns]
    if missing:
        raise ValueError(f"the hitting table lacks the columns {missing}.")
    if hits.empty or not (hits.sampler == IP).any() or (hits.sampler == IP).all():
        raise ValueError(f"the hitting table needs k-Gibbs rows and {IP!r} rows: nothing to grade.")
    med = hits["median"].to_numpy(dtype=np.float64)
    if np.isnan(med).any() or (med == -np.inf).any():
        raise ValueError("the hitting table has a NaN or -inf median: a median beyond the budget is +inf "
                         "(gmlm_lib.ising.samplers.median_hitting_time); a verdict is never drawn from a missing one.")
    return hits


def parallel_table(hits: pd.DataFrame, field: float) -> pd.DataFrame:
    """The independent parallel rows of ``hits`` with ``median / scale``, the exact mean time to the
    first clique flip (:func:`first_flip`) and ``median / first flip`` added."""
    return _parallel(_hit_table(hits), field)


def _parallel(hits: pd.DataFrame, field: float) -> pd.DataFrame:
    ip = hits[hits.sampler == IP].copy()
    ip["median / scale"] = ip["median"] / ip["scale"]
    ip["first flip"] = first_flip(ip.J.to_numpy(), ip.c.to_numpy(), field)
    ip["median / first flip"] = ip["median"] / ip["first flip"]
    return ip


def _monotone(frame: pd.DataFrame, groups: list[str], along: str, *, rising: bool) -> list[str]:
    """The groups of ``frame`` whose medians, in the order of ``along``, break the order (ties allowed)."""
    broken = []
    for key, d in frame.groupby(groups, sort=True):
        m = d.sort_values(along)["median"].to_numpy(dtype=np.float64)
        ok = np.all(m[1:] >= m[:-1]) if rising else np.all(m[1:] <= m[:-1])
        if not ok:
            key = key if isinstance(key, tuple) else (key,)
            broken.append(", ".join(f"{g} = {v}" for g, v in zip(groups, key)))
    return broken


def hitting(hits: pd.DataFrame, *, n: int, field: float) -> dict:
    """The hitting-time findings and the graded [Figure 3] (App. L.7) of a sweep over clique sizes ``c``
    and couplings ``J``. ``hits``: one row per (c, J, sampler) with ``c``, ``J``, ``sampler``
    (``"{k}-Gibbs"`` or :data:`IP`), ``k`` (any value for :data:`IP`), ``median`` (steps; ``inf``
    beyond the budget), ``budget`` and ``scale`` (:func:`gibbs_scale` / :func:`parallel_scale`).

    Returns the descriptive values (``kg_ratio_lo``/``hi``: median over scale for k >= c within the
    budget; ``kg_strong_lo``/``hi`` the same at the largest J; ``kg_censored``; ``kg_settings``;
    ``kn_median_max`` for k = n; ``small_k_stuck`` "m of N" k < c runs beyond the budget at the largest
    J; ``ip_scale`` / ``ip_flip`` per clique size; ``ip_couplings``; ``max_coupling``), the verdict of
    each sentence of :data:`FIGURE3_CLAIMS` ("met"/"missed", each with ``<name>_where``: the settings that
    break it, "none"), ``fig3_stuck_by_clique`` (the stuck claim graded at each clique size's strongest
    coupling, with the median where independent parallel escapes), ``fig3_reach_count`` ("m of N") and
    ``fig3_verdict``: "met" when all four are."""
    hits = _hit_table(hits)
    if isinstance(field, bool) or not isinstance(field, (int, float)) or not math.isfinite(field):
        raise ValueError(f"hitting(field=...) must be the clique sites' finite field h; got {field!r}.")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"hitting(n=...) must be the number of sites, an integer >= 1; got {n!r}.")
    kg_all = hits[hits.sampler != IP]
    kg = kg_all[kg_all.k >= kg_all.c]
    if kg.empty:
        raise ValueError("the hitting table has no k-Gibbs row with k >= c: Figure 3's first claim has nothing to grade.")
    ratio = (kg["median"] / kg["scale"]).to_numpy(dtype=np.float64)
    within = np.isfinite(ratio)
    top_J = max(hits.J)
    strong = ratio[(kg.J == top_J).to_numpy()]
    small = kg_all[(kg_all.k < kg_all.c) & (kg_all.J == top_J)]
    ip = _parallel(hits, field)
    cliques = sorted(set(hits.c))

    def per_clique(column):
        fmt = lambda v: "> budget" if not np.isfinite(v) else f"{v:.2g}"  # noqa: E731
        return "; ".join(f"c = {c}: " + ", ".join(fmt(v) for v in ip[ip.c == c].sort_values("J")[column])
                         for c in cliques)

    where = {
        "fig3_reach": [f"c = {r.c}, J = {r.J}, k = {r.k}" for r in kg[~within].itertuples()],
        "fig3_coupling": _monotone(kg_all[kg_all.k < kg_all.c], ["c", "k"], "J", rising=True)
                         + [f"{w}, independent parallel" for w in _monotone(ip, ["c"], "J", rising=True)],
        "fig3_k": _monotone(kg_all, ["c", "J"], "k", rising=False),
    }
    top_c = max(cliques)
    strongest = ip[ip.J == top_J].sort_values("c")
    escaped = strongest[np.isfinite(strongest["median"].to_numpy(dtype=np.float64))]
    where["fig3_stuck"] = [f"c = {r.c}, J = {top_J}" for r in escaped.itertuples()]
    by_clique = "; ".join(
        f"c = {r.c}: met (past its budget of {r.budget:,.0f} steps)" if not np.isfinite(r.median)
        else f"c = {r.c}: missed (reached in a median of {r.median:,.0f} steps, {r.median / r.scale:.2g}x its scale)"
        for r in strongest.itertuples())
    out = dict(
        kg_ratio_lo=float(np.min(ratio[within])) if within.any() else float("nan"),
        kg_ratio_hi=float(np.max(ratio[within])) if within.any() else float("nan"),
        kg_strong_lo=float(np.min(strong)), kg_strong_hi=float(np.max(strong)),
        kg_censored=int((~within).sum()), kg_settings=int(len(kg)),
        kn_median_max=float(kg_all[kg_all.k == n]["median"].max()),
        small_k_stuck=f"{int((~np.isfinite(small['median'])).sum())} of {len(small)}",
        max_coupling=float(top_J), max_clique=int(top_c),
        ip_scale=per_clique("median / scale"), ip_flip=per_clique("median / first flip"),
        ip_couplings=", ".join(str(float(J)) for J in sorted(set(ip.J))),
        fig3_reach_count=f"{int(within.sum())} of {len(kg)}",
        fig3_stuck_by_clique=by_clique,
    )
    for name, broken in where.items():
        out[name] = "missed" if broken else "met"
        out[f"{name}_where"] = "; ".join(broken) if broken else "none"
    out["fig3_verdict"] = "met" if all(out[name] == "met" for name in FIGURE3_CLAIMS) else "missed"
    return out


@dataclasses.dataclass(frozen=True)
class Params(ChapterParams):
    """The parameters of ``notebooks/kgibbs_vs_parallel.md`` (their meaning: its parameters cell), checked
    when built: the clique sizes fit in ``n`` sites, the budgets and chain counts are positive, ``field > 0``
    makes ``X_+`` the heavier mode [Eq. 6], and the benchmark's ``k`` fit in its smallest size."""

    def check(self) -> None:
        self.integer("n", 3)
        self.integers("cliques", 2, self.n, "clique sizes")
        self.numbers("couplings")
        self.need(finite(self.field) and self.field > 0, "field", "a finite number > 0 (it makes X_+ the heavier mode)")
        for name in ("chains", "gibbs_steps", "parallel_steps", "figure_steps", "bench_chains"):
            self.integer(name, 1)
        self.integer("figure_clique", 2, self.n, "a clique size")
        self.number("figure_coupling")
        self.integers("bench_sizes", 2)
        self.integers("bench_ks", 1, min(self.bench_sizes), "at most the smallest of bench_sizes")
        self.need(finite(self.bench_min_time) and self.bench_min_time > 0, "bench_min_time", "a number of seconds > 0")

    # the fields: the parameters cell's names in its order (seed and install_ref: ChapterParams)
    n: int
    cliques: list
    couplings: list
    field: float
    chains: int
    gibbs_steps: int
    parallel_steps: int
    figure_clique: int
    figure_coupling: float
    figure_steps: int
    bench_sizes: list
    bench_chains: int
    bench_ks: list
    bench_min_time: float
