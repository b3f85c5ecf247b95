"""gmlm_lib.core.rng: JAX's keys from Python integers, each operation one program per process."""

import jax
import numpy as np
import pytest

from gmlm_lib.core import rng, timing


def _data(k):
    return np.asarray(jax.random.key_data(k))


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31 - 1, 2**31, 2**32 - 1])
def test_keys_equal_jax_random_for_every_32_bit_seed(seed):
    np.testing.assert_array_equal(_data(rng.key(seed)), _data(jax.random.key(seed)))
    folded = rng.fold_in(jax.random.key(seed), 5)
    np.testing.assert_array_equal(_data(folded), _data(jax.random.fold_in(jax.random.key(seed), 5)))


def test_a_batch_of_keys_is_the_keys_of_consecutive_seeds_and_folds_each():
    batch = rng.keys(40, 3)
    assert batch.shape == (3,)
    for i in range(3):
        np.testing.assert_array_equal(_data(batch[i]), _data(jax.random.key(40 + i)))
        want = jax.random.fold_in(jax.random.key(40 + i), 9)
        np.testing.assert_array_equal(_data(rng.fold_in(batch, 9)[i]), _data(want))


def test_seeds_outside_32_bits_and_legacy_keys_take_jax_s_own_path():
    for seed in (-1, 2**32, 2**40):
        np.testing.assert_array_equal(_data(rng.key(seed)), _data(jax.random.key(seed)))
    np.testing.assert_array_equal(_data(rng.keys(2**32 - 1, 2)[1]), _data(jax.random.key(2**32)))
    legacy = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(np.asarray(rng.fold_in(legacy, 2)), np.asarray(jax.random.fold_in(legacy, 2)))


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="seed"):
        rng.key(1.0)
    with pytest.raises(ValueError, match="count"):
        rng.keys(0, 0)
    with pytest.raises(ValueError, match="data.*unsigned 32-bit"):
        rng.fold_in(jax.random.key(0), -1)
    with pytest.raises(TypeError, match="key"):
        rng.fold_in(np.zeros(3), 1)


def test_making_and_folding_keys_compiles_once_per_process():
    """After a first use, new seeds and new data compile nothing: ``jax.random.key(7)`` stages its integer
    and derives the key in programs of their own, again for every integer type."""
    rng.key(0), rng.keys(0, 2), rng.fold_in(rng.key(0), 0), rng.fold_in(rng.keys(0, 2), 0)
    clock = timing.compile_clock()
    for seed in (3, np.int64(11), np.int32(12)):
        rng.fold_in(rng.key(seed), seed + 1)
        rng.fold_in(rng.keys(seed, 2), 2)
    assert timing.compiles_since(clock)["compilations"] == 0


@pytest.mark.parametrize("num", [1, 2, 3])
def test_split_is_jax_random_split_unpacked(num):
    key = jax.random.key(21)
    got = rng.split(key, num)
    assert isinstance(got, tuple) and len(got) == num and all(k.shape == () for k in got)
    for mine, theirs in zip(got, jax.random.split(key, num)):
        np.testing.assert_array_equal(_data(mine), _data(theirs))
    legacy = jax.random.PRNGKey(4)
    np.testing.assert_array_equal(np.stack([np.asarray(k) for k in rng.split(legacy, num)]),
                                  np.asarray(jax.random.split(legacy, num)))


def test_split_compiles_once_a_count_and_refuses_bad_arguments():
    """Unpacking ``jax.random.split``'s array runs a program of its own; ``rng.split`` of another key with the
    same count compiles nothing more."""
    rng.split(rng.key(0), 3)
    clock = timing.compile_clock()
    a, b, c = rng.split(rng.fold_in(rng.key(5), 1), 3)
    assert timing.compiles_since(clock)["compilations"] == 0
    with pytest.raises(ValueError, match="num"):
        rng.split(jax.random.key(0), 0)
    with pytest.raises(TypeError, match="num"):
        rng.split(jax.random.key(0), 2.0)
    with pytest.raises(TypeError, match="key"):
        rng.split(np.zeros(3), 2)
