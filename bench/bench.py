"""tinylm against Hugging Face transformers on the same weights, same process, same CPU threads.

Run: make bench   (or .venv/bin/python bench/bench.py --threads 2 --repeats 7)

For each config (the mini companion -> Qwen3ForCausalLM; the running example's width at 2 layers ->
LlamaForCausalLM) it times, fp32, after a warm-up, with the two implementations interleaved and the
median of several repeats:
  forward   logits for a (4, 256) batch, no grad
  train     one training step: forward + loss + backward (4, 256)
  decode    greedy decoding of 128 new tokens after a 64-token prompt, with the KV cache
and prints time, ratio (transformers / tinylm: above 1 means tinylm is faster), peak memory of one call
above the process holding both models (measured in a fresh subprocess per case, so earlier calls' freed
memory cannot hide it), and training throughput as a fraction of this machine's measured fp32 matmul peak.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
import warnings

import torch

from tinylm import Config, TinyLM, count_params
from tinylm.generate import generate
from tinylm.hf import to_hf

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

CONFIGS = {
    "mini-companion": Config.from_preset("mini-companion"),
    "running-example@2 layers": Config.from_preset("running-example", n_layers=2),
}


def peak_rss_reset() -> int:
    """Reset the kernel's peak-RSS counter (Linux) and return the current RSS in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kb("VmRSS") * 1024


def peak_rss_since() -> int:
    return _status_kb("VmHWM") * 1024


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def matmul_peak_flops(n: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def workloads(cfg: Config, ours: TinyLM, theirs, batch: int = 4, seq: int = 256, prompt: int = 64, new: int = 128):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
    y = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
    p = torch.randint(0, cfg.vocab_size, (1, prompt), generator=g)

    def fwd_ours():
        with torch.no_grad():
            ours(x)

    def fwd_theirs():
        with torch.no_grad():
            theirs(input_ids=x)

    def train_ours():
        ours.zero_grad(set_to_none=True)
        ours(x, y)[1].backward()

    def train_theirs():
        theirs.zero_grad(set_to_none=True)
        theirs(input_ids=x, labels=y).loss.backward()  # HF shifts labels inside; same work

    def dec_ours():
        return generate(ours, p, new, temperature=0.0)

    def dec_theirs():
        return theirs.generate(p, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                               pad_token_id=0, eos_token_id=None, attention_mask=torch.ones_like(p))

    return {"forward": (fwd_ours, fwd_theirs), "train": (train_ours, train_theirs),
            "decode": (dec_ours, dec_theirs)}


def measure(fn, repeats: int) -> float:
    gc.collect()
    return statistics.median(_timed(fn) for _ in range(repeats))


def models(name: str):
    cfg = CONFIGS[name]
    torch.manual_seed(0)
    ours = TinyLM(cfg).eval()
    return cfg, ours, to_hf(ours)


def memory_of(name: str, impl: str, kind: str) -> int:
    """Peak RSS growth (bytes) of one call, in a fresh process: `bench.py --memory NAME IMPL KIND`."""
    out = subprocess.run([sys.executable, __file__, "--memory", name, impl, kind], capture_output=True, text=True,
                         check=True)
    return int(out.stdout.split()[-1])


def _memory_child(name: str, impl: str, kind: str) -> None:
    torch.set_num_threads(2)
    cfg, ours, theirs = models(name)
    f_ours, f_theirs = workloads(cfg, ours, theirs)[kind]
    fn = f_ours if impl == "tinylm" else f_theirs
    gc.collect()
    base = peak_rss_reset()
    fn()
    print(max(0, peak_rss_since() - base))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per case, interleaved (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median over all is kept")
    ap.add_argument("--memory", nargs=3, metavar=("CONFIG", "IMPL", "WORK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory:
        return _memory_child(*args.memory)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    peak = matmul_peak_flops()
    print(f"torch {torch.__version__}, {args.threads} threads; fp32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    header = f"{'config':26s} {'work':8s} {'tinylm':>10s} {'transformers':>13s} {'ratio':>6s} {'mem tinylm':>11s} {'mem HF':>8s}"
    print(header + "\n" + "-" * len(header))
    for name in CONFIGS:
        cfg, ours, theirs = models(name)
        with torch.no_grad():  # same weights, same answer, before timing anything
            x = torch.randint(0, cfg.vocab_size, (1, 32))
            assert (ours(x)[0] - theirs(input_ids=x).logits).abs().max() < 1e-4
        work = workloads(cfg, ours, theirs)
        for kind, (f_ours, f_theirs) in work.items():
            if kind == "decode":
                assert torch.equal(f_ours(), f_theirs()), "greedy outputs differ"
            else:
                f_ours(), f_theirs()  # warm-up
            t_o, t_t = [], []
            for _ in range(args.rounds):  # interleave the two so drifts in machine speed hit both
                t_o.append(measure(f_ours, args.repeats))
                t_t.append(measure(f_theirs, args.repeats))
            to, tt = statistics.median(t_o), statistics.median(t_t)
            m_o, m_t = memory_of(name, "tinylm", kind), memory_of(name, "transformers", kind)
            print(f"{name:26s} {kind:8s} {to * 1e3:8.1f}ms {tt * 1e3:11.1f}ms {tt / to:5.2f}x "
                  f"{m_o / 2**20:8.0f}MiB {m_t / 2**20:5.0f}MiB")
            if kind == "train":
                p = count_params(cfg)
                tokens = 4 * 256
                flops = 6 * (p.total - p.embedding) * tokens + 6 * cfg.vocab_size * cfg.dim * tokens \
                    + 12 * cfg.n_layers * cfg.dim * 256 * tokens  # matmuls + lm head + attention scores
                print(f"{'':26s} {'':8s} training: {tokens / to:,.0f} tokens/s, "
                      f"{flops / to / 1e9:.1f} GFLOP/s = {flops / to / peak:.0%} of matmul peak "
                      f"(transformers {flops / tt / peak:.0%})")


if __name__ == "__main__":
    main()
