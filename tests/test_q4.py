# 4-bit weights (tinylm.q4, tinylm.gguf_q4) on small random models and GGUF files written here; SmolLM2 marked slow.
# Run: .venv/bin/python -m pytest tests/test_q4.py   (add -m slow for SmolLM2-135M)
"""The file's Q4 codes bit-identical in the model, the kernel's weights within the stated bf16 rounding of the
file's, the kernel equal to its fallback, logits close to the dequantized fp32 model, and clear errors."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import quantize as gguf_quantize

from gguf_files import write_gguf
from helpers import random_model, tiny
from tinylm.generate import generate
from tinylm.gguf_q4 import load_gguf_q4
from tinylm.pretrained import GGUFTensor, dequantize, load_gguf, permute_qk, read_gguf, tinylm_name
from tinylm.q4 import Q4Linear, pack_q4, quantize_q4_1, scale_zero, unpack_q4
from tinylm.quantize import Int8Linear, quantize, weight_format

BF16_U = 2.0**-8     # bf16 keeps 8 significant bits: rounding to nearest moves a value by at most 2^-8 of itself
Q4_0, Q4_1 = GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1


def rows_of_many_sizes(n: int = 32, k: int = 96) -> torch.Tensor:
    torch.manual_seed(0)
    w = torch.randn(n, k) * torch.logspace(-3, 1, n)[:, None]
    w[3, :32] = 0.25                     # a constant block: d = 0
    return w


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def test_quantize_q4_1_gives_the_gguf_package_bytes():
    w = rows_of_many_sizes()
    assert np.array_equal(pack_q4(*quantize_q4_1(w)), gguf_quantize(w.numpy(), Q4_1))


@pytest.mark.parametrize("qtype", [Q4_0, Q4_1])
def test_unpack_reads_the_blocks_as_gguf_dequantizes_them(qtype):
    w = rows_of_many_sizes()
    raw = gguf_quantize(w.numpy(), qtype)
    codes, d, m = unpack_q4(raw, int(qtype), tuple(w.shape))
    assert codes.dtype == torch.uint8 and int(codes.max()) <= 15 and d.dtype == torch.float16
    assert np.array_equal(pack_q4(codes, d, m), raw)                              # nothing lost
    want = dequantize(GGUFTensor(tuple(w.shape), int(qtype), raw))               # gguf's own dequantizer, fp32
    scale, zero = scale_zero(d, m)                                                # the kernel's form, in fp32
    got = (codes.float() - 8) * scale.repeat_interleave(32, 1) + zero.repeat_interleave(32, 1)
    torch.testing.assert_close(got, torch.from_numpy(want), rtol=1e-6, atol=1e-6 * float(w.abs().max()))


@pytest.mark.parametrize("qtype", [Q4_0, Q4_1])
def test_kernel_weights_within_the_bf16_rounding_of_scale_and_zero(qtype):
    w = rows_of_many_sizes()
    raw = gguf_quantize(w.numpy(), qtype)
    codes, d, m = unpack_q4(raw, int(qtype), tuple(w.shape))
    layer = Q4Linear.from_blocks(codes, d, m)
    assert layer.kernel
    assert torch.equal(layer.codes(), codes)                                      # the codes, exactly
    scale, zero = scale_zero(d, m)
    assert torch.equal(layer.scale_zero[..., 0].T, scale.bfloat16())              # only these two are rounded
    assert torch.equal(layer.scale_zero[..., 1].T, zero.bfloat16())
    file_w = (codes.float() - 8) * scale.repeat_interleave(32, 1) + zero.repeat_interleave(32, 1)
    bound = BF16_U * ((codes.float() - 8).abs() * scale.abs().repeat_interleave(32, 1)
                     + zero.abs().repeat_interleave(32, 1))
    err = (layer.dequantize() - file_w).abs()
    assert bool((err <= bound * (1 + 1e-6) + 1e-12).all()) and float(err.max()) > 0
    # and the kernel multiplies by exactly those weights: the identity's product is each one rounded to bf16
    through_kernel = layer(torch.eye(96)).T                                       # (N, K)
    assert torch.equal(through_kernel, layer.dequantize().bfloat16().float())


def test_kernel_equals_its_fallback():
    w = rows_of_many_sizes()
    fast = Q4Linear.from_blocks(*quantize_q4_1(w))
    slow = Q4Linear.from_blocks(*quantize_q4_1(w), kernel=False)
    assert fast.kernel and not slow.kernel
    x = torch.randn(3, 5, 96)
    y_fast, y_slow = fast(x), slow(x)
    assert y_fast.shape == (3, 5, 32) and y_fast.dtype == torch.float32
    torch.testing.assert_close(y_fast, y_slow, rtol=2**-7, atol=1e-3 * float(y_slow.abs().max()))


def test_shapes_outside_the_kernel_take_the_fallback_or_a_clear_error():
    torch.manual_seed(0)
    w = torch.randn(24, 64)                              # 24 rows: the kernel wants a multiple of 16
    layer = Q4Linear.from_blocks(*quantize_q4_1(w))
    assert not layer.kernel
    x = torch.randn(2, 64)
    torch.testing.assert_close(layer(x), (x.bfloat16().float() @ layer.dequantize().T).bfloat16().float())
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_q4_1(torch.randn(16, 48))
    with pytest.raises(ValueError, match="in_features must be a multiple of 32"):
        quantize(random_model(tiny(dim=48, ffn_dim=64)), "q4")


def small_gguf(tmp_path, **changes):
    cfg = tiny(dim=64, ffn_dim=128, vocab_size=96, max_seq_len=48, **changes)
    model = random_model(cfg, std=0.1)
    return model, write_gguf(tmp_path / "q4.gguf", model, quant=True)


def test_gguf_codes_in_the_model_are_the_files_bytes(tmp_path):
    _, path = small_gguf(tmp_path)
    model, _ = load_gguf_q4(path)
    gguf = read_gguf(path)
    checked = 0
    for gname, t in gguf.tensors.items():
        if t.type != int(Q4_1):
            continue
        layer = model.get_submodule(tinylm_name(gname).removesuffix(".weight"))
        codes = layer.codes()
        if gname.endswith(("attn_q.weight", "attn_k.weight")):            # back to llama.cpp's row order
            codes = permute_qk(codes, model.cfg.n_heads if "attn_q" in gname else model.cfg.n_kv_heads)
        _, d, m = unpack_q4(t.raw, t.type, t.shape)
        assert np.array_equal(pack_q4(codes, d, m), t.raw), gname         # every code bit for bit
        checked += 1
    assert checked == 7 * model.cfg.n_layers
    assert weight_format(model) == "q4" and isinstance(model.lm_head, Int8Linear)   # the Q8_0 tied head
    assert all(p.device.type == "cpu" for p in model.parameters())        # no meta placeholder left


def test_gguf_q4_logits_close_to_the_dequantized_fp32_model(tmp_path):
    _, path = small_gguf(tmp_path)
    ref, _ = load_gguf(path, progress=False)
    q4, _ = load_gguf_q4(path)
    idx = torch.randint(0, 96, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = ref(idx)[0], q4(idx)[0]
    # the same codes: only bf16 activations, scales and zeros, and the head's int8 copy of the Q8_0 embedding
    assert 0 < rel_err(got, want) < 0.03
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.9
    slow, _ = load_gguf_q4(path, kernel=False)
    with torch.no_grad():
        assert rel_err(slow(idx)[0], got) < 0.01


def test_quantize_q4_on_any_fp32_model_and_generate():
    cfg = tiny(dim=64, ffn_dim=128, vocab_size=96, max_seq_len=48)
    ref = random_model(cfg, std=0.1)
    q4 = quantize(copy.deepcopy(ref), "q4")
    assert weight_format(q4) == "q4" and isinstance(q4.lm_head, Q4Linear)
    # its readable reference: the fp32 model of the very weights the layers multiply by
    deq = copy.deepcopy(ref)
    deq.lm_head = torch.nn.Linear(64, 96, bias=False)           # untie: the head has its own 4-bit copy
    for name, layer in q4.named_modules():
        if isinstance(layer, Q4Linear):
            deq.get_submodule(name).weight.data = layer.dequantize()
    idx = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = q4(idx)[0], deq(idx)[0]
    assert 0 < rel_err(got, want) < 0.03                          # bf16 activations and outputs only
    assert torch.equal(generate(q4, idx[:1, :6], 10, temperature=0.0),
                       generate(q4, idx[:1, :6], 10, temperature=0.0, use_cache=False))


# ---------------------------------------------------------------------------------------------
# SmolLM2-135M-Instruct: the real file's blocks (slow)
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_q4_is_the_files_codes_and_close_to_fp32():
    from pydoc_data.topics import topics

    from tinylm.pretrained import smollm2_gguf_path
    from tinylm.quantize import compare

    path = smollm2_gguf_path()
    q4, tok = load_gguf_q4(path)
    t = read_gguf(path).tensors["blk.0.attn_q.weight"]                    # a permuted one
    _, d, m = unpack_q4(t.raw, t.type, t.shape)
    codes = permute_qk(q4.layers[0].self_attn.q_proj.codes(), q4.cfg.n_heads)
    assert np.array_equal(pack_q4(codes, d, m), t.raw)
    ref, _ = load_gguf(path, progress=False)
    ids = torch.tensor([tok.encode("The capital of France is Paris. The capital of Italy is Rome. " * 3)])
    with torch.no_grad():
        want, got = ref(ids)[0], q4(ids)[0]
    assert rel_err(got, want) < 0.06 and (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.95
    # the goal: perplexity within 0.5% of the dequantized model (measured +0.17%, top-1 97.5%)
    quality = compare(ref, q4, torch.tensor([tok.encode("\n".join(topics.values()))[:1024]]))
    assert quality["ppl_ratio"] <= 1.005 and quality["top1"] >= 0.95, quality
