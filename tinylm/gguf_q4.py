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

import math
import os

import torch

from ._checks import check_bool
from ._loading import check_finite
from .config import Config
from .model import TinyLM
from .pretrained import GGUFFile, dequantized, open_gguf, unpermute_qk
from .q4 import GROUP, Q4_TYPES, Q4Linear, unpack_q4
from .quantize import Int8Linear, _linears
from .tokenizer import BPETokenizer

EMBEDDING, HEAD = "embed_tokens.weight", "lm_head.weight"


def load_gguf_q4(path: str | os.PathLike, max_seq_len: int | None = None, kernel: bool = True,
                 max_bytes: int | None = None) -> tuple[TinyLM, BPETokenizer | None]:
    """(model, tokenizer) from a GGUF file, its Q4_0 / Q4_1 matrices running as 4-bit `Q4Linear`s (kernel=False:
    their readable fallback), the other linears as `Int8Linear`s, norms and the embedding in fp32; eval mode.

    max_seq_len: the RoPE tables' length (default: the file's context). max_bytes: refuse a model that needs
    more memory (`q4_bytes`, and the RoPE tables; None: half of this machine's RAM). The file is checked as
    `load_gguf` checks it (`tinylm.pretrained.open_gguf`), and a Q4 block scale that is NaN or inf is refused.
    """
    check_bool("kernel", kernel)
    gguf, cfg, names, tok = open_gguf(path, max_seq_len, max_bytes, q4_bytes)
    llama = gguf.metadata["general.architecture"] == "llama"
    weights: dict[str, torch.Tensor] = {}
    q4: dict[str, Q4Linear] = {}
    for gname, name in names.items():
        tensor = gguf.tensors[gname]
        heads = {"q_proj": cfg.n_heads, "k_proj": cfg.n_kv_heads}.get(name.split(".")[-2]) if llama else None
        is_q4 = _is_q4(gguf, gname)
        if is_q4 and (name != EMBEDDING or cfg.tie_embeddings):    # a Q4 embedding serves a tied head as is
            codes, d, m = q4_blocks(gguf, gname)
            if heads:                                             # the rows of codes, d and m alike
                codes, d, m = (None if t is None else unpermute_qk(t, heads) for t in (codes, d, m))
            q4[HEAD if name == EMBEDDING else name] = Q4Linear.from_blocks(codes, d, m, kernel)
        if is_q4 and name != EMBEDDING:
            weights[name] = torch.empty(tensor.shape, device="meta")   # a placeholder: no memory, no values
        else:
            w = dequantized(gguf, gname)
            weights[name] = unpermute_qk(w, heads) if heads else w
    model = TinyLM.from_weights(cfg, weights, max_bytes)          # names and shapes: checked by open_gguf
    for name, layer in q4.items():
        parent, _, attr = name.removesuffix(".weight").rpartition(".")
        setattr(model.get_submodule(parent), attr, layer)
    for parent, attr, linear in _linears(model, head=True):
        if isinstance(linear, torch.nn.Linear):                   # stored as Q8_0, Q6_K, F16, ...
            setattr(parent, attr, Int8Linear(linear.weight))
    return model.eval().requires_grad_(False), tok


def _is_q4(gguf: GGUFFile, gname: str) -> bool:
    tensor = gguf.tensors[gname]
    return tensor.type in Q4_TYPES and len(tensor.shape) == 2


def q4_blocks(gguf: GGUFFile, gname: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """A Q4 tensor's codes, d and m (`unpack_q4`), refused (ValueError) if a block's d or m is NaN or inf: the
    weights of that block would be (`load_gguf` refuses them once dequantized)."""
    tensor = gguf.tensors[gname]
    codes, d, m = unpack_q4(tensor.raw, tensor.type, tensor.shape)
    for what, x in (("scales d", d), ("minimums m", m)):
        if x is not None:
            check_finite(x, str(gguf.path), f"{gname!r} ({Q4_TYPES[tensor.type]} block {what})")
    return codes, d, m


def q4_bytes(gguf: GGUFFile, cfg: Config, names: dict[str, str]) -> int:
    """The memory `load_gguf_q4` builds a file's weights in, from the tensor table alone: 4 bytes a weight for
    every tensor it dequantizes (norms, the embedding, matrices stored otherwise than Q4, until int8 replaces
    them), then 1 byte and a 4-byte scale a row for those int8 copies, and for a Q4 matrix half a byte a weight
    and 4 bytes (bf16 scale and zero) a block of 32."""
    total = 0
    for gname, name in names.items():
        shape = gguf.tensors[gname].shape
        n, q4 = math.prod(shape), _is_q4(gguf, gname)
        if not q4 or name == EMBEDDING:
            total += 4 * n
        if len(shape) == 2 and (name != EMBEDDING or cfg.tie_embeddings):     # a projection or the head
            total += (n // 2 + n // GROUP * 4) if q4 else (n + 4 * shape[0])
    return total
