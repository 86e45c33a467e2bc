"""Chapter 16's exercise checker: the learner writes the LoRA forward, graded against `tinylm.lora.LoRALinear`."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from .. import lora
from .._checks import check_int
from .checkers import Verdict, _as_numpy, check_function
from .sandbox import _call_with_deadline

# (batch shape, in, out, r, alpha): a square layer (like q_proj), where (B A)ᵀ fits too, and alpha / r
# neither 1 nor alpha, so that a forgotten or wrong scale, and a transposed product, all show.
_LORA_CASES = [((3,), 6, 6, 2, 16.0), ((2, 4), 8, 5, 3, 6.0), ((1,), 12, 20, 8, 4.0)]


def lora_reference(x: torch.Tensor, W: torch.Tensor, A: torch.Tensor, B: torch.Tensor, alpha: float) -> torch.Tensor:
    """tinylm.lora.LoRALinear's output for x (..., in), W (out, in), A (r, in), B (out, r): (..., out)."""
    base = nn.Linear(W.shape[1], W.shape[0], bias=False)
    layer = lora.LoRALinear(base, lora.LoRAConfig(rank=A.shape[0], alpha=alpha))
    with torch.no_grad():
        base.weight.copy_(W)
        layer.lora_A.copy_(A)
        layer.lora_B.copy_(B)
        return layer(x)


def check_lora_forward(user_fn: Callable, seed: int = 0) -> Verdict:
    """Grade user_fn(x, W, A, B, alpha) -> W x + (alpha / r) B A x, with r = A.shape[0], against
    `tinylm.lora.LoRALinear` on random float32 tensors (B not zero); calling tinylm.lora is refused.

    A NOT YET on the values says when the answer is a common slip: the scale left out, alpha without the
    division by r, or the product B A transposed."""
    if not callable(user_fn):
        raise ValueError(f"user_fn must be a function (x, W, A, B, alpha) -> tensor, got {type(user_fn).__name__}")
    g = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    cases = [(torch.randn(*batch, d_in, generator=g), torch.randn(d_out, d_in, generator=g) / d_in**0.5,
              torch.randn(r, d_in, generator=g), torch.randn(d_out, r, generator=g), alpha)
             for batch, d_in, d_out, r, alpha in _LORA_CASES]
    verdict = check_function(user_fn, lora_reference, cases, name="your LoRA forward", forbid=[lora])
    if verdict or "values differ" not in verdict.message:
        return verdict
    x, W, A, B, alpha = cases[0]                 # the square case: which slip is it? (it ran once already)
    got = torch.from_numpy(_as_numpy(_call_with_deadline(user_fn, cases[0], 10.0))[0]).float()
    r = A.shape[0]
    slips = [(x @ W.T + x @ A.T @ B.T, "the update is scaled by alpha / r: it is missing"),
             (x @ W.T + alpha * (x @ A.T @ B.T), "the scale is alpha / r, not alpha"),
             (x @ W.T + alpha / r * (x @ (B @ A)), "B A is (out, in) like W: x @ (B @ A).T, not x @ (B @ A)")]
    hints = [hint for slip, hint in slips if got.shape == slip.shape and torch.allclose(got, slip, atol=1e-4)]
    return Verdict(False, verdict.message + (f" Hint: {hints[0]}." if hints else ""))
