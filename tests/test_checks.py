"""The one way the library checks its arguments (gmlm_lib.core.checks) at its public boundaries: a count
is never rounded or parsed, a range's ends are as stated, a mask is an array of booleans, a key a JAX
random key; and wrong values across the library refused by name, not guessed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gmlm_lib.core import checks
from gmlm_lib.ising import model as ising
from gmlm_lib.mt import decoding, metrics, seq2seq, vocab

KEY = jax.random.key(0)
MODEL = seq2seq.ModelConfig(vocab=40, causal=True, d_model=32, heads=4, enc_layers=1, dec_layers=1, d_ff=64, max_len=16)


@pytest.mark.parametrize("value, error, words", [
    (2.9, TypeError, "n must be an integer; got 2.9"),
    (3.0, TypeError, "never rounded"),
    ("3", TypeError, "got '3' (str)"),
    (True, TypeError, "n must be an integer"),
    (-1, ValueError, "n must be an integer >= 0; got -1"),
])
def test_a_count_is_never_rounded_or_parsed(value, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        checks.integer(value, "n", low=0)


def test_counts_numbers_and_masks_that_are_right_pass_unchanged():
    assert checks.integer(np.int64(3), "n", low=0) == 3 and type(checks.integer(np.int64(3), "n")) is int
    assert checks.integer(np.array(4), "n") == 4
    assert checks.real(1, "x", low=0.0) == 1.0 and checks.real(np.float32(0.5), "x", high=1.0) == 0.5
    np.testing.assert_array_equal(checks.mask(np.array([0, 1, 1]), "m", (3,)), [False, True, True])
    np.testing.assert_array_equal(checks.mask([True, False], "m", (None,)), [True, False])
    assert checks.key(KEY) is KEY and checks.key(jax.random.PRNGKey(0)).shape == (2,)


@pytest.mark.parametrize("kw, words", [
    (dict(low=0.0, low_open=True), r"rate must be a finite number > 0; got 0.0"),
    (dict(high=0.0, high_open=True), r"rate must be a finite number < 0; got 0.0"),
    (dict(low=0.0, high=0.0, low_open=True), r"rate must be a finite number in \(0, 0\]; got 0.0"),
])
def test_an_open_end_of_a_range_is_refused(kw, words):
    with pytest.raises(ValueError, match=words):
        checks.real(0.0, "rate", **kw)


def test_each_end_of_a_range_is_in_it_unless_it_is_open():
    assert [checks.integer(v, "n", low=1, high=4) for v in (1, 4)] == [1, 4]
    for v in (0, 5):
        with pytest.raises(ValueError, match=rf"n must be an integer in \[1, 4\]; got {v}"):
            checks.integer(v, "n", low=1, high=4)
    with pytest.raises(ValueError, match="n must be an integer <= 4; got 5"):
        checks.integer(5, "n", high=4)
    assert checks.real(0.0, "x", low=0.0, high=1.0) == 0.0 and checks.real(1.0, "x", low=0.0, high=1.0) == 1.0
    assert checks.real(1e-12, "x", low=0.0, low_open=True) == 1e-12
    assert checks.real(1.0 - 1e-12, "x", high=1.0, high_open=True) == 1.0 - 1e-12
    with pytest.raises(ValueError, match=r"x must be a finite number < 1; got 1.0"):
        checks.real(1.0, "x", high=1.0, high_open=True)
    with pytest.raises(ValueError, match=r"x must be a finite number in \[0, 1\); got 1.0"):
        checks.real(1.0, "x", low=0.0, high=1.0, high_open=True)


def test_a_number_in_a_0d_array_is_a_number_and_a_longer_array_is_not():
    assert checks.real(np.array(0.5), "x") == 0.5 and type(checks.real(jnp.array(0.25), "x")) is float
    assert checks.integer(jnp.array(3), "n") == 3
    for value in (np.array([0.5]), np.zeros((1, 1))):
        with pytest.raises(TypeError, match="x must be a number"):
            checks.real(value, "x")
    with pytest.raises(TypeError, match="n must be an integer"):
        checks.integer(np.array([3]), "n")


@pytest.mark.parametrize("value", [None, "1 0 1"])
def test_a_mask_is_an_array_not_nothing_or_words(value):
    with pytest.raises(TypeError, match=rf"m must be a boolean array; got {type(value).__name__}"):
        checks.mask(value, "m")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "0.5", True])
def test_a_number_is_finite_and_a_number(value):
    with pytest.raises((TypeError, ValueError), match="rate must be"):
        checks.real(value, "rate", low=0.0, high=1.0)


def test_a_mask_of_words_or_objects_is_refused_by_its_dtype():
    for value in (np.array(["1", "0"]), np.array([True, None], dtype=object)):
        with pytest.raises(TypeError, match=rf"m must be a boolean array \(or 0/1 numbers\); got dtype {value.dtype}"):
            checks.mask(value, "m")


def test_a_mask_of_one_half_is_not_read_as_true():
    with pytest.raises(ValueError, match=r"m must be a boolean mask.*1 other entries \(e.g. 0.5\)"):
        checks.mask(np.array([0.5, 0.0]), "m")
    with pytest.raises(ValueError, match=r"m must have shape \(3,\) \(sites\); got \(2,\)"):
        checks.mask(np.array([True, False]), "m", (3,), what="(sites)")

    @jax.jit
    def traced(m):
        return checks.mask(m, "m")

    with pytest.raises(TypeError, match="boolean array inside jit"):
        traced(jnp.array([1.0, 0.0]))
    assert traced(jnp.array([True, False])).dtype == bool


@pytest.mark.parametrize("value", [0, "key", np.zeros(3, np.uint32), None])
def test_a_key_is_a_jax_random_key(value):
    with pytest.raises(TypeError, match=r"key must be a jax.random key, e.g. jax.random.key\(0\)"):
        checks.key(value)


@pytest.mark.parametrize("call, error, words", [
    (lambda: ising.ising_model([["0", "1"], ["1", "0"]], [0, 0]), TypeError, "J must hold numbers"),
    (lambda: ising.random_model(0, 3, 0.1, 0.1), TypeError, "key must be a jax.random key"),
    (lambda: metrics.bleu(["a"], ["a"], tokenize="nope"), ValueError, "bleu(tokenize=...) must be one of"),
    (lambda: metrics.words(None), TypeError, "words(text) needs one sentence as a string"),
    (lambda: seq2seq.build(MODEL, 2.5), TypeError, "seed must be an integer; got 2.5"),
    (lambda: seq2seq.ModelConfig(vocab=40.5, causal=True), TypeError, "ModelConfig.vocab must be an integer"),
    (lambda: seq2seq.ModelConfig(vocab=40, causal=True, d_model="32"), TypeError, "ModelConfig.d_model must be an integer"),
    (lambda: seq2seq.ModelConfig(vocab=40, causal="yes"), TypeError, "ModelConfig.causal must be True or False"),
    (lambda: vocab.train([None, "a b"]), TypeError, "item 0 is NoneType"),
])
def test_a_fresh_battery_of_wrong_values_is_refused(call, error, words):
    """Calls of the same kinds as the issue's, on functions it did not name."""
    with jax.enable_x64(True):
        with pytest.raises(error) as err:
            call()
    assert words in str(err.value)


def test_counts_as_numpy_integers_are_counts():
    assert decoding.StrategyOptions("threshold", steps=np.int64(3)).steps == 3
    assert type(decoding.StrategyOptions("threshold", steps=np.int64(3)).steps) is int
