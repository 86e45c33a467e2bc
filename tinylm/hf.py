"""The Hugging Face format: a TinyLM to and from `transformers` (LlamaForCausalLM, Qwen3ForCausalLM).

    to_hf(model)                 a transformers model holding the same weights
    save_hf_dir(model, path)     a `save_pretrained` directory: config.json + model.safetensors
    load_hf_dir(path)            a TinyLM from such a directory (SmolLM2-135M, Qwen3-0.6B from the hub)

tinylm uses Hugging Face's module names, so the only change is the `model.` prefix on the trunk.
Loading needs only `safetensors`; `transformers` is imported lazily by `to_hf` and `save_hf_dir`: the
course itself never needs it. GGUF files (llama.cpp's format) are read by `tinylm.pretrained`.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from ._checks import check_number
from ._loading import (FLOAT_BYTES, FLOAT_DTYPES, as_path, check_dtype, check_finite, check_listable, check_memory,
                       inside, read_json)
from .config import Config
from .model import TinyLM
from .params import state_size, weight_shapes
from .variants import check_llama_block


def hf_config(cfg: Config):
    """The `transformers` config of the same architecture: Qwen3 with QK-norm, Llama without."""
    if cfg.n_experts:
        raise ValueError("n_experts > 0 has no Llama/Qwen3 counterpart; use a dense config (n_experts=0)")
    check_llama_block(cfg, "the Hugging Face export (Llama/Qwen3)")
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
    if not isinstance(d, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(d).__name__}")
    kind = d.get("model_type")
    if not isinstance(kind, str) or kind not in HF_ARCHITECTURES:
        raise ValueError(f"{source}: model_type is {str(kind)[:80]!r}; tinylm loads {sorted(HF_ARCHITECTURES)} "
                         f"({', '.join(HF_ARCHITECTURES.values())})")
    for key in ("rope_parameters", "rope_scaling"):
        if d.get(key) is not None and not isinstance(d[key], dict):
            raise ValueError(f"{source}: {key} must be a JSON object (or null), got {str(d[key])[:80]!r}")
    rope = d.get("rope_parameters") or {"rope_theta": d.get("rope_theta", 10000.0),
                                        **(d.get("rope_scaling") or {"rope_type": "default"})}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ValueError(f"{source}: RoPE scaling {rope.get('rope_type', rope.get('type'))!r} (e.g. Llama 3.x's) is "
                         "not supported: tinylm's RoPE uses the plain speeds base**(-2i/head_dim)")
    theta = float(check_number(f"{source}: rope_theta", rope.get("rope_theta"), 1, low_open=True))
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
            rope_base=theta, norm_eps=d.get("rms_norm_eps", 1e-6), qk_norm=kind == "qwen3",
            tie_embeddings=d.get("tie_word_embeddings", False),
        )
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


INDEX = "model.safetensors.index.json"


def load_hf_dir(path: str | os.PathLike, dtype: torch.dtype | None = torch.float32,
                max_bytes: int | None = None) -> TinyLM:
    """A TinyLM (eval mode) from a directory written by transformers' `save_pretrained`: config.json and
    model.safetensors, or shards listed in model.safetensors.index.json. dtype: the weights' dtype
    (None: as stored, often bf16). The tokenizer of such a directory is transformers' (AutoTokenizer).

    Every tensor's name, dtype (a float) and shape is checked against config.json before any is read, and
    only the tensors the weight map names are read, each from its shard, which must lie inside the folder.
    max_bytes: refuse a model that needs more memory (None: half of this machine's RAM).
    """
    path, dtype = as_path(path), check_dtype(dtype)
    config = path / "config.json"
    if not config.is_file():
        raise ValueError(f"{path} has no config.json: is it a directory written by save_pretrained?")
    cfg = config_from_hf(read_json(config, "a model's config.json"), str(config))
    where = _weight_map(path)
    if cfg.tie_embeddings:
        where.pop("lm_head.weight", None)        # a tied head is the embedding, whatever the file also holds
    check_listable(str(path), len(where), state_size(cfg)[0], f"config.json's num_hidden_layers = {cfg.n_layers:,}")
    expected = weight_shapes(cfg)
    if cfg.tie_embeddings:
        del expected["lm_head.weight"]
    missing, unexpected = sorted(set(expected) - set(where)), sorted(set(where) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{path}: the weights do not fit config.json's model: missing {missing[:4]}, unexpected "
                         f"{unexpected[:4]}")
    with ExitStack() as stack:
        shards = {f: _open(f, stack) for f in sorted({f for f, _ in where.values()})}
        sizes = []
        for name, (f, key) in where.items():
            if key not in shards[f].keys():
                raise ValueError(f"{path / INDEX}: tensor {key!r} is not in {f.name}, where the weight map puts it")
            piece = shards[f].get_slice(key)
            shape, kind = tuple(piece.get_shape()), piece.get_dtype()
            if kind not in FLOAT_DTYPES or shape != expected[name]:
                raise ValueError(f"{f}: tensor {key!r} is {kind} {shape}; config.json's model needs a float tensor "
                                 f"({', '.join(FLOAT_DTYPES)}) of shape {expected[name]}")
            sizes.append(FLOAT_BYTES[kind])
        check_memory(str(path), cfg, max_bytes, dtype.itemsize if dtype is not None else max(sizes))
        weights: dict[str, torch.Tensor] = {}
        for name, (f, key) in where.items():
            t = shards[f].get_tensor(key)
            check_finite(t, str(f), repr(key))
            weights[name] = t if dtype is None else t.to(dtype)
    return TinyLM.from_weights(cfg, weights, max_bytes)


def _weight_map(path: Path) -> dict[str, tuple[Path, str]]:
    """tinylm name -> (shard, the tensor's name there): the index's weight map, or model.safetensors' tensors."""
    index = path / INDEX
    if index.is_file():
        d = read_json(index, "a safetensors index")
        if not isinstance(d, dict) or not isinstance(d.get("weight_map"), dict) or not d["weight_map"]:
            raise ValueError(f"{index}: expected a JSON object whose 'weight_map' maps each tensor name to its "
                             "shard file, e.g. {\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00002"
                             ".safetensors\"}}")
        files = {key: inside(path, shard, str(index), f"weight_map[{key!r}]") for key, shard in d["weight_map"].items()}
    elif (path / "model.safetensors").is_file():
        with ExitStack() as stack:
            files = dict.fromkeys(_open(path / "model.safetensors", stack).keys(), path / "model.safetensors")
    else:
        raise ValueError(f"{path} has no model.safetensors (nor {INDEX})")
    where: dict[str, tuple[Path, str]] = {}
    for key, f in files.items():
        name = key.removeprefix("model.")
        if name in where:
            raise ValueError(f"{path}: tensors {where[name][1]!r} and {key!r} are both {name}: one must go")
        where[name] = (f, key)
    return where


def _open(f: Path, stack: ExitStack):
    """safe_open of a safetensors file, kept open until the stack closes; ValueError if it is missing or not one."""
    if not f.is_file():
        raise ValueError(f"{f} is missing: the weight map ({f.parent / INDEX}) lists it")
    try:
        return stack.enter_context(safe_open(str(f), framework="pt"))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{f} is not a readable safetensors file ({e}); download it again") from None
