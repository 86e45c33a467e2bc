"""Mixture of experts: a router sends each token to its top-k of several SwiGLU experts.

    x (B, T, C) ──► gate ──► softmax ──► top-k ──► (renormalise)     weights (N, k), expert ids (N, k)
                │
                └──► group token-slots by expert ──► expert e runs once on its group ──► weighted sum back

Sparsely-gated mixture of experts: Shazeer et al., 2017. Top-1 routing and the load-balancing loss:
Fedus et al., 2021 (Switch Transformer). Top-2 with the k weights renormalised to sum to one:
Jiang et al., 2024 (Mixtral). Module names follow Hugging Face Mixtral / Qwen3-MoE (`gate`, `experts`).
Shapes: B batch, T time, C = dim, N = B*T tokens, k = experts_per_token, E = n_experts.

The experts are whatever module `expert()` builds (TinyLM passes a SwiGLU factory), so this file knows
nothing of `tinylm.model`.

Note on k = 1: after renormalisation the single weight is always exactly 1, so the language-model loss
sends no gradient to the router, and only the load-balancing loss moves it (towards balance, not towards
the expert that suits a token). Switch Transformer keeps the raw probability p instead (expert output
times p): `cfg.moe_renormalize=False` does that, and the language-model loss reaches the router again.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from .config import Config


class MoE(nn.Module):
    """Router + `cfg.n_experts` experts, each built by `expert()` (e.g. `lambda: SwiGLU(dim, ffn_dim)`);
    a drop-in for that expert on x (B, T, C) -> (B, T, C).

    Each forward stores `aux_loss` (Switch load-balancing loss, a scalar tensor with gradient to the
    router) and `last_counts` (LongTensor (E,), token-slots each expert received).
    """

    def __init__(self, cfg: Config, expert: Callable[[], nn.Module]):
        super().__init__()
        if cfg.n_experts < 1:
            raise ValueError(f"MoE needs n_experts >= 1, got {cfg.n_experts}; use SwiGLU for a dense layer")
        if isinstance(expert, nn.Module) or not callable(expert):   # one module, not a way to build several
            raise ValueError(f"expert must be a function that builds one expert, such as "
                             f"lambda: SwiGLU(cfg.dim, cfg.ffn_dim); got {type(expert).__name__}")
        self.n_experts, self.top_k = cfg.n_experts, cfg.experts_per_token
        self.renormalize = cfg.moe_renormalize
        self.gate = nn.Linear(cfg.dim, cfg.n_experts, bias=False)  # the router
        self.experts = nn.ModuleList(expert() for _ in range(cfg.n_experts))
        self.aux_loss: torch.Tensor | None = None
        self.last_counts: torch.Tensor | None = None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (..., C) -> weights (N, k), expert_ids (N, k), probs (N, E) in fp32.

        The weights sum to one per token when `renormalize` (Mixtral); otherwise they are the raw
        router probabilities of the chosen experts (Switch Transformer).
        """
        logits = self.gate(x.reshape(-1, x.shape[-1]))                  # (N, E)
        probs = logits.float().softmax(dim=-1)                          # (N, E), fp32 like HF
        weights, expert_ids = probs.topk(self.top_k, dim=-1)           # (N, k), (N, k)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)       # (N, k), Mixtral
        return weights, expert_ids, probs

    def load_balancing_loss(self, expert_ids: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """Switch loss E * sum_i f_i * P_i: f_i share of token-slots sent to expert i, P_i its mean probability.

        Equals 1 when routing is uniform, and grows to E when every token goes to one confident expert.
        But 1 does not prove balance: with flat mean probabilities (P_i = 1/E) it is sum_i f_i = 1 whatever
        the assignment. Hugging Face's Mixtral loss differs in two ways: its f_i counts all k choices per
        token (k at balance, not 1), and it pools f and P over all layers before the product.
        """
        counts = torch.bincount(expert_ids.flatten(), minlength=self.n_experts)  # (E,)
        f = counts.float() / expert_ids.numel()                          # (E,), no gradient (argmax)
        P = probs.mean(dim=0)                                            # (E,), gradient to the router
        return self.n_experts * (f * P).sum()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])                                     # (N, C)
        weights, expert_ids, probs = self.route(x)                       # (N, k), (N, k), (N, E)
        self.aux_loss = self.load_balancing_loss(expert_ids, probs)
        # Group the N*k token-slots by expert: slot s belongs to token s // k.
        flat_ids = expert_ids.flatten()                                  # (N*k,)
        order = flat_ids.argsort(stable=True)                            # (N*k,) slots sorted by expert
        counts = torch.bincount(flat_ids, minlength=self.n_experts)      # (E,)
        self.last_counts = counts.detach()
        slot_weights = weights.flatten().to(x.dtype)                     # (N*k,)
        out = torch.zeros_like(x)                                        # (N, C)
        for e, slots in enumerate(order.split(counts.tolist())):         # one call per expert, not per token
            if slots.numel() == 0:
                continue
            tokens = slots // self.top_k                                 # (n_e,) token index of each slot
            y = self.experts[e](x.index_select(0, tokens))               # (n_e, C)
            out.index_add_(0, tokens, y * slot_weights[slots, None])     # add back, weighted
        return out.view(shape)                                           # (B, T, C)


def moe_naive(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The same output as `moe(x)`, one token at a time (slow; for tests and the speed comparison).

    x (B, T, C) -> (B, T, C). Does not touch `moe.aux_loss` or `moe.last_counts`.
    """
    flat = x.reshape(-1, x.shape[-1])                                    # (N, C)
    rows = []
    for token in flat:                                                   # (C,)
        probs = moe.gate(token).float().softmax(dim=-1)                  # (E,)
        weights, ids = probs.topk(moe.top_k)                             # (k,), (k,)
        if moe.renormalize:
            weights = weights / weights.sum()
        y = torch.zeros_like(token)
        for w, e in zip(weights, ids.tolist()):
            y = y + w.to(x.dtype) * moe.experts[e](token)
        rows.append(y)
    return torch.stack(rows).view(x.shape)                               # (B, T, C)
