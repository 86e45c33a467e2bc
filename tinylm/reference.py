"""NumPy references: each building block of the model written out plainly, once, with `tinylm.model`'s names.

The chapters show these first, then prove the torch modules compute the same numbers; `tinylm.numpy_model`
chains them into the whole model (keeping what the backward passes of `tinylm.backprop` need).
The causal mask and RoPE's speeds come from `tinylm.positions`, shared with the torch model.
Shapes: B batch, T time (positions), H heads, D head_dim, C model width. Weights use torch's (out, in) layout.
"""

from __future__ import annotations

import numpy as np

# shared with the torch model; chapter 4 calls ref.rope_inv_freq
from .positions import ROPE_SCALINGS, causal_mask, rope_inv_freq  # noqa: F401


def linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """y = x @ weight.T: x (..., in), weight (out, in) -> (..., out), as `nn.Linear(bias=False)`."""
    return x @ weight.T


def rms(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """sqrt(mean(x^2) + eps) over the last axis, kept as a size-1 axis: (..., C) -> (..., 1)."""
    return np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (Zhang & Sennrich, 2019). No mean, no bias."""
    return x / rms(x, eps) * weight


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm for comparison: subtract the mean, divide by the standard deviation, scale and shift."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * weight + bias


# ---------------------------------------------------------------------------------------------
# RoPE (Su et al., 2021): speeds from `positions.rope_inv_freq`, rotate-half layout as in tinylm.model
# ---------------------------------------------------------------------------------------------
def rope_tables(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of shape (max_len, head_dim) for the rotate-half layout.

    Pair i (dimensions i and i + head_dim/2) turns by pos * base**(-2i/head_dim) radians.
    """
    angles = np.outer(np.arange(max_len, dtype=np.float64), rope_inv_freq(head_dim, base))  # (T, D/2)
    angles = np.concatenate([angles, angles], axis=-1)                             # (T, D)
    return np.cos(angles), np.sin(angles)


def rotate_half(x: np.ndarray) -> np.ndarray:
    """(x1, x2) -> (-x2, x1) where x1, x2 are the two halves of the last axis."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate x (..., T, D) by the angles whose cos, sin (T, D) are given: x * cos + rotate_half(x) * sin."""
    return x * cos + rotate_half(x) * sin


def rope(x: np.ndarray, positions: np.ndarray | None = None, base: float = 10000.0) -> np.ndarray:
    """Rotary embedding, rotate-half layout (Hugging Face/GGUF): x of shape (..., T, D).

    positions: the position of each of the T rows (default 0..T-1).
    """
    T, D = x.shape[-2], x.shape[-1]
    positions = np.arange(T) if positions is None else np.asarray(positions)
    cos, sin = rope_tables(D, int(positions.max()) + 1, base)
    return apply_rope(x, cos[positions], sin[positions])                           # cos, sin: (T, D)


def rope_interleaved(x: np.ndarray, positions: np.ndarray | None = None, base: float = 10000.0) -> np.ndarray:
    """Rotary embedding, interleaved layout (the RoFormer paper, Meta's original Llama code):
    pair i is dimensions (2i, 2i+1) instead of (i, i + D/2). Same speeds, different pairing."""
    T, D = x.shape[-2], x.shape[-1]
    positions = np.arange(T) if positions is None else np.asarray(positions)
    angles = positions[:, None] * rope_inv_freq(D, base)[None, :]                  # (T, D/2)
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[..., 0::2], x[..., 1::2]                                         # (..., T, D/2) each
    out = np.empty_like(x, dtype=np.result_type(x, np.float64))
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def interleaved_to_half(D: int) -> np.ndarray:
    """Permutation p with x[..., p] taking an interleaved layout (0,1),(2,3),... to rotate-half (i, i+D/2).

    rope(x[..., p]) == rope_interleaved(x)[..., p]: permute q/k projection rows once and the layouts agree.
    """
    return np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])


def rope_with_inv_freq(x: np.ndarray, positions: np.ndarray | None = None,
                       inv_freq: np.ndarray | None = None) -> np.ndarray:
    """Rotate-half RoPE with given pair speeds (D/2,), e.g. from `rope_inv_freq`: x of shape (..., T, D).

    With inv_freq = rope_inv_freq(D, base) this is exactly `rope(x, positions, base)`.
    """
    T, D = x.shape[-2], x.shape[-1]
    positions = np.arange(T) if positions is None else np.asarray(positions)
    inv_freq = rope_inv_freq(D) if inv_freq is None else np.asarray(inv_freq, dtype=np.float64)
    if inv_freq.shape != (D // 2,):
        raise ValueError(f"inv_freq must have shape ({D // 2},), one speed per pair of the last axis; got {inv_freq.shape}")
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]              # (T, D/2)
    angles = np.concatenate([angles, angles], axis=-1)                             # (T, D)
    return apply_rope(x, np.cos(angles), np.sin(angles))


# ---------------------------------------------------------------------------------------------
# SwiGLU (Shazeer, 2020)
# ---------------------------------------------------------------------------------------------
def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x))."""
    return 1.0 / (1.0 + np.exp(-x))


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU (swish): x * sigmoid(x)."""
    return x * sigmoid(x)


def swiglu(x: np.ndarray, gate_w: np.ndarray, up_w: np.ndarray, down_w: np.ndarray) -> np.ndarray:
    """SwiGLU feed-forward (Shazeer, 2020): down(silu(gate(x)) * up(x)).

    Weights use torch's (out, in) layout: gate_w, up_w (F, C); down_w (C, F).
    """
    return linear(silu(linear(x, gate_w)) * linear(x, up_w), down_w)


# ---------------------------------------------------------------------------------------------
# Attention with grouped KV heads (GQA, Ainslie et al., 2023)
# ---------------------------------------------------------------------------------------------
def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x) / sum(exp(x)) along axis, after subtracting the max (so exp never overflows)."""
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def repeat_kv(x: np.ndarray, n_rep: int) -> np.ndarray:
    """(B, Hkv, T, D) -> (B, Hkv*n_rep, T, D): each KV head repeated for the query heads that share it."""
    return np.repeat(x, n_rep, axis=1)


def kv_groups(q: np.ndarray, k: np.ndarray) -> int:
    """n_rep = H // Hkv, the query heads that share each KV head of q (B, H, T, D) and k (B, Hkv, S, D)."""
    H, Hkv = q.shape[1], k.shape[1]
    if H % Hkv:
        raise ValueError(f"query heads ({H}) must be divisible by KV heads ({Hkv}); check q and k's axis 1")
    return H // Hkv


def attention_weights(q: np.ndarray, k: np.ndarray, causal: bool = True) -> np.ndarray:
    """softmax(q k^T / sqrt(D)), masked: q (B, H, T, D), k (B, H, S, D) one per query head -> (B, H, T, S).

    With causal=True query t (the last T of the S positions) gets weight 0 on the keys after it.
    """
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(D)                                   # (B, H, T, S)
    if causal:
        scores = np.where(causal_mask(T, S), scores, -np.inf)
    return softmax(scores)                                                         # rows sum to 1


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True) -> np.ndarray:
    """Scaled dot-product attention with grouped KV heads.

    q: (B, H, T, D); k, v: (B, Hkv, S, D) with H divisible by Hkv. Returns (B, H, T, D).
    With causal=True, query t (the last T of the S positions) sees keys up to its own position.
    """
    n_rep = kv_groups(q, k)
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)                                # (B, H, S, D)
    return attention_weights(q, k, causal) @ v                                     # (B, H, T, D)
