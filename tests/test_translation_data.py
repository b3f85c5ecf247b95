"""Corpus loading (local, generic, loopback download), the joint vocabulary, batching, metrics."""

import functools
import gzip
import http.server
import itertools
import math
import os
import pathlib
import threading

import numpy as np
import pandas as pd
import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st

from gmlm_lib.mt import batching, corpus, decoding, vocab
from gmlm_lib.mt import metrics as mt_metrics

SHARED = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"
M30K = pathlib.Path(os.environ.get(corpus.ENV_VAR) or SHARED)


def _write(path, lines, gz=True):
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)


@pytest.fixture
def toy_dir(tmp_path):
    d = tmp_path / "m30k"
    d.mkdir()
    en = ["A dog runs.", "Two men talk.", "A girl sings a song."]
    de = ["Ein Hund rennt.", "Zwei Männer reden.", "Ein Mädchen singt ein Lied."]
    for split in corpus.MULTI30K_SPLITS:
        _write(d / f"{split}.en.gz", en)
        _write(d / f"{split}.de.gz", de)
    return d


def test_generic_loader_reads_plain_and_gzipped_files(tmp_path):
    _write(tmp_path / "a.en", ["one", "two"], gz=False)
    _write(tmp_path / "a.de.gz", ["eins", "zwei"])
    pair = corpus.load_parallel(tmp_path / "a.en", tmp_path / "a.de.gz")
    assert pair.src == ["one", "two"] and pair.tgt == ["eins", "zwei"] and len(pair) == 2
    assert pair.take(1).src == ["one"]
    assert pair.name == "a.en->a.de.gz"  # a corpus without a name is named by its files
    assert corpus.load_parallel(tmp_path / "a.en", tmp_path / "a.de.gz", name="toy").name == "toy"


def test_downloads_go_to_the_xdg_cache_or_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert corpus.default_cache() == tmp_path / "xdg" / "gmlm-book" / "multi30k"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert corpus.default_cache() == tmp_path / "home" / ".cache" / "gmlm-book" / "multi30k"


def test_loader_errors_name_the_problem(tmp_path):
    _write(tmp_path / "a.en", ["one", "two"], gz=False)
    _write(tmp_path / "b.de", ["eins"], gz=False)
    with pytest.raises(ValueError, match="misaligned.*2 lines.*1"):
        corpus.load_parallel(tmp_path / "a.en", tmp_path / "b.de")
    (tmp_path / "e.en").write_text("")
    (tmp_path / "e.de").write_text("")
    with pytest.raises(ValueError, match="empty corpus"):
        corpus.load_parallel(tmp_path / "e.en", tmp_path / "e.de")
    _write(tmp_path / "c.de", ["eins", ""], gz=False)
    with pytest.raises(ValueError, match="line 2 is empty"):
        corpus.load_parallel(tmp_path / "a.en", tmp_path / "c.de")
    with pytest.raises(FileNotFoundError, match="nope.en"):
        corpus.load_parallel(tmp_path / "nope.en", tmp_path / "b.de")


def test_multi30k_arguments_are_checked(toy_dir):
    with pytest.raises(ValueError, match="split"):
        corpus.multi30k("dev", "en", "de", root=toy_dir)
    with pytest.raises(ValueError, match="tgt"):
        corpus.multi30k("train", "en", "xx", root=toy_dir)
    with pytest.raises(ValueError, match="differ"):
        corpus.multi30k("train", "en", "en", root=toy_dir)
    with pytest.raises(FileNotFoundError, match="root"):
        corpus.multi30k("train", "en", "de", root=toy_dir / "missing")
    with pytest.raises(FileNotFoundError, match="train.fr.gz"):
        corpus.multi30k("train", "en", "fr", root=toy_dir)


def test_multi30k_from_the_environment_variable(toy_dir, monkeypatch):
    monkeypatch.setenv(corpus.ENV_VAR, str(toy_dir))
    pair = corpus.multi30k("val", "de", "en")
    assert pair.src[0] == "Ein Hund rennt." and pair.tgt[0] == "A dog runs."


@pytest.mark.skipif(not M30K.is_dir(), reason="the Multi30k copy (../shared/data/multi30k) is not here")
def test_real_multi30k_sizes():
    sizes = {"train": 29000, "val": 1014, "test_2016_flickr": 1000}
    for split, n in sizes.items():
        for tgt in ("de", "fr"):
            assert len(corpus.multi30k(split, "en", tgt, root=M30K)) == n


@pytest.fixture
def loopback(toy_dir):
    """An HTTP server on 127.0.0.1 serving the toy Multi30k folder."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(toy_dir))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_download_over_loopback_matches_the_local_files(loopback, toy_dir, tmp_path, monkeypatch):
    monkeypatch.delenv(corpus.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    got = corpus.multi30k("test_2016_flickr", "en", "de", base_url=loopback)
    want = corpus.multi30k("test_2016_flickr", "en", "de", root=toy_dir)
    assert (got.src, got.tgt) == (want.src, want.tgt)
    cached = tmp_path / "cache" / "gmlm-book" / "multi30k"
    assert sorted(p.name for p in cached.iterdir()) == ["test_2016_flickr.de.gz", "test_2016_flickr.en.gz"]
    # a second call reads the cache: the server is not needed any more
    again = corpus.multi30k("test_2016_flickr", "en", "de", base_url="http://127.0.0.1:9")
    assert again.src == want.src
    # a file the server lacks is a clear error naming the variable to set, and leaves no partial file
    with pytest.raises(RuntimeError, match=corpus.ENV_VAR):
        corpus.multi30k("train", "en", "fr", base_url=loopback)
    assert not list(cached.glob("*.part")) and not (cached / "train.fr.gz").exists()


def test_vocab_special_ids_and_round_trip():
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras"] * 20
    v = vocab.train(texts, 60)
    assert v.sp.piece_to_id("[MASK]") == vocab.MASK and v.sp.piece_to_id("[LENGTH]") == vocab.LENGTH
    assert (v.sp.pad_id(), v.sp.eos_id(), v.sp.bos_id()) == (vocab.PAD, vocab.EOS, vocab.BOS)
    ids = v.encode(texts[:2])
    assert min(min(r) for r in ids) >= vocab.FIRST_PIECE
    assert v.decode(ids) == texts[:2]
    assert v.decode([[vocab.BOS] + ids[0] + [vocab.MASK, vocab.EOS, vocab.PAD]]) == texts[:1]
    assert vocab.Vocab(v.proto).encode(texts[:1]) == ids[:1]
    with pytest.raises(ValueError, match="texts is empty"):
        vocab.train(["", " "], 60)
    with pytest.raises(ValueError, match="size"):
        vocab.train(texts, 5)
    with pytest.raises(TypeError, match="texts must hold strings, one sentence each; item 1 is int"):
        vocab.train(["a dog", 3], 60)


def test_short_lists_are_encoded_text_by_text_and_long_ones_in_one_threaded_call():
    """SentencePiece starts a pool of threads for every list it encodes: a batch-1 translation encodes a
    list of one, so it would pay that start on every sentence. The ids must not depend on the path."""
    texts = [f"dog {i} runs on the grass" for i in range(vocab.BATCH_FROM + 1)]
    v = vocab.train(texts, 60)
    real, calls = v.sp, []

    class Recording:
        def encode(self, arg, **kw):
            calls.append(type(arg).__name__)
            return real.encode(arg, **kw)

    want = real.encode(texts, out_type=int)
    v.sp = Recording()
    short = texts[: vocab.BATCH_FROM - 1]
    assert v.encode(short[:1]) == want[:1] and calls == ["str"]
    calls.clear()
    assert v.encode(short) == want[: len(short)] and calls == ["str"] * len(short)
    calls.clear()
    assert v.encode(texts) == want and calls == ["list"]


def test_a_saved_vocabulary_loads_as_the_same_model(tmp_path):
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras"] * 20
    v = vocab.train(texts, 60)
    path = v.save(tmp_path / "spm.model")
    assert path.read_bytes() == v.proto and vocab.Vocab.load(path).encode(texts) == v.encode(texts)


def test_the_batch_fingerprint_depends_on_every_token_and_length():
    src, tgt = [[6, 7, 8], [9, 10]], [[11, 12], [13]]

    def print_of(s, t):
        return batching.Batcher(s, t, batch_tokens=64, buckets=(8,)).fingerprint()

    base = print_of(src, tgt)
    assert base == print_of([list(r) for r in src], [list(r) for r in tgt])
    assert print_of([[6, 7, 8], [9, 11]], tgt) != base  # one token of the source differs
    assert print_of(src, [[11, 12], [14]]) != base  # one token of the target differs
    assert print_of([[6, 7], [8, 9, 10]], tgt) != base  # the same tokens, split into other sentences


def test_batcher_is_deterministic_and_sized_for_the_devices():
    rng = np.random.default_rng(0)
    src = [list(rng.integers(6, 30, rng.integers(1, 20))) for _ in range(300)]
    tgt = [list(rng.integers(6, 30, rng.integers(1, 20))) for _ in range(300)]
    src.append([7] * 70)
    tgt.append([7] * 3)  # too long for the buckets: dropped and counted
    a = batching.Batcher(src, tgt, batch_tokens=512, seed=3, buckets=(8, 16, 32), multiple=4)
    b = batching.Batcher(src, tgt, batch_tokens=512, seed=3, buckets=(8, 16, 32), multiple=4)
    assert a.dropped == 1
    for step in (0, 5, len(a) + 2):
        x, y = a.at(step), b.at(step)
        assert np.array_equal(x.src, y.src) and np.array_equal(x.tgt, y.tgt)
        assert x.src.shape[0] % 4 == 0 and x.tgt.shape[1] == x.src.shape[1] - 1
        assert np.array_equal(x.tgt_mask, x.tgt != vocab.PAD)
    assert not np.array_equal(a.at(0).src, a.at(len(a)).src) or a.at(0).src.shape != a.at(len(a)).src.shape
    with pytest.raises(ValueError, match="batch_tokens"):
        batching.Batcher(src, tgt, batch_tokens=16, buckets=(8, 16, 32))


def test_buckets_and_batch_sizes_at_their_edges():
    """A pair's bucket holds its source and its target plus one (EOS or BOS), the smallest that fits;
    batch sizes are batch_tokens // bucket rounded down to the device multiple; the buckets are a
    strictly increasing list and batch_tokens holds at least one device-multiple of the longest."""
    assert [batching.bucket_of(s, t, (8, 16)) for s, t in [(10, 3), (3, 10), (3, 7), (3, 8), (8, 0), (3, 16)]] == \
        [16, 16, 8, 16, 8, -1]
    for bad in ("16", 16, {8, 16}):  # a set has no order to keep
        with pytest.raises(TypeError, match="buckets must be a list of increasing positive integers"):
            batching.check_buckets(bad)
    with pytest.raises(ValueError, match="must be strictly increasing"):
        batching.check_buckets([8, 16, 16])
    pairs = ([[7] * 5] * 6, [[8] * 4] * 6)
    for multiple, sizes in ((1, {8: 16}), (3, {8: 15})):
        b = batching.Batcher(*pairs, batch_tokens=128, buckets=(8,), multiple=multiple)
        assert {k: b.batch_size(k) for k in b.groups} == sizes and all(type(v) is int for v in sizes.values())
    batching.Batcher(*pairs, batch_tokens=16, buckets=(8, 16))  # exactly one sequence of the longest bucket
    batching.Batcher(*pairs, batch_tokens=32, buckets=(8, 16), multiple=2)
    for tokens, multiple in ((15, 1), (31, 2)):
        with pytest.raises(ValueError, match="batch_tokens = .* is too small"):
            batching.Batcher(*pairs, batch_tokens=tokens, buckets=(8, 16), multiple=multiple)


def test_an_epoch_and_a_validation_pass_cover_the_pairs_as_they_say():
    """Bucket 8: 10 pairs in batches of 4, so an epoch has two full batches (the 2 left over wait for
    another shuffle); bucket 16: 3 pairs in batches of 2, one batch; a bucket with fewer pairs than a
    batch repeats them to one batch. once(): every pair exactly once, a bucket's last batch filled up
    with copies that its rows mark as not counted."""
    src = [[10 + i] * 3 for i in range(10)] + [[30 + i] * 12 for i in range(3)]  # pair i's first token says i
    tgt = [[8] * 2] * 10 + [[6] * 3] * 3
    b = batching.Batcher(src, tgt, batch_tokens=32, buckets=(8, 16))
    assert {k: b.batch_size(k) for k in b.groups} == {8: 4, 16: 2} and len(b) == 2 + 1
    epoch = b.epoch(0)
    assert sorted((k, len(ix)) for k, ix in epoch) == [(8, 4), (8, 4), (16, 2)]
    short = np.concatenate([ix for k, ix in epoch if k == 8])
    assert len(set(short.tolist())) == 8 and set(short.tolist()) <= set(range(10))  # no pair twice in an epoch
    small = batching.Batcher(src[:11], tgt[:11], batch_tokens=32, buckets=(8, 16))
    assert [ix.tolist() for k, ix in small.epoch(0) if k == 16] == [[10, 10]]  # one pair repeated to a batch
    seen, counts = [], []
    for batch in b.once():
        n = int(batch.rows.sum())
        assert batch.rows[:n].all() and not batch.rows[n:].any() and len(batch.rows) == batch.src.shape[0]
        seen += batch.src[:n, 0].tolist()
        counts.append(n)
    assert counts == [4, 4, 2, 2, 1] and sorted(seen) == [p[0] for p in src]


def test_ar_inputs_and_corruption():
    import jax
    import jax.numpy as jnp

    tgt = jnp.array([[7, 8, 9, 0], [7, 0, 0, 0]], jnp.int32)
    dec_in, out, mask = batching.ar_inputs(tgt, tgt != 0)
    assert dec_in.tolist() == [[2, 7, 8, 9, 0], [2, 7, 0, 0, 0]]
    assert out.tolist() == [[7, 8, 9, 1, 0], [7, 1, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]
    big = jnp.full((200, 50), 7, jnp.int32).at[:, 40:].set(0)
    z = batching.corrupt(jax.random.key(0), big, big != 0, 100, 0.2)
    kept = float((z[:, :40] == 7).mean())
    assert 0.18 < kept < 0.23  # 0.2 kept plus 1/94 random hits of the same piece
    assert bool((z[:, 40:] == 0).all()) and int(z[:, :40].min()) >= vocab.FIRST_PIECE
    zm = batching.corrupt(jax.random.key(0), big, big != 0, 100, 0.0, fill="mask")
    assert bool((zm[:, :40] == vocab.MASK).all())
    # the rate and the fill as scalar arrays (as a compiled update passes them): the same inputs
    for fill, rate, want in ((jnp.asarray(True), 0.0, zm), (jnp.asarray(False), jnp.asarray(0.2, jnp.float32), z)):
        assert bool((batching.corrupt(jax.random.key(0), big, big != 0, 100, rate, fill) == want).all())
    with pytest.raises(TypeError, match="fill must be"):
        batching.corrupt(jax.random.key(0), big, big != 0, 100, 0.2, fill=1)


def test_bleu_and_chrf_equal_sacrebleu_called_directly():
    """[Tables 1-2]"""
    hyps = ["Ein Hund rennt über die Wiese.", "Zwei Männer reden miteinander", "Das ist gut ."]
    refs = ["Ein Hund läuft über die Wiese.", "Zwei Männer sprechen miteinander.", "Das ist gut."]
    b = mt_metrics.bleu(hyps, refs)
    assert b.score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-12)
    assert b.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    c = mt_metrics.chrf(hyps, refs)
    assert c.score == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=1e-12)
    assert mt_metrics.bleu(refs, refs).score == pytest.approx(100.0)
    with pytest.raises(ValueError, match="aligned"):
        mt_metrics.bleu(hyps, refs[:2])
    # lowercased: case no longer counts, and the signature says so
    lc = mt_metrics.bleu([h.upper() for h in hyps], refs, lowercase=True)
    assert lc.score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score, abs=1e-12)
    assert "case:lc" in lc.signature and lc.score > mt_metrics.bleu([h.upper() for h in hyps], refs).score
    with pytest.raises(TypeError, match="lowercase"):
        mt_metrics.bleu(hyps, refs, lowercase="yes")


def test_stutter_rate_on_hand_made_examples():
    assert mt_metrics.stutter_flags("a dog dog runs", "a dog runs") == [False, True, False]
    # the reference repeats "very": not stutter; punctuation and case do not hide a repeat
    assert mt_metrics.stutter_flags("a very very big Dog, dog.", "a very very big dog") == [False, False, False, False, True]
    rate = mt_metrics.stutter_rate(["a dog dog runs", "two cats"], ["a dog runs", "two cats"])
    assert rate == pytest.approx(100 * 1 / 6)


def test_dependent_share_counts_pairs_over_all_sentences_strictly_above_the_threshold():
    """Pairs, not sentences, are counted: a one-pair sentence weighs less than a four-pair one; a
    similarity equal to the threshold is not above it; no pairs at all is 0.0, not a division by zero."""
    sims = [np.array([0.95, 0.2, 0.9, 0.91]), np.array([0.99]), np.array([])]
    assert mt_metrics.dependent_share(sims, 0.9) == pytest.approx(3 / 5)  # 0.95, 0.91, 0.99; 0.9 is not above
    assert mt_metrics.dependent_share(sims, 0.98) == pytest.approx(1 / 5)
    assert mt_metrics.dependent_share([np.array([]), np.zeros(0)], 0.5) == 0.0
    with pytest.raises(ValueError, match=r"similarities\[1\] must be one value per adjacent pair"):
        mt_metrics.dependent_share([np.zeros(2), np.zeros((2, 2))], 0.5)
    with pytest.raises(ValueError, match="threshold"):
        mt_metrics.dependent_share(sims, float("nan"))


_WORDS = st.lists(st.sampled_from(["a", "dog", "runs", "very", "Dog,", "big."]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(hyp=_WORDS, ref=_WORDS, at=st.integers(0, 11))
def test_property_stutter_counts_repeats_the_reference_lacks(hyp, ref, at):
    """A text never stutters against itself (its repeats are the reference's); doubling one word
    of a text without repeats adds exactly one stuttered pair against a reference that lacks
    that repeat, and none against one that has it."""
    text = " ".join(hyp)
    assert mt_metrics.stutter_rate([text], [text]) == 0.0
    words = [w for w, _ in itertools.groupby(mt_metrics.words(text))]  # no adjacent repeats left
    if not words:
        return
    i = at % len(words)
    doubled = " ".join(words[: i + 1] + words[i:])
    r = " ".join(ref)
    has_it = words[i] in {a for a, b in itertools.pairwise(mt_metrics.words(r)) if a == b}
    assert sum(mt_metrics.stutter_flags(doubled, r)) == (0 if has_it else 1)
    assert mt_metrics.stutter_rate([doubled], [r]) == pytest.approx(0.0 if has_it else 100.0 / (len(words) + 1))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(st.integers(vocab.FIRST_PIECE, vocab.FIRST_PIECE + 3), max_size=10), min_size=1, max_size=4),
       tail=st.lists(st.integers(0, vocab.FIRST_PIECE + 3), max_size=5))
def test_property_strip_undoes_padding_and_stops_at_eos(rows, tail):
    """``decoding.strip`` returns each row up to its first EOS or PAD (whatever follows EOS), and
    with ``drop_repeats`` merges runs of one token into one."""
    ids, mask = batching.pad(rows, 16)
    assert decoding.strip(ids) == rows and mask.sum(1).tolist() == [len(r) for r in rows]
    ended, _ = batching.pad([r + [vocab.EOS] + tail for r in rows], 16)
    assert decoding.strip(ended) == rows
    assert decoding.strip(ids, drop_repeats=True) == [[t for t, _ in itertools.groupby(r)] for r in rows]


def test_paired_bootstrap_is_sacrebleus_and_reproducible():
    refs = ["the cat sat on the mat", "a dog runs in the park", "two men play football"] * 10
    base = ["the cat sat on mat", "a dog runs in park", "two men play soccer"] * 10
    other = ["the cat is on the mat", "dog runs in the park", "two men playing football"] * 10
    table, sig = mt_metrics.paired_bootstrap([("base", base), ("other", other)], refs, n_samples=100)
    again, _ = mt_metrics.paired_bootstrap([("base", base), ("other", other)], refs, n_samples=100)
    pd.testing.assert_frame_equal(table, again)
    assert "bs:100" in sig and list(table.index) == ["base", "other"]
    assert table.loc["base", "BLEU"] == pytest.approx(mt_metrics.bleu(base, refs).score)
    assert np.isnan(table.loc["base", "p-value"]) and 0 < table.loc["other", "p-value"] <= 1
    with pytest.raises(ValueError, match="aligned"):
        mt_metrics.paired_bootstrap([("base", base[:3]), ("other", other)], refs)
    with pytest.raises(ValueError, match="at least two"):  # a baseline alone compares nothing
        mt_metrics.paired_bootstrap([("base", base)], refs)


def test_the_stutter_rate_needs_aligned_lists():
    with pytest.raises(ValueError, match="hyps and refs must be aligned; got 1 hypotheses and 2 references"):
        mt_metrics.stutter_rate(["a dog runs"], ["a dog runs", "a cat sits"])


def test_a_multi30k_folder_that_is_not_one_is_named(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="root = .*nowhere' is not a folder; point it at the folder"):
        corpus.multi30k_dir(missing)
    monkeypatch.setenv(corpus.ENV_VAR, str(missing))
    with pytest.raises(FileNotFoundError, match=f"{corpus.ENV_VAR} = .*nowhere' is not a folder"):
        corpus.multi30k_dir()


def test_a_blank_pair_or_a_nul_byte_in_a_corpus_is_refused_by_file_and_line(tmp_path):
    """An empty line in both files is no sentence pair (it would train on and score nothing), a NUL byte is in
    no sentence (a binary or damaged file): each is refused, naming the file and the line."""
    (tmp_path / "a.en").write_text("a dog\n\nthe cat\n")
    (tmp_path / "a.de").write_text("ein Hund\n \ndie Katze\n")
    with pytest.raises(ValueError, match=r"blank pair: line 2 of .*a\.en and .*a\.de is empty in both"):
        corpus.load_parallel(tmp_path / "a.en", tmp_path / "a.de")
    (tmp_path / "b.en").write_text("a dog\na c\x00at\n")
    (tmp_path / "b.de").write_text("ein Hund\neine Katze\n")
    with pytest.raises(ValueError, match=r"b\.en, line 2: a NUL byte at character 4"):
        corpus.load_parallel(tmp_path / "b.en", tmp_path / "b.de")


def test_a_vocabulary_refuses_a_nul_byte_and_ids_it_does_not_have():
    V = vocab
    texts = ["a small dog runs on the grass", "ein kleiner Hund rennt auf dem Gras"] * 10
    v = V.train(texts, 40)
    with pytest.raises(ValueError, match=r"texts\[1\] holds a NUL byte"):
        v.encode(["a dog", "a d\x00og"])
    with pytest.raises(ValueError, match=rf"row 1 holds the id {v.size}, outside this vocabulary's 0\.\.{v.size - 1}"):
        v.decode([[V.FIRST_PIECE], [v.size]])
    with pytest.raises(ValueError, match="row 0 holds the id -1"):
        v.decode([[-1]])
    assert v.decode([v.encode(["a dog"])[0]]) == ["a dog"]
    for bad in ("x", 7.0, True, None):
        with pytest.raises(TypeError, match=r"row 0 holds .*, not an integer id"):
            v.decode([[V.FIRST_PIECE, bad]])
    assert v.decode([np.array([V.FIRST_PIECE], np.int32)]) == v.decode([[V.FIRST_PIECE]])


def test_a_vocabulary_too_small_for_the_characters_is_refused_in_the_librarys_words():
    """SentencePiece's INTERNAL error (its source file and line) becomes a ValueError naming size, the
    characters it must hold and the fix, with SentencePiece's own message chained."""
    with pytest.raises(ValueError, match=r"size = 8 pieces cannot hold the 7 distinct characters .* raise size "
                                         r"\(at least 14\)") as info:
        vocab.train(["a b c d e f g"] * 50, 8)
    assert isinstance(info.value.__cause__, RuntimeError)


# --- BLEU on test-set resamples (issue 125, item 2) ------------------------------------------------------

def test_bleu_resamples_equal_sacrebleu_on_each_resample():
    import jax

    refs = ["a dog runs in the park", "two cats sit on a mat", "the man rides a red bike", "kids play ball",
            "a woman sings a song", "the sun is out today"]
    hyps = ["a dog runs in a park", "two cats sit on the mat", "a man rides a bike", "kids play the ball",
            "a woman sings", "the sun is out"]
    index = mt_metrics.resample_index(len(refs), 5, jax.random.key(0))
    assert index.shape == (5, 6) and len({tuple(r) for r in index}) > 1
    for lowercase in (False, True):
        got = mt_metrics.bleu_resamples(hyps, refs, index, lowercase=lowercase)
        want = [mt_metrics.bleu([hyps[i] for i in row], [refs[i] for i in row], lowercase=lowercase).score for row in index]
        np.testing.assert_allclose(got, want, rtol=1e-12)
    identity = mt_metrics.bleu_resamples(hyps, refs, np.arange(6)[None])
    assert identity[0] == pytest.approx(mt_metrics.bleu(hyps, refs).score, rel=1e-12)
    with pytest.raises(ValueError, match=r"outside \[0, 6\)"):
        mt_metrics.bleu_resamples(hyps, refs, np.full((2, 6), 6))
    with pytest.raises(ValueError, match="integer array"):
        mt_metrics.bleu_resamples(hyps, refs, np.zeros((2, 6)))


# --- hostile inputs, generated (issue 127, item 6): a meaningful answer or an error naming the argument -----

_TEXT = st.text(alphabet=st.sampled_from(list("ab c.\x00\n\tü")), max_size=12)


@settings(max_examples=60, deadline=None)
@given(hyps=st.lists(_TEXT, max_size=4), refs=st.lists(_TEXT, max_size=4))
def test_property_scores_of_any_texts_are_finite_or_refused_by_name(hyps, refs):
    """BLEU, chrF and the stutter rate of any lists of strings (empty ones, blanks, NUL bytes, newlines,
    unequal lengths): a finite score in its range, or a ValueError/TypeError naming hyps or refs."""
    for f, high in ((mt_metrics.bleu, 100.0), (mt_metrics.chrf, 100.0), (mt_metrics.stutter_rate, 100.0)):
        try:
            got = f(hyps, refs)
        except (ValueError, TypeError) as err:
            assert "hyps" in str(err) or "refs" in str(err), str(err)
            assert not hyps or len(hyps) != len(refs)
            continue
        value = got if isinstance(got, float) else got.score
        assert math.isfinite(value) and 0.0 <= value <= high + 1e-9


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(st.integers(-2, 9), max_size=6), max_size=5), length=st.integers(-1, 6))
def test_property_padding_any_rows_is_exact_or_refused_by_name(rows, length):
    """pad(rows, length): every row fits and comes back exactly with its mask, or the error names what
    does not fit (a row longer than length, a negative length)."""
    try:
        out, mask = batching.pad(rows, length)
    except (ValueError, TypeError) as err:
        assert "length" in str(err), str(err)
        assert length < 0 or any(len(r) > length for r in rows)
        return
    assert out.shape == mask.shape == (len(rows), length)
    for r, o, m in zip(rows, out, mask):
        assert list(o[: len(r)]) == r and not m[len(r):].any()


@settings(max_examples=50, deadline=None)
@given(src=st.lists(_TEXT, max_size=4), tgt=st.lists(_TEXT, max_size=4), gz=st.booleans())
def test_property_a_corpus_of_any_lines_is_read_whole_or_refused_naming_the_file(tmp_path_factory, src, tgt, gz):
    """Two files of any lines (blank ones, NUL bytes, tabs, unequal counts): read back as exactly those
    sentences, every pair non-blank on both sides, or refused with an error naming a file and the fix."""
    folder = tmp_path_factory.mktemp("corpus")
    paths = []
    for side, lines in (("src", src), ("tgt", tgt)):
        lines = [line.replace("\n", " ") for line in lines]  # one sentence a line
        path = folder / (f"{side}.txt.gz" if gz else f"{side}.txt")
        data = "".join(line + "\n" for line in lines).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        paths.append(path)
    try:
        pairs = corpus.load_parallel(*paths)
    except (ValueError, OSError) as err:
        assert "src.txt" in str(err) or "tgt.txt" in str(err), str(err)
        return
    assert pairs.src == [s.replace("\n", " ") for s in src] and pairs.tgt == [t.replace("\n", " ") for t in tgt]
    assert all(s.strip() and t.strip() and "\x00" not in s + t for s, t in zip(pairs.src, pairs.tgt))
