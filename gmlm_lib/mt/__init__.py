"""Machine translation with PaDIR and autoregressive Transformers (Part III, the paper's Section 3).

One topic a module, imported on first use (``from gmlm_lib.mt import training``):

- :mod:`~gmlm_lib.mt.config`: named presets of a translation run, and their overrides.
- :mod:`~gmlm_lib.mt.corpus`: Multi30k and any aligned text files, with download.
- :mod:`~gmlm_lib.mt.vocab`: the joint SentencePiece vocabulary.
- :mod:`~gmlm_lib.mt.batching`: length-bucketed batches, AR inputs, PaDIR corruption.
- :mod:`~gmlm_lib.mt.seq2seq`: the encoder-decoder models (AR with a KV cache; PaDIR).
- :mod:`~gmlm_lib.mt.training`: the run's configuration, optimiser, data parallelism and the loop with resume.
- :mod:`~gmlm_lib.mt.objectives`: the AR and PaDIR training losses.
- :mod:`~gmlm_lib.mt.runfolder`: a run's folder: lock, checkpoints and digests, metrics, provenance record.
- :mod:`~gmlm_lib.mt.sizing`: a run's updates fitted to a wall-time budget on the device at hand.
- :mod:`~gmlm_lib.mt.decoding`: greedy, beam and PaDIR refinement; :mod:`~gmlm_lib.mt.reductions`.
- :mod:`~gmlm_lib.mt.programs`: the compiled decoders and updates, kept by model structure.
- :mod:`~gmlm_lib.mt.translate`: translation of text, latency and throughput.
- :mod:`~gmlm_lib.mt.metrics`: SacreBLEU, chrF, stutter (the one stutter rule), paired bootstrap.
- :mod:`~gmlm_lib.mt.experiment`: run folders of a PaDIR experiment, distillation, smoke stand-ins.
- :mod:`~gmlm_lib.mt.pipeline`: the whole experiment, data to trained models, as one resumable pipeline.
- :mod:`~gmlm_lib.mt.stutter_analysis`: attention statistics of adjacent positions [Section 3.4].
- :mod:`~gmlm_lib.mt.decode_costs`: what a PaDIR pass costs against a cached AR step.

Nothing here imports :mod:`gmlm_lib.ising` or changes JAX's global configuration: the models are
float32 whatever else the program imported.
"""

from gmlm_lib.core.lazy import attach as _attach

__all__ = ["config", "corpus", "vocab", "batching", "seq2seq", "training", "objectives", "runfolder", "sizing", "decoding",
           "programs", "reductions", "translate", "metrics", "experiment", "pipeline", "stutter_analysis", "decode_costs"]
__getattr__, __dir__ = _attach(__name__, tuple(__all__))
