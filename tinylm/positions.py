"""Where each position may look and how fast it turns: the causal mask and RoPE's pair speeds.

One NumPy implementation of each, in float64, used by the torch model (`tinylm.model` turns them into
tensors) and by the NumPy references (`tinylm.reference`, `tinylm.numpy_model`) alike.

    causal_mask(T, S)       (T, S) bool: the T queries are the last T of S positions
    rope_inv_freq(D, base)  (D/2,) float64: pair i turns at base**(-2i/D) radians per position

Shapes: T queries, S keys (S >= T: earlier positions come from a KV cache), D head_dim.
"""

from __future__ import annotations

import numpy as np

from ._checks import check_int, check_number, check_one_of


def causal_mask(T: int, S: int) -> np.ndarray:
    """(T, S) bool, True where allowed: query t is position S - T + t and sees keys 0 ... S - T + t."""
    return np.tril(np.ones((T, S), dtype=bool), k=S - T)


# ---------------------------------------------------------------------------------------------
# RoPE speeds (Su et al., 2021), and running past the trained length: rescaled speeds (chapter 4)
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
    """Rotation speed of each pair in radians per position, shape (head_dim/2,), float64.

    scaling=None gives base**(-2i/head_dim), the speeds of `rope_tables` (torch and NumPy); "pi", "ntk"
    and "yarn" rescale them so that `factor` times `original_max_len` positions reuse the angles seen in
    training. Speeds only: YaRN also multiplies cos and sin by 0.1 ln(factor) + 1 (Hugging Face's
    `attention_scaling`), which the caller applies.
    """
    if check_int("head_dim", head_dim, low=1) % 2:
        raise ValueError(f"head_dim must be a positive even number (RoPE rotates pairs), got {head_dim}")
    check_number("base", base, 1, low_open=True)
    check_one_of("scaling", scaling, ROPE_SCALINGS)
    check_number("factor", factor, 1, hint=" (how many times longer than the trained length)")
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim              # (D/2,) 2i/D
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
