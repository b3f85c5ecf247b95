"""Hostile calls of the library's public functions, each graded: the census of what a careless or hostile
caller meets (bad values, empty and degenerate input, extreme settings, broken files).

    PYTHONPATH=. python benchmarks/hostile_census.py              # the table and the counts
    PYTHONPATH=. python benchmarks/hostile_census.py --json census.json

Every call says what a good library does with it: ``refuse`` (raise an error whose message names the
argument the caller passed, from a list of acceptable names) or ``answer`` (return a finite value: the
input is extreme but valid). Each outcome is one of

- ``refused``: raised ``ValueError``, ``TypeError``, ``FileNotFoundError`` or ``RunFolderError`` naming an
  argument of the list;
- ``answered``: returned a value whose arrays are all finite, for a call that should answer;
- ``unclear``: raised, but the message names none of the arguments, or the exception is another
  library's (JAX, SentencePiece, Orbax, the operating system) not re-raised in the library's words;
- ``crashed``: raised an exception no caller can act on (``AttributeError``, ``IndexError``, ``KeyError``,
  ``ZeroDivisionError``, ``RuntimeError`` and the like);
- ``silently wrong``: returned a NaN or an infinity;
- ``silently accepted``: returned a value for a call that should have been refused.

Targets (issue 127): 0 silently wrong, 0 silently accepted, 0 crashed, at most 5 unclear. The script exits
with 1 when they are missed. It runs in about a minute on 2 CPU cores (tiny models, a 60-piece vocabulary).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import tempfile
import warnings
from collections import Counter

import jax
import numpy as np

from gmlm_lib.core import divergences, rng
from gmlm_lib.ising import fisher, markov, masks, mple, product, samplers, tensorization
from gmlm_lib.ising import model as ising
from gmlm_lib.mt import batching, config, corpus, decoding, metrics, runfolder, seq2seq, translate
from gmlm_lib.mt import vocab as V

CLEAR = (ValueError, TypeError, FileNotFoundError, runfolder.RunFolderError)
FOREIGN_MODULES = ("jax", "jaxlib", "sentencepiece", "orbax", "numpy", "optax", "flax")
TARGETS = {"silently wrong": 0, "silently accepted": 0, "crashed": 0, "unclear": 5}


@dataclasses.dataclass
class Probe:
    name: str
    call: object
    names: tuple[str, ...] = ()  # the arguments an error may name; empty: the call should answer

    @property
    def expect(self) -> str:
        return "refuse" if self.names else "answer"


def _finite(out) -> bool:
    leaves = [x for x in jax.tree.leaves(out) if isinstance(x, (int, float, np.ndarray, jax.Array, np.generic))]
    for x in leaves:
        if isinstance(x, jax.Array) and jax.numpy.issubdtype(x.dtype, jax.dtypes.prng_key):
            continue
        arr = np.asarray(x)
        if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
            return False
    return True


def grade(probe: Probe) -> tuple[str, str]:
    """``(outcome, detail)`` of one call."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = probe.call()
    except CLEAR as err:
        message = str(err)
        foreign = type(err).__module__.split(".")[0] in FOREIGN_MODULES
        named = any(name in message for name in probe.names)
        if probe.expect == "answer":
            return "unclear", f"refused a valid call: {type(err).__name__}: {message[:160]}"
        return ("refused" if named and not foreign else "unclear"), f"{type(err).__name__}: {message[:160]}"
    except Exception as err:  # noqa: BLE001 - the census grades every kind of failure
        foreign = type(err).__module__.split(".")[0] in FOREIGN_MODULES
        return ("unclear" if foreign else "crashed"), f"{type(err).__name__}: {str(err)[:160]}"
    if not _finite(out):
        return "silently wrong", repr(out)[:160]
    if probe.expect == "refuse":
        return "silently accepted", repr(out)[:160]
    return "answered", repr(out)[:160]


def ising_probes() -> list[Probe]:
    key = rng.key(0)
    m3 = ising.ising_model(np.zeros((3, 3)), np.zeros(3))
    h = np.zeros(3)
    x3 = np.ones((4, 3), np.int8)
    probes = []
    for bad in (np.inf, np.nan, 1e308):
        Jb = np.array([[0, bad, 0], [bad, 0, 0], [0, 0, 0.0]])
        probes.append(Probe(f"ising_model with J = {bad}", lambda Jb=Jb: ising.log_partition(ising.ising_model(Jb, h)),
                            ("J",)))
    probes += [
        # past |E| = 1e6 float64 log-probabilities lose their last digits: the exact numerics refuse
        Probe("log_partition, coupling 1e6", lambda: ising.log_partition(ising.clique_plus_independent(6, 3, 1e6, 0.0)),
              ("couplings",)),
        Probe("log_partition, coupling 1e4", lambda: ising.log_partition(ising.clique_plus_independent(6, 3, 1e4, 0.0))),
        Probe("log_partition, coupling 1e300", lambda: ising.log_partition(ising.clique_plus_independent(6, 3, 1e300, 0.0)),
              ("couplings",)),
        Probe("clique_plus_independent, NaN coupling", lambda: ising.clique_plus_independent(6, 3, float("nan"), 0.0),
              ("J",)),
        Probe("random_model, NaN scale", lambda: ising.random_model(key, 4, float("nan"), 0.1), ("coupling_scale", "scale")),
        Probe("random_model, string scale", lambda: ising.random_model(key, 4, "big", 0.1), ("coupling_scale", "scale")),
        Probe("random_model, n = 0", lambda: ising.random_model(key, 0, 1.0, 0.1), ("n",)),
        Probe("IsingModel, J not symmetric", lambda: ising.IsingModel(np.array([[0, 1.0], [0, 0]]), np.zeros(2)), ("J",)),
        Probe("IsingModel, h of the wrong length", lambda: ising.IsingModel(np.zeros((2, 2)), np.zeros(3)), ("h",)),
        Probe("asymptotic_covariance, strong couplings",
              lambda: fisher.asymptotic_covariance(ising.clique_plus_independent(4, 4, 40.0, 0.0), masks.uniform_k(4, 1)),
              ("singular", "Hessian", "coupling", "model")),
        Probe("negative_log_likelihood, empty sample", lambda: mple.negative_log_likelihood(m3, np.zeros((0, 3), np.int8)),
              ("x", "sample", "samples")),
        Probe("pseudolikelihood_loss, masks that mask nothing",
              lambda: mple.pseudolikelihood_loss(m3, x3, np.zeros((4, 3), bool)), ("mask",)),
        Probe("fit_likelihood, empty sample", lambda: mple.fit_likelihood(np.zeros((0, 3), np.int8)), ("x", "sample")),
        Probe("fit_pseudolikelihood, masks that mask nothing",
              lambda: mple.fit_pseudolikelihood(x3, np.zeros((4, 3), bool)), ("mask",)),
        Probe("fit_pseudolikelihood, masks of 0.5", lambda: mple.fit_pseudolikelihood(x3, np.full((4, 3), 0.5)), ("mask",)),
        Probe("fit_pseudolikelihood, l2 as text", lambda: mple.fit_pseudolikelihood(x3, np.ones((4, 3), bool), l2="0.1"),
              ("l2",)),
        Probe("fit_repeats, 0 repeats", lambda: mple.fit_repeats(key, m3, 10, 1, 0), ("repeats",)),
        Probe("fit_repeats, -1 samples", lambda: mple.fit_repeats(key, m3, -1, 1, 2), ("num_samples", "samples")),
        Probe("fit_repeats, k as text", lambda: mple.fit_repeats(key, m3, 10, "1", 2), ("k",)),
        Probe("median_hitting_time of no chains", lambda: samplers.median_hitting_time(np.zeros((0,), np.int32)),
              ("times", "hits", "chains")),
        Probe("MaskDistribution, weights summing to 1.5",
              lambda: masks.MaskDistribution(np.eye(3, dtype=bool), np.array([0.5, 0.5, 0.5])), ("weights",)),
        Probe("from_weights, weights summing to 1.5",
              lambda: masks.from_weights(np.eye(3, dtype=bool), np.array([0.5, 0.5, 0.5])), ("weights",)),
        Probe("uniform_k, k = 0", lambda: masks.uniform_k(3, 0), ("k",)),
        Probe("uniform_k, k > n", lambda: masks.uniform_k(3, 4), ("k",)),
        Probe("k_gibbs, k = 0", lambda: samplers.k_gibbs(m3, 0), ("k",)),
        Probe("k_gibbs, k as text", lambda: samplers.k_gibbs(m3, "2"), ("k",)),
        Probe("log_prob, a spin of 0", lambda: ising.log_prob(m3, np.array([0, 1, 1])), ("x",)),
        Probe("log_prob, a spin of 0.5", lambda: ising.log_prob(m3, np.array([0.5, 1, 1])), ("x",)),
        Probe("log_prob, too few sites", lambda: ising.log_prob(m3, np.array([1, 1])), ("x",)),
        Probe("energy, states of the wrong width", lambda: ising.energy(m3, np.ones((5, 4))), ("x",)),
        Probe("marginal, a site out of range", lambda: ising.marginal(m3, [0, 7]), ("subset", "sites")),
        Probe("marginal, sites as text", lambda: ising.marginal(m3, "01"), ("subset", "sites")),
        Probe("from_theta, the wrong length", lambda: ising.from_theta(np.zeros(5), 3), ("theta",)),
        Probe("sample, 0 draws", lambda: ising.sample(m3, key, 0)),
        Probe("sample, 1.5 draws", lambda: ising.sample(m3, key, 1.5), ("num_samples",)),
        Probe("curie_weiss, n = 0", lambda: ising.curie_weiss(0, 1.0, 0.0), ("n",)),
        Probe("clique_plus_independent, c > n", lambda: ising.clique_plus_independent(3, 5, 1.0, 0.0), ("c",)),
        Probe("enumerate_states, n = 40", lambda: ising.enumerate_states(40), ("n",)),
        Probe("kl, a negative probability", lambda: divergences.kl(np.array([1.5, -0.5]), np.array([0.5, 0.5])), ("q", "p")),
        Probe("kl, a NaN probability", lambda: divergences.kl(np.array([np.nan, 1.0]), np.array([0.5, 0.5])), ("q", "p")),
        Probe("tv, laws on different spaces", lambda: divergences.tv(np.array([1.0, 0.0]), np.array([0.5, 0.25, 0.25])),
              ("q", "p")),
        Probe("hessian, masks of another n", lambda: fisher.hessian(m3, masks.uniform_k(4, 1)), ("dist", "masks", "n")),
        Probe("hessian_per_mask, masks of another n", lambda: fisher.hessian_per_mask(m3, np.ones((2, 5), bool)),
              ("masks", "mask")),
        Probe("sandwich, shapes that disagree", lambda: fisher.sandwich(np.eye(3), np.eye(4)), ("H", "Sigma")),
        Probe("generalized_eigvals, shapes that disagree", lambda: fisher.generalized_eigvals(np.eye(3), np.eye(2)),
              ("A", "B")),
        Probe("second_eigenvalue, an unknown method",
              lambda: markov.second_eigenvalue(m3, masks.uniform_k(3, 1), method="qr"), ("method",)),
        Probe("product_law, a marginal above 1", lambda: product.product_law(np.array([1.5, 0.2, 0.3])), ("marginals",)),
        Probe("kl_floor, rows that are not laws", lambda: product.kl_floor(np.ones((3, 5))), ("rows",)),
        Probe("lower_bound, masks of another n", lambda: tensorization.lower_bound(key, m3, masks.uniform_k(4, 1)),
              ("dist", "n")),
        Probe("run_chains, starts of another n",
              lambda: samplers.run_chains(key, samplers.k_gibbs(m3, 1), np.ones((4, 5), np.int8), 10), ("x0",)),
        Probe("run_chains, 0 steps (the chains stay at x0, as documented)",
              lambda: samplers.run_chains(key, samplers.k_gibbs(m3, 1), x3, 0)),
        Probe("run_chains, -1 steps", lambda: samplers.run_chains(key, samplers.k_gibbs(m3, 1), x3, -1), ("num_steps",)),
        Probe("run_chains, thin not dividing the steps",
              lambda: samplers.run_chains(key, samplers.k_gibbs(m3, 1), x3, 10, thin=3), ("thin",)),
    ]
    return probes


def mt_probes(tmp: pathlib.Path) -> list[Probe]:
    texts = [f"a small dog runs on the green grass number {i}" for i in range(200)]
    voc = V.train(texts, size=60)
    cfg_ar = seq2seq.ModelConfig(vocab=voc.size, causal=True, d_model=32, heads=2, enc_layers=1, dec_layers=1, d_ff=32,
                                 max_len=16)
    cfg_p = dataclasses.replace(cfg_ar, causal=False)
    ar = translate.Translator(seq2seq.build(cfg_ar, 0), voc, buckets=(8, 16))
    pd = translate.Translator(seq2seq.build(cfg_p, 0), voc, buckets=(8, 16))
    greedy = translate.Method("greedy")
    padir = translate.Method("padir", padir=decoding.PadirOptions(steps=4))
    for name, content in (("blank", "\n\n\n"), ("nul", "a dog\x00\nthe cat\n"), ("short", "a\nb\n")):
        (tmp / f"{name}.en").write_text(content)
        (tmp / f"{name}.de").write_text(content if name != "short" else "a\n")
    tiny = config.get("multi30k_tiny")
    probes = [
        Probe("vocabulary of 5 pieces", lambda: V.train(texts, size=5), ("size",)),
        Probe("decode an id past the vocabulary", lambda: voc.decode([[10**6]]), ("id", "ids")),
        Probe("translate an empty sentence (AR)", lambda: ar.translate([""], greedy), ("texts", "sentence", "empty")),
        Probe("translate an empty sentence (PaDIR)", lambda: pd.translate([""], padir), ("texts", "sentence", "empty")),
        Probe("translate a sentence with a NUL byte", lambda: ar.translate(["a dog\x00runs"], greedy), ("texts", "NUL")),
        Probe("translate a string, not a list", lambda: ar.translate("a dog", greedy), ("texts",)),
        Probe("Translator with no buckets", lambda: translate.Translator(seq2seq.build(cfg_ar, 0), voc, buckets=()),
              ("buckets",)),
        Probe("beam of 0", lambda: ar.translate(["a dog"], translate.Method("beam", beam=0)), ("beam",)),
        Probe("1000 length hypotheses",
              lambda: pd.translate(["a dog"], translate.Method("padir", padir=decoding.PadirOptions(steps=4, hyps=1000))),
              ("hyps",)),
        Probe("PadirOptions, T as text", lambda: decoding.PadirOptions(steps="four"), ("steps",)),
        Probe("StrategyOptions, an unknown strategy", lambda: decoding.StrategyOptions("fastest"), ("name",)),
        Probe("StrategyOptions, a DUS block of 3", lambda: decoding.StrategyOptions("dilated", block=3), ("block",)),
        Probe("decode_ids, a source of length 0", lambda: pd.decode_ids(np.zeros((1, 0), np.int32), padir), ("src", "source")),
        Probe("decode_ids, an all-padding source", lambda: pd.decode_ids(np.zeros((1, 8), np.int32), padir),
              ("src", "source")),
        Probe("padir_ids, no widths", lambda: decoding.padir_ids(pd.graphdef, pd.params, np.ones((1, 8), np.int32), None,
                                                                 rng.key(0), options=decoding.PadirOptions(),
                                                                 widths=()), ("widths",)),
        Probe("corpus of blank lines", lambda: corpus.load_parallel(tmp / "blank.en", tmp / "blank.de"), ("blank", "empty")),
        Probe("corpus with a NUL byte", lambda: corpus.load_parallel(tmp / "nul.en", tmp / "nul.de"), ("NUL",)),
        Probe("corpus files of unequal length", lambda: corpus.load_parallel(tmp / "short.en", tmp / "short.de"),
              ("short.en", "short.de")),
        Probe("a corpus file that does not exist", lambda: corpus.read_lines(tmp / "none.txt"), ("none.txt",)),
        Probe("BLEU of no sentences", lambda: metrics.bleu([], []), ("hyps", "refs")),
        Probe("BLEU, unequal lists", lambda: metrics.bleu(["a b"], ["a b", "c"]), ("hyps", "refs")),
        Probe("chrF of empty sentences", lambda: metrics.chrf([""], [""])),
        Probe("pad, rows longer than the length", lambda: batching.pad([[5, 6, 7]], 2), ("length",)),
        Probe("pad, a negative length", lambda: batching.pad([[5]], -1), ("length",)),
        # /sys: a folder no process may write, not even root's (permission bits do not stop root)
        Probe("a run folder's lock where nothing can be written",
              lambda: runfolder.exclusive(pathlib.Path("/sys")).__enter__(), ("/sys",)),
        Probe("Experiment, 0 seeds", lambda: dataclasses.replace(tiny, seeds=0), ("seeds",)),
        Probe("Experiment, beam as text", lambda: dataclasses.replace(tiny, beam="4"), ("beam",)),
        Probe("ModelConfig, an unknown dropout generator",
              lambda: dataclasses.replace(cfg_ar, dropout_rng="philox"), ("dropout_rng",)),
        Probe("key from a seed as text", lambda: rng.key("7"), ("seed",)),
    ]
    return probes


#: values no count accepts, and values no finite setting accepts (each sweep adds those its argument refuses too)
BAD_COUNTS = (-1, 1.5, "3", None, True, float("nan"))
BAD_REALS = (float("nan"), float("inf"), "0.1", None, True)


def argument_sweeps(tmp: pathlib.Path) -> list[Probe]:
    """Every hostile value of :data:`BAD_COUNTS` or :data:`BAD_REALS` (and the argument's own invalid ones) in
    one argument of a public function at a time, the others valid: each must be refused by that argument's name."""
    key = rng.key(0)
    m3 = ising.ising_model(np.zeros((3, 3)), np.zeros(3))
    x3 = np.ones((4, 3), np.int8)
    texts = [f"a small dog runs on the green grass number {i}" for i in range(200)]
    counts = {  # name -> (call with the value, extra invalid values)
        "n": (lambda v: ising.random_model(key, v, 1.0, 0.1), (0,)),
        "c": (lambda v: ising.clique_plus_independent(6, v, 1.0, 0.0), (0, 7)),
        "num_samples": (lambda v: ising.sample(m3, key, v), ()),
        "k": (lambda v: samplers.k_gibbs(m3, v), (0, 4)),
        "num_steps": (lambda v: samplers.run_chains(key, samplers.k_gibbs(m3, 1), x3, v), ()),
        "thin": (lambda v: samplers.run_chains(key, samplers.k_gibbs(m3, 1), x3, 4, thin=v), (0,)),
        "repeats": (lambda v: mple.fit_repeats(key, m3, 10, 1, v), (0,)),
        "max_iter": (lambda v: mple.fit_pseudolikelihood(x3, np.ones((4, 3), bool), max_iter=v), (0,)),
        "steps": (lambda v: decoding.PadirOptions(steps=v), (0,)),
        "hyps": (lambda v: decoding.PadirOptions(hyps=v), (0,)),
        "block": (lambda v: decoding.StrategyOptions("dilated", block=v), (0, 3)),
        "beam": (lambda v: translate.Method("beam", beam=v), (0,)),
        "size": (lambda v: V.train(texts, size=v), (0, 5)),
        "length": (lambda v: batching.pad([[5]], v), ()),
        "seed": (lambda v: rng.key(v), ()),  # a negative seed is JAX's too (jax.random.key(-1)): not swept
        "count": (lambda v: rng.keys(0, v), (0,)),
        "resamples": (lambda v: metrics.resample_index(5, v, key), (0,)),
        "seeds": (lambda v: config.get("multi30k_tiny", {"seeds": v}), (0,)),
        "ar_steps": (lambda v: config.get("multi30k_tiny", {"ar_steps": v}), (0,)),
    }
    reals = {
        "coupling_scale": (lambda v: ising.random_model(key, 4, v, 0.1), (-1.0,)),
        "field_scale": (lambda v: ising.random_model(key, 4, 1.0, v), (-1.0,)),
        "l2": (lambda v: mple.fit_pseudolikelihood(x3, np.ones((4, 3), bool), l2=v), (-1.0,)),
        "tol": (lambda v: mple.fit_pseudolikelihood(x3, np.ones((4, 3), bool), tol=v), (-1.0, 0.0)),
        "confidence": (lambda v: decoding.StrategyOptions("threshold", confidence=v), (-0.1, 1.5)),
        "factor": (lambda v: decoding.StrategyOptions("factor", factor=v), (0.0, -1.0)),
        "entropy": (lambda v: decoding.StrategyOptions("entropy", entropy=v), (0.0, -1.0)),
        # a setting's text is read by one documented rule (YAML 1.1 leaves "1e-3" a string): "0.1" is 0.1, not swept
        "learning_rate": (lambda v: config.get("multi30k_tiny", {"learning_rate": v}), (0.0, -1.0)),
        "dropout": (lambda v: config.get("multi30k_tiny", {"dropout": v}), (-0.1, 1.0)),
    }
    valid = {("seed", -1), ("learning_rate", "0.1"), ("dropout", "0.1")}  # the documented cases above
    probes = []
    for bad, table in ((BAD_COUNTS, counts), (BAD_REALS, reals)):
        for name, (call, own) in table.items():
            for value in bad + own:
                if (name, value) in valid:
                    continue
                probes.append(Probe(f"{name} = {value!r}", lambda call=call, value=value: call(value), (name,)))
    return probes


def census() -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        probes = ising_probes() + mt_probes(pathlib.Path(tmp)) + argument_sweeps(pathlib.Path(tmp))
        for probe in probes:
            outcome, detail = grade(probe)
            rows.append(dict(call=probe.name, expect=probe.expect, outcome=outcome, detail=detail))
    return rows


def missed(counts: Counter) -> dict:
    """The targets a census's counts miss: ``{outcome: (count, most allowed)}``."""
    return {k: (counts.get(k, 0), most) for k, most in TARGETS.items() if counts.get(k, 0) > most}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows and counts here")
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)  # the exact numerics are float64 (a script may set it; a module never)
    rows = census()
    for row in rows:
        print(f"{row['outcome']:18s} {row['call']:48s} {row['detail']}")
    counts = Counter(row["outcome"] for row in rows)
    print(f"{len(rows)} calls: " + ", ".join(f"{n} {k}" for k, n in counts.most_common()))
    bad = missed(counts)
    for k, (n, most) in bad.items():
        print(f"missed: {n} {k}, at most {most} allowed", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(dict(rows=rows, counts=dict(counts), missed=bad), indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
