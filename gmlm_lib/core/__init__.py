"""What both halves of the library share, and nothing domain-specific:

- :mod:`~gmlm_lib.core.records`: the commit, machine and whole-file JSON writes of run records.
- :mod:`~gmlm_lib.core.timing`: fastest-call timing in interleaved rounds, the matmul peak.
- :mod:`~gmlm_lib.core.devtrace`: a call's device busy and idle time, read from JAX's profiler.
- :mod:`~gmlm_lib.core.progress`: tqdm bars that the book's runner can switch off.
- :mod:`~gmlm_lib.core.plotting`: the book's figure style.
- :mod:`~gmlm_lib.core.tables`: the book's table style (no bare index, words for missing values).
- :mod:`~gmlm_lib.core.unmasking`: parallel unmasking rules (2025 and ours) on confidences and entropies.
- :mod:`~gmlm_lib.core.divergences`: KL and total variation between laws on a finite space.
- :mod:`~gmlm_lib.core.precision`: float64 for exact numerics, asked for, never imposed.
- :mod:`~gmlm_lib.core.settings`: settings read from text, checked and converted by one rule.
- :mod:`~gmlm_lib.core.checks`: arguments checked at the public boundaries (counts, numbers, masks, shapes, keys).
- :mod:`~gmlm_lib.core.rng`: JAX random keys from Python integers, one program each per process.
- :mod:`~gmlm_lib.core.lazy`: lazy submodules for the packages.
"""

from gmlm_lib.core.lazy import attach as _attach

__all__ = ["records", "timing", "devtrace", "progress", "plotting", "tables", "divergences", "precision", "settings", "checks", "unmasking", "rng", "lazy"]
__getattr__, __dir__ = _attach(__name__, tuple(__all__))
