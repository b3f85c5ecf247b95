"""Hostile but fair inputs to the translation side (corpus files, vocabulary, batching, metrics, decoding
options, translation), as a translation user runs them: each gets a clear exception whose message names the
offending argument (or file and line) and, where there is one, the fix; none is silently accepted or
silently changed."""

from __future__ import annotations

import gzip

import pytest

from gmlm_lib.mt import batching, corpus, decoding, metrics, translate
from gmlm_lib.mt import vocab as V

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
])
def test_translator_boundaries(translator, call, error, words):
    with pytest.raises(error) as info:
        call(translator)
    assert all(w in str(info.value) for w in words), str(info.value)
