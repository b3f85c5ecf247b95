"""The translation experiment as one pipeline, as Flax examples/wmt's ``train_and_evaluate``: from an
:class:`~gmlm_lib.mt.config.Experiment` to a complete run folder.

The steps, each a function the PaDIR chapter calls in turn to show its result, and each resuming
what a previous call left in the run folder (``<run_root>/<src>-<tgt>/``, laid out as
:mod:`gmlm_lib.mt.experiment` describes):

1. :func:`load_data`: the training and test pairs (Multi30k, or two aligned files each);
2. :func:`vocabulary`: the joint SentencePiece model, trained once and kept as ``spm.model``;
   then :func:`size`: the updates fitted to ``train_seconds`` on this device, decided once (``sizing.json``);
3. :func:`train_teacher`: the AR teacher in ``ar/``;
4. :func:`distil_training_set`: the teacher's outputs on the training set [App. L.1.2], and
   :func:`distil_val` on the val sources (the distilled model is selected on them);
5. :func:`train_padir`: PaDIR on raw (``padir_raw/``) and on distilled targets (``padir_distilled/``);
6. :func:`train_shallow` (with ``shallow=True``): the deep-shallow AR baseline in ``ar_shallow/``.

:func:`build` runs them all; :func:`ensure` opens a run folder that is complete and builds the one
that is not, so a chapter that reuses the PaDIR chapter's models opens on a fresh runtime (a
Colab session) as well as beside a finished run; :func:`reuse` is how such a chapter opens it
(``padir=False``: only up to step 4, for a chapter that trains PaDIR models of its own, which then
takes the PaDIR recipe from :func:`padir_config`). The smoke stand-in of the chapters and tests is
the same pipeline with the ``"multi30k_tiny"`` preset (:func:`tiny_run`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import tempfile

import jax

from gmlm_lib.core import timing
from gmlm_lib.mt import batching, config, corpus, experiment, runfolder, sizing, training, translate
from gmlm_lib.mt import vocab as V

__all__ = ["Data", "run_folder", "load_data", "vocabulary", "batcher", "size", "train_teacher", "train_shallow",
           "distil_training_set", "distil_val", "train_padir", "build", "complete", "ensure", "padir_config", "reuse",
           "REUSE_ONLY", "tiny_run"]

REUSE_ONLY = "GMLM_REUSE_ONLY"
"""An environment variable: when set (non-empty), :func:`reuse` opens a finished run folder and refuses to
train one. A batch sets it for the chapters after the PaDIR chapter, so that they read the models it
trained and never train a second copy (:func:`gmlm_lib.book.batch.run_batch`)."""


@dataclasses.dataclass(frozen=True)
class Data:
    """The ``train`` and ``test`` pairs of an experiment (already cut to ``train_sentences`` and
    ``test_sentences``), and the ``val`` pairs on which each model's number of updates is selected
    (cut to ``val_sentences``; ``None``: no selection, the last checkpoint is the model)."""

    train: corpus.Parallel
    test: corpus.Parallel
    val: corpus.Parallel | None = None


def run_folder(exp: config.Experiment, root: str | pathlib.Path | None = None) -> pathlib.Path:
    """Where the run folder of ``exp`` lives: ``root`` if given, else ``<run_root>/<src>-<tgt>``; an
    empty ``run_root`` is a fresh temporary folder (removed with the process's ``TMPDIR`` in a book run)."""
    if root is not None:
        return runfolder.folder(root, must_exist=False)
    base = pathlib.Path(exp.run_root) if exp.run_root else pathlib.Path(tempfile.mkdtemp(prefix="padir-"))
    return base / f"{exp.src_lang}-{exp.tgt_lang}"


def load_data(exp: config.Experiment) -> Data:
    """The experiment's training, test and val pairs: ``train_files``/``test_files``/``val_files``
    when set (any aligned pairs of files, e.g. WMT14; no ``val_files``: no selection on a val split),
    else Multi30k's ``train``, ``test_2016_flickr`` and ``val`` splits from ``data_dir`` (empty:
    ``GMLM_MULTI30K_DIR``, else the download cache)."""
    if exp.train_files:
        train, test = corpus.load_parallel(*exp.train_files), corpus.load_parallel(*exp.test_files)
        val = corpus.load_parallel(*exp.val_files) if exp.val_files else None
    else:
        where = exp.data_dir or None
        train = corpus.multi30k("train", exp.src_lang, exp.tgt_lang, root=where)
        test = corpus.multi30k("test_2016_flickr", exp.src_lang, exp.tgt_lang, root=where)
        val = corpus.multi30k("val", exp.src_lang, exp.tgt_lang, root=where)
    if exp.train_sentences:
        train = train.take(exp.train_sentences)
    if exp.test_sentences:
        test = test.take(exp.test_sentences)
    if exp.val_sentences and val is not None:
        val = val.take(exp.val_sentences)
    return Data(train, test, val)


def vocabulary(exp: config.Experiment, train: corpus.Parallel, root: str | pathlib.Path) -> V.Vocab:
    """The joint vocabulary of ``vocab_size`` pieces, trained on both sides of ``train`` and saved as
    ``root/spm.model``; a run folder that has one keeps it (a resumed run keeps its ids)."""
    path = pathlib.Path(root) / "spm.model"
    if path.exists():
        return V.Vocab.load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    vocab = V.train(train.src + train.tgt, exp.vocab_size)
    vocab.save(path)
    return vocab


def batcher(exp: config.Experiment, vocab: V.Vocab, src: list[str], tgt: list[str]) -> batching.Batcher:
    """Length-bucketed batches of ``batch_tokens`` padded target tokens from the texts ``src``/``tgt``,
    their size a multiple of the device count (data parallelism over ``jax.devices()``)."""
    return batching.Batcher(vocab.encode(src), vocab.encode(tgt), exp.batch_tokens, seed=exp.seed,
                            buckets=tuple(exp.train_buckets), multiple=len(jax.devices()))


def size(exp: config.Experiment, vocab: V.Vocab, train: corpus.Parallel, root: str | pathlib.Path, *,
         shallow: bool = False) -> tuple[config.Experiment, dict]:
    """``exp`` with its updates fitted to ``train_seconds`` on this device, and the decision's record
    (:func:`gmlm_lib.mt.sizing.fit`, kept in ``root/sizing.json``): one update of the teacher, of PaDIR
    and (with ``shallow``) of the deep-shallow baseline is timed, and every model's updates shrink by
    the one factor that fits them all in the budget. Without a budget, ``exp`` as it is."""
    data = batcher(exp, vocab, train.src, train.tgt)  # PaDIR's batches have the same shapes
    kinds = ("ar", "padir") + (("ar_shallow",) if shallow else ())
    return sizing.fit(exp, vocab.size, {kind: data for kind in kinds}, root)


def _val(exp: config.Experiment, vocab: V.Vocab, val: corpus.Parallel | None) -> batching.Batcher | None:
    """The val pairs batched like the training data (their number of updates is selected on them)."""
    return None if val is None else batcher(exp, vocab, val.src, val.tgt)


def train_teacher(exp: config.Experiment, vocab: V.Vocab, train: corpus.Parallel, root: str | pathlib.Path, *,
                  val: corpus.Parallel | None = None, progress: bool = True) -> training.Result:
    """The AR teacher, ``ar_steps`` updates on the human targets, in ``root/ar`` (resumed or reused);
    with ``val`` pairs, the checkpoint with the lowest val loss is the teacher
    (:func:`gmlm_lib.mt.training.train`)."""
    data = batcher(exp, vocab, train.src, train.tgt)
    return training.train(exp.train_config("ar", vocab.size), data, pathlib.Path(root) / "ar", progress=progress,
                          val=_val(exp, vocab, val))


def train_shallow(exp: config.Experiment, vocab: V.Vocab, train: corpus.Parallel, root: str | pathlib.Path, *,
                  val: corpus.Parallel | None = None, progress: bool = True) -> training.Result:
    """The deep-shallow AR baseline (Kasai et al., 2021: the teacher's encoder with a one-layer decoder,
    trained like the teacher, ``exp.train_config("ar_shallow", ...)``) in ``root/ar_shallow``: the
    AR model to beat at batch 1, since its cached steps are the cheapest an AR decoder can take.
    ``val``: as for :func:`train_teacher`."""
    data = batcher(exp, vocab, train.src, train.tgt)
    return training.train(exp.train_config("ar_shallow", vocab.size), data, pathlib.Path(root) / "ar_shallow",
                          progress=progress, val=_val(exp, vocab, val))


def distil_training_set(exp: config.Experiment, vocab: V.Vocab, teacher, train: corpus.Parallel,
                        root: str | pathlib.Path, *, progress: bool = True) -> experiment.Distilled:
    """Sequence-level distillation [App. L.1.2]: the teacher decodes the training sources with beam
    ``distill_beam`` (greedy when it is 1) into ``root/distilled.<tgt>.gz``, reused when present
    (:func:`gmlm_lib.mt.experiment.distil`). A sentence a barely trained teacher leaves empty keeps
    its human target."""
    translator, method = _distiller(exp, vocab, teacher)
    return experiment.distil(translator, train.src, method, pathlib.Path(root) / f"distilled.{exp.tgt_lang}.gz",
                             fallback=train.tgt, progress=progress)


def _distiller(exp: config.Experiment, vocab: V.Vocab, teacher) -> tuple[translate.Translator, translate.Method]:
    """The teacher's translator and the decoding of distillation: beam ``distill_beam`` (greedy when 1)."""
    translator = translate.Translator(teacher, vocab, buckets=exp.decode_buckets, seed=exp.seed)
    method = (translate.Method("greedy") if exp.distill_beam == 1 else
              translate.Method("beam", beam=exp.distill_beam, alpha=exp.length_penalty))
    return translator, method


def distil_val(exp: config.Experiment, vocab: V.Vocab, teacher, val: corpus.Parallel | None,
               root: str | pathlib.Path, *, progress: bool = True) -> corpus.Parallel | None:
    """The val pairs with the teacher's translations as their targets (decoded as
    :func:`distil_training_set` decodes the training set, into ``root/distilled_val.<tgt>.gz``,
    reused when present), on which the distilled PaDIR model's checkpoints are selected: it learns to
    reproduce the teacher, so its loss on the teacher's outputs is the loss it is trained to lower,
    while its loss on the human references can stop falling as it does (on the first full-size GPU
    run it read "converged" at half its updates, its checkpoints 0.02 nats apart, while its training
    loss still fell). A translation that is empty, or too long for the largest training bucket (a
    barely trained teacher's runs to the length limit), keeps its human target, so that every val
    pair is scored. ``None`` when ``val`` is."""
    if val is None:
        return None
    translator, method = _distiller(exp, vocab, teacher)
    got = experiment.distil(translator, val.src, method, pathlib.Path(root) / f"distilled_val.{exp.tgt_lang}.gz",
                            fallback=val.tgt, progress=progress)
    limit = max(exp.train_buckets)  # a target of n pieces takes n + 1 positions (batching.Batcher)
    lines = [line if len(ids) + 1 <= limit else human
             for line, ids, human in zip(got.lines, vocab.encode(got.lines), val.tgt)]
    return corpus.Parallel(list(val.src), lines, f"{val.name} (teacher's translations)")


def train_padir(exp: config.Experiment, vocab: V.Vocab, train: corpus.Parallel, targets: list[str],
                root: str | pathlib.Path, name: str, *, teacher=None, val: corpus.Parallel | None = None,
                progress: bool = True) -> training.Result:
    """A PaDIR model, ``padir_steps`` updates on ``train.src`` -> ``targets`` (the human targets for
    ``name = "raw"``, the teacher's for ``"distilled"``), in ``root/padir_<name>``; started from the
    AR ``teacher`` when ``padir_init = "teacher"`` (then required), from random weights otherwise.
    ``teacher``: the teacher's :class:`~gmlm_lib.mt.training.Result` (with ``seeds`` > 1, PaDIR replica
    ``r`` then starts from teacher replica ``r``), or a model (every replica starts from it).
    ``val``: as for :func:`train_teacher` (PaDIR's val loss is its denoising loss on the val pairs; the
    distilled model's are :func:`distil_val`'s, the teacher's translations of the val sources)."""
    if name not in ("raw", "distilled"):
        raise ValueError(f"train_padir(name=...) must be 'raw' or 'distilled'; got {name!r}.")
    if exp.padir_init == "teacher" and teacher is None:
        raise ValueError("train_padir: padir_init = 'teacher' starts PaDIR from the AR teacher; pass teacher=<the "
                         "AR model> (train_teacher(...).model), or set padir_init = 'random'.")
    data = batcher(exp, vocab, train.src, targets)
    if isinstance(teacher, training.Result):
        teacher = teacher.models if exp.seeds > 1 else teacher.model
    start = teacher if exp.padir_init == "teacher" else None
    return training.train(exp.train_config("padir", vocab.size), data, pathlib.Path(root) / f"padir_{name}",
                          teacher=start, progress=progress, val=_val(exp, vocab, val))


def build(exp: config.Experiment, root: str | pathlib.Path | None = None, *, data: Data | None = None,
          shallow: bool = False, padir: bool = True, progress: bool = True) -> experiment.RunFolder:
    """Every step in turn, into ``root`` (default :func:`run_folder`), and the finished folder opened.
    Each step resumes or reuses what the folder holds, so a killed call is continued by calling it
    again. ``data``: the pairs to use instead of :func:`load_data`'s (tests, stand-ins); ``shallow``:
    train the deep-shallow AR baseline too (:func:`train_shallow`); ``padir=False``: stop after the
    teacher and the distilled training set, for a chapter that trains PaDIR models of its own (the
    ablations): on a fresh runtime it does not train two models it would not use. A later call with
    ``padir=True`` finishes the folder, reusing what is there."""
    root = run_folder(exp, root)
    root.mkdir(parents=True, exist_ok=True)
    data = load_data(exp) if data is None else data
    vocab = vocabulary(exp, data.train, root)
    exp, _ = size(exp, vocab, data.train, root, shallow=shallow)
    teacher = train_teacher(exp, vocab, data.train, root, val=data.val, progress=progress)
    # one teacher replica (replica 0, seed exp.seed) decodes the distilled targets of every PaDIR replica:
    # the spread of the distilled models is their training seeds', given one teacher's outputs (as the
    # paper distils from one teacher), for one beam decoding of the training set instead of `seeds`
    distilled = distil_training_set(exp, vocab, teacher.model, data.train, root, progress=progress)
    if padir:
        val_distilled = distil_val(exp, vocab, teacher.model, data.val, root, progress=progress)
        for name, targets, val in (("raw", data.train.tgt, data.val), ("distilled", distilled.lines, val_distilled)):
            train_padir(exp, vocab, data.train, targets, root, name, teacher=teacher, val=val, progress=progress)
    if shallow:
        train_shallow(exp, vocab, data.train, root, val=data.val, progress=progress)
    return experiment.open_run(root, need=_needed(padir))


def _models(padir: bool) -> tuple[str, ...]:
    """The trained models a folder must hold for :func:`build` with ``padir`` to have nothing left to
    train (the distilled training set besides)."""
    return experiment.MODELS if padir else ("ar",)


def _needed(padir: bool) -> tuple[str, ...]:
    """What :func:`gmlm_lib.mt.experiment.open_run` must find after :func:`build` with ``padir``."""
    return _models(padir) + ("distilled",)


def complete(root: str | pathlib.Path, *, padir: bool = True) -> bool:
    """Whether the run folder ``root`` holds every part :func:`build` makes (vocabulary, the three
    trained models with their records, the distilled training set; with ``padir=False`` the teacher
    and the distilled set are enough)."""
    root = pathlib.Path(root)
    if not (root / "spm.model").is_file() or not any(root.glob("distilled.*.gz")):
        return False
    for name in _models(padir):
        ckpt = root / name / "checkpoints"
        if not (root / name / "run.json").is_file() or not ckpt.is_dir() or not any(ckpt.iterdir()):
            return False
    return True


def ensure(root: str | pathlib.Path, exp: config.Experiment, *, data: Data | None = None, padir: bool = True,
           progress: bool = True) -> experiment.RunFolder:
    """The run folder ``root`` opened when :func:`complete`, else built (or finished) there by
    :func:`build` with ``exp``: a chapter that reuses the PaDIR chapter's models runs on a fresh
    runtime too, training them first. A folder built with another experiment is refused by the
    trainer, naming the file that disagrees. ``data`` and ``padir``: as for :func:`build` (with
    ``padir=False`` the PaDIR models are loaded when the folder has them, not trained when not)."""
    root = pathlib.Path(root)
    if complete(root, padir=padir):
        return experiment.open_run(root, need=_needed(padir))
    return build(exp, root, data=data, padir=padir, progress=progress)


def padir_config(folder: experiment.RunFolder, exp: config.Experiment) -> training.TrainConfig:
    """The training configuration of the run folder's distilled PaDIR model: the trained model's, or,
    in a folder :func:`build` made with ``padir=False``, the one it would train there (``exp`` with
    the updates the folder's sizing decision chose, ``sizing.json``). A chapter that varies the
    PaDIR chapter's recipe (the ablations) starts from it either way."""
    if "padir_distilled" in folder.models:
        return folder.models["padir_distilled"][0]
    if exp.train_seconds and not (folder.root / sizing.SIZING_FILE).is_file():
        raise FileNotFoundError(f"run folder {str(folder.root)!r} has no trained PaDIR model and no "
                                f"{sizing.SIZING_FILE} to size one with; finish it with pipeline.ensure(root, exp).")
    sized, _ = sizing.fit(exp, folder.vocab.size, {}, folder.root)
    return sized.train_config("padir", folder.vocab.size)


def reuse(padir_run: str, exp: config.Experiment, *, stand_in_sentences: int = 1000, seed: int = 0,
          padir_init: str = "random", padir: bool = True) -> experiment.RunFolder:
    """The PaDIR chapter's run folder as a chapter that reuses its models opens it (stutter,
    dependency-aware decoding, ablations). First JAX's persistent compilation cache is turned on
    beside it (``<padir_run>/../jax-cache``, unless ``JAX_COMPILATION_CACHE_DIR`` names one:
    :func:`gmlm_lib.core.timing.persistent_cache`), so the programs the PaDIR chapter compiled for
    the same models are read, not compiled again; then ``padir_run`` is opened, or built there with
    ``exp`` when it is missing or unfinished (:func:`ensure`: a fresh runtime trains the models
    first). An empty ``padir_run`` (the smoke profile) is a few-step stand-in trained on the first
    ``stand_in_sentences`` training pairs of ``exp``'s language pair, in a fresh temporary folder
    (:func:`tiny_run`, started as ``padir_init`` says, with ``seed``; it holds
    every model). ``padir``: as for :func:`ensure`. With :data:`REUSE_ONLY` set, an unfinished
    ``padir_run`` is an error instead of a run to train (a batch's later chapters)."""
    if padir_run:
        if os.environ.get(REUSE_ONLY) and not complete(padir_run, padir=padir):
            raise RuntimeError(f"{REUSE_ONLY} is set (a batch's chapter after the PaDIR chapter), but {padir_run} holds no "
                               "finished run of the PaDIR chapter: the batch reads its models and never trains a second "
                               "copy. Rerun the batch from the PaDIR chapter, or unset the variable to train them here.")
        timing.persistent_cache(pathlib.Path(padir_run).parent / "jax-cache")
        return ensure(padir_run, exp, padir=padir)
    timing.persistent_cache()  # a temporary folder, unless one is set
    pairs = corpus.multi30k("train", exp.src_lang, exp.tgt_lang, root=exp.data_dir or None).take(stand_in_sentences)
    root = pathlib.Path(tempfile.mkdtemp(prefix="padir-stand-in-")) / f"{exp.src_lang}-{exp.tgt_lang}"
    return tiny_run(root, pairs, seed=seed, padir_init=padir_init)


def tiny_run(root: str | pathlib.Path, pairs: corpus.Parallel, *, steps: int = 8, seed: int = 0,
             padir_init: str = "random", progress: bool = False, **overrides) -> experiment.RunFolder:
    """A stand-in for the PaDIR chapter's run folder in ``root``, trained on ``pairs`` by the one
    pipeline (:func:`build`) with the ``"multi30k_tiny"`` preset: vocabulary,
    AR teacher, greedy distillation, PaDIR on raw and on distilled targets, ``steps`` updates each,
    started as ``padir_init`` says ("random", or "teacher": from the AR stand-in, as the PaDIR
    chapter's default does). ``overrides``: other settings of :class:`~gmlm_lib.mt.config.Experiment`.
    Only for smoke runs and tests: the models are barely trained."""
    if padir_init not in ("teacher", "random"):
        raise ValueError(f"tiny_run(padir_init=...) must be 'teacher' or 'random'; got {padir_init!r}.")
    exp = config.get("multi30k_tiny", dict(overrides, ar_steps=steps, padir_steps=steps, checkpoint_every=steps,
                                           warmup=min(2, steps - 1), seed=seed, padir_init=padir_init,
                                           train_sentences=len(pairs)))
    return build(exp, root, data=Data(pairs, pairs.take(1)), progress=progress)
