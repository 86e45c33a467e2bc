# int8 activations against int8 weights (tinylm.w8a8) on small random tensors and models.
# Run: .venv/bin/python -m pytest tests/test_w8a8.py
"""The fast integer routes (fbgemm for one row, torch._int_mm for several) equal the readable reference
(dequantize both sides, fp32 matmul) to fp32 rounding; the activation rule's bound; the model format."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import random_model, tiny
from tinylm.generate import generate
from tinylm.kernels import HAVE_FBGEMM
from tinylm.quantize import compare, quantize, quantize_int8, weight_format
from tinylm.w8a8 import W8A8Linear, fbgemm_exact, integer_sums, quantize_activations, reference

# the same integers on both sides, so only the fp32 scaling and the reference's fp32 sums differ
RTOL = 1e-5


def activations() -> torch.Tensor:
    """Rows that exercise each branch of the rule: mixed signs, all positive, all negative, tiny (a scale below
    fbgemm's floor), all zero, one outlier."""
    torch.manual_seed(0)
    x = torch.randn(7, 64)
    x[1] = x[1].abs() + 0.1
    x[2] = -x[2].abs()
    x[3] *= 1e-7
    x[4] = 0
    x[5, 7] = 40.0
    return x


def layer() -> W8A8Linear:
    torch.manual_seed(1)
    return W8A8Linear(*quantize_int8(torch.randn(48, 64) * 0.1))


def test_activation_rule_is_8_bit_and_within_half_a_step():
    x = activations()
    a, s, z = quantize_activations(x)
    assert a.dtype == torch.uint8 and s.shape == (7, 1) and z.shape == (7, 1)
    assert int(a.max()) == 255 and torch.equal(z, z.round()) and bool(((z >= 0) & (z <= 255)).all())
    err = ((a.float() - z) * s - x).abs()
    assert bool((err <= s / 2 * (1 + 1e-5) + 1e-12).all())
    assert torch.equal(a[4].float(), z[4].expand(64))                      # zero rows stay zero


def test_several_rows_equal_the_reference():
    lin, x = layer(), activations()
    torch.testing.assert_close(lin(x), reference(x, lin.weight, lin.scale), rtol=RTOL, atol=1e-6)


def test_one_row_equals_the_reference_row_by_row():
    lin, x = layer(), activations()
    assert (lin._packed is not None) == fbgemm_exact() and fbgemm_exact() <= HAVE_FBGEMM
    want = reference(x, lin.weight, lin.scale)
    for t in range(x.shape[0]):   # fbgemm (where exact) quantizes the row itself: the same integers as here
        torch.testing.assert_close(lin(x[t : t + 1]), want[t : t + 1], rtol=RTOL, atol=1e-6)


def test_model_format_close_to_fp32_and_generates():
    cfg = tiny(dim=64, ffn_dim=128, vocab_size=96, max_seq_len=48)
    ref = random_model(cfg, std=0.1)
    q = quantize(copy.deepcopy(ref), "w8a8")
    assert weight_format(q) == "w8a8" and isinstance(q.lm_head, W8A8Linear)
    idx = torch.randint(0, 96, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = ref(idx)[0], q(idx)[0]
    # 8-bit weights (half a step of 1/127 of a row's largest) and 8-bit activations (of 1/255 of a token's range)
    assert 0 < float((got - want).abs().max() / want.abs().max()) < 0.05
    p = idx[:1, :6]
    assert torch.equal(generate(q, p, 10, temperature=0.0), generate(q, p, 10, temperature=0.0, use_cache=False))
    assert 0.8 < compare(ref, q, idx[:1], window=16)["top1"] <= 1.0


def test_copies_keep_working():
    lin = layer()
    x = activations()[:1]
    torch.testing.assert_close(copy.deepcopy(lin)(x), lin(x), rtol=0, atol=0)


def test_integer_sums_are_exact_at_the_worst_case():
    for a_val, z_val, q_val in ((255, 0, 127), (0, 255, 127), (255, 0, -127), (100, 37, 127)):
        a = torch.full((3, 1536), a_val, dtype=torch.uint8)          # 1536: several fp32-exact chunks
        z = torch.full((3, 1), float(z_val))
        q = torch.full((5, 1536), q_val, dtype=torch.int8)
        assert torch.equal(integer_sums(a, z, q).long(), (a.long() - z_val) @ q.long().T)
    torch.manual_seed(0)
    a, q = torch.randint(0, 256, (4, 1100), dtype=torch.uint8), torch.randint(-127, 128, (6, 1100), dtype=torch.int8)
    z = torch.randint(0, 256, (4, 1)).float()
    assert torch.equal(integer_sums(a, z, q).long(), (a.long() - z.long()) @ q.long().T)


ROUTE = """
import torch
from tinylm.kernels import int_mm_exact
from tinylm.quantize import quantize_int8
from tinylm.w8a8 import W8A8Linear, reference
torch.manual_seed(0)
lin = W8A8Linear(*quantize_int8(torch.randn(48, 576) * 0.1))
x = torch.randn(9, 576) * 3
x[0] = x[0].abs()                                 # large all-positive activations: where saturation shows
want = reference(x, lin.weight, lin.scale)
err = float((lin(x) - want).abs().max() / want.abs().max())
print(int_mm_exact(), err)
"""


def test_the_int_mm_route_unpinned_equals_the_reference():
    """The tests pin oneDNN to AVX2 (tools/numerics.py), where _int_mm saturated on the Intel Xeon (the fp32 route)
    but not on an AVX2-only AMD EPYC (int_mm_exact() True there, pinned): the route is probed, not assumed. Here,
    unpinned, whichever route the probe picks gives the reference's numbers."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    run = subprocess.run([sys.executable, "-c", ROUTE], cwd=Path(__file__).resolve().parents[1], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    exact, err = run.stdout.split()
    assert float(err) < RTOL, (exact, err)      # whichever route int_mm_exact() chose unpinned


@pytest.mark.parametrize("rows", [1, 3])        # fbgemm's one-row route and the integer route
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_or_inf_activations_are_a_clear_error(rows, bad):
    x = torch.ones(rows, 64)
    x[-1, 0] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        layer()(x)
