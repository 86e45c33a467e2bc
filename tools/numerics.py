"""Pin the CPU code paths of the numerical libraries for the tests and `make execute` (learners and `make bench`
run unpinned).

PyTorch, MKL, oneDNN and OpenBLAS each pick their kernels by the processor. The pins narrow that (AVX2 paths, 2
threads) but do not remove it: MKL's AVX2 branch on an AMD processor is not Intel's, and an AMD EPYC re-executing
outputs made on an Intel Xeon under these pins still differed in 44 cells. Portability comes from the rule in
docs/testing.md (nbval compares only what no CPU changes; a run's claims are asserted), checked by
`make portable`. The pins stay because tests rely on them: the W8A8 tests expect oneDNN at AVX2 (where _int_mm
saturates) and the compiled decoder is tested at the pinned vector width. A variable already set in the
environment is left alone, so `ATEN_CPU_CAPABILITY=default make test` runs on another arithmetic.
"""

from __future__ import annotations

import os

PINS = {
    "ATEN_CPU_CAPABILITY": "avx2",   # PyTorch's own vectorised kernels (elementwise ops, reductions, softmax)
    "MKL_CBWR": "AVX2",              # MKL's conditional numerical reproducibility: fp32/fp64 matmuls
    "ONEDNN_MAX_CPU_ISA": "AVX2",    # oneDNN: bf16 and int8 matmuls
    "OPENBLAS_CORETYPE": "Haswell",  # NumPy's OpenBLAS (the AVX2 kernels)
    "MKL_DYNAMIC": "FALSE",          # MKL uses exactly the threads it is given, never fewer
    "OMP_NUM_THREADS": "2",          # the committed outputs were made with 2 threads (CI has 2 cores); a
                                     # matmul split over more threads may add in another order
}


def apply() -> None:
    """Set each pin in os.environ unless it is already set (call before torch or numpy is imported)."""
    for name, value in PINS.items():
        os.environ.setdefault(name, value)
