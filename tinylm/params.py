"""Counting before building: the analytic parameter count and KV-cache size of a `Config`."""

from __future__ import annotations

from dataclasses import dataclass

from .config import Config


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


def attention_params(cfg: Config) -> int:
    """One block's attention: q and o are dim x (n_heads*head_dim); k and v are dim x (n_kv_heads*head_dim)."""
    q_and_o = 2 * cfg.dim * cfg.n_heads * cfg.head_dim
    k_and_v = 2 * cfg.dim * cfg.n_kv_heads * cfg.head_dim
    qk_norm = 2 * cfg.head_dim if cfg.qk_norm else 0
    return q_and_o + k_and_v + qk_norm


def feed_forward_params(cfg: Config) -> int:
    """One block's SwiGLU (gate, up, down: 3 x dim x ffn_dim), or router + experts with MoE."""
    swiglu = 3 * cfg.dim * cfg.ffn_dim
    if cfg.n_experts == 0:
        return swiglu
    return cfg.dim * cfg.n_experts + cfg.n_experts * swiglu


def count_params(cfg: Config) -> ParamCount:
    """Count every weight of `TinyLM(cfg)` from the config alone."""
    swiglu = 3 * cfg.dim * cfg.ffn_dim
    active_ff = swiglu if cfg.n_experts == 0 else cfg.dim * cfg.n_experts + cfg.experts_per_token * swiglu
    return ParamCount(
        embedding=cfg.vocab_size * cfg.dim,
        attention=cfg.n_layers * attention_params(cfg),
        feed_forward=cfg.n_layers * feed_forward_params(cfg),
        norms=cfg.n_layers * 2 * cfg.dim + cfg.dim,
        head=0 if cfg.tie_embeddings else cfg.vocab_size * cfg.dim,
        active_feed_forward=cfg.n_layers * active_ff,
    )


def kv_cache_bytes(cfg: Config, seq_len: int, batch: int = 1, bytes_per: int = 2) -> int:
    """Bytes of a KV cache: 2 (K and V) x layers x batch x n_kv_heads x seq_len x head_dim x bytes_per.

    bytes_per is 2 for bf16/fp16, 4 for fp32. Only the KV heads are stored, never their repeats.
    """
    for name, value in (("seq_len", seq_len), ("batch", batch), ("bytes_per", bytes_per)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return 2 * cfg.n_layers * batch * cfg.n_kv_heads * seq_len * cfg.head_dim * bytes_per
