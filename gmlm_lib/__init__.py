"""gmlm_lib: the library behind the gmlm-book, an executable companion to
*Promises and Pitfalls of Generative Masked Language Modeling* (Li et al., ICML 2024).

Modules: :mod:`~gmlm_lib.ising` (Ising models, exact numerics), :mod:`~gmlm_lib.masks`
(mask distributions, fixed and adaptive), :mod:`~gmlm_lib.mple` (likelihood and
pseudolikelihood losses, fitting), :mod:`~gmlm_lib.blocks` (exact sums over the blocks of a
mask), :mod:`~gmlm_lib.fisher` (Fisher information and asymptotic covariances),
:mod:`~gmlm_lib.markov` (block dynamics, Dirichlet forms, Poincaré constants),
:mod:`~gmlm_lib.samplers` (Markov-chain samplers and their exact kernels),
:mod:`~gmlm_lib.tensorization` (block approximate tensorization, Theorem 4),
:mod:`~gmlm_lib.product` (product transitions), :mod:`~gmlm_lib.transformer` (a small parallel
decoder), :mod:`~gmlm_lib.numpy_samplers` and :mod:`~gmlm_lib.bench` (throughput benchmark),
:mod:`~gmlm_lib.plotting` (the book's figure style), :mod:`gmlm_lib.book` (notebook runner,
checks, provenance).
"""

__version__ = "0.1.0"
