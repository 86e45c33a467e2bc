"""tinylm: a small Llama/Qwen3-style decoder-only language model, written to be read."""

from .cache import KVCache
from .config import PRESETS, Config
from .model import (
    Attention, Block, RMSNorm, SwiGLU, TinyLM, apply_rope, attention, attention_explicit, repeat_kv,
    rope_tables,
)
from .params import ParamCount, count_params, kv_cache_bytes

__all__ = [
    "Attention", "Block", "Config", "KVCache", "PRESETS", "ParamCount", "RMSNorm", "SwiGLU", "TinyLM",
    "apply_rope", "attention", "attention_explicit", "count_params", "kv_cache_bytes", "repeat_kv",
    "rope_tables",
]
__version__ = "0.1.0"
