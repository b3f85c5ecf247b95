"""KL and total variation [Section 2] on hand-computed values, including laws with zeros and point
masses, and the tolerance of the law check in each precision."""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmlm_lib.core import divergences


def _kl(q, p):  # the definition, term by term, with 0 log 0 = 0
    return sum(a * (np.log(a) - np.log(b)) for a, b in zip(q, p) if a > 0)


@pytest.mark.parametrize("q, p", [
    ([1.0, 0.0], [0.5, 0.5]),  # a point mass: KL = -log p(x)
    ([0.0, 1.0, 0.0], [0.2, 0.3, 0.5]),
    ([0.5, 0.5, 0.0], [0.25, 0.25, 0.5]),  # zeros of q carry no weight
    ([0.1, 0.2, 0.7], [0.3, 0.3, 0.4]),
])
def test_kl_and_tv_match_their_definitions(q, p):
    with jax.enable_x64(True):
        qa, pa = np.array(q), np.array(p)
        assert float(divergences.kl(qa, pa)) == pytest.approx(_kl(q, p), abs=1e-14)
        assert float(divergences.tv(qa, pa)) == pytest.approx(0.5 * np.abs(qa - pa).sum(), abs=1e-14)
        assert float(divergences.kl(qa, qa)) == 0.0 and float(divergences.tv(qa, qa)) == 0.0
    assert float(divergences.kl(np.array([1.0, 0.0]), np.array([0.5, 0.5]))) == pytest.approx(np.log(2), rel=1e-6)


def test_kl_is_infinite_where_p_misses_what_q_has():
    with jax.enable_x64(True):
        assert float(divergences.kl(np.array([0.5, 0.5]), np.array([1.0, 0.0]))) == np.inf


def test_every_row_of_a_batch_is_checked_and_each_precision_has_its_tolerance():
    """A batch is refused when any row is not a law, also when another row sums to exactly 1 (the row
    furthest from 1 is the one reported); float64 rows must sum to 1 within 1e-6, float32 rows within 1e-4."""
    with jax.enable_x64(True):
        with pytest.raises(ValueError, match="a row sums to 0.4"):
            divergences.kl(np.array([[0.5, 0.5], [0.2, 0.2]]), np.array([0.5, 0.5]))
        with pytest.raises(ValueError, match="a row sums to 1.5"):  # above 1, beside rows below it within tolerance
            divergences.kl(np.array([[0.5, 0.5], [0.75, 0.75], [0.5, 0.4999999]]), np.array([0.5, 0.5]))
        with pytest.raises(ValueError, match="tolerance 1e-06"):
            divergences.tv(np.array([0.5, 0.50001]), np.array([0.5, 0.5]))
        assert float(divergences.tv(np.array([0.5, 0.5000001]), np.array([0.5, 0.5]))) == pytest.approx(5e-8)
    assert float(divergences.tv(np.array([0.5, 0.50001], np.float32), np.array([0.5, 0.5], np.float32))) < 1e-4
    with pytest.raises(ValueError, match="tolerance 0.0001"):
        divergences.tv(np.array([0.5, 0.5002], np.float32), np.array([0.5, 0.5], np.float32))


# --- hostile inputs, generated (issue 127, item 6) ---------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(shape_q=st.lists(st.integers(0, 3), min_size=0, max_size=2), shape_p=st.lists(st.integers(0, 3), max_size=2),
       values=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=9, max_size=9), normalise=st.booleans())
def test_property_divergences_of_any_arrays_are_finite_or_refused_by_name(shape_q, shape_p, values, normalise):
    """KL and TV of any pair of arrays (any shapes, NaN, infinities, negative numbers, rows that do not sum
    to 1): a finite divergence in range (KL may be +inf only where p misses q's support), or a ValueError
    naming q or p."""
    def law(shape):
        a = np.resize(np.abs(np.nan_to_num(np.asarray(values, np.float64), nan=1.0, posinf=2.0)) + 0.1, int(np.prod(shape)))
        a = a.reshape(shape)
        if normalise and a.ndim and a.shape[-1]:
            a = a / a.sum(-1, keepdims=True)
        elif not normalise:
            a = np.resize(np.asarray(values, np.float64), a.shape)
        return a

    q, p = law(shape_q), law(shape_p)
    for f in (divergences.kl, divergences.tv):
        try:
            got = np.asarray(f(q, p))
        except (ValueError, TypeError) as err:
            assert "q" in str(err) or "p" in str(err), str(err)
            continue
        assert not np.isnan(got).any() and (got >= -1e-12).all()
        if f is divergences.tv:
            assert (got <= 1 + 1e-12).all()
