"""What a training run achieved: bits per byte of a held-out text, FLOP/s, and MFU against the machine's peak.

    text_bits_per_byte(model, tok, text, seq_len)   exact bits per byte of the bytes the model predicts
    matmul_peak_flops()                            the fp32 matmul speed of this machine, measured
    throughput(cfg, seq_len, tokens_per_s, peak)   tokens/s -> achieved FLOP/s and model FLOP utilisation

MFU (Chowdhery et al., 2022) is achieved FLOP/s (`tinylm.params.train_flops_per_token` x tokens/s) over a
peak. A CPU has no datasheet peak for PyTorch, so the peak is measured: the best of a few square fp32 matrix
products, the operation that dominates training.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from .._checks import check_int
from ..config import Config
from ..model import TinyLM
from ..params import train_flops_per_token
from ..tokenizer import BPETokenizer


@torch.no_grad()
def text_bits_per_byte(model: TinyLM, tokenizer: BPETokenizer, text: str, seq_len: int, batch_size: int = 16
                       ) -> tuple[float, int, int]:
    """Bits per UTF-8 byte of text under model -> (bits per byte, bytes scored, tokens scored).

    The text's ids are cut into consecutive windows of seq_len + 1 ids overlapping by one (each window
    predicts its last seq_len ids from what comes before them in the window): every id but the first is
    predicted once. The bytes scored are those of the predicted ids (`token_bytes`), so the figure is exact:
    total negative log-likelihood / ln 2 / bytes. Comparable across tokenizers, and with a character model
    on ASCII text, where one character is one byte.
    """
    check_int("seq_len", seq_len, low=1, high=model.cfg.max_seq_len)
    check_int("batch_size", batch_size, low=1)
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    if len(ids) < 2:
        raise ValueError("text must hold at least two tokens: the first is never predicted")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    nats, n_tokens = 0.0, 0
    starts = list(range(0, len(ids) - 1, seq_len))
    try:
        for i in range(0, len(starts), batch_size):
            chunk = [ids[s : s + seq_len + 1] for s in starts[i : i + batch_size]]
            width = max(len(c) for c in chunk) - 1
            x = torch.zeros(len(chunk), width, dtype=torch.long)            # (B, T)
            y = torch.full((len(chunk), width), -100, dtype=torch.long)     # (B, T): -100 past a short window
            for b, c in enumerate(chunk):
                x[b, : len(c) - 1], y[b, : len(c) - 1] = c[:-1], c[1:]
            logits, _ = model(x.to(device))                                  # (B, T, V)
            nats += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten().to(device), ignore_index=-100,
                                    reduction="sum").item()
            n_tokens += int((y != -100).sum())
    finally:
        model.train(was_training)
    n_bytes = sum(len(tokenizer.token_bytes(int(t))) for t in ids[1:])
    return nats / math.log(2) / n_bytes, n_bytes, n_tokens


def matmul_peak_flops(n: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of the fastest of `repeats` fp32 (n, n) @ (n, n) products on the current threads."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b                                                        # warm up (allocations, kernel choice)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def throughput(cfg: Config, seq_len: int, tokens_per_s: float, peak_flops: float) -> tuple[float, float]:
    """(achieved FLOP/s, MFU) of training cfg at tokens_per_s, against peak_flops."""
    achieved = train_flops_per_token(cfg, seq_len) * tokens_per_s
    return achieved, achieved / peak_flops


def cpu_flags() -> set[str]:
    """The processor's feature flags (Linux /proc/cpuinfo); empty where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_class(flags: set[str] | None = None) -> str:
    """The class of x86 machine that decides which kernels run: 'AVX-512 with avx512_bf16 and VNNI', 'AVX2', ..."""
    flags = cpu_flags() if flags is None else flags
    if "avx512f" in flags:
        extras = [name for flag, name in (("avx512_bf16", "avx512_bf16"), ("avx512_vnni", "VNNI")) if flag in flags]
        return "AVX-512" + (f" with {' and '.join(extras)}" if extras else "")
    if "avx2" in flags:
        return "AVX2" + (" with AVX-VNNI" if "avx_vnni" in flags else " (no AVX-512, no VNNI)")
    return "no AVX2" if flags else "unknown"
