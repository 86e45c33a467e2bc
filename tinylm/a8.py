"""8-bit activations in blocks of 32 against 4-bit or 8-bit weights, by integer dot products: the q4a8 format.

torch's weight-only kernels (`Q4Linear`, `Int8Linear`) widen every weight to float and multiply in floats.
llama.cpp does less work per weight: it quantizes each activation row once, to 8 bits per block of 32 values,
and meets each block of 32 weight codes with one integer dot product (AVX2's vpmaddubsw; VNNI's vpdpbusd),
applying the two scales once per block:

    dx = max |x_block| / 127          qx = round(x_block / dx)   (int8; round half to even)
    Q4_1 weights, w = d q + m:        y = sum_b d_b dx_b (q_b . qx_b) + sum_b m_b dx_b (sum qx_b)
    int8 weights, w = s q:            y = s sum_b dx_b (q_b . qx_b)

The weights are the q4 format's own (the same codes, scales and zeros as `Q4Linear`, or `Int8Linear`'s head):
only the activations lose precision, at most dx / 2 per value. `tinylm/csrc/a8.cpp` holds the kernels, about 400
lines of C++; `kernels()` compiles it on first use with the machine's C++ compiler against torch's headers
(-O3 -march=native) into a cache folder and loads it as torch ops, `torch.ops.tinylm.q4a8_mm` and
`torch.ops.tinylm.i8a8_mm`: a microsecond of dispatch, and `torch.compile` (`generate(..., compiled=True)`)
calls them without splitting its graph. The same file holds `torch.ops.tinylm.q4a8_layers`, a whole decoding
step through every layer of a q4a8 Llama-shaped model in one call (`layer_weights` lists what it reads;
`tinylm.fast.LayerLoopDecoder` calls it).
`quantize_blocks` and `Q4A8Linear.reference` are the same arithmetic written in torch, which the tests hold the
C to. Where no C++ compiler is found, `available()` is False and a q4a8 layer says so when it is made.
`tinylm.quantize` makes the format (`quantize(model, "q4a8")`, `to_q4a8`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
import torch.nn as nn

from .q4 import GROUP, Q4Linear, check_blocks, pack_nibbles, unpack_nibbles

SOURCE = Path(__file__).parent / "csrc" / "a8.cpp"
FLAGS = ("-O3", "-march=native", "-std=c++20", "-fopenmp", "-shared", "-fPIC")
_BUILD_ERRORS: list[str] = []     # what the compiler said when a build failed (require() quotes it)


def _cache_dir() -> Path:
    """Where compiled kernels are kept: $TINYLM_CACHE, else ~/.cache/tinylm, else the temporary folder."""
    for where in (os.environ.get("TINYLM_CACHE"), Path.home() / ".cache" / "tinylm", tempfile.gettempdir()):
        if where:
            try:
                Path(where).mkdir(parents=True, exist_ok=True)
            except OSError:
                continue
            if os.access(where, os.W_OK):
                return Path(where)
    raise ValueError("no writable folder for the compiled kernels: set TINYLM_CACHE to one")


def _cpu_key() -> str:
    """What -march=native depends on: the processor's flags (Linux), else the platform's name."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = platform.processor()
    return f"{platform.machine()} {flags}"


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def _command(cxx: str, out: Path) -> list[str]:
    from torch.utils import cpp_extension

    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    return [cxx, *FLAGS, abi, *(f"-I{p}" for p in cpp_extension.include_paths()), str(SOURCE), "-o", str(out),
            *(f"-L{p}" for p in cpp_extension.library_paths()), "-ltorch", "-ltorch_cpu", "-lc10"]


@functools.cache
def kernels() -> Path | None:
    """The compiled kernels, built on first use (about 10 s of one core) and kept on disk by source, compiler,
    torch and CPU, then loaded: torch.ops.tinylm.*. None where no C++ compiler is found or it cannot build
    them (then `available()` is False)."""
    cxx = _compiler()
    if cxx is None:
        return None
    key = hashlib.sha256(b"\0".join([SOURCE.read_bytes(), cxx.encode(), " ".join(FLAGS).encode(),
                                      torch.__version__.encode(), _cpu_key().encode()]))
    lib = _cache_dir() / f"a8-{key.hexdigest()[:16]}.so"
    if not lib.exists():
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        built = subprocess.run(_command(cxx, tmp), capture_output=True, text=True)
        if built.returncode != 0:
            tmp.unlink(missing_ok=True)
            _BUILD_ERRORS.append(f"{cxx} failed: {built.stderr.strip()[-600:]}")
            return None
        os.replace(tmp, lib)                                     # atomic: another process sees all or nothing
    torch.ops.load_library(str(lib))
    # shapes without numbers, for torch.compile's tracing (the C++ file defines only the CPU kernels)
    torch.library.register_fake("tinylm::q4a8_mm", lambda x, nibbles, d, z: x.new_empty(x.shape[0], d.shape[0]))
    torch.library.register_fake("tinylm::i8a8_mm", lambda x, w, scale: x.new_empty(x.shape[0], w.shape[0]))
    return lib


def layer_weights(model: nn.Module) -> list[torch.Tensor]:
    """The tensors `torch.ops.tinylm.q4a8_layers` reads, 23 per layer: the input norm's weight, q, k, v and o
    (nibbles, scale, zero each), the post-attention norm's weight, gate, up and down. A ValueError says what the
    layer loop cannot run: it is tinylm.model.Block's arithmetic for a Llama-shaped model (pre-norm RMSNorm,
    RoPE, SwiGLU, no biases, no q/k norms, no experts) whose seven linears per layer are all q4a8."""
    from .model import Attention, Block, RMSNorm, SwiGLU, TinyLM

    if not isinstance(model, TinyLM):
        raise ValueError(f"the q4a8 layer loop needs a tinylm.TinyLM, got {type(model).__name__}")
    cfg = model.cfg
    if model.cos is None or cfg.norm_placement != "pre" or cfg.qk_norm or cfg.bias:
        raise ValueError("the q4a8 layer loop runs Llama-shaped blocks (RoPE, pre-norm, no q/k norm, no biases); "
                         f"this model has positions={cfg.positions!r}, norm_placement={cfg.norm_placement!r}, "
                         f"qk_norm={cfg.qk_norm}, bias={cfg.bias}")
    weights = []
    for i, block in enumerate(model.layers):
        attn, mlp = block.self_attn, block.mlp
        norms = (block.input_layernorm, block.post_attention_layernorm)
        if type(block) is not Block or type(attn) is not Attention or type(mlp) is not SwiGLU or \
                not all(type(n) is RMSNorm and n.eps == norms[0].eps for n in norms):
            raise ValueError(f"layer {i} is not a pre-norm RMSNorm block with a SwiGLU feed-forward "
                             f"(its feed-forward is {type(mlp).__name__}): the q4a8 layer loop cannot run it")
        linears = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        if not all(isinstance(lin, Q4A8Linear) for lin in linears):
            kinds = sorted({type(lin).__name__ for lin in linears})
            raise ValueError(f"layer {i}'s linears are {', '.join(kinds)}: the q4a8 layer loop needs every one "
                             "q4a8 (quantize(model, 'q4a8'), or tinylm.quantize.to_q4a8 of a q4 model)")
        weights.append(norms[0].weight.detach().float().contiguous())
        for lin in linears[:4]:
            weights += [lin.nibbles, lin.scale, lin.zero]
        weights.append(norms[1].weight.detach().float().contiguous())
        for lin in linears[4:]:
            weights += [lin.nibbles, lin.scale, lin.zero]
    return weights


def available() -> bool:
    """True where the kernels compiled (a C++ compiler was found) and are loaded."""
    return kernels() is not None


def require() -> None:
    """Build and load the kernels, or a ValueError that says why not and what to do instead."""
    if kernels() is None:
        why = _BUILD_ERRORS[-1] if _BUILD_ERRORS else "none was found"
        raise ValueError("the q4a8 kernels need a C++ compiler (g++, c++ or clang++, or $CXX) to build "
                         f"tinylm/csrc/a8.cpp ({why}): install one, or use the q4 format")


def quantize_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (M, K) fp32, K a multiple of 32 -> codes qx (M, K) int8, scales dx (M, K/32), and sx (M, K/32) = dx
    times each block's sum of codes: the kernels' quantization, written in torch (the same fp32 steps)."""
    M, K = x.shape
    blocks = x.reshape(M, K // GROUP, GROUP)                                      # (M, B, 32)
    dx = blocks.abs().amax(-1) / 127                                              # (M, B)
    inv = torch.where(dx > 0, 1 / dx, 0.0)
    qx = torch.round(blocks * inv[..., None])                                     # half to even, as the C
    return qx.to(torch.int8).reshape(M, K), dx, dx * qx.sum(-1)


def _rows(x: torch.Tensor, K: int) -> torch.Tensor:
    """x (..., K) -> (M, K) fp32, contiguous (the kernels read it by pointer)."""
    if x.shape[-1] != K:
        raise ValueError(f"the input's last dimension is {x.shape[-1]}, the layer takes in_features={K}")
    return x.reshape(-1, K).float().contiguous()


class Q4A8Linear(nn.Module):
    """A bias-free linear layer with Q4_1 weights, w = d q + m per block of 32 weights of a row, multiplied
    against 8-bit block activations by `torch.ops.tinylm.q4a8_mm`. x (..., K) -> (..., N) in x's dtype (fp32 inside).

    Each block keeps d (`scale`) and its zero z = m + 8 d (`zero`) in bf16, as q4's `Q4Linear` does: 16 bits
    each, as the file's fp16 d and m. `d` and `m` give them back in fp32 (m = z - 8 d, as the kernel computes
    it). d and m that bf16 cannot hold exactly are refused: make the layer from a q4 one (`from_q4`)."""

    def __init__(self, codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor):
        super().__init__()
        check_blocks(codes, d, m, names="d, m")
        require()
        N, K = codes.shape
        d, m = d.float(), m.float()
        scale, zero = d.bfloat16(), (m + 8 * d).bfloat16()
        if not (torch.equal(scale.float(), d) and torch.equal(zero.float() - 8 * scale.float(), m)):
            raise ValueError("q4a8 keeps each block's d and zero m + 8 d in bf16, and these d and m do not fit "
                             "bf16 exactly: make the layer with Q4A8Linear.from_q4 of a q4 layer")
        self.in_features, self.out_features = K, N
        self.register_buffer("nibbles", pack_nibbles(codes).contiguous())      # (N, K/2), the file's order
        self.register_buffer("scale", scale.contiguous())                      # (N, K/32) bf16: d
        self.register_buffer("zero", zero.contiguous())                        # (N, K/32) bf16: m + 8 d

    @property
    def d(self) -> torch.Tensor:
        """(N, K/32) fp32: each block's scale."""
        return self.scale.float()

    @property
    def m(self) -> torch.Tensor:
        """(N, K/32) fp32: each block's minimum, zero - 8 d (8 d is exact: one rounding, as in the kernel)."""
        return self.zero.float() - 8 * self.scale.float()

    @classmethod
    def from_q4(cls, layer: Q4Linear) -> "Q4A8Linear":
        """The same weights as a `Q4Linear`: its codes, d = scale and m = zero - 8 scale (bf16 values, exact)."""
        scale, zero = (t.float().T for t in layer.scale_zero.unbind(-1))     # (N, K/32) each
        return cls(layer.codes(), scale, zero - 8 * scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.tinylm.q4a8_mm(_rows(x, self.in_features), self.nibbles, self.scale, self.zero)  # (M, N)
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def codes(self) -> torch.Tensor:
        """(N, K) uint8 codes in [0, 15]."""
        return unpack_nibbles(self.nibbles)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel's arithmetic in torch: integer block sums (exact in fp64), then the scales."""
        qx, dx, sx = quantize_blocks(_rows(x, self.in_features))                 # (M, K), (M, B), (M, B)
        M, N, B = qx.shape[0], self.out_features, self.in_features // GROUP
        q = self.codes().double().reshape(N, B, GROUP)
        sums = torch.einsum("nbk,mbk->mnb", q, qx.double().reshape(M, B, GROUP))    # (M, N, B) integers
        y = (sums * self.d.double() * dx.double()[:, None]).sum(-1) + sx.double() @ self.m.double().T
        return y.float().to(x.dtype).reshape(*x.shape[:-1], N)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, q4a8"


class Int8A8Linear(nn.Module):
    """A bias-free linear layer with int8 weights (N, K) and one fp32 scale per row, multiplied against 8-bit
    block activations by `torch.ops.tinylm.i8a8_mm` (K a multiple of 32). x (..., K) -> (..., N) in x's dtype."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor):
        super().__init__()
        N, K = weight.shape
        if K % GROUP or weight.dtype != torch.int8 or scale.shape != (N,):
            raise ValueError(f"weight must be int8 (N, K) with K a multiple of {GROUP}, scale (N,); got "
                             f"{weight.dtype} {tuple(weight.shape)}, scale {tuple(scale.shape)}")
        if int(weight.min()) < -127:
            raise ValueError("int8 weights must lie in [-127, 127] (the kernel moves their sign onto x)")
        require()
        self.in_features, self.out_features = K, N
        self.register_buffer("weight", weight.contiguous())
        self.register_buffer("scale", scale.float().contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.tinylm.i8a8_mm(_rows(x, self.in_features), self.weight, self.scale)           # (M, N)
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        qx, dx, _ = quantize_blocks(_rows(x, self.in_features))
        M, N, B = qx.shape[0], self.out_features, self.in_features // GROUP
        sums = torch.einsum("nbk,mbk->mnb", self.weight.double().reshape(N, B, GROUP),
                            qx.double().reshape(M, B, GROUP))                    # (M, N, B) integers
        y = (sums * dx.double()[:, None]).sum(-1) * self.scale.double()
        return y.float().to(x.dtype).reshape(*x.shape[:-1], N)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 x a8"

