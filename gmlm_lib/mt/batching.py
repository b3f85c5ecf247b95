"""Token batches for translation training and evaluation, and PaDIR's target corruption.

Pairs are bucketed by length so that a run compiles one training step per bucket. The batches of
epoch ``e`` are a pure function of ``(seed, e, replica)``, so training step ``t`` always sees the same
batch: a resumed run needs nothing but its step counter. Replicas of one run (models trained at once,
``replicas`` of :class:`gmlm_lib.mt.training.TrainConfig`) see the same bucket at every step, so their
batches stack into one array, each with its own pairs in it (``replica`` of :class:`Batcher`).
"""

from __future__ import annotations

import dataclasses
import hashlib

import jax
import jax.numpy as jnp
import numpy as np

from gmlm_lib.core import checks
from gmlm_lib.mt import vocab as V

DEFAULT_BUCKETS = (16, 24, 32, 48, 64)


@dataclasses.dataclass(frozen=True)
class Batch:
    """``src`` (B, S) ids, ``tgt`` (B, L) target ids without BOS/EOS; masks True on real tokens.
    ``rows`` (B,) bool, when set, marks the rows whose loss counts (:meth:`Batcher.once` fills a last
    batch with copies that must not count twice); ``None``: every row counts."""

    src: np.ndarray
    src_mask: np.ndarray
    tgt: np.ndarray
    tgt_mask: np.ndarray
    rows: np.ndarray | None = None

    def arrays(self) -> dict:
        """The batch as the objectives take it: ``src``, ``src_mask``, ``tgt``, ``tgt_mask`` and,
        when set, ``rows``."""
        out = dict(src=self.src, src_mask=self.src_mask, tgt=self.tgt, tgt_mask=self.tgt_mask)
        return out if self.rows is None else dict(out, rows=self.rows)


def pad(rows: list[list[int]], length: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id lists to (len(rows), length) with PAD, and the mask of real tokens."""
    length = checks.integer(length, "length", low=0)
    out = np.full((len(rows), length), V.PAD, np.int32)
    for i, r in enumerate(rows):
        if len(r) > length:
            raise ValueError(f"a sequence of {len(r)} tokens does not fit in length {length}.")
        out[i, : len(r)] = r
    return out, out != V.PAD


def check_buckets(buckets, name: str = "buckets") -> tuple[int, ...]:
    """``buckets`` as a tuple of increasing positive integers (the padded lengths a run compiles
    for); anything else is refused, never sorted or replaced silently."""
    if isinstance(buckets, (str, bytes)) or not isinstance(buckets, (list, tuple)):
        raise TypeError(f"{name} must be a list of increasing positive integers (padded lengths), e.g. "
                        f"{list(DEFAULT_BUCKETS)}; got {buckets!r}.")
    out = tuple(checks.integer(b, f"{name}[{i}]", low=1) for i, b in enumerate(buckets))
    if not out:
        raise ValueError(f"{name} must hold at least one length, e.g. {list(DEFAULT_BUCKETS)}; got an empty list.")
    if any(a >= b for a, b in zip(out, out[1:])):
        raise ValueError(f"{name} must be strictly increasing (the smallest bucket that fits is used); got "
                         f"{list(out)}: pass {sorted(set(out))}.")
    return out


def bucket_of(src_len: int, tgt_len: int, buckets) -> int:
    """Smallest bucket holding the source and the target plus one (EOS or BOS); -1 if none fits
    (the caller drops and counts that pair). ``buckets``: increasing lengths (:func:`check_buckets`)."""
    buckets = check_buckets(buckets)
    src_len, tgt_len = checks.integer(src_len, "src_len", low=0), checks.integer(tgt_len, "tgt_len", low=0)
    return _smallest(max(src_len, tgt_len + 1), buckets)


def _smallest(need: int, buckets: tuple[int, ...]) -> int:
    for b in buckets:
        if need <= b:
            return b
    return -1


@dataclasses.dataclass
class Batcher:
    """Bucketed, shuffled batches of about ``batch_tokens`` target-side tokens (padded).

    Each batch's size is a multiple of ``multiple`` (the data-parallel device count). Pairs too
    long for the largest bucket are dropped and counted in ``dropped`` (reported by the trainer,
    never silent); empty targets are dropped likewise.

    ``replica``: which replica of a run this batcher feeds (:meth:`replicas`). Every replica's epoch has
    replica 0's layout (the same bucket and batch size at every step, so the replicas' batches stack
    into one array for a vmapped update), and replica ``r > 0`` fills each bucket's batches from its
    own permutation of that bucket's pairs (drawn from ``(seed, e, r)``): the replicas differ in the
    order and grouping of the pairs they see, not in the lengths of their batches."""

    src: list[list[int]]
    tgt: list[list[int]]
    batch_tokens: int
    seed: int = 0
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    multiple: int = 1
    replica: int = 0

    def __post_init__(self):
        if len(self.src) != len(self.tgt):
            raise ValueError(f"src and tgt must be aligned; got {len(self.src)} and {len(self.tgt)} sequences.")
        self.buckets = check_buckets(self.buckets)
        self.batch_tokens = checks.integer(self.batch_tokens, "batch_tokens", low=1)
        self.seed = checks.integer(self.seed, "seed")
        self.multiple = checks.integer(self.multiple, "multiple", low=1)
        self.replica = checks.integer(self.replica, "replica", low=0)
        if self.batch_tokens < max(self.buckets) * self.multiple:
            raise ValueError(f"batch_tokens = {self.batch_tokens} is too small: it must hold at least "
                             f"{self.multiple} sequence(s) of the largest bucket ({max(self.buckets)} tokens).")
        self.groups: dict[int, np.ndarray] = {}
        kept = {}
        for i, (s, t) in enumerate(zip(self.src, self.tgt)):
            b = _smallest(max(len(s), len(t) + 1), self.buckets) if t else -1
            if b > 0:
                kept.setdefault(b, []).append(i)
        self.groups = {b: np.array(ix) for b, ix in sorted(kept.items())}
        self.dropped = len(self.src) - sum(len(ix) for ix in self.groups.values())
        if not self.groups:
            raise ValueError("no training pair fits the buckets; raise the largest bucket (ModelConfig.max_len).")
        self.per_epoch = sum(max(1, len(ix) // self.batch_size(b)) for b, ix in self.groups.items())
        self._epochs: dict[int, list[tuple[int, np.ndarray]]] = {}

    def fingerprint(self) -> str:
        """SHA-256 of everything that decides the batches: the token ids of every pair (in order),
        ``batch_tokens``, ``seed``, ``buckets``, ``multiple`` and ``replica``. Two batchers with the same
        fingerprint yield the same batch at every step."""
        settings = (self.batch_tokens, self.seed, tuple(self.buckets), self.multiple, len(self.src))
        if self.replica:  # replica 0 keeps the fingerprint of a batcher from before replicas
            settings += (("replica", self.replica),)
        h = hashlib.sha256(repr(settings).encode())
        for side in (self.src, self.tgt):
            h.update(np.asarray([len(r) for r in side], np.int64).tobytes())
            h.update(np.asarray([t for r in side for t in r], np.int64).tobytes())
        return h.hexdigest()

    def batch_size(self, bucket: int) -> int:
        return max(self.multiple, self.batch_tokens // bucket // self.multiple * self.multiple)

    def replicas(self, n: int) -> list["Batcher"]:
        """The batchers of replicas ``0 .. n - 1`` of a run fed by this one (``replica`` set; the same
        pairs and settings): their batches at a step have one shape."""
        n = checks.integer(n, "n", low=1)
        return [self if r == self.replica else dataclasses.replace(self, replica=r) for r in range(n)]

    def epoch(self, e: int) -> list[tuple[int, np.ndarray]]:
        """The (bucket, indices) batches of epoch ``e``, in training order (cached)."""
        if e not in self._epochs:
            rng = np.random.default_rng([self.seed, e])
            own = np.random.default_rng([self.seed, e, self.replica]) if self.replica else None
            batches = []
            for b, ix in self.groups.items():
                ix = rng.permutation(ix)
                if own is not None:  # replica 0's layout, this replica's pairs
                    ix = own.permutation(ix)
                size = self.batch_size(b)
                if len(ix) < size:  # a small bucket still trains: repeat its pairs to one batch
                    ix = np.resize(ix, size)
                batches += [(b, ix[j: j + size]) for j in range(0, len(ix) - size + 1, size)]
            order = rng.permutation(len(batches))
            self._epochs = {e: [batches[j] for j in order]}  # keep one epoch in memory
        return self._epochs[e]

    def __len__(self) -> int:
        return self.per_epoch

    def once(self) -> list[Batch]:
        """Every kept pair exactly once, bucket by bucket in corpus order, in batches of
        ``batch_size(bucket)`` pairs: the batches of a validation pass. A bucket's last batch is filled up with
        copies of its first pair, marked in ``rows`` as not counting, so a loss summed over counted
        rows covers each pair once (and the batch still splits over the devices)."""
        out = []
        for b, ix in self.groups.items():
            size = self.batch_size(b)
            for j in range(0, len(ix), size):
                part = ix[j: j + size]
                batch = self.make(b, np.concatenate([part, np.full(size - len(part), ix[0])]))
                rows = np.arange(size) < len(part)
                out.append(dataclasses.replace(batch, rows=rows))
        return out

    def make(self, bucket: int, ix: np.ndarray) -> Batch:
        src, sm = pad([self.src[i] for i in ix], bucket)
        tgt, tm = pad([self.tgt[i] for i in ix], bucket - 1)
        return Batch(src, sm, tgt, tm)

    def at(self, step: int) -> Batch:
        """The batch of training step ``step`` (0-based), epochs following each other."""
        n = self.per_epoch
        bucket, ix = self.epoch(step // n)[step % n]
        return self.make(bucket, ix)


def ar_inputs(tgt: jax.Array, tgt_mask: jax.Array):
    """Teacher forcing: (B, L) targets -> decoder input ``[BOS] y`` and output ``y [EOS]`` (B, L + 1),
    and the mask of positions that carry loss."""
    checks.shape(tgt, "tgt", (None, None), what="(batch, length)")
    checks.shape(tgt_mask, "tgt_mask", tuple(tgt.shape), what="(the shape of tgt)")
    b = tgt.shape[0]
    lengths = tgt_mask.sum(-1)
    dec_in = jnp.concatenate([jnp.full((b, 1), V.BOS, tgt.dtype), tgt], 1)
    out = jnp.concatenate([tgt, jnp.full((b, 1), V.PAD, tgt.dtype)], 1)
    out = out.at[jnp.arange(b), lengths].set(V.EOS)
    mask = jnp.arange(out.shape[1])[None] <= lengths[:, None]
    return dec_in, out, mask


def corrupt(key, tgt: jax.Array, tgt_mask: jax.Array, vocab_size: int, unmasking_rate: float,
            fill: str = "random") -> jax.Array:
    """PaDIR's training input [App. L.1.2]: each real position keeps its correct token with
    probability ``unmasking_rate``; the others become uniform random pieces (``fill="random"``)
    or ``[MASK]``. Padding stays PAD. Both may be scalar arrays, traced in a compiled update (``fill``
    then a boolean, true for ``[MASK]``: :data:`gmlm_lib.mt.training.TRACED`); the random pieces are
    drawn either way, so its value decides only which of the two fills is used."""
    checks.shape(tgt, "tgt", (None, None), what="(batch, length)")
    tgt_mask = checks.mask(tgt_mask, "tgt_mask", tuple(tgt.shape), what="(the shape of tgt)")
    if not isinstance(unmasking_rate, jax.core.Tracer):
        checks.real(unmasking_rate, "unmasking_rate", low=0.0, high=1.0)
    if isinstance(fill, str):
        if fill not in ("random", "mask"):
            raise ValueError(f"fill must be 'random' or 'mask'; got {fill!r}.")
        fill = fill == "mask"
    elif not (isinstance(fill, (bool, np.bool_, jax.Array)) and jnp.shape(fill) == ()
              and jnp.result_type(fill) == jnp.bool_):
        raise TypeError(f"fill must be 'random' or 'mask' (or a boolean scalar, true for [MASK]); got {fill!r}.")
    k1, k2 = jax.random.split(key)
    keep = jax.random.bernoulli(k1, unmasking_rate, tgt.shape)
    noise = jnp.where(fill, V.MASK, jax.random.randint(k2, tgt.shape, V.FIRST_PIECE, vocab_size, tgt.dtype))
    return jnp.where(tgt_mask, jnp.where(keep, tgt, noise), V.PAD)
