"""Speed measurements of SmolLM2-135M on this CPU, run in a fresh process without `tools/numerics.py`'s pins.

The chapters execute under pins that force every numerical library onto its AVX2 code paths and 2 threads, so
that their printed numbers are the same on every machine. Timings made that way would time forced AVX2 kernels
on an AVX-512 machine. `unpinned(job=kwargs, ...)` therefore runs jobs of this module in a new Python process
whose environment lacks those pins (`echo go | python -m tinylm.speed JSON`) and returns what each job returns
(plain numbers, lists and strings, through JSON). `TimingProcess(job=kwargs, ...)` starts that process and lets
it load SmolLM2 while the caller loads its own copy; its `results()` then runs the jobs:

    job           what it measures
    machine       the CPU's flags, memory bandwidth (a large copy) and fp32 matmul FLOP/s
    formats       per weight format: bytes read per token, seconds per decoded token, prefill of 64 tokens
    threads       seconds per decoded token at each thread count
    batch         seconds per decoding step at each batch size
    speculative   plain greedy against prompt-lookup speculative decoding, per prompt: seconds and statistics
    overhead      seconds per step of a model with SmolLM2's 30 layers at width 72, whose matmuls cost ~nothing
    compiled      the overhead switch per format and thread count: compile time, eager and compiled seconds
                  per step, and whether greedy decoding gives the same tokens
                  (`echo go | python -m tinylm.speed '{"compiled": {}}'` measures fp32 and q4 at 1 .. all cores)

Decoding steps are timed one by one and their median kept; other times are medians of `repeats` runs after a
warm-up (speculative: without one, each generation both timed and checked). Library code prints nothing.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from .config import Config
from .fast import CompiledDecoder
from .generate import generate
from .model import TinyLM

# tools/numerics.py's pins (a test keeps the two lists equal); the timing process starts without them
PINNED = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE", "MKL_DYNAMIC",
          "OMP_NUM_THREADS")
# /proc/cpuinfo flags that decide which kernels run: AVX2 and FMA (every current x86-64), VNNI's int8 dot
# products (vpdpbusd, with AVX-512 or as AVX-VNNI), AVX-512's bf16 dot products, AMX tiles
CPU_FLAGS = ("avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
FORMATS = ("fp32", "bf16", "int8", "w8a8", "q4")


class TimingProcess:
    """A fresh Python process without the numerics pins, started at once: it loads the SmolLM2 formats its jobs
    need, then waits. `results()` lets it run the jobs (names in JOBS, with their keyword arguments), in the
    order given, and returns {job: its result}, and under "cpu_seconds" {job: the CPU time it took} ("load":
    the loading). Load your own models between the two calls: the two loads overlap, the timings do not, since
    the caller only waits while the jobs run. timeout: seconds that `results()` waits at most (None: no limit;
    a busy machine can stretch a minute of CPU time into many)."""

    def __init__(self, timeout: float | None = None, **jobs: dict[str, Any]):
        unknown = [j for j in jobs if j not in JOBS]
        if unknown or not jobs:
            raise ValueError(f"jobs must be among {', '.join(JOBS)}, got {', '.join(unknown) or 'none'}")
        env = {k: v for k, v in os.environ.items() if k not in PINNED}
        self.timeout = timeout
        self._process = subprocess.Popen([sys.executable, "-m", "tinylm.speed", json.dumps(jobs)], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)

    def results(self) -> dict[str, Any]:
        """Let the process time its jobs (once it has loaded), wait for it, and return what they returned."""
        try:
            out, err = self._process.communicate("go\n", timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
            raise
        if self._process.returncode != 0:
            raise RuntimeError(f"the timing process failed:\n{err[-2000:]}")
        return json.loads(out.splitlines()[-1])


def unpinned(timeout: float | None = None, **jobs: dict[str, Any]) -> dict[str, Any]:
    """`TimingProcess(timeout, **jobs).results()`: the jobs' results, with nothing loaded in between."""
    return TimingProcess(timeout, **jobs).results()


def formats_needed(jobs: dict[str, dict[str, Any]]) -> list[str]:
    """The SmolLM2 formats the jobs use (their `formats` or `fmt` argument, given or by default), in FORMATS'
    order."""
    need = set()
    for job, kwargs in jobs.items():
        bound = inspect.signature(JOBS[job]).bind_partial(**kwargs)
        bound.apply_defaults()
        need |= set(bound.arguments.get("formats", ())) | {bound.arguments.get("fmt")}
    return [f for f in FORMATS if f in need]


def median_time(fn: Callable[[], Any], repeats: int = 3, warm_up: bool = True) -> float:
    """Median wall-clock seconds of fn() over `repeats` calls, after one warm-up call (warm_up=False: none, for
    a function that has just run)."""
    if warm_up:
        fn()
    return timed(fn, repeats)[0]


def timed(fn: Callable[[], Any], repeats: int = 1) -> tuple[float, Any]:
    """(median wall-clock seconds of `repeats` calls of fn(), what the first call returned), with no warm-up:
    a result that is both checked and timed costs one run, not two."""
    times, results = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        results.append(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times), results[0]


def decode_seconds(model: TinyLM | CompiledDecoder, prompt: torch.Tensor, new: int, repeats: int = 1) -> float:
    """Seconds of one decoding step, the median over `new` steps (after one untimed step): the prompt (B, T) is
    prefilled into a KV cache, then each step is one forward of one token per row and its greedy choice. The
    median of single steps shrugs off a pause of the machine that a total time would absorb. repeats: how
    many times to run the whole measurement, the median of all the steps being kept. model: a TinyLM, or a
    `CompiledDecoder` (its caches, its compiled steps)."""
    B, T = prompt.shape
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            cache = model.new_cache(B, T + new + 1)
            token = model(prompt, cache=cache)[0][:, -1:].argmax(-1)           # (B, 1)
            for step in range(new + 1):
                start = time.perf_counter()
                token = model(token, cache=cache)[0][:, -1:].argmax(-1)
                if step:
                    times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_flags() -> dict[str, Any]:
    """The CPU's model name and which of CPU_FLAGS it has (Linux's /proc/cpuinfo; elsewhere 'unknown')."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read().splitlines()
    except OSError:
        return {"name": "unknown", "has": [], "lacks": list(CPU_FLAGS)}
    name = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "unknown")
    flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    return {"name": name, "has": [f for f in CPU_FLAGS if f in flags],
            "lacks": [f for f in CPU_FLAGS if f not in flags]}


def memory_bandwidth(mib: int = 256, repeats: int = 5) -> float:
    """Bytes/s of a large copy (each byte read once and written once): what decoding can stream at most."""
    src = torch.ones(mib * 2**18)                                # mib MiB of fp32
    dst = torch.empty_like(src)
    return 2 * src.nbytes / median_time(lambda: dst.copy_(src), repeats)


def matmul_flops(n: int = 1024, repeats: int = 5) -> float:
    """fp32 FLOP/s of an n x n matrix product (2 n^3 operations)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / median_time(lambda: a @ b, repeats)


def _threads(threads: int | None) -> int:
    n = threads or os.cpu_count() or 1
    torch.set_num_threads(n)
    return n


def machine(threads: int = 1) -> dict[str, Any]:
    """The CPU (cpu_flags, torch's kernel capability, cores), which pins this process has (none, from
    `unpinned`), and its memory bandwidth and fp32 matmul FLOP/s at `threads` threads."""
    n = _threads(threads)
    return {**cpu_flags(), "capability": torch.backends.cpu.get_cpu_capability(), "cores": os.cpu_count(),
            "threads": n, "pinned": [k for k in PINNED if k in os.environ], "bandwidth": memory_bandwidth(),
            "flops": matmul_flops()}


_LOADED: dict[str, Any] = {}


def smollm2(fmt: str) -> TinyLM:
    """SmolLM2-135M in format fmt, made once per process: fp32 is the file dequantized, q4 the file's own
    4-bit blocks (`tinylm.gguf_q4`), bf16 and int8 `tinylm.quantize.quantize` of fp32, w8a8 of int8."""
    from .gguf_q4 import load_gguf_q4
    from .pretrained import load_gguf, smollm2_gguf_path
    from .quantize import quantize

    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt not in _LOADED:
        if fmt == "q4":
            _LOADED["q4"], _LOADED["tokenizer"] = load_gguf_q4(smollm2_gguf_path())
        elif fmt == "fp32":
            _LOADED["fp32"], _LOADED["tokenizer"] = load_gguf(smollm2_gguf_path(), progress=False)
        else:                                        # w8a8 on int8's codes: one quantization for both
            _LOADED[fmt] = quantize(copy.deepcopy(smollm2("int8" if fmt == "w8a8" else "fp32")), fmt)
    return _LOADED[fmt]


def _prompt(batch: int = 1, length: int = 8) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 49152, (batch, length), generator=g)   # SmolLM2's vocabulary


def formats(formats: list[str] = list(FORMATS), new: int = 8, repeats: int = 3, threads: int = 1,
            prefill: int = 64) -> dict[str, dict[str, float]]:
    from .quantize import weight_bytes_per_token

    _threads(threads)
    out = {}
    for f in formats:
        m = smollm2(f)
        long = _prompt(1, prefill)
        with torch.inference_mode():
            pre = median_time(lambda: m(long, cache=m.new_cache(1, prefill)), repeats)
        out[f] = {"bytes": weight_bytes_per_token(m), "seconds": decode_seconds(m, _prompt(), new, repeats),
                  "prefill": pre}
    return out


def threads(formats: list[str] = ["fp32", "q4"], counts: list[int] | None = None, new: int = 8,
            repeats: int = 1) -> dict[str, dict[str, float]]:
    counts = counts or list(range(1, (os.cpu_count() or 1) + 1))                 # 1 .. all cores
    out: dict[str, dict[str, float]] = {f: {} for f in formats}
    for n in counts:
        _threads(n)
        for f in formats:
            out[f][str(n)] = decode_seconds(smollm2(f), _prompt(), new, repeats)
    return out


def batch(fmt: str = "fp32", sizes: list[int] = [1, 4, 16], new: int = 4, repeats: int = 1,
          threads: int = 1) -> dict[str, float]:
    _threads(threads)
    model = smollm2(fmt)
    return {str(b): decode_seconds(model, _prompt(b, 4), new, repeats) for b in sizes}


def speculative(fmt: str = "q4", prompts: dict[str, str] | None = None, new: int = 32, k: int = 8,
                repeats: int = 1, threads: int = 1) -> dict[str, dict[str, Any]]:
    from .speculative import speculative_generate

    _threads(threads)
    model = smollm2(fmt)
    tok = _LOADED["tokenizer"]                       # set by either loader
    out = {}
    for name, text in (prompts or {}).items():
        ids = torch.tensor([tok.encode_chat([{"role": "user", "content": text}])])
        # each run is timed, the first one's tokens compared (earlier jobs have run the model: no warm-up)
        t_plain, plain = timed(lambda: generate(model, ids, new, temperature=0.0), repeats)
        t_spec, (spec, stats) = timed(lambda: speculative_generate(model, ids, new, k=k), repeats)
        out[name] = {**stats, "plain_seconds": t_plain, "speculative_seconds": t_spec,
                     "same": bool(torch.equal(plain, spec))}
    return out


def overhead(new: int = 16, repeats: int = 3, threads: int = 1) -> float:
    """Seconds per decoding step of SmolLM2's 30 layers and 9/3 heads at width 72 (vocab 256): the Python and
    dispatch work of a step, with almost no arithmetic and almost no bytes."""
    _threads(threads)
    cfg = Config(vocab_size=256, dim=72, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=8, ffn_dim=192,
                 max_seq_len=256, tie_embeddings=True)
    torch.manual_seed(0)
    model = TinyLM(cfg).eval()
    return decode_seconds(model, torch.randint(0, 256, (1, 8)), new, repeats)


def compiled(formats: list[str] = ["fp32", "q4"], counts: list[int] | None = None, new: int = 32,
             repeats: int = 3, check: int = 64) -> dict[str, dict[str, Any]]:
    """The overhead switch (`tinylm.fast.CompiledDecoder`) per format and thread count ("fp32 @ 1", ...):
    seconds of the first compiled run, compile included (`first`); seconds per decoding step, eager and
    compiled, each the median over `repeats` interleaved rounds (`eager`, `compiled`); and, once per format,
    whether greedy decoding of `check` tokens gives eager's tokens (`same`, at the last thread count)."""
    counts = counts or list(range(1, (os.cpu_count() or 1) + 1))
    out: dict[str, dict[str, Any]] = {}
    for f in formats:
        model, prompt = smollm2(f), _prompt(1, 64)
        fast = CompiledDecoder(model)
        for n in counts:
            _threads(n)
            first = timed(lambda: decode_seconds(fast, prompt, 1))[0]
            rounds = [(decode_seconds(model, prompt, new), decode_seconds(fast, prompt, new)) for _ in range(repeats)]
            out[f"{f} @ {n}"] = {"first": first, "eager": statistics.median(e for e, _ in rounds),
                                 "compiled": statistics.median(c for _, c in rounds)}
        want = generate(model, prompt, check, temperature=0.0)
        out[f"{f} @ {counts[-1]}"]["same"] = bool(torch.equal(generate(model, prompt, check, temperature=0.0,
                                                                        compiled=True), want))
    return out


JOBS: dict[str, Callable[..., Any]] = {"machine": machine, "formats": formats, "threads": threads,
                                       "batch": batch, "speculative": speculative, "overhead": overhead,
                                       "compiled": compiled}

if __name__ == "__main__":
    todo = json.loads(sys.argv[1])
    start = time.process_time()
    for fmt in formats_needed(todo):                     # while the caller loads its own models
        smollm2(fmt)
    results: dict[str, Any] = {"cpu_seconds": {"load": time.process_time() - start}}
    if sys.stdin.readline().strip() != "go":             # the caller has gone: nothing to time
        sys.exit(0)
    for job, kwargs in todo.items():
        start = time.process_time()
        results[job] = JOBS[job](**kwargs)
        results["cpu_seconds"][job] = time.process_time() - start
    print(json.dumps(results))
