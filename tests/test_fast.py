# Per-step overhead when generating: the compiled switch (tinylm.fast) and the greedy check of the chosen logit.
# Run: .venv/bin/python -m pytest tests/test_fast.py   (the compiled test is marked slow: compiling takes ~45 s)
"""generate(..., compiled=True) gives eager's tokens; greedy decoding still refuses NaN logits after checking
only the logit it chose."""

from __future__ import annotations

import pytest
import torch

from helpers import random_model, tiny
from tinylm.generate import generate, sample_next


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


@pytest.mark.slow   # torch.compile of even a 1-layer model takes tens of seconds of CPU
def test_compiled_generate_gives_the_eager_tokens():
    model = random_model(tiny(n_layers=1, max_seq_len=48), seed=2)
    idx = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    want = generate(model, idx, 12, temperature=0.0)
    assert torch.equal(generate(model, idx, 12, temperature=0.0, compiled=True), want)
    with pytest.raises(ValueError, match="compiled"):
        generate(model, idx, 2, compiled=1)
