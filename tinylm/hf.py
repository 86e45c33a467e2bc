"""Exporting a TinyLM to Hugging Face `transformers` (LlamaForCausalLM, Qwen3ForCausalLM).

tinylm uses Hugging Face's module names, so the only change is the `model.` prefix on the trunk.
One direction only: this module writes to `transformers`; it does not load from it.
`transformers` is imported lazily: the course itself never needs it.
"""

from __future__ import annotations

import torch

from .config import Config
from .model import TinyLM


def hf_config(cfg: Config):
    """The `transformers` config of the same architecture: Qwen3 with QK-norm, Llama without."""
    if cfg.n_experts:
        raise ValueError("n_experts > 0 has no Llama/Qwen3 counterpart; use a dense config (n_experts=0)")
    common = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.max_seq_len, rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_base, tie_word_embeddings=cfg.tie_embeddings, attention_bias=False,
        hidden_act="silu", bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    if cfg.qk_norm:
        from transformers import Qwen3Config

        return Qwen3Config(**common, use_sliding_window=False)
    from transformers import LlamaConfig

    return LlamaConfig(**common, mlp_bias=False)


def to_hf_state_dict(model: TinyLM) -> dict[str, torch.Tensor]:
    """tinylm names -> transformers names: `model.` before the trunk, `lm_head` unchanged."""
    return {(k if k.startswith("lm_head.") else "model." + k): v for k, v in model.state_dict().items()}


def to_hf(model: TinyLM):
    """A `LlamaForCausalLM` / `Qwen3ForCausalLM` holding copies of the same weights, in eval mode."""
    if model.cfg.qk_norm:
        from transformers import Qwen3ForCausalLM as Cls
    else:
        from transformers import LlamaForCausalLM as Cls
    hf = Cls(hf_config(model.cfg)).to(next(model.parameters()).dtype)
    missing, unexpected = hf.load_state_dict(to_hf_state_dict(model), strict=False)
    missing = [k for k in missing if not (model.cfg.tie_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"weights did not map one to one: missing {missing}, unexpected {unexpected}")
    if model.cfg.tie_embeddings:
        hf.tie_weights()
    return hf.eval()
