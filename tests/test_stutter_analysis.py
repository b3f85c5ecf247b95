"""Attention extraction at the final refinement pass, stutter labels, the pair statistics and
AUROC [Section 3.4, App. L.5]; ablation configs."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from flax import nnx

from gmlm_lib.mt import decoding, experiment, seq2seq, training, translate
from gmlm_lib.mt import stutter_analysis as sa
from gmlm_lib.mt import vocab as V


def tiny_padir():
    cfg = seq2seq.ModelConfig(vocab=40, causal=False, d_model=32, heads=4, enc_layers=2, dec_layers=3,
                              d_ff=64, max_len=16, dropout=0.0)
    return nnx.split(seq2seq.build(cfg, seed=1))


def source(b=3, s=8):
    src = jax.random.randint(jax.random.key(6), (b, s), V.FIRST_PIECE, 40, jnp.int32)
    mask = jnp.arange(s)[None] < jnp.array([[s], [5], [3]])[:b]
    return src, mask


def test_attention_extraction_shapes_rows_and_default_path_unchanged():
    g, p = tiny_padir()
    src, sm = source()
    opts = decoding.PadirOptions(steps=4, hyps=3)
    plain = decoding.padir(g, p, src, sm, jax.random.key(0), options=opts, max_len=16, buckets=(8, 16))
    full = decoding.padir(g, p, src, sm, jax.random.key(0), options=opts, max_len=16, buckets=(8, 16),
                          return_attention=True)
    assert "attention" not in plain and "final_input" not in plain
    for k in ("ids", "length", "score", "steps", "history", "pass_best", "pass_best_score"):
        np.testing.assert_array_equal(np.asarray(plain[k]), np.asarray(full[k]))
    width = plain["ids"].shape[1]
    assert len(full["attention"]) == 3
    lengths = np.asarray(full["length"])
    for w_self, w_cross in full["attention"]:
        assert w_self.shape == (3, 4, width, width) and w_cross.shape == (3, 4, width, 9)
        for b, n in enumerate(lengths):
            np.testing.assert_allclose(np.asarray(w_self[b, :, :n]).sum(-1), 1.0, atol=1e-5)
            np.testing.assert_allclose(np.asarray(w_cross[b, :, :n]).sum(-1), 1.0, atol=1e-5)
            assert float(np.abs(np.asarray(w_self[b, :, :n, n:])).max(initial=0.0)) == 0.0
            assert float(np.abs(np.asarray(w_cross[b, :, :, 1 + int(sm[b].sum()):])).max(initial=0.0)) == 0.0


def test_attention_is_read_from_the_pass_that_produced_the_output():
    g, p = tiny_padir()
    src, sm = source()
    # one pass from [MASK]: the final pass's input is the initial hypothesis
    one = decoding.padir(g, p, src, sm, jax.random.key(0), options=decoding.PadirOptions(1, 1, init="mask"),
                         max_len=16, return_attention=True)
    n = np.asarray(one["length"])
    fin = np.asarray(one["final_input"])
    for b in range(3):
        assert set(fin[b, : n[b]].tolist()) == {V.MASK} and set(fin[b, n[b]:].tolist()) <= {V.PAD}
    # three passes, no re-masking, no early stop: the input of the last pass is the second argmax,
    # and a decoder pass on it reproduces the output and the returned weights
    opts = decoding.PadirOptions(steps=3, hyps=2, remask_stutter=False, early_stop=False)
    out = decoding.padir(g, p, src, sm, jax.random.key(1), options=opts, max_len=16, return_attention=True)
    np.testing.assert_array_equal(np.asarray(out["final_input"]), np.asarray(out["history"][1]))
    model = nnx.merge(g, p)
    enc, em = model.encode(src, sm)
    tm = jnp.arange(out["ids"].shape[1])[None] < out["length"][:, None]
    logits, w = model.decode(out["final_input"], tm, enc, em, return_attention=True)
    pred = np.where(np.asarray(tm), np.asarray(jnp.argmax(logits.at[..., : V.FIRST_PIECE].set(-jnp.inf), -1)), V.PAD)
    np.testing.assert_array_equal(pred, np.asarray(out["ids"]))
    for (a, b), (c, d) in zip(w, out["attention"]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), atol=1e-6)
        np.testing.assert_allclose(np.asarray(b), np.asarray(d), atol=1e-6)


def test_token_stutter_labels_on_hand_made_examples():
    assert sa.token_stutter_labels([7, 7, 8, 9], [7, 8, 9]).tolist() == [True, False, False]
    # the reference repeats 7 too: not stutter; 9 9 is
    assert sa.token_stutter_labels([7, 7, 9, 9], [5, 7, 7, 9]).tolist() == [False, False, True]
    assert sa.token_stutter_labels([7, 7, 7], []).tolist() == [True, True]
    assert sa.token_stutter_labels([7], [7, 7]).tolist() == []
    assert sa.token_stutter_labels([], [1]).tolist() == []


def brute_auroc(scores, labels):
    pos, neg = scores[labels], scores[~labels]
    wins = [1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(pos, neg)]
    return float(np.mean(wins))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, 60).astype(float)  # many ties
    labels = rng.random(60) < 0.3
    assert sa.auroc(scores, labels) == pytest.approx(brute_auroc(scores, labels), abs=1e-12)
    cont = rng.normal(size=60) + labels
    assert sa.auroc(cont, labels) == pytest.approx(brute_auroc(cont, labels), abs=1e-12)
    assert sa.auroc(-cont, labels) == pytest.approx(1 - brute_auroc(cont, labels), abs=1e-12)
    assert np.isnan(sa.auroc(scores, np.zeros(60, bool)))
    assert np.isnan(sa.auroc(scores, np.ones(60, bool)))
    # one pair of a class is enough: its rank among the others
    assert sa.auroc([0.1, 0.9, 0.5], [False, True, False]) == 1.0
    assert sa.auroc([0.1, 0.9, 0.5], [True, False, True]) == 0.0
    assert sa.auroc([0.2, 0.9, 0.5, 0.5], [False, False, True, False]) == pytest.approx(1.5 / 3)  # a tie counts 1/2
    with pytest.raises(ValueError, match="same length"):
        sa.auroc(scores, labels[:5])


def test_pair_statistics_against_their_definitions():
    """[Tables 4-5]"""
    rng = np.random.default_rng(0)
    b, h, w, s = 2, 3, 6, 5

    def rows(shape):
        x = rng.random(shape)
        return x / x.sum(-1, keepdims=True)

    att = [(rows((b, h, w, w)), rows((b, h, w, s))) for _ in range(2)]
    lengths = [4, 1]  # the second sentence has no adjacent pair
    sent, pos, st = sa.pair_statistics(att, lengths)
    assert sent.tolist() == [0, 0, 0] and pos.tolist() == [0, 1, 2]
    assert st["tv"].shape == (3, 2, h)
    for k, i in enumerate(pos):
        for layer, (ws, wc) in enumerate(att):
            for head in range(h):
                a, c = wc[0, head, i], wc[0, head, i + 1]
                assert st["self_fwd"][k, layer, head] == ws[0, head, i, i + 1]
                assert st["self_bwd"][k, layer, head] == ws[0, head, i + 1, i]
                assert st["tv"][k, layer, head] == pytest.approx(0.5 * sum(abs(a - c)))
                cos = 1 - a @ c / np.sqrt((a @ a) * (c @ c))
                assert st["cos"][k, layer, head] == pytest.approx(cos)
    agg = sa.aggregate(st)
    np.testing.assert_allclose(agg["tv_max"], st["tv"].reshape(3, -1).max(1))
    np.testing.assert_allclose(agg["cos_avg"], st["cos"].reshape(3, -1).mean(1))


def test_summary_table_and_cluster_bootstrap():
    """[Tables 4-5]"""
    rng = np.random.default_rng(1)
    n = 400
    df = pd.DataFrame({"sentence": np.repeat(np.arange(80), 5), "stutter": rng.random(n) < 0.2})
    for agg in sa.AGGREGATES:
        df[f"tv_{agg}"] = rng.random(n) - 0.3 * df["stutter"]  # stutter pairs: smaller distances
    res = sa.bootstrap_indices(df["sentence"], jax.random.key(0), 200)
    assert len(res) == 200 and all(len(np.unique(df["sentence"].to_numpy()[i] )) <= 80 for i in res)
    again = sa.bootstrap_indices(df["sentence"], jax.random.key(0), 200)
    assert all((a == b).all() for a, b in zip(res, again))
    table = sa.summary_table(df, "tv", res, higher_predicts=False)
    assert list(table["aggregate"]) == ["min", "avg", "max"]
    for _, row in table.iterrows():
        lo, hi = row["stutter 95% CI"]
        assert lo <= row["stutter mean"] <= hi
        assert row["stutter mean"] < row["other mean"]
        assert 0.6 < row["AUROC"] <= 1.0 and row["AUROC 95% CI"][0] > 0.5
    # a 95% CI: the 2.5th and 97.5th percentiles of the mean over the resamples
    x, y = df["tv_min"].to_numpy(), df["stutter"].to_numpy()
    means = [x[i][y[i]].mean() for i in res]
    assert table.loc[0, "stutter 95% CI"] == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])), abs=1e-12)


def test_a_cluster_bootstrap_resample_is_whole_sentences_drawn_with_replacement():
    """Each resample draws as many sentences as there are, with replacement, and keeps all the pairs of
    each sentence it draws together (sentences of 3, 1 and 2 pairs, in any order of rows)."""
    clusters = np.array([7, 5, 7, 9, 9, 7])
    members = {c: np.flatnonzero(clusters == c) for c in (5, 7, 9)}
    seen = set()
    for idx in sa.bootstrap_indices(clusters, jax.random.key(3), 50):
        drawn, at = [], 0
        while at < len(idx):  # read the resample back as a sequence of whole sentences
            c = int(clusters[idx[at]])
            np.testing.assert_array_equal(idx[at:at + len(members[c])], members[c])
            drawn.append(c)
            at += len(members[c])
        assert len(drawn) == 3
        seen.update(drawn)
    assert seen == {5, 7, 9}


def test_analyse_describes_every_adjacent_pair_of_every_output():
    """[Tables 4-5] on an untrained PaDIR model over two buckets and a partial last batch: one row per
    adjacent pair of each sentence's raw output, labelled by the stutter rule against its own reference
    (half the references repeat every token their output repeats, so the labels differ by reference); the
    last pass's best hypothesis is the output, and row t of ``per_pass`` is the decode stopped after pass
    t + 1; the progress bar counts every sentence once."""
    texts = ["a dog runs", "two men sit on a bench", "a cat", "the the girl", "a red red car"]
    v = V.train(texts * 8, 40)
    cfg = seq2seq.ModelConfig(vocab=v.size, causal=False, d_model=32, heads=4, enc_layers=1, dec_layers=2,
                              d_ff=64, max_len=32, dropout=0.0)
    tr = translate.Translator(seq2seq.build(cfg, 2), v, buckets=(8, 32))
    opts = decoding.PadirOptions(steps=3, hyps=2)
    outputs = sa.analyse(tr, texts, texts[::-1], opts, batch_size=2)[2]  # no bar
    refs = [v.decode([o])[0] if i % 2 else "a cat" for i, o in enumerate(outputs)]

    class Bar:
        n = 0

        def update(self, k):
            self.n += k

    bar = Bar()
    pairs, per_layer, again, per_pass = sa.analyse(tr, texts, refs, opts, batch_size=2, progress=bar)
    assert again == outputs and bar.n == len(texts) and per_pass.shape == (3, len(texts), 32)
    ref_ids = v.encode(refs)
    for i, out in enumerate(outputs):
        rows = pairs[pairs["sentence"] == i]
        assert list(rows["position"]) == list(range(max(len(out) - 1, 0)))
        assert list(rows["token"]) == out[:-1]
        assert list(rows["stutter"]) == list(sa.token_stutter_labels(out, ref_ids[i]))
        np.testing.assert_array_equal(per_pass[-1, i, :len(out)], out)
    assert sorted(pairs["sentence"].unique()) == [i for i, o in enumerate(outputs) if len(o) > 1]
    # the test's power: a label that depends on which reference is read
    repeats = pairs[pairs["token"].to_numpy() == np.array([outputs[i][p + 1] for i, p in
                                                           zip(pairs["sentence"], pairs["position"])])]
    assert repeats["stutter"].any() and not repeats["stutter"].all()
    assert all(v_.shape == (len(pairs), 2) for v_ in per_layer.values()) and set(per_layer) == set(sa.STATISTICS)
    for t in range(3):
        short = translate.Method("padir", padir=decoding.PadirOptions(steps=t + 1, hyps=2), drop_repeats=False)
        for chunk, src, mask, key in tr.batches(texts, 2):
            got = decoding.strip(tr.decode_ids(src, short, key)[: len(chunk)])
            assert got == decoding.strip(per_pass[t, chunk]), (t, chunk)
    assert any(decoding.strip(per_pass[0]) != decoding.strip(per_pass[t]) for t in (1, 2))  # passes differ


def test_trainconfig_replace_routes_model_fields():
    m = seq2seq.ModelConfig(vocab=40, causal=False, max_len=16)
    base = training.TrainConfig(kind="padir", model=m, steps=10, warmup=1, buckets=(16,))
    v = base.replace(positional_attention=False, stages=1)
    assert v.stages == 1 and not v.model.positional_attention and base.model.positional_attention
    assert v.replace(positional_attention=True, stages=2) == base
    with pytest.raises(ValueError, match="unknown field"):
        base.replace(masking_ratio=0.9)


def test_open_run_says_how_to_make_a_run_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no spm.model; produce it with the PaDIR chapter"):
        experiment.open_run(tmp_path)
    V.train(["a b c d e f g h"] * 50 + ["x y z w"] * 50, 30).save(tmp_path / "spm.model")
    with pytest.raises(FileNotFoundError, match="'ar'"):
        experiment.open_run(tmp_path)
    with pytest.raises(ValueError, match="unknown part"):
        experiment.open_run(tmp_path, need=("teacher",))
    with pytest.raises(FileNotFoundError, match=r"has no distilled.<tgt>.gz; produce it with the PaDIR chapter"):
        experiment.open_run(tmp_path, need=("distilled",))
    assert experiment.open_run(tmp_path, need=()).models == {}
