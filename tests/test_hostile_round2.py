"""Nothing silent, round two (issue 48): values that used to be guessed or trained on are refused,
each refusal naming the argument and the fix."""

from __future__ import annotations

import subprocess
import sys

import jax
import numpy as np
import pytest

from gmlm_lib.core import divergences
from gmlm_lib.ising import model as ising
from gmlm_lib.ising import masks, mple, product, samplers, tensorization, transformer
from gmlm_lib.mt import metrics, seq2seq, training

MODEL = seq2seq.ModelConfig(vocab=40, causal=True, d_model=32, heads=4, enc_layers=1, dec_layers=1, d_ff=64, max_len=16)


def _cfg(**kw):
    return training.TrainConfig(**{**dict(kind="ar", model=MODEL, steps=6, warmup=1, batch_tokens=128, buckets=(8, 16)),
                                   **kw})


@pytest.mark.parametrize("field, value, error, words", [
    ("learning_rate", -1e-3, ValueError, "learning_rate must be a finite number > 0"),
    ("learning_rate", float("nan"), ValueError, "learning_rate"),
    ("clip_norm", -1.0, ValueError, "clip_norm must be a finite number > 0"),
    ("weight_decay", -0.1, ValueError, "weight_decay must be a finite number >= 0"),
    ("min_lr_ratio", 1.5, ValueError, "min_lr_ratio"),
    ("steps", 2.5, TypeError, "steps must be an integer; got 2.5"),
    ("batch_tokens", 2500.5, TypeError, "batch_tokens must be an integer"),
    ("warmup", True, TypeError, "warmup must be an integer"),
    ("seed", "0", TypeError, "seed must be an integer"),
])
def test_training_settings_that_would_train_wrongly_are_refused(field, value, error, words):
    with pytest.raises(error, match=words):
        _cfg(**{field: value})


@pytest.mark.parametrize("field, edge, beyond", [
    ("warmup", 0, -1), ("warmup", 5, 6),  # [0, steps): no warm-up is allowed, a warm-up as long as the run is not
    ("unmasking_rate", 0.0, -1e-9), ("unmasking_rate", 0.999, 1.0),
    ("label_smoothing", 0.0, -1e-9), ("label_smoothing", 0.999, 1.0),
])
def test_training_ranges_take_their_ends_as_stated(field, edge, beyond):
    """Each half-open range of TrainConfig at its ends: the value just inside is kept, the one just
    outside is refused naming the field and its range."""
    assert getattr(_cfg(**{field: edge}), field) == edge
    with pytest.raises(ValueError, match=rf"TrainConfig\.{field} must be in \["):
        _cfg(**{field: beyond})


def test_a_string_of_references_is_not_scored_character_by_character():
    with pytest.raises(TypeError, match="refs must be a list of strings"):
        metrics.bleu(["ab"], "ab")
    with pytest.raises(TypeError, match="hyps must be a list of strings"):
        metrics.chrf([1, 2], ["a", "b"])


@pytest.mark.parametrize("n", [0, -5, 2.5, True])
def test_paired_bootstrap_needs_a_count_of_resamples(n):
    with pytest.raises((TypeError, ValueError), match="n_samples"):
        metrics.paired_bootstrap([("a", ["x y"]), ("b", ["x z"])], ["x y"], n_samples=n)


def test_a_translator_refuses_a_vocabulary_of_another_size():
    from gmlm_lib.mt import translate

    class Vocab:
        size = 39

    with pytest.raises(ValueError, match="39 pieces but the model was built for 40"):
        translate.Translator(seq2seq.build(MODEL), Vocab())


@pytest.mark.parametrize("args, words", [
    (["-p", "n", "3", "-p", "n", "4"], "-p n given more than once"),
    (["-p", "n", "[6"], "-p n '[6': the value is read as YAML"),
])
def test_the_command_line_refuses_ambiguous_parameters(args, words):
    done = subprocess.run([sys.executable, "-m", "gmlm_lib.book", "run", "smoke", "gmlm_ising_testbed", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and words in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def _adaptive_pair():
    """An adaptive mask law on two sites (each site masked with probability 1/2 whatever the state)."""
    return masks.adaptive(masks.all_k_subsets(2, 1), lambda states: np.full((states.shape[0], 2), 0.5))


@pytest.mark.parametrize("call,words", [
    (lambda: divergences.kl(np.array([0.5, np.nan]), np.array([0.5, 0.5])), ["q must hold probabilities", "1 NaN"]),
    (lambda: divergences.kl(np.array([0.5, 0.5]), np.array([np.nan, 0.5])), ["p must hold probabilities"]),
    (lambda: divergences.tv(np.array([1.5, -0.5]), np.array([0.5, 0.5])), ["q must", "1 negative"]),
    (lambda: product.product_law(np.array([1.5, 0.2])), ["marginals", "[0, 1]", "1.5"]),
    (lambda: product.product_law(np.array([np.nan, 0.2])), ["marginals", "NaN"]),
    (lambda: samplers.stationary_law(np.array([[0.5, 0.7], [0.2, 0.2]])), ["stochastic", "row sums"]),
    (lambda: samplers.stationary_law(np.ones((2, 3)) / 3), ["square"]),
    (lambda: samplers.stationary_law(np.full(4, 0.25)), ["square"]),
    (lambda: samplers.stationary_law(np.array([[1.5, -0.5], [0.0, 1.0]])), ["stochastic", "smallest entry is -0.5"]),
    (lambda: samplers.stationary_law(np.array([[np.nan, 1.0], [0.5, 0.5]])), ["stochastic", "finite"]),
    (lambda: ising.enumerate_states(-1), ["n must be an integer >= 0"]),
    (lambda: ising.enumerate_states(2.5), ["n must be an integer", "never rounded"]),
    (lambda: ising.ising_model(1e200 * (1 - np.eye(3)), np.zeros(3)), ["too large", "Scale J and h down"]),
    (lambda: masks.all_k_subsets(26, 13), ["C(26, 13) = 10,400,600 subsets is too many to list", "uniform_k_subsets"]),
    (lambda: masks.from_weights(np.ones(3, bool), np.ones(1)), ["subsets must be a (M, n) boolean array", "(3,)"]),
    (lambda: masks.from_weights(np.array([[2, 0]]), np.ones(1)), ["subsets must be boolean masks (or 0/1)"]),
    (lambda: masks.check_distribution(masks.MaskDistribution(np.ones((1, 2), bool), np.ones((3, 1))), 2),
     ["adaptive weights must have 2^n = 4 rows; got 3"]),
    (lambda: ising.marginal(ising.curie_weiss(3, 0.5, 0.1), []), ["subset must name at least one site"]),
    (lambda: ising.marginal(ising.curie_weiss(3, 0.5, 0.1), [0, 3]), ["subset entries must lie in [0, 2]", "[0, 3]"]),
    (lambda: ising.marginal(ising.curie_weiss(3, 0.5, 0.1), [-1]), ["subset entries must lie in [0, 2]", "[-1]"]),
    (lambda: ising.marginal(ising.curie_weiss(3, 0.5, 0.1), [1, 1]), ["subset must not repeat a site", "[1, 1]"]),
    (lambda: mple.fit_repeats(jax.random.key(0), ising.curie_weiss(3, 0.5, 0.1), 10, 1, 1, max_iter=0),
     ["max_iter must be >= 1; got 0"]),
    (lambda: product.site_marginals(np.full(3, 1 / 3)), ["rows must be laws over 2^n states", "has 3 entries"]),
    (lambda: product.min_tv_pair(np.full(3, 1 / 3)), ["joint must be a law over the 4 states of a pair", "(3,)"]),
    (lambda: tensorization.upper_bound(ising.curie_weiss(2, 0.5, 0.1), _adaptive_pair()),
     ["Definition 9 is stated here for a fixed mask distribution w; got an adaptive one"]),
    (lambda: tensorization.lower_bound(jax.random.key(0), ising.curie_weiss(2, 0.5, 0.1), _adaptive_pair()),
     ["Definition 9 is stated here for a fixed mask distribution w; got an adaptive one"]),
    (lambda: tensorization.excess_loss(ising.curie_weiss(2, 0.5, 0.1), ising.curie_weiss(2, 0.4, 0.1),
                                       _adaptive_pair()),
     ["Definition 9 is stated here for a fixed mask distribution w; got an adaptive one"]),
    (lambda: tensorization.ratio(ising.curie_weiss(2, 0.5, 0.1), _adaptive_pair(), np.full(4, 0.25)),
     ["Definition 9 is stated here for a fixed mask distribution w; got an adaptive one"]),
    (lambda: transformer.Config(vocab=0, outputs=2, length=4), ["Config.vocab", ">= 1"]),
    (lambda: ising.clique_magnetisation_law(0, 0.5, 0.1), ["the clique must have at least one site: c = 0"]),
    (lambda: mple.fit_likelihood(np.ones((2, 21))), ["n = 21 is too large for exact enumeration"]),
])
def test_ising_side_wrong_numbers_are_refused(call, words):
    """A NaN law, a probability outside [0, 1], a matrix that is not stochastic, a negative n, couplings
    too large for float64, masks or laws of the wrong shape, an adaptive law where Definition 9 needs a
    fixed one and sizes past an exact sum's limit each give an error naming the argument, never a wrong number."""
    with jax.enable_x64(True):
        with pytest.raises((ValueError, TypeError)) as err:  # TypeError: a count given as a float
            call()
    for w in words:
        assert w in str(err.value)


def test_zero_sites_enumerate_the_one_empty_pattern():
    with jax.enable_x64(True):
        assert ising.enumerate_states(0).shape == (1, 0)


def test_large_but_exact_couplings_still_work():
    """|E| up to 1e6 keeps log-probabilities exact to about 1e-10: |J| = 1e3 on three sites is fine."""
    with jax.enable_x64(True):
        p = np.asarray(ising.probabilities(ising.ising_model(1e3 * (1 - np.eye(3)), np.zeros(3))))
    assert p.sum() == pytest.approx(1.0, abs=1e-12) and p[0] == pytest.approx(0.5) and p[-1] == pytest.approx(0.5)


def test_the_energy_limit_counts_couplings_and_fields_together():
    """The limit is on max |E(x)| = sum_{i<j} |J_ij| + sum |h_i| (reached at x = (+1, +1) here): a model at 1e6
    is built; one a unit above is refused, whether fields alone, couplings alone or both together pass it."""
    def model(coupling, fields):
        return ising.ising_model(coupling * (1 - np.eye(2)), np.asarray(fields, dtype=np.float64))

    with jax.enable_x64(True):
        at_limit = model(6e5, [2e5, 2e5])
        assert float(-ising.energy(at_limit, np.ones(2, np.int8))) == ising.MAX_ENERGY
        for over in ((6e5, [2e5, 2e5 + 1]), (0.0, [5e5, 5e5 + 1]), (1e6 + 1, [0.0, 0.0])):
            with pytest.raises(ValueError, match=r"\|E\(x\)\| can reach 1e\+06"):
                model(*over)


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_decoding_past_the_models_positions_is_refused(decode):
    """max_len beyond ModelConfig.max_len would read clamped position embeddings: refused, named."""
    import jax.numpy as jnp
    from flax import nnx

    from gmlm_lib.mt import decoding

    g, p = nnx.split(seq2seq.build(MODEL))
    src, sm = jnp.full((1, 4), 5, jnp.int32), jnp.ones((1, 4), bool)

    def run(max_len):
        if decode == "greedy":
            return decoding.ar_greedy(g, p, src, sm, max_len=max_len)
        return decoding.ar_beam(g, p, src, sm, max_len=max_len, beam=2)[0]

    for bad in (40, 17, 0, 2.0):
        with pytest.raises(ValueError, match=r"max_len must be an integer in \[1, 16\]"):
            run(bad)
    for edge in (1, 16):  # both ends of the range decode
        assert run(edge).shape == (1, edge)
