# Speculative greedy decoding (tinylm.speculative) on small random models.
# Run: .venv/bin/python -m pytest tests/test_speculative.py
"""Speculative output equals plain greedy `generate`, with drafts accepted, rejected and mixed; the drafter;
the statistics; errors."""

from __future__ import annotations

import pytest
import torch

from helpers import random_model, tiny
from tinylm.generate import generate
from tinylm.speculative import prompt_lookup_draft, speculative_generate


def test_prompt_lookup_finds_the_latest_longest_ngram():
    assert prompt_lookup_draft([5, 6, 7, 8, 1, 5, 6, 9, 4, 5, 6], 3) == [9, 4, 5]       # the later "5 6"
    assert prompt_lookup_draft([1, 2, 3, 9, 2, 3, 7, 1, 2, 3], 2, max_ngram=3) == [9, 2]  # "1 2 3" beats "2 3"
    assert prompt_lookup_draft([1, 2, 3, 4], 5) == []
    assert prompt_lookup_draft([4, 4], 3) == [4]                                           # no further than the end


PROMPTS = {
    "repeats": [3, 9, 4, 17, 8, 3, 9, 4, 17, 8, 3, 9],       # a loop the drafter can copy
    "random": None,                                           # drafts mostly rejected
}


CONFIGS = {"grouped": tiny(max_seq_len=48),
           "qk-norm-untied": tiny(n_layers=3, n_heads=6, n_kv_heads=3, dim=48, qk_norm=True, tie_embeddings=False,
                                  max_seq_len=48)}


@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
@pytest.mark.parametrize("prompt", sorted(PROMPTS))
@pytest.mark.parametrize("k", [1, 4])
def test_equals_plain_greedy(cfg_name, prompt, k):
    cfg = CONFIGS[cfg_name]
    model = random_model(cfg, seed=3)
    g = torch.Generator().manual_seed(4)
    ids = PROMPTS[prompt] or torch.randint(0, cfg.vocab_size, (10,), generator=g).tolist()
    idx = torch.tensor([ids])
    want = generate(model, idx, 16, temperature=0.0)
    got, stats = speculative_generate(model, idx, 16, k=k)
    assert torch.equal(got, want)
    assert stats["new"] == 16 and 0 <= stats["accepted"] <= stats["drafted"] <= k * stats["forwards"]
    assert stats["forwards"] == 16 - 1 - stats["accepted"]    # every forward yields its accepted drafts + 1


def continuation(model, idx, n):
    return generate(model, idx, n, temperature=0.0)[0].tolist()


def test_right_drafts_are_all_accepted_and_wrong_ones_all_rejected():
    model = random_model(tiny(vocab_size=64, max_seq_len=48), seed=5)
    idx = torch.tensor([[1, 2, 3, 4]])
    truth = continuation(model, idx, 20)
    oracle = lambda tokens, k: truth[len(tokens) : len(tokens) + k]                      # noqa: E731
    wrong = lambda tokens, k: [(t + 1) % 64 for t in truth[len(tokens) : len(tokens) + k]]  # noqa: E731
    got, stats = speculative_generate(model, idx, 20, k=4, draft=oracle)
    assert got[0].tolist() == truth and stats["accepted"] == stats["drafted"] == 15 and stats["forwards"] == 4
    got, stats = speculative_generate(model, idx, 20, k=4, draft=wrong)
    assert got[0].tolist() == truth and stats["accepted"] == 0 and stats["forwards"] == 19
    half = lambda tokens, k: oracle(tokens, 2) + wrong(tokens, k)[2:]                    # noqa: E731
    got, stats = speculative_generate(model, idx, 20, k=4, draft=half)
    assert got[0].tolist() == truth and 0 < stats["accepted"] < stats["drafted"]


def test_stops_at_eos_like_generate():
    model = random_model(tiny(vocab_size=64, max_seq_len=48), seed=5)
    idx = torch.tensor([[1, 2, 3, 4]])
    truth = continuation(model, idx, 20)
    eos = truth[4 + 6]                                           # the 7th new token
    want = generate(model, idx, 20, temperature=0.0, eos_id=eos)
    got, stats = speculative_generate(model, idx, 20, k=3, eos_id=eos, draft=lambda t, k: truth[len(t):len(t) + k])
    assert torch.equal(got, want) and got.shape[1] < 24


@pytest.mark.parametrize("call, match", [
    (lambda m: speculative_generate(m, torch.tensor([[1, 2], [3, 4]]), 4), "one prompt"),
    (lambda m: speculative_generate(m, torch.tensor([[1, 2]]), 4, k=0), "k must"),
    (lambda m: speculative_generate(m, torch.tensor([[1, 2]]), 40), "max_seq_len"),
])
def test_bad_input_is_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(random_model(tiny()))


@pytest.mark.parametrize("where", ["prefill", "verify"])
def test_nan_logits_are_a_clear_error_not_token_zero(where):
    model = random_model(tiny(), seed=0)
    real = model.forward
    calls = []

    def nan_after_prefill(x, *args, **kwargs):      # NaN logits at the prefill, or at the first check of drafts
        logits, *rest = real(x, *args, **kwargs)
        calls.append(x.shape)
        if where == "prefill" or len(calls) > 1:
            logits = torch.full_like(logits, float("nan"))
        return (logits, *rest)
    model.forward = nan_after_prefill
    with pytest.raises(ValueError, match="logits hold NaN"):
        speculative_generate(model, torch.tensor([[1, 2, 1, 2]]), 6, k=2)
