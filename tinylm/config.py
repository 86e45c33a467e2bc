"""One `Config` drives everything: the model, the parameter formula and the KV-cache size."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from ._checks import check_bool, check_int, check_number, check_one_of


# The RoPE tables are built for every position up front, in float64 (cos and sin: 16 bytes per position
# and head dimension). So the sizes that make them are bounded, and a config (or the few bytes of a file's
# metadata) cannot ask for gigabytes of tables: max_seq_len up to 2**17 = 131,072 positions (Llama 3.1's
# context), head_dim up to 1024 (real models: 64 to 256), and their product up to 2**24, 256 MiB of tables
# (131,072 positions at head_dim 128; Qwen3-0.6B, 40,960 x 128, takes 80 MiB).
MAX_SEQ_LEN = 2**17
MAX_HEAD_DIM = 2**10
MAX_ROPE_ENTRIES = 2**24      # max_seq_len x head_dim

# The other blocks, for ablations (`tinylm.variants`); the first of each is tinylm's own (Llama/Qwen3)
NORMS = ("rmsnorm", "layernorm", "none")
PLACEMENTS = ("pre", "post")
POSITIONS = ("rope", "learned", "none")
MLPS = ("swiglu", "gelu")


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
    head_dim: int | None = None  # width of each head; None: dim // n_heads (Qwen3-0.6B: 1024 wide, 16 x 128)
    ffn_dim: int = 2432         # hidden width of the SwiGLU feed-forward (intermediate_size)
    max_seq_len: int = 1024     # longest sequence the RoPE tables (and KV cache) cover (at most MAX_SEQ_LEN)
    rope_base: float = 10000.0  # RoPE base: pair i turns at base**(-2i/head_dim) radians per position
    norm_eps: float = 1e-5      # epsilon inside every RMSNorm
    qk_norm: bool = False       # RMSNorm over each head's q and k before RoPE (Qwen3)
    tie_embeddings: bool = True  # output head shares the embedding matrix
    n_experts: int = 0          # 0: dense SwiGLU; >0: mixture of this many SwiGLU experts
    experts_per_token: int = 2  # top-k experts each token is sent to (1 or 2; used when n_experts > 0)
    mlp_aux_weight: float = 0.01  # weight of the MoE load-balancing loss in the loss (Switch: 0.01)
    moe_every: int = 1          # experts in every moe_every-th block (blocks moe_every, 2*moe_every, ...
                                # counted from 1; Qwen2-MoE's decoder_sparse_step); the others stay dense
    moe_renormalize: bool = True  # top-k weights rescaled to sum to 1 (Mixtral); False: raw router
                                  # probabilities (Switch Transformer), so top-1 routing still learns
    dropout: float = 0.0        # share of each sub-layer's output zeroed before the residual add, in
                                # training only (GPT-2's residual dropout; Llama and Qwen3 use 0)
    # the variants for ablations (tinylm.variants); the defaults are the Llama/Qwen3 block
    norm: str = "rmsnorm"       # the blocks' and the final norm: "rmsnorm", "layernorm" (GPT-2), "none"
    norm_placement: str = "pre"  # "pre": x + f(norm(x)) (GPT-2, Llama); "post": norm(x + f(x)) (Vaswani et
                                 # al., 2017), and then no final norm: the last block's output is normalised
    positions: str = "rope"     # "rope"; "learned": a (max_seq_len, dim) embedding added to the token's
                                # (GPT-2); "none": no position signal but the causal mask (NoPE)
    mlp: str = "swiglu"         # "swiglu"; "gelu": down(gelu(up(x))) (GPT-2), ffn_dim wide; the width with
                                # SwiGLU's parameter count: tinylm.variants.gelu_ffn_dim
    bias: bool = False          # biases in the attention and MLP linears and in LayerNorm (GPT-2); the
                                # router, the head and RMSNorm never have one

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), low=1))  # numpy ints -> int
        object.__setattr__(self, "max_seq_len", check_int(
            "max_seq_len", self.max_seq_len, 1, MAX_SEQ_LEN,
            hint=" (tinylm.config.MAX_SEQ_LEN: the RoPE tables are built for every position up front)"))
        derived = self.head_dim is None
        if derived:  # the usual choice: the heads split the width between them
            if self.dim % self.n_heads:
                raise ValueError(
                    f"dim ({self.dim}) must be divisible by n_heads ({self.n_heads}) so every head gets "
                    f"the same head_dim; try n_heads in {_divisors(self.dim, limit=64)}"
                )
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        object.__setattr__(self, "head_dim", check_int("head_dim", self.head_dim, 1, MAX_HEAD_DIM,
                                                       hint=" (tinylm.config.MAX_HEAD_DIM)"))
        if self.max_seq_len * self.head_dim > MAX_ROPE_ENTRIES:
            raise ValueError(
                f"max_seq_len x head_dim = {self.max_seq_len:,} x {self.head_dim} exceeds tinylm.config."
                f"MAX_ROPE_ENTRIES = 2**24: the RoPE tables (16 bytes per position and head dimension) would take "
                f"{16 * self.max_seq_len * self.head_dim / 2**30:.1f} GiB; use max_seq_len <= "
                f"{MAX_ROPE_ENTRIES // self.head_dim:,}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads}) so each "
                f"KV head serves the same number of query heads; try n_kv_heads in {_divisors(self.n_heads)}"
            )
        if self.head_dim % 2:
            value = f"= dim / n_heads = {self.head_dim}" if derived else f"({self.head_dim})"
            raise ValueError(f"head_dim {value} must be even: RoPE rotates dimensions in pairs")
        object.__setattr__(self, "rope_base", check_number("rope_base", self.rope_base, 1, low_open=True))
        object.__setattr__(self, "norm_eps", check_number("norm_eps", self.norm_eps, 0, low_open=True))
        check_bool("qk_norm", self.qk_norm)
        check_bool("tie_embeddings", self.tie_embeddings)
        object.__setattr__(self, "n_experts",
                           check_int("n_experts", self.n_experts, low=0, hint=" (0 means dense SwiGLU)"))
        object.__setattr__(self, "experts_per_token", check_one_of("experts_per_token", self.experts_per_token, (1, 2)))
        object.__setattr__(self, "mlp_aux_weight", check_number("mlp_aux_weight", self.mlp_aux_weight, 0))
        object.__setattr__(self, "moe_every", check_int("moe_every", self.moe_every, low=1))
        check_bool("moe_renormalize", self.moe_renormalize)
        object.__setattr__(self, "dropout", check_number("dropout", self.dropout, 0, 1, high_open=True,
                                                         span="in [0, 1)"))
        for name, choices in (("norm", NORMS), ("norm_placement", PLACEMENTS), ("positions", POSITIONS),
                              ("mlp", MLPS)):
            check_one_of(name, getattr(self, name), choices, hint=" (the first is tinylm's own block)")
        check_bool("bias", self.bias)
        if self.norm == "none" and self.norm_placement == "post":
            raise ValueError("norm_placement='post' places the norms, and norm='none' has none; use "
                             "norm_placement='pre' with norm='none' (a block without norms)")
        if self.n_experts and self.moe_every > self.n_layers:
            raise ValueError(
                f"moe_every ({self.moe_every}) exceeds n_layers ({self.n_layers}): no block would get "
                f"experts; use moe_every <= {self.n_layers}, or n_experts=0 for a dense model"
            )
        if self.n_experts and self.experts_per_token > self.n_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) cannot exceed n_experts ({self.n_experts})"
            )

    def is_moe_layer(self, layer_idx: int) -> bool:
        """Whether block `layer_idx` (0-based) has experts instead of one SwiGLU."""
        return self.n_experts > 0 and (layer_idx + 1) % self.moe_every == 0

    @property
    def n_rep(self) -> int:
        """Query heads that share each KV head: n_heads // n_kv_heads."""
        return self.n_heads // self.n_kv_heads

    def replace(self, **changes) -> "Config":
        """A copy with some fields changed (validated again).

        A head_dim equal to dim // n_heads follows dim and n_heads (replace(dim=512) splits the new width);
        any other head_dim is kept unless changed too.
        """
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown Config field(s) {sorted(unknown)}; fields are {[f.name for f in fields(self)]}")
        if "head_dim" not in changes and self.head_dim * self.n_heads == self.dim:
            changes["head_dim"] = None
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
    # Shakespeare (tools/sweep.py): the best of the 3-minute sweep on 2 cores, and the shipped companion's
    # shape (40 minutes, with dropout: it passes over the works several times)
    "shakespeare-3min": Config(
        vocab_size=1024, dim=96, n_layers=4, n_heads=3, n_kv_heads=1, ffn_dim=256, max_seq_len=256,
        qk_norm=True,
    ),
    "shakespeare-companion": Config(
        vocab_size=1024, dim=256, n_layers=6, n_heads=8, n_kv_heads=2, ffn_dim=704, max_seq_len=256,
        qk_norm=True, dropout=0.1,
    ),
}
