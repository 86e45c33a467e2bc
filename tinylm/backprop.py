"""Backpropagation by hand, in NumPy, for the whole tinylm model.

Every piece comes as a pair with the base name of its `tinylm.reference` function:

    out, cache = <name>_forward(inputs...)      # computes out, keeps what backward will need
    grads      = <name>_backward(dout, cache)    # dout = dL/dout (same shape as out) -> dL/dinputs

The chain rule is then just calling the backwards in reverse order. Each backward is a
vector-Jacobian product: it never builds a Jacobian, it maps dL/dout to dL/dinput directly.
`grad_check` / `check_backward` compare any pair against central differences; `model_forward` /
`model_backward` chain the pieces into the full TinyLM and `adamw_step` trains it, all in NumPy.

Training a TinyLM's weights entirely in NumPy:

    params = params_from_torch(model)            # float64 arrays keyed by state_dict name
    state = {}
    logits, loss, cache = model_forward(params, model.cfg, idx, targets)
    grads = model_backward(cache)                 # same keys as params
    clip_grad_norm(grads, 1.0); adamw_step(params, grads, state, lr=3e-4)

Shapes: B batch, T time, C = dim, H query heads, Hkv KV heads, D head_dim, F = ffn_dim, V vocab.
Weights use torch's (out, in) layout, so a linear layer is y = x @ W.T.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .config import Config
from .reference import repeat_kv, rope_tables, rotate_half, softmax

IGNORE_INDEX = -100  # targets equal to this are skipped by the loss (torch's default ignore_index)


# ---------------------------------------------------------------------------------------------
# Linear: y = x W^T
#   dL/dx = dL/dy W                (each input feeds every output through W)
#   dL/dW = sum over tokens of dL/dy^T x    (outer product, summed over B and T)
# ---------------------------------------------------------------------------------------------
def linear_forward(x: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, tuple]:
    """y = x @ weight.T. x (..., in), weight (out, in) -> y (..., out)."""
    return x @ weight.T, (x, weight)


def linear_backward(dout: np.ndarray, cache: tuple) -> tuple[np.ndarray, np.ndarray]:
    """dout (..., out) -> dx (..., in), dweight (out, in)."""
    x, weight = cache
    dx = dout @ weight                                                             # (..., in)
    dweight = dout.reshape(-1, dout.shape[-1]).T @ x.reshape(-1, x.shape[-1])      # (out, in)
    return dx, dweight


# ---------------------------------------------------------------------------------------------
# Embedding: out[b, t] = W[idx[b, t]]  (a gather, i.e. a one-hot row times W)
#   dL/dW[v] = sum of dL/dout[b, t] over every position where idx[b, t] == v (a scatter-add);
#   rows of tokens that never appear get zero. With a tied head the same W also receives the head's
#   gradient: model_backward adds the two.
# ---------------------------------------------------------------------------------------------
def embedding_forward(idx: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, tuple]:
    """idx (B, T) ints, weight (V, C) -> out (B, T, C)."""
    return weight[idx], (idx, weight.shape)


def embedding_backward(dout: np.ndarray, cache: tuple) -> np.ndarray:
    """dout (B, T, C) -> dweight (V, C). Repeated tokens add up (np.add.at, not plain assignment)."""
    idx, shape = cache
    dweight = np.zeros(shape, dtype=dout.dtype)
    np.add.at(dweight, idx.reshape(-1), dout.reshape(-1, shape[1]))                # (V, C)
    return dweight


# ---------------------------------------------------------------------------------------------
# RMSNorm (Zhang & Sennrich, 2019): y = xhat * w,  xhat = x * r,  r = (mean(x^2) + eps)^(-1/2)
#   dL/dw = sum over tokens of dL/dy * xhat
#   g = dL/dxhat = dL/dy * w.  Since dr/dx_j = -r^3 x_j / C,
#   dL/dx_j = sum_i g_i d(x_i r)/dx_j = r g_j - r^3 x_j / C * sum_i g_i x_i
#           = r * (g_j - xhat_j * mean_i(g_i * xhat_i))
#   i.e. scale by r, then remove the part of g along xhat (scaling x does not change xhat).
# ---------------------------------------------------------------------------------------------
def rms_norm_forward(x: np.ndarray, weight: np.ndarray, eps: float = 1e-5) -> tuple[np.ndarray, tuple]:
    """x (..., C), weight (C,) -> y (..., C), normalised over the last axis."""
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)               # (..., 1)
    xhat = x * r                                                                   # (..., C)
    return xhat * weight, (xhat, r, weight)


def rms_norm_backward(dout: np.ndarray, cache: tuple) -> tuple[np.ndarray, np.ndarray]:
    """dout (..., C) -> dx (..., C), dweight (C,)."""
    xhat, r, weight = cache
    dweight = (dout * xhat).reshape(-1, xhat.shape[-1]).sum(axis=0)                # (C,)
    g = dout * weight                                                              # dL/dxhat (..., C)
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))                # (..., C)
    return dx, dweight


# ---------------------------------------------------------------------------------------------
# RoPE (Su et al., 2021), rotate-half layout: y = x * cos + rotate_half(x) * sin.
#   Each pair (x_i, x_{i+D/2}) is rotated by angle a: y = R(a) x. A rotation's transpose is its
#   inverse, R(a)^T = R(-a), so dL/dx = R(-a) dL/dy: the backward is the same RoPE with sin -> -sin.
#   (Written as a transpose: dx = dy * cos - rotate_half(dy * sin); equal because the cos/sin
#   tables repeat the same angle in both halves.)
# ---------------------------------------------------------------------------------------------
def rope_forward(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, tuple]:
    """x (..., T, D); cos, sin (T, D) from `reference.rope_tables`, already cut to the T positions."""
    return x * cos + rotate_half(x) * sin, (cos, sin)


def rope_backward(dout: np.ndarray, cache: tuple) -> np.ndarray:
    """dout (..., T, D) -> dx (..., T, D): rotate back by -angle."""
    cos, sin = cache
    return dout * cos + rotate_half(dout) * (-sin)


# ---------------------------------------------------------------------------------------------
# Softmax: y = softmax(s). Its Jacobian is dy_i/ds_j = y_i (delta_ij - y_j), so
#   dL/ds_i = sum_j dL/dy_j y_j (delta_ij - y_i) = y_i * (dL/dy_i - sum_j dL/dy_j y_j)
# ---------------------------------------------------------------------------------------------
def softmax_backward(dy: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """dL/dy and y = softmax(s) (same shape) -> dL/ds = y * (dy - sum(dy * y))."""
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


# ---------------------------------------------------------------------------------------------
# Causal attention with grouped KV heads (Ainslie et al., 2023):
#   K, V = repeat_kv(k), repeat_kv(v)          (B, H, S, D)
#   s = q K^T / sqrt(D), masked to -inf above the diagonal;  P = softmax(s);  y = P V
# Backward, read right to left:
#   dP = dy V^T,   dV = P^T dy,   ds = softmax_backward(dP, P)  (zero where masked, since P = 0 there)
#   dq = ds K / sqrt(D),   dK = ds^T q / sqrt(D)
#   repeat_kv copied each KV head to n_rep query heads, so its backward sums those n_rep copies.
# ---------------------------------------------------------------------------------------------
def attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True) -> tuple[np.ndarray, tuple]:
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T -> y (B, H, T, D).

    With causal=True the T queries are the last T of the S positions and see keys up to their own.
    """
    H, Hkv = q.shape[1], k.shape[1]
    if H % Hkv:
        raise ValueError(f"query heads ({H}) must be divisible by KV heads ({Hkv}); check q and k's axis 1")
    n_rep = H // Hkv
    K, V = repeat_kv(k, n_rep), repeat_kv(v, n_rep)                                # (B, H, S, D)
    T, S, D = q.shape[2], K.shape[2], q.shape[3]
    scale = 1.0 / np.sqrt(D)
    scores = q @ K.swapaxes(-1, -2) * scale                                        # (B, H, T, S)
    if causal:
        allowed = np.tril(np.ones((T, S), dtype=bool), k=S - T)
        scores = np.where(allowed, scores, -np.inf)
    P = softmax(scores)                                                            # (B, H, T, S)
    return P @ V, (q, K, V, P, n_rep, scale)                                       # (B, H, T, D)


def attention_backward(dout: np.ndarray, cache: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dout (B, H, T, D) -> dq (B, H, T, D), dk and dv (B, Hkv, S, D)."""
    q, K, V, P, n_rep, scale = cache
    dP = dout @ V.swapaxes(-1, -2)                                                 # (B, H, T, S)
    dV = P.swapaxes(-1, -2) @ dout                                                 # (B, H, S, D)
    ds = softmax_backward(dP, P)                                                   # (B, H, T, S)
    dq = ds @ K * scale                                                            # (B, H, T, D)
    dK = ds.swapaxes(-1, -2) @ q * scale                                           # (B, H, S, D)
    B, H, S, D = dK.shape
    # undo repeat_kv: query heads j*n_rep ... j*n_rep + n_rep - 1 all read KV head j
    dk = dK.reshape(B, H // n_rep, n_rep, S, D).sum(axis=2)                        # (B, Hkv, S, D)
    dv = dV.reshape(B, H // n_rep, n_rep, S, D).sum(axis=2)                        # (B, Hkv, S, D)
    return dq, dk, dv


# ---------------------------------------------------------------------------------------------
# SwiGLU (Shazeer, 2020): g = x Wg^T, u = x Wu^T, h = silu(g) * u, y = h Wd^T
#   silu(g) = g * sigmoid(g);  silu'(g) = s + g s (1 - s) = s (1 + g (1 - s)),  s = sigmoid(g)
#   dh = dy Wd,  dWd = dy^T h
#   du = dh * silu(g),       dWu = du^T x
#   dg = dh * u * silu'(g),  dWg = dg^T x
#   dx = dg Wg + du Wu       (x feeds both the gate and the up projection: the two paths add)
# ---------------------------------------------------------------------------------------------
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def swiglu_forward(x: np.ndarray, gate_w: np.ndarray, up_w: np.ndarray,
                   down_w: np.ndarray) -> tuple[np.ndarray, tuple]:
    """x (..., C); gate_w, up_w (F, C); down_w (C, F) -> y (..., C)."""
    g = x @ gate_w.T                                                               # (..., F)
    u = x @ up_w.T                                                                 # (..., F)
    s = _sigmoid(g)
    a = g * s                                                                      # silu(g) (..., F)
    h = a * u                                                                      # (..., F)
    return h @ down_w.T, (x, gate_w, up_w, down_w, g, u, s, a, h)                  # (..., C)


def swiglu_backward(dout: np.ndarray, cache: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """dout (..., C) -> dx (..., C), dgate_w (F, C), dup_w (F, C), ddown_w (C, F)."""
    x, gate_w, up_w, down_w, g, u, s, a, h = cache
    C, F = x.shape[-1], g.shape[-1]
    dh = dout @ down_w                                                             # (..., F)
    ddown_w = dout.reshape(-1, C).T @ h.reshape(-1, F)                             # (C, F)
    du = dh * a                                                                    # (..., F)
    dg = dh * u * s * (1.0 + g * (1.0 - s))                                        # (..., F)
    x2 = x.reshape(-1, C)
    dgate_w = dg.reshape(-1, F).T @ x2                                             # (F, C)
    dup_w = du.reshape(-1, F).T @ x2                                               # (F, C)
    dx = dg @ gate_w + du @ up_w                                                   # (..., C)
    return dx, dgate_w, dup_w, ddown_w


# ---------------------------------------------------------------------------------------------
# Cross-entropy, mean over the N targets that are not ignore_index:
#   L = -(1/N) sum_kept log softmax(z)[target]
#   dL/dz = (softmax(z) - onehot(target)) / N  on kept rows, 0 on ignored rows.
# ---------------------------------------------------------------------------------------------
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


def cross_entropy_backward(dloss: float, cache: tuple) -> np.ndarray:
    """dloss (scalar, 1.0 for the loss itself) -> dlogits (..., V); all zero if every target was ignored."""
    probs, t, rows, n, shape = cache
    dz = np.zeros_like(probs)                                                      # ignored rows stay 0
    if n:
        dz[rows] = probs[rows]
        dz[rows, t[rows]] -= 1.0
        dz *= dloss / n
    return dz.reshape(shape)


# ---------------------------------------------------------------------------------------------
# The whole model: parameters as a dict keyed by TinyLM's state_dict names
# ---------------------------------------------------------------------------------------------
def params_from_torch(model) -> dict[str, np.ndarray]:
    """A TinyLM's weights as float64 NumPy arrays, keyed by state_dict name.

    With a tied head, 'lm_head.weight' is left out: it *is* 'embed_tokens.weight', one parameter
    (as in model.named_parameters()), and model_backward gives that key both gradients.
    """
    from .model import TinyLM  # torch is only needed here

    if not isinstance(model, TinyLM):
        raise ValueError(f"params_from_torch needs a tinylm.TinyLM, got {type(model).__name__}")
    if model.cfg.n_experts:
        raise ValueError("backprop covers the dense model only: build the TinyLM with n_experts=0")
    params = {k: v.detach().cpu().double().numpy().copy() for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        del params["lm_head.weight"]
    return params


def param_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """The key -> shape of every parameter model_forward expects (tied head: no 'lm_head.weight')."""
    C, F, D = cfg.dim, cfg.ffn_dim, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (cfg.vocab_size, C)}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        shapes[p + "input_layernorm.weight"] = (C,)
        shapes[p + "self_attn.q_proj.weight"] = (cfg.n_heads * D, C)
        shapes[p + "self_attn.k_proj.weight"] = (cfg.n_kv_heads * D, C)
        shapes[p + "self_attn.v_proj.weight"] = (cfg.n_kv_heads * D, C)
        shapes[p + "self_attn.o_proj.weight"] = (C, cfg.n_heads * D)
        if cfg.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (D,)
            shapes[p + "self_attn.k_norm.weight"] = (D,)
        shapes[p + "post_attention_layernorm.weight"] = (C,)
        shapes[p + "mlp.gate_proj.weight"] = (F, C)
        shapes[p + "mlp.up_proj.weight"] = (F, C)
        shapes[p + "mlp.down_proj.weight"] = (C, F)
    shapes["norm.weight"] = (C,)
    if not cfg.tie_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, C)
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


def self_attn_backward(dout: np.ndarray, c: dict, prefix: str, cfg: Config) -> tuple[np.ndarray, dict]:
    """dout (B, T, C) -> dx (B, T, C) and the grads of this sub-layer's weights (full keys)."""
    B, T, _ = dout.shape
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    grads = {}
    dy, grads[prefix + "o_proj.weight"] = linear_backward(dout, c["o_proj"])      # (B, T, H*D)
    dy = dy.reshape(B, T, H, D).transpose(0, 2, 1, 3)                              # (B, H, T, D)
    dq, dk, dv = attention_backward(dy, c["attn"])                                 # (B, H|Hkv, T, D)
    dq, dk = rope_backward(dq, c["rope"]), rope_backward(dk, c["rope"])
    dq, dk, dv = dq.transpose(0, 2, 1, 3), dk.transpose(0, 2, 1, 3), dv.transpose(0, 2, 1, 3)  # (B, T, H|Hkv, D)
    if cfg.qk_norm:
        dq, grads[prefix + "q_norm.weight"] = rms_norm_backward(dq, c["q_norm"])
        dk, grads[prefix + "k_norm.weight"] = rms_norm_backward(dk, c["k_norm"])
    # x fed q, k and v: the three paths add
    dx, grads[prefix + "q_proj.weight"] = linear_backward(dq.reshape(B, T, H * D), c["q_proj"])
    dxk, grads[prefix + "k_proj.weight"] = linear_backward(dk.reshape(B, T, Hkv * D), c["k_proj"])
    dxv, grads[prefix + "v_proj.weight"] = linear_backward(dv.reshape(B, T, Hkv * D), c["v_proj"])
    return dx + dxk + dxv, grads                                                   # (B, T, C)


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


def block_backward(dout: np.ndarray, c: dict, i: int, cfg: Config) -> tuple[np.ndarray, dict]:
    """dout (B, T, C) -> dx (B, T, C) and block i's grads. A residual add passes dout through unchanged."""
    p = f"layers.{i}."
    grads = {}
    dh, dgate, dup, ddown = swiglu_backward(dout, c["mlp"])
    grads[p + "mlp.gate_proj.weight"], grads[p + "mlp.up_proj.weight"], grads[p + "mlp.down_proj.weight"] = (
        dgate, dup, ddown)
    dx_norm, grads[p + "post_attention_layernorm.weight"] = rms_norm_backward(dh, c["ln2"])
    dx = dout + dx_norm                                     # residual: identity path + through the MLP
    dh, g_attn = self_attn_backward(dx, c["attn"], p + "self_attn.", cfg)
    grads.update(g_attn)
    dx_norm, grads[p + "input_layernorm.weight"] = rms_norm_backward(dh, c["ln1"])
    return dx + dx_norm, grads


def _check_model_inputs(params: dict, cfg: Config, idx: np.ndarray, targets) -> None:
    if not isinstance(cfg, Config):
        raise ValueError(f"cfg must be a tinylm.Config, got {type(cfg).__name__}")
    if cfg.n_experts:
        raise ValueError("backprop covers the dense model only: use a Config with n_experts=0")
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
    cos, sin = rope_tables(cfg.head_dim, T, cfg.rope_base)                         # (T, D) each
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


def model_backward(cache: dict, dlogits: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Gradients of the loss (or of sum(logits * dlogits) if given) for every key of params.

    Runs the forward's steps in reverse. Tied head: the embedding matrix was used twice (gather at the
    bottom, output projection at the top), so its gradient is the sum of both uses.
    """
    cfg: Config = cache["cfg"]
    if dlogits is None:
        if "loss" not in cache:
            raise ValueError("model_forward ran without targets: pass dlogits (B, T, V) to model_backward")
        dlogits = cross_entropy_backward(1.0, cache["loss"])                      # (B, T, V)
    grads: dict[str, np.ndarray] = {}
    dh, dhead = linear_backward(dlogits, cache["lm_head"])                         # (B, T, C), (V, C)
    dx, grads["norm.weight"] = rms_norm_backward(dh, cache["norm"])
    for i in reversed(range(cfg.n_layers)):
        dx, g = block_backward(dx, cache["layers"][i], i, cfg)                     # (B, T, C)
        grads.update(g)
    dembed = embedding_backward(dx, cache["embed"])                                # (V, C)
    if cfg.tie_embeddings:
        grads["embed_tokens.weight"] = dembed + dhead
    else:
        grads["embed_tokens.weight"], grads["lm_head.weight"] = dembed, dhead
    return grads


# ---------------------------------------------------------------------------------------------
# Checking gradients numerically
# ---------------------------------------------------------------------------------------------
def grad_check(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Numerical gradient of a scalar f at x by central differences: (f(x + eps e_i) - f(x - eps e_i)) / 2eps.

    Works on a float64 copy of x (f receives that copy), one entry at a time: 2 * x.size calls of f.
    Error is O(eps^2) from truncation plus O(1e-16 |f| / eps) from rounding, about 1e-9 relative here.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"grad_check needs a floating-point x, got dtype {x.dtype}")
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    x = x.astype(np.float64, copy=True)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        f_plus = float(f(x))
        x[i] = old - eps
        f_minus = float(f(x))
        x[i] = old
        grad[i] = (f_plus - f_minus) / (2 * eps)
    return grad


@dataclass(frozen=True)
class GradCheck:
    """Analytic vs numerical gradient. Relative error = max |analytic - numerical| / max |numerical|."""

    max_abs_err: float
    max_rel_err: float
    per_input: dict[str, tuple[float, float]]  # name -> (max abs error, relative error)

    def __str__(self) -> str:
        rows = [f"{name:>12}: abs {a:.2e}  rel {r:.2e}" for name, (a, r) in self.per_input.items()]
        return "\n".join(rows + [f"{'worst':>12}: abs {self.max_abs_err:.2e}  rel {self.max_rel_err:.2e}"])


def _errors(analytic: np.ndarray, numerical: np.ndarray) -> tuple[float, float]:
    abs_err = float(np.max(np.abs(analytic - numerical))) if numerical.size else 0.0
    scale = float(np.max(np.abs(numerical))) if numerical.size else 0.0
    return abs_err, (abs_err / max(scale, 1e-300) if abs_err else 0.0)


def check_backward(forward_fn: Callable, backward_fn: Callable, inputs: Sequence, wrt: Sequence[int] | None = None,
                   names: Sequence[str] | None = None, eps: float = 1e-6, seed: int = 0) -> GradCheck:
    """Compare backward_fn with central differences for forward_fn(*inputs) -> (out, cache).

    backward_fn(dout, cache) must return the gradients of inputs[i] for i in wrt (default: all inputs),
    in that order (a single array if one). The scalar checked is L = sum(out * dout) with a fixed random
    dout, so every output element matters. Use small shapes: it costs 2 forwards per input entry.
    """
    inputs = list(inputs)
    wrt = list(range(len(inputs))) if wrt is None else list(wrt)
    names = [f"input {i}" for i in wrt] if names is None else list(names)
    if len(names) != len(wrt):
        raise ValueError(f"names has {len(names)} entries but wrt has {len(wrt)}; give one name per checked input")
    for i in wrt:
        inputs[i] = np.asarray(inputs[i], dtype=np.float64)
    out, cache = forward_fn(*inputs)
    dout = np.random.default_rng(seed).normal(size=np.shape(out)) if np.ndim(out) else 1.0
    grads = backward_fn(dout, cache)
    grads = (grads,) if isinstance(grads, np.ndarray) else tuple(grads)
    if len(grads) != len(wrt):
        raise ValueError(f"backward_fn returned {len(grads)} gradients for {len(wrt)} inputs in wrt={wrt}; "
                         "set wrt to the inputs it differentiates, in order")
    per_input = {}
    for name, i, g in zip(names, wrt, grads):
        def loss(xi, i=i):
            args = list(inputs)
            args[i] = xi
            return np.sum(forward_fn(*args)[0] * dout)
        num = grad_check(loss, inputs[i], eps)
        if np.shape(g) != num.shape:
            raise ValueError(f"gradient of {name} has shape {np.shape(g)}, the input has shape {num.shape}")
        per_input[name] = _errors(np.asarray(g), num)
    return GradCheck(max_abs_err=max((a for a, _ in per_input.values()), default=0.0),
                     max_rel_err=max((r for _, r in per_input.values()), default=0.0),
                     per_input=per_input)


# ---------------------------------------------------------------------------------------------
# Exercise checker: the learner writes SwiGLU's backward
# ---------------------------------------------------------------------------------------------
_SWIGLU_GRADS = ("dx", "dgate_w", "dup_w", "ddown_w")


def check_swiglu_backward(user_fn: Callable, seed: int = 0, rtol: float = 1e-6) -> str:
    """Grade user_fn(dout, x, gate_w, up_w, down_w) -> (dx, dgate_w, dup_w, ddown_w) on random inputs.

    x (B, T, C); gate_w, up_w (F, C); down_w (C, F); dout (B, T, C). Returns a verdict that starts with
    'pass' or 'fail', names every wrong gradient with its relative error, and hints at common slips.
    """
    if not callable(user_fn):
        raise ValueError(f"user_fn must be a function (dout, x, gate_w, up_w, down_w) -> 4 arrays, "
                         f"got {type(user_fn).__name__}")
    rng = np.random.default_rng(seed)
    B, T, C, F = 2, 3, 5, 7  # C != F so a transposed weight gradient shows up as a wrong shape
    x, dout = rng.normal(size=(B, T, C)), rng.normal(size=(B, T, C))
    gate_w, up_w, down_w = rng.normal(size=(F, C)), rng.normal(size=(F, C)), rng.normal(size=(C, F))
    _, cache = swiglu_forward(x, gate_w, up_w, down_w)
    expected = dict(zip(_SWIGLU_GRADS, swiglu_backward(dout, cache)))
    try:
        got = user_fn(dout.copy(), x.copy(), gate_w.copy(), up_w.copy(), down_w.copy())
    except NotImplementedError:
        return "fail: not written yet (your function raises NotImplementedError)"
    except Exception as e:  # the learner's code: report, don't crash the notebook
        return f"fail: your function raised {type(e).__name__}: {e}"
    if not isinstance(got, (tuple, list)) or len(got) != 4:
        return (f"fail: return four arrays (dx, dgate_w, dup_w, ddown_w); got "
                f"{type(got).__name__}{f' of length {len(got)}' if isinstance(got, (tuple, list)) else ''}")

    # Common slips, each as the gradient it would produce, with the hint to give
    _, _, _, _, g, u, s, a, h = cache
    dh = dout @ down_w                                                             # (B, T, F)
    dg, du = dh * u * s * (1 + g * (1 - s)), dh * a
    x2 = x.reshape(-1, C)
    slips = {
        "dx": [(dg @ gate_w, "only the gate path: x also feeds up_proj, add du @ up_w"),
               (du @ up_w, "only the up path: x also feeds gate_proj, add dg @ gate_w")],
        "dgate_w": [((dh * u * s).reshape(-1, F).T @ x2,
                     "SiLU's derivative is s * (1 + g * (1 - s)) with s = sigmoid(g), not sigmoid(g) alone")],
        "dup_w": [(dh.reshape(-1, F).T @ x2, "du = dh * silu(g): the up branch is multiplied by the gate")],
        "ddown_w": [(dout.reshape(-1, C).T @ a.reshape(-1, F), "down_proj's input is h = silu(g) * u, not silu(g)")],
    }
    wrong = []
    for name, g_user in zip(_SWIGLU_GRADS, got):
        want = expected[name]
        try:
            g_user = np.asarray(g_user, dtype=np.float64)
        except (TypeError, ValueError):
            wrong.append(f"{name} is not an array of numbers (got {type(g_user).__name__})")
            continue
        if g_user.shape != want.shape:
            hint = (" (transposed? a weight's gradient has the weight's (out, in) shape)"
                    if g_user.shape == want.shape[::-1] else "")
            wrong.append(f"{name} has shape {g_user.shape}, expected {want.shape}{hint}")
            continue
        abs_err, rel = _errors(g_user, want)
        if not rel <= rtol:  # written this way round so nan fails too
            msg = f"{name} is wrong: relative error {rel:.2g}"
            if np.isfinite(abs_err):
                where = np.unravel_index(np.argmax(np.abs(g_user - want)), want.shape)
                msg += f" (largest difference {abs_err:.2g} at index {tuple(int(j) for j in where)})"
            hints = [hint for slip, hint in [(-want, "the sign is flipped")] + slips[name]
                     if _errors(g_user, slip)[1] <= rtol]
            wrong.append(msg + (f". Hint: {hints[0]}" if hints else ""))
    if wrong:
        return "fail: " + "; ".join(wrong)
    # the tolerance, not the measured error: ~1e-16 differences vary with the machine, a verdict should not
    return f"pass: dx, dgate_w, dup_w and ddown_w all match (relative error below {rtol:g})"


# ---------------------------------------------------------------------------------------------
# Training in NumPy: gradient clipping and AdamW (Loshchilov & Hutter, 2019), as torch computes them
# ---------------------------------------------------------------------------------------------
def clip_grad_norm(grads: dict[str, np.ndarray], max_norm: float) -> float:
    """Scale all grads in place so their joint L2 norm is at most max_norm; return the norm before.

    Same rule as torch.nn.utils.clip_grad_norm_: factor min(1, max_norm / (norm + 1e-6)).
    """
    if not max_norm > 0:
        raise ValueError(f"max_norm must be positive, got {max_norm}")
    total = float(np.sqrt(sum(float(np.sum(g * g)) for g in grads.values())))
    coef = min(1.0, max_norm / (total + 1e-6))
    for g in grads.values():
        g *= coef
    return total


def adamw_step(params: dict[str, np.ndarray], grads: dict[str, np.ndarray], state: dict, lr: float = 1e-3,
               betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01) -> None:
    """One AdamW update of params, in place. Defaults are torch.optim.AdamW's.

    state: an empty dict before the first step; it keeps the step count and the moment estimates.
        p <- p * (1 - lr * wd)                         decoupled weight decay
        m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2
        p <- p - lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
    Weight decay applies to every key (as torch does for a single parameter group).
    """
    missing = sorted(set(params) - set(grads))
    if missing:
        raise ValueError(f"grads has no entry for {missing[:4]}; pass model_backward's output for these params")
    b1, b2 = betas
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"betas must lie in [0, 1), got {betas}")
    if not state:
        state.update(step=0, exp_avg={k: np.zeros_like(p) for k, p in params.items()},
                     exp_avg_sq={k: np.zeros_like(p) for k, p in params.items()})
    state["step"] += 1
    t = state["step"]
    bias1, bias2_sqrt = 1 - b1 ** t, np.sqrt(1 - b2 ** t)
    for k, p in params.items():
        g, m, v = grads[k], state["exp_avg"][k], state["exp_avg_sq"][k]
        p *= 1 - lr * weight_decay
        m += (1 - b1) * (g - m)
        v *= b2
        v += (1 - b2) * g * g
        p -= (lr / bias1) * m / (np.sqrt(v) / bias2_sqrt + eps)
