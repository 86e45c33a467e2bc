"""The other blocks, for ablations: LayerNorm or no norm, the GELU MLP, post-norm, learned positions, and the check
for Llama-only code.

    field             tinylm (Llama/Qwen3)    the variants
    norm              "rmsnorm"               "layernorm" (GPT-2; a bias with cfg.bias), "none"
    norm_placement    "pre": x + f(norm(x))   "post": norm(x + f(x)) (Vaswani et al., 2017), no final norm
    positions         "rope"                  "learned" (GPT-2's absolute embedding), "none" (NoPE)
    mlp               "swiglu"                "gelu": down(gelu(up(x))) (GPT-2)
    bias              False                   True: biases in every attention and MLP linear (GPT-2)

GPT-2 (Radford et al., 2019) is layernorm + pre + learned + gelu + bias with a tied head: the same logits as
`transformers`' GPT2LMHeadModel on the same weights (tests/test_variants.py). `tinylm.model` builds the norms
and MLPs through `make_norm` and `make_mlp`, as it builds experts for `tinylm.moe`, and swaps in post-norm
(`use_post_norm`) and learned positions (`use_learned_positions`) once built; this file knows nothing of
`tinylm.model`. Shapes: B batch, T time, C = dim, F = ffn_dim.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_bool, check_int
from .config import Config


def norm(cfg: Config, dim: int) -> nn.Module:
    """A variant's norm over the last dim: LayerNorm (Ba et al., 2016; a bias when cfg.bias), or none."""
    if cfg.norm == "layernorm":
        return nn.LayerNorm(dim, eps=cfg.norm_eps, bias=cfg.bias)
    if cfg.norm == "none":
        return nn.Identity()
    raise ValueError(f"norm={cfg.norm!r} is not a variant's norm; tinylm.model.make_norm builds RMSNorm")


class GELUMLP(nn.Module):
    """down(gelu(up(x))), GPT-2's MLP, with GELU's tanh approximation as GPT-2 has it (Hendrycks & Gimpel,
    2016). Two matrices where SwiGLU has three: `gelu_ffn_dim` gives the width of equal parameters."""

    def __init__(self, dim: int, ffn_dim: int, bias: bool = False):
        super().__init__()
        self.up_proj = nn.Linear(dim, ffn_dim, bias=bias)
        self.down_proj = nn.Linear(ffn_dim, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))  # (B, T, F) -> (B, T, C)


def gelu_ffn_dim(dim: int, swiglu_ffn_dim: int, bias: bool = False) -> int:
    """The hidden width F' of a GELU MLP with the parameters of a SwiGLU of hidden width F.

    SwiGLU: 3 C F (+ 2 F + C biases); GELU: 2 C F' (+ F' + C). Without biases F' = 3 F / 2, exact for an
    even F; with biases F' = F (3 C + 2) / (2 C + 1), rounded to the nearest width (the counts then differ
    by at most C).
    """
    dim, swiglu_ffn_dim = check_int("dim", dim, low=1), check_int("swiglu_ffn_dim", swiglu_ffn_dim, low=1)
    check_bool("bias", bias)
    if bias:
        return max(1, round(swiglu_ffn_dim * (3 * dim + 2) / (2 * dim + 1)))
    if swiglu_ffn_dim % 2:
        raise ValueError(f"a GELU MLP matches a SwiGLU of hidden width {swiglu_ffn_dim} only for an even width "
                         f"(F' = 3 F / 2); use swiglu_ffn_dim={swiglu_ffn_dim + 1}")
    return 3 * swiglu_ffn_dim // 2


class PostNormBlock(nn.Module):
    """The original Transformer's block (Vaswani et al., 2017): transform, add, then normalise the sum,
    x = norm(x + f(x)) twice, so the residual stream itself is normalised. Built from a pre-norm block's own
    parts (its attention, MLP and two norms: the input norm becomes the one after the feed-forward, Gemma 2's
    name for it), so the weights are drawn as a pre-norm model's would be."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.self_attn = block.self_attn
        self.post_attention_layernorm = block.post_attention_layernorm
        self.mlp = block.mlp
        self.post_feedforward_layernorm = block.input_layernorm
        self.dropout = block.dropout   # residual dropout, in training only, as the pre-norm block's

    def forward(self, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None,
                cache=None, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.self_attn(x, cos, sin, cache) if mask is None else self.self_attn(x, cos, sin, cache, mask)
        x = self.post_attention_layernorm(x + self._drop(y))                    # (B, T, C)
        return self.post_feedforward_layernorm(x + self._drop(self.mlp(x)))

    def _drop(self, y: torch.Tensor) -> torch.Tensor:
        return F.dropout(y, self.dropout, self.training) if self.dropout and self.training else y


def use_post_norm(model: nn.Module) -> nn.Module:
    """Swap a freshly built model's pre-norm blocks for post-norm ones, and its final norm for nothing (the
    last block's output is normalised already). `TinyLM` calls it for cfg.norm_placement="post"."""
    for i, block in enumerate(model.layers):
        model.layers[i] = PostNormBlock(block)
    model.norm = nn.Identity()
    return model


class LearnedPositions(nn.Embedding):
    """GPT-2's input: a token's vector plus its position's, wte[idx] + wpe[pos], both learned (Radford et al.,
    2019). It takes over a model's token embedding (its very weight: a tied head stays tied, the state-dict key
    stays 'embed_tokens.weight') and reads `positions`, the model's (max_seq_len, C) table, which the model
    registers, not this module: its key stays 'embed_positions.weight'."""

    def __init__(self, tokens: nn.Embedding, positions: nn.Embedding):
        super().__init__(tokens.num_embeddings, tokens.embedding_dim, _weight=tokens.weight)  # nothing drawn
        self.weight = tokens.weight
        self.__dict__["positions"] = positions   # held, not registered (or its weight would be saved twice)

    def forward(self, idx: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
        """idx (B, T) token ids at positions pos: (T,) for every row, or (B, T) each row's own (a left-padded
        batch counts a row's real tokens only); None: 0 ... T-1."""
        if pos is None:
            pos = torch.arange(idx.shape[-1], device=idx.device)
        return super().forward(idx) + self.positions(pos)                        # (B, T, C)


def use_learned_positions(model: nn.Module) -> nn.Module:
    """Give a model being built GPT-2's learned absolute positions: a (max_seq_len, C) table registered as
    `model.embed_positions`, and the token embedding swapped for a `LearnedPositions` reading it; the forward
    pass hands the embedding each token's position. `TinyLM` calls it for cfg.positions="learned" right after
    its token embedding, before the blocks: the table is drawn, initialised and saved next after the token
    embedding, as GPT-2's wpe after its wte."""
    tokens = model.embed_tokens
    model.embed_positions = nn.Embedding(model.cfg.max_seq_len, tokens.embedding_dim)
    model.embed_tokens = LearnedPositions(tokens, model.embed_positions)
    return model


LLAMA_BLOCK = {"norm": "rmsnorm", "norm_placement": "pre", "positions": "rope", "mlp": "swiglu", "bias": False}


def check_llama_block(cfg: Config, what: str) -> None:
    """ValueError unless cfg has tinylm's own block: for code that only knows Llama/Qwen3 (the Hugging Face
    export, the NumPy model and backpropagation, quantization)."""
    changed = {k: getattr(cfg, k) for k, v in LLAMA_BLOCK.items() if getattr(cfg, k) != v}
    if changed:
        fields = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        raise ValueError(f"{what} knows tinylm's Llama/Qwen3 block only, this config has {fields}; use the "
                         f"defaults {', '.join(f'{k}={LLAMA_BLOCK[k]!r}' for k in changed)}")
