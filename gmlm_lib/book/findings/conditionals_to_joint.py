"""The parameters of the chapter from conditionals to the joint (``notebooks/conditionals_to_joint.md``)
[Theorem 4]; its verdicts are :func:`gmlm_lib.book.findings.bounds.sandwich` and
:func:`~gmlm_lib.book.findings.bounds.theorem4`'s.
"""

from __future__ import annotations

import dataclasses

from gmlm_lib.book.validate import ChapterParams
from gmlm_lib.ising.tensorization import MAX_N

__all__ = ["Params"]


@dataclasses.dataclass(frozen=True)
class Params(ChapterParams):
    """The parameters of ``notebooks/conditionals_to_joint.md`` (their meaning: its parameters cell),
    checked when built: the exact constants enumerate ``2^n`` states (``n`` at most
    :data:`gmlm_lib.ising.tensorization.MAX_N`), total couplings are at least 0, the mask sizes fit in ``n``."""

    def check(self) -> None:
        self.integer("n", 2, MAX_N, "the exact constants enumerate 2^n states")
        self.numbers("couplings", 0, "total couplings")
        self.integers("ks", 1, self.n, "mask sizes")
        self.number("field")
        self.number("truth_coupling")
        self.integer("fit_k", 1, self.n, "a mask size")
        self.integers("sizes", 1, why="training-set sizes")
        for name in ("restarts", "ascent_steps", "repeats"):
            self.integer(name, 1)

    # the fields: the parameters cell's names in its order (seed and install_ref: ChapterParams)
    n: int
    couplings: list
    ks: list
    field: float
    restarts: int
    ascent_steps: int
    truth_coupling: float
    fit_k: int
    sizes: list
    repeats: int
