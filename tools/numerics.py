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
    "OMP_NUM_THREADS": "2",          # 2 threads (CI has 2 cores); under pytest-xdist, the cores shared among
                                     # the workers (threads(): 1 each for 2 workers on 2 cores)
}
MARK = "TINYLM_PINS"                 # the names apply() set itself, so that xdist's workers, which inherit the
                                     # controller's environment, can tell a pin from a choice made by the user


def threads(cores: int | None, workers: int) -> int:
    """OpenMP threads for each of `workers` test processes on `cores` cores: at most 2, at least 1. Two workers
    of two threads each on two cores oversubscribe them, and OpenMP's waiting threads then made a chapter's
    cell 12 to 23 times slower than alone (chapter 17's DPO steps: 11 s alone, 126 s to 255 s beside another
    chapter)."""
    return max(1, min(2, (cores or 1) // max(1, workers)))


def apply() -> None:
    """Set each pin in os.environ unless it is already set (call before torch or numpy is imported); in a
    pytest-xdist worker, OMP_NUM_THREADS (when it is a pin) becomes the worker's share of the cores."""
    ours = set(filter(None, os.environ.get(MARK, "").split(",")))
    for name, value in PINS.items():
        if name not in os.environ:
            os.environ[name] = value
            ours.add(name)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers and "OMP_NUM_THREADS" in ours:
        os.environ["OMP_NUM_THREADS"] = str(threads(os.cpu_count(), workers))
    os.environ[MARK] = ",".join(sorted(ours))
