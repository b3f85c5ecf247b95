"""Range checks of a chapter's parameters, in one cell at its top, before any work.

The runner already checks names and types against the parameters cell (:mod:`gmlm_lib.book.runner`);
what a value *means* (a probability, a size the exact numerics can enumerate, a non-empty sweep)
only the chapter knows. Each check names the parameter, what it got and what it needs::

    require(2 <= n <= 12, "n", n, "an integer in [2, 12]: the exact numerics enumerate 2^n states")
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def require(ok: bool, name: str, value, need: str) -> None:
    """``ValueError`` naming parameter ``name``, its ``value`` and what it must be, unless ``ok``."""
    if not ok:
        raise ValueError(f"parameter {name} = {value!r} is out of range: it must be {need}. Fix it in the "
                         "parameters cell or with `-p`.")


def finite(values) -> bool:
    """True when ``values`` (a number or an iterable of numbers) holds only finite numbers."""
    if isinstance(values, Iterable) and not isinstance(values, (str, bytes)):
        return all(finite(v) for v in values)
    return isinstance(values, (int, float)) and not isinstance(values, bool) and math.isfinite(values)


def count(value, minimum: int = 0) -> bool:
    """True when ``value`` is an integer (not a bool) of at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def positive_ints(values, minimum: int = 1) -> bool:
    """True when ``values`` is a non-empty list of integers, each at least ``minimum``."""
    return isinstance(values, (list, tuple)) and len(values) > 0 and all(count(v, minimum) for v in values)
