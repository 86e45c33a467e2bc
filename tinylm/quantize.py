"""Weight formats for CPU inference: `quantize(model, "bf16" | "int8" | "w8a8" | "q4")`, and how close each is to fp32.

Decoding one token reads every weight once, so fewer bytes per weight is more tokens per second:

    format  bytes/weight   what changes
    fp32    4              nothing (the model as trained or loaded)
    bf16    2              every parameter in bfloat16, so activations and the KV cache are bf16 too;
                           RMSNorm still squares in fp32 inside (model.RMSNorm); the RoPE tables stay float64
    int8    1 (+ scales)   the attention and SwiGLU linears, and the output head, hold int8 weights with one
                           fp32 scale per output channel (weight-only: `Int8Linear` multiplies bf16 activations;
                           norms, the embedding and the KV cache stay fp32)
    w8a8    1 (+ scales)   the same int8 weights, and the activations quantized to 8 bits per token: integer
                           products and sums, exact (`tinylm.w8a8.W8A8Linear`)
    q4      0.5625         4-bit codes in blocks of 32 with a scale and a zero each, llama.cpp's Q4_1
                           (`tinylm.q4.Q4Linear`, torch's int4 kernel); `tinylm.gguf_q4.load_gguf_q4` runs a
                           GGUF file's own Q4_0/Q4_1 blocks this way, with nothing requantized
    q4a8    0.75           q4's weights (d and m kept in fp32), and the activations quantized to 8 bits per
                           block of 32: integer dot products, as llama.cpp does (`tinylm.a8`, a C++ kernel
                           compiled on first use; an int8 head runs the same way); `to_q4a8` converts a q4 model

int8, per output channel, symmetric (as in LLM.int8's vector-wise quantization, Dettmers et al., 2022):

    scale[n] = max_k |w[n, k]| / 127        q[n, k] = round(w[n, k] / scale[n])  in [-127, 127]
    w[n, k] ≈ q[n, k] * scale[n]            error ≤ scale[n] / 2 per element

An `Int8Linear` multiplies with `torch.ops.aten._weight_int8pack_mm` (int8 weights, bf16 activations,
per-channel scales) where that kernel is known to be right (`tinylm.kernels.int8pack_fits`: in_features a
multiple of 16; outside it the kernel segfaults or returns wrong numbers), else with the plain dequantize
fallback, `F.linear(x, q) * scale`. The rule is that, fixed, not a race: the fallback is the readable definition
and the tests keep the two equal. A tied head (SmolLM2) gets its own quantized copy; the embedding keeps its
fp32 rows for the lookup, which reads one row per token.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import a8
from ._checks import check_bool, check_int, check_one_of
from .generate import generate
from .kernels import HAVE_INT8PACK, int8pack_fits
from .model import TinyLM
from .q4 import GROUP, Q4Linear, quantize_q4_1
from .w8a8 import W8A8Linear

FORMATS = ("bf16", "int8", "w8a8", "q4", "q4a8")
# torch's fused kernel for int8 weights and bf16 activations (CPU since torch 2.4); else the fallback
KERNEL = HAVE_INT8PACK


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (N, K) float -> q (N, K) int8 in [-127, 127], scale (N,) fp32: symmetric, one scale per row.

    A row of zeros gets scale 0 (and q 0), so it dequantizes to zeros exactly.
    """
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        got = f"shape {tuple(w.shape)}, dtype {w.dtype}" if isinstance(w, torch.Tensor) else type(w).__name__
        raise ValueError(f"w must be a 2-D float tensor (out_features, in_features), got {got}")
    w = w.detach().float()
    scale = w.abs().amax(dim=1) / 127                                        # (N,)
    q = torch.round(w / torch.where(scale > 0, scale, 1.0)[:, None])         # (N, K) in [-127, 127]
    return q.clamp(-127, 127).to(torch.int8), scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """q (N, K) int8, scale (N,) -> w (N, K) fp32 = q * scale, row by row."""
    return q.float() * scale.float()[:, None]


class Int8Linear(nn.Module):
    """A bias-free linear layer with int8 weights (N, K) and fp32 per-output-channel scales (N,).

    x (..., K) -> (..., N) in x's dtype. kernel=True: `_weight_int8pack_mm` on bf16 activations (its
    vectorised path; with fp32 activations it is ~10x slower here), where it fits (K a multiple of 16: see
    `tinylm.kernels`). kernel=False, or a K it does not fit: dequantize, then `F.linear` with the activations
    rounded to bf16 as the kernel rounds them, so both give the same numbers.
    """

    def __init__(self, weight: torch.Tensor, kernel: bool = KERNEL):
        super().__init__()
        q, scale = quantize_int8(weight)
        self.register_buffer("weight", q)                    # (N, K) int8
        self.register_buffer("scale", scale)                 # (N,) fp32
        # (N,) the scales as both paths multiply by them, rounded to bf16 once (not per call; not saved)
        self.register_buffer("scale_bf16", scale.to(torch.bfloat16), persistent=False)
        self.kernel = kernel and int8pack_fits(q.shape[1])

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, dtype = x.shape, x.dtype
        xb = x.reshape(-1, shape[-1]).to(torch.bfloat16)                        # (M, K)
        if self.kernel:
            y = torch.ops.aten._weight_int8pack_mm(xb, self.weight, self.scale_bf16)
        else:
            # the scale is per output channel, so it factors out of the sum: (x @ q.T) * scale == x @ (q*s).T
            y = F.linear(xb.float(), self.weight.float()) * self.scale_bf16.float()
            y = y.to(torch.bfloat16)                                             # as the kernel returns it
        return y.to(dtype).reshape(*shape[:-1], self.out_features)              # (..., N)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8, kernel={self.kernel}"


def _linears(model: TinyLM, head: bool) -> list[tuple[nn.Module, str, nn.Linear]]:
    """(parent, attribute, layer) of every linear to quantize: attention and SwiGLU projections (experts
    too; an MoE router stays fp32: its top-k choice is all it computes), and the output head."""
    found = []
    for layer in model.layers:
        for parent in layer.modules():
            for name, child in parent.named_children():
                if isinstance(child, nn.Linear) and name.endswith("_proj"):
                    found.append((parent, name, child))
    if head:
        found.append((model, "lm_head", model.lm_head))
    return found


def weight_format(model: TinyLM) -> str:
    """'fp32', 'bf16', 'int8', 'w8a8', 'q4' or 'q4a8': the format `quantize` (or `load_gguf_q4`, `to_q4a8`) left
    the model in."""
    for kind, fmt in ((a8.Q4A8Linear, "q4a8"), (Q4Linear, "q4"), (W8A8Linear, "w8a8"), (Int8Linear, "int8")):
        if any(isinstance(m, kind) for m in model.modules()):
            return fmt
    return "bf16" if model.embed_tokens.weight.dtype == torch.bfloat16 else "fp32"


def quantize(model: TinyLM, fmt: str, head: bool = True, kernel: bool = KERNEL) -> TinyLM:
    """Convert a fp32 TinyLM to `fmt` ("bf16", "int8", "w8a8", "q4" or "q4a8") in place, for inference; return
    it (in eval mode). An int8 model becomes w8a8 on its own int8 weights and scales (the same as from fp32), a
    q4 model q4a8 (`to_q4a8`).

    head (int8, w8a8, q4): quantize the output head too (a tied head gets its own copy, the embedding stays
    fp32). kernel (int8, q4): use torch's kernel where it fits (True) or the readable fallback everywhere
    (False). q4 quantizes each weight as llama.cpp's Q4_1 does (`tinylm.q4.quantize_q4_1`) and needs every
    in_features a multiple of 32; q4a8 is q4 then `to_q4a8` (it needs a C++ compiler: `tinylm.a8`).
    `generate` and `model.new_cache()` work unchanged (bf16: a bf16 cache).
    """
    if not isinstance(model, TinyLM):
        raise ValueError(f"model must be a tinylm.TinyLM, got {type(model).__name__}")
    check_one_of("fmt", fmt, FORMATS, hint=" (fp32 is the model as it is)")
    check_bool("head", head)
    check_bool("kernel", kernel)
    if model.cfg.bias:
        raise ValueError("quantize's linears are bias-free, this model has cfg.bias=True; quantize a model "
                         "with bias=False")
    have = weight_format(model)
    if (have, fmt) == ("int8", "w8a8"):              # the same int8 weights and scales: nothing quantized again
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, Int8Linear):
                    setattr(parent, name, W8A8Linear(child.weight, child.scale))
        return model.eval().requires_grad_(False)
    if (have, fmt) == ("q4", "q4a8"):
        return to_q4a8(model)
    if have != "fp32" or any(p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError(f"model must be fp32 to quantize (or int8, to make it w8a8), it is already {have}; "
                         "load or build a fresh fp32 model and quantize that")
    if fmt == "bf16":
        for p in model.parameters():                 # parameters only: the float64 RoPE tables stay exact
            p.data = p.data.to(torch.bfloat16)
        return model.eval().requires_grad_(False)
    if fmt == "q4a8":
        a8.require()                                 # before any work: no compiler, no q4a8
        return to_q4a8(quantize(model, "q4", head, kernel))
    linears = _linears(model, head)
    if fmt == "q4":
        odd = [f"{name} (in_features {lin.in_features})" for _, name, lin in linears if lin.in_features % GROUP]
        if odd:
            raise ValueError(f"q4 stores blocks of {GROUP} weights of a row, so every in_features must be a "
                             f"multiple of {GROUP}; not {', '.join(sorted(set(odd)))}: use int8 or w8a8")
    for parent, name, linear in linears:
        setattr(parent, name, quantized_linear(linear.weight, fmt, kernel))
    return model.eval().requires_grad_(False)


def to_q4a8(model: TinyLM) -> TinyLM:
    """A q4 model (`quantize(model, "q4")` or `load_gguf_q4`) to q4a8 in place: every `Q4Linear` becomes a
    `tinylm.a8.Q4A8Linear` with the same weights, every `Int8Linear` whose in_features is a multiple of 32
    (SmolLM2's head, stored as Q8_0) an `Int8A8Linear` with the same codes and scales. Returns the model."""
    if not isinstance(model, TinyLM) or weight_format(model) != "q4":
        got = weight_format(model) if isinstance(model, TinyLM) else type(model).__name__
        raise ValueError(f"to_q4a8 converts a q4 model (quantize(model, 'q4') or load_gguf_q4), got {got}")
    a8.require()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Q4Linear):
                setattr(parent, name, a8.Q4A8Linear.from_q4(child))
            elif isinstance(child, Int8Linear) and child.in_features % GROUP == 0:
                setattr(parent, name, a8.Int8A8Linear(child.weight, child.scale))
    return model.eval().requires_grad_(False)


def quantized_linear(weight: torch.Tensor, fmt: str, kernel: bool = KERNEL) -> nn.Module:
    """The layer `quantize` puts in place of a linear with this fp32 weight (N, K): Int8Linear, W8A8Linear,
    Q4Linear or Q4A8Linear for fmt "int8", "w8a8", "q4" or "q4a8"."""
    check_one_of("fmt", fmt, FORMATS[1:])
    if fmt == "int8":
        return Int8Linear(weight, kernel=kernel)
    if fmt == "w8a8":
        return W8A8Linear(*quantize_int8(weight))
    q4 = Q4Linear.from_blocks(*quantize_q4_1(weight), kernel=kernel)
    return a8.Q4A8Linear.from_q4(q4) if fmt == "q4a8" else q4


def weight_bytes_per_token(model: TinyLM) -> int:
    """Bytes of weights one decoding step reads: every matrix once, but only one embedding row per token.

    With a tied fp32 head the embedding matrix is read whole (as the head); int8 scales count too, as stored
    (fp32; the kernel reads Int8Linear's bf16 copy, which is not saved and not counted). The tensors counted
    are the state dict's: the RoPE tables are not weights.
    """
    read, seen = 0, set()
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen:
            continue
        seen.add(id(t))
        nbytes = t.numel() * t.element_size()
        if name == "embed_tokens.weight" and getattr(model.lm_head, "weight", None) is not t:   # only its row
            nbytes = t.shape[1] * t.element_size()
        read += nbytes
    return read


@torch.no_grad()
def compare(reference: TinyLM, model: TinyLM, ids: torch.Tensor, window: int = 512) -> dict[str, float]:
    """How close `model` predicts to `reference` on token ids (1, N), in windows of `window` tokens.

    Returns perplexity of each (exp of the mean next-token cross-entropy), their ratio, and top-1
    agreement: the share of positions where both put the same token first. Works for any two TinyLMs
    with the same vocabulary in any format (a real model and its quantized copy, or the trained mini
    companion). For the agreement of whole greedy continuations see `greedy_agreement`; for several
    models against one reference, `compare_all`.
    """
    return compare_all(reference, {"model": model}, ids, window)["model"]


@torch.no_grad()
def compare_all(reference: TinyLM, models: dict[str, TinyLM], ids: torch.Tensor, window: int = 512
                ) -> dict[str, dict[str, float]]:
    """{name: `compare(reference, model, ids, window)`} for each of `models`, the reference run once per window."""
    check_int("window", window, low=2)
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] < 2:
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"ids must be a (1, N) tensor of token ids with N >= 2, got {got}")
    nll_ref, nll, same, count = 0.0, dict.fromkeys(models, 0.0), dict.fromkeys(models, 0), 0
    for start in range(0, ids.shape[1] - 1, window):
        x = ids[:, start : start + window + 1]
        if x.shape[1] < 2:
            break
        inp, tgt = x[:, :-1], x[:, 1:]
        loss, top_ref = _nll_and_top(reference, inp, tgt)
        nll_ref += loss
        for name, m in models.items():
            loss, top = _nll_and_top(m, inp, tgt)
            nll[name] += loss
            same[name] += int((top == top_ref).sum())
        count += tgt.numel()
    ppl_ref = math.exp(nll_ref / count)
    ppl = {name: math.exp(n / count) for name, n in nll.items()}
    return {name: {"ppl_reference": ppl_ref, "ppl": ppl[name], "ppl_ratio": ppl[name] / ppl_ref,
                   "top1": same[name] / count, "tokens": count} for name in models}


def _nll_and_top(model: TinyLM, inp: torch.Tensor, tgt: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The summed next-token cross-entropy of tgt (1, T) after inp (1, T), and the argmax ids (1, T)."""
    logits = model(inp)[0].float()                                            # (1, T, V)
    return F.cross_entropy(logits[0], tgt[0], reduction="sum").item(), logits.argmax(-1)


def greedy_agreement(reference: TinyLM, model: TinyLM, prompt: torch.Tensor, new_tokens: int = 64) -> dict[str, int]:
    """Greedy continuations of prompt (1, T) by both models, new_tokens each, compared position by position.

    Returns `same_prefix` (how many tokens agree before the first difference: all of them if none), `same`
    (positions holding the same token, even after a divergence) and `tokens` (new_tokens).
    """
    check_int("new_tokens", new_tokens, low=1)
    outs = [generate(m, prompt, new_tokens, temperature=0.0)[0, prompt.shape[1]:] for m in (reference, model)]
    equal = (outs[0] == outs[1]).tolist()
    prefix = equal.index(False) if False in equal else len(equal)
    return {"same_prefix": prefix, "same": sum(equal), "tokens": new_tokens}
