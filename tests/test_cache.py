# Run: .venv/bin/python -m pytest -q tests/test_cache.py
"""The KV cache: cached logits equal a full recompute at every step, and its tensors have the predicted size."""

import pytest
import torch

from helpers import random_model, tiny
from tinylm import Config, KVCache, TinyLM, kv_cache_bytes

TOL = 1e-5  # fp32, relative to the logits' scale (a few units): two summation orders differ by ~10 ulps


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a - b).abs().max() <= TOL * b.abs().max().clamp(min=1))




CONFIGS = {
    "grouped": tiny(n_heads=4, n_kv_heads=2),
    "multi-query": tiny(n_heads=4, n_kv_heads=1),
    "qk-norm": tiny(n_heads=4, n_kv_heads=2, qk_norm=True),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cached_logits_equal_full_recompute_at_every_step(name):
    model = random_model(CONFIGS[name])
    torch.manual_seed(1)
    seq = torch.randint(0, 64, (2, 14))
    prompt = 6
    with torch.no_grad():
        cache = model.new_cache(batch_size=2, max_len=seq.shape[1])
        prefill, _ = model(seq[:, :prompt], cache=cache)                 # (2, 6, V)
        full, _ = model(seq[:, :prompt])
        assert close(prefill, full)
        for t in range(prompt, seq.shape[1]):
            step, _ = model(seq[:, t : t + 1], cache=cache)              # (2, 1, V)
            assert cache.pos == t + 1
            full, _ = model(seq[:, : t + 1])                             # (2, t + 1, V)
            assert close(step[:, 0], full[:, -1]), f"step at position {t}"
            # the tolerance is meaningful: the same token without its context scores very differently
            alone, _ = model(seq[:, t : t + 1])
            assert (alone[:, 0] - full[:, -1]).abs().max() > 1e-2


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("explicit", [False, True])
def test_chunk_after_cached_prefix(name, explicit):
    """Prefill 5, then a chunk of 3 (its causal mask is offset by the cached prefix), then single tokens."""
    model = random_model(CONFIGS[name]).set_explicit_attention(explicit)
    torch.manual_seed(2)
    seq = torch.randint(0, 64, (3, 12))
    with torch.no_grad():
        full, _ = model(seq)                                             # (3, 12, V)
        cache = model.new_cache(batch_size=3, max_len=12)
        pieces = [(0, 5), (5, 8)] + [(t, t + 1) for t in range(8, 12)]
        for start, end in pieces:
            logits, _ = model(seq[:, start:end], cache=cache)            # (3, end - start, V)
            assert cache.pos == end
            assert close(logits, full[:, start:end]), f"positions {start}..{end - 1}"


def test_reset_reuses_the_cache():
    model = random_model(CONFIGS["grouped"])
    seq = torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        cache = model.new_cache(1, 8)
        first, _ = model(seq, cache=cache)
        cache.reset()
        assert cache.pos == 0
        again, _ = model(seq, cache=cache)
    assert torch.equal(first, again)


def _tensor_bytes(cache: KVCache) -> int:
    return sum(b.numel() * b.element_size() for b in cache.buffers())


@pytest.mark.parametrize("dtype, size", [(torch.float32, 4), (torch.bfloat16, 2)])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_cache_tensors_have_the_predicted_size(name, dtype, size):
    cfg = CONFIGS[name]
    model = TinyLM(cfg).to(dtype)
    cache = model.new_cache(batch_size=3, max_len=20)
    assert cache.k.dtype == cache.v.dtype == dtype
    assert cache.k.shape == (cfg.n_layers, 3, cfg.n_kv_heads, 20, cfg.head_dim)
    expected = 2 * cfg.n_layers * 3 * cfg.n_kv_heads * 20 * cfg.head_dim * size  # K and V, every layer
    assert _tensor_bytes(cache) == expected == kv_cache_bytes(cfg, 20, 3, bytes_per=size)


@pytest.mark.parametrize("n_kv_heads, megabytes", [(8, 50.3), (4, 25.2), (1, 6.3)])
def test_chapter_4_cache_sizes_are_real_tensor_sizes(n_kv_heads, megabytes):
    """8 layers, 2,048 tokens, head_dim 96, bf16: multi-head 50.3 MB, GQA 25.2 MB, multi-query 6.3 MB."""
    cfg = Config(max_seq_len=2048, n_kv_heads=n_kv_heads)
    assert cfg.head_dim == 96 and cfg.n_layers == 8
    cache = KVCache(cfg, batch_size=1, max_len=2048, dtype=torch.bfloat16)
    assert _tensor_bytes(cache) == kv_cache_bytes(cfg, 2048, 1, bytes_per=2)
    assert round(_tensor_bytes(cache) / 1e6, 1) == megabytes


def test_cache_stays_empty_until_written():
    cfg = CONFIGS["grouped"]
    model = random_model(cfg)
    with torch.no_grad():
        cache = model.new_cache(1, 10)
        model(torch.randint(0, 64, (1, 4)), cache=cache)
    assert cache.k[:, :, :, :4].abs().sum() > 0 and cache.v[:, :, :, :4].abs().sum() > 0
    assert cache.k[:, :, :, 4:].abs().sum() == 0 and cache.v[:, :, :, 4:].abs().sum() == 0


def test_cache_overflow_raises():
    model = random_model(CONFIGS["grouped"])
    cache = model.new_cache(1, 6)
    with torch.no_grad():
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="max_len"):
            model(torch.zeros(1, 2, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="max_len"):
        model.new_cache(1, 33)  # longer than max_seq_len 32
