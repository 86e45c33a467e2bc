# Run: .venv/bin/python -m pytest -q tests/test_generate.py
"""Sampling helpers against independent NumPy/Python versions, and generate() against itself and transformers."""

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from helpers import random_model, tiny

from tinylm.generate import apply_temperature, generate, sample_next, top_k_filter, top_p_filter




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
