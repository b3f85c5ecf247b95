"""The book's two decision rules: a target is met when the measurement reaches it, a difference is
significant when its paired-bootstrap p-value is below :data:`ALPHA`. Every chapter's findings use
these, so one rule decides every verdict of the book."""

from __future__ import annotations

import math

__all__ = ["ALPHA", "grade", "significant", "compare", "listed"]

ALPHA = 0.05
"""The book's one significance level: p < ALPHA is significant (paired bootstrap, two systems)."""


def _number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number; got {value!r}: a verdict is never drawn from a missing "
                         "or non-finite measurement.")
    return float(value)


def grade(value: float, target: float, *, at_least: bool) -> str:
    """``"met"`` when ``value >= target`` (``at_least``, a floor such as a speed-up) or ``value <= target``
    (a ceiling such as a BLEU gap), else ``"missed"``; exact, no tolerance. A non-finite value or target
    is a ``ValueError``: a NaN is never graded."""
    value, target = _number("value", value), _number("target", target)
    return "met" if (value >= target if at_least else value <= target) else "missed"


def significant(p: float, alpha: float = ALPHA) -> bool:
    """Whether a paired-bootstrap p-value is significant at ``alpha`` (strictly below it)."""
    p, alpha = _number("p", p), _number("alpha", alpha)
    if not 0.0 <= p <= 1.0 or not 0.0 < alpha < 1.0:
        raise ValueError(f"p must be in [0, 1] and alpha in (0, 1); got p = {p}, alpha = {alpha}.")
    return p < alpha


def compare(difference: float, p: float, alpha: float = ALPHA) -> int:
    """How a system compares with its baseline: ``+1`` significantly better (``difference > 0`` and
    :func:`significant`), ``-1`` significantly worse, ``0`` when the test cannot tell them apart.

    ``difference`` is the system's score minus the baseline's (e.g. BLEU). A difference of exactly 0 is
    never significant: SacreBLEU's paired bootstrap gives two identical systems p = 1/(n + 1), which
    read alone would call identical outputs significantly different."""
    difference = _number("difference", difference)
    if not significant(p, alpha) or difference == 0.0:
        return 0
    return 1 if difference > 0 else -1


def listed(items, empty: str = "none") -> str:
    """A short list for a sentence: ``"2, 4 and 8"``; ``empty`` when there is nothing to list."""
    items = [f"{x:g}" if isinstance(x, float) else str(x) for x in items]
    if not items:
        return empty
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
