"""Tiny GGUF files written the way llama.cpp's converter writes them (for tests; nothing is shipped).

    path = write_gguf(tmp_path / "tiny.gguf", model, tok)    # q/k rows permuted for "llama", ggml shapes
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

from tinylm import TinyLM
from tinylm.pretrained import _BLOCK, _TOP, permute_qk, unicode_to_byte
from tinylm.tokenizer import BPETokenizer

GGUF_NAME = {v: k for k, v in _TOP.items()} | {v: k for k, v in _BLOCK.items()}   # tinylm -> GGUF module names
BYTE_TO_UNICODE = {b: c for c, b in unicode_to_byte().items()}                     # GPT-2's spelling of bytes


def gguf_name(name: str) -> str:
    """'layers.3.mlp.up_proj.weight' -> 'blk.3.ffn_up.weight'."""
    parts = name.split(".")
    if parts[0] == "layers":
        return f"blk.{parts[1]}.{GGUF_NAME['.'.join(parts[2:-1])]}.weight"
    return f"{GGUF_NAME[parts[0]]}.weight"


def spell(b: bytes) -> str:
    return "".join(BYTE_TO_UNICODE[x] for x in b)


def tokenizer_metadata(tok: BPETokenizer, specials_first: bool = True) -> dict:
    """A course tokenizer as GGUF tokenizer metadata (GPT-2 spelling). specials_first: SmolLM2's order
    (specials, bytes, merges), so that the ids differ from the course layout."""
    order = ([tok.special_ids[s] for s in tok.specials] + list(range(tok.vocab_size - len(tok.specials)))
             if specials_first else list(range(tok.vocab_size)))
    special = set(tok.special_ids.values())
    tokens = [tok.token_bytes(i).decode() if i in special else spell(tok.token_bytes(i)) for i in order]
    types = [3 if i in special else 1 for i in order]
    merges = [f"{spell(tok.token_bytes(a))} {spell(tok.token_bytes(b))}" for a, b in tok.merges]
    return {"tokens": tokens, "types": types, "merges": merges, "new_id": {old: new for new, old in enumerate(order)}}


def write_gguf(path, model: TinyLM, tok: BPETokenizer | None = None, arch: str = "llama", quant: bool = False,
               pre: str = "smollm", drop: str | None = None, extra: dict | None = None, meta: dict | None = None,
               chat_template: str | None = None):
    """model as a GGUF file; `drop` leaves a tensor out, `extra` adds tensors, `meta` overrides metadata."""
    cfg = model.cfg
    w = GGUFWriter(str(path), arch=arch)
    fields = {"block_count": cfg.n_layers, "context_length": cfg.max_seq_len, "embedding_length": cfg.dim,
              "feed_forward_length": cfg.ffn_dim, "attention.head_count": cfg.n_heads,
              "attention.head_count_kv": cfg.n_kv_heads, "rope.freq_base": cfg.rope_base,
              "attention.layer_norm_rms_epsilon": cfg.norm_eps, "vocab_size": cfg.vocab_size,
              "attention.key_length": cfg.head_dim, "attention.value_length": cfg.head_dim,
              "rope.dimension_count": cfg.head_dim} | (meta or {})
    for key, value in fields.items():
        if isinstance(value, float):
            w.add_float32(f"{arch}.{key}", value)
        elif value is not None:
            w.add_uint32(f"{arch}.{key}", value)
    if tok is not None:
        t = tokenizer_metadata(tok)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(t["tokens"])
        w.add_token_types(t["types"])
        w.add_token_merges(t["merges"])
        if tok.eos is not None:
            w.add_eos_token_id(t["new_id"][tok.eos_id])
        if chat_template is not None:
            w.add_chat_template(chat_template)
    tensors = {gguf_name(k): v.detach().float().numpy() for k, v in model.state_dict().items()
               if not (cfg.tie_embeddings and k == "lm_head.weight")}
    tensors |= extra or {}
    for name, a in tensors.items():
        if name == drop:
            continue
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = cfg.n_heads if name.endswith("attn_q.weight") else cfg.n_kv_heads
            a = permute_qk(torch.from_numpy(a), heads).numpy()
        if quant and a.ndim == 2:
            qt = GGMLQuantizationType.Q8_0 if name == "token_embd.weight" else GGMLQuantizationType.Q4_1
            w.add_tensor(name, quantize(a, qt), raw_dtype=qt)
        else:
            w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
