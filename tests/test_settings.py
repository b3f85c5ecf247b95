"""The one rule that converts settings read from text (gmlm_lib.core.settings), and the two callers
that name what was wrong: the book's runner (typed by the parameters cell's defaults) and the
translation configuration (typed by Experiment's annotations)."""

import pytest

from gmlm_lib.core import settings
from gmlm_lib.mt import config


@pytest.mark.parametrize("value, kind, item, want", [
    ("1e-3", float, None, 0.001),  # YAML 1.1 reads 1e-3 as a string
    (2, float, None, 2.0),
    ([1, 2], tuple, int, (1, 2)),
    ((1, 2.5), list, float, [1.0, 2.5]),
    (["1e-1"], list, float, [0.1]),
    ({"a": 1}, dict, None, {"a": 1}),
    (False, bool, None, False),
])
def test_lossless_conversions(value, kind, item, want):
    got = settings.coerce(value, kind, item)
    assert got == want and type(got) is type(want)
    if item is not None:
        assert all(type(g) is item for g in got)


@pytest.mark.parametrize("value, kind, item, expected, path", [
    ("3", int, None, "an integer", ""),
    (True, int, None, "an integer", ""),  # a bool is not a number
    (True, float, None, "a number", ""),
    ("big", float, None, "a number", ""),
    (3, str, None, "a string", ""),
    ("a b", list, str, "a list of strings", ""),  # a string is not a list of one string
    (3, tuple, int, "a list of integers", ""),
    ([1, "two"], list, int, "an integer", "[1]"),
    ([1], dict, None, "a mapping", ""),
    (1, bool, None, "true or false", ""),
])
def test_refusals_say_what_was_expected_and_where(value, kind, item, expected, path):
    with pytest.raises(settings.SettingError) as info:
        settings.coerce(value, kind, item)
    assert (info.value.expected, info.value.path, info.value.value) == (expected, path, value if not path else "two")
    assert isinstance(info.value, TypeError)


def test_a_refusal_reads_as_a_sentence():
    assert str(settings.SettingError("an integer", "two", "[1]")) == "[1] must be an integer; got 'two' (str)."
    assert str(settings.SettingError("true or false", 1)) == "the value must be true or false; got 1 (int)."


def test_an_unknown_kind_is_a_value_error():
    with pytest.raises(ValueError, match="kind and item must be one of"):
        settings.coerce(1, complex)
    with pytest.raises(ValueError, match="kind and item must be one of"):
        settings.coerce([1], list, set)


def test_the_translation_configuration_names_the_field_and_the_item():
    with pytest.raises(TypeError, match=r"train_buckets\[1\] in p\.yaml must be an integer; got 'x'"):
        config.get(overrides={"train_buckets": [8, "x"]}, source="p.yaml")
    assert config.get(overrides={"learning_rate": "5e-4"}).learning_rate == 5e-4
