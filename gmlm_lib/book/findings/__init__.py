"""The verdicts of the book's chapters, decided by tested code rather than in hidden cells.

One rule for every chapter (:mod:`~gmlm_lib.book.findings.rules`): a target is **met** when the
measured value reaches it (``>=`` for a floor, ``<=`` for a ceiling, no tolerance) and a difference
is **significant** when its paired-bootstrap p-value is below ``ALPHA``. A chapter's module (e.g.
:mod:`~gmlm_lib.book.findings.padir`) holds its targets and a ``findings(...)`` function that turns
the chapter's result tables into every value and verdict its text glues; the sentences stay in the
chapter's markdown, so rewording one needs ``make sync``, not a rerun.
"""

from gmlm_lib.book.findings.rules import ALPHA, compare, grade, listed, significant
from gmlm_lib.core.lazy import attach as _attach

_MODULES = ("rules", "padir", "stutter", "dependency_decoding", "parallel_rules", "ablations", "masking_more",
            "testbed", "efficiency", "bounds", "kgibbs", "adaptive_masking", "conditionals_to_joint",
            "one_parallel_step", "reuse")
__all__ = ["ALPHA", "compare", "grade", "listed", "significant", *_MODULES]
__getattr__, __dir__ = _attach(__name__, _MODULES)
