"""The training objectives of the translation models [Section 3.2, App. L.1.2]: the AR baseline's
teacher-forced next-token loss and PaDIR's multi-stage denoising loss with its length loss.

Both read from the run's :class:`gmlm_lib.mt.training.TrainConfig` only ``kind``,
``label_smoothing`` and, for PaDIR, ``unmasking_rate``, ``fill``, ``stages``,
``length_loss_weight`` and ``model.vocab``. They are pure functions of the model, the batch and a
``jax.random`` key, traced inside the training step (:func:`gmlm_lib.mt.training.make_step`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from gmlm_lib.mt import batching, reductions, seq2seq
from gmlm_lib.mt import vocab as V

__all__ = ["cross_entropy", "ar_loss", "padir_loss", "loss_fn"]


def cross_entropy(logits, labels, mask, smoothing: float):
    """Label-smoothed cross-entropy summed over ``mask``, and the number of tokens it covers:
    (1 - eps) * NLL + eps * mean over the vocabulary of -log p. logits (..., V), labels and mask (...)."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    nll = -jnp.take_along_axis(logp, labels[..., None], -1)[..., 0]
    ce = (1.0 - smoothing) * nll - smoothing * logp.mean(-1)
    return (ce * mask).sum(), mask.sum()


def ar_loss(model: seq2seq.Seq2Seq, cfg, batch: dict, key, *, dropout: bool = True):
    """The AR baseline's loss: teacher-forced next-token cross-entropy on ``y [EOS]`` given
    ``[BOS] y`` (:func:`gmlm_lib.mt.batching.ar_inputs`), per target token. Returns ``(loss, parts)``.
    ``dropout = False`` evaluates the model as it decodes (the validation loss)."""
    k_enc, _, k_dec = jax.random.split(key, 3)  # the keys PaDIR's loss uses for its encoder and decoder
    if not dropout:
        k_enc = k_dec = None
    enc, enc_mask = model.encode(batch["src"], batch["src_mask"], k_enc)
    dec_in, out, mask = batching.ar_inputs(batch["tgt"], batch["tgt_mask"])
    if "rows" in batch:  # rows that fill up a validation batch do not count
        mask = mask & batch["rows"][:, None]
    logits = model.decode(dec_in, mask, enc, enc_mask, k_dec)
    total, count = cross_entropy(logits, out, mask, cfg.label_smoothing)
    loss = total / count
    return loss, dict(token_loss=loss, tokens=count)


def padir_loss(model: seq2seq.Seq2Seq, cfg, batch: dict, key, *, dropout: bool = True,
               unmasking_rate=None, fill=None):
    """PaDIR's loss [App. L.1.2]: the mean over ``cfg.stages`` stages of the per-token loss on every
    target position, stage 1 given the corrupted target (:func:`gmlm_lib.mt.batching.corrupt`: each
    position kept with probability ``unmasking_rate``), each later stage given the previous stage's
    own argmax (gradients stopped); plus ``length_loss_weight`` times the length predictor's
    cross-entropy. Returns ``(loss, parts)``. ``dropout = False``: no dropout (the corruption still
    draws from ``key``), the validation loss. ``unmasking_rate`` and ``fill`` (None: ``cfg``'s; a
    traced scalar, for ``fill`` a boolean true for ``[MASK]``) let a compiled update take them as
    arguments (:data:`gmlm_lib.mt.training.TRACED`)."""
    k_enc, k_cor, k_dec = jax.random.split(key, 3)
    src, sm, tgt, tm = batch["src"], batch["src_mask"], batch["tgt"], batch["tgt_mask"]
    enc, enc_mask = model.encode(src, sm, k_enc if dropout else None)
    rate = cfg.unmasking_rate if unmasking_rate is None else unmasking_rate
    hyp = batching.corrupt(k_cor, tgt, tm, cfg.model.vocab, rate, cfg.fill if fill is None else fill)
    rows = batch.get("rows")  # rows that fill up a validation batch do not count
    counted = tm if rows is None else tm & rows[:, None]
    token_loss = 0.0
    stage_keys = jax.random.split(k_dec, cfg.stages) if dropout else [None] * cfg.stages
    for stage, k in enumerate(stage_keys):
        logits = model.decode(hyp, tm, enc, enc_mask, k)
        total, count = cross_entropy(logits, tgt, counted, cfg.label_smoothing)
        token_loss = token_loss + total / count / cfg.stages
        if stage + 1 < cfg.stages:  # the next stage refines this stage's own prediction
            pred = reductions.argmax(logits.at[..., : V.FIRST_PIECE].set(-jnp.inf)).astype(tgt.dtype)
            hyp = jax.lax.stop_gradient(jnp.where(tm, pred, V.PAD))
    length_ce = optax.softmax_cross_entropy_with_integer_labels(model.length_logits(enc), tm.sum(-1))
    length_loss = length_ce.mean() if rows is None else (length_ce * rows).sum() / rows.sum()
    loss = token_loss + cfg.length_loss_weight * length_loss
    return loss, dict(token_loss=token_loss, length_loss=length_loss, tokens=count)


def loss_fn(model: seq2seq.Seq2Seq, cfg, batch: dict, key, *, dropout: bool = True,
            numbers: dict | None = None):
    """The loss of ``cfg.kind`` ("ar": :func:`ar_loss`, "padir": :func:`padir_loss`) on one batch
    (``src``, ``src_mask`` (B, S); ``tgt``, ``tgt_mask`` (B, L)): ``(mean loss, parts)``; without
    dropout when ``dropout`` is false. ``numbers`` (None: ``cfg``'s own) gives the values of the
    fields in :data:`gmlm_lib.mt.training.TRACED`, as arguments of a compiled program (the loss reads
    ``unmasking_rate`` and ``fill``; the schedule's numbers are the optimiser's)."""
    if cfg.kind == "ar":
        return ar_loss(model, cfg, batch, key, dropout=dropout)
    mine = {k: v for k, v in (numbers or {}).items() if k in ("unmasking_rate", "fill")}
    return padir_loss(model, cfg, batch, key, dropout=dropout, **mine)
