"""One configuration source for translation runs: named presets plus overrides, as Flax's
examples/wmt lays out its configs.

:class:`Experiment` holds every setting of the PaDIR chapter's runs (data, model, training,
evaluation). Its defaults *are* the ``"multi30k_cpu"`` preset, the setting of the chapter's full
run on Multi30k with 2 CPU cores; :data:`PRESETS` names the others as overrides of it:
``"multi30k_gpu"`` (the Multi30k recipe of the literature on one accelerator), ``"multi30k_tiny"``
(the few-step stand-in of smoke runs and tests) and ``"wmt14_colab_tpu"`` (Transformer-base on
WMT14 on a Colab TPU, after the paper's Appendix L.2). ``"auto"`` (:func:`resolve`) picks the GPU
preset on an accelerator and the CPU one elsewhere. :func:`get` builds one, checking every
override's name and type, and
:meth:`Experiment.model_config` / :meth:`Experiment.train_config` turn it into the library's
:class:`~gmlm_lib.mt.seq2seq.ModelConfig` and :class:`~gmlm_lib.mt.training.TrainConfig`, so no
chapter maps its settings by hand. :func:`from_yaml` reads and validates a parameter file such as
``params/padir/de-en.yaml``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import typing
from typing import Any

from gmlm_lib.core import checks, settings
from gmlm_lib.mt import batching, seq2seq, training

__all__ = ["Experiment", "KINDS", "FIELDS", "PRESETS", "AUTO", "ACCELERATORS", "BACKENDS", "resolve", "get", "from_parameters", "from_yaml"]


@dataclasses.dataclass(frozen=True)
class Experiment:
    """Every setting of a translation experiment; the defaults are the ``"multi30k_cpu"`` preset.

    Data: ``src_lang``/``tgt_lang``, ``data_dir`` (empty: ``GMLM_MULTI30K_DIR`` or the download
    cache), ``train_files``/``test_files`` (two aligned files each instead of Multi30k),
    ``train_sentences``/``test_sentences`` (0 keeps the whole split); ``val_files`` (with
    ``train_files``; empty: none) or Multi30k's val split, cut to ``val_sentences``, on which each
    model's number of updates is selected among its checkpoints (every ``checkpoint_every``). Model: a
    joint vocabulary of ``vocab_size`` pieces, ``layers`` encoder and decoder layers each; ``dropout_rng`` how dropout
    draws its masks (:class:`~gmlm_lib.mt.seq2seq.ModelConfig`). Training: ``batch_tokens`` padded
    target tokens a batch, in length buckets ``train_buckets`` (fine ones waste less of a batch on
    padding); ``ar_steps`` and ``padir_steps`` updates; PaDIR starts from the AR teacher
    (``padir_init = "teacher"``) or from scratch (``"random"``, the paper's start); ``seeds`` replicas of
    each model are trained at once, differing only in their seed (``seed``, ``seed + 1``, ...; initial
    weights, dropout, batch order: ``replicas`` of :class:`gmlm_lib.mt.training.TrainConfig`), so that every
    number of the chapter comes with its spread between seeds; ``train_seconds``
    (0: none) is a wall-time budget for the updates of the models the pipeline trains: on a device too
    slow for ``ar_steps``/``padir_steps`` in that time they shrink by one factor, measured before
    training (:mod:`gmlm_lib.mt.sizing`; warm-up and checkpoint interval in proportion);
    ``unmasking_rate`` is the fraction of target positions that keep the correct token [App. L.1.2].
    Evaluation: ``beam`` (AR), ``distill_beam`` (the teacher decoding the training set),
    ``eval_steps``/``eval_hyps`` (PaDIR passes T and length hypotheses in the quality table),
    ``latency_*`` (the batch-1 timing), ``throughput_batch``. ``run_root`` holds the run folders."""

    src_lang: str = "en"
    tgt_lang: str = "de"
    data_dir: str = ""
    train_files: tuple[str, ...] = ()
    test_files: tuple[str, ...] = ()
    val_files: tuple[str, ...] = ()
    train_sentences: int = 0
    test_sentences: int = 0
    val_sentences: int = 0
    vocab_size: int = 8000
    d_model: int = 256
    heads: int = 4
    layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    dropout_rng: str = "hash"
    batch_tokens: int = 2048
    ar_steps: int = 1200
    padir_steps: int = 500
    padir_init: str = "teacher"
    train_seconds: float = 0.0
    learning_rate: float = 0.002
    warmup: int = 100
    optimizer: str = "adamw"
    label_smoothing: float = 0.1
    unmasking_rate: float = 0.3
    stages: int = 2
    compute_dtype: str = "float32"
    train_buckets: tuple[int, ...] = (10, 12, 14, 16, 18, 20, 24, 28, 32, 40, 48, 64)
    decode_buckets: tuple[int, ...] = (16, 32, 64)
    beam: int = 4
    distill_beam: int = 2
    length_penalty: float = 0.6
    eval_steps: tuple[int, ...] = (4, 10)
    eval_hyps: int = 3
    latency_steps: tuple[int, ...] = (1, 2, 4, 10)
    latency_hyps: tuple[int, ...] = (1, 3)
    latency_sentences: int = 150
    throughput_batch: int = 64
    checkpoint_every: int = 200
    run_root: str = "runs/padir"
    seed: int = 0
    seeds: int = 1

    def __post_init__(self):
        """Range checks of every setting, before any work: a bad value is named with its range."""
        # the model's and the trainer's own checks (sizes, rates, warm-up < steps) run at the end
        positive = ("ar_steps", "padir_steps", "beam", "distill_beam", "eval_hyps", "throughput_batch", "seeds")
        counts = ("train_sentences", "test_sentences", "val_sentences", "latency_sentences", "warmup", "seed")
        for name in positive + counts:
            checks.integer(getattr(self, name), name)  # a count: a string or a float is named, never compared
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)!r}.")
        for name in ("train_sentences", "test_sentences", "val_sentences", "latency_sentences", "warmup", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: {'all' if 'sentences' in name else 'none'}); "
                                 f"got {getattr(self, name)!r}.")
        for name in ("train_buckets", "decode_buckets"):
            batching.check_buckets(getattr(self, name), name)
        if max(self.decode_buckets) > max(self.train_buckets):
            raise ValueError(f"decode_buckets go up to {max(self.decode_buckets)} but the models' max_len = "
                             f"max(train_buckets) = {max(self.train_buckets)}: a source that long cannot be encoded; "
                             "keep decode_buckets within train_buckets' largest.")
        for name in ("eval_steps", "latency_steps", "latency_hyps"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise ValueError(f"{name} must be a non-empty list of integers >= 1; got {list(values)!r}.")
        if not (self.train_seconds >= 0.0 and self.train_seconds < float("inf")):
            raise ValueError(f"train_seconds must be a finite number >= 0 (0: no budget); got {self.train_seconds!r}.")
        if not self.learning_rate > 0.0:
            raise ValueError(f"learning_rate must be > 0; got {self.learning_rate!r}.")
        if self.length_penalty < 0.0:
            raise ValueError(f"length_penalty must be >= 0; got {self.length_penalty!r}.")
        if len(self.train_files) not in (0, 2) or len(self.test_files) not in (0, 2) or \
                bool(self.train_files) != bool(self.test_files):
            raise ValueError("train_files and test_files must both be empty (Multi30k) or both hold two aligned "
                             f"files (source, target); got {list(self.train_files)} and {list(self.test_files)}.")
        if self.val_files and (len(self.val_files) != 2 or not self.train_files):
            raise ValueError("val_files must be empty or hold two aligned files (source, target), and only with "
                             f"train_files (Multi30k brings its own val split); got {list(self.val_files)}.")
        for kind in KINDS:
            try:
                self.train_config(kind, self.vocab_size)
            except (TypeError, ValueError) as err:
                raise type(err)(self._named(str(err), kind)) from err

    def _named(self, text: str, kind: str) -> str:
        """An error of the model's or the trainer's config, led by the setting of this experiment it
        comes from (``ModelConfig.vocab`` is ``vocab_size``, ``TrainConfig.steps`` of the teacher is
        ``ar_steps``): the caller set that name, not the derived config's."""
        found = re.match(r"(?:Model|Train)Config\.(\w+)", text)
        name = found and _CONFIG_NAMES.get(found[1], found[1])
        if name == "steps":
            name = "padir_steps" if kind == "padir" else "ar_steps"
        if name not in _FIELDS:
            return f"the settings do not make a valid {kind} model: {text}"
        return f"{name} = {getattr(self, name)!r} is out of range: {text}"

    def model_config(self, vocab: int, causal: bool) -> seq2seq.ModelConfig:
        """The model of this experiment for a vocabulary of ``vocab`` ids (the trained SentencePiece
        model's size, which may be below ``vocab_size`` on a small corpus); AR when ``causal``."""
        return seq2seq.ModelConfig(vocab=vocab, causal=causal, d_model=self.d_model, heads=self.heads,
                                   enc_layers=self.layers, dec_layers=self.layers, d_ff=self.d_ff,
                                   max_len=max(self.train_buckets), dropout=self.dropout, dtype=self.compute_dtype,
                                   dropout_rng=self.dropout_rng)

    def train_config(self, kind: str, vocab: int) -> training.TrainConfig:
        """The :class:`~gmlm_lib.mt.training.TrainConfig` of the ``"ar"`` teacher, of a ``"padir"``
        model, or of the ``"ar_shallow"`` baseline: the teacher's model and training with a one-layer
        decoder, the deep-encoder shallow-decoder AR model of Kasai et al. (2021), the fastest AR
        baseline of equal quality at batch 1 (the paper compares PaDIR with an AR model of its own size
        only). The PaDIR-only fields stay at their defaults for the AR models, so changing them keeps
        the teacher's run folder valid."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {kind!r}.")
        steps = self.padir_steps if kind == "padir" else self.ar_steps
        padir_only = dict(unmasking_rate=self.unmasking_rate, stages=self.stages, init=self.padir_init) if kind == "padir" else {}
        model = self.model_config(vocab, kind != "padir")
        if kind == "ar_shallow":
            model = dataclasses.replace(model, dec_layers=1)
        return training.TrainConfig(kind="padir" if kind == "padir" else "ar", model=model, steps=steps,
                                    batch_tokens=self.batch_tokens, optimizer=self.optimizer,
                                    learning_rate=self.learning_rate, warmup=self.warmup,
                                    label_smoothing=self.label_smoothing, seed=self.seed,
                                    checkpoint_every=self.checkpoint_every, log_every=max(1, steps // 50),
                                    buckets=tuple(self.train_buckets), replicas=self.seeds, **padir_only)


KINDS = ("ar", "ar_shallow", "padir")
"""The models of an experiment: the AR teacher, the deep-shallow AR baseline, PaDIR."""

PRESETS: dict[str, dict[str, Any]] = {
    "multi30k_cpu": {},
    # The Multi30k recipe of the literature (a Transformer of 4 + 4 layers, d_model 256, 4 heads, d_ff 1024,
    # dropout 0.3, tied embeddings, label smoothing 0.1, warm-up then decay), in bfloat16 on one GPU or TPU.
    # Updates: 3000 of 256 sentences (~3,900 real target pieces, near the published recipe's 4096 tokens
    # a batch), 2000 for each PaDIR model, which starts from the teacher as on the CPU.
    # One training bucket: every length bucket is one more compilation of every model's update and val
    # programs, and on an H200 an update compiled in 20-50 s and ran in 20-30 ms, over 40x what its
    # arithmetic (XLA's count, 4.9e11 FLOP at bucket 32) takes at the H200's bf16 peak: the first full-size
    # GPU run spent about 250 s compiling three buckets' programs for 120 s of updates
    # (benchmarks/gpu_runs/2026-11-27-h200). Padding every batch to 64 spends arithmetic the device has to
    # spare (24% of the padded target tokens are real, against 68% with buckets 16/32/64; twice the FLOPs
    # an update), and the sizing step times that one shape, so the budget holds whatever it costs.
    # One decoding bucket: every decoder (AR greedy, AR beam, PaDIR; per batch size) is one program
    # instead of three, and PaDIR's has one hypothesis width instead of a lax.switch over three, so the
    # decoders compile about 3x (AR) and 9x (PaDIR) less code (seconds a program on a GPU). Sources pad
    # to 64 and PaDIR refines 64 positions: at batch 1 an accelerator's pass is bound by reading the
    # weights, not by the width (the PaDIR chapter measures the units at several widths to check this),
    # and what the width costs falls mostly on PaDIR (its AR baselines only read padded sources).
    # Latency over the whole test set (1,000 sentences at batch 1), so that the p99 is a real tail.
    # Each model is the checkpoint (every 1000 recipe updates, scaled with them: three per AR run) with
    # the lowest loss on the val split; a checkpoint with its val loss costs seconds on a GPU.
    # The updates of the four models get 120 s: a device too slow for 3000/2000 updates in that time trains
    # fewer (one factor, measured first: gmlm_lib.mt.sizing). The first GPU run's AR teacher was still
    # improving at 120 s (2,014 updates, 35.5 BLEU), but the PaDIR, stutter and dependency chapters have to
    # fit one GPU batch of about 840 s together (estimated 740 s with 120 s of updates, 800 s with 180 s);
    # the four chapters' 8 minutes could not hold the ablations' 7 x 1,200 updates anyway.
    # Four replicas of every model, trained at once by one vmapped update (seeds 0-3): two identical runs of
    # one seed moved a verdict across its bar, so every number is read with its spread between seeds; at
    # this size an update leaves most of the chip idle (5.5% of its bf16 peak), so four cost far less
    # than four runs (the sizing step times the four-replica update, so the budget still holds).
    "multi30k_gpu": dict(
        layers=4, dropout=0.3, batch_tokens=16384, ar_steps=3000, padir_steps=2000, learning_rate=0.001,
        warmup=400, compute_dtype="bfloat16", train_buckets=(64,), decode_buckets=(64,),
        latency_steps=(2, 4, 10), latency_sentences=0, throughput_batch=256, checkpoint_every=1000,
        train_seconds=120.0, seeds=4),
    # The few-step stand-in of a run folder (smoke runs and tests): barely trained, same layout.
    "multi30k_tiny": dict(
        train_sentences=1000, vocab_size=2000, d_model=64, heads=4, layers=1, d_ff=128, batch_tokens=1024,
        ar_steps=8, padir_steps=8, padir_init="random", learning_rate=0.002, warmup=2, dropout_rng="threefry",
        train_buckets=(64,), decode_buckets=(64,), distill_beam=1, checkpoint_every=8, latency_sentences=5,
        throughput_batch=16, run_root="", seeds=2),
    "wmt14_colab_tpu": dict(
        src_lang="en", tgt_lang="de",
        train_files=("/content/wmt14/train.en", "/content/wmt14/train.de"),
        test_files=("/content/wmt14/newstest2014.en", "/content/wmt14/newstest2014.de"),
        val_files=("/content/wmt14/newstest2013.en", "/content/wmt14/newstest2013.de"),
        vocab_size=32000, d_model=512, heads=8, layers=6, d_ff=2048, batch_tokens=65536,
        ar_steps=100000, padir_steps=100000, padir_init="random", learning_rate=0.001, warmup=10000,
        optimizer="adafactor", compute_dtype="bfloat16", train_buckets=(32, 64, 96, 128),
        decode_buckets=(32, 64, 128), checkpoint_every=2000, latency_sentences=1000,
        run_root="/content/drive/MyDrive/gmlm-runs"),
}
"""Named settings, as overrides of :class:`Experiment`'s defaults (``"multi30k_cpu"``)."""

_FIELDS = {f.name: f for f in dataclasses.fields(Experiment)}
_CONFIG_NAMES = {"replicas": "seeds", "vocab": "vocab_size", "dtype": "compute_dtype", "init": "padir_init", "enc_layers": "layers",
                 "dec_layers": "layers", "max_len": "train_buckets", "buckets": "train_buckets"}
"""The :class:`Experiment` setting behind each field of the model's and the trainer's configs whose name differs."""
FIELDS: tuple[str, ...] = tuple(_FIELDS)
"""The names of :class:`Experiment`'s settings (a chapter's parameters cell holds each of them)."""
_HINTS = typing.get_type_hints(Experiment)


def _coerce(name: str, value, source: str):
    """``value`` as the type of field ``name``, by the rules of :func:`gmlm_lib.core.settings.coerce`
    (lists become tuples; an int is a valid float; YAML 1.1's ``1e-3`` string becomes a float), else a
    ``TypeError`` naming the field (and the item), the expected type and ``source``."""
    hint = _HINTS[name]
    kind, item = (tuple, typing.get_args(hint)[0]) if typing.get_origin(hint) is tuple else (hint, None)
    try:
        return settings.coerce(value, kind, item)
    except settings.SettingError as err:
        where = f" in {source}" if source else ""
        raise TypeError(f"{name}{err.path}{where} must be {err.expected}; got {err.value!r} "
                        f"({type(err.value).__name__}).") from None


AUTO = "auto"
"""The preset name that :func:`resolve` turns into the preset of the backend the program runs on."""
ACCELERATORS = ("gpu", "tpu", "cuda", "rocm")
"""The JAX backends on which ``"auto"`` means the GPU preset."""
BACKENDS = ("cpu", "metal") + ACCELERATORS
"""The backend names :func:`resolve` accepts."""


def resolve(preset: str, backend: str | None = None) -> str:
    """The preset ``preset`` names: itself, or for ``"auto"`` ``"multi30k_gpu"`` when the JAX backend
    (``backend``, default ``jax.default_backend()``) is ``"gpu"`` or ``"tpu"``, and ``"multi30k_cpu"``
    otherwise. A chapter opened on a Colab GPU or TPU thus trains the accelerator's recipe, and the
    same chapter on a laptop the CPU one; an unknown name is a ``ValueError`` listing the presets."""
    if not isinstance(preset, str) or (preset != AUTO and preset not in PRESETS):
        raise ValueError(f"preset must be {AUTO!r} or one of {sorted(PRESETS)}; got {preset!r}.")
    if preset != AUTO:
        return preset
    if backend is None:
        import jax

        backend = jax.default_backend()
    elif backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} (what jax.default_backend() returns), or None for the "
                         f"backend this program runs on; got {backend!r}.")
    return "multi30k_gpu" if backend in ACCELERATORS else "multi30k_cpu"


def get(preset: str = "multi30k_cpu", overrides: dict | None = None, *, source: str = "") -> Experiment:
    """The :class:`Experiment` of ``preset`` (a name of :data:`PRESETS`, or ``"auto"``: :func:`resolve`)
    with ``overrides`` applied, every name and type checked (an unknown name or a wrong type raises,
    naming it, its expected type and ``source``)."""
    preset = resolve(preset)
    overrides = {} if overrides is None else overrides
    if not isinstance(overrides, dict):
        raise TypeError(f"overrides must be a dict of Experiment fields; got {type(overrides).__name__}.")
    unknown = sorted(set(overrides) - set(_FIELDS))
    if unknown:
        where = f" in {source}" if source else ""
        raise KeyError(f"unknown setting(s) {unknown}{where}; the settings are the fields of "
                       f"gmlm_lib.mt.config.Experiment: {sorted(_FIELDS)}.")
    values = {**PRESETS[preset], **overrides}
    return Experiment(**{k: _coerce(k, v, source) for k, v in values.items()})


def from_parameters(preset: str, parameters: dict, *, source: str = "the parameters cell") -> Experiment:
    """The experiment of a chapter's parameters: ``preset`` (``"auto"`` or a name of :data:`PRESETS`)
    with every parameter that is set applied over it. A parameter left at ``None`` takes the preset's
    value, so a chapter's parameters cell can name every setting without fixing it; names that are not
    settings of :class:`Experiment` (a chapter's own parameters) are ignored here."""
    if not isinstance(parameters, dict):
        raise TypeError(f"parameters must be a dict of settings; got {type(parameters).__name__}.")
    try:
        return get(preset, {k: v for k, v in parameters.items() if k in _FIELDS and v is not None}, source=source)
    except ValueError as err:  # a preset's value out of range beside the others given: say it was the preset's
        name = str(err).split(" ", 1)[0]
        if name in _FIELDS and parameters.get(name, 0) is None:
            raise ValueError(f"{name} (None in {source}: the preset's value) {str(err)[len(name) + 1:]}") from err
        raise


def from_yaml(path: str | pathlib.Path) -> Experiment:
    """The experiment a parameter file describes: a YAML mapping of :class:`Experiment` fields,
    optionally with ``preset`` (default ``"multi30k_cpu"``), validated by :func:`get`."""
    import yaml

    path = pathlib.Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"cannot read the parameter file {path}: {err}") from None
    if not isinstance(data, dict):
        raise TypeError(f"{path} must hold a mapping of settings (name: value); got {type(data).__name__}.")
    data = dict(data)
    return get(data.pop("preset", "multi30k_cpu"), data, source=str(path))

