# Per-step overhead when generating: the compiled switch (tinylm.fast) and the greedy check of the chosen logit.
# Run: .venv/bin/python -m pytest tests/test_fast.py   (the compiled test is marked slow: it compiles a block)
"""generate(..., compiled=True) gives eager's tokens from one graph for every layer and position; what
CompiledDecoder does not compile is the model's own forward; greedy decoding still refuses NaN logits after
checking only the logit it chose."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from helpers import random_model, tiny
from tinylm.fast import CACHE_BUCKET, CompiledDecoder
from tinylm.generate import generate, sample_next
from tinylm.quantize import quantize


def test_greedy_refuses_a_single_nan_and_an_all_minus_inf_row():
    logits = torch.randn(3, 300)
    logits[1, 17] = float("nan")                          # one NaN among finite logits: argmax lands on it
    with pytest.raises(ValueError, match="logits hold NaN"):
        sample_next(logits, temperature=0)
    logits[1] = float("-inf")
    with pytest.raises(ValueError, match="-inf everywhere"):
        sample_next(logits, temperature=0)
    logits[1, 5] = 2.0                                    # -inf elsewhere is a filter, not an error
    assert sample_next(logits, temperature=0)[1] == 5


def test_compiled_decoder_leaves_prefill_and_training_to_the_model_and_checks_its_input():
    model = random_model(tiny(max_seq_len=300), seed=1)
    fast = CompiledDecoder(model)
    assert fast.new_cache(2, 5).max_len == CACHE_BUCKET              # rounded up ...
    assert fast.new_cache(1, CACHE_BUCKET + 1).max_len == 300        # ... but never past max_seq_len
    idx = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        got, want = fast(idx, cache=fast.new_cache(2, 8))[0], model(idx, cache=model.new_cache(2, 8))[0]
    assert torch.equal(got, want)                                    # a prefill is the model's own call
    assert torch.equal(fast(idx, idx)[1], model(idx, idx)[1])        # and so is a loss
    with pytest.raises(ValueError, match="token ids must lie in"):   # checked before anything is compiled
        fast(torch.tensor([[64], [0]]), cache=fast.new_cache(2, 8))
    full = model.new_cache(1, 2)
    full.pos = 2
    with pytest.raises(ValueError, match="the KV cache holds 2 positions"):
        fast(torch.tensor([[1]]), cache=full)
    with pytest.raises(ValueError, match="needs a tinylm.TinyLM"):
        CompiledDecoder(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="w8a8 model cannot be compiled"):
        CompiledDecoder(quantize(random_model(tiny(dim=64, ffn_dim=128)), "w8a8"))


@pytest.mark.slow   # torch.compile of one block takes seconds of CPU (gcc included)
def test_compiled_generate_gives_the_eager_tokens_from_one_graph():
    torch._dynamo.reset()                                 # count this test's graphs only
    model = random_model(tiny(n_layers=3, max_seq_len=48), seed=2)
    idx = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    want = generate(model, idx, 12, temperature=0.0)
    before = counters["stats"]["unique_graphs"]
    assert torch.equal(generate(model, idx, 12, temperature=0.0, compiled=True), want)
    shorter = idx[:, 2:]                                  # another prompt length: the same cache bucket
    assert torch.equal(generate(model, shorter, 12, temperature=0.0, compiled=True),
                       generate(model, shorter, 12, temperature=0.0))
    # 3 layers x 11 steps x 2 prompts ran one graph: no layer and no position compiled again
    assert counters["stats"]["unique_graphs"] - before == 1
    with pytest.raises(ValueError, match="compiled"):
        generate(model, idx, 2, compiled=1)

