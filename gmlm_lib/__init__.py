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

__version__ = "0.1.0"
