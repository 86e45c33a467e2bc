"""Speed measurements of SmolLM2-135M on this CPU, run in a fresh process without `tools/numerics.py`'s pins.

The chapters execute under pins that force every numerical library onto its AVX2 code paths and 2 threads, so
that their printed numbers are the same on every machine. Timings made that way would time forced AVX2 kernels
on an AVX-512 machine. `unpinned(job=kwargs, ...)` therefore runs jobs of this module in a new Python process
whose environment lacks those pins (`echo go | python -m tinylm.speed JSON`) and returns what each job returns
(plain numbers, lists, strings and `Spread`s, through JSON). `TimingProcess(job=kwargs, ...)` starts that
process and lets it load SmolLM2 while the caller loads its own copy; its `results()` then runs the jobs:

    job           what it measures
    machine       the CPU's flags, memory bandwidth (a large copy) and fp32 matmul FLOP/s
    formats       per weight format: bytes read per token, prefill of 64 tokens, seconds per decoded token
                  after it
    threads       seconds per decoded token at each thread count
    batch         seconds per decoding step at each batch size
    speculative   plain greedy against prompt-lookup speculative decoding, per prompt: seconds and statistics
    overhead      seconds per step of a model with SmolLM2's 30 layers at width 72, whose matmuls cost ~nothing
    compiled      the overhead switch per format and thread count: compile time, eager and compiled seconds
                  per step, and whether greedy decoding gives the same tokens
                  (`echo go | python -m tinylm.speed '{"compiled": {}}'` measures fp32 and q4 at 1 .. all cores)

Every timing is repeated (`repeats`, 3 by default; the machine job's copy and product 5 times) and comes back
as a `Spread`: a float, the median of its runs, that also carries the runs, their lowest and highest (`low`,
`high`), their number `n`, and the 1-minute load average (`os.getloadavg()[0]`) before the first run and
after the last (`load_before`, `load_after`). A job that times several things (formats, thread counts, batch
sizes, prompts, eager against compiled) runs them round by round (`interleaved`: a, b, c, a, b, c, ...), so
that a pause of the machine falls on all of them rather than on one, and `a.ratio(b)` is the Spread of the
per-round ratios. In one run of a decoding time the steps are timed one by one and their median kept. The
results of `unpinned` also hold "load_average": the load before the first job and after the last. Library
code prints nothing.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ._checks import check_int
from .config import Config
from .fast import CompiledDecoder, LayerLoopDecoder, decoder
from .generate import generate
from .model import TinyLM

# tools/numerics.py's pins (a test keeps the two lists equal); the timing process starts without them
PINNED = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE", "MKL_DYNAMIC",
          "OMP_NUM_THREADS")
# /proc/cpuinfo flags that decide which kernels run: AVX2 and FMA (every current x86-64), VNNI's int8 dot
# products (vpdpbusd, with AVX-512 or as AVX-VNNI), AVX-512's bf16 dot products, AMX tiles
CPU_FLAGS = ("avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
FORMATS = ("fp32", "bf16", "int8", "w8a8", "q4", "q4a8")
REPEATS = 3                  # runs of each timing by default: the fewest that have a median and a range


class TimingProcess:
    """A fresh Python process without the numerics pins, started at once: it loads the SmolLM2 formats its jobs
    need, then waits. `results()` lets it run the jobs (names in JOBS, with their keyword arguments), in the
    order given, and returns {job: its result}, under "cpu_seconds" {job: the CPU time it took} ("load": the
    loading), and under "load_average" the 1-minute load average before the first job and after the last
    ("before", "after"); the jobs' Spreads come back as Spreads. Load your own models between the two calls: the two loads overlap, the timings do not, since
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
        return from_json(out.splitlines()[-1])


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


def load_average() -> float:
    """The 1-minute load average: processes running or waiting for a core, averaged over the last minute
    (Linux updates it every 5 s). Above the core count, timings wait for the CPU. NaN where the OS keeps none
    (Windows)."""
    getloadavg = getattr(os, "getloadavg", None)
    try:
        return float(getloadavg()[0]) if getloadavg else math.nan
    except OSError:
        return math.nan


def check_repeats(repeats: Any) -> int:
    """repeats as a positive int, or a ValueError that says what to pass."""
    return check_int("repeats", repeats, low=1,
                     hint=f" (how many times to run each timing; {REPEATS} or more give a median and a range)")


class Spread(float):
    """A timing repeated: as a float, the median of its runs; `runs` (in the order they ran), `low` and `high`
    (the smallest and largest run), `n` (how many), and the 1-minute load average before the first run and
    after the last (`load_before`, `load_after`; NaN: not known). Arithmetic on it gives plain floats (of the
    median); `map` and `ratio` give Spreads run by run."""

    runs: tuple[float, ...]
    low: float
    high: float
    n: int
    load_before: float
    load_after: float

    def __new__(cls, runs: Iterable[float], load_before: float = math.nan, load_after: float = math.nan):
        values = tuple(float(r) for r in runs)
        if not values:
            raise ValueError("a Spread needs at least one run, got none")
        self = super().__new__(cls, statistics.median(values))
        self.runs, self.low, self.high, self.n = values, min(values), max(values), len(values)
        self.load_before, self.load_after = float(load_before), float(load_after)
        return self

    @property
    def median(self) -> float:
        return float(self)

    def map(self, fn: Callable[[float], float]) -> Spread:
        """fn of each run, with the same loads: `s.map(lambda t: 1 / t)` turns seconds into rates (the lowest
        rate is then the slowest run's)."""
        return Spread(map(fn, self.runs), self.load_before, self.load_after)

    def ratio(self, other: Spread) -> Spread:
        """self's runs divided by other's, round by round (both from one `interleaved`: the rounds pair up),
        with the higher of the two loads before and after."""
        if not isinstance(other, Spread) or other.n != self.n:
            got = f"n={other.n}" if isinstance(other, Spread) else type(other).__name__
            raise ValueError(f"ratio needs two Spreads of the same number of runs, paired round by round; got "
                             f"n={self.n} and {got}")
        return Spread((a / b for a, b in zip(self.runs, other.runs)), max(self.load_before, other.load_before),
                      max(self.load_after, other.load_after))

    def __repr__(self) -> str:
        return (f"Spread({float(self)!r}, low={self.low!r}, high={self.high!r}, n={self.n}, "
                f"load {self.load_before:.2f} -> {self.load_after:.2f})")

    def __reduce__(self):
        return Spread, (self.runs, self.load_before, self.load_after)


def to_json(obj: Any) -> Any:
    """obj with each Spread as {"__spread__": {"runs": ..., "load_before": ..., "load_after": ...}}, for
    json.dumps (which would write a Spread as its median alone)."""
    if isinstance(obj, Spread):
        return {"__spread__": {"runs": list(obj.runs), "load_before": obj.load_before,
                               "load_after": obj.load_after}}
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    return obj


def from_json(text: str) -> Any:
    """json.loads of `to_json`'s output, its Spreads made again."""
    return json.loads(text, object_hook=lambda d: Spread(**d["__spread__"]) if set(d) == {"__spread__"} else d)


def interleaved(measures: dict[Any, Callable[[], Any]], repeats: int = REPEATS) -> dict[Any, Any]:
    """Each of `measures` run `repeats` times, round by round (a, b, c, a, b, c, ...), so that a pause of the
    machine falls on every one of them rather than on one. A measure returns the number one run measured
    (seconds, usually), or a tuple of numbers. Returns {name: Spread of its numbers} (a tuple of Spreads for a
    tuple), each with the 1-minute load average before the first round and after the last."""
    check_repeats(repeats)
    before = load_average()
    values: dict[Any, list[Any]] = {name: [] for name in measures}
    for _ in range(repeats):
        for name, measure in measures.items():
            values[name].append(measure())
    after = load_average()

    def spread(runs: list[Any]) -> Any:
        if isinstance(runs[0], tuple):
            return tuple(Spread(column, before, after) for column in zip(*runs))
        return Spread(runs, before, after)
    return {name: spread(runs) for name, runs in values.items()}


def stopwatch(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter,
              outputs: list[Any] | None = None) -> Callable[[], float]:
    """A measure for `interleaved`: it calls fn() and returns the seconds the call took by `clock`, and appends
    what fn returned to `outputs` when given."""
    def measure() -> float:
        start = clock()
        out = fn()
        seconds = clock() - start
        if outputs is not None:
            outputs.append(out)
        return seconds
    return measure


def median_time(fn: Callable[[], Any], repeats: int = REPEATS, warm_up: bool = True,
                clock: Callable[[], float] = time.perf_counter) -> Spread:
    """Wall-clock seconds of fn() over `repeats` calls (a Spread: as a float, their median), after one warm-up
    call (warm_up=False: none, for a function that has just run)."""
    check_repeats(repeats)
    if warm_up:
        fn()
    return interleaved({0: stopwatch(fn, clock)}, repeats)[0]


def timed(fn: Callable[[], Any], repeats: int = 1,
          clock: Callable[[], float] = time.perf_counter) -> tuple[Spread, Any]:
    """(seconds of `repeats` calls of fn(), a Spread: as a float, their median; what the first call returned),
    with no warm-up: a result that is both checked and timed costs one run, not two."""
    outputs: list[Any] = []
    return interleaved({0: stopwatch(fn, clock, outputs)}, repeats)[0], outputs[0]


def prefill_then_decode(model: TinyLM | CompiledDecoder | LayerLoopDecoder, prompt: torch.Tensor, new: int,
                        clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """One run: (seconds of the prefill of prompt (B, T) into a new KV cache, seconds of one decoding step after
    it, the median over `new` steps after one untimed step). A step is one forward of one token per row and its
    greedy choice; the median of single steps shrugs off a pause of the machine that a total would absorb."""
    check_int("new", new, low=1)
    B, T = prompt.shape
    times = []
    with torch.inference_mode():
        cache = model.new_cache(B, T + new + 1)
        start = clock()
        token = model(prompt, cache=cache)[0][:, -1:].argmax(-1)           # (B, 1)
        prefill = clock() - start
        for step in range(new + 1):
            start = clock()
            token = model(token, cache=cache)[0][:, -1:].argmax(-1)
            if step:
                times.append(clock() - start)
    return prefill, statistics.median(times)


def decode_seconds(model: TinyLM | CompiledDecoder | LayerLoopDecoder, prompt: torch.Tensor, new: int,
                   repeats: int = 1) -> Spread:
    """Seconds of one decoding step over `repeats` runs (a Spread: as a float, their median); in each run the
    prompt (B, T) is prefilled into a KV cache, untimed, and the step's time is the median over `new` steps
    after one untimed step (`prefill_then_decode`). model: a TinyLM, or a `tinylm.fast.decoder` (its caches, its
    compiled steps)."""
    check_repeats(repeats)
    return interleaved({"decode": lambda: prefill_then_decode(model, prompt, new)[1]}, repeats)["decode"]


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


def memory_bandwidth(mib: int = 256, repeats: int = 5) -> Spread:
    """Bytes/s of a large copy (each byte read once and written once): what decoding can stream at most. A
    Spread over `repeats` copies after a warm-up one: as a float, their median."""
    src = torch.ones(mib * 2**18)                                # mib MiB of fp32
    dst = torch.empty_like(src)
    return median_time(lambda: dst.copy_(src), repeats).map(lambda t: 2 * src.nbytes / t)


def matmul_flops(n: int = 1024, repeats: int = 5) -> Spread:
    """fp32 FLOP/s of an n x n matrix product (2 n^3 operations), a Spread over `repeats` products after a
    warm-up one."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return median_time(lambda: a @ b, repeats).map(lambda t: 2 * n**3 / t)


def _threads(threads: int | None) -> int:
    n = threads or os.cpu_count() or 1
    torch.set_num_threads(n)
    return n


def machine(threads: int = 1) -> dict[str, Any]:
    """The CPU (cpu_flags, torch's kernel capability, cores), which pins this process has (none, from
    `unpinned`), and its memory bandwidth and fp32 matmul FLOP/s at `threads` threads (Spreads of 5 runs)."""
    n = _threads(threads)
    return {**cpu_flags(), "capability": torch.backends.cpu.get_cpu_capability(), "cores": os.cpu_count(),
            "threads": n, "pinned": [k for k in PINNED if k in os.environ], "bandwidth": memory_bandwidth(),
            "flops": matmul_flops()}


_LOADED: dict[str, Any] = {}


def smollm2(fmt: str) -> TinyLM:
    """SmolLM2-135M in format fmt, made once per process: fp32 is the file dequantized, q4 the file's own
    4-bit blocks (`tinylm.gguf_q4`), bf16 and int8 `tinylm.quantize.quantize` of fp32, w8a8 of int8, q4a8 of
    q4 (the same weights, `tinylm.quantize.to_q4a8`)."""
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
        else:                                        # w8a8 on int8's codes, q4a8 on q4's: one quantization
            start = {"w8a8": "int8", "q4a8": "q4"}.get(fmt, "fp32")
            _LOADED[fmt] = quantize(copy.deepcopy(smollm2(start)), fmt)
    return _LOADED[fmt]


def _prompt(batch: int = 1, length: int = 8) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 49152, (batch, length), generator=g)   # SmolLM2's vocabulary


def formats(formats: list[str] = list(FORMATS), new: int = 8, repeats: int = REPEATS, threads: int = 1,
            prefill: int = 64, warm_up: bool = True) -> dict[str, dict[str, Any]]:
    """Per format: `bytes` read per decoding step; `prefill`, the seconds of a prefill of `prefill` tokens,
    and `seconds`, of one decoding step after it (the median of `new` steps), each a Spread over `repeats`
    rounds that run the formats in turn (`prefill_then_decode`). warm_up: one untimed run per format first."""
    from .quantize import weight_bytes_per_token

    check_repeats(repeats)
    _threads(threads)
    long = _prompt(1, prefill)
    if warm_up:
        for f in formats:
            prefill_then_decode(smollm2(f), long, 1)
    runs = interleaved({f: (lambda f=f: prefill_then_decode(smollm2(f), long, new)) for f in formats}, repeats)
    return {f: {"bytes": weight_bytes_per_token(smollm2(f)), "seconds": runs[f][1], "prefill": runs[f][0]}
            for f in formats}


def threads(formats: list[str] = ["fp32", "q4"], counts: list[int] | None = None, new: int = 8,
            repeats: int = REPEATS, prompt: int = 1) -> dict[str, dict[str, Spread]]:
    """{format: {thread count: seconds of one decoding step}} at 1 .. all cores (or `counts`), each a Spread
    over `repeats` rounds that run every count and format in turn (`decode_seconds` of a `prompt`-token
    prompt: its prefill is one step's work)."""
    check_repeats(repeats)
    counts = counts or list(range(1, (os.cpu_count() or 1) + 1))                 # 1 .. all cores
    ids = _prompt(1, prompt)

    def at(n: int, f: str) -> Callable[[], float]:
        def measure() -> float:
            _threads(n)
            return decode_seconds(smollm2(f), ids, new)
        return measure
    runs = interleaved({(f, n): at(n, f) for n in counts for f in formats}, repeats)
    return {f: {str(n): runs[f, n] for n in counts} for f in formats}


def batch(fmt: str = "fp32", sizes: list[int] = [1, 4, 16], new: int = 4, repeats: int = REPEATS,
          threads: int = 1, prompt: int = 1) -> dict[str, Spread]:
    """{batch size: seconds of one decoding step of that many rows}, each a Spread over `repeats` rounds that
    run the sizes in turn (`decode_seconds` of a `prompt`-token prompt per row)."""
    check_repeats(repeats)
    _threads(threads)
    model = smollm2(fmt)
    ids = {b: _prompt(b, prompt) for b in sizes}
    runs = interleaved({b: (lambda b=b: decode_seconds(model, ids[b], new)) for b in sizes}, repeats)
    return {str(b): runs[b] for b in sizes}


def speculative(fmt: str = "q4", prompts: dict[str, str] | None = None, new: int = 32, k: int = 8,
                repeats: int = REPEATS, threads: int = 1) -> dict[str, dict[str, Any]]:
    """Per prompt (a chat message): `plain_seconds` of greedy decoding of `new` tokens and `speculative_seconds`
    of prompt-lookup speculative decoding (`tinylm.speculative`, k drafted tokens at most), each a Spread over
    `repeats` rounds that run both on every prompt in turn; the first run's statistics (drafted, accepted,
    forwards, new), and whether its tokens are plain greedy's (`same`). No warm-up: earlier jobs have run the
    model, and the first run is both timed and checked."""
    from .speculative import speculative_generate

    check_repeats(repeats)
    _threads(threads)
    model = smollm2(fmt)
    tok = _LOADED["tokenizer"]                       # set by either loader
    measures, outputs = {}, {}
    for name, text in (prompts or {}).items():
        ids = torch.tensor([tok.encode_chat([{"role": "user", "content": text}])])
        outputs[name] = [], []
        measures[name, "plain"] = stopwatch(lambda ids=ids: generate(model, ids, new, temperature=0.0),
                                            outputs=outputs[name][0])
        measures[name, "speculative"] = stopwatch(lambda ids=ids: speculative_generate(model, ids, new, k=k),
                                                  outputs=outputs[name][1])
    runs = interleaved(measures, repeats)
    out = {}
    for name, (plain, spec) in outputs.items():
        tokens, stats = spec[0]
        out[name] = {**stats, "plain_seconds": runs[name, "plain"],
                     "speculative_seconds": runs[name, "speculative"], "same": bool(torch.equal(plain[0], tokens))}
    return out


def overhead(new: int = 16, repeats: int = REPEATS, threads: int = 1) -> Spread:
    """Seconds per decoding step of SmolLM2's 30 layers and 9/3 heads at width 72 (vocab 256): the Python and
    dispatch work of a step, with almost no arithmetic and almost no bytes. A Spread over `repeats` runs."""
    _threads(threads)
    cfg = Config(vocab_size=256, dim=72, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=8, ffn_dim=192,
                 max_seq_len=256, tie_embeddings=True)
    torch.manual_seed(0)
    model = TinyLM(cfg).eval()
    return decode_seconds(model, torch.randint(0, 256, (1, 8)), new, repeats)


def compiled(formats: list[str] = ["fp32", "q4"], counts: list[int] | None = None, new: int = 32,
             repeats: int = REPEATS, check: int = 64) -> dict[str, dict[str, Any]]:
    """The overhead switch (`tinylm.fast.decoder`: the q4a8 layer loop, or the compiled block) per format and
    thread count ("fp32 @ 1", ...): seconds of the first compiled run, compile included (`first`, one run: a
    Spread of n=1); seconds per decoding step, eager and compiled, each a Spread over `repeats` interleaved
    rounds (`eager`, `compiled`); and, once per format, whether greedy decoding of `check` tokens gives eager's tokens (`same`, at the last
    thread count)."""
    check_repeats(repeats)
    counts = counts or list(range(1, (os.cpu_count() or 1) + 1))
    out: dict[str, dict[str, Any]] = {}
    for f in formats:
        model, prompt = smollm2(f), _prompt(1, 64)
        fast = decoder(model)
        for n in counts:
            _threads(n)
            first = timed(lambda: decode_seconds(fast, prompt, 1))[0]
            runs = interleaved({"eager": lambda: decode_seconds(model, prompt, new),
                                "compiled": lambda: decode_seconds(fast, prompt, new)}, repeats)
            out[f"{f} @ {n}"] = {"first": first, **runs}
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
    results["load_average"] = {"before": load_average()}
    for job, kwargs in todo.items():
        start = time.process_time()
        results[job] = JOBS[job](**kwargs)
        results["cpu_seconds"][job] = time.process_time() - start
    results["load_average"]["after"] = load_average()
    print(json.dumps(to_json(results)))
