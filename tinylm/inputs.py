"""What a forward pass takes, checked before it runs: token ids, targets, a padding mask and a KV cache that fit
the model's config (ValueError saying what to change). `TinyLM.forward` and `generate` share these rules."""

from __future__ import annotations

import torch

from ._checks import IGNORE_INDEX
from .config import Config


def check_idx(idx: torch.Tensor, vocab_size: int) -> None:
    """The rules for token ids, shared by `TinyLM.forward` and `generate`: a (B, T) torch.long tensor of
    ids in [0, vocab_size). ValueError otherwise, saying what to change."""
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        shape = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
        raise ValueError(f"idx must be a (batch, time) tensor of token ids, got shape {shape}; "
                         "add a batch dimension with idx[None] for a single sequence")
    if idx.dtype != torch.long:
        raise ValueError(f"idx must hold integer token ids as torch.long, got dtype {idx.dtype}; "
                         "convert with idx.long()")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab_size):
        raise ValueError(f"token ids must lie in [0, vocab_size={vocab_size}), got range "
                         f"[{int(idx.min())}, {int(idx.max())}]")


def check_attention_mask(attention_mask: torch.Tensor, shape: tuple[int, int]) -> None:
    """The rules for a padding mask: a (B, S) tensor of bools or 0/1 ints, S counting cached positions too."""
    if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != tuple(shape):
        got = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
        raise ValueError(f"attention_mask must be a tensor of shape (batch, cached + new positions) = {tuple(shape)}, "
                         f"got {got}; with a cache, pass the mask of every position so far")
    if attention_mask.dtype != torch.bool and (attention_mask.is_floating_point() or attention_mask.is_complex()
                                               or ((attention_mask != 0) & (attention_mask != 1)).any()):
        raise ValueError(f"attention_mask must hold True/1 at real tokens and False/0 at pads, got dtype "
                         f"{attention_mask.dtype}; use a bool or integer tensor of 0s and 1s")


def check_forward(cfg: Config, idx: torch.Tensor, targets: torch.Tensor | None, cache, attention_mask) -> None:
    """The inputs of `TinyLM.forward` for a model of config cfg: ids, the mask over cached + new positions, a
    length within max_seq_len and the cache's room, a cache of this model's shape, and targets like idx."""
    check_idx(idx, cfg.vocab_size)
    start = cache.pos if cache is not None else 0
    if attention_mask is not None:
        check_attention_mask(attention_mask, (idx.shape[0], start + idx.shape[1]))
    if start + idx.shape[1] > cfg.max_seq_len:
        raise ValueError(f"sequence length {start + idx.shape[1]} exceeds max_seq_len "
                         f"({cfg.max_seq_len}); crop idx or build the model with a larger max_seq_len")
    if cache is not None and start + idx.shape[1] > cache.max_len:
        raise ValueError(f"the KV cache holds {cache.max_len} positions, {start + idx.shape[1]} needed; "
                         "make the cache with a larger max_len")
    if cache is not None:
        n_layers, batch, kv_heads, _, head_dim = cache.k.shape
        have, want = (n_layers, batch, kv_heads, head_dim), (cfg.n_layers, idx.shape[0],
                                                             cfg.n_kv_heads, cfg.head_dim)
        if have != want:
            raise ValueError(f"the KV cache is for (layers, batch, KV heads, head_dim) = {have}, this call "
                             f"needs {want}; make it with model.new_cache({idx.shape[0]})")
    if targets is not None:
        if not isinstance(targets, torch.Tensor) or targets.shape != idx.shape:
            shape = tuple(targets.shape) if isinstance(targets, torch.Tensor) else type(targets).__name__
            raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {shape}")
        if targets.dtype != torch.long:
            raise ValueError(f"targets must hold token ids as torch.long, got dtype {targets.dtype}; "
                             "convert with targets.long()")
        outside = (targets != IGNORE_INDEX) & ((targets < 0) | (targets >= cfg.vocab_size))
        if bool(outside.any()):
            raise ValueError(f"targets must be token ids in [0, vocab_size={cfg.vocab_size}) or "
                             f"{IGNORE_INDEX} (ignored), got {int(targets[outside][0])}")
