"""tinylm: a small Llama/Qwen3-style decoder-only language model, written to be read."""

from .cache import KVCache
from .config import PRESETS, Config
from .generate import (
    apply_repetition_penalty, apply_temperature, generate, left_pad, sample_next, top_k_filter, top_p_filter,
)
from .model import (
    Attention, Block, RMSNorm, SwiGLU, TinyLM, apply_rope, attention, attention_explicit, repeat_kv,
    rope_tables,
)
from .params import ParamCount, count_params, kv_cache_bytes
from .tokenizer import BPETokenizer

__all__ = [
    "Attention", "BPETokenizer", "Block", "Config", "KVCache", "PRESETS", "ParamCount", "RMSNorm", "SwiGLU",
    "TinyLM", "apply_repetition_penalty", "apply_rope", "apply_temperature", "attention", "attention_explicit",
    "count_params", "generate", "kv_cache_bytes", "left_pad", "repeat_kv", "rope_tables", "sample_next",
    "top_k_filter", "top_p_filter",
]
__version__ = "0.1.0"
