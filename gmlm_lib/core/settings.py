"""Settings that arrive as text (YAML files, ``-p NAME VALUE`` on the command line), checked against
the type they must have and converted by one rule.

Both halves of the library read settings from text: the book's runner takes a chapter's parameters,
typed by their defaults in the ``parameters`` cell, and :mod:`gmlm_lib.mt.config` takes a translation
experiment's fields, typed by their annotations. Both call :func:`coerce`, so a value is accepted or
refused the same way everywhere:

* an integer is a valid float (``1`` for ``learning_rate``), a bool is never a number;
* YAML 1.1, which PyYAML follows, reads ``1e-3`` as the *string* ``"1e-3"``: a string that Python
  reads as a float becomes that float where a float is wanted;
* a list is a valid tuple and a tuple a valid list; their items follow the same rules;
* nothing else is converted: a string is not a list of one string, ``"3"`` is not an integer.

A refused value raises :class:`SettingError`, which says what was expected and where inside the
value (``"[1]"``: the second item), so each caller can name the setting and where it came from.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KINDS", "SettingError", "coerce"]

KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
         tuple: "a list", dict: "a mapping"}
"""The kinds :func:`coerce` converts to, with the words an error uses for each."""
_PLURAL = {bool: "true or false values", int: "integers", float: "numbers", str: "strings", list: "lists",
           tuple: "lists", dict: "mappings"}


class SettingError(TypeError):
    """A value of the wrong kind: ``expected`` in words (``"an integer"``), the ``value`` refused, and
    ``path``, where in the value it sits (``""``: the value itself; ``"[1]"``: its second item)."""

    def __init__(self, expected: str, value: Any, path: str = ""):
        self.expected, self.value, self.path = expected, value, path
        super().__init__(f"{path or 'the value'} must be {expected}; got {value!r} ({type(value).__name__}).")


def coerce(value: Any, kind: type, item: type | None = None) -> Any:
    """``value`` as ``kind`` (one of :data:`KINDS`), by the rules of this module.

    For ``kind`` list or tuple, ``item`` (one of :data:`KINDS`, or ``None`` for any) is the kind of
    every item. Raises :class:`SettingError` when ``value`` is not of that kind, ``ValueError`` when
    ``kind`` or ``item`` is not one this module converts to."""
    for k in (kind, item):
        if k is not None and k not in KINDS:
            raise ValueError(f"kind and item must be one of {[t.__name__ for t in KINDS]}; got {k!r}.")
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind is str:
        if isinstance(value, str):
            return value
    elif kind in (list, tuple):
        if isinstance(value, (list, tuple)):
            if item is None:
                return kind(value)
            items = []
            for i, v in enumerate(value):
                try:
                    items.append(coerce(v, item))
                except SettingError as err:
                    raise SettingError(err.expected, err.value, f"[{i}]{err.path}") from None
            return kind(items)
    elif kind is dict:
        if isinstance(value, dict):
            return value
    raise SettingError(f"a list of {_PLURAL[item]}" if kind in (list, tuple) and item is not None else KINDS[kind],
                       value)
