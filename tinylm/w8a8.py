"""int8 activations against int8 weights, summed in exact integers: `W8A8Linear` and its readable reference.

Weight-only int8 (`tinylm.quantize.Int8Linear`) still multiplies in floating point. W8A8 quantizes the
activations too, one token (row) at a time, so the products and sums are integers (llama.cpp quantizes its
activations to 8-bit blocks of 32 for the same reason):

    weights      q[n, k] int8 in [-127, 127], s_w[n] = max_k |w[n, k]| / 127    (per output channel, as Int8Linear)
    activations  a[t, k] = round(x[t, k] / s_x[t]) + z[t]  in [0, 255]          (per token, asymmetric, 8 bits)
    output       y[t, n] = s_x[t] * s_w[n] * sum_k (a[t, k] - z[t]) q[n, k]      (an integer sum, exact)

The activation rule is fbgemm's dynamic quantization (`quantized::linear_dynamic`, reduce_range off): the row's
range [min(x, 0), max(x, 0)] onto 0..255, s_x = range / 255, z the rounded position of 0. Measured on
SmolLM2-135M (1,024 tokens, against fp32; weights int8 in every case): 7-bit activations (fbgemm's reduce_range,
safe from AVX2's int16 saturation) cost +10.8% perplexity, symmetric 8-bit +4.2%, asymmetric 8-bit +2.0%.

The integer sums take the fastest route that is exact on this machine (measured at one row, 1 thread,
torch 2.13, AVX-512 with VNNI; see the README): one token (decoding) goes to fbgemm, which quantizes and
multiplies in one call (~45 us for 1536 x 576, against ~80 us for Int8Linear's `_weight_int8pack_mm` and
~110 us for `torch._int_mm` alone), where `fbgemm_exact()`; several tokens go to `torch._int_mm` (fbgemm would
give all the rows one scale) where `tinylm.kernels.int_mm_exact()`. Both checks run a worst case once: without
VNNI both kernels add u8 x s8 products pairwise in int16 (`vpmaddubsw`), which saturates (`tinylm.kernels`).
Elsewhere the sums are fp32 matmuls of the integers in chunks short enough to be exact (`integer_sums`). Every
route computes the same integers, so each equals `reference` up to fp32 rounding: the output does not depend
on the route.
"""

from __future__ import annotations

import warnings
from functools import cache

import torch
import torch.nn as nn

from .kernels import HAVE_FBGEMM, int_mm_exact

A_MAX = 255                 # activations use 0..255 (8 bits, asymmetric)
FP32_EXACT_K = 512          # 255 * 127 * 512 < 2^24: fp32 sums of up to 512 such products are exact integers
SMALL_SCALE = 6.1e-5        # fbgemm raises smaller activation scales to this (the smallest normal fp16)


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (M, K) float -> a (M, K) uint8 in [0, 255], s_x (M, 1) fp32, z (M, 1) (whole numbers, fp32): per row,
    x ≈ (a - z) * s_x, fbgemm's rule.

    fbgemm's ChooseQuantizationParams (qmin 0, qmax 255): the range includes 0; a scale of 0 becomes 0.1 and one
    below SMALL_SCALE becomes SMALL_SCALE (the range widened to match); z from whichever end adds less error.
    """
    x = x.float()
    lo = x.amin(-1, keepdim=True).clamp(max=0).double()                  # (M, 1)
    hi = x.amax(-1, keepdim=True).clamp(min=0).double()
    scale = ((hi - lo) / A_MAX).float().double()                         # computed in double, kept as a float
    scale = torch.where((scale == 0) | torch.isinf(1 / scale.float()), 0.1, scale)
    small = scale < SMALL_SCALE
    lo, hi = (torch.where(small, t * (SMALL_SCALE / scale), t) for t in (lo, hi))
    scale = torch.where(small, SMALL_SCALE, scale)
    z_lo, z_hi = -lo / scale, A_MAX - hi / scale                         # the zero point from either end
    z = torch.where(-(lo / scale).abs() < A_MAX - (hi / scale).abs(), z_lo, z_hi).round().clamp(0, A_MAX).float()
    s = scale.float()
    a = (torch.round(x / s) + z).clamp(0, A_MAX)                         # (M, K) in [0, 255]
    return a.to(torch.uint8), s, z


def integer_sums(a: torch.Tensor, z: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """a (M, K) uint8, z (M, 1), q (N, K) int8 -> sum_k (a[m, k] - z[m]) q[n, k] (M, N), exact, as fp32.

    Where `torch._int_mm` is exact here (`tinylm.kernels.int_mm_exact`): a - z = (a - 128) + (128 - z), the
    first in int8 through `_int_mm`, the second times each row's sum of q. Else fp32 matmuls of the integers
    over chunks of FP32_EXACT_K columns, where every partial sum stays below 2^24 and so is exact.
    """
    if int_mm_exact():
        shifted = (a.to(torch.int16) - 128).to(torch.int8)                      # (M, K) in [-128, 127]
        rows = q.sum(1, dtype=torch.int32)                                       # (N,)
        return (torch._int_mm(shifted, q.T) + (128 - z).int() * rows).float()    # (M, N)
    d = a.float() - z                                                            # (M, K) in [-255, 255]
    out = torch.zeros(a.shape[0], q.shape[0], dtype=torch.int32)
    for k in range(0, a.shape[1], FP32_EXACT_K):
        out += (d[:, k : k + FP32_EXACT_K] @ q[:, k : k + FP32_EXACT_K].float().T).int()
    return out.float()


@cache
def fbgemm_exact() -> bool:
    """True if fbgemm's one-row product is exact here: the worst case for an int16 pair sum, a = 255 against
    q = +-127, decided once per process (needs VNNI's int32 sums; AVX2 saturates)."""
    if not HAVE_FBGEMM:
        return False
    q = torch.full((2, 64), 127, dtype=torch.int8)
    q[1] = -127
    y = torch.ops.quantized.linear_dynamic(torch.ones(1, 64), _fbgemm_pack(q, torch.ones(2)), False)
    return bool(torch.allclose(y, torch.tensor([[127.0 * 64, -127.0 * 64]]), rtol=1e-5))


def reference(x: torch.Tensor, q: torch.Tensor, s_w: torch.Tensor) -> torch.Tensor:
    """The readable W8A8 product: dequantize both sides, multiply in fp32. x (M, K), q (N, K), s_w (N,) -> (M, N)."""
    a, s_x, z = quantize_activations(x)
    return ((a.float() - z) * s_x) @ (q.float() * s_w[:, None]).T


class W8A8Linear(nn.Module):
    """A bias-free linear layer with int8 weights q (N, K), fp32 per-channel scales (N,) (from
    `tinylm.quantize.quantize_int8`), and int8 activations.

    x (..., K) -> (..., N) in x's dtype. One row: fbgemm where it is exact; else `integer_sums`.
    """

    def __init__(self, q: torch.Tensor, scale: torch.Tensor):
        super().__init__()
        self.register_buffer("weight", q)                  # (N, K) int8
        self.register_buffer("scale", scale)               # (N,) fp32
        self.in_features, self.out_features = q.shape[1], q.shape[0]
        self._packed = _fbgemm_pack(q, scale) if fbgemm_exact() else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, dtype = x.shape, x.dtype
        x2 = x.reshape(-1, shape[-1]).float().contiguous()                             # (M, K)
        if not bool(torch.isfinite(x2).all()):    # 8-bit codes have no NaN or inf: the range itself is undefined
            raise ValueError("W8A8Linear's input holds NaN or inf, which int8 activations cannot represent; "
                             "the layers before it overflowed or the model's weights are not finite (check "
                             "all(p.isfinite().all() for p in model.parameters()))")
        if x2.shape[0] == 1 and self._packed is not None:
            y = torch.ops.quantized.linear_dynamic(x2, self._packed, False)           # (1, N)
        else:
            a, s_x, z = quantize_activations(x2)
            y = integer_sums(a, z, self.weight) * (s_x * self.scale)                 # (M, N)
        return y.to(dtype).reshape(*shape[:-1], self.out_features)                   # (..., N)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, w8a8, "
                f"one row by {'fbgemm' if self._packed is not None else 'integer_sums'}")


def _fbgemm_pack(q: torch.Tensor, scale: torch.Tensor):
    """fbgemm's packed copy of the int8 weights (per-channel scales, zero points 0)."""
    engine = torch.backends.quantized.engine
    with warnings.catch_warnings():          # torch 2.13 marks quantized tensors deprecated; the op is still there
        warnings.simplefilter("ignore")
        try:
            torch.backends.quantized.engine = "fbgemm"
            zeros = torch.zeros_like(scale, dtype=torch.long)
            qw = torch._make_per_channel_quantized_tensor(q, scale.double(), zeros, 0)
            return torch.ops.quantized.linear_prepack(qw, None)
        finally:
            torch.backends.quantized.engine = engine
