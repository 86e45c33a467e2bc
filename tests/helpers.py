"""Small model builders shared by the cache and generation tests, slices of the shipped corpus, and `limits`
(a deadline and a memory cap for hostile inputs)."""

import json
import resource
import signal
from contextlib import contextmanager
from pathlib import Path

import torch

from tinylm import Config, TinyLM, corpus


def tiny(**changes) -> Config:
    base = dict(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=32)
    return Config(**{**base, **changes})


def random_model(cfg: Config, std: float = 0.3, seed: int = 0) -> TinyLM:
    """Weights at std 0.3 (not the 0.02 init): attention is sharp, positions matter, greedy choices are clear
    winners and outputs vary along the sequence. Norm gains are not all ones, so a skipped norm would show."""
    torch.manual_seed(seed)
    model = TinyLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, std)
            else:
                p.copy_(1 + 0.2 * torch.randn_like(p))
    return model


def corpus_text(n_chars: int) -> str:
    """The first n_chars characters of the shipped training stories (`tinylm.corpus.story_text`)."""
    return corpus.story_text("train")[:n_chars]


def chat_jsonl(n: int) -> str:
    """The first n training conversations of the shipped corpus as a .jsonl file's text."""
    return "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in corpus.conversations("train")[:n])


@contextmanager
def limits(seconds: float = 10.0, headroom: int = 1 << 30):
    """Fail (TimeoutError) after `seconds`, and cap the address space at what is mapped now + `headroom`."""
    def time_up(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    statm = Path("/proc/self/statm")        # Linux (CI); elsewhere only the deadline applies
    if statm.exists():
        mapped = int(statm.read_text().split()[0]) * resource.getpagesize()
        cap = mapped + headroom if hard == resource.RLIM_INFINITY else min(mapped + headroom, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    previous = signal.signal(signal.SIGALRM, time_up)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)   # again every second: a handler that runs inside a gc
                                                         # callback has its exception swallowed
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def fake_run_start(monkeypatch, sweep) -> None:
    """tools/sweep.py's `start` (what every run tool does first) without its work: threads left alone, a one-word
    text for each split, a made-up matmul peak. sweep: the tools/sweep.py module the test imported."""
    monkeypatch.setattr(sweep, "matmul_peak_flops", lambda: 1e9)
    monkeypatch.setattr(sweep.corpus, "shakespeare_text", lambda split: "text")
    monkeypatch.setattr(sweep.torch, "set_num_threads", lambda n: None)
