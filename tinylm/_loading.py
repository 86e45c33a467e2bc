"""The rules every loader applies before it allocates: a memory limit, names inside the folder, dtypes, devices.

    check_memory("m.gguf", cfg, max_bytes)      refuse a model whose weights + RoPE tables exceed the limit
    inside(folder, name, source, field)         folder / name, refused if the name leaves the folder
    check_finite(tensor, source, name)          refuse NaN and inf weights
    check_dtype(dtype), check_device(device)    torch arguments, checked with errors that say what to pass

A file from the internet is read as a list of claims: sizes, names, offsets. The loaders (`tinylm.pretrained`,
`tinylm.hf`, `tinylm.train.checkpoint`) compare every claim with what the file holds, and refuse with a
ValueError that names the file and the field, before allocating what a claim implies.

The memory limit: `max_bytes=None` (every loader's default, and `TinyLM`'s) means `default_max_bytes()`,
half of this machine's RAM; pass a number of bytes to raise or lower it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import torch

from ._checks import check_int
from .config import Config
from .params import kv_cache_bytes, state_size

FALLBACK_MAX_BYTES = 8 * 2**30          # the limit where the RAM is unknown (Windows)
FLOAT_BYTES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}   # safetensors dtypes a weight may have, their sizes
FLOAT_DTYPES = tuple(FLOAT_BYTES)
TORCH_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
MAX_JSON_BYTES = 16 * 2**20              # config.json, model.safetensors.index.json: settings and names only


def default_max_bytes() -> int:
    """What a model may take when max_bytes is None: half of this machine's RAM (Linux, macOS), else 8 GiB."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (AttributeError, ValueError, OSError):
        return FALLBACK_MAX_BYTES


def gib(n: int) -> str:
    """A size in words: '2.5 GiB', '80.0 MiB'."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def model_bytes(cfg: Config, bytes_per: int = 4) -> dict[str, int]:
    """The memory `TinyLM(cfg)` holds, by part: its weights (bytes_per each: 4 for fp32, 2 for bf16) and its
    RoPE tables (cos and sin in float64); computed from the config alone, for any n_layers."""
    return {"weights": state_size(cfg)[1] * bytes_per, "RoPE tables": 16 * cfg.max_seq_len * cfg.head_dim}


def check_bytes(what: str, parts: dict[str, int], max_bytes: int | None, fix: str) -> int:
    """Refuse (ValueError) when the parts together exceed max_bytes (None: default_max_bytes()); returns the limit."""
    limit = default_max_bytes() if max_bytes is None else check_int("max_bytes", max_bytes, low=1)
    need = sum(parts.values())
    if need > limit:
        detail = " (" + ", ".join(f"{name} {gib(n)}" for name, n in parts.items()) + ")" if len(parts) > 1 else ""
        origin = " (the default, half of this machine's RAM)" if max_bytes is None else ""
        raise ValueError(f"{what} needs about {gib(need)}{detail}, more than max_bytes = {limit:,} bytes "
                         f"({gib(limit)}){origin}; {fix}, or pass a larger max_bytes= if the machine has the memory")
    return limit


def check_memory(what: str, cfg: Config, max_bytes: int | None, bytes_per: int = 4, weights: bool = True,
                 weight_bytes: int | None = None) -> None:
    """Refuse a model of cfg above max_bytes before building it. weights=False: the RoPE tables only (the
    weights exist already: `TinyLM.from_weights`). weight_bytes: the weights' memory where they are not
    bytes_per each (`tinylm.gguf_q4`: 4-bit blocks, int8 and fp32 mixed)."""
    parts = model_bytes(cfg, bytes_per)
    if not weights:
        del parts["weights"]
    elif weight_bytes is not None:
        parts["weights"] = weight_bytes
    check_bytes(what, parts, max_bytes, "choose a smaller model (vocab_size, dim, n_layers, ffn_dim, n_experts) "
                "or max_seq_len")


def check_cache_memory(cfg: Config, batch: int, max_len: int, bytes_per: int, max_bytes: int | None) -> None:
    """Refuse a KV cache above max_bytes before allocating it."""
    check_bytes(f"a KV cache of batch {batch} x {max_len:,} positions", {"keys and values": kv_cache_bytes(
        cfg, max_len, batch, bytes_per)}, max_bytes, "use a smaller batch or fewer positions")


def check_listable(source: str, have: int, need: int, claim: str) -> None:
    """Refuse a file whose config implies far more tensors than it holds, before they are listed (a claimed
    10**9 layers would take hours to list); a count close to the truth passes, for a message naming the
    missing tensors."""
    if need > 2 * have + 16:
        raise ValueError(f"{source} holds {have:,} tensors, but {claim} implies {need:,}: the file is damaged, "
                         "or its config is wrong")


def as_path(path: Any, what: str = "path") -> Path:
    """path as a Path; ValueError for what is not a str or os.PathLike (None, a number, an open file)."""
    if isinstance(path, str) and path or isinstance(path, os.PathLike):
        return Path(path)
    raise ValueError(f"{what} must be a file or folder path (a str or pathlib.Path), got {path!r}")


def inside(folder: Path, name: Any, source: str, field: str) -> Path:
    """folder / name, for a file name that a file gives: a relative path that stays inside the folder.

    Refused: an absolute path, a drive, '..' anywhere, a backslash. The check is on the name: a symlink inside
    the folder is followed (Hugging Face's cache is made of them, pointing to ../../blobs).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{source}: {field} must be a file name, got {name!r}")
    pure = PurePosixPath(name)
    if pure.is_absolute() or PureWindowsPath(name).drive or "\\" in name or ".." in pure.parts or "\0" in name:
        raise ValueError(f"{source}: {field} {name!r} leaves the folder {folder}: a file may only name files "
                         "inside its own folder (e.g. 'model-00001-of-00002.safetensors')")
    return folder / pure


def read_json(f: Path, kind: str, limit: int = MAX_JSON_BYTES) -> Any:
    """The parsed JSON of a small file; ValueError if it is over `limit` bytes, not UTF-8, not JSON or nested
    too deep. kind names the file for the message ("a checkpoint's config.json")."""
    size = f.stat().st_size
    if size > limit:
        raise ValueError(f"{f} is {size:,} bytes, too large for {kind} (at most {limit:,})")
    try:
        return json.loads(f.read_text(encoding="utf-8"), object_pairs_hook=unique_keys)
    except (ValueError, RecursionError) as e:        # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{f} is not valid JSON ({str(e)[:200]})") from None


def unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json.loads' object_pairs_hook: a JSON object, refused (ValueError) if it gives a key twice (json.loads
    would keep the last one silently)."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"the key {key!r} is given twice in one object")
        seen.add(key)
    return dict(pairs)


def check_finite(t: torch.Tensor, source: str, name: str) -> None:
    """Refuse a weight holding NaN or inf: a model would load, then generate garbage without an error.

    First the sum (one pass, no copy: 50 ms for SmolLM2's 538 MB): NaN and inf carry through every addition,
    so a finite sum proves every weight finite. An infinite sum may also be finite weights that overflow
    it; then the exact test (an isfinite mask, 12x slower) decides.
    """
    if not math.isfinite(float(t.sum())) and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{source}: tensor {name} holds NaN or inf; the file is damaged (or its model diverged "
                         "in training): download it again, or use another checkpoint")


def check_dtype(dtype: Any, allow_none: bool = True) -> torch.dtype | None:
    """dtype must be one of TORCH_FLOATS (torch.float32, torch.float16, torch.bfloat16, torch.float64), or None."""
    if (dtype is None and allow_none) or dtype in TORCH_FLOATS:
        return dtype
    raise ValueError(f"dtype must be a torch floating dtype ({', '.join(map(str, TORCH_FLOATS))})"
                     f"{' or None (as stored)' if allow_none else ''}, got {dtype!r}")


def check_device(device: Any) -> torch.device:
    """device ('cpu', 'cuda', 'cuda:1', 'mps' or a torch.device) as a torch.device that exists here."""
    if not isinstance(device, (str, torch.device)):
        raise ValueError(f"device must be a str such as 'cpu' or 'cuda', or a torch.device, got {device!r}")
    try:
        d = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'mps'") from None
    if d.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: this PyTorch has no CUDA GPU to use (torch.cuda.is_available() is "
                         "False); use 'cpu'")
    if d.type == "cuda" and d.index is not None and d.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: there are {torch.cuda.device_count()} CUDA GPUs, numbered from 0")
    if d.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: Apple's MPS is not available here; use 'cpu'")
    if d.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r}: tinylm runs on 'cpu', 'cuda' or 'mps'")
    return d
