"""int8 activations against int8 weights, summed in exact integers: `W8A8Linear` and its readable reference.

Weight-only int8 (`tinylm.quantize.Int8Linear`) still multiplies in floating point. W8A8 quantizes the
activations too, one token (row) at a time, so the products and sums are integers, as llama.cpp does with its
8-bit activation blocks:

    weights      q[n, k] int8 in [-127, 127], s_w[n] = max_k |w[n, k]| / 127    (per output channel, as Int8Linear)
    activations  a[t, k] = round(x[t, k] / s_x[t]) + z[t]  in [0, 127]          (per token, asymmetric, 7 bits)
    output       y[t, n] = s_x[t] * s_w[n] * sum_k (a[t, k] - z[t]) q[n, k]      (int32 sum, exact)

The activation rule is fbgemm's dynamic quantization (`quantized::linear_dynamic` with reduce_range): the range
[min(x, 0), max(x, 0)] of the row onto 0..127, s_x = range / 127, z the rounded position of 0. Seven bits, not
eight, because AVX2's `vpmaddubsw` adds two u8 x s8 products in int16, which 7-bit activations never overflow.
Which route does the integer sums, chosen by measurement (1 thread, torch 2.13, AVX-512 with VNNI; see the
README): one token (decoding) goes to fbgemm, which quantizes and multiplies in one call (~45 us for
1536 x 576, against ~80 us for Int8Linear's `_weight_int8pack_mm` and ~110 us for `torch._int_mm` alone);
several tokens go to `torch._int_mm` after the per-token quantization above (fbgemm would quantize all the
rows with one scale), where its sums are exact: oneDNN's AVX2 kernel behind it saturates (`tinylm.kernels`), and
there the sums are fp32 matmuls of the integers, exact by construction (`integer_sums`). Every route computes the
same integers, so each equals `reference` up to fp32 rounding, and the output does not depend on the route.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn

from .kernels import HAVE_FBGEMM, int_mm_exact

A_MAX = 127                 # activations use 0..127 (7 bits: fbgemm's reduce_range)
FP32_EXACT_K = 1024         # 127 * 127 * 1024 < 2^24: fp32 sums of up to 1024 such products are exact integers
SMALL_SCALE = 6.1e-5        # fbgemm raises smaller activation scales to this (the smallest normal fp16)


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (M, K) float -> a - z (M, K) int8 in [-127, 127], s_x (M, 1) fp32, z (M, 1): per row, fbgemm's rule.

    fbgemm's ChooseQuantizationParams (qmin 0, qmax 127): the range includes 0; a scale of 0 becomes 0.1 and one
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
    z = torch.where(-(lo / scale).abs() < A_MAX - (hi / scale).abs(), z_lo, z_hi).round().clamp(0, A_MAX)
    s = scale.float()
    a = (torch.round(x / s) + z).clamp(0, A_MAX)                         # (M, K) in [0, 127]
    return (a - z).to(torch.int8), s, z


def integer_sums(a: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """a (M, K) int8, q (N, K) int8 -> sum_k a[m, k] q[n, k] (M, N), exact, as fp32: by `torch._int_mm` where its
    sums are exact on this machine (`tinylm.kernels.int_mm_exact`), else by fp32 matmuls of the integer values
    over chunks of FP32_EXACT_K columns, where every partial sum stays below 2^24 and so is exact."""
    if int_mm_exact():
        return torch._int_mm(a, q.T).float()                                    # (M, N)
    out = torch.zeros(a.shape[0], q.shape[0], dtype=torch.int32)
    for k in range(0, a.shape[1], FP32_EXACT_K):
        out += (a[:, k : k + FP32_EXACT_K].float() @ q[:, k : k + FP32_EXACT_K].float().T).int()
    return out.float()


def reference(x: torch.Tensor, q: torch.Tensor, s_w: torch.Tensor) -> torch.Tensor:
    """The readable W8A8 product: dequantize both sides, multiply in fp32. x (M, K), q (N, K), s_w (N,) -> (M, N)."""
    a, s_x, _ = quantize_activations(x)
    return (a.float() * s_x) @ (q.float() * s_w[:, None]).T


class W8A8Linear(nn.Module):
    """A bias-free linear layer with int8 weights q (N, K), fp32 per-channel scales (N,) (from
    `tinylm.quantize.quantize_int8`), and int8 activations.

    x (..., K) -> (..., N) in x's dtype. One row: fbgemm (where torch has it); several: `integer_sums`.
    """

    def __init__(self, q: torch.Tensor, scale: torch.Tensor):
        super().__init__()
        self.register_buffer("weight", q)                  # (N, K) int8
        self.register_buffer("scale", scale)               # (N,) fp32
        self.in_features, self.out_features = q.shape[1], q.shape[0]
        self._packed = _fbgemm_pack(q, scale) if HAVE_FBGEMM else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, dtype = x.shape, x.dtype
        x2 = x.reshape(-1, shape[-1]).float().contiguous()                             # (M, K)
        if x2.shape[0] == 1 and self._packed is not None:
            y = torch.ops.quantized.linear_dynamic(x2, self._packed, True)            # (1, N)
        else:
            a, s_x, _ = quantize_activations(x2)
            y = integer_sums(a, self.weight) * (s_x * self.scale)                    # (M, N)
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
