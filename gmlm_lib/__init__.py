"""gmlm_lib: the library behind the gmlm-book, an executable companion to
*Promises and Pitfalls of Generative Masked Language Modeling* (Li et al., ICML 2024).

Three packages over a small core, as Optax and BlackJAX lay themselves out:

- :mod:`gmlm_lib.ising`: the Ising testbed, exact numerics for Sections 2.1-2.4 of the paper.
- :mod:`gmlm_lib.mt`: translation with PaDIR and autoregressive models, Section 3.
- :mod:`gmlm_lib.book`: the tools that run, check and document the book's chapters.
- :mod:`gmlm_lib.core`: what both sides share (run records, timing, progress bars, plots, divergences).

Rules, checked by ``tests/test_layout.py``: nothing outside :mod:`gmlm_lib.book` imports it;
:mod:`gmlm_lib.mt` imports nothing from :mod:`gmlm_lib.ising`; no module changes JAX's global
configuration when imported.
"""

import importlib as _importlib

__version__ = "0.1.0"

#: The flat module names of the library before it was split into packages that the committed run of
#: the ablations chapter still imports; its code cells must stay as they ran until it is rerun on the
#: retrained PaDIR models. Each name resolves to its new home on first access;
#: ``tests/test_layout.py`` fails if any other chapter, module or test uses them.
LEGACY_NAMES = {
    **{name: f"gmlm_lib.mt.{name}" for name in ("batching", "corpus", "decoding", "experiment", "training",
                                                  "translate")},
    "mt_metrics": "gmlm_lib.mt.metrics",
    "plotting": "gmlm_lib.core.plotting",
}


def __getattr__(name: str):
    if name in LEGACY_NAMES:
        return _importlib.import_module(LEGACY_NAMES[name])
    raise AttributeError(f"module 'gmlm_lib' has no attribute {name!r}")
