"""Less Python and dispatch per decoding step: the model's forward compiled by torch.compile (`compiled_forward`).

A decoding step of SmolLM2 runs about 4,000 small ATen ops (30 layers of norms, RoPE, seven linears, attention,
the cache writes), each dispatched from Python: a few milliseconds per token that no weight format removes.
torch.compile (TorchDynamo + Inductor, gcc on the CPU) traces the forward into a graph and generates fused C++
for it. `generate(..., compiled=True)` uses it for every forward. Measured on the development machine (2 cores,
torch 2.13; see the README): compiling costs minutes of CPU for a 30-layer model, so it pays off only for long
runs, and is off by default; the chapters do not use it.

The cache's position is a Python int on a module (`KVCache.pos`), which Dynamo would take as a constant and
recompile for at every step; `allow_unspec_int_on_nn_module` makes it a symbolic size instead, so one graph
serves every position.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
import torch._dynamo

from .model import TinyLM

_COMPILED: "weakref.WeakKeyDictionary[TinyLM, Callable]" = weakref.WeakKeyDictionary()


def compiled_forward(model: TinyLM) -> Callable:
    """model's forward through torch.compile (dynamic shapes), made once per model and kept while it lives."""
    if model not in _COMPILED:
        forward = torch.compile(TinyLM.forward, dynamic=True)       # the function: no reference to the model kept

        def run(*args, **kwargs):
            with torch._dynamo.config.patch(allow_unspec_int_on_nn_module=True):
                return forward(model_ref(), *args, **kwargs)

        model_ref = weakref.ref(model)
        _COMPILED[model] = run
    return _COMPILED[model]
