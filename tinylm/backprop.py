"""Backpropagation by hand, in NumPy: the backward pass of every piece of TinyLM, and of the whole model.

Every piece comes as a pair; the forward half lives in `tinylm.numpy_model` (built from `tinylm.reference`):

    out, cache = <name>_forward(inputs...)      # computes out, keeps what backward will need
    grads      = <name>_backward(dout, cache)    # dout = dL/dout (same shape as out) -> dL/dinputs

The chain rule is then just calling the backwards in reverse order. Each backward is a
vector-Jacobian product: it never builds a Jacobian, it maps dL/dout to dL/dinput directly.
`model_backward` runs the whole TinyLM backwards from `numpy_model.model_forward`'s cache. Checking
them against central differences is `tinylm.gradcheck`; training with the gradients, `tinylm.optim`.

Training a TinyLM's weights entirely in NumPy (every name is also reachable as `backprop.<name>`):

    params = params_from_torch(model)            # float64 arrays keyed by state_dict name
    state = {}
    logits, loss, cache = model_forward(params, model.cfg, idx, targets)
    grads = model_backward(cache)                 # same keys as params
    clip_grad_norm(grads, 1.0); adamw_step(params, grads, state, lr=3e-4)

Shapes: B batch, T time, C = dim, H query heads, Hkv KV heads, D head_dim, F = ffn_dim, V vocab.
Weights use torch's (out, in) layout, so a linear layer is y = x @ W.T.
"""

from __future__ import annotations

import numpy as np

from .config import Config
from .reference import apply_rope

# The forward halves, checking and training, re-exported (not re-implemented) so that a chapter reaches
# every piece of backpropagation as `bp.<name>`.
from .gradcheck import GradCheck, check_backward, grad_check, max_errors  # noqa: F401
from .numpy_model import (  # noqa: F401
    attention_forward, block_forward, cross_entropy_forward, embedding_forward, linear_forward, model_forward,
    param_shapes, params_from_torch, rms_norm_forward, rope_forward, self_attn_forward, swiglu_forward,
)
from .optim import adamw_step, clip_grad_norm  # noqa: F401


# ---------------------------------------------------------------------------------------------
# Linear: y = x W^T
#   dL/dx = dL/dy W                (each input feeds every output through W)
#   dL/dW = sum over tokens of dL/dy^T x    (outer product, summed over B and T)
# ---------------------------------------------------------------------------------------------
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
def rope_backward(dout: np.ndarray, cache: tuple) -> np.ndarray:
    """dout (..., T, D) -> dx (..., T, D): rotate back by -angle."""
    cos, sin = cache
    return apply_rope(dout, cos, -sin)


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
# The whole model, backwards: gradients keyed by TinyLM's state_dict names
# ---------------------------------------------------------------------------------------------
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


