# The kernel rules of tinylm.kernels: a layer calls torch's kernel only inside them, and is right outside them too.
# Run: .venv/bin/python -m pytest tests/test_kernels.py
"""Width 12 (the segfault of issue 28): int8 in a subprocess, so that a crash fails this test instead of killing
the run; the rules' edges; the int4 kernel's shape rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tinylm.kernels import HAVE_INT4PACK, HAVE_INT8PACK, int4pack_fits, int8pack_fits
from tinylm.quantize import Int8Linear

ROOT = Path(__file__).resolve().parents[1]

WIDTH_12 = """
import copy, torch
from tinylm import Config, TinyLM
from tinylm.generate import generate
from tinylm.quantize import quantize
torch.manual_seed(0)
cfg = Config(vocab_size=40, dim=12, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=24, max_seq_len=32)
ref = TinyLM(cfg).eval()
fast, slow = quantize(copy.deepcopy(ref), "int8"), quantize(copy.deepcopy(ref), "int8", kernel=False)
idx = torch.randint(0, 40, (3, 9))
with torch.no_grad():
    err = float((fast(idx)[0] - slow(idx)[0]).abs().max() / slow(idx)[0].abs().max())
    to_ref = float((fast(idx)[0] - ref(idx)[0]).abs().max() / ref(idx)[0].abs().max())
out = generate(fast, idx[:1, :4], 6, temperature=0.0)
kernels = sorted({m.kernel for m in fast.modules() if hasattr(m, "kernel")})
print(err, to_ref, out.shape[1], kernels)
"""


def test_width_12_int8_does_not_crash_and_is_right():
    run = subprocess.run([sys.executable, "-c", WIDTH_12], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}"
    err, to_ref, length, kernels = run.stdout.split(maxsplit=3)
    assert float(err) == 0.0 and float(to_ref) < 0.05 and int(length) == 10
    # in_features 12 (attention, gate/up) takes the fallback; 24 (down_proj) too: neither is a multiple of 16
    assert kernels.strip() == "[False]"


def test_int8_rule_edges():
    assert not int8pack_fits(12) and not int8pack_fits(24) and not int8pack_fits(8)
    assert int8pack_fits(48) == HAVE_INT8PACK and int8pack_fits(576) == HAVE_INT8PACK
    assert not Int8Linear(torch.randn(8, 36)).kernel


@pytest.mark.skipif(not HAVE_INT8PACK, reason="this torch has no _weight_int8pack_mm")
@pytest.mark.parametrize("K", [16, 48, 80])
@pytest.mark.parametrize("M", [1, 5])
def test_int8_kernel_inside_the_rule_equals_the_fallback(K, M):
    torch.manual_seed(0)
    w, x = torch.randn(24, K), torch.randn(M, K)
    fast, slow = Int8Linear(w), Int8Linear(w, kernel=False)
    assert fast.kernel
    torch.testing.assert_close(fast(x), slow(x), rtol=2**-7, atol=1e-3)


def test_int4_rule():
    assert int4pack_fits(32, 64) == HAVE_INT4PACK and int4pack_fits(192, 576, 32) == HAVE_INT4PACK
    assert not int4pack_fits(24, 64)              # out_features: a multiple of 16
    assert not int4pack_fits(32, 48)              # in_features: a multiple of the group
    assert not int4pack_fits(32, 64, group=16)    # groups of 32, 64, 128 or 256
