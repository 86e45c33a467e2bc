"""A static, preallocated KV cache (as in gpt-fast): one buffer per layer for K and for V."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._checks import check_int
from ._loading import check_cache_memory
from .config import Config


class KVCache(nn.Module):
    """Keys and values of past positions, stored once per KV head (never repeated across query heads).

    k, v: (n_layers, B, Hkv, max_len, D). `pos` counts positions already written; the model advances it
    after each forward, so a prompt is one call (prefill) and every new token one more call of T = 1.
    Its size is exactly `kv_cache_bytes(cfg, max_len, B, bytes_per=element size)`.
    """

    def __init__(self, cfg: Config, batch_size: int, max_len: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None, max_bytes: int | None = None):
        """max_bytes: refuse a cache that would take more (None: half of this machine's RAM)."""
        super().__init__()
        batch_size, max_len = check_int("batch_size", batch_size, low=1), check_int("max_len", max_len, low=1)
        if max_len > cfg.max_seq_len:
            raise ValueError(f"max_len ({max_len}) cannot exceed the model's max_seq_len ({cfg.max_seq_len})")
        check_cache_memory(cfg, batch_size, max_len, torch.empty((), dtype=dtype).element_size(), max_bytes)
        self.max_len = max_len
        shape = (cfg.n_layers, batch_size, cfg.n_kv_heads, max_len, cfg.head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.pos = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, Hkv, T, D) at positions pos..pos+T-1; return all keys/values so far (B, Hkv, pos+T, D)."""
        end = self.pos + k.shape[2]
        self.k[layer, :, :, self.pos : end] = k
        self.v[layer, :, :, self.pos : end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def reset(self) -> None:
        self.pos = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the K and V buffers."""
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()
