"""The Hugging Face format: a TinyLM to and from `transformers` (LlamaForCausalLM, Qwen3ForCausalLM).

    to_hf(model)                 a transformers model holding the same weights
    save_hf_dir(model, path)     a `save_pretrained` directory: config.json + model.safetensors
    load_hf_dir(path)            a TinyLM from such a directory (SmolLM2-135M, Qwen3-0.6B from the hub)

tinylm uses Hugging Face's module names, so the only change is the `model.` prefix on the trunk.
Loading needs only `safetensors`; `transformers` is imported lazily by `to_hf` and `save_hf_dir`: the
course itself never needs it. GGUF files (llama.cpp's format) are read by `tinylm.pretrained`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

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


# ---------------------------------------------------------------------------------------------
# save_pretrained directories
# ---------------------------------------------------------------------------------------------
HF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def save_hf_dir(model: TinyLM, path: str | os.PathLike) -> None:
    """Write model as transformers' `save_pretrained` does (config.json, model.safetensors): a directory
    that `AutoModelForCausalLM.from_pretrained(path)` and `load_hf_dir(path)` read."""
    to_hf(model).save_pretrained(path)


def config_from_hf(d: dict[str, Any], source: str = "config.json") -> Config:
    """tinylm's Config from a transformers config.json (Llama or Qwen3); ValueError for what a TinyLM lacks."""
    kind = d.get("model_type")
    if kind not in HF_ARCHITECTURES:
        raise ValueError(f"{source}: model_type is {kind!r}; tinylm loads {sorted(HF_ARCHITECTURES)} "
                         f"({', '.join(HF_ARCHITECTURES.values())})")
    rope = d.get("rope_parameters") or {"rope_theta": d.get("rope_theta", 10000.0),
                                        **(d.get("rope_scaling") or {"rope_type": "default"})}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ValueError(f"{source}: RoPE scaling {rope.get('rope_type', rope.get('type'))!r} (e.g. Llama 3.x's) is "
                         "not supported: tinylm's RoPE uses the plain speeds base**(-2i/head_dim)")
    for key, ok in (("attention_bias", False), ("mlp_bias", False), ("hidden_act", "silu"),
                    ("use_sliding_window", False)):
        if d.get(key, ok) != ok:
            raise ValueError(f"{source}: {key} = {d[key]!r} is not supported (tinylm: {ok!r})")
    n_heads = d.get("num_attention_heads")
    try:
        return Config(
            vocab_size=d.get("vocab_size"), dim=d.get("hidden_size"), n_layers=d.get("num_hidden_layers"),
            n_heads=n_heads, n_kv_heads=d.get("num_key_value_heads") or n_heads, head_dim=d.get("head_dim"),
            ffn_dim=d.get("intermediate_size"), max_seq_len=d.get("max_position_embeddings", 2048),
            rope_base=float(rope["rope_theta"]), norm_eps=d.get("rms_norm_eps", 1e-6), qk_norm=kind == "qwen3",
            tie_embeddings=d.get("tie_word_embeddings", False),
        )
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def load_hf_dir(path: str | os.PathLike, dtype: torch.dtype | None = torch.float32) -> TinyLM:
    """A TinyLM (eval mode) from a directory written by transformers' `save_pretrained`: config.json and
    model.safetensors, or shards listed in model.safetensors.index.json. dtype: the weights' dtype
    (None: as stored, often bf16). The tokenizer of such a directory is transformers' (AutoTokenizer)."""
    path = Path(path)
    config = path / "config.json"
    if not config.is_file():
        raise ValueError(f"{path} has no config.json: is it a directory written by save_pretrained?")
    try:
        d = json.loads(config.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{config} is not valid JSON ({e})") from None
    cfg = config_from_hf(d if isinstance(d, dict) else {}, str(config))
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    elif (path / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise ValueError(f"{path} has no model.safetensors (nor model.safetensors.index.json)")
    weights: dict[str, torch.Tensor] = {}
    for name in files:
        for key, value in load_file(path / name).items():
            weights[key.removeprefix("model.")] = value if dtype is None else value.to(dtype)
    if cfg.tie_embeddings:
        weights.pop("lm_head.weight", None)        # a tied head is the embedding, whatever the file also holds
    try:
        return TinyLM.from_weights(cfg, weights)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
