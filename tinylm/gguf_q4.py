"""A GGUF file's own 4-bit blocks, loaded as they are: `load_gguf_q4(path)`, a TinyLM that multiplies by them.

`tinylm.pretrained.load_gguf` dequantizes every tensor to fp32. This loader keeps each Q4_0 / Q4_1 matrix as
its codes and scales (`tinylm.q4.Q4Linear`, torch's int4 kernel), nothing dequantized or requantized; only
scale and zero are rounded to bf16. llama.cpp's reordering of Llama's q/k rows (`pretrained.unpermute_qk`) is
undone on the codes and scales, which are rows too. A 2-D weight the file stores otherwise takes the nearest
fast path measured here (`tinylm.quantize.Int8Linear`, int8 per output channel, from its dequantized values):
SmolLM2's tied head, stored once as the Q8_0 embedding, is one, and its 49,152 x 576 matrix ran 2x faster as
int8pack than in fp32 (the README's kernel table). The embedding itself is dequantized to fp32 for the lookup,
which reads one row per token.
"""

from __future__ import annotations

import os

import torch

from .model import TinyLM
from .pretrained import (config_from_gguf, dequantize, read_gguf, tinylm_name, tokenizer_from_gguf,
                         unpermute_qk)
from .q4 import Q4_TYPES, Q4Linear, unpack_q4
from .quantize import Int8Linear, _linears
from .tokenizer import BPETokenizer

EMBEDDING, HEAD = "embed_tokens.weight", "lm_head.weight"


def load_gguf_q4(path: str | os.PathLike, max_seq_len: int | None = None, kernel: bool = True
                 ) -> tuple[TinyLM, BPETokenizer | None]:
    """(model, tokenizer) from a GGUF file, its Q4_0 / Q4_1 matrices running as 4-bit `Q4Linear`s (kernel=False:
    their readable fallback), the other linears as `Int8Linear`s, norms and the embedding in fp32; eval mode.

    max_seq_len: the RoPE tables' length (default: the file's context). Errors as `load_gguf`'s.
    """
    gguf = read_gguf(path)
    cfg = config_from_gguf(gguf, max_seq_len)
    llama = gguf.metadata["general.architecture"] == "llama"
    weights: dict[str, torch.Tensor] = {}
    q4: dict[str, Q4Linear] = {}
    for gname, tensor in gguf.tensors.items():
        name = tinylm_name(gname)
        heads = {"q_proj": cfg.n_heads, "k_proj": cfg.n_kv_heads}.get(name.split(".")[-2]) if llama else None
        is_q4 = tensor.type in Q4_TYPES and len(tensor.shape) == 2
        if is_q4 and (name != EMBEDDING or cfg.tie_embeddings):    # a Q4 embedding serves a tied head as is
            codes, d, m = unpack_q4(tensor.raw, tensor.type, tensor.shape)
            if heads:                                             # the rows of codes, d and m alike
                codes, d, m = (None if t is None else unpermute_qk(t, heads) for t in (codes, d, m))
            q4[HEAD if name == EMBEDDING else name] = Q4Linear.from_blocks(codes, d, m, kernel)
        if is_q4 and name != EMBEDDING:
            weights[name] = torch.empty(tensor.shape, device="meta")   # a placeholder: no memory, no values
        else:
            w = torch.from_numpy(dequantize(tensor))
            weights[name] = unpermute_qk(w, heads) if heads else w
    model = TinyLM.from_weights(cfg, weights)                     # checks every name and shape
    for name, layer in q4.items():
        parent, _, attr = name.removesuffix(".weight").rpartition(".")
        setattr(model.get_submodule(parent), attr, layer)
    for parent, attr, linear in _linears(model, head=True):
        if isinstance(linear, torch.nn.Linear):                   # stored as Q8_0, Q6_K, F16, ...
            setattr(parent, attr, Int8Linear(linear.weight))
    tok = tokenizer_from_gguf(gguf.metadata) if "tokenizer.ggml.tokens" in gguf.metadata else None
    return model.eval().requires_grad_(False), tok
