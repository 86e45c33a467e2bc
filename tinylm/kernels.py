"""torch's quantized CPU matmul kernels, and the shapes each one is known to get right (checked before a call).

These kernels are private ATen ops: they check little, and some fail silently. Each case below was run in a
subprocess of its own (a segfault kills only that one), torch 2.13 on x86-64, with ATen's AVX-512 kernels and
again with its AVX2 ones (ATEN_CPU_CAPABILITY=avx2); `tools/probe_kernels.py` reruns the experiment:

    kernel (ATen op)                          correct for                          outside that
    _weight_int8pack_mm(x, q, scale)          in_features a multiple of 16         M >= 2 rows: segfault;
      int8 weights (N, K), per-row scales     (the AVX2 kernels need only 8)       M = 1: wrong numbers, silently,
                                                                                   for most other widths
    _convert_weight_to_int4pack_for_cpu,      out_features a multiple of 16,       a clear RuntimeError
    _weight_int4pack_mm_for_cpu               in_features of the group size,
      4-bit codes (N, K), groups along K      group 32, 64, 128 or 256
    _int_mm(a, b): int8 (M, K) x (K, N)       every shape tried (M 1-33, K, N 8-576, odd sizes too), but  -
      (oneDNN's kernel)                       exact only with VNNI: oneDNN's AVX2 kernel adds 128 to a and
                                              sums pairs of u8 x s8 products in int16 (vpmaddubsw), which
                                              saturates: a = 63 against b = 127 already comes out wrong
    quantized::linear_dynamic (fbgemm)        every shape tried; 8-bit activations are exact only with VNNI
                                              (AVX2: the same int16 pair sums), 7-bit ones (reduce_range)
                                              everywhere

tinylm calls a kernel only inside its rule (`int8pack_fits`, `int4pack_fits`) and otherwise takes the layer's
readable fallback, which gives the same numbers up to rounding. The rule is fixed (16, not "8 on AVX2"), so a
model takes the same path on every machine. `_int_mm` is used only where `int_mm_exact()`, a worst case run once
in this process, says its sums are exact on this machine (ONEDNN_MAX_CPU_ISA=AVX2, which the tests set, makes
it saturate on any machine).
"""

from __future__ import annotations

from functools import cache

import torch

# which kernels this torch has (2.4+: int8pack; 2.5+: the CPU int4 pair; fbgemm: x86-64 builds)
HAVE_INT8PACK = hasattr(torch.ops.aten, "_weight_int8pack_mm")
HAVE_INT4PACK = hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")
HAVE_INT_MM = hasattr(torch, "_int_mm")
HAVE_FBGEMM = "fbgemm" in torch.backends.quantized.supported_engines

INT8PACK_MULTIPLE = 16                 # in_features must be a multiple of this (AVX-512 kernels; AVX2: 8)
INT4PACK_MULTIPLE = 16                 # out_features must be a multiple of this
INT4PACK_GROUPS = (32, 64, 128, 256)   # the group sizes the int4 kernel accepts


def int8pack_fits(in_features: int) -> bool:
    """True where `_weight_int8pack_mm` is exact: this torch has it and in_features is a multiple of 16."""
    return HAVE_INT8PACK and in_features % INT8PACK_MULTIPLE == 0


def int4pack_fits(out_features: int, in_features: int, group: int = 32) -> bool:
    """True where the int4 CPU kernel runs: this torch has it, out_features is a multiple of 16, in_features a
    multiple of the group, and the group one of 32, 64, 128, 256."""
    return (HAVE_INT4PACK and out_features % INT4PACK_MULTIPLE == 0 and group in INT4PACK_GROUPS
            and in_features % group == 0)


@cache
def int_mm_exact() -> bool:
    """True if `torch._int_mm` sums exactly here: the worst cases of a saturating int16 pair sum, 127 x 127 and
    -128 x -127 over 64 terms, for one row and for several (decided once per process)."""
    if not HAVE_INT_MM:
        return False
    cases = [(127, 127), (-128, -127)]
    return all(bool((torch._int_mm(torch.full((m, 64), x, dtype=torch.int8), torch.full((64, 16), w, dtype=torch.int8))
                     == x * w * 64).all()) for m in (1, 2, 17) for x, w in cases)
