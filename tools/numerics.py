"""Pin the CPU code paths of the numerical libraries, so that a notebook prints the same numbers on every
x86-64 machine with AVX2 (the tests and `make execute` apply this; `make bench` and learners do not).

PyTorch, MKL, oneDNN and OpenBLAS each pick their kernels by the processor they find: an AVX-512 machine
sums in another order than an AVX2-only one, and the training demos of the chapters amplify that last-bit
difference into a different second decimal. Forcing the AVX2 paths, which every current x86-64 processor
has, and the same thread count, makes the committed outputs reproducible wherever CI runs. An environment variable that is already
set is left alone.
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
