"""TinyLM's forward pass in NumPy, layer by layer, keeping what the backward passes need.

Every layer is a `<name>_forward(inputs...) -> (out, cache)` built from the `tinylm.reference` pieces:
`out` is what the reference computes, `cache` the intermediates `tinylm.backprop.<name>_backward` reads.
`model_forward` chains them into the whole TinyLM on a dict of weights keyed by `state_dict` name:

    params = params_from_torch(model)               # float64 arrays
    logits, loss, cache = model_forward(params, model.cfg, idx, targets)

Shapes: B batch, T time, C = dim, H query heads, Hkv KV heads, D head_dim, F = ffn_dim, V vocab.
Weights use torch's (out, in) layout, so a linear layer is y = x @ W.T.
"""

from __future__ import annotations

import numpy as np

from . import reference as ref
from ._checks import IGNORE_INDEX
from .config import Config
from .model import TinyLM
from .params import weight_shapes
from .variants import check_llama_block


# ---------------------------------------------------------------------------------------------
# The layers: each returns (out, cache)
# ---------------------------------------------------------------------------------------------
def linear_forward(x: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, tuple]:
    """y = x @ weight.T. x (..., in), weight (out, in) -> y (..., out)."""
    return ref.linear(x, weight), (x, weight)


def embedding_forward(idx: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, tuple]:
    """idx (B, T) ints, weight (V, C) -> out (B, T, C): row idx[b, t] of weight."""
    return weight[idx], (idx, weight.shape)


def rms_norm_forward(x: np.ndarray, weight: np.ndarray, eps: float = 1e-5) -> tuple[np.ndarray, tuple]:
    """x (..., C), weight (C,) -> y (..., C) = xhat * weight with xhat = x / rms(x).

    Cache: xhat, r = 1 / rms(x), weight.
    """
    rms = ref.rms(x, eps)                                                          # (..., 1)
    xhat = x / rms                                                                 # (..., C)
    return xhat * weight, (xhat, 1.0 / rms, weight)


def rope_forward(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, tuple]:
    """x (..., T, D); cos, sin (T, D) from `reference.rope_tables`, already cut to the T positions."""
    return ref.apply_rope(x, cos, sin), (cos, sin)


def attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True) -> tuple[np.ndarray, tuple]:
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T -> y (B, H, T, D), as `reference.attention`.

    With causal=True the T queries are the last T of the S positions and see keys up to their own.
    """
    n_rep = ref.kv_groups(q, k)
    K, V = ref.repeat_kv(k, n_rep), ref.repeat_kv(v, n_rep)                        # (B, H, S, D)
    P = ref.attention_weights(q, K, causal)                                        # (B, H, T, S)
    return P @ V, (q, K, V, P, n_rep, 1.0 / np.sqrt(q.shape[-1]))                  # (B, H, T, D)


def swiglu_forward(x: np.ndarray, gate_w: np.ndarray, up_w: np.ndarray,
                   down_w: np.ndarray) -> tuple[np.ndarray, tuple]:
    """x (..., C); gate_w, up_w (F, C); down_w (C, F) -> y (..., C), as `reference.swiglu`."""
    g = ref.linear(x, gate_w)                                                      # (..., F)
    u = ref.linear(x, up_w)                                                        # (..., F)
    s = ref.sigmoid(g)                                                             # (..., F) for silu'(g)
    a = ref.silu(g)                                                                # (..., F)
    h = a * u                                                                      # (..., F)
    return ref.linear(h, down_w), (x, gate_w, up_w, down_w, g, u, s, a, h)         # (..., C)


def cross_entropy_forward(logits: np.ndarray, targets: np.ndarray,
                          ignore_index: int = IGNORE_INDEX) -> tuple[float, tuple]:
    """logits (..., V), integer targets (...) -> mean loss over non-ignored targets (nan if none, like torch)."""
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must have shape {logits.shape[:-1]} (logits without the vocab axis), "
                         f"got {targets.shape}")
    if not np.issubdtype(targets.dtype, np.integer):
        raise ValueError(f"targets must hold integer token ids, got dtype {targets.dtype}")
    V = logits.shape[-1]
    z = logits.reshape(-1, V)                                                      # (N, V)
    t = targets.reshape(-1)                                                        # (N,)
    keep = t != ignore_index
    if np.any((t[keep] < 0) | (t[keep] >= V)):
        raise ValueError(f"targets must lie in [0, {V}) or equal ignore_index ({ignore_index}); "
                         f"got range [{t.min()}, {t.max()}]")
    z = z - z.max(axis=-1, keepdims=True)                                          # stable: exp never overflows
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))                       # log softmax (N, V)
    n = int(keep.sum())
    rows = np.nonzero(keep)[0]
    loss = -logp[rows, t[rows]].sum() / n if n else float("nan")
    return float(loss), (np.exp(logp), t, rows, n, logits.shape)


# ---------------------------------------------------------------------------------------------
# The whole model: parameters as a dict keyed by TinyLM's state_dict names
# ---------------------------------------------------------------------------------------------
def params_from_torch(model: TinyLM) -> dict[str, np.ndarray]:
    """A TinyLM's weights as float64 NumPy arrays, keyed by state_dict name.

    With a tied head, 'lm_head.weight' is left out: it *is* 'embed_tokens.weight', one parameter
    (as in model.named_parameters()), and model_backward gives that key both gradients.
    """
    if not isinstance(model, TinyLM):
        raise ValueError(f"params_from_torch needs a tinylm.TinyLM, got {type(model).__name__}")
    if model.cfg.n_experts:
        raise ValueError("backprop covers the dense model only: build the TinyLM with n_experts=0")
    params = {k: v.detach().cpu().double().numpy().copy() for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        del params["lm_head.weight"]
    return params


def param_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """The key -> shape of every parameter model_forward expects: `weight_shapes`, without 'lm_head.weight'
    when the head is tied (it is the embedding)."""
    shapes = weight_shapes(cfg)
    if cfg.tie_embeddings:
        del shapes["lm_head.weight"]
    return shapes


def self_attn_forward(x: np.ndarray, params: dict, prefix: str, cfg: Config,
                      cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, dict]:
    """One attention sub-layer, x (B, T, C) -> (B, T, C); weights params[prefix + 'q_proj.weight'] etc."""
    B, T, _ = x.shape
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    c: dict = {}
    q, c["q_proj"] = linear_forward(x, params[prefix + "q_proj.weight"])          # (B, T, H*D)
    k, c["k_proj"] = linear_forward(x, params[prefix + "k_proj.weight"])          # (B, T, Hkv*D)
    v, c["v_proj"] = linear_forward(x, params[prefix + "v_proj.weight"])          # (B, T, Hkv*D)
    q, k, v = q.reshape(B, T, H, D), k.reshape(B, T, Hkv, D), v.reshape(B, T, Hkv, D)
    if cfg.qk_norm:  # Qwen3: RMSNorm over each head's D dims, before RoPE
        q, c["q_norm"] = rms_norm_forward(q, params[prefix + "q_norm.weight"], cfg.norm_eps)
        k, c["k_norm"] = rms_norm_forward(k, params[prefix + "k_norm.weight"], cfg.norm_eps)
    q, k, v = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # (B, H|Hkv, T, D)
    q, c["rope"] = rope_forward(q, cos, sin)
    k, _ = rope_forward(k, cos, sin)
    y, c["attn"] = attention_forward(q, k, v)                                      # (B, H, T, D)
    y = y.transpose(0, 2, 1, 3).reshape(B, T, H * D)                               # (B, T, H*D)
    out, c["o_proj"] = linear_forward(y, params[prefix + "o_proj.weight"])         # (B, T, C)
    return out, c


def block_forward(x: np.ndarray, params: dict, i: int, cfg: Config,
                  cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, dict]:
    """Pre-norm block i: x + self_attn(input_layernorm(x)), then + mlp(post_attention_layernorm(.))."""
    p = f"layers.{i}."
    c: dict = {}
    h, c["ln1"] = rms_norm_forward(x, params[p + "input_layernorm.weight"], cfg.norm_eps)
    a, c["attn"] = self_attn_forward(h, params, p + "self_attn.", cfg, cos, sin)
    x = x + a                                                                      # (B, T, C)
    h, c["ln2"] = rms_norm_forward(x, params[p + "post_attention_layernorm.weight"], cfg.norm_eps)
    m, c["mlp"] = swiglu_forward(h, params[p + "mlp.gate_proj.weight"], params[p + "mlp.up_proj.weight"],
                                 params[p + "mlp.down_proj.weight"])
    return x + m, c                                                                # (B, T, C)


def _check_model_inputs(params: dict, cfg: Config, idx: np.ndarray, targets) -> None:
    if not isinstance(cfg, Config):
        raise ValueError(f"cfg must be a tinylm.Config, got {type(cfg).__name__}")
    if cfg.n_experts:
        raise ValueError("backprop covers the dense model only: use a Config with n_experts=0")
    check_llama_block(cfg, "the NumPy model and backpropagation")
    expected = param_shapes(cfg)
    missing = sorted(set(expected) - set(params))
    if missing:
        hint = " (a tied model has no lm_head.weight)" if missing == ["lm_head.weight"] else ""
        raise ValueError(f"params is missing {missing[:4]}{'...' if len(missing) > 4 else ''}{hint}; "
                         "build it with params_from_torch(model) for a model of this cfg")
    for key, shape in expected.items():
        if tuple(np.shape(params[key])) != shape:
            raise ValueError(f"params[{key!r}] has shape {np.shape(params[key])}, cfg needs {shape}")
    if idx.ndim != 2 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"idx must be a (batch, time) array of integer token ids, got shape {idx.shape}, "
                         f"dtype {idx.dtype}; add a batch axis with idx[None] for one sequence")
    if idx.shape[1] > cfg.max_seq_len:
        raise ValueError(f"sequence length {idx.shape[1]} exceeds max_seq_len ({cfg.max_seq_len}); crop idx")
    if idx.size and (idx.min() < 0 or idx.max() >= cfg.vocab_size):
        raise ValueError(f"token ids must lie in [0, vocab_size={cfg.vocab_size}), got [{idx.min()}, {idx.max()}]")
    if targets is not None and np.shape(targets) != idx.shape:
        raise ValueError(f"targets must have the shape of idx {idx.shape}, got {np.shape(targets)}")


def model_forward(params: dict[str, np.ndarray], cfg: Config, idx: np.ndarray,
                  targets: np.ndarray | None = None) -> tuple[np.ndarray, float | None, dict]:
    """TinyLM's forward in NumPy: idx (B, T) -> logits (B, T, V), mean cross-entropy (or None), cache.

    targets (B, T): next-token ids, -100 where the loss should skip a position.
    The cache holds every intermediate model_backward needs (memory grows with B, T and n_layers).
    """
    idx = np.asarray(idx)
    _check_model_inputs(params, cfg, idx, targets)
    T = idx.shape[1]
    cos, sin = ref.rope_tables(cfg.head_dim, T, cfg.rope_base)                     # (T, D) each
    cache: dict = {"cfg": cfg, "layers": []}
    x, cache["embed"] = embedding_forward(idx, params["embed_tokens.weight"])      # (B, T, C)
    for i in range(cfg.n_layers):
        x, c = block_forward(x, params, i, cfg, cos, sin)                          # (B, T, C)
        cache["layers"].append(c)
    h, cache["norm"] = rms_norm_forward(x, params["norm.weight"], cfg.norm_eps)
    head = params["embed_tokens.weight"] if cfg.tie_embeddings else params["lm_head.weight"]
    logits, cache["lm_head"] = linear_forward(h, head)                             # (B, T, V)
    loss = None
    if targets is not None:
        loss, cache["loss"] = cross_entropy_forward(logits, np.asarray(targets))
    return logits, loss, cache
