"""The parameters that every chapter reusing the PaDIR chapter's run folder shares (stutter,
dependency-aware decoding, ablations): where the folder is, the preset that trains it when it is
missing, the language pair and data, the smoke stand-in's and the test set's sizes, and the decoding
buckets, whose ``None`` means the preset's for the backend the chapter runs on.

``gmlm_lib.mt`` is imported inside :meth:`ReuseParams.resolved` and the preset check only, so that
importing a findings module stays light.
"""

from __future__ import annotations

import dataclasses

from gmlm_lib.book.validate import ChapterParams, positive_ints

__all__ = ["PADIR_MODELS", "ReuseParams", "origin", "preset_names"]

PADIR_MODELS = ("padir_distilled", "padir_raw")
"""The PaDIR models of the run folder that a chapter can analyse."""


def preset_names() -> tuple[str, ...]:
    """``"auto"`` and the names of :data:`gmlm_lib.mt.config.PRESETS`: what a ``preset`` parameter may be."""
    from gmlm_lib.mt import config

    return (config.AUTO, *sorted(config.PRESETS))


def origin(padir_run: str, complete_before: bool) -> str:
    """Where the models a chapter analyses come from, as words for its setting line: ``padir_run`` the
    chapter's parameter, ``complete_before`` whether that folder held a finished run before the chapter
    opened it (:func:`gmlm_lib.mt.pipeline.complete`, read before :func:`gmlm_lib.mt.pipeline.reuse`).
    A folder the chapter had to build holds models trained again with the PaDIR chapter's recipe, seed
    and number of updates, not the ones that chapter measured: a reader comparing the two chapters'
    numbers needs to know which."""
    if not isinstance(padir_run, str):
        raise TypeError(f"origin: padir_run must be a string (the chapter's parameter); "
                        f"got {type(padir_run).__name__}.")
    if not isinstance(complete_before, bool):
        raise TypeError(f"origin: complete_before must be True or False; got {complete_before!r}.")
    if not padir_run:
        if complete_before:
            raise ValueError("origin: an empty padir_run (the smoke stand-in) has no folder that was complete before.")
        return "a few-step stand-in trained in this run (smoke profile), not the PaDIR chapter's model"
    if complete_before:
        return "reused from the PaDIR chapter's run folder"
    return "trained in this run by the PaDIR chapter's pipeline, with its recipe, seed and number of updates"


@dataclasses.dataclass(frozen=True)
class ReuseParams(ChapterParams):
    """Base of the ``Params`` of a chapter that opens the PaDIR chapter's run folder. A subclass's
    ``check`` calls :meth:`check_reuse` first, then states its own fields' ranges."""

    def check_reuse(self) -> None:
        """The shared fields' ranges: strings where strings go, a known preset, two different languages,
        sentence counts, and ``decode_buckets`` None or a non-empty list of lengths."""
        for name in ("padir_run", "preset", "src_lang", "tgt_lang", "data_dir"):
            self.need(isinstance(getattr(self, name), str), name, "a string")
        names = preset_names()
        self.need(self.preset in names, "preset", f"one of {list(names)} ('auto': the GPU preset on a GPU or TPU)")
        self.need(self.src_lang != self.tgt_lang, "tgt_lang", f"a language other than src_lang ({self.src_lang!r})")
        self.integer("train_sentences", 1, why="pairs of the tiny stand-in used when padir_run is empty")
        self.integer("test_sentences", 0, why="0: the whole test split")
        self.need(self.decode_buckets is None or positive_ints(self.decode_buckets), "decode_buckets",
                  "None (the preset's) or a non-empty list of integers >= 1")

    def resolved(self, backend: str):
        """These parameters with ``decode_buckets`` None replaced by the preset's for ``backend``
        (``jax.default_backend()``; ``"auto"`` resolves by it: one bucket on a GPU or TPU, three on a CPU)."""
        from gmlm_lib.mt import config

        if self.decode_buckets is not None:
            return self
        preset = config.get(config.resolve(self.preset, backend))
        return dataclasses.replace(self, decode_buckets=list(preset.decode_buckets))

    # the shared fields (each chapter's parameters cell names them; seed and install_ref: ChapterParams)
    padir_run: str
    preset: str
    src_lang: str
    tgt_lang: str
    data_dir: str
    train_sentences: int
    test_sentences: int
    decode_buckets: list | None
