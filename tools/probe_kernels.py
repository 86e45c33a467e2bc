"""Which shapes torch's quantized CPU kernels get right: each case in a child process that a crash cannot hide.

    .venv/bin/python tools/probe_kernels.py                          # this machine's kernels
    ATEN_CPU_CAPABILITY=avx2 .venv/bin/python tools/probe_kernels.py # ATen's AVX2 kernels on the same machine
    ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python tools/probe_kernels.py  # oneDNN's (behind _int_mm) too

Each case multiplies random int8 / int4 weights by random activations and compares with the same product in
fp32 or int32 (OK: within 2% of the largest output; WRONG: finite but off; ERROR: torch refused, with its message;
CRASH: the process died, e.g. by segfault). A child runs the cases one after another and reports each before
starting the next; when it dies, a new child goes on after the case that killed it. The rules in
`tinylm/kernels.py` come from this table.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys

CHILD = r"""
import sys, torch
torch.manual_seed(0)

def one(kind, M, N, K):
    if kind == "int8pack":
        w = torch.randint(-127, 128, (N, K), dtype=torch.int8)
        s, x = torch.rand(N).bfloat16() + 0.5, torch.randn(M, K).bfloat16()
        return torch.ops.aten._weight_int8pack_mm(x, w, s), (x.float() @ w.float().T) * s.float()
    if kind == "int4pack":
        q = torch.randint(0, 16, (N, K), dtype=torch.int32)
        sz, x = torch.rand(K // 32, N, 2).bfloat16(), torch.randn(M, K).bfloat16()
        p = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        scale, zero = (t.float().repeat_interleave(32, 0).T for t in sz.unbind(-1))
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, p, 32, sz), x.float() @ ((q - 8) * scale + zero).T
    if kind == "int_mm":
        a, b = torch.randint(-127, 128, (M, K), dtype=torch.int8), torch.randint(-127, 128, (K, N), dtype=torch.int8)
    else:                                   # int_mm_max: 127 x 127 everywhere, the worst case of an int16 pair sum
        a, b = torch.full((M, K), 127, dtype=torch.int8), torch.full((K, N), 127, dtype=torch.int8)
    return torch._int_mm(a, b), a.int() @ b.int()

for line in sys.stdin:
    kind, M, N, K = line.split()
    print("START", flush=True)
    try:
        y, ref = one(kind, int(M), int(N), int(K))
        err = float((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1e-9))
        print("OK" if err < 0.02 else "WRONG", flush=True)
    except Exception as e:
        print("ERROR " + str(e).splitlines()[0][:100], flush=True)
"""


def cases() -> list[str]:
    out = [f"int8pack {M} 40 {K}" for M in (1, 2, 5, 17) for K in (*range(1, 41), 48, 64, 80, 576)]
    out += [f"int4pack {M} {N} 64" for M in (1, 3) for N in (8, 15, 16, 24, 32, 48, 64, 192)]
    out += [f"int4pack 1 64 {K}" for K in (48, 96, 160)]
    out += [f"{kind} {M} {N} {K}" for kind in ("int_mm", "int_mm_max") for M in (1, 2, 17) for N in (8, 12, 576)
            for K in (8, 12, 576)]
    return out


def run(todo: list[str]) -> dict[str, str]:
    results: dict[str, str] = {}
    while todo:
        child = subprocess.run([sys.executable, "-c", CHILD], input="\n".join(todo) + "\n", capture_output=True,
                               text=True)
        done = [line for line in child.stdout.splitlines() if line != "START"]
        results.update(zip(todo, done))
        if child.returncode != 0:                                   # the case after the last reported one
            results[todo[len(done)]] = f"CRASH (exit {child.returncode})"
            done.append("")
        todo = todo[len(done):]
    return results


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    import torch

    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    table: dict = collections.defaultdict(lambda: collections.defaultdict(list))   # (kind, M, axis) -> verdict -> sizes
    for case, verdict in run(cases()).items():
        kind, M, N, K = case.split()
        varying = "N" if kind == "int4pack" and K == "64" else "K"
        table[(kind, M, varying)][verdict.split(" (")[0]].append(int(N if varying == "N" else K))
    for (kind, M, varying), verdicts in table.items():
        print(f"{kind:9s} M={M:3s} " + "; ".join(f"{v} at {varying} = {sorted(set(xs))}" for v, xs in verdicts.items()))


if __name__ == "__main__":
    main()
