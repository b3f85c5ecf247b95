"""Hostile but fair inputs to the translation side (corpus files, vocabulary, batching, metrics, decoding
options, translation), as a translation user runs them: each gets a clear exception whose message names the
offending argument (or file and line) and, where there is one, the fix; none is silently accepted or
silently changed."""

from __future__ import annotations

import gzip
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gmlm_lib.mt import batching, config, corpus, decoding, metrics, seq2seq, training, translate
from gmlm_lib.mt import vocab as V

KEY = jax.random.key(0)
MODEL = seq2seq.ModelConfig(vocab=40, causal=True, d_model=32, heads=4, enc_layers=1, dec_layers=1, d_ff=64, max_len=16)

# --- corpus files -------------------------------------------------------------------------------------------


def test_a_utf8_bom_is_not_part_of_the_first_sentence(tmp_path):
    f = tmp_path / "a.en"
    f.write_bytes(b"\xef\xbb\xbfA dog runs.\nA cat sits.\n")
    assert corpus.read_lines(f) == ["A dog runs.", "A cat sits."]


def test_crlf_line_ends_are_line_ends(tmp_path):
    f = tmp_path / "a.en"
    f.write_bytes(b"A dog runs.\r\nA cat sits.\r\n")
    assert corpus.read_lines(f) == ["A dog runs.", "A cat sits."]


@pytest.mark.parametrize("data, words", [
    (b"A dog\rruns.\nA cat sits.\n", ["line 1", "line separator"]),
    (b"A dog runs.\nA caf\xe9 sits.\n", ["line 2", "not UTF-8", "iconv"]),
    (b"ok\nok\nA dog\xe2\x80\xa8runs.\n", ["line 3", "line separator"]),
])
def test_corpus_damage_names_the_file_and_line(tmp_path, data, words):
    f = tmp_path / "a.en"
    f.write_bytes(data)
    with pytest.raises(ValueError) as info:
        corpus.read_lines(f)
    assert str(f) in str(info.value) and all(w in str(info.value) for w in words), str(info.value)


def test_a_truncated_gzip_names_the_file(tmp_path):
    f = tmp_path / "a.en.gz"
    f.write_bytes(gzip.compress(("A dog runs.\n" * 500).encode())[:-40])
    with pytest.raises(ValueError, match=rf"{f}.*not a complete gzip file"):
        corpus.read_lines(f)


def test_a_missing_file_names_the_path_and_the_variable(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path / 'nope'}.*GMLM_MULTI30K_DIR"):
        corpus.read_lines(tmp_path / "nope")


def test_misaligned_files_name_both(tmp_path):
    (tmp_path / "a").write_text("one\ntwo\n")
    (tmp_path / "b").write_text("eins\n")
    with pytest.raises(ValueError, match=r"misaligned corpus.*2 lines.*1"):
        corpus.load_parallel(tmp_path / "a", tmp_path / "b")


# --- vocabulary, batching, metrics ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vocab():
    texts = [f"a dog number {i} runs to the red house" for i in range(200)] + ["ein hund läuft"] * 50
    return V.train(texts, size=60)


def test_vocab_boundaries(vocab, tmp_path):
    with pytest.raises(TypeError, match=r"list of texts, not one string"):
        vocab.encode("a dog runs")
    with pytest.raises(TypeError, match=r"texts\[1\] must be a string"):
        vocab.encode(["a dog", 3])
    bad = tmp_path / "v.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(ValueError, match=rf"{bad} is not a SentencePiece model"):
        V.Vocab.load(bad)
    with pytest.raises(FileNotFoundError, match="no SentencePiece model"):
        V.Vocab.load(tmp_path / "missing.model")
    with pytest.raises(ValueError, match="texts is empty"):
        V.train(["", "  "], size=60)
    with pytest.raises(ValueError, match=r"size must be an integer >= 8; got 3"):
        V.train(["a b c"], size=3)
    with pytest.raises(TypeError, match="not one string"):
        V.train("a dog runs", size=60)
    with pytest.raises(ValueError, match="model_type"):
        V.train(["a dog"], size=60, model_type="wordpiece")


@pytest.mark.parametrize("call, error, words", [
    (lambda: batching.Batcher([[5, 6]], [[5, 6], [7]], batch_tokens=64), ValueError, ["aligned"]),
    (lambda: batching.Batcher([[5, 6]], [[5, 6]], batch_tokens=4, buckets=(8,)), ValueError, ["batch_tokens"]),
    (lambda: batching.Batcher([[5] * 40], [[5] * 40], batch_tokens=64, buckets=(8,)), ValueError, ["no training pair"]),
    (lambda: metrics.bleu(["a dog"], ["a dog", "a cat"]), ValueError, []),
    (lambda: decoding.PadirOptions(steps=0), ValueError, ["steps"]),
    (lambda: decoding.PadirOptions(hyps=0), ValueError, ["hyps"]),
    (lambda: decoding.PadirOptions(init="zeros"), ValueError, ["init"]),
    (lambda: translate.Method("sampling"), ValueError, ["Method.kind"]),
    (lambda: translate.Method("beam", beam=0), ValueError, ["Method.beam", ">= 1"]),
    (lambda: translate.Method("beam", beam=2.5), TypeError, ["Method.beam", "never rounded"]),
    (lambda: translate.Method("beam", alpha=float("nan")), ValueError, ["Method.alpha"]),
    (lambda: translate.Method("beam", alpha=-0.1), ValueError, ["Method.alpha", "finite number >= 0"]),
    (lambda: translate.Method("beam", alpha=float("inf")), ValueError, ["Method.alpha", "finite number >= 0"]),
    (lambda: translate.Method("padir", padir="T=4"), TypeError,
     ["Method.padir must be decoding.PadirOptions or decoding.StrategyOptions", "got str"]),
    (lambda: corpus.Parallel(["a"], ["b"]).take(0), ValueError, ["take(n): n must be >= 1; got 0"]),
    (lambda: batching.pad([[7] * 9], 8), ValueError, ["a sequence of 9 tokens does not fit in length 8"]),
    (lambda: metrics.bleu([], []), ValueError, ["hyps is empty"]),
    (lambda: batching.corrupt(jax.random.key(0), jnp.full((1, 3), 7), jnp.ones((1, 3), bool), 40, 0.5, fill="zeros"),
     ValueError, ["fill must be 'random' or 'mask'; got 'zeros'"]),
    (lambda: config.get("multi30k_tiny", [("ar_steps", 3)]), TypeError, ["overrides must be a dict", "got list"]),
    (lambda: config.get("multi30k_tiny", dict(beam=0)), ValueError, ["beam must be >= 1; got 0"]),
    (lambda: seq2seq.ModelConfig(vocab=V.FIRST_PIECE, causal=True), ValueError,
     [f"ModelConfig.vocab = {V.FIRST_PIECE} must exceed the {V.FIRST_PIECE} special ids"]),
    (lambda: seq2seq.ModelConfig(vocab=40, causal=True, dropout_rng="philox"), ValueError,
     ["ModelConfig.dropout_rng must be 'threefry' or 'hash'; got 'philox'"]),
])
def test_translation_option_boundaries(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert all(w in str(info.value) for w in words), str(info.value)


@pytest.fixture(scope="module")
def translator(vocab):
    from gmlm_lib.mt import seq2seq

    model = seq2seq.build(seq2seq.ModelConfig(vocab=vocab.size, causal=True, d_model=16, heads=2, enc_layers=1,
                                              dec_layers=1, d_ff=32, max_len=16, dropout=0.0))
    return translate.Translator(model, vocab, buckets=(16,))


@pytest.mark.parametrize("call, error, words", [
    (lambda t: t.translate("a dog runs", translate.Method("greedy")), TypeError, ["not one string", "translate_one"]),
    (lambda t: t.translate(["a dog", None], translate.Method("greedy")), TypeError, ["texts[1]"]),
    (lambda t: t.translate(["a dog"], translate.Method("greedy"), batch_size=-1), ValueError, ["batch_size", ">= 1"]),
    (lambda t: t.translate(["a dog"], translate.Method("greedy"), batch_size=0), ValueError, ["batch_size"]),
    (lambda t: t.translate_one(["a dog"], translate.Method("greedy")), TypeError, ["one sentence"]),
    (lambda t: t.translate(["a dog"], translate.Method("padir")), ValueError, ["does not fit this model"]),
    (lambda t: t.translate(["a dog " * 30], translate.Method("greedy")), ValueError, ["exceeds the largest bucket"]),
    (lambda t: t.passes(["a dog"], translate.Method("greedy")), ValueError,
     ["Translator.passes counts the passes of a StrategyOptions strategy"]),
    (lambda t: t.warm_calls(translate.Method("beam", beam=2), passes=True), ValueError,
     ["warm_calls(passes=True) compiles the pass count of a StrategyOptions strategy"]),

    # a PaDIR method on this AR model, asked of each public entry that decodes by itself
    (lambda t: t.device_ids(jnp.zeros((1, 16), jnp.int32), translate.Method("padir")),
     ValueError, ["does not fit this model (AR)"]),
    (lambda t: t.passes(["a dog"], translate.Method("padir", padir=decoding.StrategyOptions("threshold"))),
     ValueError, ["does not fit this model (AR)"]),
    (lambda t: t.warm_calls(translate.Method("padir")), ValueError, ["does not fit this model (AR)"]),
])
def test_translator_boundaries(translator, call, error, words):
    with pytest.raises(error) as info:
        call(translator)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_only_the_ar_decoder_decodes_incrementally():
    padir = seq2seq.build(seq2seq.ModelConfig(vocab=40, causal=False, d_model=16, heads=2, enc_layers=1,
                                              dec_layers=1, d_ff=32, max_len=16, dropout=0.0))
    with pytest.raises(ValueError, match=r"init_cache: only the AR decoder \(causal = True\) decodes incrementally"):
        padir.init_cache(1, 8)


def test_a_sentencepiece_model_without_the_books_special_ids_is_refused(tmp_path):
    """A SentencePiece model trained with its own defaults (unk 0, bos 1, eos 2, no pad, no [MASK]) would
    put the model's padding, end and mask on ordinary pieces: refused, naming the ids found and wanted."""
    import io

    import sentencepiece as spm

    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter([f"a dog number {i} runs home" for i in range(200)]),
                                   model_writer=proto, vocab_size=30)
    with pytest.raises(ValueError, match=r"SentencePiece model has special ids .*; expected \(0, 1, 2, 3, 4, 5\)"):
        V.Vocab(proto.getvalue())


def test_an_unreadable_corpus_file_is_named_with_its_reason(tmp_path, monkeypatch):
    f = tmp_path / "train.en"
    f.write_text("a dog\n")

    def denied(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(f), "read_bytes", denied)  # chmod 000 does not stop root, who runs CI
    with pytest.raises(OSError, match=rf"cannot read corpus file {f} \(Permission denied\); check its permissions"):
        corpus.read_lines(f)


# -- translation values refused, not guessed -------------------------------------------------------
SRC, TGT = [[7, 8, 9], [10, 11]], [[7, 8], [9, 10, 11]]


@pytest.mark.parametrize("call, error, words", [
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=2500.5, buckets=(8, 16)), TypeError,
     "batch_tokens must be an integer; got 2500.5"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens="64", buckets=(8, 16)), TypeError, "batch_tokens must be an integer"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=64, buckets=(16, 8)), ValueError,
     "buckets must be strictly increasing (the smallest bucket that fits is used); got [16, 8]: pass [8, 16]"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=64, buckets=()), ValueError, "buckets must hold at least one length"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=64, buckets="16"), TypeError, "buckets must be a list"),
    (lambda: batching.Batcher(SRC, TGT, batch_tokens=64, buckets=(8, 16.5)), TypeError, "buckets[1] must be an integer"),
    (lambda: batching.bucket_of(-3, 3, (8, 16)), ValueError, "src_len must be an integer >= 0"),
    (lambda: batching.pad([[1, 2]], 2.5), TypeError, "length must be an integer; got 2.5"),
    (lambda: batching.corrupt(KEY, jnp.ones((2, 4), jnp.int32), jnp.ones((2, 4), bool), 10, 1.5), ValueError,
     "unmasking_rate must be a finite number in [0, 1]; got 1.5"),
    (lambda: batching.corrupt(KEY, jnp.ones((2, 4), jnp.int32), jnp.ones((2, 3), bool), 10, 0.5), ValueError,
     "tgt_mask must have shape (2, 4) (the shape of tgt); got (2, 3)"),
    (lambda: batching.corrupt(KEY, jnp.ones((2, 4), jnp.int32), jnp.full((2, 4), 0.5), 10, 0.5), ValueError,
     "tgt_mask must be a boolean mask"),
    (lambda: batching.ar_inputs(jnp.ones((2, 4), jnp.int32), jnp.ones((2, 3), bool)), ValueError,
     "tgt_mask must have shape (2, 4)"),
    # one sentence without its batch axis (its mask of the same shape): named, not read as a batch of tokens
    (lambda: batching.ar_inputs(jnp.ones((4,), jnp.int32), jnp.ones((4,), bool)), ValueError,
     "tgt must have shape (any, any) (batch, length); got (4,)"),
    (lambda: batching.corrupt(KEY, jnp.ones((4,), jnp.int32), jnp.ones((4,), bool), 10, 0.5), ValueError,
     "tgt must have shape (any, any) (batch, length); got (4,)"),
    (lambda: training.TrainConfig(kind="ar", model=MODEL, steps=6, warmup=1, buckets=(16, 8)), ValueError,
     "TrainConfig.buckets must be strictly increasing"),
    (lambda: training.TrainConfig.from_dict({"kind": "ar", "steps": 3}), ValueError, "a 'model' mapping"),
    (lambda: training.TrainConfig.from_dict({"kind": "ar", "bogus": 1, "model": {"vocab": 40, "causal": True}}),
     ValueError, "TrainConfig.from_dict: unknown field(s) ['bogus']"),
    (lambda: training.TrainConfig.from_dict({"kind": "ar", "model": {"causal": True}}), ValueError,
     "ModelConfig.from_dict: missing ['vocab']"),
    (lambda: decoding.PadirOptions(steps=2.5), TypeError, "PadirOptions.steps must be an integer; got 2.5"),
    (lambda: decoding.strip(np.array([1, 2, 3])), ValueError, "ids must have shape (any, any) (batch, length)"),
    (lambda: config.resolve("auto", "quantum"), ValueError, "backend must be one of"),
    (lambda: config.get("multi30k_cpu", {"train_buckets": [64, 32]}), ValueError,
     "train_buckets must be strictly increasing"),
    (lambda: V.train(["a b c"] * 10, size=2.5), TypeError, "vocab.train: size must be an integer; got 2.5"),
    (lambda: V.train(["a b c"] * 10, size=20, character_coverage=0.0), ValueError,
     "character_coverage must be in (0, 1]; got 0.0"),
    (lambda: V.train(["a b c"] * 10, size=20, character_coverage=1.5), ValueError,
     "character_coverage must be in (0, 1]; got 1.5"),
    (lambda: metrics.paired_bootstrap([("base", ["a b"])], ["a b"]), ValueError,
     "at least two (name, hypotheses) pairs"),
    (lambda: metrics.paired_bootstrap([("a", ["x"]), ("a", ["y"])], ["x"]), ValueError, "names must differ"),
    (lambda: metrics.paired_bootstrap([("a", ["x"]), ("b", ["y"], "extra")], ["x"]), ValueError,
     "at least two (name, hypotheses) pairs"),
    (lambda: metrics.paired_bootstrap([("a", ["x"]), (2, ["y"])], ["x"]), ValueError,
     "at least two (name, hypotheses) pairs"),
])
def test_translation_values_are_refused_not_guessed(call, error, words):
    with pytest.raises(error) as err:
        call()
    assert words in str(err.value)


def test_a_translator_refuses_buckets_it_cannot_use():
    from gmlm_lib.mt import translate

    class Vocab:
        size = 40

    model = seq2seq.build(MODEL)
    with pytest.raises(ValueError, match="every bucket of \\[32, 64\\] exceeds the model's max_len = 16"):
        translate.Translator(model, Vocab(), buckets=(32, 64))
    with pytest.raises(ValueError, match="strictly increasing"):
        translate.Translator(model, Vocab(), buckets=(16, 8))
    with pytest.warns(UserWarning, match=r"buckets \[32\] exceed the model's max_len = 16 and are dropped"):
        assert translate.Translator(model, Vocab(), buckets=(8, 16, 32)).buckets == (8, 16)  # 32: beyond max_len
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default buckets are cut to the model without a warning
        assert translate.Translator(model, Vocab()).buckets == (16,)


def test_a_translator_refuses_an_empty_source_row():
    """A row of only PAD (or a source of length 0) is refused, not decoded into a full-length guess."""
    from gmlm_lib.mt import translate

    class Vocab:
        size = 40

    tr = translate.Translator(seq2seq.build(MODEL), Vocab(), buckets=(8, 16))
    method = translate.Method("greedy" if MODEL.causal else "padir")
    for src, words in ((np.zeros((1, 0), np.int32), "source row 0 holds no token"),
                       (np.array([[7, 8, 0, 0], [0, 0, 0, 0]], np.int32), "source row 1 holds no token"),
                       (np.zeros((0, 4), np.int32), "B >= 1")):
        with pytest.raises(ValueError, match=words):
            tr.decode_ids(src, method)


def test_a_string_of_references_is_not_scored_character_by_character():
    with pytest.raises(TypeError, match="refs must be a list of strings"):
        metrics.bleu(["ab"], "ab")
    with pytest.raises(TypeError, match="hyps must be a list of strings"):
        metrics.chrf([1, 2], ["a", "b"])


@pytest.mark.parametrize("n", [0, -5, 2.5, True])
def test_paired_bootstrap_needs_a_count_of_resamples(n):
    with pytest.raises((TypeError, ValueError), match="n_samples"):
        metrics.paired_bootstrap([("a", ["x y"]), ("b", ["x z"])], ["x y"], n_samples=n)


def test_a_translator_refuses_a_vocabulary_of_another_size():
    from gmlm_lib.mt import translate

    class Vocab:
        size = 39

    with pytest.raises(ValueError, match="39 pieces but the model was built for 40"):
        translate.Translator(seq2seq.build(MODEL), Vocab())


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_decoding_past_the_models_positions_is_refused(decode):
    """max_len beyond ModelConfig.max_len would read clamped position embeddings: refused, named."""
    import jax.numpy as jnp
    from flax import nnx

    from gmlm_lib.mt import decoding

    g, p = nnx.split(seq2seq.build(MODEL))
    src, sm = jnp.full((1, 4), 5, jnp.int32), jnp.ones((1, 4), bool)

    def run(max_len):
        if decode == "greedy":
            return decoding.ar_greedy(g, p, src, sm, max_len=max_len)
        return decoding.ar_beam(g, p, src, sm, max_len=max_len, beam=2)[0]

    for bad in (40, 17, 0, 2.0):
        with pytest.raises(ValueError, match=r"max_len must be an integer in \[1, 16\]"):
            run(bad)
    for edge in (1, 16):  # both ends of the range decode
        assert run(edge).shape == (1, edge)
