"""One `Config` drives everything: the model, the parameter formula and the KV-cache size."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class Config:
    """Shape of a Llama/Qwen3-style decoder-only transformer.

    Defaults are the course's running example (63,910,656 parameters).
    """

    vocab_size: int = 6400      # number of token ids; the embedding has one row per id
    dim: int = 768              # width of the residual stream (hidden_size in Hugging Face)
    n_layers: int = 8           # number of identical pre-norm blocks
    n_heads: int = 8            # query heads per attention layer
    n_kv_heads: int = 4         # key/value heads; each serves n_heads // n_kv_heads query heads
    ffn_dim: int = 2432         # hidden width of the SwiGLU feed-forward (intermediate_size)
    max_seq_len: int = 1024     # longest sequence the RoPE tables (and KV cache) cover
    rope_base: float = 10000.0  # RoPE base: pair i turns at base**(-2i/head_dim) radians per position
    norm_eps: float = 1e-5      # epsilon inside every RMSNorm
    qk_norm: bool = False       # RMSNorm over each head's q and k before RoPE (Qwen3)
    tie_embeddings: bool = True  # output head shares the embedding matrix
    n_experts: int = 0          # 0: dense SwiGLU; >0: mixture of this many SwiGLU experts
    experts_per_token: int = 2  # top-k experts each token is sent to (1 or 2; used when n_experts > 0)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an int, got {value!r}")
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.dim % self.n_heads:
            raise ValueError(
                f"dim ({self.dim}) must be divisible by n_heads ({self.n_heads}) so every head gets "
                f"the same head_dim; try n_heads in {_divisors(self.dim, limit=64)}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads}) so each "
                f"KV head serves the same number of query heads; try n_kv_heads in {_divisors(self.n_heads)}"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"head_dim = dim / n_heads = {self.head_dim} must be even: RoPE rotates dimensions in pairs"
            )
        if not isinstance(self.rope_base, (int, float)) or isinstance(self.rope_base, bool) or not self.rope_base > 1:
            raise ValueError(f"rope_base must be a number > 1, got {self.rope_base!r}")
        if not isinstance(self.norm_eps, (int, float)) or isinstance(self.norm_eps, bool) or not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be a number > 0, got {self.norm_eps!r}")
        for name in ("qk_norm", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if isinstance(self.n_experts, bool) or not isinstance(self.n_experts, int) or self.n_experts < 0:
            raise ValueError(f"n_experts must be an int >= 0 (0 means dense SwiGLU), got {self.n_experts!r}")
        if self.experts_per_token not in (1, 2) or isinstance(self.experts_per_token, bool):
            raise ValueError(f"experts_per_token must be 1 or 2, got {self.experts_per_token!r}")
        if self.n_experts and self.experts_per_token > self.n_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) cannot exceed n_experts ({self.n_experts})"
            )

    @property
    def head_dim(self) -> int:
        """Dimensions per attention head: dim // n_heads."""
        return self.dim // self.n_heads

    @property
    def n_rep(self) -> int:
        """Query heads that share each KV head: n_heads // n_kv_heads."""
        return self.n_heads // self.n_kv_heads

    def replace(self, **changes) -> "Config":
        """A copy with some fields changed (validated again)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown Config field(s) {sorted(unknown)}; fields are {[f.name for f in fields(self)]}")
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown Config field(s) {sorted(unknown)}")
        return cls(**d)

    @classmethod
    def from_preset(cls, name: str, **changes) -> "Config":
        """One of PRESETS by name, optionally with some fields changed."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return PRESETS[name].replace(**changes) if changes else PRESETS[name]


def _divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (limit or n) + 1) if n % d == 0]


PRESETS: dict[str, Config] = {
    "running-example": Config(),
    "small-variant": Config(dim=512, ffn_dim=1408),
    "mini-companion": Config(
        vocab_size=4096, dim=256, n_layers=4, n_heads=8, n_kv_heads=2, ffn_dim=704,
        max_seq_len=256, qk_norm=True,
    ),
}
