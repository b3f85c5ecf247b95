"""The parameters of the chapter on what one parallel step can represent (``notebooks/one_parallel_step.md``)."""

from __future__ import annotations

import dataclasses

from gmlm_lib.book.validate import ChapterParams

__all__ = ["MAX_PAIRS", "Params"]

MAX_PAIRS = 3
"""The most coupled pairs of the 2-Gibbs task: its exact distances enumerate every (pair, state), ``2^(2 pairs)``
states, through a Transformer forward pass each."""


@dataclasses.dataclass(frozen=True)
class Params(ChapterParams):
    """The parameters of ``notebooks/one_parallel_step.md`` (their meaning: its parameters cell), checked
    when built: ``ca_rule`` is a Wolfram rule number, the automaton runs on a ring of at least 3 cells, the
    2-Gibbs task has 1 to :data:`MAX_PAIRS` pairs, and the training sizes are positive."""

    def check(self) -> None:
        self.numbers("pair_couplings")
        self.integer("ca_rule", 0, 255, "a Wolfram rule number")
        self.integer("ca_length", 3, why="a ring")
        self.integer("pairs", 1, MAX_PAIRS, f"n = 2 pairs is at most {2 * MAX_PAIRS}")
        for name in ("pair_coupling", "link", "field"):
            self.number(name)
        for name in ("train_steps", "batch", "d_model", "layers"):
            self.integer(name, 1)

    # the fields: the parameters cell's names in its order (seed and install_ref: ChapterParams)
    pair_couplings: list
    ca_rule: int
    ca_length: int
    pairs: int
    pair_coupling: float
    link: float
    field: float
    train_steps: int
    batch: int
    d_model: int
    layers: int
