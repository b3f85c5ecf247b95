"""Range checks of a chapter's parameters, run at its top, before any work.

The runner already checks names and types against the parameters cell (:mod:`gmlm_lib.book.runner`);
what a value *means* (a probability, a size the exact numerics can enumerate, a non-empty sweep)
only the chapter knows. Each chapter's findings module holds a frozen ``Params`` dataclass
(a :class:`ChapterParams`) whose ``check`` states those ranges, so they are tested code; the chapter
calls ``Params.of(globals())`` once. Each check names the parameter, what it got and what it needs::

    require(2 <= n <= 12, "n", n, "an integer in [2, 12]: the exact numerics enumerate 2^n states")
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import ClassVar


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


def numbers(values, minimum: float | None = None) -> bool:
    """True when ``values`` is a non-empty list of finite numbers, each at least ``minimum`` if given."""
    return (isinstance(values, (list, tuple)) and len(values) > 0 and finite(values)
            and (minimum is None or all(v >= minimum for v in values)))


def _range(low: float | None, high: float | None) -> str:
    """How a range reads after "a finite number": " in [0, 1]", " >= 0", " <= 1" or nothing."""
    if low is not None and high is not None:
        return f" in [{low}, {high}]"
    return f" >= {low}" if low is not None else (f" <= {high}" if high is not None else "")


@dataclasses.dataclass(frozen=True)
class ChapterParams:
    """Base of a chapter's ``Params``: a frozen dataclass with one field per name of the chapter's
    ``parameters`` cell, whose :meth:`check` raises ``ValueError`` naming the first parameter out of range.
    Every chapter has ``seed`` (the root of its random keys) and ``install_ref`` (the revision its Colab
    cell installs), checked here; a subclass states its fields' ranges in ``check`` with the helpers below
    (which name each parameter once), then declares the fields in the parameters cell's order. Building one
    is the chapter's validation; its :meth:`record` is what :func:`gmlm_lib.book.provenance.start` stores."""

    seed: int
    install_ref: str
    NONE_SEED: ClassVar[str] = ""
    """What ``seed = None`` means, in a chapter whose seed may be None (empty: it may not)."""

    def __post_init__(self):
        self.need(isinstance(self.install_ref, str) and self.install_ref.strip() != "", "install_ref",
                  "a non-empty git revision (a branch, tag or commit) as a string")
        if not (self.seed is None and self.NONE_SEED):
            self.integer("seed", 0, why=f"or None: {self.NONE_SEED}" if self.NONE_SEED else "")
        self.check()

    def check(self) -> None:
        """Each parameter's range; a subclass states them."""
        raise NotImplementedError(f"{type(self).__name__} must define check().")

    def need(self, ok: bool, name: str, what: str) -> None:
        """:func:`require` for the field ``name``: unless ``ok``, a ``ValueError`` saying it must be ``what``."""
        require(ok, name, getattr(self, name), what)

    def integer(self, name: str, low: int, high: int | None = None, why: str = "") -> None:
        """Field ``name`` is an integer (not a bool) in ``[low, high]`` (``high`` None: no upper end)."""
        value = getattr(self, name)
        what = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}"
        self.need(count(value, low) and (high is None or value <= high), name, what + (f" ({why})" if why else ""))

    def number(self, name: str, low: float | None = None, why: str = "", high: float | None = None) -> None:
        """Field ``name`` is a finite number, at least ``low`` and at most ``high`` where given."""
        value = getattr(self, name)
        self.need(finite(value) and (low is None or value >= low) and (high is None or value <= high), name,
                  "a finite number" + _range(low, high) + (f" ({why})" if why else ""))

    def numbers(self, name: str, low: float | None = None, why: str = "", high: float | None = None) -> None:
        """Field ``name`` is a non-empty list of finite numbers, each at least ``low`` and at most ``high``
        where given."""
        values = getattr(self, name)
        self.need(numbers(values, low) and (high is None or max(values) <= high), name,
                  "a non-empty list of finite numbers" + _range(low, high) + (f" ({why})" if why else ""))

    def integers(self, name: str, low: int = 1, high: int | None = None, why: str = "") -> None:
        """Field ``name`` is a non-empty list of integers in ``[low, high]`` (``high`` None: no upper end)."""
        values = getattr(self, name)
        what = f"a non-empty list of integers in [{low}, {high}]" if high is not None else \
            f"a non-empty list of integers >= {low}"
        self.need(positive_ints(values, low) and (high is None or max(values) <= high), name,
                  what + (f" ({why})" if why else ""))

    @classmethod
    def of(cls, namespace: Mapping):
        """The parameters of ``namespace`` (a chapter's ``globals()``), checked. A field the namespace
        lacks is a ``NameError`` naming it: the chapter's parameters cell and ``cls`` disagree."""
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [name for name in names if name not in namespace]
        if missing:
            raise NameError(f"{cls.__module__}.{cls.__name__} needs the parameters {missing}, which the chapter's "
                            "parameters cell does not define: run the chapter from its top.")
        return cls(**{name: namespace[name] for name in names})

    def record(self) -> dict:
        """``{name: value}`` of every parameter (``seed`` and ``install_ref`` first)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
