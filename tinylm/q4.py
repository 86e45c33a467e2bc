"""4-bit weights in llama.cpp's own blocks (Q4_0, Q4_1), multiplied by torch's int4 CPU kernel: `Q4Linear`.

A GGUF file stores a Q4 matrix row by row in blocks of 32 consecutive weights of a row (ggml-common.h):

    Q4_0  18 bytes: d (fp16), 16 bytes of codes             w = d * (q - 8)
    Q4_1  20 bytes: d (fp16), m (fp16), 16 bytes of codes   w = d * q + m
    codes: byte j of a block holds weight j in its low nibble and weight j + 16 in its high one, q in [0, 15]

torch's `_weight_int4pack_mm_for_cpu` multiplies by w = (q - 8) * scale + zero, one (scale, zero) per group of
32 weights of a row: the same groups. So the file's codes run as they are:

    Q4_0: scale = d, zero = 0          Q4_1: scale = d, zero = m + 8 d

The codes are exact. scale and zero are rounded to bf16 (the kernel takes them in the activations' dtype, and
its fast path is bf16; bf16 keeps 8 significant bits): a relative error of at most 2^-8 each, so
|w_kernel - w_file| <= 2^-8 (|q - 8| |d| + |m + 8 d|) before the kernel's fp32 sums. The activations are
rounded to bf16 on the way in and the outputs on the way out, as in `tinylm.quantize.Int8Linear`. Where the kernel does not fit (`tinylm.kernels`: out_features
a multiple of 16), the layer takes the readable fallback: the same weights, dequantized, and `F.linear`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .kernels import int4pack_fits

GROUP = 32                                  # weights per block (ggml's QK4_0 = QK4_1 = 32)
Q4_TYPES = {2: "Q4_0", 3: "Q4_1"}           # ggml type ids (gguf.GGMLQuantizationType)
BLOCK_BYTES = {2: 18, 3: 20}


def unpack_q4(raw: np.ndarray, ggml_type: int, shape: tuple[int, int]
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """A Q4_0 / Q4_1 matrix's bytes (N, row_bytes) -> codes (N, K) uint8 in [0, 15], d (N, K/32) fp16, and m
    (N, K/32) fp16 (None for Q4_0): the file's numbers, copied out of it, nothing rounded."""
    if ggml_type not in Q4_TYPES:
        raise ValueError(f"ggml type {ggml_type} is not Q4_0 (2) or Q4_1 (3)")
    N, K = shape
    if K % GROUP:
        raise ValueError(f"a Q4 row holds blocks of {GROUP} weights; {K} is not a multiple of {GROUP}")
    blocks = np.asarray(raw, dtype=np.uint8).reshape(N, K // GROUP, BLOCK_BYTES[ggml_type])  # (N, G, bytes)
    d = torch.from_numpy(blocks[..., 0:2].copy().view(np.float16)[..., 0])                  # (N, G)
    m = torch.from_numpy(blocks[..., 2:4].copy().view(np.float16)[..., 0]) if ggml_type == 3 else None
    qs = torch.from_numpy(blocks[..., -16:].copy())                                          # (N, G, 16)
    return unpack_nibbles(qs.reshape(N, K // 2)), d, m


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """codes (N, K) in [0, 15] -> (N, K/2) uint8 in the file's order: byte j of a block of 32 holds weight j in
    its low nibble and weight j + 16 in its high one."""
    N, K = codes.shape
    nib = codes.reshape(N, K // GROUP, 2, GROUP // 2).to(torch.uint8)                        # (N, G, 2, 16)
    return (nib[:, :, 0] | (nib[:, :, 1] << 4)).reshape(N, K // 2)


def unpack_nibbles(nibbles: torch.Tensor) -> torch.Tensor:
    """The inverse of `pack_nibbles`: (N, K/2) uint8 -> codes (N, K) uint8 in [0, 15]."""
    N, half = nibbles.shape
    qs = nibbles.reshape(N, half // (GROUP // 2), GROUP // 2)                                # (N, G, 16)
    return torch.cat([qs & 0xF, qs >> 4], dim=-1).reshape(N, 2 * half)                      # (N, G, 32)


def check_blocks(codes: torch.Tensor, a: torch.Tensor, b: torch.Tensor, names: str = "scale, zero") -> None:
    """codes (N, K) uint8 in [0, 15] with K a multiple of 32, and two tensors (N, K/32), one number per block
    each (`names` says which), or a ValueError that says what is wrong."""
    N, K = codes.shape
    if K % GROUP or a.shape != (N, K // GROUP) or b.shape != a.shape:
        raise ValueError(f"codes (N, K) = {tuple(codes.shape)} need K a multiple of {GROUP} and {names} of "
                         f"shape (N, K/{GROUP}); got {tuple(a.shape)}, {tuple(b.shape)}")
    if codes.dtype != torch.uint8 or int(codes.max()) > 15:
        raise ValueError("codes must be uint8 in [0, 15]")


def pack_q4(codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor | None) -> np.ndarray:
    """The inverse of `unpack_q4`: codes (N, K), d and m (N, K/32) fp16 -> the file's bytes (N, row_bytes)."""
    N, K = codes.shape
    parts = [d.to(torch.float16).view(torch.uint8).reshape(N, -1, 2)]
    if m is not None:
        parts.append(m.to(torch.float16).view(torch.uint8).reshape(N, -1, 2))
    parts.append(pack_nibbles(codes).reshape(N, K // GROUP, GROUP // 2))                    # (N, G, 16)
    return torch.cat(parts, dim=-1).reshape(N, -1).numpy()


def quantize_q4_1(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w (N, K) float -> Q4_1 codes (N, K) uint8, d and m (N, K/32) fp16, by llama.cpp's rule (the `gguf`
    package's, in the same fp32 steps, so the same bytes): per block m = min, d = (max - min) / 15,
    q = trunc((w - m) / d + 0.5) clipped to [0, 15]."""
    N, K = w.shape
    if K % GROUP:
        raise ValueError(f"Q4 blocks hold {GROUP} weights of a row: in_features {K} is not a multiple of {GROUP}")
    blocks = w.detach().float().reshape(N, K // GROUP, GROUP)                       # (N, G, 32)
    lo, hi = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
    d = (hi - lo) / 15
    inv = torch.where(d == 0, 0.0, 1 / d)
    q = torch.trunc((blocks - lo) * inv + 0.5).clamp(0, 15).to(torch.uint8)
    return q.reshape(N, K), d[..., 0].half(), lo[..., 0].half()


def scale_zero(d: torch.Tensor, m: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's (scale, zero) of w = (q - 8) * scale + zero, in fp32: Q4_0 (m None) d, 0; Q4_1 d, m + 8 d."""
    d = d.float()
    return d, (torch.zeros_like(d) if m is None else m.float() + 8 * d)


class Q4Linear(nn.Module):
    """A bias-free linear layer with 4-bit weights: codes (N, K) in [0, 15], and per group of 32 weights of a
    row a scale and a zero in bf16, w = (q - 8) * scale + zero.

    x (..., K) -> (..., N) in x's dtype, computed in bf16 like `Int8Linear`. kernel=True (where it fits):
    `_weight_int4pack_mm_for_cpu` on the packed codes; else the readable fallback, F.linear by `dequantize()`.
    """

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, kernel: bool = True):
        super().__init__()
        check_blocks(codes, scale, zero)
        N, K = codes.shape
        self.in_features, self.out_features = K, N
        self.kernel = kernel and int4pack_fits(N, K, GROUP)
        if self.kernel:  # the kernel's own layout of the codes (N, K/2) uint8, made once here
            weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).contiguous(), 1)
        else:
            weight = codes.clone()
        self.register_buffer("weight", weight)                                   # packed (N, K/2) or (N, K)
        sz = torch.stack([scale.T, zero.T], dim=-1).to(torch.bfloat16).contiguous()
        self.register_buffer("scale_zero", sz)                                   # (K/32, N, 2) bf16

    @classmethod
    def from_blocks(cls, codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor | None,
                    kernel: bool = True) -> "Q4Linear":
        """From a GGUF tensor's numbers (`unpack_q4`): Q4_0 (m None) or Q4_1."""
        return cls(codes, *scale_zero(d, m), kernel=kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, dtype = x.shape, x.dtype
        xb = x.reshape(-1, shape[-1]).to(torch.bfloat16).contiguous()                   # (M, K)
        if self.kernel:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(xb, self.weight, GROUP, self.scale_zero)
        else:
            y = F.linear(xb.float(), self.dequantize()).to(torch.bfloat16)              # as the kernel returns it
        return y.to(dtype).reshape(*shape[:-1], self.out_features)                     # (..., N)

    def codes(self) -> torch.Tensor:
        """(N, K) uint8: the codes the layer holds. From the kernel's layout by the kernel itself: multiplying
        the identity with scale 1 and zero 8 returns (q - 8) + 8 = q, exact in bf16."""
        if not self.kernel:
            return self.weight.clone()
        unit = torch.stack([torch.ones_like(self.scale_zero[..., 0]), torch.full_like(self.scale_zero[..., 1], 8)], -1)
        eye = torch.eye(self.in_features, dtype=torch.bfloat16)                         # (K, K)
        q = torch.ops.aten._weight_int4pack_mm_for_cpu(eye, self.weight, GROUP, unit)    # (K, N) = codes.T
        return q.T.to(torch.uint8).contiguous()

    def dequantize(self) -> torch.Tensor:
        """(N, K) fp32: the weights the layer multiplies by, (q - 8) * scale + zero with the bf16 scale and zero."""
        scale, zero = (t.float().T.repeat_interleave(GROUP, dim=1) for t in self.scale_zero.unbind(-1))  # (N, K)
        return (self.codes().float() - 8) * scale + zero

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, q4, kernel={self.kernel}"
