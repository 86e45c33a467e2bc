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


def _linear(name: str, out_features: int, in_features: int, bias: bool) -> dict[str, tuple[int, ...]]:
    return {f"{name}.weight": (out_features, in_features)} | ({f"{name}.bias": (out_features,)} if bias else {})


def norm_shapes(cfg: Config, name: str) -> dict[str, tuple[int, ...]]:
    """One norm of the residual stream: RMSNorm's gain, LayerNorm's gain (and bias with cfg.bias), or none."""
    if cfg.norm == "none":
        return {}
    return {f"{name}.weight": (cfg.dim,)} | ({f"{name}.bias": (cfg.dim,)} if cfg.norm == "layernorm" and cfg.bias
                                             else {})


def mlp_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """One feed-forward (or one expert): SwiGLU's gate, up, down, or the GELU MLP's up, down (cfg.mlp)."""
    C, F = cfg.dim, cfg.ffn_dim
    names = ("gate_proj", "up_proj") if cfg.mlp == "swiglu" else ("up_proj",)
    shapes = {k: v for name in names for k, v in _linear(name, F, C, cfg.bias).items()}
    return shapes | _linear("down_proj", C, F, cfg.bias)


def block_shapes(cfg: Config, moe: bool | None = None) -> dict[str, tuple[int, ...]]:
    """Name -> shape of the weights of one block (names inside `layers.i.`); linear weights are (out, in).

    moe: whether this block has experts; None means a block with experts if the config has any
    (with `cfg.moe_every` > 1 only some blocks do: `weight_shapes` asks `cfg.is_moe_layer(i)`).
    Post-norm (cfg.norm_placement) has no input_layernorm, and a post_feedforward_layernorm after the MLP.
    """
    moe = cfg.n_experts > 0 if moe is None else moe
    C, D, b = cfg.dim, cfg.head_dim, cfg.bias
    pre = cfg.norm_placement == "pre"
    shapes: dict[str, tuple[int, ...]] = norm_shapes(cfg, "input_layernorm") if pre else {}
    for name, out_features, in_features in (("q_proj", cfg.n_heads * D, C), ("k_proj", cfg.n_kv_heads * D, C),
                                            ("v_proj", cfg.n_kv_heads * D, C), ("o_proj", C, cfg.n_heads * D)):
        shapes |= _linear("self_attn." + name, out_features, in_features, b)
    if cfg.qk_norm:  # Qwen3: one gain per head dimension, shared by the heads
        shapes |= {"self_attn.q_norm.weight": (D,), "self_attn.k_norm.weight": (D,)}
    shapes |= norm_shapes(cfg, "post_attention_layernorm")
    mlp = mlp_shapes(cfg)
    if not moe:
        shapes |= {"mlp." + k: s for k, s in mlp.items()}
    else:  # the router, then the experts (tinylm.moe)
        shapes["mlp.gate.weight"] = (cfg.n_experts, C)
        shapes |= {f"mlp.experts.{e}.{k}": s for e in range(cfg.n_experts) for k, s in mlp.items()}
    if not pre:
        shapes |= norm_shapes(cfg, "post_feedforward_layernorm")
    return shapes


def _input_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """The embedding, and GPT-2's learned positions (cfg.positions == 'learned')."""
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (cfg.vocab_size, cfg.dim)}
    if cfg.positions == "learned":
        shapes["embed_positions.weight"] = (cfg.max_seq_len, cfg.dim)
    return shapes


def _output_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """The final norm (pre-norm only) and the head."""
    final = norm_shapes(cfg, "norm") if cfg.norm_placement == "pre" else {}
    return final | {"lm_head.weight": (cfg.vocab_size, cfg.dim)}


def weight_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every weight of `TinyLM(cfg)`: its `state_dict`, in order, with Hugging Face names.

    'lm_head.weight' is listed even when tied to the embedding (the state_dict lists it too);
    `count_params` counts it once.
    """
    shapes = _input_shapes(cfg)
    for i in range(cfg.n_layers):
        block = block_shapes(cfg, moe=cfg.is_moe_layer(i))
        shapes |= {f"layers.{i}.{k}": s for k, s in block.items()}
    return shapes | _output_shapes(cfg)


def layer_counts(cfg: Config) -> tuple[int, int]:
    """(dense blocks, blocks with experts): blocks moe_every, 2 * moe_every, ... (counted from 1) have experts."""
    moe = cfg.n_layers // cfg.moe_every if cfg.n_experts else 0
    return cfg.n_layers - moe, moe


def state_size(cfg: Config) -> tuple[int, int]:
    """(tensors, parameters) of `TinyLM(cfg)`'s state_dict with a tied head stored once (as files store it),
    without listing the layers or the experts: len(weight_shapes(cfg)) less the tied head, and
    count_params(cfg).total, for any n_layers and n_experts."""
    dense, mlp = block_shapes(cfg, moe=False), mlp_shapes(cfg)
    tensors, weights = len(dense), _numel(dense, lambda k: True)
    E, (n_dense, n_moe) = cfg.n_experts, layer_counts(cfg)
    moe_tensors = tensors + 1 + len(mlp) * (E - 1)                  # a router, and E MLPs instead of one
    moe_weights = weights + E * cfg.dim + (E - 1) * _numel(mlp, lambda k: True)
    outer = _input_shapes(cfg) | _output_shapes(cfg)
    if cfg.tie_embeddings:
        del outer["lm_head.weight"]                                 # stored once, as the embedding
    return (len(outer) + n_dense * tensors + n_moe * moe_tensors,
            _numel(outer, lambda k: True) + n_dense * weights + n_moe * moe_weights)


@dataclass(frozen=True)
class ParamCount:
    """Parameters by component, summed over all layers. `.total` equals the model's numel."""

    embedding: int      # vocab_size x dim (+ max_seq_len x dim learned positions)
    attention: int      # q, k, v, o projections (+ q_norm/k_norm gains with QK-norm; + biases)
    feed_forward: int   # SwiGLU gate/up/down or GELU up/down (or router + experts; + biases)
    norms: int          # two norms per block + the final norm (pre-norm): RMSNorm gains, LayerNorm's + biases
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
        embedding=_numel(shapes, lambda k: k.startswith("embed_")),
        attention=_numel(shapes, lambda k: ".self_attn." in k),
        feed_forward=feed_forward,
        norms=_numel(shapes, lambda k: k.startswith("norm.") or k.split(".")[-2].endswith("layernorm")),
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
    included and the embedding lookup not (tied or not, the head multiplies vocab x dim per token), nor
    learned positions; norms left out, and linear biases (cfg.bias) counted as if multiplied (1/dim of N). Each multiplies twice (a multiply and an add) in the forward pass and four times in the
    backward: 6 N. Attention's scores and weighted sum add 2 x 2 L H D T forward (T = seq_len, every
    position counted, as PaLM does; a causal mask halves the useful work), 12 L H D T with the backward.
    """
    check_int("seq_len", seq_len, low=1)
    c = count_params(cfg)
    matmul = c.active - c.norms - c.embedding - c.head + cfg.vocab_size * cfg.dim
    return 6 * matmul + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len
