"""Less Python per decoding step: one transformer block compiled by torch.compile, run for every layer.

A decoding step of SmolLM2 runs about 4,000 small ATen ops (30 layers of norms, RoPE, seven linears, attention,
the cache writes), each dispatched from Python: milliseconds per token that no weight format removes.
`CompiledDecoder(model)` runs each one-token step (T = 1 against a KV cache) through `_block_step`, which
torch.compile (TorchDynamo + Inductor, gcc on the CPU) turns into one graph of fused C++ loops and library
calls. The graph is the same for every layer and every position, so it is compiled once:

    the block's weights     graph inputs, not constants (Dynamo inlines nn.Modules and lifts their
                            parameters), so layer 7 runs the graph traced on layer 0
    the position            a (1,) tensor, not a Python int: the new K, V are written with index_copy_
                            into this layer's full (B, Hkv, L, D) cache slice, and attention reads all L
                            slots behind a (1, 1, 1, L) mask of the slots written so far
    the cache length L      rounded up to a multiple of CACHE_BUCKET, so prompts of other lengths reuse
                            the graph
    torch's thread count    an int argument, so a new count compiles again: Inductor writes the thread
                            count into its C++ loops when it compiles them

The embedding, the id check, the final norm, the head and the sampling stay eager, once per step. The prefill
(T > 1), padded batches and training go to the model itself. Compiling the whole 30-layer forward instead
(dynamic shapes, the cache position a symbolic int) was still in AOT autograd after 10 minutes; one block
compiles in seconds of CPU. fp32, bf16, int8 and q4 each compile to one graph with greedy tokens equal to
eager's on SmolLM2 (64 tokens, measured; see docs/benchmarks.md). w8a8 is refused: fbgemm's packed weights
are a TorchScript object that Dynamo cannot trace, so every linear splits the graph. Mixture-of-experts
layers route data-dependently and split it too (a tiny MoE model: 18 graphs, the same tokens).
No freezing (Inductor's weights-as-constants mode): the one graph serves 30 layers' different weights.

Even compiled, each layer still costs a Dynamo guard check, Inductor's Python wrapper calling some ten kernels,
and attention over the whole bucket of L slots behind the mask: on SmolLM2 in q4a8 about 8 ms per token on
one core, as long again as its products (docs/benchmarks.md). For a model whose every layer is q4a8 and
Llama-shaped, `LayerLoopDecoder` runs all the layers in one C++ call instead (`torch.ops.tinylm.q4a8_layers`,
tinylm/csrc/a8.cpp): the same arithmetic as `Block`, the same product kernels, attention over the positions
written so far. `decoder(model)` picks it where it runs and the compiled block elsewhere; it is what
`generate(..., compiled=True)` and the chat use.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch
import torch._dynamo

from .cache import KVCache
from .inputs import check_forward
from .model import Block, TinyLM
from .w8a8 import W8A8Linear

CACHE_BUCKET = 256          # CompiledDecoder's caches hold a multiple of this many positions (or max_seq_len)
RECOMPILE_LIMIT = 64        # graphs kept per compiled function (torch's default, 8, is soon reached by one
                            # graph per model format, batch size, cache length and thread count)


class _LayerCache:
    """One layer's K and V (B, Hkv, L, D), written at slot `where` (1,): what `Block` sees as its cache in
    the compiled step. `update` has KVCache's signature; the layer index is unused (one layer here)."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, where: torch.Tensor):
        self.k, self.v, self.where = k, v, where

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k.index_copy_(2, self.where, k)            # (B, Hkv, L, D) slot `where` <- k (B, Hkv, 1, D)
        self.v.index_copy_(2, self.where, v)
        return self.k, self.v                           # all L slots; the mask hides the unwritten ones


def _block_step(block: Block, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None,
                k: torch.Tensor, v: torch.Tensor, where: torch.Tensor, mask: torch.Tensor,
                threads: int) -> torch.Tensor:
    """x (B, 1, C) through one block at cache slot where (1,); k, v this layer's cache (B, Hkv, L, D); mask
    (1, 1, 1, L) True at the slots written so far. threads: unused, a guard (see the module docstring)."""
    return block(x, cos, sin, _LayerCache(k, v, where), mask)


@functools.cache
def _compiled_block_step() -> Callable:
    """_block_step through torch.compile (made on first use: importing Inductor takes seconds).

    Inductor writes C++ for the vector width of ATEN_CPU_CAPABILITY (the numerics pins set avx2) and keeps
    the graph's code in an on-disk cache (its FX graph cache) whose key, in torch 2.13, leaves that out: a
    pinned process that found the AVX-512 code of an unpinned one ran it and crashed (a segfault, measured).
    A pinned process therefore compiles without that cache.
    """
    pinned = "ATEN_CPU_CAPABILITY" in os.environ
    return torch.compile(_block_step, dynamic=False, options={"fx_graph_cache": False} if pinned else None)


def cxx_compiler() -> str | None:
    """The C++ compiler Inductor would use (g++, or $CXX), or None where there is none: without one,
    torch.compile fails on the CPU at the first compiled step."""
    from torch._inductor import cpp_builder
    try:
        return cpp_builder.get_cpp_compiler()
    except RuntimeError:             # torch._inductor.exc.InvalidCxxCompiler: none found
        return None


def _one_step(model: TinyLM, idx: torch.Tensor, targets: torch.Tensor | None, cache: KVCache | None,
              attention_mask: torch.Tensor | None) -> bool:
    """Whether a forward call is one unpadded token per row against a cache, in eval mode and without targets:
    the step the decoders below take over (every other call is the model's own)."""
    padded = attention_mask is not None and not bool(attention_mask.all())
    return cache is not None and targets is None and not padded and idx.shape[1] == 1 and not model.training


class CompiledDecoder:
    """`model`'s forward, with every one-token step against a cache through the compiled block.

    Call it as the model: (idx, targets=None, cache=None, attention_mask=None) -> (logits, loss). A call with
    T = 1, a cache and no pad takes the compiled path (same logits up to rounding: Inductor fuses and orders
    sums its own way); every other call is the model's own. Make its caches with `new_cache`, whose length is
    rounded up to CACHE_BUCKET so that one graph serves many prompt lengths. The first compiled step of each
    model format, batch size, cache length and thread count compiles (seconds of CPU), as does a first step
    with a cache made outside torch.inference_mode (`generate` makes its own inside).
    """

    def __init__(self, model: TinyLM):
        if not isinstance(model, TinyLM):
            raise ValueError(f"CompiledDecoder needs a tinylm.TinyLM, got {type(model).__name__}")
        if any(isinstance(m, W8A8Linear) for m in model.modules()):
            raise ValueError("a w8a8 model cannot be compiled here: Dynamo cannot trace fbgemm's packed weights, "
                             "so every linear splits the graph, and on SmolLM2 its greedy tokens left eager's; "
                             "decode it without compiled=True, or compile its int8 or q4 form")
        self.model = model

    def new_cache(self, batch_size: int = 1, max_len: int | None = None) -> KVCache:
        """model.new_cache with max_len rounded up to a multiple of CACHE_BUCKET (at most max_seq_len)."""
        limit = self.model.cfg.max_seq_len
        n = max_len or limit
        return self.model.new_cache(batch_size, min(-(-n // CACHE_BUCKET) * CACHE_BUCKET, limit))

    def __call__(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None,
                 attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        model = self.model
        if not _one_step(model, idx, targets, cache, attention_mask):
            return model(idx, targets, cache, attention_mask)
        check_forward(model.cfg, idx, None, cache, attention_mask)    # ids and cache room, here in eager code
        return self._step(idx, cache), None

    def _step(self, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits (B, 1, V) of token ids idx (B, 1) at position cache.pos; the cache advances by one."""
        model, device = self.model, idx.device
        where = torch.tensor([cache.pos], device=device)                         # (1,) this token's slot
        mask = (torch.arange(cache.max_len, device=device) <= cache.pos)[None, None, None]   # (1, 1, 1, L)
        x = model.embed_tokens(idx, where)                                        # (B, 1, C) at slot where
        cos = sin = None                                                          # None: no RoPE
        if model.cos is not None:
            cos = model.cos.index_select(0, where).to(x.dtype)                   # (1, D)
            sin = model.sin.index_select(0, where).to(x.dtype)
        threads, block_step = torch.get_num_threads(), _compiled_block_step()
        with torch._dynamo.config.patch(recompile_limit=max(RECOMPILE_LIMIT, torch._dynamo.config.recompile_limit)):
            for i, layer in enumerate(model.layers):
                x = block_step(layer, x, cos, sin, cache.k[i], cache.v[i], where, mask, threads)
        cache.pos += 1
        return model.lm_head(model.norm(x))                                       # (B, 1, V)


class LayerLoopDecoder:
    """`model`'s forward, with every one-token step against a cache through one C++ call for all its layers:
    `torch.ops.tinylm.q4a8_layers` (tinylm/csrc/a8.cpp), for a Llama-shaped model whose linears are all q4a8
    (`tinylm.a8.layer_weights` says which models, and refuses the others).

    The compiled block still leaves each layer to Python: a Dynamo guard check, Inductor's wrapper calling
    about ten kernels, and attention over the whole cache bucket behind a mask. The layer loop does the same
    arithmetic with none of that: norms, RoPE, cache writes and attention over the positions written so far
    in plain C++ loops, the seven products with the q4a8 kernels (q, k and v from one quantized row, gate and
    up from another). The embedding, the final norm, the head and the sampling stay in Python, once per step.
    Call it as the model; every other call (a prompt, padding, training, a cache not in fp32) is the model's.
    """

    def __init__(self, model: TinyLM):
        from . import a8

        self.weights = a8.layer_weights(model)              # refuses a model the loop cannot run
        a8.require()
        self.model = model

    def new_cache(self, batch_size: int = 1, max_len: int | None = None) -> KVCache:
        """model.new_cache: the loop reads only the positions written, so no rounding up is needed."""
        return self.model.new_cache(batch_size, max_len)

    def __call__(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None,
                 attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        model = self.model
        if not _one_step(model, idx, targets, cache, attention_mask) or cache.k.dtype != torch.float32 or \
                cache.k.device.type != "cpu":
            return model(idx, targets, cache, attention_mask)
        check_forward(model.cfg, idx, None, cache, attention_mask)    # ids and cache room
        pos = cache.pos
        x = model.embed_tokens(idx, None)[:, 0].float().contiguous()              # (B, C)
        cos, sin = (t[pos].float().contiguous() for t in (model.cos, model.sin))  # (D,) this position's angles
        x = torch.ops.tinylm.q4a8_layers(x, self.weights, cache.k, cache.v, pos, cos, sin, model.cfg.n_heads,
                                         model.layers[0].input_layernorm.eps)   # (B, C), cache slot pos written
        cache.pos += 1
        return model.lm_head(model.norm(x[:, None])), None                       # (B, 1, V)


def decoder(model: TinyLM) -> CompiledDecoder | LayerLoopDecoder:
    """The fastest one-token step for `model`, what `generate(..., compiled=True)` calls for every forward: the
    C++ layer loop where every layer is q4a8 and Llama-shaped (SmolLM2 in the chat's default format), else the
    compiled block (which refuses what it cannot compile)."""
    try:
        return LayerLoopDecoder(model)
    except ValueError:                                   # not a model the layer loop runs
        return CompiledDecoder(model)
