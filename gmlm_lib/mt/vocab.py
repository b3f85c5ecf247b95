"""A joint SentencePiece vocabulary for both sides of a translation pair, with fixed special ids.

Ids: ``PAD = 0``, ``EOS = 1``, ``BOS = 2``, ``UNK = 3``, ``MASK = 4`` (``[MASK]``, the initial
hypothesis and the re-masked positions of PaDIR), ``LENGTH = 5`` (``[LENGTH]``, the encoder token
whose output predicts the target length). Ordinary pieces start at ``FIRST_PIECE = 6``.
"""

from __future__ import annotations

import io
import os
import pathlib
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from gmlm_lib.core import checks

PAD, EOS, BOS, UNK, MASK, LENGTH = range(6)
FIRST_PIECE = 6
SPECIALS = ("[MASK]", "[LENGTH]")
#: lists of at least this many texts go to SentencePiece's threaded batch encoder (:meth:`Vocab.encode`);
#: about where its pool's start-up stops costing more than it saves on 2 CPU cores
BATCH_FROM = 64


class Vocab:
    """A trained SentencePiece model; ``encode`` gives ids without BOS/EOS, ``decode`` drops every
    special id (padding, EOS, ``[MASK]``, ...) before detokenising."""

    def __init__(self, model_proto: bytes, *, source: str = "model_proto"):
        self.proto = bytes(model_proto)
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=self.proto)
        except (RuntimeError, OSError) as err:
            raise ValueError(f"{source} is not a SentencePiece model ({err}); load a file written by Vocab.save, "
                             "or train one with gmlm_lib.mt.vocab.train.") from None
        ids = (self.sp.pad_id(), self.sp.eos_id(), self.sp.bos_id(), self.sp.unk_id(),
               self.sp.piece_to_id(SPECIALS[0]), self.sp.piece_to_id(SPECIALS[1]))
        if ids != (PAD, EOS, BOS, UNK, MASK, LENGTH):
            raise ValueError(f"SentencePiece model has special ids {ids}; expected {(PAD, EOS, BOS, UNK, MASK, LENGTH)} "
                             "(train it with gmlm_lib.mt.vocab.train).")

    @property
    def size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text of ``texts`` (a list of strings; one string would be split into characters).

        SentencePiece encodes a list on a pool of threads that it starts for each call; for fewer than
        :data:`BATCH_FROM` texts starting the pool costs more than the encoding (a batch-1 translation
        would pay it on every sentence, in its latency), so short lists are encoded one text at a time.
        The ids are the same either way."""
        if isinstance(texts, (str, bytes)):
            raise TypeError("Vocab.encode takes a list of texts, not one string; pass [text].")
        texts = list(texts)
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"Vocab.encode: texts[{bad}] must be a string; got {type(texts[bad]).__name__}.")
        bad = next((i for i, t in enumerate(texts) if "\x00" in t), None)
        if bad is not None:
            raise ValueError(f"Vocab.encode: texts[{bad}] holds a NUL byte, which no sentence holds (SentencePiece "
                             "would encode it as a piece); remove it.")
        if len(texts) < BATCH_FROM:
            return [self.sp.encode(t, out_type=int) for t in texts]
        return self.sp.encode(texts, out_type=int)

    def decode(self, ids: Iterable[Sequence[int]]) -> list[str]:
        """The text of each row of ``ids``, the special ids below ``FIRST_PIECE`` (but UNK) left out; an id
        at or past ``size`` is a ``ValueError`` naming the row and the id (ids of another vocabulary)."""
        rows = [list(row) for row in ids]
        for r, row in enumerate(rows):
            bad = next((j for j, i in enumerate(row) if not isinstance(i, (int, np.integer)) or isinstance(i, bool)),
                       None)
            if bad is not None:
                raise TypeError(f"Vocab.decode: row {r} holds {row[bad]!r}, not an integer id; pass rows of token ids "
                                "(e.g. decoding.strip of a decoder's output).")
        rows = [[int(i) for i in row] for row in rows]
        for r, row in enumerate(rows):
            bad = next((i for i in row if i < 0 or i >= self.size), None)
            if bad is not None:
                raise ValueError(f"Vocab.decode: row {r} holds the id {bad}, outside this vocabulary's 0..{self.size - 1}; "
                                 "decode with the vocabulary the ids came from.")
        return [self.sp.decode([i for i in row if i >= FIRST_PIECE or i == UNK]) for row in rows]

    def save(self, path: str | os.PathLike) -> pathlib.Path:
        path = pathlib.Path(path)
        path.write_bytes(self.proto)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Vocab":
        path = pathlib.Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no SentencePiece model at {str(path)!r}.")
        return cls(path.read_bytes(), source=str(path))


def train(texts: Iterable[str], size: int = 8000, *, model_type: str = "unigram",
          character_coverage: float = 1.0, seed_sentencepiece_size: int = 1_000_000) -> Vocab:
    """Train a joint vocabulary of at most ``size`` pieces on ``texts`` (both languages' training
    sides). On a small corpus SentencePiece may stop below ``size`` (``hard_vocab_limit=False``);
    ``Vocab.size`` is the size reached. One thread, so the same texts give the same model."""
    if isinstance(texts, (str, bytes)):
        raise TypeError("vocab.train: texts must be a list of sentences, not one string.")
    if model_type not in ("unigram", "bpe", "char", "word"):
        raise ValueError(f"vocab.train: model_type must be 'unigram', 'bpe', 'char' or 'word'; got {model_type!r}.")
    if not 0.0 < character_coverage <= 1.0:
        raise ValueError(f"vocab.train: character_coverage must be in (0, 1]; got {character_coverage!r}.")
    texts = list(texts)
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise TypeError(f"vocab.train: texts must hold strings, one sentence each; item {bad} is "
                        f"{type(texts[bad]).__name__}.")
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ValueError("vocab.train: texts is empty; pass the training sentences of both languages.")
    size = checks.integer(size, "vocab.train: size", low=FIRST_PIECE + 2)
    seed_sentencepiece_size = checks.integer(seed_sentencepiece_size, "vocab.train: seed_sentencepiece_size", low=1)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=model, vocab_size=size, model_type=model_type,
            character_coverage=character_coverage, pad_id=PAD, eos_id=EOS, bos_id=BOS, unk_id=UNK,
            user_defined_symbols=list(SPECIALS), hard_vocab_limit=False, num_threads=1,
            seed_sentencepiece_size=seed_sentencepiece_size, minloglevel=2)
    except RuntimeError as err:  # SentencePiece's own words, e.g. "INTERNAL: ... trainer_interface.cc(638) ..."
        distinct = len(set("".join(texts)) - {" "})
        if "smaller than required_chars" in str(err):
            raise ValueError(f"vocab.train: size = {size} pieces cannot hold the {distinct} distinct characters of "
                             f"texts and the {FIRST_PIECE} special pieces; raise size (at least "
                             f"{distinct + FIRST_PIECE + 1}) or lower character_coverage.") from err
        raise ValueError(f"vocab.train: SentencePiece could not train a vocabulary of {size} pieces "
                         f"({model_type}) on {len(texts)} sentences: {err}") from err
    return Vocab(model.getvalue())
