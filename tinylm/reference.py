"""NumPy references: each building block written out plainly, with the same names as `tinylm.model`.

The chapters show these first, then prove the torch modules compute the same numbers.
Shapes: B batch, T time (positions), H heads, D head_dim, C model width.
"""

from __future__ import annotations

import numpy as np


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (Zhang & Sennrich, 2019). No mean, no bias."""
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x / rms * weight


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm for comparison: subtract the mean, divide by the standard deviation, scale and shift."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * weight + bias


def rope_tables(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of shape (max_len, head_dim) for the rotate-half layout.

    Pair i (dimensions i and i + head_dim/2) turns by pos * base**(-2i/head_dim) radians.
    """
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (D/2,)
    angles = np.outer(np.arange(max_len, dtype=np.float64), inv_freq)            # (T, D/2)
    angles = np.concatenate([angles, angles], axis=-1)                             # (T, D)
    return np.cos(angles), np.sin(angles)


def rotate_half(x: np.ndarray) -> np.ndarray:
    """(x1, x2) -> (-x2, x1) where x1, x2 are the two halves of the last axis."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope(x: np.ndarray, positions: np.ndarray | None = None, base: float = 10000.0) -> np.ndarray:
    """Rotary embedding, rotate-half layout (Hugging Face/GGUF): x of shape (..., T, D).

    positions: the position of each of the T rows (default 0..T-1).
    """
    T, D = x.shape[-2], x.shape[-1]
    positions = np.arange(T) if positions is None else np.asarray(positions)
    cos, sin = rope_tables(D, int(positions.max()) + 1, base)
    cos, sin = cos[positions], sin[positions]                                      # (T, D)
    return x * cos + rotate_half(x) * sin


def rope_interleaved(x: np.ndarray, positions: np.ndarray | None = None, base: float = 10000.0) -> np.ndarray:
    """Rotary embedding, interleaved layout (the RoFormer paper, Meta's original Llama code):
    pair i is dimensions (2i, 2i+1) instead of (i, i + D/2). Same speeds, different pairing."""
    T, D = x.shape[-2], x.shape[-1]
    positions = np.arange(T) if positions is None else np.asarray(positions)
    inv_freq = base ** (-np.arange(0, D, 2, dtype=np.float64) / D)                 # (D/2,)
    angles = positions[:, None] * inv_freq[None, :]                                # (T, D/2)
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


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU (swish): x * sigmoid(x)."""
    return x / (1.0 + np.exp(-x))


def swiglu(x: np.ndarray, gate_w: np.ndarray, up_w: np.ndarray, down_w: np.ndarray) -> np.ndarray:
    """SwiGLU feed-forward (Shazeer, 2020): down(silu(gate(x)) * up(x)).

    Weights use torch's (out, in) layout: gate_w, up_w (F, C); down_w (C, F).
    """
    return (silu(x @ gate_w.T) * (x @ up_w.T)) @ down_w.T


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def repeat_kv(x: np.ndarray, n_rep: int) -> np.ndarray:
    """(B, Hkv, T, D) -> (B, Hkv*n_rep, T, D): each KV head repeated for the query heads that share it."""
    return np.repeat(x, n_rep, axis=1)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True) -> np.ndarray:
    """Scaled dot-product attention with grouped KV heads.

    q: (B, H, T, D); k, v: (B, Hkv, S, D) with H divisible by Hkv. Returns (B, H, T, D).
    With causal=True, query t (the last T of the S positions) sees keys up to its own position.
    """
    H, Hkv = q.shape[1], k.shape[1]
    if H % Hkv:
        raise ValueError(f"query heads ({H}) must be divisible by KV heads ({Hkv})")
    k, v = repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)                         # (B, H, S, D)
    T, S, D = q.shape[2], k.shape[2], q.shape[3]
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(D)                                   # (B, H, T, S)
    if causal:
        allowed = np.tril(np.ones((T, S), dtype=bool), k=S - T)
        scores = np.where(allowed, scores, -np.inf)
    return softmax(scores) @ v                                                     # (B, H, T, D)


# ---------------------------------------------------------------------------------------------
# Running past the trained length: rescaled RoPE speeds (chapter 3)
#
#   "pi"   position interpolation (Chen et al., 2023): every speed divided by `factor`.
#   "ntk"  NTK-aware base (bloc97, 2023): base * factor**(D/(D-2)); the slowest pair slows by exactly
#          `factor`, the fastest not at all.
#   "yarn" YaRN (Peng et al., 2023): pairs that turn more than beta_fast times within original_max_len
#          keep their speed, pairs that turn less than beta_slow times are divided by `factor`, a linear
#          ramp over the pair index in between (as in the authors' code and Hugging Face's "yarn").
# ---------------------------------------------------------------------------------------------
ROPE_SCALINGS = (None, "pi", "ntk", "yarn")


def rope_inv_freq(head_dim: int, base: float = 10000.0, scaling: str | None = None, factor: float = 1.0,
                  original_max_len: int = 1024, beta_fast: float = 32.0, beta_slow: float = 1.0) -> np.ndarray:
    """Rotation speed of each pair in radians per position, shape (head_dim/2,).

    scaling=None gives base**(-2i/head_dim), the speeds `rope_tables` uses; "pi", "ntk" and "yarn" rescale
    them so that `factor` times `original_max_len` positions reuse the angles seen in training.
    """
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim must be a positive even number (RoPE rotates pairs), got {head_dim}")
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base}")
    if scaling not in ROPE_SCALINGS:
        raise ValueError(f"scaling must be one of {ROPE_SCALINGS}, got {scaling!r}")
    if not factor >= 1:
        raise ValueError(f"factor must be >= 1 (how many times longer than the trained length), got {factor}")
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim              # (D/2,)
    if scaling == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    inv_freq = base ** -exponents                                                  # (D/2,)
    if scaling == "pi":
        return inv_freq / factor
    if scaling == "yarn":
        if not 0 < beta_slow < beta_fast:
            raise ValueError(f"need 0 < beta_slow < beta_fast, got beta_slow={beta_slow}, beta_fast={beta_fast}")

        def pair_index(turns: float) -> float:  # the (fractional) pair that turns `turns` times in original_max_len
            return head_dim * np.log(original_max_len / (turns * 2 * np.pi)) / (2 * np.log(base))

        low = max(np.floor(pair_index(beta_fast)), 0)
        high = min(np.ceil(pair_index(beta_slow)), head_dim - 1)
        ramp = np.clip((np.arange(head_dim // 2) - low) / max(high - low, 1e-3), 0, 1)  # 0: keep, 1: interpolate
        return inv_freq * (1 - ramp) + inv_freq / factor * ramp
    return inv_freq


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
    return x * np.cos(angles) + rotate_half(x) * np.sin(angles)
