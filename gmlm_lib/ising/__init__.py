"""The Ising testbed of Part I and II: everything the paper proves, computed exactly.

One topic a module (imported on first use); the model API of :mod:`~gmlm_lib.ising.model` is
re-exported here, so ``from gmlm_lib import ising; ising.ising_model(J, h)`` works.

- :mod:`~gmlm_lib.ising.model`: Ising models and exact numerics [Definition 12, Eq. 5, Eq. 6].
- :mod:`~gmlm_lib.ising.masks`: mask distributions, fixed and adaptive [Definitions 2-3, 7].
- :mod:`~gmlm_lib.ising.mple`: likelihood and k-pseudolikelihood losses and their fits [Definition 2].
- :mod:`~gmlm_lib.ising.blocks`: exact sums over the blocks of a mask.
- :mod:`~gmlm_lib.ising.fisher`: Fisher information, Hessians, asymptotic covariances [Theorems 1-3].
- :mod:`~gmlm_lib.ising.markov`: block dynamics, Dirichlet forms, Poincaré constants [Definitions 4-6, 8].
- :mod:`~gmlm_lib.ising.tensorization`: block approximate tensorization [Definition 9, Theorem 4].
- :mod:`~gmlm_lib.ising.product`: product transitions, the law of one parallel step [Propositions 3-4].
- :mod:`~gmlm_lib.ising.samplers`: k-Gibbs, block dynamics, independent parallel; exact kernels.
- :mod:`~gmlm_lib.ising.unmasking`: parallel unmasking rules (2025) and the exact law each samples.
- :mod:`~gmlm_lib.ising.numpy_samplers`, :mod:`~gmlm_lib.ising.bench`: NumPy references, throughput.
- :mod:`~gmlm_lib.ising.transformer`: a small bidirectional Transformer that learns one parallel step.

Exact numerics need float64: the program turns JAX's x64 mode on once before building a model
(see :mod:`gmlm_lib.core.precision`); importing this package does not, and building a model
without it is an error.
"""

from gmlm_lib.core.lazy import attach as _attach
from gmlm_lib.ising.model import *  # noqa: F403
from gmlm_lib.ising.model import __all__ as _model_all

_SUBMODULES = ("model", "masks", "mple", "blocks", "fisher", "markov", "tensorization", "product", "samplers",
               "unmasking", "numpy_samplers", "bench", "transformer")
__all__ = [*_SUBMODULES, *_model_all]
__getattr__, __dir__ = _attach(__name__, _SUBMODULES)
