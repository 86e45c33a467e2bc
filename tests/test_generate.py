# Run: .venv/bin/python -m pytest -q tests/test_generate.py
"""Sampling helpers against independent NumPy/Python versions, and generate() against itself and transformers."""

import math
import sys

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from helpers import random_model, tiny

from tinylm.generate import (
    apply_repetition_penalty, apply_temperature, generate, left_pad, sample_next, stream, top_k_filter, top_p_filter,
)




LLAMA_LIKE = tiny(tie_embeddings=False)
QWEN3_LIKE = tiny(qk_norm=True)


def prompt(batch: int = 2, length: int = 5, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 64, (batch, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------
# Reference filters in plain Python / NumPy (float64), written independently of tinylm
# ---------------------------------------------------------------------------------------------
def ranked(row) -> list[int]:
    """Token ids from most to least likely; equal logits: lower id first."""
    return sorted(range(len(row)), key=lambda i: (-row[i], i))


def ref_top_k(row, k) -> set[int]:
    return set(ranked(row)[:k])


def ref_top_p(row, p) -> tuple[set[int], float]:
    """Kept ids and the closest distance between p and a running total (to skip rounding-sensitive cases)."""
    x = np.asarray(row, dtype=np.float64)
    probs = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    kept, total, closest = set(), 0.0, math.inf
    for i in ranked(row):
        closest = min(closest, abs(total - p))
        if total >= p:
            break
        kept.add(i)
        total += probs[i]
    return kept, closest


logit_values = st.one_of(st.floats(-8, 8, allow_nan=False, width=32), st.sampled_from([-1.0, 0.0, 0.5, 2.0]))
logit_rows = st.integers(1, 3).flatmap(
    lambda b: st.integers(1, 12).flatmap(
        lambda v: st.lists(st.lists(logit_values, min_size=v, max_size=v), min_size=b, max_size=b)))


@settings(max_examples=150, deadline=None)
@given(rows=logit_rows, k=st.integers(1, 14))
def test_top_k_keeps_exactly_the_k_largest(rows, k):
    logits = torch.tensor(rows, dtype=torch.float32)
    out = top_k_filter(logits, k)
    for row, filtered in zip(logits.tolist(), out):
        kept = set(torch.isfinite(filtered).nonzero().flatten().tolist())
        assert kept == ref_top_k(row, k)
        assert len(kept) == min(k, len(row))
        assert all(filtered[i] == row[i] for i in kept)  # kept logits untouched


@settings(max_examples=150, deadline=None)
@given(rows=logit_rows, p=st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_set_reaching_p(rows, p):
    logits = torch.tensor(rows, dtype=torch.float32)
    out = top_p_filter(logits, p)
    for row, filtered in zip(logits.tolist(), out):
        expected, closest = ref_top_p(row, p)
        assume(closest > 1e-5 or p == 1.0)  # float32 vs float64 may round a sum that lands on p either way
        kept = set(torch.isfinite(filtered).nonzero().flatten().tolist())
        assert kept == (set(range(len(row))) if p == 1.0 else expected)
        assert ranked(row)[0] in kept
        assert all(filtered[i] == row[i] for i in kept)


def test_top_p_on_a_small_distribution():
    probs = torch.tensor([0.05, 0.5, 0.2, 0.15, 0.1])
    logits = probs.log()
    finite = lambda x: torch.isfinite(x).nonzero().flatten().tolist()  # noqa: E731
    assert finite(top_p_filter(logits, 0.5)) == [1]               # 0.5 alone reaches 0.5
    assert finite(top_p_filter(logits, 0.6)) == [1, 2]            # 0.7
    assert finite(top_p_filter(logits, 0.8)) == [1, 2, 3]         # 0.85
    assert finite(top_p_filter(logits, 0.01)) == [1]              # the top token always stays
    assert finite(top_k_filter(logits, 2)) == [1, 2]
    tie = torch.tensor([1.0, 3.0, 3.0, 3.0, 0.0])
    assert finite(top_k_filter(tie, 2)) == [1, 2]                 # equal logits: lower ids first
    assert finite(top_p_filter(tie, 0.5)) == [1, 2]


def test_nucleus_among_the_top_candidates_equals_the_full_sort(monkeypatch):
    """A large vocabulary looks for the nucleus among the top NUCLEUS_CANDIDATES first: same tokens kept."""
    import tinylm.generate  # noqa: F401  (the module, not the function of the same name)
    gen_module = sys.modules["tinylm.generate"]
    g = torch.Generator().manual_seed(0)
    V = 3000
    peaked = torch.randn(6, V, generator=g) * 2
    peaked[:, :40] += torch.linspace(12, 4, 40)                  # a clear head of likely tokens
    ties = peaked[:2].clone()
    ties[:, 100:400] = peaked[:, :40].max() + 1.0               # 300 equal leaders: more than the candidates
    flat = torch.randn(2, V, generator=g) * 0.1                 # the nucleus spans most of the vocabulary
    fast_path = []
    find = gen_module._top_p_among_candidates
    monkeypatch.setattr(gen_module, "_top_p_among_candidates", lambda *a: fast_path.append(find(*a) is not None)
                        or find(*a))
    for logits, fast in ((peaked, True), (ties, False), (flat, False)):
        for p in (0.5, 0.9, 0.95):
            fast_path.clear()
            got = top_p_filter(logits, p)
            assert fast_path == [fast]
            with monkeypatch.context() as m:
                m.setattr(gen_module, "NUCLEUS_CANDIDATES", V)     # the full sort only
                want = top_p_filter(logits, p)
            assert torch.equal(torch.isinf(got), torch.isinf(want)), (fast, p)


def test_temperature_scales_logits():
    logits = torch.tensor([[1.0, -2.0, 4.0]])
    assert torch.allclose(apply_temperature(logits, 0.5), torch.tensor([[2.0, -4.0, 8.0]]))
    assert torch.equal(apply_temperature(logits, 1.0), logits)


def test_sampled_frequencies_follow_the_filtered_softmax():
    """200,000 draws from a 4-token distribution at temperature 2 with top-k 3: empirical ~ exact."""
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    counts = torch.bincount(sample_next(logits.expand(200_000, 4), temperature=2.0, top_k=3,
                                        generator=torch.Generator().manual_seed(0)), minlength=4)
    w = np.exp(np.array([2.0, 1.0, 0.0]) / 2.0)
    expected = np.append(w / w.sum(), 0.0)
    assert counts[3] == 0
    assert np.abs(counts.numpy() / 200_000 - expected).max() < 0.005


def test_sampling_is_reproducible_with_a_seeded_generator():
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(3))
    draw = lambda seed: sample_next(logits, 1.0, generator=torch.Generator().manual_seed(seed))  # noqa: E731
    assert torch.equal(draw(7), draw(7))
    assert not all(torch.equal(draw(7), draw(s)) for s in range(8, 12))
    model = random_model(QWEN3_LIKE)
    run = lambda seed: generate(model, prompt(), 12, temperature=1.2, top_k=20, top_p=0.95,  # noqa: E731
                                generator=torch.Generator().manual_seed(seed))
    assert torch.equal(run(5), run(5))
    assert not torch.equal(run(5), run(6))


def test_temperature_zero_is_argmax():
    logits = torch.randn(5, 64, generator=torch.Generator().manual_seed(4))
    expected = torch.tensor([max(range(64), key=lambda i: row[i]) for row in logits.tolist()])
    assert torch.equal(sample_next(logits, temperature=0), expected)
    assert torch.equal(sample_next(logits, temperature=0, top_k=3, top_p=0.5), expected)
    assert torch.equal(sample_next(logits, temperature=1.0, top_k=1), expected)  # top-1 is greedy too
    assert sample_next(logits[0], temperature=0).shape == ()


# ---------------------------------------------------------------------------------------------
# generate()
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [LLAMA_LIKE, QWEN3_LIKE], ids=["llama", "qwen3"])
def test_greedy_with_and_without_cache_and_transformers_agree(cfg):
    model, idx, n = random_model(cfg), prompt(), 24
    ours = generate(model, idx, n, temperature=0)
    assert ours.shape == (2, 5 + n) and torch.equal(ours[:, :5], idx)
    assert torch.equal(generate(model, idx, n, temperature=0, use_cache=False), ours)
    # greedy choices are clear: the best logit beats the runner-up by far more than fp32 noise
    with torch.no_grad():
        top2 = model(ours[:, :-1])[0][:, 4:].topk(2, dim=-1).values     # (2, n, 2)
    assert (top2[..., 0] - top2[..., 1]).min() > 1e-3
    assert len(set(ours[:, 5:].flatten().tolist())) >= 5                  # not one token repeated

    from tinylm.hf import to_hf

    hf = to_hf(model)
    theirs = hf.generate(idx, attention_mask=torch.ones_like(idx), do_sample=False, max_new_tokens=n,
                         min_new_tokens=n, eos_token_id=None, pad_token_id=0)
    assert torch.equal(theirs, ours)


def test_cached_generate_is_one_prefill_then_single_token_steps(monkeypatch):
    model, idx = random_model(QWEN3_LIKE), prompt(batch=3, length=6)
    shapes, cache_lengths = [], []
    model.register_forward_pre_hook(lambda m, args, kwargs: shapes.append(tuple(args[0].shape)), with_kwargs=True)
    new_cache = model.new_cache
    monkeypatch.setattr(model, "new_cache", lambda b, n: cache_lengths.append(n) or new_cache(b, n))
    generate(model, idx, 7)
    assert cache_lengths == [6 + 7]
    assert shapes == [(3, 6)] + [(3, 1)] * 6          # the 7th token is sampled, never fed back
    shapes.clear()
    generate(model, idx, 7, use_cache=False)
    assert shapes == [(3, t) for t in range(6, 13)]
    shapes.clear()
    assert torch.equal(generate(model, idx, 0), idx) and shapes == []


def test_eos_stops_rows_and_generation():
    model, idx, n = random_model(LLAMA_LIKE), prompt(), 24
    free = generate(model, idx, n, temperature=0)[:, 5:].tolist()           # no eos: two rows of new tokens
    # a token both rows produce, first at different steps
    eos = next(t for t in range(64) if t in free[0] and t in free[1] and free[0].index(t) != free[1].index(t))
    first = [row.index(eos) for row in free]
    out = generate(model, idx, n, temperature=0, eos_id=eos)
    assert out.shape == (2, 5 + max(first) + 1)                             # stops once the last row ends
    for row, stop, got in zip(free, first, out[:, 5:].tolist()):
        assert got == row[: stop + 1] + [eos] * (max(first) - stop)          # finished rows keep emitting eos
    never = next(t for t in range(64) if t not in free[0] + free[1])
    assert torch.equal(generate(model, idx, n, temperature=0, eos_id=never), generate(model, idx, n, temperature=0))


def test_mode_is_restored_and_output_is_an_ordinary_tensor():
    model, idx = random_model(QWEN3_LIKE), prompt()
    model.train()
    out = generate(model, idx, 4)
    assert model.training
    model.eval()
    generate(model, idx, 4)
    assert not model.training
    model.train()
    _, loss = model(out[:, :-1], targets=out[:, 1:])   # generated ids can feed a training step
    loss.backward()
    assert model.embed_tokens.weight.grad is not None


def test_fits_exactly_max_seq_len_and_no_further():
    model = random_model(QWEN3_LIKE)                               # max_seq_len 32
    idx = prompt(length=20)
    assert generate(model, idx, 12, temperature=0).shape == (2, 32)
    assert torch.equal(generate(model, idx, 12, temperature=0),
                       generate(model, idx, 12, temperature=0, use_cache=False))
    with pytest.raises(ValueError, match="max_seq_len") as err:
        generate(model, idx, 13)
    assert "at most 12 new tokens" in str(err.value)


@pytest.mark.parametrize("kwargs, name", [
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_p=-0.1), "top_p"),
    (dict(top_k=0), "top_k"),
    (dict(top_k=2.5), "top_k"),
    (dict(top_k=True), "top_k"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(max_new_tokens=2.0), "max_new_tokens"),
    (dict(idx=torch.zeros(5, dtype=torch.long)), "idx"),
    (dict(idx=torch.zeros(1, 5)), "idx"),
    (dict(idx=torch.zeros(1, 5, dtype=torch.int32)), "idx"),
    (dict(idx=torch.zeros(1, 0, dtype=torch.long)), "idx"),
    (dict(eos_id=64), "eos_id"),
    (dict(use_cache="yes"), "use_cache"),
    (dict(generator=0), "generator"),
])
def test_bad_generate_arguments_raise_naming_the_argument(kwargs, name):
    model = random_model(QWEN3_LIKE)
    args = dict(idx=prompt(), max_new_tokens=3) | kwargs
    with pytest.raises(ValueError, match=name):
        generate(model, **args)


@pytest.mark.parametrize("call, name", [
    (lambda x: apply_temperature(x, 0), "temperature"),
    (lambda x: apply_temperature(x, -1.0), "temperature"),
    (lambda x: top_k_filter(x, 0), "top_k"),
    (lambda x: top_p_filter(x, 0.0), "top_p"),
    (lambda x: top_p_filter(x, 1.01), "top_p"),
    (lambda x: sample_next(x, temperature=-1), "temperature"),
    (lambda x: sample_next(x, top_k=-3), "top_k"),
    (lambda x: sample_next(x, top_p=2), "top_p"),
    (lambda x: sample_next(x.long()), "logits"),
    (lambda x: sample_next(x[None]), "logits"),
])
def test_bad_sampling_arguments_raise_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call(torch.randn(2, 8))


# ---------------------------------------------------------------------------------------------
# Batched prompts of different lengths: left padding and the padding mask
# ---------------------------------------------------------------------------------------------
LENGTHS = (5, 2, 8, 1)   # the longest row has no pad, the others 3, 6 and 7


def ragged(lengths=LENGTHS, seed: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 64, (n,), generator=g).tolist() for n in lengths]


def test_left_pad_and_the_positions_and_mask_it_implies():
    from tinylm.model import padding_mask, position_ids

    idx, mask = left_pad([[5, 6, 7], [8, 9]], pad_id=0)
    assert idx.tolist() == [[5, 6, 7], [0, 8, 9]]
    assert mask.tolist() == [[True, True, True], [False, True, True]]
    assert position_ids(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])).tolist() == [[0, 0, 0, 1, 2],
                                                                                         [0, 1, 2, 3, 4]]
    allowed = padding_mask(torch.tensor([[0, 0, 1, 1]]), T=4)[0, 0].int().tolist()   # (T, S) of row 0
    assert allowed == [[1, 0, 0, 0],        # a pad query sees only itself (no empty softmax)
                       [0, 1, 0, 0],
                       [0, 0, 1, 0],        # the first real token sees only itself
                       [0, 0, 1, 1]]
    assert padding_mask(torch.tensor([[0, 1, 1]]), T=1)[0, 0].int().tolist() == [[0, 1, 1]]  # a cached step


@pytest.mark.parametrize("cfg", [LLAMA_LIKE, QWEN3_LIKE], ids=["grouped", "qk-norm"])
@pytest.mark.parametrize("explicit", [False, True], ids=["sdpa", "explicit"])
def test_padded_logits_equal_one_by_one_at_real_positions(cfg, explicit):
    model = random_model(cfg).set_explicit_attention(explicit)
    prompts = ragged()
    idx, mask = left_pad(prompts, pad_id=0)                                  # (4, 8)
    T = idx.shape[1]
    with torch.no_grad():
        batched = model(idx, attention_mask=mask)[0]                         # (4, 8, V)
        assert torch.isfinite(batched).all()                                 # pad queries too: no NaN
        for row, p in enumerate(prompts):
            alone = model(torch.tensor([p]))[0][0]                           # (len, V)
            torch.testing.assert_close(batched[row, T - len(p):], alone, atol=1e-5, rtol=0)
        # cached: prefill the padded prompts, then feed 4 more tokens one at a time with the grown mask
        more = torch.randint(1, 64, (4, 4), generator=torch.Generator().manual_seed(9))
        cache = model.new_cache(4, T + 4)
        steps = [model(idx, cache=cache, attention_mask=mask)[0]]
        full_mask = torch.cat([mask, torch.ones(4, 4, dtype=torch.bool)], dim=1)   # (4, 12)
        for j in range(4):
            steps.append(model(more[:, j : j + 1], cache=cache, attention_mask=full_mask[:, : T + j + 1])[0])
        cached = torch.cat(steps, dim=1)                                     # (4, 12, V)
        for row, p in enumerate(prompts):
            alone = model(torch.tensor([p + more[row].tolist()]))[0][0]      # (len + 4, V)
            torch.testing.assert_close(cached[row, T - len(p):], alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cfg", [LLAMA_LIKE, QWEN3_LIKE], ids=["grouped", "qk-norm"])
@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "uncached"])
def test_batched_greedy_with_padding_equals_one_by_one_for_every_row(cfg, use_cache):
    model, prompts, n = random_model(cfg), ragged(), 16
    idx, mask = left_pad(prompts, pad_id=0)
    T = idx.shape[1]
    out = generate(model, idx, n, temperature=0, attention_mask=mask, use_cache=use_cache)
    assert out.shape == (4, T + n) and torch.equal(out[:, :T], idx)        # the pads stay in front
    for row, p in enumerate(prompts):
        alone = generate(model, torch.tensor([p]), n, temperature=0, use_cache=use_cache)[0]
        assert out[row, T - len(p):].tolist() == alone.tolist(), f"row {row} (prompt of {len(p)} tokens)"
    assert len({tuple(r) for r in out[:, T:].tolist()}) == 4                  # four different continuations


def test_padding_mask_blocks_attention_to_pads():
    """Other pad ids change nothing where the mask is given, and change the outputs where it is not."""
    model, prompts = random_model(QWEN3_LIKE), ragged()
    idx, mask = left_pad(prompts, pad_id=0)
    noise = torch.randint(0, 64, idx.shape, generator=torch.Generator().manual_seed(5))
    other = torch.where(mask, idx, noise)                                    # same prompts, other pad ids
    assert not torch.equal(other, idx)
    real = mask[:, :, None].expand(-1, -1, 64)                               # (B, T, V) real positions
    with torch.no_grad():
        a, b = model(idx, attention_mask=mask)[0], model(other, attention_mask=mask)[0]
        assert torch.equal(a[real], b[real])
        assert not torch.allclose(model(idx)[0][real], model(other)[0][real])   # without the mask: pads leak
    for use_cache in (True, False):
        kw = dict(temperature=0, attention_mask=mask, use_cache=use_cache)
        assert torch.equal(generate(model, idx, 12, **kw)[:, idx.shape[1]:],
                           generate(model, other, 12, **kw)[:, idx.shape[1]:])


def test_eos_per_row_with_padding():
    model, prompts, n = random_model(LLAMA_LIKE), ragged(), 24
    idx, mask = left_pad(prompts)
    T = idx.shape[1]
    free = generate(model, idx, n, temperature=0, attention_mask=mask)[:, T:].tolist()
    # a token that at least two rows produce, first at different steps; some rows may never produce it
    eos = next(t for t in range(64) if len({r.index(t) for r in free if t in r}) >= 2)
    stops = [r.index(eos) if eos in r else n for r in free]
    out = generate(model, idx, n, temperature=0, attention_mask=mask, eos_id=eos)
    assert out.shape[1] == T + min(n, max(stops) + 1)                       # stops once every row has ended
    for row, p in enumerate(prompts):
        got = out[row, T:].tolist()
        alone = generate(model, torch.tensor([p]), n, temperature=0, eos_id=eos)[0, len(p):].tolist()
        assert got[: len(alone)] == alone                                    # the row as it would end alone
        assert got[len(alone):] == [eos] * (len(got) - len(alone))           # then keeps emitting eos


def test_no_pad_path_is_the_plain_path():
    model, idx = random_model(QWEN3_LIKE), prompt(batch=3, length=6)
    ones = torch.ones_like(idx, dtype=torch.bool)
    with torch.no_grad():
        assert torch.equal(model(idx, attention_mask=ones)[0], model(idx)[0])
    g1, g2 = (torch.Generator().manual_seed(0) for _ in range(2))
    assert torch.equal(generate(model, idx, 8, attention_mask=ones, generator=g1), generate(model, idx, 8, generator=g2))


def test_sampled_batches_are_reproducible_and_rows_are_independent_of_the_pad_id():
    model, prompts = random_model(QWEN3_LIKE), ragged()
    runs = []
    for pad_id in (0, 0, 63):
        idx, mask = left_pad(prompts, pad_id=pad_id)
        out = generate(model, idx, 10, temperature=0.8, top_p=0.95, attention_mask=mask,
                       generator=torch.Generator().manual_seed(7))
        runs.append(out[:, idx.shape[1]:])
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


def test_batched_greedy_equals_transformers_with_left_padding():
    from tinylm.hf import to_hf

    model, prompts, n = random_model(LLAMA_LIKE), ragged(), 12
    idx, mask = left_pad(prompts, pad_id=0)
    ours = generate(model, idx, n, temperature=0, attention_mask=mask)
    theirs = to_hf(model).generate(idx, attention_mask=mask.long(), do_sample=False, max_new_tokens=n,
                                   min_new_tokens=n, eos_token_id=None, pad_token_id=0)
    assert torch.equal(theirs, ours)


@pytest.mark.parametrize("mask, words", [
    (torch.ones(2, 4, dtype=torch.bool), "shape"),                            # the prompt is (2, 5)
    (torch.ones(2, 5), "dtype"),                                              # float
    (torch.full((2, 5), 2), "0s and 1s"),
    (torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), "left-padded"),        # right padding
    (torch.tensor([[0, 1, 0, 1, 1], [1, 1, 1, 1, 1]]), "left-padded"),        # a hole
    (torch.tensor([[0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]), "left-padded"),        # a row of pads only
])
def test_bad_attention_masks_raise_naming_the_argument(mask, words):
    model = random_model(QWEN3_LIKE)
    with pytest.raises(ValueError, match="attention_mask") as err:
        generate(model, prompt(), 3, attention_mask=mask)
    assert words in str(err.value)
    if words in ("shape", "dtype", "0s and 1s"):                              # the model's own rules
        with pytest.raises(ValueError, match="attention_mask"):
            model(prompt(), attention_mask=mask)


@pytest.mark.parametrize("prompts, pad_id", [([], 0), ([[1, 2], []], 0), ([[1, 2.0]], 0), ([[1]], -1), ("ab", 0)])
def test_bad_left_pad_arguments_raise(prompts, pad_id):
    with pytest.raises(ValueError, match="prompts|pad_id"):
        left_pad(prompts, pad_id)


# ---------------------------------------------------------------------------------------------
# Repetition penalty (CTRL, Keskar et al., 2019) in transformers' sign-aware form
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("penalty", [1.3, 0.7, 2.0])
def test_repetition_penalty_equals_transformers_processor(penalty):
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 40, generator=g) * 3                       # positive and negative logits
    logits[0, 7] = 0.0
    seen = torch.randint(0, 40, (3, 12), generator=g)                  # repeated ids included
    seen[0, :3] = 7
    theirs = RepetitionPenaltyLogitsProcessor(penalty)(seen, logits.clone())
    ours = apply_repetition_penalty(logits, seen, penalty)
    assert torch.equal(ours, theirs)
    assert torch.equal(apply_repetition_penalty(logits[1], seen[1], penalty), theirs[1])   # one row, (V,)
    hit = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, seen, True)
    assert torch.equal(ours[~hit], logits[~hit])                       # unseen tokens untouched
    moved = (ours[hit] < logits[hit]) if penalty > 1 else (ours[hit] > logits[hit])
    assert moved[logits[hit] != 0].all()                               # every seen token loses (or gains)


def test_repetition_penalty_is_sign_aware_unlike_dividing_every_seen_logit():
    logits, seen = torch.tensor([2.0, -1.0, 0.5]), torch.tensor([0, 1])
    ours = apply_repetition_penalty(logits, seen, 2.0)
    assert ours.tolist() == [1.0, -2.0, 0.5]
    divided = logits.clone()
    divided[seen] /= 2.0                                               # CTRL's formula as printed
    assert divided[1] > logits[1] > ours[1]                            # it would favour the negative one
    assert torch.equal(apply_repetition_penalty(logits, seen, 1.0), logits)
    assert torch.equal(apply_repetition_penalty(logits, seen[:0], 2.0), logits)


@pytest.mark.parametrize("cfg", [LLAMA_LIKE, QWEN3_LIKE], ids=["llama", "qwen3"])
def test_generate_with_repetition_penalty_equals_transformers(cfg):
    from tinylm.hf import to_hf

    model, n = random_model(cfg), 20
    idx, mask = left_pad(ragged((5, 2, 8)), pad_id=0)
    hf = to_hf(model)
    for attention_mask in (None, mask):
        ours = generate(model, idx, n, temperature=0, repetition_penalty=1.5, attention_mask=attention_mask)
        assert torch.equal(generate(model, idx, n, temperature=0, repetition_penalty=1.5,
                                    attention_mask=attention_mask, use_cache=False), ours)
        theirs = hf.generate(idx, attention_mask=torch.ones_like(idx) if attention_mask is None else mask.long(),
                             do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                             pad_token_id=0, repetition_penalty=1.5)
        assert torch.equal(theirs, ours)
    plain = generate(model, idx, n, temperature=0, attention_mask=mask)
    assert not torch.equal(plain, ours)                                # the penalty changed the text
    assert torch.equal(generate(model, idx, n, temperature=0, attention_mask=mask, repetition_penalty=1), plain)


def test_stream_yields_what_generate_returns_with_a_repetition_penalty():
    model, idx = random_model(QWEN3_LIKE), prompt(batch=1)
    kwargs = dict(temperature=0.9, top_k=20, repetition_penalty=1.4)
    streamed = list(stream(model, idx, 12, generator=torch.Generator().manual_seed(3), **kwargs))
    generated = generate(model, idx, 12, generator=torch.Generator().manual_seed(3), **kwargs)
    assert streamed == generated[0, 5:].tolist()


@pytest.mark.parametrize("penalty", [0, -1.2, 0.0, float("nan"), float("inf"), True, "1.2", None])
def test_bad_repetition_penalty_is_refused_naming_it(penalty):
    logits, seen = torch.randn(2, 8), torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="^penalty must be a number > 0"):
        apply_repetition_penalty(logits, seen, penalty)
    if penalty is not None:                                            # None: generate's "off"
        with pytest.raises(ValueError, match="repetition_penalty"):
            generate(random_model(QWEN3_LIKE), prompt(), 3, repetition_penalty=penalty)


@pytest.mark.parametrize("seen, words", [
    (torch.zeros(2, 3), "int64"),                                      # float ids
    (torch.zeros(3, 3, dtype=torch.long), "shape"),                    # 3 rows for 2 rows of logits
    (torch.tensor([[0, 8], [1, 2]]), "outside"),                       # id 8 in a vocabulary of 8
    (torch.tensor([[0, -1], [1, 2]]), "outside"),
])
def test_bad_seen_ids_are_refused(seen, words):
    with pytest.raises(ValueError, match="seen|penalty") as err:
        apply_repetition_penalty(torch.randn(2, 8), seen, 1.2)
    assert words in str(err.value)
