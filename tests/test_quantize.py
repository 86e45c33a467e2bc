# Weight formats (tinylm.quantize) on tiny random models; the real model's figures are marked slow.
# Run: .venv/bin/python -m pytest tests/test_quantize.py   (add -m slow for SmolLM2-135M)
"""bf16 and int8 against fp32: logits within a stated tolerance, generate with and without the cache, the
int8 kernel equal to its dequantize fallback, the quantizer's round-trip bound, and errors on bad input."""

from __future__ import annotations

import copy

import pytest
import torch

from helpers import random_model, tiny
from tinylm.generate import generate
from tinylm.quantize import (KERNEL, Int8Linear, compare, compare_all, dequantize_int8, quantize, quantize_int8,
                             weight_bytes_per_token, weight_format)

# Relative error of the logits, max |format - fp32| / max |fp32|, on the std-0.3 tiny model: bf16 keeps 8
# bits of mantissa (2^-9 relative per rounding, compounded over 2 layers); int8 weights are within half a
# step of 1/127 of a row's largest weight, and its activations are rounded to bf16 on the way in.
TOLERANCE = {"bf16": 0.03, "int8": 0.05}


def model_pair(fmt: str, **kw):
    cfg = tiny(dim=64, ffn_dim=128, vocab_size=96, max_seq_len=48)
    ref = random_model(cfg, std=0.1)
    return ref, quantize(copy.deepcopy(ref), fmt, **kw)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
def test_logits_close_to_fp32(fmt):
    ref, q = model_pair(fmt)
    idx = torch.randint(0, 96, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = ref(idx)[0], q(idx)[0]
    assert weight_format(q) == fmt and weight_format(ref) == "fp32"
    err = rel_err(got, want)
    assert 0 < err < TOLERANCE[fmt], err          # close, and not secretly still fp32
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.9


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
def test_generate_cached_equals_uncached(fmt):
    _, q = model_pair(fmt)
    idx = torch.randint(0, 96, (1, 6), generator=torch.Generator().manual_seed(1))
    cached = generate(q, idx, 12, temperature=0.0)
    uncached = generate(q, idx, 12, temperature=0.0, use_cache=False)
    assert cached.shape == (1, 18)
    # bf16 attention over a cache vs. over the whole sequence may round differently: compare most tokens
    assert (cached == uncached).float().mean() >= (1.0 if fmt == "int8" else 0.8)
    cache = q.new_cache(1, 8)
    assert cache.k.dtype == (torch.bfloat16 if fmt == "bf16" else torch.float32)


def test_generate_batched_with_left_padding_int8():
    from tinylm.generate import left_pad

    _, q = model_pair("int8")
    idx, mask = left_pad([[5, 6, 7, 8], [9, 10]], pad_id=0)
    out = generate(q, idx, 5, temperature=0.0, attention_mask=mask)
    alone = generate(q, torch.tensor([[9, 10]]), 5, temperature=0.0)
    assert torch.equal(out[1, -5:], alone[0, -5:])


@pytest.mark.skipif(not KERNEL, reason="this torch has no _weight_int8pack_mm")   # torch >= 2.4 has it
def test_int8_kernel_equals_dequantize_fallback():
    torch.manual_seed(0)
    w = torch.randn(48, 64)
    fast, slow = Int8Linear(w, kernel=True), Int8Linear(w, kernel=False)
    assert fast.kernel and not slow.kernel
    x = torch.randn(3, 5, 64)
    y_fast, y_slow = fast(x), slow(x)
    assert y_fast.shape == (3, 5, 48) and y_fast.dtype == torch.float32
    # same bf16 inputs, same int8 weights, fp32 sums in another order, each rounded to bf16: one bf16 step
    torch.testing.assert_close(y_fast, y_slow, rtol=2**-7, atol=1e-3)
    # and both are the dequantized matrix's product, up to the bf16 rounding of x and y
    torch.testing.assert_close(y_slow, x @ dequantize_int8(*quantize_int8(w)).T, rtol=0.02, atol=0.05)


def test_whole_model_kernel_equals_fallback():
    ref, fast = model_pair("int8")
    slow = quantize(copy.deepcopy(ref), "int8", kernel=False)
    idx = torch.randint(0, 96, (1, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert rel_err(fast(idx)[0], slow(idx)[0]) < 0.01


def test_quantizer_round_trip_bound():
    torch.manual_seed(0)
    w = torch.randn(32, 100) * torch.logspace(-3, 1, 32)[:, None]   # rows of very different sizes
    w[3] = 0.0                                                        # a row of zeros
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8 and scale.shape == (32,) and q.shape == w.shape
    assert int(q.abs().max()) == 127 and int(q[3].abs().max()) == 0 and scale[3] == 0
    assert torch.equal(q.abs().amax(1)[scale > 0], torch.full((31,), 127, dtype=torch.int8))
    err = (dequantize_int8(q, scale) - w).abs()
    assert bool((err <= scale[:, None] / 2 * (1 + 1e-6)).all())
    assert float(err.max()) > 0                                       # it did round something


def test_int8_halves_and_quarters_the_bytes():
    cfg = tiny(dim=64, ffn_dim=128, vocab_size=96, max_seq_len=48)
    fp32 = random_model(cfg)
    b32 = weight_bytes_per_token(fp32)
    b16 = weight_bytes_per_token(quantize(copy.deepcopy(fp32), "bf16"))
    b8 = weight_bytes_per_token(quantize(copy.deepcopy(fp32), "int8"))
    assert b16 * 2 == b32
    n_rows = sum(m.out_features for m in quantize(copy.deepcopy(fp32), "int8").modules()
                 if isinstance(m, Int8Linear))
    norms = 4 * cfg.dim * (2 * cfg.n_layers + 1)
    row = 4 * cfg.dim                      # fp32 reads the tied embedding whole (it is the head);
    assert cfg.tie_embeddings              # int8 reads the head's int8 copy and one embedding row
    assert b8 == (b32 - norms) // 4 + 4 * n_rows + norms + row     # int8 weights + fp32 scales


def test_compare_identity_and_difference():
    ref, q = model_pair("int8")
    ids = torch.randint(0, 96, (1, 40), generator=torch.Generator().manual_seed(3))
    same = compare(ref, ref, ids, window=16)
    assert same["top1"] == 1.0 and same["ppl_ratio"] == 1.0 and same["tokens"] == 39
    diff = compare(ref, q, ids, window=16)
    assert diff["ppl_ratio"] != 1.0 and 0.8 < diff["top1"] <= 1.0


def test_compare_all_gives_each_models_compare_and_w8a8_from_int8_is_w8a8_from_fp32():
    ref, int8 = model_pair("int8")
    w8a8 = quantize(copy.deepcopy(ref), "w8a8")
    reused = quantize(copy.deepcopy(int8), "w8a8")              # int8's own codes and scales, not quantized again
    assert [type(m) for m in reused.modules()] == [type(m) for m in w8a8.modules()]
    assert all(torch.equal(a, b) for a, b in zip(w8a8.state_dict().values(), reused.state_dict().values()))
    ids = torch.randint(0, 96, (1, 40), generator=torch.Generator().manual_seed(3))
    both = compare_all(ref, {"int8": int8, "w8a8": reused}, ids, window=16)
    assert both == {"int8": compare(ref, int8, ids, window=16), "w8a8": compare(ref, w8a8, ids, window=16)}
    assert both["int8"] != both["w8a8"]


@pytest.mark.parametrize("call, match", [
    (lambda m: quantize(m, "int4"), "fmt"),
    (lambda m: quantize(m, "fp32"), "fmt"),
    (lambda m: quantize(quantize(m, "int8"), "int8"), "already int8"),
    (lambda m: quantize(quantize(m, "int8"), "q4"), "already int8"),
    (lambda m: quantize(quantize(m, "bf16"), "int8"), "already bf16"),
    (lambda m: quantize(m.state_dict(), "int8"), "model"),
    (lambda m: quantize(m, "int8", head="yes"), "head"),
    (lambda m: quantize_int8(torch.ones(4)), "w must"),
    (lambda m: quantize_int8(torch.ones(2, 2, dtype=torch.int8)), "w must"),
    (lambda m: compare(m, m, torch.tensor([1, 2, 3])), "ids"),
    (lambda m: compare(m, m, torch.tensor([[1, 2, 3]]), window=1), "window"),
])
def test_bad_input_is_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(random_model(tiny()))


def test_head_option_keeps_an_fp32_tied_head():
    cfg = tiny(dim=64, ffn_dim=128, vocab_size=96, max_seq_len=48, tie_embeddings=True)
    m = quantize(random_model(cfg), "int8", head=False)
    assert m.lm_head.weight is m.embed_tokens.weight and m.lm_head.weight.dtype == torch.float32
    m = quantize(random_model(cfg), "int8")
    assert isinstance(m.lm_head, Int8Linear) and m.embed_tokens.weight.dtype == torch.float32


# ---------------------------------------------------------------------------------------------
# SmolLM2-135M-Instruct: each format against fp32 on English prose (slow: the real model)
# ---------------------------------------------------------------------------------------------
# Measured (Python 3.11's pydoc topics, 1,024 tokens, torch 2.13 on AVX2): see docs/benchmarks.md
# (weight formats); thresholds leave room for another CPU's rounding.
# w8a8, Intel AVX-512 machine, torch 2.13: +1.44% unpinned, +1.92% under tools/numerics.py's pins in one
# process, +2.47% in the full test run (per-token 8-bit activations: which values round up changes with the
# last bit of the fp32 activations, and 30 layers carry it on); so the bound is 3%, not the 2%.
SMOLLM2_LIMITS = {"bf16": (1.005, 0.95), "int8": (1.02, 0.90), "w8a8": (1.03, 0.88)}   # ppl ratio <=, top-1 >=


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["bf16", "int8", "w8a8"])
def test_smollm2_quality(fmt):
    from pydoc_data.topics import topics

    from tinylm.pretrained import load_gguf, smollm2_gguf_path

    ref, tok = load_gguf(smollm2_gguf_path(), progress=False)
    ids = torch.tensor([tok.encode("\n".join(topics.values()))[:1024]])
    q = quantize(copy.deepcopy(ref), fmt)
    got = compare(ref, q, ids)
    max_ratio, min_top1 = SMOLLM2_LIMITS[fmt]
    assert got["ppl_ratio"] <= max_ratio and got["top1"] >= min_top1, got
