"""The encoder-decoder's masks and cache, decoding, and training (sharding, checkpoint resume)."""

import collections
import dataclasses
import functools
import itertools
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from gmlm_lib.book import provenance
from gmlm_lib.core import devtrace, timing
from gmlm_lib.mt import (batching, decode_costs, decoding, objectives, pipeline, programs, reductions, seq2seq,
                        training, translate)
from gmlm_lib.mt import vocab as V

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tiny(causal, **kw):
    cfg = seq2seq.ModelConfig(vocab=40, causal=causal, d_model=32, heads=4, enc_layers=2, dec_layers=2,
                              d_ff=64, max_len=16, dropout=0.0, **kw)
    return seq2seq.build(cfg, seed=1)


def ids(key, shape):
    return jax.random.randint(jax.random.key(key), shape, V.FIRST_PIECE, 40, jnp.int32)


def spread(model, scale=6.0, eos=None):
    """``model`` with every parameter whose path names ``embed`` or ``pos`` scaled by ``scale``: the token
    and position embeddings and, in a PaDIR model, the positional-attention sublayers (and, with ``eos``,
    the EOS row of the embeddings by ``eos`` more). At initialisation the tiny PaDIR model predicts the
    same token at every position of an all-[MASK] hypothesis, whatever the source, so decoders that differ
    in what they feed back or commit give the same output on it and a comparison with a definition cannot
    fail; scaled, the prediction depends on the position and the source, and a larger EOS row makes an AR
    model end some sentences early and run others to the length limit."""
    g, state = nnx.split(model)
    state = jax.tree_util.tree_map_with_path(
        lambda path, x: x * scale if any(w in str(q) for q in path for w in ("embed", "pos")) else x, state)
    if eos is not None:
        state["embed"]["embedding"][...] = state["embed"]["embedding"][...].at[V.EOS].multiply(eos)
    return nnx.merge(g, state)


def seven_long(model):
    """``model`` (a PaDIR model) with its length predictor's bias for seven positions raised by 50: it
    predicts seven, whatever the source."""
    model.length_head.bias[...] = model.length_head.bias[...].at[7].add(50.0)
    return model


def count_call(log: list):
    """Inside traced code: append to ``log`` on the host each time the compiled program runs this
    point (a loop's body once per iteration), so a test can count the steps a decoding loop ran."""
    jax.debug.callback(lambda: log.append(1))


def test_ar_decoder_never_sees_the_future():
    m = tiny(True)
    src, sm = ids(0, (2, 9)), jnp.ones((2, 9), bool)
    enc, em = m.encode(src, sm)
    tgt = ids(1, (2, 12))
    base = m.decode(tgt, jnp.ones_like(tgt, bool), enc, em)
    for t in (0, 5, 10):
        changed = tgt.at[:, t + 1:].set(ids(2, (2, 11 - t)))
        out = m.decode(changed, jnp.ones_like(tgt, bool), enc, em)
        np.testing.assert_array_equal(out[:, : t + 1], base[:, : t + 1])
        assert float(jnp.abs(out[:, t + 1:] - base[:, t + 1:]).max()) > 1e-4
    _, w = m.decode(tgt, jnp.ones_like(tgt, bool), enc, em, return_attention=True)
    for w_self, w_cross in w:
        assert w_self.shape == (2, 4, 12, 12) and w_cross.shape == (2, 4, 12, 10)
        np.testing.assert_allclose(w_self.sum(-1), 1.0, atol=1e-5)
        assert float(jnp.triu(w_self, 1).max()) == 0.0


@pytest.mark.parametrize("causal", [True, False])
def test_decode_takes_max_len_plus_one_positions_and_refuses_more(causal):
    """The decoder's position table has max_len + 1 rows: a target of max_len + 1 positions
    decodes, one more is refused, named (not read from a clamped position embedding)."""
    m = tiny(causal)
    enc, em = m.encode(ids(0, (1, 5)), jnp.ones((1, 5), bool))
    assert m.decode(ids(1, (1, 17)), jnp.ones((1, 17), bool), enc, em).shape == (1, 17, 40)
    with pytest.raises(ValueError, match="target length 18 exceeds ModelConfig.max_len \\+ 1 = 17"):
        m.decode(ids(1, (1, 18)), jnp.ones((1, 18), bool), enc, em)


def test_padir_decoder_never_sees_a_padded_position():
    m = tiny(False)
    src, sm = ids(0, (2, 9)), jnp.arange(9)[None] < jnp.array([[9], [5]])
    tgt, tm = ids(1, (2, 12)), jnp.arange(12)[None] < jnp.array([[12], [7]])
    enc, em = m.encode(src, sm)
    base, w = m.decode(tgt, tm, enc, em, return_attention=True)
    # other tokens in the padded target positions, and in the padded source positions
    tgt2 = jnp.where(tm, tgt, ids(3, (2, 12)))
    src2 = jnp.where(sm, src, ids(4, (2, 9)))
    enc2, em2 = m.encode(src2, sm)
    out = m.decode(tgt2, tm, enc2, em2)
    np.testing.assert_array_equal(jnp.where(tm[..., None], out, 0), jnp.where(tm[..., None], base, 0))
    np.testing.assert_array_equal(m.length_logits(enc2), m.length_logits(enc))
    for w_self, w_cross in w:
        assert float(jnp.where(~tm[:, None, None, :], w_self, 0).max()) == 0.0
        assert float(jnp.where(~em[:, None, None, :], w_cross, 0).max()) == 0.0
        np.testing.assert_allclose(w_cross.sum(-1), 1.0, atol=1e-5)
    # a real position sees the other real positions (bidirectional): changing a later one matters
    out3 = m.decode(tgt.at[0, 11].set(tgt[0, 11] % 30 + 7), tm, enc, em)
    assert float(jnp.abs(out3[0, 0] - base[0, 0]).max()) > 1e-5
    assert m.length_logits(enc).shape == (2, 17)


@pytest.mark.parametrize("rng", ["threefry", "hash"])
def test_dropout_drops_at_its_rate_and_follows_its_key(rng):
    x = jnp.full((400, 2500), 3.0)
    out = np.asarray(seq2seq.dropout(x, 0.1, jax.random.key(0), rng))
    dropped = float((out == 0).mean())
    assert abs(dropped - 0.1) <= 4.5 * np.sqrt(0.1 * 0.9 / out.size), dropped
    np.testing.assert_allclose(out[out != 0], 3.0 / 0.9, rtol=1e-6)  # inverted: the mean is kept
    assert np.array_equal(out, np.asarray(seq2seq.dropout(x, 0.1, jax.random.key(0), rng)))
    other = np.asarray(seq2seq.dropout(x, 0.1, jax.random.key(1), rng)) == 0
    assert 0.05 < float(((out == 0) != other).mean()) < 0.25  # another key, another mask (about 0.18 differ)
    rows = (out == 0).mean(1)  # no structure along the rows: each row's rate is binomial
    assert abs(float(rows.std()) - np.sqrt(0.1 * 0.9 / 2500)) < 0.002
    assert seq2seq.dropout(x, 0.1, None, rng) is x and seq2seq.dropout(x, 0.0, jax.random.key(0), rng) is x


def _fmix32(h):
    """MurmurHash3's 32-bit finaliser, written from its published constants in numpy uint32."""
    h = np.asarray(h, np.uint32)
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint32(16))
        h = h * np.uint32(0x85EBCA6B)
        h = h ^ (h >> np.uint32(13))
        h = h * np.uint32(0xC2B2AE35)
        return h ^ (h >> np.uint32(16))


def test_hash_dropout_bits_are_the_counter_hash_of_the_key():
    """dropout_bits = fmix32(fmix32(i ^ s0) + s1) for the element counter i and two words s drawn
    from the key; element i depends on i and the key only, so the bits do not depend on the
    shape they are laid out in (sharding a batch leaves them alone). Over 2^32 elements refused."""
    key = jax.random.key(3)
    s = np.asarray(jax.random.bits(key, (2,), jnp.uint32))
    i = np.arange(24, dtype=np.uint32)
    with np.errstate(over="ignore"):
        want = _fmix32(_fmix32(i ^ s[0]) + s[1])
    np.testing.assert_array_equal(np.asarray(seq2seq.dropout_bits(key, (24,))), want)
    np.testing.assert_array_equal(np.asarray(seq2seq.dropout_bits(key, (4, 6))), want.reshape(4, 6))
    assert _fmix32(0) == 0 and len(set(_fmix32(np.arange(4096, dtype=np.uint32)).tolist())) == 4096  # a bijection
    # dropout(rng="hash") drops exactly the elements whose bits fall below round(rate * 2^32)
    out = np.asarray(seq2seq.dropout(jnp.ones((4, 6)), 0.25, key, "hash"))
    np.testing.assert_array_equal(out == 0, want.reshape(4, 6) < round(0.25 * 2**32))
    # at a rate whose threshold is an element's own bits that element is kept (dropped: strictly below)
    rate = float(np.sort(want)[12]) / 2**32
    out = np.asarray(seq2seq.dropout(jnp.ones((24,)), rate, key, "hash"))
    np.testing.assert_array_equal(out == 0, want < np.sort(want)[12])
    assert (out == 0).sum() == 12
    with pytest.raises(ValueError, match="2\\^32 counters"):
        seq2seq.dropout_bits(key, (2**16, 2**16))


def test_positional_attention_is_a_padir_option():
    with_pos, without = tiny(False), tiny(False, positional_attention=False)
    assert seq2seq.count_params(with_pos) > seq2seq.count_params(without)
    assert not tiny(True).cfg.positional_attention


def test_the_parameter_count_is_the_architectures_formula():
    """count_params (the model size the chapters report) against the architecture counted by hand: tied
    token embeddings, encoder and decoder position tables of max_len + 1 rows (the encoder's position 0 is
    the [LENGTH] token), Pre-LayerNorm blocks, final LayerNorms, and in a PaDIR model positional
    attention (when on) and the length head over 0..max_len."""
    def linear(i, o):
        return i * o + o

    for causal, pos in ((True, False), (False, True), (False, False)):
        cfg = seq2seq.ModelConfig(vocab=40, causal=causal, d_model=32, heads=4, enc_layers=2, dec_layers=3,
                                  d_ff=48, max_len=16, positional_attention=pos)
        d, rows = cfg.d_model, cfg.max_len + 1
        norm, attn, mlp = 2 * d, 4 * linear(d, d), linear(d, cfg.d_ff) + linear(cfg.d_ff, d)
        enc = 2 * norm + attn + mlp
        dec = 3 * norm + 2 * attn + mlp + pos * (norm + attn)
        want = (cfg.vocab * d + 2 * rows * d + cfg.enc_layers * enc + cfg.dec_layers * dec + 2 * norm
                + (not causal) * linear(d, rows))
        assert seq2seq.count_params(seq2seq.build(cfg, seed=0)) == want, (causal, pos)


def test_build_is_one_program_with_the_modules_own_initialisation():
    """``build`` compiles one program per config whatever the seed, and gives the weights that constructing
    the module op by op gives (to float32 rounding: compiled, XLA may fold a draw's scaling); seeds differ."""
    cfg = seq2seq.ModelConfig(vocab=40, causal=False, d_model=32, heads=4, enc_layers=1, dec_layers=2, d_ff=48,
                              max_len=16)
    seq2seq.build(cfg, 0)
    clock = timing.compile_clock()
    built = [seq2seq.build(cfg, seed) for seed in (3, 4)]
    assert timing.compiles_since(clock)["compilations"] == 0
    eager = nnx.to_flat_state(nnx.state(seq2seq.Seq2Seq(cfg, rngs=nnx.Rngs(3)), nnx.Param))
    ours = nnx.to_flat_state(nnx.state(built[0], nnx.Param))
    assert [p for p, _ in eager] == [p for p, _ in ours]
    for (path, a), (_, b) in zip(eager, ours):
        np.testing.assert_allclose(np.asarray(b[...]), np.asarray(a[...]), rtol=2e-7, atol=0, err_msg=str(path))
    assert seq2seq.params_fingerprint(built[0]) != seq2seq.params_fingerprint(built[1])
    with pytest.raises(TypeError, match="ModelConfig"):
        seq2seq.build(dict(vocab=40), 0)


def _randomised(module, seed):
    """``module`` with every parameter drawn at random (0.3 x N(0, 1)): at initialisation the biases are 0
    and the LayerNorm scales 1, so a formula that drops or misplaces them would agree with its definition."""
    g, state = nnx.split(module)
    leaves, tree = jax.tree_util.tree_flatten(state)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return nnx.merge(g, jax.tree_util.tree_unflatten(
        tree, [0.3 * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]))


def _reference_block(block, h, mask, pos=None, enc=None, cross_mask=None):
    """A Pre-LayerNorm block written out in float64 NumPy from its parameters: h + Attn(LN(h)) for each
    attention sublayer (self, then positional and cross in a decoder block), then h + MLP(LN(h))."""
    def p64(v):
        return np.asarray(v[...], np.float64)

    def ln(m, x):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + m.epsilon) * p64(m.scale) + p64(m.bias)

    def lin(m, x):
        return x @ p64(m.kernel) + p64(m.bias)

    def attn(m, xq, xk, xv, mask):
        b, heads = xq.shape[0], m.heads
        q, k, v = (lin(f, x).reshape(b, x.shape[1], heads, -1) for f, x in ((m.q, xq), (m.k, xk), (m.v, xv)))
        logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
        logits = np.where(np.asarray(mask), logits, -np.inf)
        w = np.exp(logits - logits.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        return lin(m.o, np.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, xq.shape[1], -1))

    def mlp(m, x):
        u = lin(m.up, x)
        return lin(m.down, 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3))))  # GELU (tanh form)

    h = np.asarray(h, np.float64)
    x = ln(block.ln1, h)
    h = h + attn(block.attn if enc is None else block.self_attn, x, x, x, mask)
    if enc is not None:
        pos = np.asarray(pos, np.float64)
        h = h + attn(block.pos_attn, pos, pos, ln(block.ln_pos, h), mask)
        h = h + attn(block.cross, ln(block.ln_x, h), np.asarray(enc, np.float64), np.asarray(enc, np.float64),
                     cross_mask)
    return h + mlp(block.mlp, ln(block.ln2, h))


def test_the_encoder_and_decoder_blocks_are_their_pre_layernorm_definitions():
    """Each block, its parameters drawn at random, computes what its docstring says, written out in NumPy
    (_reference_block): residual sublayers in the order self-attention, positional attention (queries and
    keys from the position embeddings, values from the stream), cross-attention, MLP; masked keys get no
    weight. A sign or order slip in a residual passes the tests of causality and caching, not this one."""
    model = tiny(False)
    b, q, k, d = 2, 5, 6, model.cfg.d_model
    h, pos, enc = (jax.random.normal(jax.random.key(i), shape) for i, shape in
                   enumerate([(b, q, d), (1, q, d), (b, k, d)]))
    pos = jnp.broadcast_to(pos, (b, q, d))
    self_mask = (jnp.arange(q)[None, :] < jnp.array([[5], [3]]))[:, None, None, :].repeat(q, 2)
    cross_mask = (jnp.arange(k)[None, :] < jnp.array([[6], [2]]))[:, None, None, :].repeat(q, 2)
    enc_block = _randomised(model.encoder[0], 0)
    np.testing.assert_allclose(enc_block(h, self_mask), _reference_block(enc_block, h, self_mask),
                               rtol=1e-4, atol=1e-4)
    dec_block = _randomised(model.decoder[0], 1)
    assert dec_block.has_pos
    got = dec_block(h, pos, enc, self_mask, cross_mask)[0]
    np.testing.assert_allclose(got, _reference_block(dec_block, h, self_mask, pos, enc, cross_mask),
                               rtol=1e-4, atol=1e-4)


def test_kv_cache_matches_the_full_decoder():
    m = tiny(True)
    src, sm = ids(0, (3, 7)), jnp.ones((3, 7), bool)
    enc, em = m.encode(src, sm)
    tgt = ids(1, (3, 10))
    full = m.decode(tgt, jnp.ones_like(tgt, bool), enc, em)
    cache, cross = m.init_cache(3, 16), m.cross_kv(enc)
    for t in range(10):
        step, cache = m.decode_step(tgt[:, t], jnp.int32(t), cache, cross, em)
        np.testing.assert_allclose(step, full[:, t], atol=2e-5)


@pytest.fixture(scope="module")
def trained_ar(tmp_path_factory):
    """An AR model trained to reverse short sequences (so that it ends them with EOS)."""
    cfg = dataclasses.replace(_cfg("ar"), steps=150, checkpoint_every=150, log_every=50, learning_rate=3e-3)
    return training.train(cfg, _toy_batcher(), tmp_path_factory.mktemp("ar") / "run", progress=False).model


def test_beam_of_one_is_greedy_and_beam_is_at_least_as_likely(trained_ar):
    m = trained_ar
    g, p = nnx.split(m)
    rng = np.random.default_rng(1)
    src, sm = batching.pad([list(rng.integers(6, 40, n)) for n in (3, 4, 5, 6)], 8)
    src, sm = jnp.asarray(src), jnp.asarray(sm)
    greedy = decoding.ar_greedy(g, p, src, sm, max_len=16)
    one, _ = decoding.ar_beam(g, p, src, sm, max_len=16, beam=1, alpha=0.0)
    np.testing.assert_array_equal(one, greedy)
    four, scores = decoding.ar_beam(g, p, src, sm, max_len=16, beam=4, alpha=0.0)
    assert (np.asarray(greedy) == V.EOS).any(-1).all() and (np.asarray(four) == V.EOS).any(-1).all()

    def logp(out):  # teacher-forced log-probability of a finished output (EOS included)
        rows = decoding.strip(np.asarray(out))
        tgt, tm = batching.pad(rows, 15)
        dec_in, y, mask = batching.ar_inputs(jnp.asarray(tgt), jnp.asarray(tm))
        enc, em = m.encode(src, sm)
        lp = jax.nn.log_softmax(m.decode(dec_in, mask, enc, em).at[..., jnp.array([0, 2, 4, 5])].set(-jnp.inf))
        return (jnp.take_along_axis(lp, y[..., None], -1)[..., 0] * mask).sum(-1)

    assert bool((logp(four) >= logp(greedy) - 1e-4).all())
    np.testing.assert_allclose(scores, logp(four), atol=1e-4)


@functools.partial(jax.jit, static_argnums=0)
def _full_decoder(graph, params, seqs, enc, em):
    """The decoder's logits at every position of ``seqs`` (n, L), no cache: one compiled program per shape
    (a plain jax.jit of the split model: nnx.jit flattens the model's graph again at every call)."""
    return nnx.merge(graph, params).decode(seqs, jnp.ones(seqs.shape, bool), enc, em)


@functools.partial(jax.jit, static_argnums=0)
def _encoder(graph, params, src, sm):
    """The encoder states and mask of ``src`` (n, S), as ``_full_decoder`` reads them."""
    return nnx.merge(graph, params).encode(src, sm)


def _beam_by_definition(model, src, sm, beam, alpha, max_len):
    """fairseq's beam search for one sentence, written out with the full decoder (no cache): the 2k best
    (hypothesis, next token) pairs are the candidates; an EOS among the k best finishes its hypothesis,
    scored log p / ((5 + |y|) / 6) ** alpha (|y| counts EOS); the k best other candidates stay alive;
    the search stops at k finished, or when no alive beam can beat the best finished one even at
    ``max_len``. Returns the best finished hypothesis (else the best alive) padded to ``max_len``, and
    its score."""
    def penalty(n):
        return ((5.0 + n) / 6.0) ** alpha

    graph, params = nnx.split(model)
    enc, em = _encoder(graph, params, src, sm)
    alive, finished = [((V.BOS,), 0.0)], []
    for t in range(max_len):
        if len(finished) >= beam or (finished and finished[0][1] >= alive[0][1] / penalty(max_len)):
            break
        n = len(alive)  # each prefix padded to max_len + 1: the causal decoder's logits at t ignore what follows
        seqs = jnp.asarray([list(s) + [V.PAD] * (max_len - t) for s, _ in alive])
        logits = _full_decoder(graph, params, seqs, jnp.repeat(enc, n, 0), jnp.repeat(em, n, 0))[:, t]
        lp = np.asarray(jax.nn.log_softmax(logits.at[:, jnp.array(decoding._AR_FORBIDDEN)].set(-jnp.inf)))
        cands = sorted(((a + float(lp[i, v]), s + (v,)) for i, (s, a) in enumerate(alive)
                        for v in range(lp.shape[1]) if np.isfinite(lp[i, v])), key=lambda c: -c[0])[: 2 * beam]
        finished = sorted(finished + [(s, c / penalty(t + 1)) for r, (c, s) in enumerate(cands)
                                      if r < beam and s[-1] == V.EOS], key=lambda f: -f[1])[:beam]
        alive = [(s, c) for c, s in cands if s[-1] != V.EOS][:beam]
    best, score = finished[0] if finished else (alive[0][0], alive[0][1] / penalty(max_len))
    return list(best[1:]) + [V.PAD] * (max_len + 1 - len(best)), score


def test_beam_search_is_its_definition_and_a_row_stops_whatever_the_batch():
    """``ar_beam`` on a batch gives, row by row, the beam search written out for that sentence alone
    (fairseq's rules, GNMT length penalty): a row that has stopped keeps its finished hypotheses while
    longer rows go on. On a model that ends some sentences early and runs others to the limit; row 9
    of the second setting is one where decoding on would have found a better-scored hypothesis after
    the row had stopped (the batch would then change a sentence's output); with the EOS row scaled by 2.5,
    rows 9 and 19 are ones where an EOS ranked below the k best candidates would have finished a hypothesis
    that wins."""
    src, sm = ids(200, (80, 8))[60:], jnp.ones((20, 8), bool)
    ends = 0
    for eos, beam, alpha in [(4.0, 2, 0.0), (4.0, 2, 1.0), (4.0, 4, 0.6), (2.5, 2, 0.0)]:
        m = spread(tiny(True), scale=3.0, eos=eos)
        g, p = nnx.split(m)
        got, scores = decoding.ar_beam(g, p, src, sm, max_len=12, beam=beam, alpha=alpha)
        for r in range(20):
            want, score = _beam_by_definition(m, src[r:r + 1], sm[r:r + 1], beam, alpha, 12)
            np.testing.assert_array_equal(np.asarray(got[r]), want, err_msg=f"beam {beam}, alpha {alpha}, row {r}")
            assert float(scores[r]) == pytest.approx(score, abs=1e-4)
            ends += V.EOS in want
    assert 0 < ends < 80  # some sentences end before the limit and some run into it


def test_padir_decoding_outputs():
    m = tiny(False)
    g, p = nnx.split(m)
    src, sm = ids(6, (3, 8)), jnp.ones((3, 8), bool)
    opts = decoding.PadirOptions(steps=4, hyps=3)
    out = decoding.padir(g, p, src, sm, jax.random.key(0), options=opts, max_len=16, buckets=(8, 16))
    toks, length = np.asarray(out["ids"]), np.asarray(out["length"])
    for row, n in zip(toks, length):
        assert 1 <= n <= 16 and set(row[n:].tolist()) <= {V.PAD}
        assert min(row[:n]) >= V.FIRST_PIECE
    assert out["history"].shape == (4, 3, toks.shape[1]) and 1 <= int(out["steps"]) <= 4
    np.testing.assert_array_equal(out["history"][-1], toks)
    again = decoding.padir(g, p, src, sm, jax.random.key(0), options=opts, max_len=16, buckets=(8, 16))
    np.testing.assert_array_equal(again["ids"], toks)
    masked = decoding.padir(g, p, src, sm, jax.random.key(0), options=decoding.PadirOptions(1, 1, init="mask"),
                            max_len=16, return_attention=True)
    assert len(masked["attention"]) == 2
    with pytest.raises(ValueError, match="init"):
        decoding.PadirOptions(init="noise")


@pytest.mark.parametrize("opts", [decoding.PadirOptions(steps=4, hyps=3), decoding.PadirOptions(steps=2, hyps=1, init="mask"),
                                  decoding.PadirOptions(steps=3, hyps=2, remask_stutter=False, early_stop=False)])
def test_one_program_padir_gives_the_two_call_ids(opts):
    """``padir_ids`` (the width chosen on the device, one compiled call) returns the ids of the
    two-call ``padir`` (the width chosen on the host), padded to the widest width; over sources
    whose predicted lengths fall in different widths, so every branch of its switch is used."""
    widths = decoding.hypothesis_widths((4, 8, 32), 16)
    assert widths == (4, 8, 16)
    used = set()
    for seed, favoured in enumerate([(2, 3, 4), (5, 6, 7), (9, 12, 16), (1, 2, 3)]):
        m = tiny(False)  # its length predictor pushed towards `favoured`, so each width gets used
        m.length_head.bias[...] = m.length_head.bias[...].at[jnp.array(favoured)].add(50.0)
        g, p = nnx.split(m)
        src, sm = ids(40 + seed, (2, 8)), jnp.arange(8)[None, :] < jnp.array([[8], [2 + seed]])
        two = decoding.padir(g, p, src, sm, jax.random.key(seed), options=opts, max_len=16, buckets=widths)
        one = np.asarray(decoding.padir_ids(g, p, src, sm, jax.random.key(seed), options=opts, widths=widths))
        w = two["ids"].shape[1]
        used.add(w)
        assert one.shape == (2, 16) and (one[:, w:] == V.PAD).all()
        np.testing.assert_array_equal(one[:, :w], two["ids"])
    assert used == set(widths), used


def test_the_width_index_is_the_smallest_width_holding_the_longest_length_and_the_last_past_them():
    """The branch ``padir_ids`` takes: the smallest width that holds the longest predicted length of the
    batch, the widest where none does (``lax.switch`` would clamp a larger index too, so only this
    helper's own answer shows it)."""
    widths = (4, 8, 16)
    for lengths, want in [([1, 3], 0), ([4], 0), ([5, 2], 1), ([2, 9], 2), ([16], 2), ([17], 2), ([40, 1], 2)]:
        assert int(decoding._width_index(widths, jnp.asarray(lengths))) == want, lengths


def test_a_traced_number_of_passes_is_refused_where_it_cannot_be_honoured():
    """_refine takes a traced T (the decoders' ``steps`` argument) with per-pass records only when told
    their rows (``records``: a row a pass, at most that many) and never with unrolled passes (their
    count is fixed when the program is built)."""
    with pytest.raises(ValueError, match=r"a traced number of passes with history needs records"):
        decoding._refine(None, None, None, None, None, decoding.PadirOptions(), 8, history=True,
                         numbers={"steps": 3})
    with pytest.raises(ValueError, match=r"unrolled passes need a constant T \(options.steps\), not a traced one"):
        decoding._refine(None, None, None, None, None, decoding.PadirOptions(unroll=True), 8, history=False,
                         numbers={"steps": 3})


def test_unrolled_passes_decode_as_the_loop_does_with_no_loop_in_the_program():
    """``PadirOptions(unroll=True)``: the same ids as the device loop (early stop included: the passes
    after it are computed and discarded), T a constant of the program instead of an argument, and no
    loop left in the compiled program (with the [MASK] start: a random start draws its tokens with
    threefry, which the CPU lowers to loops of known length)."""
    widths = decoding.hypothesis_widths((8,), 16)
    stopped = 0
    # two settings between them cover each option's other value: random and [MASK] starts, one and
    # several hypotheses, stutter re-masking off and on, the early stop on (it stops: the seed is
    # chosen so) and off
    for seed, opts in [(53, decoding.PadirOptions(steps=6, hyps=2, remask_stutter=False)),
                       (1, decoding.PadirOptions(steps=3, hyps=1, init="mask", early_stop=False))]:
        m = tiny(False)
        g, p = nnx.split(m)
        src, sm = ids(60 + seed, (3, 8)), jnp.arange(8)[None, :] < jnp.array([[8], [4], [6]])
        unrolled = dataclasses.replace(opts, unroll=True)
        looped = decoding.padir_ids(g, p, src, sm, jax.random.key(seed), options=opts, widths=widths)
        np.testing.assert_array_equal(
            decoding.padir_ids(g, p, src, sm, jax.random.key(seed), options=unrolled, widths=widths), looped)
        a = decoding.padir(g, p, src, sm, jax.random.key(seed), options=opts, max_len=16, buckets=widths)
        b = decoding.padir(g, p, src, sm, jax.random.key(seed), options=unrolled, max_len=16, buckets=widths)
        assert int(a["steps"]) == int(b["steps"])
        stopped += int(a["steps"]) < opts.steps
        for k in ("ids", "history", "pass_best"):
            np.testing.assert_array_equal(a[k], b[k])
    assert stopped > 0  # an early stop was among the cases, so the discarded passes were exercised
    masked = decoding.PadirOptions(steps=5, hyps=2, init="mask")  # not the default T, so a constant T shows
    m = tiny(False)
    g, p = nnx.split(m)
    src, sm = ids(3, (1, 8)), jnp.ones((1, 8), bool)
    text = {}
    for unroll in (False, True):
        structure, numbers = decoding._dynamic(dataclasses.replace(masked, unroll=unroll))
        fn = decoding.jitted(decoding._padir_ids, g, options=structure, widths=widths)
        text[unroll] = fn._plain.lower(p, src, sm, jax.random.key(0), numbers).as_text()
        assert ("steps" in numbers) != unroll and (structure.steps == 5) == unroll  # T: argument or constant
    # looped: one in each width's branch, beside the random start's draw (the start an operand there, and
    # threefry lowered to loops on a CPU); unrolled: none
    assert text[False].count("stablehlo.while") >= len(widths) and text[True].count("stablehlo.while") == 0
    assert translate.Method("padir", padir=dataclasses.replace(masked, unroll=True)).label == \
        "PaDIR T=5, #hyp=2, unrolled"
    with pytest.raises(TypeError, match="PadirOptions.unroll must be True or False"):
        decoding.PadirOptions(unroll=1)
    with pytest.raises(TypeError, match="PadirOptions.early_stop must be True or False"):
        decoding.PadirOptions(early_stop="no")


def _padir_translator(seed=7, sentences=40, translator_seed=3, **kw):
    """A Translator (its decoding seed ``translator_seed``) of an untrained PaDIR model (weights from
    ``seed``, logits spread so that outputs differ by sentence) with buckets 8, 16 and 32, and
    ``sentences`` sentences of 1 to 11 words of its vocabulary."""
    words = "a small dog runs on the grass in park near two men with red hats".split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 12))) for _ in range(sentences)]
    v = V.train(texts + [" ".join(words)] * 5, 60)
    cfg = seq2seq.ModelConfig(vocab=v.size, causal=False, d_model=32, heads=4, enc_layers=1, dec_layers=1,
                              d_ff=64, max_len=32)
    model = spread(seq2seq.build(cfg, seed))
    return translate.Translator(model, v, buckets=(8, 16, 32), seed=translator_seed, **kw), texts


def test_the_unrolled_translation_decoder_holds_no_loop_and_no_branch():
    """PadirOptions(unroll=True) in padir_ids: one straight-line program over the widest hypothesis width,
    with the translations of the looped decoder over every width. Lowered for a GPU (no GPU needed) it
    holds no while, case or if: nothing in it reads a condition back to the host; the looped one holds
    its loop. Compiled for this CPU, every loop left is the counter hash's rolled rounds, a known trip
    count. The mask computed in the program (src_mask None) gives the mask's own results."""
    tr, texts = _padir_translator()
    looped = translate.Method("padir", padir=decoding.PadirOptions(steps=3, hyps=2))
    unrolled = translate.Method("padir", padir=decoding.PadirOptions(steps=3, hyps=2, unroll=True))
    batched = tr.translate(texts, looped, batch_size=16)
    assert len(set(batched)) > 10
    assert tr.translate(texts, unrolled, batch_size=16) == batched
    assert [tr.translate_one(t, unrolled) for t in texts[:8]] == batched[:8]
    src, mask = batching.pad(tr.vocab.encode(texts[:4]), 16)
    for method in (looped, unrolled):
        given = decoding.padir_ids(tr.graphdef, tr.flat, src, mask, tr.key, options=method.padir, widths=tr.widths)
        computed = decoding.padir_ids(tr.graphdef, tr.flat, src, None, tr.key, options=method.padir, widths=tr.widths)
        np.testing.assert_array_equal(given, computed)
    text = {}
    for name, method in (("looped", looped), ("unrolled", unrolled)):
        structure, numbers = decoding._dynamic(method.padir)
        widths = tr.widths[-1:] if method.padir.unroll else tr.widths
        fn = decoding.jitted(decoding._padir_ids, tr.graphdef, options=structure, widths=widths)._for(tr.flat.treedef)
        traced = fn.trace(tr.flat.leaves, src[:1], None, tr.key, numbers)
        text[name] = traced.lower(lowering_platforms=("cuda",)).as_text()
        compiled = traced.lower().compile().as_text()
        loops = [line for line in compiled.splitlines() if re.search(r"= \S+ while\(", line.split("metadata=")[0])]
        if name == "unrolled":
            assert all('"known_trip_count"' in line for line in loops), loops
    assert all(text["unrolled"].count(op) == 0 for op in ("stablehlo.while", "stablehlo.case", "stablehlo.if"))
    assert text["looped"].count("stablehlo.while") >= 1 and text["looped"].count("stablehlo.case") == 1


@pytest.mark.slow  # reads the runtime's event names in a profile: in the main suite, not the newest-versions job
@pytest.mark.parametrize("way", ["copy", "pinned"])
def test_a_translation_runs_one_program_with_one_copy_in_and_at_most_one_back(way):
    """A batch-1 translation copies its source to the device (its mask is computed there), runs one compiled
    program and copies its output back once ("copy") or reads it from the host memory the program wrote
    it to ("pinned"): no other transfer (none implicit from the device), the same translations either way,
    batched or alone."""
    tr, texts = _padir_translator()
    ar_cfg = dataclasses.replace(tr.cfg, causal=True)
    ar = translate.Translator(seq2seq.build(ar_cfg, 2), tr.vocab, buckets=(8, 16, 32))
    systems = [(tr, translate.Method("padir", padir=decoding.PadirOptions(steps=3, hyps=1, unroll=True))),
               (tr, translate.Method("padir", padir=decoding.PadirOptions(steps=3, hyps=2))),
               (ar, translate.Method("greedy"))]
    expected = [t.translate(texts[:12], m, batch_size=4) for t, m in systems]
    for t, _ in systems:
        t.host_output = way
    assert tr.host_output == way and tr.to_host == (way == "pinned")
    for (t, method), want in zip(systems, expected):
        assert t.translate(texts[:12], method, batch_size=4) == want
        with jax.transfer_guard_device_to_host("disallow"), jax.transfer_guard_device_to_device("disallow"):
            assert [t.translate_one(x, method) for x in texts[:3]] == want[:3]
        counts = devtrace.count_dispatches(lambda t=t, m=method: t.translate_one(texts[0], m))
        assert counts == {"programs": 1, "to_device": 1, "to_host": int(way == "copy")}, (method.label, counts)


def test_the_host_output_is_chosen_by_its_time_and_set_on_every_translator(monkeypatch):
    """decode_costs.choose_host_output times both ways on the decoder and sets the faster on every
    translator; a placement the device refuses leaves the copy, saying why; a bad way is refused by name."""
    tr, texts = _padir_translator()
    other, _ = _padir_translator(seed=8)
    method = translate.Method("padir", padir=decoding.PadirOptions(steps=2, hyps=1, unroll=True))
    got = decode_costs.choose_host_output(tr, method, texts[0], others=[other], min_time=0.03)
    assert set(got["ms"]) == {"copy", "pinned"} and got["error"] is None
    assert got["choice"] == min(got["ms"], key=got["ms"].get) == tr.host_output == other.host_output
    monkeypatch.setattr(timing, "best_times", lambda fns, _: {name: (0.0 if name == "copy" else 1.0) for name in fns})
    assert decode_costs.choose_host_output(tr, method, texts[0])["choice"] == "copy" == tr.host_output
    monkeypatch.setattr(decoding, "has_host_memory", lambda device=None: False)
    got = decode_costs.choose_host_output(tr, method, texts[0], others=(other,))
    assert got["choice"] == "copy" and "no 'pinned_host' memory" in got["error"] and other.host_output == "copy"
    with pytest.raises(ValueError, match="offers no 'pinned_host' memory"):
        tr.host_output = "pinned"
    assert tr.host_output == "copy"  # "auto" where there is none
    tr.host_output = "auto"
    assert tr.host_output == "copy"
    with pytest.raises(ValueError, match=r"host_output must be one of \('auto', 'pinned', 'copy'\); got 'disk'"):
        translate.Translator(seq2seq.build(tr.cfg), tr.vocab, host_output="disk")
    with pytest.raises(ValueError, match="does not fit this model"):
        decode_costs.choose_host_output(tr, translate.Method("greedy"), texts[0])


def _refine_by_definition(model, enc, enc_mask, lengths, key, opts, width):
    """PaDIR's refinement written from its definition [App. L.1.1], for comparison: every pass
    decodes from the encoder states, takes log_softmax over the allowed ids and its jnp.argmax."""
    b, l = lengths.shape
    lengths = lengths.reshape(-1)
    enc, enc_mask = jnp.repeat(enc, l, 0), jnp.repeat(enc_mask, l, 0)
    tmask = jnp.arange(width)[None, :] < lengths[:, None]
    # row r's hypotheses: drawn from fold_in(key, r) (or its own key) at the model's full width, cut to width
    keys = key if key.ndim == 1 else jnp.stack([jax.random.fold_in(key, r) for r in range(b)])
    full = max(model.cfg.max_len, width)
    draws = jnp.stack([jax.random.randint(k, (l, full), V.FIRST_PIECE, model.cfg.vocab, jnp.int32) for k in keys])
    fill = jnp.full((b * l, width), V.MASK, jnp.int32) if opts.init == "mask" else draws[:, :, :width].reshape(b * l, width)
    hyp = jnp.where(tmask, fill, V.PAD)
    prev, history, scores = None, [], []
    for _ in range(opts.steps):
        logits = model.decode(hyp, tmask, enc, enc_mask)
        logp = jax.nn.log_softmax(logits.at[..., jnp.array(decoding._PADIR_FORBIDDEN)].set(-jnp.inf))
        pred = jnp.where(tmask, jnp.argmax(logp, -1), V.PAD)
        score = (jnp.max(logp, -1) * tmask).sum(-1) / tmask.sum(-1)
        history.append(pred)
        scores.append(score)
        stop = prev is not None and bool(jnp.all(pred == prev))
        hyp = jnp.where(decoding.stutter_positions(pred, tmask), V.MASK, pred) if opts.remask_stutter else pred
        prev = pred
        if stop and opts.early_stop:
            break
    pick = jnp.arange(b) * l + jnp.argmax(score.reshape(b, l), -1)
    tops = [jnp.arange(b) * l + jnp.argmax(s.reshape(b, l), -1) for s in scores]
    return dict(ids=pred[pick], score=score[pick], steps=len(history), history=jnp.stack(history)[:, pick],
                pass_best=jnp.stack([h[t] for h, t in zip(history, tops)]),
                pass_best_score=jnp.stack([s[t] for s, t in zip(scores, tops)]))


@pytest.mark.parametrize("opts", [decoding.PadirOptions(steps=6, hyps=3), decoding.PadirOptions(steps=3, hyps=2, init="mask"),
                                  decoding.PadirOptions(steps=5, hyps=1, remask_stutter=False, early_stop=False),
                                  decoding.PadirOptions(steps=6, hyps=3, unroll=True),
                                  decoding.PadirOptions(steps=5, hyps=1, remask_stutter=False, unroll=True)])
def test_padir_refinement_follows_its_definition(opts):
    """The jitted loop (cross-attention projected once, the two-pass argmax, the score without the
    log-softmax array) gives the ids, history, pass count and scores of the definition."""
    m = tiny(False)
    g, p = nnx.split(m)
    for seed in range(3):
        src, sm = ids(10 + seed, (4, 8)), jnp.arange(8)[None, :] < jnp.array([[8], [5], [3], [7]])
        enc, em, lengths = decoding.padir_encode(g, p, src, sm, hyps=opts.hyps)
        key = jax.random.key(seed)
        out = decoding.padir_refine(g, p, enc, em, lengths, key, options=opts, width=16)
        ref = _refine_by_definition(m, enc, em, lengths, key, opts, 16)
        np.testing.assert_array_equal(out["ids"], ref["ids"])
        assert int(out["steps"]) == ref["steps"]
        np.testing.assert_array_equal(out["history"][: ref["steps"]], ref["history"])
        np.testing.assert_array_equal(out["pass_best"][: ref["steps"]], ref["pass_best"])
        np.testing.assert_allclose(out["score"], ref["score"], rtol=0, atol=1e-6)
        np.testing.assert_allclose(out["pass_best_score"][: ref["steps"]], ref["pass_best_score"], rtol=0, atol=1e-6)
        for t in range(ref["steps"], opts.steps):  # after an early stop, the rows repeat the last pass
            np.testing.assert_array_equal(out["history"][t], out["ids"])
            np.testing.assert_array_equal(out["pass_best"][t], out["ids"])


def test_greedy_decoding_stops_once_every_row_has_ended_and_at_max_len_otherwise(monkeypatch):
    """``ar_greedy``'s loop runs while t < max_len *and* some row is open: with every row ending on the
    first step it runs one step (counted by a host callback), and with no row ever ending it runs max_len
    steps and returns (its output then has no EOS). The outputs alone cannot tell: the steps after every
    row has ended write PAD where PAD already is."""
    steps = []

    def emitting(token):
        def next_token(logits):
            count_call(steps)
            return jnp.full(logits.shape[:1], token, jnp.int32)
        return next_token

    g, p = nnx.split(tiny(True))
    src, sm = ids(3, (2, 5)), jnp.ones((2, 5), bool)
    for token, want_steps in ((V.EOS, 1), (V.FIRST_PIECE, 6)):  # an ending row first: a loop that never stops
        monkeypatch.setattr(decoding, "ar_next_token", emitting(token))  # would hang on the second
        steps.clear()
        out = np.asarray(jax.jit(lambda p: decoding._ar_greedy(g, p, src, sm, max_len=6))(p))
        jax.effects_barrier()
        assert len(steps) == want_steps, token
        want = np.full((2, 6), V.PAD if token == V.EOS else token)
        want[:, 0] = token
        np.testing.assert_array_equal(out, want)


def test_beam_search_stops_once_every_row_is_done_and_at_max_len_otherwise(monkeypatch):
    """``ar_beam``'s loop runs while t < max_len *and* some row is not done: with EOS certain on the
    first step every row is done after one step (its finished hypothesis cannot be beaten), and with EOS
    never among the best candidates it runs max_len steps and falls back to the best alive beam. Steps
    are counted by a host callback in the logits filter the loop calls once a step; the outputs alone
    cannot tell, since a done row keeps its finished hypotheses."""
    steps = []

    def favouring(token):
        def forbid(logits, _):  # every other id 1e4 below ``token``, EOS far below unless it is ``token``
            count_call(steps)
            return jnp.full_like(logits, -1e4).at[..., V.EOS].set(-1e6).at[..., token].set(0.0)
        return forbid

    g, p = nnx.split(tiny(True))
    src, sm = ids(4, (2, 5)), jnp.ones((2, 5), bool)
    for token, want_steps in ((V.EOS, 1), (V.FIRST_PIECE, 6)):  # a stopping case first: a loop that never
        monkeypatch.setattr(decoding, "_forbid", favouring(token))  # stops would hang on the second
        steps.clear()
        out, score = jax.jit(lambda p: decoding._ar_beam(g, p, src, sm, 0.6, max_len=6, beam=2))(p)
        jax.effects_barrier()
        assert len(steps) == want_steps, token
        want = np.full((2, 6), V.PAD if token == V.EOS else token)
        want[:, 0] = token
        np.testing.assert_array_equal(out, want)
        assert np.all(np.abs(np.asarray(score)) < 1e-3)  # log p of the certain path, ~0 either way


def test_padir_refinement_stops_at_the_first_repeated_prediction_and_at_t_otherwise(monkeypatch):
    """``_refine``'s loop runs while t < T *and* the prediction still changes: a pass that predicts the
    same tokens whatever its input stops the decode after two passes (the second repeats the first),
    and one that alternates between two tokens runs all T; without early stop T either way. ``steps``
    and a host callback in the pass agree; unrolled, ``steps`` is the same while every pass is computed.
    The outputs alone cannot tell: the passes after a repeat predict the same tokens again."""
    calls = []

    def constant(model, hyp, tmask, enc_mask, cross):
        count_call(calls)
        return jnp.where(tmask, V.FIRST_PIECE, V.PAD), jnp.zeros(hyp.shape[:1], jnp.float32)

    def alternating(model, hyp, tmask, enc_mask, cross):
        count_call(calls)
        a, b = V.FIRST_PIECE, V.FIRST_PIECE + 1
        return jnp.where(tmask, jnp.where(hyp == a, b, a), V.PAD), jnp.zeros(hyp.shape[:1], jnp.float32)

    g, p = nnx.split(tiny(False))
    src, sm = ids(5, (2, 6)), jnp.ones((2, 6), bool)
    base = decoding.PadirOptions(steps=5, hyps=2, init="mask", remask_stutter=False)
    enc, em, lengths = decoding.padir_encode(g, p, src, sm, hyps=2)
    cases = [(constant, base, 2, 2), (constant, dataclasses.replace(base, unroll=True), 2, 5),  # stopping first:
             (alternating, base, 5, 5), (constant, dataclasses.replace(base, early_stop=False), 5, 5)]  # no hang
    for fn, opts, want_steps, want_calls in cases:
        monkeypatch.setattr(decoding, "refine_pass", fn)
        calls.clear()
        structure, numbers = decoding._dynamic(opts)  # T traced, as padir_refine compiles it (constant unrolled)
        out = jax.jit(lambda p: decoding._padir_refine(g, p, enc, em, lengths, jax.random.key(0), numbers,
                                                       options=structure, width=8, return_attention=False,
                                                       records=opts.steps))(p)
        jax.effects_barrier()
        assert (int(out["steps"]), len(calls)) == (want_steps, want_calls), (fn.__name__, opts)
        last = V.FIRST_PIECE + 1 if fn is alternating and want_steps % 2 == 0 else V.FIRST_PIECE
        np.testing.assert_array_equal(out["ids"], np.where(np.arange(8) < np.asarray(out["length"])[:, None],
                                                           last, V.PAD))


def test_refinement_records_of_several_T_share_one_program_and_decode_as_each_T():
    """With ``records`` fixed, T is an operand of the recording decoder: T = 2, 4 and 6 compile one
    program (with attention: one more), each decodes as itself (the ids, steps and records of the
    default ``records = T`` call), and the rows past the passes run repeat the last one. Fewer records
    than passes, and other records with unrolled passes, are refused by name."""
    m = tiny(False)
    g, p = nnx.split(m)
    src, sm = ids(31, (3, 8)), jnp.ones((3, 8), bool)
    decoding.clear_compiled()
    for steps in (2, 4, 6):
        opts = decoding.PadirOptions(steps=steps, hyps=2, early_stop=False)
        alone = decoding.padir(g, p, src, sm, jax.random.key(5), options=opts, max_len=16, buckets=(16,))
        for attention in (False, True):
            out = decoding.padir(g, p, src, sm, jax.random.key(5), options=opts, max_len=16, buckets=(16,),
                                 records=6, return_attention=attention)
            assert int(out["steps"]) == steps and out["history"].shape[0] == out["pass_best"].shape[0] == 6
            np.testing.assert_array_equal(out["ids"], alone["ids"])
            np.testing.assert_array_equal(out["history"][:steps], alone["history"])
            np.testing.assert_array_equal(out["pass_best"][:steps], alone["pass_best"])
            for t in range(steps, 6):
                np.testing.assert_array_equal(out["history"][t], out["ids"])
    recorded = [f for (_, fn, *rest), f in decoding._COMPILED.items()
                if fn is decoding._padir_refine and ("records", 6) in rest[0]]
    assert len(recorded) == 2 and all(f._cache_size() == 1 for f in recorded)  # with and without attention
    with pytest.raises(ValueError, match="records = 3 is fewer than the 4 passes"):
        decoding.padir(g, p, src, sm, jax.random.key(5), options=decoding.PadirOptions(steps=4), max_len=16,
                       records=3)
    with pytest.raises(ValueError, match="unrolled"):
        decoding.padir(g, p, src, sm, jax.random.key(5), options=decoding.PadirOptions(steps=4, unroll=True),
                       max_len=16, records=6)


def test_pass_best_row_is_the_decode_stopped_after_that_pass():
    """Row t of ``pass_best`` is what decoding with T = t + 1 (same key) returns: the hypothesis
    best after that pass, which with several length hypotheses need not be the one chosen at the
    end (``history``). Checked on seeds where the two differ, so the test can fail."""
    m = tiny(False)
    g, p = nnx.split(m)
    differs = 0
    for seed in range(6):
        src, sm = ids(20 + seed, (4, 8)), jnp.ones((4, 8), bool)
        opts = decoding.PadirOptions(steps=5, hyps=3, early_stop=False)
        full = decoding.padir(g, p, src, sm, jax.random.key(seed), options=opts, max_len=16, buckets=(16,))
        for t in range(1, opts.steps + 1):
            short = decoding.padir(g, p, src, sm, jax.random.key(seed), options=dataclasses.replace(opts, steps=t),
                                   max_len=16, buckets=(16,))
            np.testing.assert_array_equal(full["pass_best"][t - 1], short["ids"])
            np.testing.assert_allclose(full["pass_best_score"][t - 1], short["score"], rtol=0, atol=1e-6)
            differs += int(np.any(np.asarray(full["history"][t - 1]) != np.asarray(short["ids"])))
    assert differs > 0


def test_two_pass_argmax_is_jnp_argmax():
    rng = np.random.default_rng(0)
    cases = [rng.normal(size=(5, 9)), rng.integers(0, 3, size=(4, 6, 7)).astype(np.float32),  # many ties
             np.array([[-np.inf, -np.inf, -np.inf], [1.0, np.nan, np.nan], [np.nan, 2.0, 3.0], [0.0, -0.0, 0.0]]),
             rng.integers(-5, 5, size=(3, 11)), rng.normal(size=(13,)).astype(np.float32)]
    for x in cases:
        for arr in (jnp.asarray(x), jnp.asarray(x, jnp.bfloat16) if x.dtype.kind == "f" else jnp.asarray(x)):
            got = reductions.argmax(arr)
            assert got.dtype == jnp.int32
            np.testing.assert_array_equal(got, jnp.argmax(arr, -1))
            np.testing.assert_array_equal(jax.jit(reductions.argmax)(arr), jnp.argmax(arr, -1))
    with pytest.raises(ValueError, match="non-empty last axis"):
        reductions.argmax(jnp.zeros((3, 0)))


def test_decoder_reads_projected_encoder_states():
    m = tiny(False)
    src, sm = ids(3, (2, 8)), jnp.ones((2, 8), bool)
    enc, em = m.encode(src, sm)
    tgt, tm = ids(4, (2, 6)), jnp.ones((2, 6), bool)
    np.testing.assert_allclose(m.decode(tgt, tm, None, em, cross_kv=m.cross_kv(enc)), m.decode(tgt, tm, enc, em),
                               rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="exactly one of the two"):
        m.decode(tgt, tm, enc, em, cross_kv=m.cross_kv(enc))
    with pytest.raises(ValueError, match="exactly one of the two"):
        m.decode(tgt, tm, None, em)
    with pytest.raises(ValueError, match="1 entries for 2 decoder layers"):
        m.decode(tgt, tm, None, em, cross_kv=m.cross_kv(enc)[:1])


class _CountingStatic:
    """A stand-in graphdef that counts how often it is hashed; equal to every other one."""

    hashed = 0

    def __hash__(self):
        _CountingStatic.hashed += 1
        return 7

    def __eq__(self, other):
        return isinstance(other, _CountingStatic)


def _plus(graphdef, x, *, k):
    return x + k


def test_jitted_hashes_a_graphdef_once_and_shares_equal_ones():
    a, b = _CountingStatic(), _CountingStatic()
    before = _CountingStatic.hashed
    f = decoding.jitted(_plus, a, k=2)
    for _ in range(5):
        assert decoding.jitted(_plus, a, k=2) is f
        assert int(f(jnp.int32(1))) == 3
    assert _CountingStatic.hashed - before == 1  # the first sight of `a` only
    assert decoding.jitted(_plus, b, k=2) is f  # an equal graphdef shares the compilation
    assert decoding.jitted(_plus, a, k=3) is not f and int(decoding.jitted(_plus, a, k=3)(jnp.int32(1))) == 4
    # the real decoders: two models of one structure, one compiled function, their own parameters
    m1, m2 = tiny(True), seq2seq.build(tiny(True).cfg, seed=2)
    (g1, p1), (g2, p2) = nnx.split(m1), nnx.split(m2)
    assert g1 is not g2 and decoding.jitted(decoding._ar_greedy, g1, max_len=16) is decoding.jitted(
        decoding._ar_greedy, g2, max_len=16)
    src, sm = ids(6, (2, 8)), jnp.ones((2, 8), bool)
    assert not np.array_equal(decoding.ar_greedy(g1, p1, src, sm, max_len=16),
                              decoding.ar_greedy(g2, p2, src, sm, max_len=16))


def test_weights_cast_once_for_decoding_give_the_same_outputs_with_fewer_conversions():
    """decoding.for_inference casts each Linear and Embed parameter of a bfloat16 model to bfloat16 once
    (LayerNorm parameters stay float32: those layers compute in float32), leaves the model it is given as
    it was, and returns a float32 model as it is. The layers cast their weights at every call anyway, so
    logits and decoded ids are the same bits; the compiled decoder then converts fewer arrays (XLA leaves
    most per-call casts inside the decoding loops, one kernel each per AR step or PaDIR pass)."""
    import re

    f32 = tiny(True)
    assert decoding.for_inference(f32) is f32
    src, sm = batching.pad([[7, 8, 9, 10], [11, 12, 13]], 16)
    tgt, tm = (jnp.asarray(a) for a in batching.pad([[7, 8, 9], [10, 11]], 8))
    for causal in (True, False):
        model = tiny(causal, dtype="bfloat16")
        model = model if causal else spread(model)  # a PaDIR model whose ids depend on the source
        cast = decoding.for_inference(model)
        assert {str(x.dtype) for x in jax.tree.leaves(nnx.state(model))} == {"float32"}
        for _, node in nnx.iter_graph(cast):
            if isinstance(node, (nnx.Linear, nnx.Embed)):
                params = [v for v in vars(node).values() if isinstance(v, nnx.Param)]
                assert params and all(v.get_value().dtype == jnp.bfloat16 for v in params), node
            if isinstance(node, nnx.LayerNorm):
                assert node.scale.get_value().dtype == jnp.float32
        logits = [jax.tree.leaves(m.decode(tgt, tm, *m.encode(jnp.asarray(src), jnp.asarray(sm))))
                  for m in (model, cast)]
        assert len(logits[0]) == len(logits[1]) >= 1
        for a, b in zip(*logits):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        decoded = []
        for m in (model, cast):
            g, p = nnx.split(m)
            flat = decoding.FlatParams.of(p)
            if causal:
                ids = [decoding.ar_greedy(g, flat, src, sm, max_len=16),
                       decoding.ar_beam(g, flat, src, sm, max_len=16, beam=2)[0]]
                fn = decoding.jitted(decoding._ar_greedy, g, max_len=16)._for(flat.treedef)
                args = (flat.leaves, src, sm)
            else:
                options = decoding.PadirOptions(steps=3, hyps=1)
                ids = [decoding.padir_ids(g, flat, src, sm, jax.random.key(0), options=options, widths=(8, 16))]
                structure, numbers = decoding._dynamic(options)
                fn = decoding.jitted(decoding._padir_ids, g, options=structure, widths=(8, 16))._for(flat.treedef)
                args = (flat.leaves, src, sm, jax.random.key(0), numbers)
            converts = len(re.findall(r" convert\(", fn.lower(*args).compile().as_text()))
            decoded.append(([np.asarray(x) for x in ids], converts))
        for a, b in zip(decoded[0][0], decoded[1][0]):
            np.testing.assert_array_equal(a, b)
        assert decoded[1][1] < decoded[0][1], (causal, decoded[0][1], decoded[1][1])
    # the Translator decodes with the cast weights
    vocab = V.train(["a b c d e f g", "b c d e f g a"] * 40, 40)
    model = seq2seq.build(dataclasses.replace(tiny(False, dtype="bfloat16").cfg, vocab=vocab.size), seed=1)
    tr = translate.Translator(model, vocab, buckets=(16,))
    assert {str(x.dtype) for x in tr.flat.leaves} == {"bfloat16", "float32"}


def test_decoders_take_flat_params_with_the_same_results_and_share_their_programs():
    """decoding.FlatParams (a State's arrays as a list, what Translator and the unit costs pass) gives
    every decoder exactly the State's result; two models of one structure share one compiled program;
    and the Translator decodes through it only (a State flattened in Python at every batch-1 call
    costs the host a share of the decoding time)."""
    ar, padir = tiny(True), tiny(False)
    src, sm = ids(11, (2, 8)), jnp.ones((2, 8), bool)
    g, p = nnx.split(ar)
    flat = decoding.FlatParams.of(p)
    assert decoding.FlatParams.of(flat) is flat and len(flat.leaves) == len(jax.tree.leaves(p))
    np.testing.assert_array_equal(decoding.ar_greedy(g, flat, src, sm, max_len=16),
                                  decoding.ar_greedy(g, p, src, sm, max_len=16))
    for a, b in zip(decoding.ar_beam(g, flat, src, sm, max_len=16, beam=2),
                    decoding.ar_beam(g, p, src, sm, max_len=16, beam=2), strict=True):
        np.testing.assert_array_equal(a, b)
    gp, pp = nnx.split(padir)
    for opts in (decoding.PadirOptions(steps=3, hyps=2), decoding.StrategyOptions("threshold", steps=3, hyps=1,
                                                                                   confidence=0.5)):
        np.testing.assert_array_equal(
            decoding.padir_ids(gp, decoding.FlatParams.of(pp), src, sm, jax.random.key(0), options=opts, widths=(16,)),
            decoding.padir_ids(gp, pp, src, sm, jax.random.key(0), options=opts, widths=(16,)))
    # another model of the same structure: its own arrays, the same program
    g2, p2 = nnx.split(seq2seq.build(ar.cfg, seed=2))
    f = decoding.jitted(decoding._ar_greedy, g, max_len=16)
    before = f._cache_size()
    other = decoding.ar_greedy(g2, decoding.FlatParams.of(p2), src, sm, max_len=16)
    assert f._cache_size() == before and not np.array_equal(other, decoding.ar_greedy(g, flat, src, sm, max_len=16))
    # the Translator decodes with its FlatParams: no decoder's State form is compiled by it
    decoding.clear_compiled()
    texts = ["a b c", "b c"]
    vocab = V.train([f"{t} d e f g" for t in texts] * 40, 40)
    model = seq2seq.build(dataclasses.replace(ar.cfg, vocab=vocab.size), seed=1)
    tr = translate.Translator(model, vocab, buckets=(16,))
    tr.translate(texts, translate.Method("greedy"))
    tr.translate_one(texts[0], translate.Method("beam", beam=2))
    used = list(decoding._COMPILED.values())
    assert len(used) == 2 and all(d._plain._cache_size() == 0 and d._cache_size() >= 1 for d in used)


def test_trained_models_and_flat_params_hold_device_arrays_not_host_copies(trained_ar):
    """A jitted call copies every host (NumPy) argument to the device on each call: parameters kept
    on the host cost a 10M-parameter model milliseconds a batch-1 decode on a GPU, more than the
    decoding itself. train() returns its model's arrays on the device, and FlatParams.of puts host
    leaves there once, with unchanged values and decodes."""
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(nnx.state(trained_ar)))
    g, p = nnx.split(tiny(True))
    host = jax.device_get(p)
    assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(host))
    flat = decoding.FlatParams.of(host)
    assert all(isinstance(x, jax.Array) for x in flat.leaves)
    for a, b in zip(flat.leaves, jax.tree.leaves(p), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    src, sm = ids(4, (2, 8)), jnp.ones((2, 8), bool)
    np.testing.assert_array_equal(decoding.ar_greedy(g, flat, src, sm, max_len=16),
                                  decoding.ar_greedy(g, p, src, sm, max_len=16))


def test_the_parameter_fingerprint_holds_each_parameters_shape_as_well_as_its_bytes():
    """Two models of one seed share a fingerprint; the same bytes in another shape (a kernel stored
    transposed, say) are another model, and so is one changed value."""
    m = tiny(True)
    fp = seq2seq.params_fingerprint(m)
    assert seq2seq.params_fingerprint(tiny(True)) == fp
    var = next(v for _, v in nnx.to_flat_state(nnx.state(m, nnx.Param))
               if np.ndim(v[...]) == 2 and v[...].shape[0] != v[...].shape[1])
    before = var[...]
    var.set_value(before.reshape(before.shape[::-1]))
    assert seq2seq.params_fingerprint(m) != fp
    var.set_value(before.at[0, 0].add(1.0))
    assert seq2seq.params_fingerprint(m) != fp
    var.set_value(before)
    assert seq2seq.params_fingerprint(m) == fp


def test_clear_compiled_drops_the_decoders_and_they_compile_again_to_the_same_result():
    m = tiny(True)
    g, p = nnx.split(m)
    src, sm = ids(7, (2, 8)), jnp.ones((2, 8), bool)
    first = np.asarray(decoding.ar_greedy(g, p, src, sm, max_len=16))
    f = decoding.jitted(decoding._ar_greedy, g, max_len=16)
    decoding._dynamic(decoding.PadirOptions(steps=3))  # a decoder's settings split once per options
    assert decoding._SPLITS
    compiles, listening = [], [False]
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, d, **_: compiles.append(event)
        if listening[0] and event == "/jax/core/compile/backend_compile_duration" else None)
    assert decoding.clear_compiled() >= 1
    assert len(decoding._COMPILED) == 0 and decoding._SPLITS == {} and decoding.clear_compiled() == 0
    listening[0] = True
    try:
        np.testing.assert_array_equal(f(p, src, sm), first)  # a decoder held elsewhere lost its executable too
    finally:
        listening[0] = False
    assert compiles  # the point of clearing: the programs' memory is released
    assert decoding.jitted(decoding._ar_greedy, g, max_len=16) is not f
    np.testing.assert_array_equal(decoding.ar_greedy(g, p, src, sm, max_len=16), first)


def test_unit_costs_and_the_speedup_bound(monkeypatch):
    ar, pd_ = tiny(True), tiny(False)
    compile_in_parallel, best_times, batches = timing.compile_in_parallel, timing.best_times, []

    def spy(calls, threads=None):
        batches.append(len(list(calls)))
        return compile_in_parallel(calls, threads)

    def timed(calls, min_time):  # every unit was compiled before it is timed
        clock = timing.compile_clock()
        best = best_times(calls, min_time)
        assert timing.compiles_since(clock)["compilations"] == 0
        return best

    timed_units, fastest_ms = [], decode_costs._fastest_ms

    def units_spy(units, *, min_time):
        timed_units.extend(units)
        return fastest_ms(units, min_time=min_time)

    best_seen = []

    def timed_and_seen(calls, min_time):
        best_seen.append(timed(calls, min_time))
        return best_seen[-1]

    monkeypatch.setattr(timing, "compile_in_parallel", spy)
    monkeypatch.setattr(timing, "best_times", timed_and_seen)
    monkeypatch.setattr(decode_costs, "_fastest_ms", units_spy)
    rows = decode_costs.unit_costs(ar, pd_, widths=(8, 16), hyps=(1, 2), min_time=0.02)
    # milliseconds: 1e3 x the fastest call's seconds, row by row in the order the units were timed
    assert [r["ms"] for r in rows] == pytest.approx([1e3 * best_seen[-1][i] for i in range(len(rows))])
    # a PaDIR encoder is timed with the cross-attention of the most hypotheses its row names
    graphdef = nnx.split(pd_)[0]
    for r, (fn, _) in zip(rows, timed_units):
        if r["unit"] == "PaDIR encoder":
            assert fn is decoding.jitted(decode_costs._padir_encode, graphdef, hyps=2)
    # side by side: first the encoders whose outputs the units take (2 widths + 2 hypothesis counts), then every unit
    assert batches == [4, len(rows)] and len(rows) == 10
    assert sorted({(r["unit"], r["width"], r["hyps"]) for r in rows}) == sorted(
        [(u, w, 1) for u in ("AR encoder", "AR step") for w in (8, 16)] + [("PaDIR encoder", w, 2) for w in (8, 16)]
        + [("PaDIR pass", w, h) for w in (8, 16) for h in (1, 2)])
    assert all(r["ms"] > 0 for r in rows)
    fake = [dict(unit="AR encoder", width=16, hyps=1, ms=2.0), dict(unit="AR step", width=16, hyps=1, ms=1.0),
            dict(unit="PaDIR encoder", width=16, hyps=3, ms=2.0), dict(unit="PaDIR pass", width=16, hyps=1, ms=3.0)]
    assert decode_costs.speedup_bound(fake, ar_steps=16, padir_passes=2, width=16) == pytest.approx(18 / 8)
    fake[1]["ms"] = 0.5  # (AR encoder + steps x AR step) / (PaDIR encoder + passes x PaDIR pass)
    assert decode_costs.speedup_bound(fake, ar_steps=16, padir_passes=2, width=16) == pytest.approx(10 / 8)
    with pytest.raises(ValueError, match="no 'AR encoder' cost for {'width': 32}"):
        decode_costs.speedup_bound(fake, ar_steps=16, padir_passes=2, width=32)
    for pair in ((pd_, ar), (ar, ar), (pd_, pd_)):
        with pytest.raises(ValueError, match="AR model first"):
            decode_costs.unit_costs(*pair)
    with pytest.raises(ValueError, match=r"unit_costs: widths \[32\] exceed ar_model.cfg.max_len = 16; nothing is"):
        decode_costs.unit_costs(ar, pd_, widths=(32,))


def test_stutter_remasking_and_repeat_dropping():
    tok = jnp.array([[7, 7, 8, 9, 9, 9, 0]])
    mask = tok != 0
    assert decoding.stutter_positions(tok, mask).tolist() == [[False, True, False, False, True, True, False]]
    assert decoding.strip(np.asarray(tok), drop_repeats=True) == [[7, 8, 9]]
    assert decoding.strip(np.asarray(tok)) == [[7, 7, 8, 9, 9, 9]]
    assert decoding.strip(np.array([[7, 8, V.EOS, 9]])) == [[7, 8]]


def _compiled_names() -> list:
    """A list to which every later backend compilation in this process appends its program's name
    (JAX's monitoring events; a read from the persistent cache is not a compilation)."""
    names = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, d, fun_name=None, **_: names.append(fun_name)
        if event == "/jax/core/compile/backend_compile_duration" else None)
    return names


def _toy_batcher(multiple=1, n=64):
    rng = np.random.default_rng(0)
    src = [list(rng.integers(6, 40, rng.integers(2, 7))) for _ in range(n)]
    tgt = [s[::-1] for s in src]  # learnable: reverse the source
    return batching.Batcher(src, tgt, batch_tokens=128, seed=0, buckets=(8, 16), multiple=multiple)


def _cfg(kind, **kw):
    mc = seq2seq.ModelConfig(vocab=40, causal=kind == "ar", d_model=32, heads=4, enc_layers=1, dec_layers=1,
                             d_ff=64, max_len=16)
    return training.TrainConfig(kind=kind, model=mc, steps=6, warmup=1, batch_tokens=128, checkpoint_every=2,
                                log_every=1, buckets=(8, 16), **kw)


def test_the_label_smoothed_cross_entropy_is_its_formula():
    """(1 - eps) x NLL + eps x the mean over the vocabulary of -log p, summed over the mask, with the
    number of tokens it covers; eps = 0 is the NLL."""
    logits = np.asarray(jax.random.normal(jax.random.key(0), (2, 3, 5)), np.float64)
    labels = np.array([[0, 4, 2], [1, 1, 3]])
    mask = np.array([[True, True, False], [True, False, True]])
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    for eps in (0.0, 0.1):
        total, count = objectives.cross_entropy(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(mask), eps)
        want = ((1 - eps) * nll + eps * (-logp).mean(-1))[mask].sum()
        assert float(total) == pytest.approx(want, rel=1e-5) and int(count) == 4


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_the_loss_is_a_mean_per_token_and_dropout_is_for_training_only(kind):
    """A batch and the same batch twice have the same loss (a mean, not a sum); rows marked as counted
    change nothing; without dropout the loss does not depend on the key, with it it does."""
    cfg = _cfg(kind, **(dict(fill="mask", unmasking_rate=0.0) if kind == "padir" else {}))  # no random corruption
    cfg = cfg.replace(dropout=0.3)
    model = seq2seq.build(cfg.model, 0)
    bucket, ix = next(iter(_toy_batcher().epoch(0)))
    batch = {k: jnp.asarray(v) for k, v in _toy_batcher().make(bucket, ix).arrays().items()}
    twice = {k: jnp.concatenate([v, v]) for k, v in batch.items()}
    rows = dict(batch, rows=jnp.ones(batch["src"].shape[0], bool))

    def loss(b, key, dropout=False):
        return objectives.loss_fn(model, cfg, b, jax.random.key(key), dropout=dropout)

    one, parts = loss(batch, 0)
    assert float(loss(twice, 0)[0]) == pytest.approx(float(one), rel=1e-5)
    counted, counted_parts = loss(rows, 0)
    assert float(counted) == pytest.approx(float(one), rel=1e-5)
    if kind == "padir":  # the mean over stages of each stage's mean, plus the weighted length loss
        assert float(counted_parts["length_loss"]) == pytest.approx(float(parts["length_loss"]), rel=1e-5)
        n = batch["src"].shape[0] // 2  # a row's length loss is its own: counting the first rows = those rows alone
        first_rows = loss(dict(batch, rows=jnp.arange(batch["src"].shape[0]) < n), 0)[1]["length_loss"]
        alone = loss({k: v[:n] for k, v in batch.items()}, 0)[1]["length_loss"]
        assert n >= 1 and float(first_rows) == pytest.approx(float(alone), rel=1e-5)
        assert float(one) == pytest.approx(float(parts["token_loss"]) + 0.1 * float(parts["length_loss"]), rel=1e-5)
        assert cfg.stages == 2 and cfg.length_loss_weight == 0.1
        first = float(objectives.loss_fn(model, cfg.replace(stages=1), batch, jax.random.key(0), dropout=False)[1]
                      ["token_loss"])
        assert float(parts["token_loss"]) != pytest.approx(first, rel=1e-3)  # stage 2 counts
        assert 0.5 * first < float(parts["token_loss"]) < 2 * first  # a mean of two per-token means, not a sum
    assert float(loss(batch, 1)[0]) == float(one)  # no dropout: the key changes nothing
    assert float(loss(batch, 0, True)[0]) != float(loss(batch, 1, True)[0])


@pytest.mark.parametrize("stages", [2, 3])
def test_each_padir_stage_refines_the_previous_stage_argmax(stages):
    """[App. L.1.2] PaDIR's token loss written out: stage 1 reads the corrupted target (here every
    position [MASK]: ``fill = "mask"``, unmasking rate 0, so the corruption draws nothing), each later
    stage the argmax of the stage before it over text pieces only (never a control id), and the token
    loss is the mean of the stages' per-token label-smoothed cross-entropies."""
    cfg = _cfg("padir", fill="mask", unmasking_rate=0.0, stages=stages, label_smoothing=0.1)
    model = spread(seq2seq.build(cfg.model, 0), scale=3.0)
    bucket, ix = next(iter(_toy_batcher().epoch(0)))
    batch = {k: jnp.asarray(v) for k, v in _toy_batcher().make(bucket, ix).arrays().items()}
    tgt, tm = batch["tgt"], batch["tgt_mask"]
    enc, em = model.encode(batch["src"], batch["src_mask"])
    hyp, stage_losses, inputs = jnp.where(tm, V.MASK, V.PAD), [], []
    for _ in range(stages):
        inputs.append(hyp)
        logits = model.decode(hyp, tm, enc, em)
        total, count = objectives.cross_entropy(logits, tgt, tm, 0.1)
        stage_losses.append(float(total / count))
        hyp = jnp.where(tm, jnp.argmax(logits.at[..., : V.FIRST_PIECE].set(-jnp.inf), -1), V.PAD)
    parts = objectives.loss_fn(model, cfg, batch, jax.random.key(0), dropout=False)[1]
    assert float(parts["token_loss"]) == pytest.approx(np.mean(stage_losses), rel=1e-5)
    # the test's power: the stages read different inputs and score differently
    assert not np.array_equal(inputs[0], inputs[1]) and len(set(np.round(stage_losses, 4))) == stages


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_killed_run_resumes_to_the_same_final_loss(kind, tmp_path):
    cfg, batcher = _cfg(kind), _toy_batcher()
    whole = training.train(cfg, batcher, tmp_path / "whole", progress=False)

    class Killed(Exception):
        pass

    def kill_at(n):
        def kill(step, loss):
            if step == n:  # between checkpoints: step n is lost and redone
                raise Killed

        return kill

    t0 = time.perf_counter()
    with pytest.raises(Killed):
        training.train(cfg, batcher, tmp_path / "resumed", progress=False, on_step=kill_at(3))
    # the record was written at the checkpoint: the killed call's time up to it is kept
    killed = json.loads((tmp_path / "resumed" / "run.json").read_text())
    assert killed["done"] == 2 and killed["final_loss"] is None and killed["steps"] == 6
    assert [(g["start"], g["end"]) for g in killed["segments"]] == [(0, 2)] and killed["wall_s"] > 0
    # resumed from checkpoint 2 and killed again after checkpoint 4: each checkpoint kept has its digest
    with pytest.raises(Killed):
        training.train(cfg, batcher, tmp_path / "resumed", progress=False, on_step=kill_at(5))
    digests = json.loads((tmp_path / "resumed" / "checkpoint_digests.json").read_text())
    kept = sorted(int(p.name) for p in (tmp_path / "resumed" / "checkpoints").iterdir())
    assert sorted(map(int, digests)) == kept == [2, 4]
    resumed = training.train(cfg, batcher, tmp_path / "resumed", progress=False)
    segments = resumed.record["segments"]
    assert [(g["start"], g["end"]) for g in segments] == [(0, 2), (2, 4), (4, 6)]
    assert segments[0] == killed["segments"][0]
    assert resumed.record["wall_s"] == pytest.approx(sum(g["wall_s"] for g in segments))
    assert resumed.record["wall_s"] <= time.perf_counter() - t0  # the three calls' seconds, at most
    # each call compiled its update before its first one: the token rate leaves those seconds out
    assert all(0 < g["compile_s"] < g["wall_s"] for g in segments)
    assert resumed.record["tokens_per_s"] == pytest.approx(
        sum(g["tokens"] for g in segments) / sum(g["wall_s"] - g["compile_s"] for g in segments))
    assert all(g["commit"] == provenance.git_commit() and g["hardware"] == provenance.hardware_summary()
               for g in segments)
    assert resumed.record["done"] == 6 and resumed.record["final_loss"] == resumed.final_loss
    assert abs(resumed.final_loss - whole.final_loss) <= 1e-6
    steps = [json.loads(l)["step"] for l in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 7))  # the lost step's line was dropped and rewritten once
    _, model = training.load(tmp_path / "resumed")
    np.testing.assert_array_equal(nnx.state(model, nnx.Param)["embed"]["embedding"][...],
                                  nnx.state(whole.model, nnx.Param)["embed"]["embedding"][...])
    with pytest.raises(ValueError, match="different TrainConfig"):
        training.train(_cfg(kind, seed=5), batcher, tmp_path / "resumed", progress=False)


def test_a_run_folder_is_reused_only_on_the_data_it_was_trained_on(tmp_path):
    cfg, batcher = dataclasses.replace(_cfg("ar"), steps=2), _toy_batcher()
    first = training.train(cfg, batcher, tmp_path / "run", progress=False)
    recorded = json.loads((tmp_path / "run" / "data.json").read_text())
    assert recorded["fingerprint"] == batcher.fingerprint() == first.record["data_fingerprint"]
    assert recorded["pairs"] == 64
    assert _toy_batcher().fingerprint() == batcher.fingerprint()  # built again from the same data
    # the same data: the finished run is reused (no new steps)
    record = (tmp_path / "run" / "run.json").read_text()
    again = training.train(cfg, _toy_batcher(), tmp_path / "run", progress=False)
    assert (tmp_path / "run" / "run.json").read_text() == record  # its record (commit, time) is left as it was
    assert again.record == first.record and again.final_loss == first.final_loss
    assert again.losses == first.losses  # read back from metrics.jsonl
    np.testing.assert_array_equal(nnx.state(again.model, nnx.Param)["embed"]["embedding"][...],
                                  nnx.state(first.model, nnx.Param)["embed"]["embedding"][...])
    # killed after the final checkpoint but before its record: nothing is retrained, the record is
    # rebuilt with the final loss from metrics.jsonl and no time (none was spent in this call)
    (tmp_path / "run" / "run.json").unlink()
    rebuilt = training.train(cfg, _toy_batcher(), tmp_path / "run", progress=False)
    assert rebuilt.final_loss == first.final_loss and rebuilt.record["done"] == 2
    assert rebuilt.losses == first.losses  # read back from metrics.jsonl here too
    assert [(g["start"], g["end"]) for g in rebuilt.record["segments"]] == [(2, 2)]
    assert rebuilt.record["tokens_per_s"] is None
    other_targets = batching.Batcher(batcher.src, [t[1:] + t[:1] for t in batcher.tgt], batch_tokens=128, seed=0,
                                     buckets=(8, 16))
    other_seed = batching.Batcher(batcher.src, batcher.tgt, batch_tokens=128, seed=1, buckets=(8, 16))
    for other in (other_targets, other_seed, _toy_batcher(multiple=2)):
        assert other.fingerprint() != batcher.fingerprint()
        with pytest.raises(ValueError, match="trained on other data"):
            training.train(cfg, other, tmp_path / "run", progress=False)
    # a folder from before fingerprints: reused with a warning, and nothing is recorded for it
    (tmp_path / "run" / "data.json").unlink()
    with pytest.warns(UserWarning, match="no data.json"):
        training.train(cfg, other_targets, tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "data.json").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        training.train(cfg, batcher, tmp_path / "fresh", progress=False)  # a new folder: no warning


@pytest.mark.slow  # compile counting: in the main suite, not in the newest-versions job
def test_configs_that_differ_only_in_traced_fields_share_one_program():
    """The unmasking rate and the fill are arguments of the compiled update and val programs
    (training.TRACED): the ablations' rate and [MASK] variants lower to their baseline's program, so
    JAX's compilation cache compiles it once, while each still corrupts its targets as it says."""
    base, batcher = _cfg("padir", unmasking_rate=0.1), _toy_batcher()
    graphdef, params = nnx.split(seq2seq.build(base.model, base.seed))
    bucket, ix = next(iter(batcher.epoch(0)))
    batch, key = batcher.make(bucket, ix).arrays(), jax.random.key(3)
    tx = training.optimizer(base)
    variants = [base.replace(unmasking_rate=0.5), base.replace(fill="mask"),
                base.replace(steps=base.steps * 3, warmup=base.warmup + 1, learning_rate=3e-4, min_lr_ratio=0.2)]
    assert set(training.TRACED) == {"unmasking_rate", "fill", "learning_rate", "warmup", "steps", "min_lr_ratio"} \
        == set(training.make_eval(graphdef, base).numbers)

    def text(cfg, make):
        args = (params, tx.init(params), batch, key) if make is training.make_step else (params, batch, key)
        return make(graphdef, cfg).lower(*args).as_text(debug_info=False)

    for make in (training.make_step, training.make_eval):
        assert all(text(base, make) == text(cfg, make) for cfg in variants)
        assert text(base, make) != text(base.replace(stages=1), make)  # a structural field: another program
    # each setting is honoured: the compiled val loss equals the loss with the fields as constants
    model = nnx.merge(graphdef, params)
    losses = []
    for cfg in [base, *variants]:
        total, tokens = training.make_eval(graphdef, cfg)(params, batch, key)
        _, parts = objectives.loss_fn(model, cfg.replace(label_smoothing=0.0), batch, key, dropout=False)
        assert float(total / tokens) == pytest.approx(float(parts["token_loss"]), rel=1e-5)
        losses.append(float(total / tokens))
    assert len({round(v, 4) for v in losses}) == 3


@pytest.mark.parametrize("steps, warmup, lr, ratio", [(4000, 400, 1e-3, 0.05), (12, 1, 2e-3, 0.0), (7, 6, 3e-4, 0.2),
                                                     (1200, 0, 1e-3, 1.0), (100, 10, 5e-4, 0.05)])
def test_the_traced_schedule_gives_the_optax_rates(steps, warmup, lr, ratio):
    """training.traced_schedule (the update program's schedule, its numbers arguments), jitted as the
    update runs it, against the warm-up-cosine formula in float64 and against
    optax.warmup_cosine_decay_schedule, at every update and past the end, to float32 rounding: a relative 1e-6, or
    1e-6 of the peak where terms cancel (optax's warm-up -peak * (1 - c / w) + peak near c = 0, the
    cosine's 1 + cos near the end)."""
    cfg = _cfg("padir").replace(steps=steps, warmup=warmup, learning_rate=lr, min_lr_ratio=ratio)
    numbers = {k: f(cfg) for k, f in training.TRACED.items()}
    counts = jnp.arange(0, steps + 5, dtype=jnp.int32)
    ours = jax.jit(jax.vmap(lambda c, n: training.traced_schedule(n)(c), in_axes=(0, None)))(counts, numbers)
    optax_schedule = optax.warmup_cosine_decay_schedule(0.0, lr, max(warmup, 1), steps, end_value=lr * ratio)
    theirs = jax.jit(jax.vmap(optax_schedule))(counts)
    assert ours.dtype == theirs.dtype == jnp.float32
    c, w = np.arange(steps + 5, dtype=np.float64), max(warmup, 1)
    t = np.minimum(c - w, steps - w) / (steps - w)
    exact = np.where(c < w, lr * c / w, lr * ((1 - ratio) * 0.5 * (1 + np.cos(np.pi * t)) + ratio))
    for reference in (exact, np.asarray(theirs)):  # float32's error is relative to the peak where terms cancel
        np.testing.assert_allclose(np.asarray(ours), reference, rtol=1e-6, atol=1e-6 * lr + 1e-12)
    # the host's schedule (the rates a run logs) is the program's formula (XLA folds its constants: rounding)
    logged = jax.jit(jax.vmap(training.schedule(cfg)))(counts)
    np.testing.assert_allclose(np.asarray(logged), np.asarray(ours), rtol=1e-6, atol=1e-6 * lr + 1e-12)


@pytest.mark.parametrize("name", ["adamw", "adafactor"])
def test_each_optimiser_is_the_named_one_and_decays_the_weights_it_is_given(name):
    """TrainConfig.optimizer picks AdamW (its Adam moments in the state) or Adafactor (none), and both
    apply ``weight_decay``: on a zero gradient past the warm-up an update shrinks every weight towards
    0 with a decay and leaves it unchanged without one."""
    params = {"w": jnp.arange(1.0, 7.0).reshape(2, 3), "b": jnp.array([-2.0, 0.5, 3.0])}
    zero = jax.tree.map(jnp.zeros_like, params)
    moved = {}
    for decay in (0.0, 0.1):
        tx = training.optimizer(_cfg("ar", optimizer=name, weight_decay=decay, learning_rate=0.1))
        state = tx.init(params)
        is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)  # noqa: E731
        assert any(map(is_adam, jax.tree.leaves(state, is_leaf=is_adam))) == (name == "adamw")
        for _ in range(3):  # the third update: past the warm-up (the first update's rate is 0)
            updates, state = tx.update(zero, state, params)
        new = optax.apply_updates(params, updates)
        moved[decay] = jax.tree.map(lambda a, b: np.abs(np.asarray(b)) - np.abs(np.asarray(a)), params, new)
    assert all((d == 0).all() for d in jax.tree.leaves(moved[0.0]))
    assert all((d < 0).all() for d in jax.tree.leaves(moved[0.1]))


@pytest.mark.slow  # compile counting: in the main suite, not in the newest-versions job
def test_a_run_sized_to_a_budget_trains_with_the_program_its_timing_compiled(tmp_path):
    """sizing.fit_config times one update of the asked config, then the run trains fewer updates (so
    another schedule): with the schedule's numbers arguments of the update (training.TRACED), the run's
    update for the timed bucket is the timed one, the same jitted function (training.make_step shares
    it), neither compiled again nor read from the persistent compilation cache (on a GPU, half a
    minute a model). In a fresh process, as a chapter runs."""
    script = f"""
import json, pathlib, numpy as np
from gmlm_lib.core import devtrace, timing
from gmlm_lib.mt import batching, seq2seq, sizing, training
rng = np.random.default_rng(0)
src = [list(rng.integers(6, 40, rng.integers(2, 7))) for _ in range(64)]
batcher = batching.Batcher(src, [s[::-1] for s in src], batch_tokens=128, seed=0, buckets=(8,))
mc = seq2seq.ModelConfig(vocab=40, causal=False, d_model=32, heads=4, enc_layers=1, dec_layers=1, d_ff=64, max_len=8)
cfg = training.TrainConfig(kind="padir", model=mc, steps=400, warmup=40, batch_tokens=128, checkpoint_every=200,
                           log_every=50, buckets=(8,))
s = timing.compile_clock()
fitted, record = sizing.fit_config(cfg, batcher, 1, 1e-9)  # a budget that shrinks the run to its floor
timed = timing.compiles_since(s)
def updates():  # the update programs in the cache: a program compiled (not read) is written there, by key
    return {{p.name.split("-")[1] for p in pathlib.Path({str(tmp_path / "cache")!r}).glob("jit_step-*")}}
after_timing = updates()
s = timing.compile_clock()
training.train(fitted, batcher, {str(tmp_path / "run")!r}, progress=False)
print(json.dumps(dict(steps=fitted.steps, warmup=fitted.warmup, timed=timed, train=timing.compiles_since(s),
                      timed_updates=len(after_timing), new_updates=len(updates() - after_timing))))
"""
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["steps"] < 400 and got["warmup"] < 40  # another schedule than the one timed
    assert got["timed"]["compilations"] >= 1 and got["timed"]["cache_hits"] == 0
    assert got["timed_updates"] == 1 and got["new_updates"] == 0, got  # the update, as the timing compiled it
    assert got["train"]["cache_hits"] == 0, got  # neither compiled nor read: the timed jitted update itself


def test_the_loop_runs_the_update_on_flat_leaves_and_it_computes_the_same(tmp_path, monkeypatch):
    """Program.flat (the update on the state's flat leaves) computes exactly what the call on nnx
    State pytrees computes, with the same jitted function (no new compilation); and train() calls
    only it, from the compilation before the first update to the last update: rebuilding the State
    pytrees in Python at every update costs the host milliseconds that a small model on an
    accelerator waits for (benchmarks/train_step.py times it)."""
    cfg = _cfg("ar")
    graphdef, params = nnx.split(seq2seq.build(cfg.model, 0))
    opt_state = training.optimizer(cfg).init(params)
    step = training.make_step(graphdef, cfg)
    b = _toy_batcher().make(8, np.arange(8))
    batch = dict(src=b.src, src_mask=b.src_mask, tgt=b.tgt, tgt_mask=b.tgt_mask)
    key = jax.random.key(1)
    copy = lambda tree: jax.tree.map(jnp.copy, tree)  # noqa: E731 (the update donates its state)
    *state_out, loss_a, _ = step(copy(params), copy(opt_state), batch, key)
    compiled = _compiled_names()
    leaves, treedef = jax.tree.flatten(copy((params, opt_state)))
    leaves_out, loss_b, _ = step.flat(treedef)(leaves, batch, key)
    assert compiled == []  # the program the State call compiled
    assert float(loss_a) == float(loss_b)
    for x, y in zip(jax.tree.leaves(state_out), leaves_out, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert jax.tree.structure(tuple(state_out)) == treedef
    with pytest.raises(TypeError, match="only an update"):
        training.make_eval(graphdef, cfg).flat(treedef)

    def refuse(*args, **kwargs):
        raise AssertionError("train() called the update on State pytrees")

    monkeypatch.setattr(training.FlatUpdate, "__call__", refuse)
    res = training.train(cfg, _toy_batcher(), tmp_path / "run", progress=False)
    assert res.record["done"] == cfg.steps and np.isfinite(res.final_loss)


def test_configs_that_differ_outside_the_program_share_one_jitted_update_and_val_program(tmp_path):
    """make_step/make_eval return the same jitted function for configs that differ only in
    training.PROGRAM_FREE (the schedule, the traced unmasking rate and fill, the seed, the
    bookkeeping), each bound to its own traced values, so a second run of the same model compiles
    nothing (the distilled PaDIR model after the raw one; a run after its sizing); a field that shapes
    the program (label smoothing) gets its own."""
    cfg = dataclasses.replace(_cfg("padir"), steps=4, checkpoint_every=4, log_every=2)
    graphdef, _ = nnx.split(seq2seq.build(cfg.model, 0))
    other = cfg.replace(steps=6, warmup=2, learning_rate=1e-3, unmasking_rate=0.5, fill="mask", seed=3,
                        checkpoint_every=3, log_every=3, batch_tokens=64, init="teacher")
    a, b = training.make_step(graphdef, cfg), training.make_step(graphdef, other)
    assert a.jitted is b.jitted and float(b.numbers["unmasking_rate"]) == 0.5 and bool(b.numbers["fill"])
    assert training.make_eval(graphdef, cfg).jitted is training.make_eval(graphdef, other).jitted
    assert training.make_step(graphdef, cfg.replace(label_smoothing=0.0)).jitted is not a.jitted
    assert training.make_eval(graphdef, cfg).jitted is not a.jitted
    compiled = _compiled_names()
    first = training.train(cfg, _toy_batcher(), tmp_path / "first", progress=False)
    n_first = compiled.count("jit(step)")
    second = training.train(cfg.replace(seed=5, steps=5, warmup=2, checkpoint_every=5), _toy_batcher(),
                            tmp_path / "second", progress=False)
    assert compiled.count("jit(step)") == n_first and second.losses != first.losses
    # logged every log_every = 2 updates and at the last one, which 2 does not divide
    logged = [json.loads(x)["step"] for x in (tmp_path / "second" / "metrics.jsonl").read_text().splitlines()]
    assert [s for s, _ in first.losses] == [2, 4] and [s for s, _ in second.losses] == logged == [2, 4, 5]
    training.clear_programs()
    assert training.make_step(graphdef, cfg).jitted is not a.jitted


def test_an_update_that_changes_its_states_structure_is_refused_by_name():
    """FlatUpdate feeds the leaves an update returns back in as the next update's (donated, flat): an
    optimiser whose state changed structure would be read wrongly, so it is refused at trace time."""
    params, opt_state, key = {"w": jnp.ones(2)}, (jnp.zeros(2),), jax.random.key(0)
    grows = training.FlatUpdate(lambda p, o, batch, k, numbers: (p, (o, o), jnp.sum(batch), {}))
    with pytest.raises(ValueError, match=r"returned a state of another structure .* an optimiser must keep its state"):
        grows(params, opt_state, jnp.ones(3), key, {})
    keeps = training.FlatUpdate(lambda p, o, batch, k, numbers: ({"w": p["w"] + 1}, o, jnp.sum(batch), {}))
    p, o, loss, parts = keeps(params, opt_state, jnp.ones(3), key, {})
    assert np.array_equal(p["w"], [2.0, 2.0]) and o[0].shape == (2,) and float(loss) == 3.0 and parts == {}


def test_the_shared_programs_are_the_most_recently_used_ones(monkeypatch):
    """make_step/make_eval keep at most training._PROGRAMS_KEPT jitted functions, the least recently used
    forgotten first: a process that trains many variants (the ablations) does not keep every program it
    has compiled, and a program in use stays."""
    monkeypatch.setattr(training, "_PROGRAMS", programs.Programs(kept=3))
    cfg, built = _cfg("padir"), []

    def get(graphdef):
        return training._shared("step", graphdef, cfg, lambda c: built.append(graphdef) or object()).jitted

    first = [get(g) for g in "abc"]
    assert get("a") is first[0] and built == ["a", "b", "c"]  # reused, and now the most recently used
    get("d")  # a fourth: "b", the least recently used, is forgotten
    assert len(training._PROGRAMS) == 3 and get("a") is first[0] and get("c") is first[2]
    assert get("b") is not first[1] and built == ["a", "b", "c", "d", "b"]
    order = [key[1] for key in training._PROGRAMS.keys()]
    assert order == [programs.graph_key(g) for g in "acb"]  # "d" went when "b" came back


def test_training_reduces_the_loss(tmp_path):
    cfg = dataclasses.replace(_cfg("padir"), steps=60, checkpoint_every=60, log_every=10, learning_rate=3e-3)
    res = training.train(cfg, _toy_batcher(), tmp_path / "run", progress=False)
    assert res.losses[-1][1] < res.losses[0][1] - 0.5
    assert res.record["tokens_per_s"] > 0 and res.record["hardware"]["device_count"] >= 1


def test_warm_start_copies_the_teacher_and_leaves_the_rest():
    ar, padir = tiny(True), seq2seq.build(dataclasses.replace(tiny(False).cfg), seed=7)
    before = seq2seq.params_fingerprint(padir)
    started, kept = seq2seq.warm_start(padir, ar)
    assert seq2seq.params_fingerprint(padir) == before  # the caller's model is not touched
    # what the AR model lacks stays: positional attention (and its norm) and the length predictor
    assert sorted({p.split("/")[-2] if p.startswith("decoder") else p.split("/")[0] for p in kept}) == \
        ["k", "length_head", "ln_pos", "o", "q", "v"]
    assert all("pos_attn" in p or "ln_pos" in p or p.startswith("length_head") for p in kept)
    mine = dict(nnx.to_flat_state(nnx.state(started, nnx.Param)))
    theirs = dict(nnx.to_flat_state(nnx.state(ar, nnx.Param)))
    orig = dict(nnx.to_flat_state(nnx.state(padir, nnx.Param)))
    for path, var in mine.items():
        name = "/".join(map(str, path))
        if name in kept:
            want = np.zeros_like(orig[path][...]) if "pos_attn/o/" in name else orig[path][...]
        else:
            want = theirs[path][...]
        np.testing.assert_array_equal(var[...], want, err_msg=name)
    src, sm = ids(0, (2, 9)), jnp.ones((2, 9), bool)
    np.testing.assert_array_equal(started.encode(src, sm)[0], ar.encode(src, sm)[0])  # the teacher's encoder
    other = seq2seq.build(dataclasses.replace(ar.cfg, d_ff=128), seed=1)
    with pytest.raises(ValueError, match="d_ff"):
        seq2seq.warm_start(padir, other)


def test_warm_start_of_a_model_on_a_mesh_compiles_one_program():
    """A model whose parameters carry a mesh's sharding (as training places them) takes the teacher's arrays
    as they are: assigning through ``var[...] = value`` scattered into each old array where the shardings
    differed, two programs a parameter shape (22 for this tiny model)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from gmlm_lib.core import timing

    cfg = dataclasses.replace(tiny(True).cfg, vocab=83)  # a vocabulary no other test compiles
    ar, padir = seq2seq.build(cfg, seed=3), seq2seq.build(dataclasses.replace(cfg, causal=False), seed=7)
    graphdef, state = nnx.split(padir)
    padir = nnx.merge(graphdef, jax.device_put(state, NamedSharding(Mesh(np.array(jax.devices()), ("data",)),
                                                                    PartitionSpec())))
    clock = timing.compile_clock()
    started, _ = seq2seq.warm_start(padir, ar)
    assert timing.compiles_since(clock)["compilations"] <= 1  # the one copy program
    src, sm = ids(0, (2, 9)), jnp.ones((2, 9), bool)
    np.testing.assert_array_equal(started.encode(src, sm)[0], ar.encode(src, sm)[0])


def test_padir_trained_from_its_teacher(tmp_path):
    batcher = _toy_batcher()
    teacher = training.train(dataclasses.replace(_cfg("ar"), steps=60, checkpoint_every=60, log_every=10,
                                                 learning_rate=3e-3), batcher, tmp_path / "ar", progress=False)
    base = dataclasses.replace(_cfg("padir"), steps=10, checkpoint_every=10, log_every=1, learning_rate=3e-3)
    random_start = training.train(base, batcher, tmp_path / "random", progress=False)
    warm = training.train(base.replace(init="teacher"), batcher, tmp_path / "warm", progress=False,
                          teacher=teacher.model)
    # the teacher's encoder and embeddings already know the task: the first updates' loss is lower
    assert warm.losses[0][1] < random_start.losses[0][1] - 0.3
    # a teacher loaded from its checkpoint holds device arrays; training donates its own copies, so
    # the teacher stays usable (the ablations start several variants from one teacher)
    _, loaded = training.load(tmp_path / "ar")
    fp = seq2seq.params_fingerprint(loaded)
    for name in ("warm2", "warm3"):
        training.train(base.replace(init="teacher", steps=2), batcher, tmp_path / name, progress=False, teacher=loaded)
    assert seq2seq.params_fingerprint(loaded) == fp == seq2seq.params_fingerprint(teacher.model)
    assert warm.record["init"]["start"] == "teacher" and random_start.record["init"] == {"start": "random"}
    assert warm.record["init"]["teacher_fingerprint"] == seq2seq.params_fingerprint(teacher.model)
    assert "length_head/kernel" in warm.record["init"]["random_parameters"]
    again = training.train(base.replace(init="teacher"), batcher, tmp_path / "warm", progress=False,
                           teacher=teacher.model)
    assert again.final_loss == warm.final_loss  # reused
    with pytest.raises(ValueError, match="teacher"):  # the same folder from another teacher
        training.train(base.replace(init="teacher"), batcher, tmp_path / "warm", progress=False,
                       teacher=seq2seq.build(teacher.model.cfg, seed=3))
    with pytest.raises(ValueError, match="needs the AR model as teacher"):
        training.train(base.replace(init="teacher"), batcher, tmp_path / "x", progress=False)
    with pytest.raises(ValueError, match="init = 'random'"):
        training.train(base, batcher, tmp_path / "y", progress=False, teacher=teacher.model)
    with pytest.raises(ValueError, match="TrainConfig.init"):
        _cfg("padir", init="bert")
    with pytest.raises(ValueError, match="kind = 'ar' needs init = 'random'"):
        _cfg("ar", init="teacher")
    with pytest.raises(ValueError, match="padir_init"):
        pipeline.tiny_run(tmp_path / "tiny", None, padir_init="bert")


@pytest.mark.parametrize("field", ["unmasking_rate", "label_smoothing"])
def test_a_training_rate_is_in_zero_to_one_with_one_refused(field):
    """``unmasking_rate`` 1 would train on the target itself and ``label_smoothing`` 1 on no label:
    both are refused at each end of [0, 1), and its ends inside are accepted."""
    for bad in (1.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=rf"TrainConfig\.{field} must be in \[0, 1\); got {bad}"):
            _cfg("padir", **{field: bad})
    for good in (0.0, 0.999):
        assert getattr(_cfg("padir", **{field: good}), field) == good


def test_bad_training_inputs():
    mc = seq2seq.ModelConfig(vocab=40, causal=True, max_len=16)
    with pytest.raises(ValueError, match="causal"):
        training.TrainConfig(kind="padir", model=mc)
    for model in (mc, seq2seq.ModelConfig(vocab=40, causal=False, max_len=16)):  # either causality
        with pytest.raises(ValueError, match="TrainConfig.kind must be 'ar' or 'padir'; got 'nat'"):
            training.TrainConfig(kind="nat", model=model)
    with pytest.raises(ValueError, match="TrainConfig.fill must be 'random' or 'mask'; got 'bert'"):
        _cfg("padir", fill="bert")
    with pytest.raises(ValueError, match="buckets"):
        training.TrainConfig(kind="ar", model=mc)  # default buckets reach 64 > max_len 16
    with pytest.raises(ValueError, match="optimizer"):
        _cfg("ar", optimizer="sgd")
    with pytest.raises(ValueError, match="divisible"):
        seq2seq.ModelConfig(vocab=40, causal=True, d_model=30, heads=4)
    with pytest.raises(ValueError, match="dtype"):
        seq2seq.ModelConfig(vocab=40, causal=True, dtype="float16")
    # the bounds themselves: a vocabulary of special ids alone, and dropout 1 (every activation dropped)
    with pytest.raises(ValueError, match=rf"vocab = {V.FIRST_PIECE} must exceed the {V.FIRST_PIECE} special ids"):
        seq2seq.ModelConfig(vocab=V.FIRST_PIECE, causal=True)
    assert seq2seq.ModelConfig(vocab=V.FIRST_PIECE + 1, causal=True).vocab == V.FIRST_PIECE + 1
    for rate in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
            seq2seq.ModelConfig(vocab=40, causal=True, dropout=rate)
    assert seq2seq.ModelConfig(vocab=40, causal=True, dropout=0.0).dropout == 0.0
    m = tiny(True)
    assert m.encode(jnp.ones((1, 16), jnp.int32), jnp.ones((1, 16), bool))[0].shape == (1, 17, 32)  # max_len: taken
    with pytest.raises(ValueError, match="source length 17 exceeds ModelConfig.max_len = 16"):
        m.encode(jnp.ones((1, 17), jnp.int32), jnp.ones((1, 17), bool))
    with pytest.raises(ValueError, match="length predictor"):
        tiny(True).length_logits(jnp.zeros((1, 3, 32)))


def test_latencies_time_every_system_on_every_sentence_in_rotating_order():
    calls = []

    class Recorder:  # what latencies needs of a Translator
        def __init__(self, name):
            self.name = name

        def warm_calls(self, method, batch_sizes=(1,), passes=False):
            return [lambda: calls.append(("warm", self.name))]

        def translate_one(self, text, method):
            calls.append((text, self.name))

    systems = {n: (Recorder(n), translate.Method("greedy")) for n in "abc"}
    t0 = time.perf_counter()
    times = translate.latencies(systems, ["s0", "s1", "s2", "s3"], progress=False)
    elapsed = time.perf_counter() - t0
    assert sorted(calls[:3]) == [("warm", n) for n in "abc"]  # every system compiled (side by side) before timing
    assert [n for _, n in calls[3:]] == list("abc" "bca" "cab" "abc")
    assert [t for t, _ in calls[3:]] == [f"s{i}" for i in range(4) for _ in range(3)]
    assert set(times) == set("abc") and all(v.shape == (4,) and (v > 0).all() for v in times.values())
    assert sum(v.sum() for v in times.values()) <= elapsed  # each a part of the call's own seconds
    with pytest.raises(ValueError, match="systems is empty"):
        translate.latencies({}, ["s0"])


def test_call_parts_time_a_translation_its_program_and_an_empty_call_with_the_same_arguments(monkeypatch):
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras"] * 20
    v = V.train(texts, 60)
    timed, calls = {}, {}
    best_times = timing.best_times

    def spy(fns, min_time):
        out = best_times(fns, min_time)
        timed[tuple(fns)] = min_time
        calls.update(fns)
        return out

    monkeypatch.setattr(timing, "best_times", spy)
    for causal, method in ((True, translate.Method("greedy")), (True, translate.Method("beam", beam=2)),
                           (False, translate.Method("padir", padir=decoding.PadirOptions(steps=2, hyps=2)))):
        cfg = seq2seq.ModelConfig(vocab=v.size, causal=causal, d_model=32, heads=4, enc_layers=1, dec_layers=1,
                                  d_ff=64, max_len=16)
        tr = translate.Translator(seq2seq.build(cfg), v, buckets=(16,))
        parts = decode_costs.call_parts(tr, method, texts[0][:12], min_time=0.02)
        assert set(parts) == {"translate_ms", "fresh_ms", "program_ms", "empty_ms"}
        assert all(0 < ms < float("inf") for ms in parts.values())
        # the decoder's program runs its loop; the empty call with its arguments runs none of it
        assert parts["empty_ms"] < parts["program_ms"], (method.label, parts)
        empty, given = decode_costs._EMPTY, []
        monkeypatch.setattr(decode_costs, "_EMPTY", lambda *a: given.append(len(a)) or empty(*a))
        calls["empty_ms"]()
        monkeypatch.setattr(decode_costs, "_EMPTY", empty)
        assert given == [4 if method.kind == "padir" else 2], method.label  # leaves, src (+ key, settings)
        # fresh: the source handed over from the host each call, as translate_one does (new device buffers);
        # program: the same device buffers every call
        decoder = {"greedy": "ar_greedy", "beam": "ar_beam"}.get(method.kind, "padir_ids")
        real, seen = getattr(decoding, decoder), []
        monkeypatch.setattr(decoding, decoder, lambda g, p, src, *a, **k: seen.append(src) or real(g, p, src, *a, **k))
        calls["fresh_ms"](), calls["fresh_ms"](), calls["program_ms"](), calls["program_ms"]()
        monkeypatch.setattr(decoding, decoder, real)
        assert [type(a) for a in seen[:2]] == [np.ndarray] * 2, method.label
        assert isinstance(seen[2], jax.Array) and seen[2] is seen[3], method.label
    assert list(timed) == [("translate_ms", "fresh_ms", "program_ms", "empty_ms")]
    assert timed[list(timed)[0]] == pytest.approx(0.06)
    with pytest.raises(ValueError, match="does not fit"):
        decode_costs.call_parts(tr, translate.Method("greedy"), texts[0])
    with pytest.raises(ValueError, match="text must be a non-empty sentence"):
        decode_costs.call_parts(tr, method, " ")
    for bad in (0, float("inf")):
        with pytest.raises(ValueError, match="min_time must be a positive number"):
            decode_costs.call_parts(tr, method, texts[0], min_time=bad)


def _toy_translator(texts, causal):
    """A Translator of an untrained one-layer model (d_model 32, max_len 16, buckets 8 and 16) on a
    vocabulary of 60 pieces trained on ``texts``."""
    v = V.train(texts, 60)
    cfg = seq2seq.ModelConfig(vocab=v.size, causal=causal, d_model=32, heads=4, enc_layers=1, dec_layers=1,
                              d_ff=64, max_len=16)
    return translate.Translator(seq2seq.build(cfg), v, buckets=(8, 16))


def test_translator_rejects_a_mismatched_method_and_long_sources():
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras"] * 20
    tr = _toy_translator(texts, causal=True)
    with pytest.raises(ValueError, match="does not fit"):
        tr.translate(texts[:1], translate.Method("padir"))
    with pytest.raises(ValueError, match="nothing is clipped"):
        tr.translate([" ".join(texts)], translate.Method("greedy"))
    texts = [t[:12] for t in texts]
    out = tr.translate(texts[:3], translate.Method("greedy"), batch_size=2)
    assert len(out) == 3 and out == tr.translate(texts[:3], translate.Method("greedy"), batch_size=2)
    # a source of exactly a bucket's length takes that bucket; one token more, the next or an error
    assert [tr.bucket(n) for n in (0, 8, 9, 16)] == [8, 8, 16, 16]
    with pytest.raises(ValueError, match="a source of 17 tokens exceeds the largest bucket"):
        tr.bucket(17)
    # an AR output keeps its repeated tokens (drop_repeats is PaDIR's, whatever the Method says)
    greedy = translate.Method("greedy", drop_repeats=True)
    rows = []
    for chunk, src, mask, key in tr.batches(texts, 4):
        rows += decoding.strip(tr.decode_ids(src, greedy, key)[: len(chunk)])
    assert any(a == b for r in rows for a, b in zip(r, r[1:]))  # the test's power: the model repeats
    by_chunk = [i for chunk, *_ in tr.batches(texts, 4) for i in chunk]
    got = tr.translate(texts, greedy, batch_size=4)
    assert [got[i] for i in by_chunk] == tr.vocab.decode(rows)
    # sentences per second: no more than the sentences over the whole call's seconds allow
    t0 = time.perf_counter()
    rate = tr.throughput(texts[:4], greedy, batch_size=2)
    assert 4 / (time.perf_counter() - t0) <= rate < float("inf")


def test_warm_calls_warm_up_and_throughput_run_the_programs_they_name(monkeypatch):
    """warm_calls gives one decode per (batch size, bucket) of that shape (with ``passes``: the pass
    count of a strategy), warm_up compiles them side by side, a translation runs the first batch of
    each shape side by side before the rest (with the same outputs), reports each batch to its
    progress bar, and throughput warms up, then times one translation of all the texts."""
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras"] * 20
    tr = _toy_translator(texts, causal=True)
    v = tr.vocab
    greedy = translate.Method("greedy")
    calls = tr.warm_calls(greedy, (1, 2))
    assert [c.args[0].shape for c in calls] == [(1, 8), (1, 16), (2, 8), (2, 16)]
    assert [c().shape[0] for c in calls] == [1, 1, 2, 2]
    real, seen = timing.compile_in_parallel, []
    monkeypatch.setattr(timing, "compile_in_parallel", lambda calls, threads=None: seen.append(len(calls)) or
                        real(calls, threads))
    tr.warm_up(greedy, (1, 2))
    assert seen == [4]
    lengths = {len(v.encode([texts[0][:n]])[0]): texts[0][:n] for n in range(1, len(texts[0]) + 1)}
    pair = [lengths[min(lengths)], lengths[max(n for n in lengths if n <= 16)]]  # one source in each bucket
    assert sorted(tr.bucket(len(r)) for r in v.encode(pair)) == [8, 16]

    class Bar:
        n = 0

        def update(self, k):
            self.n += k

    seen.clear()
    bar = Bar()
    assert tr.translate(pair * 2, greedy, batch_size=1, progress=bar) == [tr.translate_one(t, greedy) for t in pair * 2]
    assert seen == [2] and bar.n == 4  # the first batch of each of the two shapes, side by side; every sentence
    order = []
    monkeypatch.setattr(tr, "warm_up", lambda method, sizes: order.append(("warm_up", sizes)))
    monkeypatch.setattr(tr, "translate", lambda t, method, batch_size: order.append(("translate", len(t), batch_size)))
    assert tr.throughput(pair * 2, greedy, batch_size=2) > 0
    assert order == [("warm_up", (2,)), ("translate", 4, 2)]
    ptr = _toy_translator(texts, causal=False)
    strategy = translate.Method("padir", padir=decoding.StrategyOptions("threshold", steps=3))
    counted = ptr.warm_calls(strategy, (1,), passes=True)
    assert [c.args[2].shape for c in counted] == [(1, 8), (1, 16)]
    passes = [np.asarray(c()) for c in counted]
    assert all(p.shape == (1,) and 1 <= int(p[0]) <= 3 for p in passes)  # at most the strategy's T = 3


def test_method_labels_and_no_length_penalty():
    mp = decoding.StrategyOptions("mask_predict", steps=3, hyps=2)
    assert [translate.Method(k).label for k in ("greedy", "beam")] == ["AR greedy", "AR beam 4"]
    assert translate.Method("padir", padir=mp).label == "Mask-Predict T=3, #hyp=2"
    assert translate.Method("padir", padir=dataclasses.replace(mp, name="dependency")).label == \
        "dependency-aware T=3, #hyp=2"
    assert translate.Method("padir", padir=decoding.PadirOptions(steps=4, hyps=1)).label == "PaDIR T=4, #hyp=1"
    # a rule strategy is named by its rule and setting: two settings of one rule are two labels
    labels = [translate.Method("padir", padir=decoding.StrategyOptions.for_rule(name, value, steps=4)).label
              for name, value in (("threshold", 0.9), ("threshold", 0.7), ("dilated", 8), ("dependency_entropy", 0.3))]
    assert labels == ["threshold confidence=0.9 T=4, #hyp=1", "threshold confidence=0.7 T=4, #hyp=1",
                      "dilated block=8 T=4, #hyp=1", "dependency_entropy entropy=0.3 T=4, #hyp=1"]
    assert translate.Method("beam", alpha=0.0).alpha == 0.0  # the refusals: test_translation_option_boundaries


def test_a_rule_strategys_setting_goes_to_the_field_it_names_and_is_checked_there():
    """StrategyOptions.for_rule: every rule strategy has exactly one setting field; the other fields pass
    through; a non-rule name, the setting passed twice, and a rounded block size are refused."""
    assert set(decoding.RULE_SETTING) == set(decoding.RULE_STRATEGIES)
    for name, field in decoding.RULE_SETTING.items():
        value = 4 if field == "block" else 0.25
        got = decoding.StrategyOptions.for_rule(name, value, steps=3, hyps=2)
        assert got == decoding.StrategyOptions(name, steps=3, hyps=2, **{field: value})
    dep = decoding.StrategyOptions.for_rule("dependency_entropy", 0.3, dependency=0.8)
    assert (dep.entropy, dep.dependency) == (0.3, 0.8)
    with pytest.raises(ValueError, match="for_rule: name must be one of"):
        decoding.StrategyOptions.for_rule("mask_predict", 0.5)
    with pytest.raises(TypeError, match="'confidence' is the 'threshold' rule's setting"):
        decoding.StrategyOptions.for_rule("threshold", 0.5, confidence=0.7)
    with pytest.raises(TypeError, match="StrategyOptions.block must be an integer"):
        decoding.StrategyOptions.for_rule("dilated", 8.5)
    with pytest.raises(ValueError, match="power of two"):
        decoding.StrategyOptions.for_rule("dilated", 6)


def test_adjacent_similarities_of_translations_are_each_sentences_own_in_any_batch():
    """Translator.adjacent_similarities: one array of n - 1 values per output of n pieces, each equal to
    decoding.adjacent_similarity read on that sentence alone (whatever its batch and bucket), the
    output clipped to max_len; AR models and mismatched lists are refused."""
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras", "two men", "zwei Männer"] * 10
    tr = _toy_translator(texts, causal=False)
    sources = ["a small dog runs", "two men", "a dog", "ein Hund"]
    outputs = ["ein kleiner Hund", "zwei", "", " ".join(texts[:8])]  # one piece, none, longer than max_len
    got = tr.adjacent_similarities(sources, outputs, batch_size=3)
    ids = [row[: tr.cfg.max_len] for row in tr.vocab.encode(outputs)]
    assert [g.shape for g in got] == [(max(len(r) - 1, 0),) for r in ids] and len(ids[3]) == tr.cfg.max_len
    assert sorted({tr.bucket(len(r)) for r in tr.vocab.encode(sources)}) == [8, 16]  # two buckets, one batch each
    for i, (text, row) in enumerate(zip(sources, ids)):
        src_row = tr.vocab.encode([text])[0]
        src, mask = batching.pad([src_row], tr.bucket(len(src_row)))
        tgt, tmask = batching.pad([row], tr.cfg.max_len)
        want = np.asarray(decoding.adjacent_similarity(tr.graphdef, tr.params, jnp.asarray(src), jnp.asarray(mask),
                                                       jnp.asarray(tgt), jnp.asarray(tmask)))[0, : max(len(row) - 1, 0)]
        np.testing.assert_allclose(got[i], want, rtol=1e-5, atol=1e-6)
    alone = tr.adjacent_similarities(sources[:1], outputs[:1], batch_size=1)
    np.testing.assert_allclose(alone[0], got[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="one output per source"):
        tr.adjacent_similarities(sources, outputs[:2])
    with pytest.raises(ValueError, match="AR model"):
        _toy_translator(texts, causal=True).adjacent_similarities(sources, outputs)


SHARDING_SCRIPT = r"""
import os, sys, json
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
import jax
sys.path.insert(0, sys.argv[1])
from tests.test_translation_models import _cfg, _toy_batcher
from gmlm_lib.mt import training
import dataclasses
assert len(jax.devices()) == 8, jax.devices()
steps = []  # compilations of the update: one per bucket, before the first update, if the copies it ran on match
jax.monitoring.register_event_duration_secs_listener(
    lambda event, d, fun_name=None, **_: steps.append(fun_name)
    if event == "/jax/core/compile/backend_compile_duration" and fun_name == "jit(step)" else None)
out = {}
for kind in ("ar", "padir"):
    cfg = dataclasses.replace(_cfg(kind), steps=2, log_every=1, checkpoint_every=100)
    batcher = _toy_batcher(multiple=8, n=128)
    steps.clear()
    many = training.train(cfg, batcher, sys.argv[2] + "/" + kind + "8", progress=False)
    compiled = len(steps)
    one = training.train(cfg, batcher, sys.argv[2] + "/" + kind + "1", devices=jax.devices()[:1], progress=False)
    out[kind] = dict(many=many.losses, one=one.losses, batch=int(batcher.at(0).src.shape[0]), compiled=compiled,
                     buckets=len(batcher.groups))
refused = {}  # batches that cannot be split evenly over the 8 devices: refused by name before any update
for what, data, val in (("train", _toy_batcher(multiple=4, n=32), None),
                        ("val", _toy_batcher(multiple=8, n=128), _toy_batcher(multiple=4, n=32))):
    try:
        training.train(_cfg("ar"), data, sys.argv[2] + "/refused_" + what, val=val, progress=False)
    except ValueError as err:
        refused[what] = str(err)
print(json.dumps(dict(runs=out, refused=refused)))
"""


@pytest.mark.slow
def test_data_parallel_on_8_host_devices_matches_one_device(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")  # the script adds 8 host devices to the session's XLA_FLAGS
    res = subprocess.run([sys.executable, "-c", SHARDING_SCRIPT, str(ROOT), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["refused"] == {
        "train": "Batcher.multiple = 4 must be a multiple of the 8 devices.",
        "val": "the val Batcher's multiple = 4 must be a multiple of the 8 devices (batch it as the training data)."}
    for kind, r in out["runs"].items():
        assert r["batch"] % 8 == 0
        assert r["compiled"] == r["buckets"]  # compiled once per bucket, early, for the sharded arrays it then runs on
        assert [s for s, _ in r["many"]] == [1, 2]
        for (_, a), (_, b) in zip(r["many"], r["one"]):
            assert abs(a - b) <= 1e-5, (kind, r)


@pytest.mark.parametrize("variant", [dict(optimizer="adafactor"), dict(model_dtype="bfloat16"), dict(fill="mask", stages=1)])
def test_optimiser_precision_and_corruption_variants_train(variant, tmp_path):
    cfg = _cfg("padir")
    dtype = variant.pop("model_dtype", None)
    if dtype:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dtype=dtype))
    cfg = dataclasses.replace(cfg, steps=8, checkpoint_every=8, log_every=1, **variant)
    res = training.train(cfg, _toy_batcher(), tmp_path / "run", progress=False)
    assert all(np.isfinite(loss) for _, loss in res.losses)
    first, last = np.mean([l for _, l in res.losses[:2]]), np.mean([l for _, l in res.losses[-2:]])
    assert last < first - 0.05, res.losses  # it learns: the loss falls, not merely stays finite
    leaves = jax.tree.leaves(nnx.state(res.model, nnx.Param))
    assert all(x.dtype == jnp.float32 for x in leaves)  # parameters stay float32 whatever the compute dtype
    if dtype:
        m = res.model
        enc, _ = m.encode(jnp.full((1, 4), 7, jnp.int32), jnp.ones((1, 4), bool))
        assert enc.dtype == jnp.bfloat16


def _mask_predict_by_definition(model, src, sm, opts, width):
    """Mask-Predict written from its description, one hypothesis, with NumPy bookkeeping."""
    enc, em, lengths = decoding.padir_encode(*nnx.split(model), src, sm, hyps=1)
    n = int(lengths[0, 0])
    tmask = jnp.arange(width)[None] < n
    hyp = np.where(np.asarray(tmask), V.MASK, V.PAD)
    tokens, logp = hyp.copy(), np.zeros(hyp.shape, np.float32)
    for t in range(opts.steps):
        logits = model.decode(jnp.asarray(hyp), tmask, enc, em)
        lp = jax.nn.log_softmax(logits.at[..., jnp.array(decoding._PADIR_FORBIDDEN)].set(-jnp.inf))
        pred, plp = np.asarray(jnp.argmax(lp, -1)), np.asarray(jnp.max(lp, -1))
        masked = (hyp == V.MASK) & np.asarray(tmask)
        tokens[masked], logp[masked] = pred[masked], plp[masked]
        k = int(np.floor(n * (opts.steps - 1 - t) / opts.steps))
        if k == 0:
            return tokens[0, :n]
        again = np.argsort(logp[0, :n], kind="stable")[:k]
        hyp = tokens.copy()
        hyp[0, again] = V.MASK
    return tokens[0, :n]


def test_mask_predict_follows_its_definition():
    """Mask-Predict on the decoder gives, token for token, its description written out; on a model whose
    prediction depends on what is fed back, so that committing instead of re-masking (the dependency
    strategy's rule) gives another output and the comparison can fail."""
    m = seven_long(spread(tiny(False)))  # several re-masks
    g, p = nnx.split(m)
    other = 0
    for seed, steps in [(0, 4), (2, 10), (3, 4)]:
        src, sm = ids(60 + seed, (1, 8)), jnp.ones((1, 8), bool)
        opts = decoding.StrategyOptions("mask_predict", steps=steps, hyps=1)
        got = np.asarray(decoding.padir_ids(g, p, src, sm, jax.random.key(0), options=opts, widths=(8, 16)))
        ref = _mask_predict_by_definition(m, src, sm, opts, 8)
        np.testing.assert_array_equal(got[0, :7], ref)
        assert (got[0, 7:] == V.PAD).all() and len(set(ref.tolist())) >= 3
        committing = decoding.StrategyOptions("dependency", steps=steps, hyps=1, refill="mask")
        other += not np.array_equal(
            decoding.padir_ids(g, p, src, sm, jax.random.key(0), options=committing, widths=(8, 16)), got)
    assert other > 0


def test_adjacent_similarity_is_the_one_sentence_definition_batched():
    """decoding.adjacent_similarity (batched, compiled) equals, row by row, the statistic read from
    one sentence at a time: cross-attention averaged over layers and heads, cosine of i and i + 1,
    at any padding of the source and whatever the other rows hold."""
    m = tiny(False)
    g, p = nnx.split(m)
    lengths_src, lengths_tgt = [5, 8, 3], [6, 2, 9]
    src_rows = [np.asarray(ids(20 + i, (n,))).tolist() for i, n in enumerate(lengths_src)]
    tgt_rows = [np.asarray(ids(30 + i, (n,))).tolist() for i, n in enumerate(lengths_tgt)]
    src, sm = batching.pad(src_rows, 8)
    tgt, tm = batching.pad(tgt_rows, 16)
    got = np.asarray(decoding.adjacent_similarity(g, p, jnp.asarray(src), jnp.asarray(sm), jnp.asarray(tgt),
                                                  jnp.asarray(tm)))
    assert got.shape == (3, 15)
    for r, (s_row, t_row) in enumerate(zip(src_rows, tgt_rows)):
        s1, m1 = batching.pad([s_row], len(s_row))  # no padding at all
        t1, n1 = batching.pad([t_row], 16)
        enc, enc_mask = m.encode(jnp.asarray(s1), jnp.asarray(m1))
        _, w = m.decode(jnp.asarray(t1), jnp.asarray(n1), None, enc_mask, cross_kv=m.cross_kv(enc),
                        return_attention=True)
        cross = np.asarray(jnp.mean(jnp.stack([c for _, c in w]), axis=(0, 2)))[0, : len(t_row)]
        unit = cross / np.linalg.norm(cross, axis=-1, keepdims=True)
        want = np.sum(unit[:-1] * unit[1:], axis=-1)
        np.testing.assert_allclose(got[r, : len(t_row) - 1], want, rtol=1e-5, atol=1e-6)


def test_dependency_aware_commits_by_confidence_and_dependency():
    """The commit rule on a hand-made row: most confident first, a dependent position waits,
    the quota overrides both; and end to end every position is filled within T passes."""
    p = jnp.array([0.9, 0.8, 0.7, 0.2, 0.95])
    dep = jnp.zeros((5, 5), bool).at[0, 1].set(True).at[1, 0].set(True)
    eligible = jnp.array([True, True, True, True, False])
    chosen = decoding._commit(p, dep, eligible, 0, 0.5)
    assert chosen.tolist() == [True, False, True, False, False]  # 1 depends on 0; 3 is not confident; 4 is done
    chosen = decoding._commit(p, dep, eligible, 3, 0.5)
    assert chosen.tolist() == [True, True, True, False, False]  # the quota of 3 takes 0, 1, 2
    m = tiny(False)
    g, prm = nnx.split(m)
    src, sm = ids(70, (3, 8)), jnp.ones((3, 8), bool)
    for refill in ("prediction", "mask"):
        for steps in (1, 3):
            opts = decoding.StrategyOptions("dependency", steps=steps, hyps=2, confidence=0.3, dependency=0.5,
                                            refill=refill)
            out = np.asarray(decoding.padir_ids(g, prm, src, sm, jax.random.key(0), options=opts, widths=(8, 16)))
            for row in out:
                real = row[row != V.PAD]
                assert len(real) >= 1 and (real >= V.FIRST_PIECE).all()  # no [MASK] left


def _dependency_by_definition(model, src, sm, opts, width):
    """The dependency-aware strategy written from its description, one hypothesis, NumPy bookkeeping:
    a pass predicts every open position; positions whose cross-attention distributions (averaged over
    layers and heads) have cosine similarity above ``dependency`` are dependent; visiting the open
    positions most confident first, one is committed while fewer than the quota ceil(n (t + 1) / T)
    (less those committed before) are, or when it is confident and depends on none committed in this
    pass; the open ones are fed back as their prediction or as [MASK]. Each of the ``hyps`` predicted
    lengths is decoded so, and the one whose tokens have the best mean log-probability (each when it
    was last predicted) is the output. Returns its tokens and, over all hypotheses, how many times a
    confident position waited for a dependent one and how many were committed beyond the quota (confident
    and independent)."""
    enc, em, lengths = decoding.padir_encode(*nnx.split(model), src, sm, hyps=opts.hyps)
    best, waited, beyond = None, 0, 0
    for n in np.asarray(lengths[0]).tolist():
        tokens, logp, w, b = _dependency_hypothesis(model, enc, em, n, opts, width)
        waited, beyond = waited + w, beyond + b
        if best is None or logp.mean() > best[1]:
            best = tokens, logp.mean()
    return best[0], waited, beyond


def _dependency_hypothesis(model, enc, em, n, opts, width):
    """One length hypothesis of :func:`_dependency_by_definition`: its tokens, their log-probabilities,
    the waits and the commits beyond the quota."""
    tmask = jnp.arange(width)[None] < n
    done, tokens, logp = np.zeros(n, bool), np.full(n, V.MASK), np.zeros(n, np.float32)
    waited = beyond = 0
    for t in range(opts.steps):
        hyp = np.full((1, width), V.PAD)
        hyp[0, :n] = np.where(done | (opts.refill == "prediction"), tokens, V.MASK)
        logits, weights = model.decode(jnp.asarray(hyp), tmask, None, em, cross_kv=model.cross_kv(enc),
                                       return_attention=True)
        lp = jax.nn.log_softmax(logits.at[..., jnp.array(decoding._PADIR_FORBIDDEN)].set(-jnp.inf))[0, :n]
        tokens = np.where(done, tokens, np.asarray(jnp.argmax(lp, -1)))
        logp = np.where(done, logp, np.asarray(jnp.max(lp, -1)))
        cross = np.asarray(jnp.mean(jnp.stack([c for _, c in weights]), axis=(0, 2)))[0, :n]
        unit = cross / np.linalg.norm(cross, axis=-1, keepdims=True)
        dependent = unit @ unit.T > opts.dependency
        quota = -(-n * (t + 1) // opts.steps) - int(done.sum())
        confidence = np.exp(logp)
        chosen = []
        for i in sorted(np.flatnonzero(~done), key=lambda i: (-confidence[i], i)):
            free = not any(dependent[i, j] for j in chosen)
            if len(chosen) < quota or (confidence[i] >= opts.confidence and free):
                beyond += len(chosen) >= quota
                chosen.append(i)
            else:
                waited += bool(confidence[i] >= opts.confidence)
        done[chosen] = True
        if done.all():
            break
    return tokens, logp, waited, beyond


def test_the_dependency_strategy_follows_its_definition():
    """The dependency-aware strategy on the decoder gives, token for token, its description written out,
    with both refills, on cases where a confident position waits for a dependent one and where none is
    confident (the quota alone commits), and where confident independent positions are committed beyond
    the quota (similarity threshold 0.97: few pairs dependent); with three length
    hypotheses, the one with the best mean log-probability is the output (not always the most likely
    length, so choosing by the length predictor alone would fail)."""
    m = spread(tiny(False))
    m.length_head.bias[...] = m.length_head.bias[...].at[jnp.array([7, 4, 6])].add(jnp.array([50.0, 49.0, 48.0]))
    g, p = nnx.split(m)
    waited, beyond, lengths = 0, 0, set()
    for seed, steps, refill, conf, dep, hyps in [(0, 3, "prediction", 0.3, 0.5, 1), (1, 6, "mask", 0.3, 0.5, 1),
                                                 (2, 4, "prediction", 0.5, 0.8, 3), (3, 5, "mask", 0.1, 0.9, 3),
                                                 (4, 4, "prediction", 0.3, 0.7, 3), (5, 3, "mask", 0.3, 0.7, 3),
                                                 (6, 6, "mask", 0.999, 0.5, 1), (7, 5, "prediction", 0.999, 0.9, 3),
                                                 (11, 5, "mask", 0.3, 0.97, 3)]:
        src, sm = ids(110 + seed, (1, 8)), jnp.ones((1, 8), bool)
        opts = decoding.StrategyOptions("dependency", steps=steps, hyps=hyps, confidence=conf, dependency=dep,
                                        refill=refill)
        got = np.asarray(decoding.padir_ids(g, p, src, sm, jax.random.key(0), options=opts, widths=(8, 16)))
        want, w, b = _dependency_by_definition(m, src, sm, opts, 8)
        np.testing.assert_array_equal(got[0, :len(want)], want, err_msg=str(opts))
        assert (got[0, len(want):] == V.PAD).all()
        waited, beyond = waited + w, beyond + b
        lengths.add(len(want))
    assert waited > 0 and beyond > 0 and len(lengths) > 1


def test_a_dependency_aware_pass_commits_its_quota_then_only_confident_independent_positions():
    """One row of one pass: the ``quota`` most confident eligible positions are committed whatever they
    depend on, then each further one only if its probability is at least the threshold and it depends on
    no position committed before it in the pass."""
    p = jnp.array([0.9, 0.8, 0.7, 0.2])
    free, every = jnp.zeros((4, 4), bool), jnp.ones(4, bool)

    def commit(quota, threshold, dep=free, eligible=every):
        return np.asarray(decoding._commit(p, dep, eligible, jnp.int32(quota), threshold)).tolist()

    assert commit(1, 0.95) == [True, False, False, False]  # the quota alone
    assert commit(2, 0.95) == [True, True, False, False]
    assert commit(0, 0.95) == [False] * 4
    assert commit(1, 0.8) == [True, True, False, False]  # confident: at the threshold itself
    assert commit(1, 0.7) == [True, True, True, False]
    assert commit(1, 0.7, dep=free.at[1, 0].set(True)) == [True, False, True, False]  # 1 depends on 0: waits
    assert commit(2, 0.95, dep=free.at[1, 0].set(True)) == [True, True, False, False]  # within the quota: committed
    assert commit(1, 0.95, eligible=every.at[0].set(False)) == [False, True, False, False]


@pytest.mark.parametrize("kwargs, words", [
    (dict(name="greedy"), ["name", "mask_predict"]), (dict(name="dependency", steps=0), ["steps", ">= 1"]),
    (dict(name="dependency", hyps=-1), ["hyps"]), (dict(name="dependency", confidence=1.5), ["confidence", "[0, 1]"]),
    (dict(name="dependency", dependency=-0.1), ["dependency", "[0, 1]"]),
    (dict(name="mask_predict", refill="noise"), ["refill"]),
])
def test_strategy_options_out_of_range_are_named(kwargs, words):
    with pytest.raises(ValueError) as err:
        decoding.StrategyOptions(**kwargs)
    for w in words:
        assert w in str(err.value)


def _dus_passes(n, block):
    """DUS's schedule written out: blocks of ``block = 2^L`` positions left to right; within a block,
    offset 0, then the offsets at gap ``block / 2``, ``block / 4``, ..., 1 not taken before (each pass
    halves the gaps); a pass outside the ``n`` positions is dropped. A list of sets of positions."""
    passes = []
    for start in range(0, n, block):
        taken, gap = {0}, block
        passes.append({start})
        while gap > 1:
            gap //= 2
            level = {j for j in range(0, block, gap) if j not in taken}
            taken |= level
            passes.append({start + j for j in level if start + j < n})
    return [p for p in passes if p]


def _rule_by_definition(model, src, sm, opts, width):
    """The threshold / factor / entropy / dilated / dependency_entropy strategies written from their
    descriptions, one hypothesis, NumPy bookkeeping: a pass predicts every open position given the
    committed ones (the others [MASK]); the rule picks; the quota ceil(n (t + 1) / T) tops it up, most
    confident first. Returns the tokens, the passes run and, for dependency_entropy, the smallest
    distance of a similarity from its threshold and of a charge from gamma over the passes (a
    comparison that close could go either way in float32; inf for the other rules)."""
    import brute  # here, not at the top: a subprocess imports this module without tests/ on its path

    enc, em, lengths = decoding.padir_encode(*nnx.split(model), src, sm, hyps=1)
    n = int(lengths[0, 0])
    tmask = jnp.arange(width)[None] < n
    done = np.zeros(n, bool)
    tokens = np.zeros(n, np.int64)
    margin = np.inf
    for t in range(opts.steps):
        hyp = np.full((1, width), V.PAD)
        hyp[0, :n] = np.where(done, tokens, V.MASK)
        logits, weights = model.decode(jnp.asarray(hyp), tmask, enc, em, return_attention=True)
        logits = logits.at[..., jnp.array(decoding._PADIR_FORBIDDEN)].set(-jnp.inf)
        lp = np.asarray(jax.nn.log_softmax(logits))[0, :n]
        q = np.exp(lp)
        # the argmax's probability by the decoder's own formula, so near-ties order the same way
        conf = np.asarray(jnp.exp(-jnp.log(jnp.sum(jnp.exp(logits - jnp.max(logits, -1, keepdims=True)), -1))))[0, :n]
        ent = -np.sum(np.where(q > 0, q * np.where(q > 0, lp, 0.0), 0.0), -1)
        tokens = np.where(done, tokens, lp.argmax(-1))
        open_ = [i for i in range(n) if not done[i]]
        by_conf = sorted(open_, key=lambda i: (-conf[i], i))
        if opts.name == "threshold":
            pick = [i for i in open_ if conf[i] >= opts.confidence] or by_conf[:1]
        elif opts.name == "factor":
            m = max([m for m in range(1, len(open_) + 1) if (m + 1) * (1 - conf[by_conf[m - 1]]) < opts.factor],
                    default=1)
            pick = by_conf[:m]
        elif opts.name == "entropy":
            by_ent = sorted(open_, key=lambda i: (ent[i], i))
            m = max(m for m in range(1, len(open_) + 1) if sum(ent[by_ent[:m]]) - max(ent[by_ent[:m]]) <= opts.entropy)
            pick = by_ent[:m]
        elif opts.name == "dilated":  # the earliest pass of the schedule with an open position, its open ones
            pick = next(sorted(p & set(open_)) for p in _dus_passes(n, opts.block) if p & set(open_))
        else:  # dependency_entropy: the entropy bound charged within groups joined through open positions
            cross = np.asarray(jnp.mean(jnp.stack([c for _, c in weights]), axis=(0, 2)))[0, :n]
            unit = cross / np.linalg.norm(cross, axis=-1, keepdims=True)
            sim = unit @ unit.T
            linked = {i: {j for j in open_ if j != i and sim[i, j] > opts.dependency} for i in open_}
            margin = min([margin] + [abs(sim[i, j] - opts.dependency) for i in open_ for j in open_ if i != j])
            by_ent = sorted(open_, key=lambda i: (ent[i], i))
            pick = {by_ent[0]}
            for i in by_ent[1:]:
                charge = brute.group_charge(pick | {i}, ent, linked)
                margin = min(margin, abs(charge - opts.entropy))
                if charge <= opts.entropy:
                    pick.add(i)
            pick = sorted(pick)
        done[pick] = True
        need = int(np.ceil(n * (t + 1) / opts.steps)) - int(done.sum())
        for i in [i for i in by_conf if not done[i]][:max(need, 0)]:
            done[i] = True
        if done.all():
            break
    return tokens, t + 1, margin


@pytest.mark.slow  # compiles a decoder per setting
@pytest.mark.parametrize("name,kw,seed,steps", [
    ("threshold", dict(confidence=0.1), 0, 3), ("threshold", dict(confidence=0.9), 1, 7),
    ("factor", dict(factor=1.5), 0, 7), ("entropy", dict(entropy=0.5), 1, 7), ("entropy", dict(entropy=50.0), 0, 3),
    ("threshold", dict(confidence=1.0), 2, 4), ("factor", dict(factor=1e-3), 3, 3),  # the quota alone decides
    ("dilated", dict(block=4), 0, 7),  # the schedule alone: six passes, each at or above the quota
    ("dilated", dict(block=8), 1, 4),  # the schedule topped up by the quota
    # the groups decide: two passes where the entropy bound alone takes four (other tokens at 0.2, the same at 0.3)
    ("dependency_entropy", dict(dependency=0.99, entropy=0.2), 2, 7),
    ("dependency_entropy", dict(dependency=0.995, entropy=0.3), 3, 7)])
def test_2025_rules_follow_their_definitions(name, kw, seed, steps):
    """The threshold, factor, entropy, dilated and dependency_entropy strategies (Fast-dLLM, EB-Sampler,
    DUS, ours) on the decoder match a by-definition implementation, token for token and in the number
    of passes run (on a model whose prediction depends on its input)."""
    m = seven_long(spread(tiny(False)))
    g, p = nnx.split(m)
    src, sm = ids(80 + seed, (1, 8)), jnp.ones((1, 8), bool)
    opts = decoding.StrategyOptions(name, steps=steps, hyps=1, **kw)
    got = np.asarray(decoding.padir_ids(g, p, src, sm, jax.random.key(0), options=opts, widths=(8, 16)))
    want, passes, margin = _rule_by_definition(m, src, sm, opts, 8)
    np.testing.assert_array_equal(got[0, :7], want)
    assert (got[0, 7:] == V.PAD).all()
    assert int(decoding.strategy_passes(g, p, src, sm, options=opts, widths=(8, 16))[0]) == passes
    assert margin > 1e-5  # no similarity or charge so near its threshold that float32 rounding could flip it


def test_a_strategy_decode_stops_once_every_position_is_committed():
    """The strategy loop runs the passes its rows need and no more: ``steps`` (the passes the batch ran,
    what the latency tables time) equals the most ``passes`` of any row (what strategy_passes reports),
    below T where an adaptive rule commits early, and for Mask-Predict on seven positions with T = 10,
    nine (after pass 9 it remasks floor(7 x 1 / 10) = 0). The tokens alone cannot tell: a pass after
    every position is committed changes none."""
    m = seven_long(spread(tiny(False)))
    src, sm = ids(80, (2, 8)), jnp.ones((2, 8), bool)
    enc, em, lengths = decoding.padir_encode(*nnx.split(m), src, sm, hyps=1)
    for name, kw, T, want in (("threshold", dict(confidence=0.1), 7, 1), ("threshold", dict(confidence=0.9), 7, 4),
                              ("entropy", dict(entropy=50.0), 5, 1), ("mask_predict", {}, 10, 9)):
        out = decoding._strategy_refine(m, enc, em, lengths, decoding.StrategyOptions(name, steps=T, hyps=1, **kw), 8)
        assert int(out["steps"]) == int(np.max(out["passes"])) == want, (name, kw)


def test_a_sweep_over_T_and_thresholds_compiles_one_decoder():
    """T and a strategy's thresholds are arguments of the compiled decoder, not constants: a
    frontier over T and a grid of thresholds compile once per strategy and input shape (on an
    accelerator a compilation costs seconds), while each setting still decodes as itself."""
    m = seven_long(tiny(False))
    g, p = nnx.split(m)
    src, sm = ids(9, (1, 8)), jnp.ones((1, 8), bool)  # a source whose settings decode differently
    decoding.clear_compiled()
    got = {}
    for steps, tau in [(1, 0.1), (3, 0.1), (7, 0.1), (7, 0.99)]:
        opts = decoding.StrategyOptions("threshold", steps=steps, hyps=1, confidence=tau)
        got[steps, tau] = np.asarray(decoding.padir_ids(g, p, src, sm, jax.random.key(0), options=opts,
                                                        widths=(8, 16)))[0, :7]
    for steps in (1, 2, 5):
        decoding.padir_ids(g, p, src, sm, jax.random.key(0), options=decoding.PadirOptions(steps=steps, hyps=1),
                           widths=(8, 16))
    compiled = [f for (_, fn, *_), f in decoding._COMPILED.items() if fn is decoding._padir_ids]
    assert len(compiled) == 2 and all(f._cache_size() == 1 for f in compiled)  # one threshold, one plain program
    # the settings still differ: one pass commits everything at once; a high threshold commits by the quota alone
    assert len({tuple(v) for v in got.values()}) == 3
    for (steps, tau), out in got.items():
        opts = decoding.StrategyOptions("threshold", steps=steps, hyps=1, confidence=tau)
        np.testing.assert_array_equal(out, _rule_by_definition(m, src, sm, opts, 8)[0])
    with pytest.raises(ValueError, match="needs records"):
        decoding._refine(m, *decoding._encode_lengths(m, src, sm, 1), jax.random.key(0),
                         decoding.PadirOptions(steps=2, hyps=1), 8, history=True,
                         numbers={"steps": jnp.int32(2)})


@pytest.mark.slow  # compiles a decoder per setting
@pytest.mark.parametrize("name", decoding.RULE_STRATEGIES)
def test_rule_strategies_fill_every_position_within_T_passes(name):
    m = tiny(False)
    g, prm = nnx.split(m)
    src, sm = ids(90, (3, 8)), jnp.ones((3, 8), bool)
    model = nnx.merge(g, prm)
    for steps in (1, 5):
        opts = decoding.StrategyOptions(name, steps=steps, hyps=2, confidence=0.5, dependency=0.5, block=4,
                                        entropy=0.3)
        out = np.asarray(decoding.padir_ids(g, prm, src, sm, jax.random.key(0), options=opts, widths=(16,)))
        for row in out:
            real = row[row != V.PAD]
            assert len(real) >= 1 and (real >= V.FIRST_PIECE).all()  # no [MASK] left
    enc, em, lengths = decoding._encode_lengths(model, src, sm, 2)
    ran = decoding._strategy_refine(model, enc, em, lengths, opts, 16)
    passes = np.asarray(decoding.strategy_passes(g, prm, src, sm, options=opts, widths=(16,)))
    np.testing.assert_array_equal(passes, np.asarray(ran["passes"]))
    assert passes.max() == int(ran["steps"]) and 1 <= passes.min() and passes.max() <= 5
    row = int(np.argmin(passes))  # a sentence decoded alone runs the passes counted for it in the batch
    alone = decoding._strategy_refine(model, enc[row:row + 1], em[row:row + 1], lengths[row:row + 1], opts, 16)
    assert int(alone["steps"]) == passes[row]


@pytest.mark.parametrize("kwargs, words", [
    (dict(name="factor", factor=0.0), ["factor", "> 0"]), (dict(name="entropy", entropy=float("nan")), ["entropy"]),
    (dict(name="dilated", block=6), ["block", "power of two"]), (dict(name="dilated", block=True), ["block"]),
    (dict(name="dilated", block=1), ["block", "power of two >= 2"]),
    (dict(name="threshold", confidence=True), ["confidence"]),
])
def test_rule_strategy_options_out_of_range_are_named(kwargs, words):
    with pytest.raises((ValueError, TypeError)) as err:  # TypeError: a bool is not a count
        decoding.StrategyOptions(**kwargs)
    for w in words:
        assert w in str(err.value)


def test_the_smallest_dilated_block_is_two():
    assert decoding.StrategyOptions("dilated", block=2).block == 2


def test_strategy_passes_refuses_plain_refinement():
    g, p = nnx.split(tiny(False))
    src, sm = ids(1, (1, 8)), jnp.ones((1, 8), bool)
    with pytest.raises(TypeError, match="StrategyOptions.*PadirOptions"):
        decoding.strategy_passes(g, p, src, sm, options=decoding.PadirOptions(), widths=(16,))


@pytest.mark.slow  # compiles a decoder per setting
def test_translator_counts_each_sentences_passes():
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras", "two men", "a cat"] * 10
    tr = _toy_translator(texts, causal=False)
    method = translate.Method("padir", padir=decoding.StrategyOptions("threshold", steps=3, hyps=1, confidence=0.9))
    texts = ["a small dog", "two men", "a cat", "ein Hund"]
    got = tr.passes(texts, method, batch_size=3)
    assert got.shape == (4,) and ((1 <= got) & (got <= 3)).all()
    alone = [int(tr.passes([t], method, batch_size=1)[0]) for t in texts]
    assert got.tolist() == alone  # a sentence's count does not depend on its batch
    with pytest.raises(ValueError, match="StrategyOptions"):
        tr.passes(texts[:1], translate.Method("padir"))


@pytest.mark.slow  # compile counting: in the main suite, not in the newest-versions job
def test_batched_translation_compiles_its_buckets_side_by_side_and_gives_the_same_outputs(monkeypatch):
    from gmlm_lib.core import devtrace, timing

    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras", "a dog", "ein Hund im Park"] * 10
    v = V.train(texts, 60)
    out = {}
    for causal in (True, False):
        cfg = seq2seq.ModelConfig(vocab=v.size, causal=causal, d_model=32, heads=4, enc_layers=1, dec_layers=1,
                                  d_ff=64, max_len=32)
        tr = translate.Translator(seq2seq.build(cfg, 3), v, buckets=(8, 16, 32))
        method = translate.Method("greedy") if causal else translate.Method(
            "padir", padir=decoding.PadirOptions(steps=2, hyps=2))
        shapes = {src.shape for _, src, _, _ in tr.batches(texts, 3)}
        assert len(shapes) >= 2
        seen = []
        real = timing.compile_in_parallel
        monkeypatch.setattr(timing, "compile_in_parallel", lambda calls, threads=None: seen.append(len(calls)) or
                            real(calls, threads))
        parallel = tr.translate(texts, method, batch_size=3)
        monkeypatch.setattr(timing, "compile_in_parallel", lambda calls, threads=None: 0.0)  # nothing run early
        decoding.clear_compiled()
        serial = [None] * len(texts)
        for chunk, src, mask, key in tr.batches(texts, 3):
            for i, t in zip(chunk, v.decode(tr._strip(tr.decode_ids(src, method, key), method))):
                serial[i] = t
        assert seen == [len(shapes)] and parallel == serial
        out[causal] = parallel
        if not causal:
            strategy = translate.Method("padir", padir=decoding.StrategyOptions("threshold", steps=3, confidence=0.5))
            monkeypatch.setattr(timing, "compile_in_parallel", real)
            got = tr.passes(texts, strategy, batch_size=3)
            assert got.shape == (len(texts),) and got.min() >= 1 and got.max() <= 3
            monkeypatch.setattr(timing, "compile_in_parallel", lambda calls, threads=None: 0.0)
            assert (tr.passes(texts, strategy, batch_size=3) == got).all()  # the same without the early batches
    assert all(len(o) == len(texts) for o in out.values())


@pytest.mark.slow  # compile counting: in the main suite, not in the newest-versions job
def test_compile_all_compiles_every_system_and_bucket_before_a_sweep():
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras", "a dog", "ein Hund im Park"] * 4
    v = V.train(texts, 60)
    cfg = seq2seq.ModelConfig(vocab=v.size, causal=False, d_model=32, heads=4, enc_layers=1, dec_layers=1,
                              d_ff=64, max_len=32)
    tr = translate.Translator(seq2seq.build(cfg, 5), v, buckets=(8, 16, 32))
    rules = [translate.Method("padir", padir=decoding.StrategyOptions(name, steps=t))
             for name in ("threshold", "entropy") for t in (2, 4)]  # T and the rule are arguments: one program
    compiled = _compiled_names()
    decoding.clear_compiled()
    compiled.clear()
    assert translate.compile_all([(tr, m) for m in rules], (3,)) > 0
    assert compiled.count("jit(_padir_ids)") == len(tr.buckets)
    assert translate.compile_all([(tr, m) for m in rules], (3,), passes=True) > 0
    assert compiled.count("jit(_strategy_passes)") == len(tr.buckets)
    compiled.clear()
    for m in rules:
        tr.translate(texts, m, batch_size=3)
        tr.passes(texts, m, batch_size=3)
    assert "jit(_padir_ids)" not in compiled and "jit(_strategy_passes)" not in compiled  # all compiled before
    with pytest.raises(ValueError, match="pass count of a StrategyOptions"):
        tr.warm_calls(translate.Method("padir"), passes=True)


def _lowered_and_decoded(tr, src, mask, options):
    """``options``' compiled decoder as lowered text (its structure's program, the operands at their values)
    and its output, checked equal to the unjitted decoder (``_strategy_refine``, ``_refine``) of ``options``
    itself, whose settings are Python constants."""
    structure, numbers = decoding._dynamic(options)
    fn = decoding.jitted(decoding._padir_ids, tr.graphdef, options=structure, widths=tr.widths)
    text = fn._plain.lower(tr.params, src, mask, tr.key, numbers).as_text(debug_info=False)
    shared = np.asarray(decoding.padir_ids(tr.graphdef, tr.flat, src, mask, tr.key, options=options,
                                           widths=tr.widths))
    model = nnx.merge(tr.graphdef, tr.params)
    enc, enc_mask, lengths = decoding._encode_lengths(model, jnp.asarray(src), jnp.asarray(mask), options.hyps)
    width = tr.widths[int(decoding._width_index(tr.widths, lengths))]
    if isinstance(options, decoding.StrategyOptions):
        own = decoding._strategy_refine(model, enc, enc_mask, lengths, options, width)["ids"]
    else:
        keys = decoding.source_keys(tr.key, src, mask)
        own = decoding._refine(model, enc, enc_mask, lengths, keys, options, width, history=False)["ids"]
    np.testing.assert_array_equal(shared[:, :width], np.asarray(own))
    return text, shared


def test_the_2025_rules_share_one_decoder_and_each_decodes_as_its_own():
    """Threshold, factor, entropy and dilated strategies at any setting (DUS's block size included) lower to
    one decoder program (the rule and its setting operands, decoding.SHARED_RULES), and each decodes as its own
    options do unjitted, the settings read from the options (test_2025_rules_follow_their_definitions holds
    each rule to its definition)."""
    tr, texts = _padir_translator()
    src, mask = batching.pad(tr.vocab.encode(texts[:6]), 16)
    text = set()
    for name, setting in (("threshold", 0.6), ("factor", 1.5), ("entropy", 0.4), ("dilated", 2), ("dilated", 4),
                          ("dilated", 16)):
        options = decoding.StrategyOptions.for_rule(name, setting, steps=3, hyps=2)
        structure, numbers = decoding._dynamic(options)
        assert structure.name == "threshold" and int(numbers["rule"]) == decoding.SHARED_RULES.index(name)
        text.add(_lowered_and_decoded(tr, src, mask, options)[0])
    assert len(text) == 1


def test_the_dependency_strategys_refill_is_an_operand_of_one_decoder():
    """The dependency-aware strategy with either refill ("prediction", "mask") lowers to one decoder program
    (refill an operand), each decoding as its own options do unjitted; the two differ on these inputs, so the
    operand is read."""
    tr, texts = _padir_translator()
    src, mask = batching.pad(tr.vocab.encode(texts[:6]), 16)
    text, outputs = set(), []
    for refill in ("prediction", "mask"):
        options = decoding.StrategyOptions("dependency", steps=3, hyps=2, confidence=0.9, dependency=0.5,
                                           refill=refill)
        structure, numbers = decoding._dynamic(options)
        assert structure.refill == "prediction" and bool(numbers["refill"]) == (refill == "mask")
        lowered, decoded = _lowered_and_decoded(tr, src, mask, options)
        text.add(lowered)
        outputs.append(decoded)
    assert len(text) == 1
    assert not np.array_equal(*outputs)


def test_plain_padirs_initial_hypothesis_remasking_and_early_stop_are_operands_of_one_decoder():
    """PaDIR's init ("random", "mask"), stutter re-masking and early stop, in every combination, lower to one
    decoder program (operands, as T), each decoding as its own options do unjitted; init and re-masking change
    the output on these inputs, so their operands are read (the early stop changes only the passes run:
    test_padir_refinement_stops_at_the_first_repeated_prediction_and_at_t_otherwise reads its operand).
    Unrolled options stay constants of their program."""
    tr, texts = _padir_translator()
    src, mask = batching.pad(tr.vocab.encode(texts[:6]), 16)
    text, outputs = set(), {}
    for init, remask, early in itertools.product(("random", "mask"), (True, False), (True, False)):
        options = decoding.PadirOptions(steps=3, hyps=2, init=init, remask_stutter=remask, early_stop=early)
        lowered, outputs[init, remask, early] = _lowered_and_decoded(tr, src, mask, options)
        text.add(lowered)
    assert len(text) == 1
    assert not np.array_equal(outputs["random", True, True], outputs["mask", True, True])
    assert not np.array_equal(outputs["random", True, False], outputs["random", False, False])
    unrolled = decoding._dynamic(decoding.PadirOptions(steps=3, init="mask", unroll=True))
    assert unrolled == (decoding.PadirOptions(steps=3, init="mask", unroll=True), {})


def test_batches_group_sources_of_similar_length_within_a_bucket():
    """A batch's decoding loop runs until its longest row ends: Translator.batches sorts each bucket's
    sources by length (stably), so a batch of short sentences stops early even with a single bucket
    (the GPU preset's), and every text is in exactly one batch."""
    words = "a dog runs on the green grass near the old red house by the river".split()
    texts = [" ".join(words[: 1 + (7 * i) % len(words)]) for i in range(20)]
    v = V.train(texts * 2, 60)
    cfg = seq2seq.ModelConfig(vocab=v.size, causal=True, d_model=16, heads=2, enc_layers=1, dec_layers=1, d_ff=32,
                              max_len=64)
    tr = translate.Translator(seq2seq.build(cfg, 1), v, buckets=(64,))
    lengths = [len(r) for r in v.encode(texts)]
    chunks = [list(chunk) for chunk, *_ in tr.batches(texts, 4)]
    assert sorted(i for c in chunks for i in c) == list(range(len(texts)))
    order = [i for c in chunks for i in c]
    assert [lengths[i] for i in order] == sorted(lengths)  # by length across the batches of the bucket
    assert order == sorted(range(len(texts)), key=lambda i: lengths[i])  # stably
    assert [lengths[i] for i in order] != lengths  # the texts were not in length order to begin with


@pytest.mark.slow  # compile counting: in the main suite, not in the newest-versions job
def test_the_gpu_preset_decodes_every_length_with_one_program_per_decoder_and_batch_size():
    """multi30k_gpu decodes with one source bucket, so short and long sources share each decoder's
    program and PaDIR's holds one hypothesis width (no lax.switch over three): on a GPU, where each
    decoder compiles in seconds, that is 3x fewer AR and 9x less PaDIR decoder code to compile. The
    CPU preset keeps three buckets (a pass's cost grows with its width there)."""
    from gmlm_lib.mt import config

    texts = ["a dog", "a small dog runs on the green grass near the old red house by the river in the park today"]
    v = V.train(texts * 4 + ["ein kleiner Hund rennt auf dem Gras", "ein Hund im Park"] * 4, 60)
    gpu, cpu = config.get("multi30k_gpu"), config.get("multi30k_cpu")
    compiled = _compiled_names()
    for causal, method, program in ((True, translate.Method("greedy"), "jit(_ar_greedy)"),
                                    (False, translate.Method("padir", padir=decoding.PadirOptions(steps=2, hyps=1)),
                                     "jit(_padir_ids)")):
        cfg = seq2seq.ModelConfig(vocab=v.size, causal=causal, d_model=16, heads=2, enc_layers=1, dec_layers=1,
                                  d_ff=32, max_len=max(gpu.train_buckets))
        model = seq2seq.build(cfg, 1)
        programs = {}
        for name, exp in (("gpu", gpu), ("cpu", cpu)):
            tr = translate.Translator(model, v, buckets=exp.decode_buckets)
            assert len({tr.bucket(len(r)) for r in v.encode(texts)}) == (1 if name == "gpu" else 2)
            decoding.clear_compiled()
            compiled.clear()
            tr.translate(texts, method, batch_size=1)
            programs[name] = compiled.count(program)
            if not causal:
                assert tr.widths == ((max(gpu.train_buckets),) if name == "gpu" else (16, 32, 64))
        assert programs == {"gpu": 1, "cpu": 2}, program


@pytest.mark.slow  # compile counting: in the main suite, not in the newest-versions job
def test_the_gpu_preset_trains_every_length_with_one_update_and_one_val_program(tmp_path):
    """multi30k_gpu trains in one length bucket, so a model's run compiles one update and one val
    program whatever lengths its pairs have, where the CPU preset's buckets compile one of each per
    bucket its pairs fill: on the first full-size GPU run each update compiled in 20-50 s and each run
    spent most of its compiling on the buckets (benchmarks/gpu_runs/2026-11-27-h200)."""
    from gmlm_lib.mt import config

    words = "a dog runs on the green grass near the old red house by the river in the park".split()
    texts = [" ".join(words[: 1 + (3 * i) % len(words)]) * (1 + i % 3) for i in range(24)]
    v = V.train(texts * 2, 60)
    src, tgt = v.encode(texts), v.encode([t[::-1] for t in texts])
    gpu, cpu = config.get("multi30k_gpu"), config.get("multi30k_cpu")
    compiled = _compiled_names()
    counts = {}
    for name, exp in (("gpu", gpu), ("cpu", cpu)):
        buckets = tuple(exp.train_buckets)
        model = seq2seq.ModelConfig(vocab=v.size, causal=True, d_model=16, heads=2, enc_layers=1, dec_layers=1,
                                    d_ff=32, max_len=max(buckets))
        cfg = training.TrainConfig(kind="ar", model=model, steps=2, batch_tokens=8 * max(buckets), warmup=1,
                                   checkpoint_every=2, log_every=1, buckets=buckets)
        data = batching.Batcher(src, tgt, cfg.batch_tokens, seed=0, buckets=buckets)
        val = batching.Batcher(src[:12], tgt[:12], cfg.batch_tokens, seed=0, buckets=buckets)
        training.clear_programs()  # the two models are alike: each run compiles its own programs
        compiled.clear()
        training.train(cfg, data, tmp_path / name, val=val, progress=False)
        counts[name] = (compiled.count("jit(step)"), compiled.count("jit(f)"), len(data.groups))
    assert counts["gpu"] == (1, 1, 1)
    assert counts["cpu"][2] >= 3 and counts["cpu"][0] == counts["cpu"][2] and counts["cpu"][1] >= 3, counts


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_flops_per_step_counts_a_training_update_on_the_cpu_client(kind, monkeypatch):
    """training.flops_per_step (the FLOPs of the PaDIR chapter's utilisation table): within a small
    factor of 6 x parameters x padded tokens (forward and backward), counted by XLA for the CPU client
    whatever the default backend (a GPU's plugin client has no analysis before compiling and returned
    None, which stopped the chapter on its first GPU run); a missing analysis is a clear error."""
    cfg, batcher = _cfg(kind), _toy_batcher()
    params = sum(x.size for x in jax.tree.leaves(nnx.state(seq2seq.build(cfg.model, 0), nnx.Param)))
    tokens = np.mean([len(ix) * bucket for bucket, ix in batcher.epoch(0)])
    seen = []
    real = jax.stages.Lowered.cost_analysis

    def spy(self):
        seen.append(jax.config.jax_default_device)
        return real(self)

    monkeypatch.setattr(jax.stages.Lowered, "cost_analysis", spy)
    flops = training.flops_per_step(cfg, batcher)
    assert 1.0 <= flops / (6 * params * tokens) <= 4.0
    assert seen and all(d is not None and d.platform == "cpu" for d in seen)
    monkeypatch.setattr(jax.stages.Lowered, "cost_analysis", lambda self: None)
    with pytest.raises(RuntimeError, match="no cost analysis"):
        training.flops_per_step(cfg, batcher)


def test_flops_per_step_weighs_each_bucket_by_its_batches_in_an_epoch(monkeypatch):
    """The mean is over an epoch's batches, not over buckets: with 4 batches of length 8 and 1 of
    length 16, the 16-bucket's update counts once in five. The buckets' batches hold the same tokens,
    so their FLOPs differ only by attention's cost (about 3%), yet the mean over buckets is another
    number. Each bucket's FLOPs are XLA's own, recorded as they are analysed; the test recomputes the
    mean batch by batch."""
    rng = np.random.default_rng(0)
    src = ([list(rng.integers(6, 40, rng.integers(2, 7))) for _ in range(64)]
           + [list(rng.integers(6, 40, rng.integers(9, 15))) for _ in range(8)])
    batcher = batching.Batcher(src, [s[::-1] for s in src], batch_tokens=128, seed=0, buckets=(8, 16))
    order = [bucket for bucket, _ in batcher.epoch(0)]
    assert sorted(order) == [8, 8, 8, 8, 16], order  # unequal counts, so a wrong weight shows
    seen = []
    real = jax.stages.Lowered.cost_analysis

    def spy(self):
        cost = real(self)
        seen.append(float((cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]))
        return cost

    monkeypatch.setattr(jax.stages.Lowered, "cost_analysis", spy)
    flops = training.flops_per_step(_cfg("ar"), batcher)
    first_seen = list(dict.fromkeys(order))  # each bucket is analysed once, in its epoch order
    per_bucket = dict(zip(first_seen, seen, strict=True))
    by_batch, by_bucket = np.mean([per_bucket[b] for b in order]), np.mean(seen)
    assert abs(by_batch - by_bucket) > 1e-3 * by_batch  # the two means are told apart
    assert flops == pytest.approx(by_batch, rel=1e-12)


def test_a_padir_translation_does_not_depend_on_the_batch_it_is_decoded_in():
    """The same model, T and hypotheses give the same translation of a sentence at batch sizes 1, 64 and
    256, in any order and beside any other sentences: its random initial hypotheses come from the seed and
    its own ids (decoding.source_keys), drawn at the model's full width, not from its place in a batch."""
    tr, texts = _padir_translator(sentences=70)
    rng = np.random.default_rng(1)
    method = translate.Method("padir", padir=decoding.PadirOptions(steps=3, hyps=2))
    alone = tr.translate(texts, method, batch_size=1)
    assert len(set(alone)) > 10  # the outputs differ by sentence: the comparison has power
    assert tr.translate(texts, method, batch_size=64) == alone
    assert tr.translate(texts, method, batch_size=256) == alone
    order = rng.permutation(len(texts))
    assert tr.translate([texts[i] for i in order], method, batch_size=64) == [alone[i] for i in order]
    assert tr.translate_one(texts[5], method) == alone[5]
    other, _ = _padir_translator(sentences=70, translator_seed=4)  # the same model and vocabulary
    assert other.translate(texts, method, batch_size=64) != alone  # the seed decides the noise
    keys = decoding.source_keys(jax.random.key(0), np.array([[7, 8, 9, 0], [7, 8, 9, 5]]),
                                np.array([[True, True, True, False], [True, True, True, False]]))
    assert (jax.random.key_data(keys[0]) == jax.random.key_data(keys[1])).all()  # padding is not part of a source


def test_decoding_refuses_settings_it_cannot_honour_in_its_own_words():
    """A beam of 0, no hypothesis width, more length hypotheses than the length predictor has classes, and an
    empty source are each refused naming the argument (not with a modulo by zero, an empty branch list, a
    top_k error, or a full-length guess for nothing)."""
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras", "a dog"] * 10
    tr = _toy_translator(texts, causal=False)
    ar = _toy_translator(texts, causal=True)
    src, sm = batching.pad([[7, 8, 9]], 8)
    with pytest.raises(ValueError, match=r"beam must be an integer >= 1; got 0"):
        decoding.ar_beam(ar.graphdef, ar.params, src, sm, max_len=16, beam=0, alpha=0.0)
    opts = decoding.PadirOptions(steps=2, hyps=1)
    with pytest.raises(ValueError, match="widths must hold at least one hypothesis width"):
        decoding.padir_ids(tr.graphdef, tr.flat, src, sm, jax.random.key(0), options=opts, widths=())
    with pytest.raises(ValueError, match="widths go up to 32 but the model's max_len = 16"):
        decoding.padir_ids(tr.graphdef, tr.flat, src, sm, jax.random.key(0), options=opts, widths=(8, 32))
    with pytest.raises(ValueError, match=r"hyps = 18 exceeds the 17 target lengths"):
        decoding.padir_ids(tr.graphdef, tr.flat, src, sm, jax.random.key(0),
                           options=decoding.PadirOptions(steps=2, hyps=18), widths=(16,))
    for bad in (["a dog", ""], ["  "]):
        with pytest.raises(ValueError, match=r"texts\[\d\] is empty: an empty source has nothing to translate"):
            tr.translate(bad, translate.Method("padir"))
    with pytest.raises(ValueError, match="is empty"):
        tr.translate_one("", translate.Method("padir"))
