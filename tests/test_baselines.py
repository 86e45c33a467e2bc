# tinylm.baselines: the count models and xz given the training text, against hand counts.
import lzma
import math

import pytest
import torch

from tinylm import baselines
from tinylm.tokenizer import BPETokenizer

BYTES = BPETokenizer([])          # no merges: one token per byte


def test_unigram_is_add_one_frequencies_scored_on_all_but_the_first_token():
    train, val = "aab", "xab"
    bpb, n_bytes, n_tokens = baselines.unigram_bits_per_byte(BYTES, train, val)
    V = BYTES.vocab_size
    p = {c: (train.count(c) + 1) / (len(train) + V) for c in "ab"}   # 'x' is not scored: it is first
    assert (n_bytes, n_tokens) == (2, 2)
    assert bpb == pytest.approx(-(math.log2(p["a"]) + math.log2(p["b"])) / 2)


def test_bigram_discounts_each_seen_pair_and_backs_off_to_the_unigram():
    train = "abab" + "ac"
    ids = torch.tensor(BYTES.encode(train))
    V, d = BYTES.vocab_size, 0.75
    uni = baselines.unigram_probs(ids, V)
    a, b, c, z = (ord(x) for x in "abcz")
    prev, nxt = torch.tensor([a, a, a, z]), torch.tensor([b, c, a, a])
    got = baselines.bigram_probs(ids, prev, nxt, V, d)
    # after 'a': b twice, c once (c(a) = 3, two distinct); 'a' then 'a' never: only the backed-off mass
    assert got[0] == pytest.approx((2 - d) / 3 + d * 2 / 3 * uni[b])
    assert got[1] == pytest.approx((1 - d) / 3 + d * 2 / 3 * uni[c])
    assert got[2] == pytest.approx(d * 2 / 3 * uni[a])
    assert got[3] == pytest.approx(uni[a])                        # 'z' never seen: the unigram
    full = baselines.bigram_probs(ids, torch.full((V,), a), torch.arange(V), V, d)
    assert full.sum() == pytest.approx(1.0)                       # a distribution over the next token
    with pytest.raises(ValueError, match="discount must be"):
        baselines.bigram_probs(ids, prev, nxt, V, 0.0)


def test_the_bigram_beats_the_unigram_on_text_with_structure_and_scores_like_the_model_measure():
    train = "the cat sat on the mat. " * 40
    val = "the mat sat on the cat. " * 5
    tok = BPETokenizer.train(train, 262)      # two merges: most tokens are still single bytes
    uni, n_bytes, n_tokens = baselines.unigram_bits_per_byte(tok, train, val)
    bi, n_bytes2, _ = baselines.bigram_bits_per_byte(tok, train, val)
    ids = tok.encode(val)
    assert n_tokens == len(ids) - 1 and n_bytes == n_bytes2 == sum(len(tok.token_bytes(i)) for i in ids[1:])
    assert bi < uni / 2


def test_xz_given_the_training_text_pays_only_for_what_is_new():
    train = "".join(f"line {i} of the play\n" for i in range(2000))
    val = "".join(f"line {i} of the play\n" for i in range(500, 700))
    given, n = baselines.xz_bits_per_byte(train, val)
    alone, _ = baselines.xz_bits_per_byte("", val)
    assert n == len(val.encode())
    assert alone == pytest.approx(8 * len(lzma.compress(val.encode(), preset=baselines.XZ_PRESET)) / n)
    assert given < alone / 4


def test_bad_input_is_refused_with_what_to_change():
    with pytest.raises(ValueError, match="at least 2"):
        baselines.bigram_bits_per_byte(BYTES, "abc", "a")
    with pytest.raises(TypeError, match="str of text"):
        baselines.unigram_bits_per_byte(BYTES, b"abc", "ab")
    with pytest.raises(ValueError, match="val is empty"):
        baselines.xz_bits_per_byte("abc", "")
    with pytest.raises(TypeError, match="str of text"):
        baselines.xz_bits_per_byte(None, "abc")


def test_train_ids_encoded_once_score_the_same_and_foreign_ids_are_refused():
    train, val = "abracadabra " * 20, "cadabra abra"
    ids = baselines.train_ids(BYTES, train)
    for f in (baselines.unigram_bits_per_byte, baselines.bigram_bits_per_byte):
        assert f(BYTES, ids, val) == f(BYTES, train, val)
    with pytest.raises(ValueError, match="outside 0..259"):
        baselines.bigram_bits_per_byte(BYTES, torch.tensor([1, 5000]), val)
    with pytest.raises(ValueError, match="1-D long tensor"):
        baselines.unigram_bits_per_byte(BYTES, ids.float(), val)
