"""The whole model in one file: a Llama/Qwen3-style decoder-only transformer.

    idx (B, T) ──► embed_tokens ──► [ Block ] x n_layers ──► norm ──► lm_head ──► logits (B, T, V)

    Block (pre-norm):   x = x + self_attn(input_layernorm(x))          RoPE, grouped KV heads, causal
                        x = x + mlp(post_attention_layernorm(x))       SwiGLU

The variants for ablations (LayerNorm or no norm, post-norm, learned or no positions, GELU MLP, biases:
`Config.norm`, ...) come from `tinylm.variants`: norms and MLPs through `make_norm` and `make_mlp`, post-norm
and GPT-2's learned positions as module swaps (of the blocks; of `embed_tokens`, which is why `Embedding` is
handed each token's position); no positions is no RoPE. The defaults are above. Input checks: `tinylm.inputs`.
Module names are Hugging Face's (`q_proj`, `gate_proj`, `input_layernorm`, ...), so a state dict moves
into `LlamaForCausalLM` / `Qwen3ForCausalLM` with no reshaping (see `tinylm.hf`).
Shapes: B batch, T time, C = dim, H query heads, Hkv KV heads, D head_dim, V vocab.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import positions, variants
from ._checks import IGNORE_INDEX
from .inputs import check_forward
from ._loading import check_memory
from .cache import KVCache
from .config import Config
from .moe import MoE


class RMSNorm(nn.Module):
    """x / rms(x) * weight over the last dim (Zhang & Sennrich, 2019). Computed in fp32, cast back."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))  # bf16/fp16 squares overflow: use fp32 (or fp64)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


# ---------------------------------------------------------------------------------------------
# RoPE (Su et al., 2021), "rotate half" layout as in Hugging Face (llama.cpp calls it NeoX mode).
#
#   dims:  [ x0 x1 ... x(D/2-1) | x(D/2) ... x(D-1) ]     pair i = (x_i, x_{i+D/2}), angle pos * theta_i
#   The interleaved layout of the RoFormer paper pairs (x_2i, x_2i+1) instead. Both are valid, but a
#   checkpoint trained with one gives wrong outputs under the other unless the q/k projection rows are
#   permuted (reference.interleaved_to_half; llama.cpp's Llama converter does exactly that).
# ---------------------------------------------------------------------------------------------
def rope_tables(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (max_len, head_dim): pair i turns at base**(-2i/head_dim) rad/position.

    Computed and kept in float64 (a float32 angle at position 1000 is already off by ~1e-4 rad);
    `apply_rope` casts the rows it uses to the activations' dtype. The speeds are NumPy's
    `positions.rope_inv_freq`, the very numbers `tinylm.reference` uses.
    """
    inv_freq = torch.from_numpy(positions.rope_inv_freq(head_dim, base))                # (D/2,) float64
    pos = torch.arange(max_len, dtype=torch.float64, device="cpu")  # on the CPU even inside `with torch.device`
    angles = torch.outer(pos, inv_freq)                                                  # (T, D/2)
    angles = torch.cat([angles, angles], dim=-1)                                         # (T, D)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """Rotate x of shape (..., T, D) as positions offset..offset+T-1 (offset > 0 when decoding with a cache).

    cos, sin: the (max_len, D) tables, or rows already gathered for each sequence's own positions,
    (B, 1, T, D) for x (B, H, T, D) (left-padded batches; then offset is not used).
    """
    if cos.dim() == 2:
        T = x.shape[-2]
        cos, sin = cos[offset : offset + T], sin[offset : offset + T]              # (T, D)
    if cos.dtype != x.dtype:
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


# ---------------------------------------------------------------------------------------------
# Attention with grouped KV heads (GQA, Ainslie et al., 2023)
# ---------------------------------------------------------------------------------------------
def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, Hkv, S, D) -> (B, Hkv * n_rep, S, D): KV head j serves query heads j*n_rep ... j*n_rep + n_rep-1."""
    B, Hkv, S, D = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None].expand(B, Hkv, n_rep, S, D).reshape(B, Hkv * n_rep, S, D)


def causal_mask(T: int, S: int, device=None) -> torch.Tensor:
    """(T, S) bool, True where allowed: the T queries are the last T of S positions (`positions.causal_mask`)."""
    return torch.from_numpy(positions.causal_mask(T, S)).to(device)


# ---------------------------------------------------------------------------------------------
# Left padding: a batch of prompts of different lengths, pads in front, generated tokens behind.
#
#   attention_mask (B, S)   0 0 1 1 1        row 0: two pads, then its 3 tokens
#                           1 1 1 1 1        row 1: no pad
#   position_ids            0 0 0 1 2        a row's first real token is position 0 (as in Hugging Face)
#                           0 1 2 3 4
#   a query sees the real keys at or before it; a pad query sees only itself (its output is never
#   used, but a softmax over nothing would be NaN).
# ---------------------------------------------------------------------------------------------
def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, S) mask, True/1 at real tokens -> (B, S) long RoPE positions: 0, 1, ... counted over real tokens
    only (pads get 0, never used)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def padding_mask(attention_mask: torch.Tensor, T: int) -> torch.Tensor:
    """(B, S) key mask, True at real tokens -> (B, 1, T, S) bool, True where query t (the last T of S
    positions) may look: causal and not a pad, or itself."""
    S = attention_mask.shape[1]
    causal = causal_mask(T, S, attention_mask.device)                         # (T, S)
    keys = torch.arange(S, device=attention_mask.device)
    itself = keys[None, :] == keys[S - T :, None]                             # (T, S) the diagonal
    return (causal & attention_mask.bool()[:, None, None, :]) | itself          # (B, 1, T, S)


def attention_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
    """The step-by-step path: repeat KV heads, scores, mask, softmax, weighted sum.

    q (B, H, T, D); k, v (B, Hkv, S, D). Same result as `attention`, written out for teaching.
    mask: (B, 1, T, S) bool from `padding_mask`, True where allowed; it replaces the causal mask.
    """
    n_rep = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)                 # (B, H, S, D)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])        # (B, H, T, S)
    if mask is None and causal:
        mask = causal_mask(q.shape[-2], k.shape[-2], q.device)       # (T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v                                # (B, H, T, D)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """Fused attention: `scaled_dot_product_attention` reads the Hkv heads directly (enable_gqa), no copies.

    mask: (B, 1, T, S) bool from `padding_mask`, True where allowed; it replaces the causal mask.
    Equal to `attention_explicit` for finite inputs. A NaN query is another matter: torch's fused CPU
    kernel (2.13) returns zeros for its row where the explicit path returns NaN, so a model with a NaN
    weight can give a finite loss. Its gradient norm is NaN all the same, which is where `train` stops.
    """
    if mask is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    T, S = q.shape[-2], k.shape[-2]
    if not causal or T == 1:  # one new token may look at every cached position
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    if T == S:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    # a chunk of T queries after S - T cached positions: is_causal would align the mask top-left
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T, S, q.device), enable_gqa=True)


class Attention(nn.Module):
    def __init__(self, cfg: Config, layer_idx: int = 0):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=cfg.bias)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.bias)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.bias)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=cfg.bias)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:  # Qwen3: normalise each head's q and k before RoPE
            self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
        self.explicit = False  # True: use attention_explicit (for teaching and tests)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: KVCache | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C). cos, sin (T, D): RoPE rows of x's positions, or (B, 1, T, D) per
        sequence, or None (no rotation). mask: None (causal), or (B, 1, T, S) bool from `padding_mask` for a
        padded batch."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)       # (B, T, H, D)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)    # (B, T, Hkv, D)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim)    # (B, T, Hkv, D)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H|Hkv, T, D)
        if cos is not None:                                              # None: no RoPE (cfg.positions)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)     # cos, sin: this call's T positions
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)                    # (B, Hkv, cache.pos + T, D)
        attend = attention_explicit if self.explicit else attention
        y = attend(q, k, v) if mask is None else attend(q, k, v, mask=mask)  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, H*D)
        return self.o_proj(y)                                            # (B, T, C)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) (Shazeer, 2020)."""

    def __init__(self, dim: int, ffn_dim: int, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(dim, ffn_dim, bias=bias)
        self.up_proj = nn.Linear(dim, ffn_dim, bias=bias)
        self.down_proj = nn.Linear(ffn_dim, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # (B, T, C)


def make_norm(cfg: Config) -> nn.Module:
    """The norm of cfg.norm: RMSNorm, or a variant's (LayerNorm, none: `tinylm.variants`)."""
    return RMSNorm(cfg.dim, cfg.norm_eps) if cfg.norm == "rmsnorm" else variants.norm(cfg, cfg.dim)


def make_mlp(cfg: Config) -> nn.Module:
    """The feed-forward of cfg.mlp: SwiGLU, or GPT-2's GELU MLP (`tinylm.variants`)."""
    if cfg.mlp == "swiglu":
        return SwiGLU(cfg.dim, cfg.ffn_dim, cfg.bias)
    return variants.GELUMLP(cfg.dim, cfg.ffn_dim, cfg.bias)


class Block(nn.Module):
    """Pre-norm block: normalise, transform, add back to the residual stream. (Post-norm, the original
    Transformer's, is `tinylm.variants.PostNormBlock`, swapped in for cfg.norm_placement="post".)"""

    def __init__(self, cfg: Config, layer_idx: int = 0):
        super().__init__()
        self.input_layernorm = make_norm(cfg)
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = make_norm(cfg)
        if cfg.is_moe_layer(layer_idx):  # chapter 8: a router and n_experts SwiGLU experts
            self.mlp = MoE(cfg, expert=lambda: make_mlp(cfg))
        else:
            self.mlp = make_mlp(cfg)
        self.dropout = cfg.dropout   # residual dropout, in training only (0: none; no module, nothing drawn)

    def forward(self, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None,
                cache: KVCache | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.input_layernorm(x)
        # with no pad, the call of an unpadded model: (x, cos, sin, cache), as chapters that wrap it expect
        y = self.self_attn(h, cos, sin, cache) if mask is None else self.self_attn(h, cos, sin, cache, mask)
        x = x + self._drop(y)
        x = x + self._drop(self.mlp(self.post_attention_layernorm(x)))
        return x

    def _drop(self, y: torch.Tensor) -> torch.Tensor:
        return F.dropout(y, self.dropout, self.training) if self.dropout and self.training else y


class Embedding(nn.Embedding):
    """nn.Embedding, called with the tokens' positions too, which it leaves alone (RoPE brings positions in,
    in attention); GPT-2's learned positions add a vector per position (`tinylm.variants.LearnedPositions`)."""

    def forward(self, idx: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(idx)                                  # (B, T) -> (B, T, C)


class TinyLM(nn.Module):
    """Token ids (B, T) -> logits (B, T, V): embedding, n_layers pre-norm blocks, final norm, output head."""

    def __init__(self, cfg: Config, max_bytes: int | None = None):
        """max_bytes: refuse (ValueError) a model whose weights and RoPE tables would take more, before
        allocating them (None: half of this machine's RAM; `tinylm._loading`)."""
        super().__init__()
        if not isinstance(cfg, Config):
            raise ValueError(f"TinyLM needs a tinylm.Config, got {type(cfg).__name__}")
        check_memory("TinyLM(cfg)", cfg, max_bytes, weights=torch.get_default_device().type != "meta")
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.dim)
        if cfg.positions == "learned":
            variants.use_learned_positions(self)  # GPT-2: a learned vector per position, added to the token's
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = make_norm(cfg)
        if cfg.norm_placement == "post":
            variants.use_post_norm(self)  # each block's parts rearranged; no final norm
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_base) if cfg.positions == "rope" else (None,) * 2
        self.register_buffer("cos", cos, persistent=False)  # (max_seq_len, D), rebuilt, never saved; None: no RoPE
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init_weights)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight  # one (V, C) matrix reads in and writes out

    @classmethod
    def from_weights(cls, cfg: Config, weights: dict[str, torch.Tensor], max_bytes: int | None = None) -> "TinyLM":
        """A TinyLM in eval mode whose parameters are the given tensors themselves: no copy, and no random
        initialisation thrown away (3 s for 135M parameters). How loaders build a model from a file
        (`tinylm.pretrained.load_gguf`, `tinylm.hf.load_hf_dir`).

        weights: a tensor for every name of `tinylm.params.weight_shapes(cfg)`, with those shapes; with a
        tied head 'lm_head.weight' may be left out (it is the embedding). max_bytes bounds the RoPE tables.
        """
        weights = dict(weights)
        if cfg.tie_embeddings and "embed_tokens.weight" in weights:
            weights["lm_head.weight"] = weights["embed_tokens.weight"]
        with torch.device("meta"):  # parameters without memory: nothing is allocated or initialised
            model = cls(cfg, max_bytes)
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
        wrong = [f"{k} {tuple(weights[k].shape)} (expected {expected[k]})" for k in expected
                 if k in weights and tuple(weights[k].shape) != expected[k]]
        if missing or unexpected or wrong:
            raise ValueError(f"the weights do not fit a TinyLM with {cfg}: missing {missing[:4]}, "
                             f"unexpected {unexpected[:4]}, wrong shapes {wrong[:4]}")
        model.load_state_dict(weights, assign=True)       # take the tensors as they are
        if cfg.tie_embeddings:
            model.lm_head.weight = model.embed_tokens.weight  # assign made two parameters: one matrix again
        device = model.embed_tokens.weight.device          # the RoPE tables were built on the CPU
        if model.cos is not None:
            model.cos, model.sin = model.cos.to(device), model.sin.to(device)
        return model.eval()

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:   # cfg.bias: start at zero (GPT-2)
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None,
                attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) token ids -> logits (B, T, V), and the mean cross-entropy if targets (B, T) are given.

        Targets equal to -100 are ignored; if all are, the loss is 0 with zero gradients (`train` warns
        when a batch has nothing to learn, `evaluate` refuses to score nothing). With a cache, idx holds the positions cache.pos ... cache.pos + T - 1.
        attention_mask: for a left-padded batch, (B, S) bool or 0/1, True at real tokens, over all S =
        cache.pos + T positions so far (the cached ones too): no query looks at a pad, and each row's RoPE
        positions start at its first real token (`position_ids`). None, or no pad at all: the causal path.
        With experts (cfg.n_experts > 0) the loss includes cfg.mlp_aux_weight x the mean load-balancing
        loss of the MoE layers, kept as `last_aux_loss`.
        """
        check_forward(self.cfg, idx, targets, cache, attention_mask)
        start, T = (cache.pos if cache is not None else 0), idx.shape[1]
        mask = cos = sin = None                                          # cos, sin None: no RoPE
        padded = attention_mask is not None and not bool(attention_mask.all())
        # the positions of these T tokens: (B, T) per row with left padding, else (T,) for every row
        pos = position_ids(attention_mask)[:, start:] if padded else torch.arange(start, start + T, device=idx.device)
        x = self.embed_tokens(idx, pos)                                  # (B, T, C)
        if self.cos is not None and not padded:                          # no pad: every row at start ...
            cos = self.cos[start : start + T].to(x.dtype)                # (T, D) the RoPE angles of these
            sin = self.sin[start : start + T].to(x.dtype)                #        positions, cast once per call
        elif self.cos is not None:
            cos = self.cos[pos].to(x.dtype)[:, None]                     # (B, 1, T, D)
            sin = self.sin[pos].to(x.dtype)[:, None]
        if padded:
            mask = padding_mask(attention_mask, T)                       # (B, 1, T, S)
        for layer in self.layers:
            x = layer(x, cos, sin, cache) if mask is None else layer(x, cos, sin, cache, mask)  # (B, T, C)
        if cache is not None:
            cache.pos += idx.shape[1]
        logits = self.lm_head(self.norm(x))                              # (B, T, V)
        if targets is None:
            return logits, None
        logits32 = logits.flatten(0, 1).to(torch.promote_types(logits.dtype, torch.float32))  # bf16 -> fp32
        loss = F.cross_entropy(logits32, targets.flatten(), ignore_index=IGNORE_INDEX)
        # every target -100: the mean over no position is 0/0; call it 0 (no signal, zero gradients), as
        # a masked-out batch teaches nothing. torch.where keeps the usual value bit for bit, with no sync.
        loss = torch.where((targets != IGNORE_INDEX).any(), loss, 0.0)
        if self.cfg.n_experts:  # mixture of experts: the load-balancing loss joins the training loss
            self.last_aux_loss = torch.stack([layer.mlp.aux_loss for layer in self.layers
                                              if isinstance(layer.mlp, MoE)]).mean()
            loss = loss + self.cfg.mlp_aux_weight * self.last_aux_loss
        return logits, loss

    def set_explicit_attention(self, explicit: bool = True) -> "TinyLM":
        """Switch every layer to the step-by-step attention path (same numbers, slower)."""
        for layer in self.layers:
            layer.self_attn.explicit = explicit
        return self

    def new_cache(self, batch_size: int = 1, max_len: int | None = None, dtype: torch.dtype | None = None) -> KVCache:
        """An empty preallocated KV cache on this model's device and dtype."""
        return KVCache(self.cfg, batch_size, max_len or self.cfg.max_seq_len,
                       dtype=dtype or self.embed_tokens.weight.dtype, device=self.embed_tokens.weight.device)
