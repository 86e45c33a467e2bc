"""A GGUF file's header and tensor table (llama.cpp's format), read and checked before anything is allocated.

    gguf = read_gguf(path)           # metadata: key -> value; tensors: name -> GGUFTensor (views of the file)
    dequantize(gguf.tensors["token_embd.weight"])    # a new fp32 array

The header is a list of claims, each checked against the file: every string, array and tensor must end
inside it; keys and tensor names are unique; arrays nest at most MAX_DEPTH deep and hold at most
MAX_ARRAY_ITEMS items; the alignment is a power of two; every tensor's data starts on it, and no two
tensors' data overlap. `tinylm.pretrained` turns the result into a TinyLM.

GGUF lists a tensor's dimensions fastest-varying first (ggml's `ne`), the reverse of numpy and torch: an
`nn.Linear` weight (out, in) is stored with ne = (in, out).
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._loading import as_path

MAX_DEPTH = 3                 # arrays of arrays of arrays at most (real files: arrays of strings and numbers)
MAX_ARRAY_ITEMS = 2**22       # 4,194,304 items in one array (the largest real vocabularies: 262,144 tokens)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_ARRAYS = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
           7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}


def _gguf():
    """llama.cpp's own Python package: the block layouts of every quantisation type, and their dequantisers."""
    try:
        import gguf
        import gguf.quants
    except ImportError:
        raise ImportError("reading GGUF files needs the `gguf` package: pip install gguf "
                          "(or pip install 'tinylm[pretrained]')") from None
    return gguf


@dataclass
class GGUFTensor:
    """One tensor of a GGUF file: its numpy shape, ggml type and raw bytes (rows of `row_bytes` each)."""

    shape: tuple[int, ...]     # numpy/torch order (ggml's ne reversed)
    type: int                  # ggml type: 0 F32, 1 F16, 3 Q4_1, 8 Q8_0, ... (gguf.GGMLQuantizationType)
    raw: np.ndarray            # uint8, (rows..., row_bytes): a read-only view of the file

    @property
    def type_name(self) -> str:
        return _gguf().GGMLQuantizationType(self.type).name


@dataclass
class GGUFFile:
    """The header of a GGUF file: metadata (key -> value; arrays as lists) and tensors (name -> GGUFTensor)."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]


def read_gguf(path: str | os.PathLike) -> GGUFFile:
    """Read a GGUF file's header; the tensors stay in the (memory-mapped) file. The format, little-endian:

        "GGUF"  u32 version (2, 3)  u64 n_tensors  u64 n_kv
        n_kv x       key: string, u32 value type, value     (string: u64 length + UTF-8; array: u32 item
                                                             type, u64 count, items)
        n_tensors x  name: string, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset
        padding to general.alignment (32), then the tensor data (offsets count from here)

    ValueError if the file is not GGUF, or is truncated or corrupt.
    """
    path = as_path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not a file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file: it starts with {magic!r}, not b'GGUF'")
    buf = np.memmap(path, mode="r")
    mv = memoryview(buf)
    pos = 4

    def take(fmt: str):
        nonlocal pos
        value = struct.unpack_from(fmt, mv, pos)[0]
        pos += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = take("<Q")
        if pos + n > len(buf):
            raise ValueError(f"a string of {n:,} bytes runs past the end of the file")
        s = bytes(mv[pos:pos + n]).decode("utf-8")
        pos += n
        return s

    def value(kind: int, depth: int = 0):
        nonlocal pos
        if kind == 8:
            return string()
        if kind in _SCALARS:
            return take(_SCALARS[kind])
        if kind == 9:
            item, count = take("<I"), take("<Q")
            if depth == MAX_DEPTH:
                raise ValueError(f"arrays nested more than {MAX_DEPTH} deep")
            if count > min(len(buf) - pos, MAX_ARRAY_ITEMS):
                raise ValueError(f"an array of {count:,} items (at most {MAX_ARRAY_ITEMS:,}, and not past the "
                                 "end of the file)")
            if item in _ARRAYS:                 # numbers: one read
                arr = np.frombuffer(buf, dtype=_ARRAYS[item], count=count, offset=pos)
                pos += arr.nbytes
                return arr.tolist()
            return [value(item, depth + 1) for _ in range(count)]
        raise ValueError(f"unknown value type {kind}")

    try:
        version, n_tensors, n_kv = take("<I"), take("<Q"), take("<Q")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} (tinylm reads versions 2 and 3)")
        metadata = {}
        for _ in range(n_kv):
            key = string()
            if key in metadata:
                raise ValueError(f"metadata key {key!r} is given twice")
            metadata[key] = value(take("<I"))
        table = {}
        for _ in range(n_tensors):
            name, n_dims = string(), take("<I")
            if name in table:
                raise ValueError(f"tensor {name!r} is listed twice")
            if not 1 <= n_dims <= 4:
                raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
            ne = struct.unpack_from(f"<{n_dims}Q", mv, pos)
            pos += 8 * n_dims
            table[name] = (ne, take("<I"), take("<Q"))
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: the GGUF header is truncated or corrupt ({e})") from None
    align = metadata.get("general.alignment", 32)
    if type(align) is not int or align < 1 or align & (align - 1):
        raise ValueError(f"{path}: general.alignment must be a power of two, got {align!r}")
    start = -(-pos // align) * align
    return GGUFFile(path, metadata, _tensors(path, buf, start, align, table))


def _tensors(path: Path, buf: np.ndarray, start: int, align: int, table: dict) -> dict[str, GGUFTensor]:
    """The tensor table as views of the file: each tensor's data aligned, inside the file, and apart from the others."""
    sizes = _gguf().GGML_QUANT_SIZES           # ggml type -> (weights per block, bytes per block)
    known = {int(t) for t in sizes}
    spans, tensors = [], {}
    for name, (ne, kind, offset) in table.items():
        if kind not in known:
            raise ValueError(f"{path}: tensor {name!r} has unknown ggml type {kind}")
        block, block_bytes = sizes[_gguf().GGMLQuantizationType(kind)]
        if ne[0] % block:
            raise ValueError(f"{path}: tensor {name!r} has rows of {ne[0]} weights, not a multiple of its "
                             f"type's block of {block}")
        if offset % align:
            raise ValueError(f"{path}: tensor {name!r} starts at offset {offset:,}, not a multiple of "
                             f"general.alignment ({align}): its data would be read from the wrong bytes")
        row_bytes, rows = ne[0] // block * block_bytes, math.prod(ne[1:])   # Python ints: no overflow
        if start + offset + rows * row_bytes > len(buf):
            raise ValueError(f"{path} is truncated: tensor {name!r} ends past the end of the file")
        spans.append((offset, offset + rows * row_bytes, name))
        raw = np.frombuffer(buf, dtype=np.uint8, count=rows * row_bytes, offset=start + offset)
        tensors[name] = GGUFTensor(tuple(reversed(ne)), kind, raw.reshape(*reversed(ne[1:]), row_bytes))
    spans.sort()
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            raise ValueError(f"{path}: the data of tensors {a!r} and {b!r} overlap; each tensor needs bytes of "
                             "its own")
    return tensors


def dequantize(tensor: GGUFTensor) -> np.ndarray:
    """The tensor as a new, writable fp32 array of its numpy shape (gguf's dequantisers: Q4_1, Q8_0, K-quants, ...)."""
    gguf = _gguf()
    if tensor.type == 0:                       # F32: the bytes are the floats (copy: the file is read-only)
        return tensor.raw.view(np.float32).reshape(tensor.shape).copy()
    try:
        return gguf.quants.dequantize(tensor.raw, gguf.GGMLQuantizationType(tensor.type)).reshape(tensor.shape)
    except NotImplementedError:
        raise ValueError(f"ggml type {tensor.type_name} cannot be dequantised by this gguf package") from None
