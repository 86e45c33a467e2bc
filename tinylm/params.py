"""Counting before building: every weight's shape, the parameter count and the KV-cache size of a `Config`.

`weight_shapes(cfg)` is the one description of the weights: the names and shapes of
`TinyLM(cfg).state_dict()` (tested equal). The counts below are sums over it, and `tinylm.numpy_model`
checks its inputs against it. `state_size(cfg)` gives the same totals without listing every layer, for a
loader that must not trust a file's block count (10**9 layers, listed, would never finish).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ._checks import check_int
from .config import Config


def block_shapes(cfg: Config, moe: bool | None = None) -> dict[str, tuple[int, ...]]:
    """Name -> shape of the weights of one block (names inside `layers.i.`); linear weights are (out, in).

    moe: whether this block has experts; None means a block with experts if the config has any
    (with `cfg.moe_every` > 1 only some blocks do: `weight_shapes` asks `cfg.is_moe_layer(i)`).
    """
    moe = cfg.n_experts > 0 if moe is None else moe
    C, F, D = cfg.dim, cfg.ffn_dim, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "input_layernorm.weight": (C,),
        "self_attn.q_proj.weight": (cfg.n_heads * D, C),
        "self_attn.k_proj.weight": (cfg.n_kv_heads * D, C),
        "self_attn.v_proj.weight": (cfg.n_kv_heads * D, C),
        "self_attn.o_proj.weight": (C, cfg.n_heads * D),
    }
    if cfg.qk_norm:  # Qwen3: one gain per head dimension, shared by the heads
        shapes |= {"self_attn.q_norm.weight": (D,), "self_attn.k_norm.weight": (D,)}
    shapes["post_attention_layernorm.weight"] = (C,)
    swiglu = {"gate_proj.weight": (F, C), "up_proj.weight": (F, C), "down_proj.weight": (C, F)}
    if not moe:
        shapes |= {"mlp." + k: s for k, s in swiglu.items()}
    else:  # the router, then the experts (tinylm.moe)
        shapes["mlp.gate.weight"] = (cfg.n_experts, C)
        shapes |= {f"mlp.experts.{e}.{k}": s for e in range(cfg.n_experts) for k, s in swiglu.items()}
    return shapes


def weight_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every weight of `TinyLM(cfg)`: its `state_dict`, in order, with Hugging Face names.

    'lm_head.weight' is listed even when tied to the embedding (the state_dict lists it too);
    `count_params` counts it once.
    """
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (cfg.vocab_size, cfg.dim)}
    for i in range(cfg.n_layers):
        block = block_shapes(cfg, moe=cfg.is_moe_layer(i))
        shapes |= {f"layers.{i}.{k}": s for k, s in block.items()}
    shapes["norm.weight"] = (cfg.dim,)
    shapes["lm_head.weight"] = (cfg.vocab_size, cfg.dim)
    return shapes


def layer_counts(cfg: Config) -> tuple[int, int]:
    """(dense blocks, blocks with experts): blocks moe_every, 2 * moe_every, ... (counted from 1) have experts."""
    moe = cfg.n_layers // cfg.moe_every if cfg.n_experts else 0
    return cfg.n_layers - moe, moe


def state_size(cfg: Config) -> tuple[int, int]:
    """(tensors, parameters) of `TinyLM(cfg)`'s state_dict with a tied head stored once (as files store it),
    without listing the layers or the experts: len(weight_shapes(cfg)) less the tied head, and
    count_params(cfg).total, for any n_layers and n_experts."""
    dense = block_shapes(cfg, moe=False)
    tensors, weights = len(dense), _numel(dense, lambda k: True)
    E, (n_dense, n_moe) = cfg.n_experts, layer_counts(cfg)
    moe_tensors = tensors + 1 + 3 * (E - 1)                         # a router, and E SwiGLUs instead of one
    moe_weights = weights + E * cfg.dim + (E - 1) * 3 * cfg.dim * cfg.ffn_dim
    heads = 1 if cfg.tie_embeddings else 2                          # embedding (+ untied head)
    return (heads + 1 + n_dense * tensors + n_moe * moe_tensors,
            heads * cfg.vocab_size * cfg.dim + cfg.dim + n_dense * weights + n_moe * moe_weights)


@dataclass(frozen=True)
class ParamCount:
    """Parameters by component, summed over all layers. `.total` equals the model's numel."""

    embedding: int      # vocab_size x dim
    attention: int      # q, k, v, o projections (+ q_norm/k_norm gains with QK-norm)
    feed_forward: int   # SwiGLU gate/up/down (or router + experts)
    norms: int          # two RMSNorm gains per block + the final norm
    head: int           # 0 when tied to the embedding
    active_feed_forward: int = 0  # feed-forward weights one token actually uses (MoE: top-k experts)

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.feed_forward + self.norms + self.head

    @property
    def active(self) -> int:
        """Parameters touched per token: the total with only the chosen experts' weights."""
        return self.total - self.feed_forward + self.active_feed_forward

    def as_dict(self) -> dict[str, int]:
        return {
            "embedding": self.embedding, "attention": self.attention, "feed_forward": self.feed_forward,
            "norms": self.norms, "head": self.head, "total": self.total,
        }


def _numel(shapes: dict[str, tuple[int, ...]], keep: Callable[[str], bool]) -> int:
    """Number of weights in the entries of shapes whose name passes keep."""
    return sum(math.prod(shape) for name, shape in shapes.items() if keep(name))


def attention_params(cfg: Config) -> int:
    """One block's attention: q and o are dim x (n_heads*head_dim); k and v are dim x (n_kv_heads*head_dim)."""
    return _numel(block_shapes(cfg), lambda k: k.startswith("self_attn."))


def feed_forward_params(cfg: Config) -> int:
    """One block's SwiGLU (gate, up, down: 3 x dim x ffn_dim), or router + experts in an MoE block."""
    return _numel(block_shapes(cfg), lambda k: k.startswith("mlp."))


def count_params(cfg: Config) -> ParamCount:
    """Count every weight of `TinyLM(cfg)` from the config alone: sums over `weight_shapes(cfg)`."""
    shapes = weight_shapes(cfg)
    feed_forward = _numel(shapes, lambda k: ".mlp." in k)
    # a token uses every dense feed-forward, and in each MoE block the router and top-k experts
    active_ff = (_numel(shapes, lambda k: ".mlp." in k and ".mlp.experts." not in k)
                 + cfg.experts_per_token * _numel(shapes, lambda k: ".mlp.experts.0." in k))
    return ParamCount(
        embedding=_numel(shapes, lambda k: k == "embed_tokens.weight"),
        attention=_numel(shapes, lambda k: ".self_attn." in k),
        feed_forward=feed_forward,
        norms=_numel(shapes, lambda k: k == "norm.weight" or k.endswith("layernorm.weight")),
        head=0 if cfg.tie_embeddings else _numel(shapes, lambda k: k == "lm_head.weight"),
        active_feed_forward=active_ff,
    )


def kv_cache_bytes(cfg: Config, seq_len: int, batch: int = 1, bytes_per: int = 4) -> int:
    """Bytes of a KV cache: 2 (K and V) x layers x batch x n_kv_heads x seq_len x head_dim x bytes_per.

    bytes_per is 4 for fp32 (the default, as for `KVCache` and TinyLM's weights), 2 for bf16/fp16. Only the
    KV heads are stored, never their repeats.
    """
    for name, value in (("seq_len", seq_len), ("batch", batch), ("bytes_per", bytes_per)):
        check_int(name, value, low=1)
    return 2 * cfg.n_layers * batch * cfg.n_kv_heads * seq_len * cfg.head_dim * bytes_per


def train_flops_per_token(cfg: Config, seq_len: int) -> int:
    """Training FLOPs per token: 6 N + 12 L H D T (Kaplan et al., 2020; PaLM, Chowdhery et al., 2022, app. B).

    N: the parameters in matrix multiplies (the active ones, for mixture of experts), the output head
    included and the embedding lookup not (tied or not, the head multiplies vocab x dim per token); norm
    gains left out. Each multiplies twice (a multiply and an add) in the forward pass and four times in the
    backward: 6 N. Attention's scores and weighted sum add 2 x 2 L H D T forward (T = seq_len, every
    position counted, as PaLM does; a causal mask halves the useful work), 12 L H D T with the backward.
    """
    check_int("seq_len", seq_len, low=1)
    c = count_params(cfg)
    matmul = c.active - c.norms - c.embedding - c.head + cfg.vocab_size * cfg.dim
    return 6 * matmul + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len
