"""A mutation fuzzer over tinylm's file readers (issue 28): hypothesis mutates real small files, one field at a time.

    .venv/bin/python tools/fuzz_loaders.py                          # every target, 300 examples each, seed 0
    .venv/bin/python tools/fuzz_loaders.py --examples 50 --seed 3 --only gguf tokenizer
    .venv/bin/python tools/fuzz_loaders.py --json fuzz.json         # also every example's outcome

The files are the ones tinylm reads, written small here: a GGUF file as llama.cpp's converter writes it
(Q4_1/Q8_0 weights, a byte-level BPE tokenizer in its metadata; `tests/gguf_files.py`), a tokenizer file
(`BPETokenizer.save`), a Hugging Face folder (config.json and model.safetensors, and a sharded one with its
model.safetensors.index.json) and a training checkpoint (`save_checkpoint`). Each example changes one thing:

    gguf        a number of the header (version, counts, lengths, value and array types, scalars, tensor dims,
                types, offsets) set to a boundary value; a metadata value replaced by another of any GGUF type
                (nested arrays too); a key or tensor record repeated or dropped; a NaN in a weight; bytes
                flipped; the file cut short
    tokenizer   one JSON value of the file replaced, removed or added, or a key given twice
    hf          the same on config.json or the index, or a shard named outside the folder, or the safetensors
                header's bytes
    checkpoint  the same on the checkpoint's config.json, or model.safetensors' header
    gguf_q4     the gguf mutations, read by the 4-bit loader (load_gguf_q4)
    adapter     a LoRA adapter's safetensors header, or one metadata value (the JSON ones mutated as JSON)

and the loader (`load_gguf`, `load_gguf_q4`, `BPETokenizer.load`, `load_hf_dir`, `load_checkpoint`, `load_adapter`) must answer with a model
or a ValueError. Outcomes: clear (ValueError), worked, silent (a change that must be refused, such as a NaN
weight, a repeated key or a shard outside the folder, was accepted), crash (any other exception), hang (over
10 s), oom (over a cap of 2 GiB above what the process maps; the loaders get max_bytes = 1 GiB). Examples come
from hypothesis with a fixed seed (no shrinking, no database), so a run repeats exactly. Linux only (the cap).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import shutil
import struct
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, seed, settings, strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))        # GGUF files written as llama.cpp's converter does; the limits

from helpers import limits  # noqa: E402

SECONDS, HEADROOM, MAX_BYTES = 10.0, 2 << 30, 1 << 30
OUTCOMES = ("clear", "worked", "silent", "crash", "hang", "oom")
TEXT = "The quick brown fox jumps over the lazy dog. 1234 + 5678 = 6912.\n  Indented   code();\n" * 20


# ---------------------------------------------------------------------------------------------
# the real small files, written once per run
# ---------------------------------------------------------------------------------------------
@dataclass
class Files:
    root: Path
    gguf: bytes                  # the GGUF file
    tokenizer: dict              # a tokenizer file's JSON
    hf_config: dict              # config.json of the Hugging Face folders
    hf: Path                     # a folder: config.json + model.safetensors
    sharded: Path                # a folder: config.json + two shards + model.safetensors.index.json
    checkpoint: Path             # a checkpoint folder of step 1
    adapter: Path                # a LoRA adapter of the model (tinylm.lora.save_adapter)


def make_files(root: Path) -> Files:
    import torch
    from safetensors.torch import save_file

    from gguf_files import write_gguf
    from tinylm import Config, TinyLM
    from tinylm.hf import to_hf_state_dict
    from tinylm.tokenizer import BPETokenizer
    from tinylm.train import History, TrainConfig, make_optimizer, save_checkpoint

    tok = BPETokenizer.train(TEXT, 300)
    cfg = Config(vocab_size=300, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=64)
    torch.manual_seed(0)
    model = TinyLM(cfg)
    gguf = write_gguf(root / "tiny.gguf", model, tok, quant=True).read_bytes()
    tok.save(root / "tokenizer.json")
    hf_config = {"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2,
                 "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 64,
                 "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                 "tie_word_embeddings": True, "torch_dtype": "float32", "architectures": ["LlamaForCausalLM"]}
    weights = {k: v.contiguous() for k, v in to_hf_state_dict(model).items() if k != "lm_head.weight"}
    hf, sharded = root / "hf", root / "sharded"
    for folder in (hf, sharded):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(hf_config))
    save_file(weights, str(hf / "model.safetensors"))
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in shards.items():
        save_file({k: weights[k] for k in keys}, str(sharded / shard))
    index = {"metadata": {"total_size": 0}, "weight_map": {k: s for s, keys in shards.items() for k in keys}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    optimizer = make_optimizer(model, 1e-3, 0.1)
    model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))[1].backward()
    optimizer.step()
    save_checkpoint(root / "ckpt", model, optimizer, 1, TrainConfig(steps=2), torch.Generator().manual_seed(0),
                    History(), tokenizer=tok)
    from tinylm.lora import LoRAConfig, add_lora, save_adapter
    adapted = add_lora(TinyLM(cfg), LoRAConfig(rank=2, targets="attention"))
    adapter = save_adapter(adapted, root / "adapter.safetensors")
    return Files(root, gguf, json.loads((root / "tokenizer.json").read_text()), hf_config, hf, sharded,
                 root / "ckpt", adapter)


# ---------------------------------------------------------------------------------------------
# GGUF: every field of the header, found by walking it
# ---------------------------------------------------------------------------------------------
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


@dataclass
class Header:
    fields: list[tuple[int, str, str]]     # (offset, struct format, what it is) of every number of the header
    kvs: list[tuple[int, int, int, str]]   # (start, value start, end, key) of every metadata record
    tensors: list[tuple[int, int, str]]    # (start, end, name) of every tensor record
    end: int                               # where the header ends (the data starts at the next alignment)


def walk(data: bytes) -> Header:
    """Every field of a (valid) GGUF header, with its offset: what the mutations change."""
    fields, kvs, tensors, pos = [], [], [], 4

    def num(fmt: str, what: str) -> Any:
        nonlocal pos
        fields.append((pos, fmt, what))
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string(what: str) -> str:
        nonlocal pos
        n = num("<Q", f"{what} length")
        pos += n
        return data[pos - n:pos].decode()

    def value(kind: int, what: str) -> None:
        nonlocal pos
        if kind == 8:
            string(what)
        elif kind in _SCALARS:
            num(_SCALARS[kind], what)
        else:
            item, count = num("<I", f"{what} item type"), num("<Q", f"{what} count")
            for i in range(count):
                if i < 3 or item in (8, 9):             # every string; the first numbers of a numeric array
                    value(item, f"{what}[{i}]")
                else:
                    pos += struct.calcsize(_SCALARS[item])
    num("<I", "version")
    n_tensors, n_kv = num("<Q", "n_tensors"), num("<Q", "n_kv")
    for _ in range(n_kv):
        start = pos
        key = string("key")
        kind = num("<I", f"{key} type")
        at = pos
        value(kind, key)
        kvs.append((start, at, pos, key))
    for _ in range(n_tensors):
        start = pos
        name = string("tensor name")
        for d in range(num("<I", f"{name} n_dims")):
            num("<Q", f"{name} ne[{d}]")
        num("<I", f"{name} ggml type")
        num("<Q", f"{name} offset")
        tensors.append((start, pos, name))
    return Header(fields, kvs, tensors, pos)


def gguf_value(kind: int, value: Any) -> bytes:
    """A metadata value's bytes: a string, a scalar, or (item type, items) for an array."""
    if kind == 8:
        raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
        return struct.pack("<Q", len(raw)) + raw
    if kind in _SCALARS:
        return struct.pack(_SCALARS[kind], value)
    item, items = value
    return struct.pack("<IQ", item, len(items)) + b"".join(gguf_value(item, v) for v in items)


_LIMITS = {"B": (0, 2**8 - 1), "b": (-2**7, 2**7 - 1), "H": (0, 2**16 - 1), "h": (-2**15, 2**15 - 1),
           "I": (0, 2**32 - 1), "i": (-2**31, 2**31 - 1), "Q": (0, 2**64 - 1), "q": (-2**63, 2**63 - 1)}


def boundary(fmt: str, old: Any) -> st.SearchStrategy:
    """Values worth trying in a field of this format: its ends, 0, 1, neighbours and multiples of the old value."""
    code = fmt[-1]
    if code in "fd":
        return st.sampled_from([0.0, -1.0, 1e-30, 1e30, 3.4e38, float("nan"), float("inf"), -float("inf"),
                                old * 2, old / 2])
    if code == "?":
        return st.booleans()
    lo, hi = _LIMITS[code]
    picks = [lo, hi, hi - 1, 0, 1, 2, 3, 7, 31, 33, 64, 2**31, 2**32, 2**32 + 1, 2**62, 2**63 - 1,
             old - 1, old + 1, old * 2, old * 2**20, old * 2**40, old // 2]
    return st.sampled_from(sorted({v for v in picks if lo <= v <= hi and v != old}))


def new_value() -> st.SearchStrategy:
    """(GGUF type, value) of any kind: scalars at their ends, strings (also not UTF-8), arrays, deep arrays."""
    codes = {"B": 0, "b": 1, "H": 2, "h": 3, "I": 4, "i": 5, "Q": 10, "q": 11}
    ints = st.sampled_from(sorted(codes)).flatmap(lambda c: st.tuples(st.just(codes[c]), st.one_of(
        st.sampled_from([*_LIMITS[c], 0, 1, 64]), st.integers(*_LIMITS[c]))))
    floats = st.tuples(st.sampled_from([6, 12]), st.sampled_from([0.0, 1e-5, 1e4, float("nan"), float("inf"), -1.0]))
    strings = st.tuples(st.just(8), st.sampled_from(["", "gpt2", "llama", "qwen3", "smollm", "none", "linear",
                                                     "<|im_end|>", b"\xff\xfe", "x" * 1000]))
    arrays = st.tuples(st.just(9), st.one_of(
        st.tuples(st.just(8), st.lists(st.sampled_from(["a", "b", "ab", "", "<eos>", "a b", "Ġ"]), max_size=6)),
        st.tuples(st.just(5), st.lists(st.integers(-2**31, 2**31 - 1), max_size=6)),
        st.tuples(st.just(9), st.just([(4, [1, 2])])),
        st.integers(2, 12).map(lambda depth: _nested(depth))))
    return st.one_of(ints, floats, strings, arrays, st.tuples(st.just(7), st.booleans()))


def _nested(depth: int) -> tuple:
    value: tuple = (4, [1])
    for _ in range(depth - 1):
        value = (9, [value])
    return value


NEW_KEYS = ["general.alignment", "llama.expert_count", "llama.rope.scaling.type", "llama.attention.key_length",
            "tokenizer.ggml.bos_token_id", "tokenizer.chat_template", "tokenizer.ggml.token_type", "x"]
TENSOR_NAMES = ["blk.03.attn_q.weight", "blk.0.attn_q.bias", "foo.weight", "output.weight", "blk.2.ffn_up.weight",
                "rope_freqs.weight", "token_embd.weight", "blk.0.attn_q_norm.weight", "blk.-1.ffn_up.weight", ""]


def gguf_mutation(data: st.DataObject, files: Files) -> tuple[bytes, bool, str]:
    """(mutated file, whether it must be refused, what changed)."""
    raw = files.gguf
    h = walk(raw)
    kind = data.draw(st.sampled_from(["field"] * 4 + ["value"] * 3 + ["add key", "repeat key", "drop key",
                                      "repeat tensor", "rename tensor", "nan weight", "flip", "cut"]), label="mutation")
    head, tail = bytearray(raw[:h.end]), raw[-(-h.end // 32) * 32:]      # the data section stays as it is
    n_kv_at, n_tensors_at = 4 + 4 + 8, 4 + 4
    bad, what = False, kind
    if kind == "field":
        offset, fmt, name = data.draw(st.sampled_from(h.fields), label="field")
        old = struct.unpack_from(fmt, raw, offset)[0]
        if name.endswith("ggml type"):            # every type: floats, quantised, integers, unknown
            choices = st.sampled_from([0, 1, 2, 3, 8, 12, 14, 24, 25, 26, 27, 28, 30, 99])
        elif name.endswith("offset"):             # another tensor's data (overlap), or not aligned
            others = [struct.unpack_from("<Q", raw, end - 8)[0] for _, end, _ in h.tensors]
            choices = st.sampled_from(sorted({*others, old + 1, old + 16, old + 32} - {old}))
        else:
            choices = boundary(fmt, old)
        new = data.draw(choices, label="value")
        struct.pack_into(fmt, head, offset, new)
        what = f"{name}: {old!r} -> {new!r}"
    elif kind == "value":
        start, at, end, key = data.draw(st.sampled_from(h.kvs), label="key")
        vtype, value = data.draw(new_value(), label="new value")
        head[at - 4:end] = struct.pack("<I", vtype) + gguf_value(vtype, value)
        what = f"{key} := type {vtype} {str(value)[:60]}"
    elif kind == "add key":
        key = data.draw(st.sampled_from(NEW_KEYS), label="key")
        vtype, value = data.draw(new_value(), label="new value")
        at = h.kvs[-1][2]
        head[at:at] = gguf_value(8, key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
        struct.pack_into("<Q", head, n_kv_at, struct.unpack_from("<Q", raw, n_kv_at)[0] + 1)
        what = f"added {key} := type {vtype} {str(value)[:60]}"
    elif kind == "rename tensor":
        start, _, name = data.draw(st.sampled_from(h.tensors), label="tensor")
        new_name = data.draw(st.sampled_from(TENSOR_NAMES), label="name")
        head[start:start + 8 + len(name.encode())] = gguf_value(8, new_name)
        what = f"tensor {name} renamed {new_name}"
    elif kind in ("repeat key", "drop key", "repeat tensor"):
        records, count_at = (h.kvs, n_kv_at) if "key" in kind else (h.tensors, n_tensors_at)
        record = data.draw(st.sampled_from(records), label="record")
        start, end, name = record[0], record[-2], record[-1]
        repeat = kind.startswith("repeat")
        head[start:end] = raw[start:end] * 2 if repeat else b""
        struct.pack_into("<Q", head, count_at, struct.unpack_from("<Q", raw, count_at)[0] + (1 if repeat else -1))
        bad, what = repeat, f"{kind} {name}"
    elif kind == "nan weight":
        norm = next(name for _, _, name in h.tensors if name.endswith("norm.weight"))
        offset = _tensor_offset(raw, h, norm)
        tail = tail[:offset] + struct.pack("<f", float("nan")) + tail[offset + 4:]
        bad, what = True, f"NaN in {norm}"
    elif kind == "flip":
        at = data.draw(st.integers(4, h.end - 1), label="byte")
        head[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        what = f"bit flipped at byte {at}"
    else:
        cut = data.draw(st.integers(0, len(raw) - 1), label="cut")
        return raw[:cut], False, f"cut at {cut:,} of {len(raw):,} bytes"
    return bytes(head) + b"\0" * (-len(head) % 32) + tail, bad, what


def _tensor_offset(raw: bytes, h: Header, name: str) -> int:
    """Where the data of tensor `name` starts, counted from the data section (its record's last field)."""
    start, end, _ = next(t for t in h.tensors if t[2] == name)
    return struct.unpack_from("<Q", raw, end - 8)[0]


# ---------------------------------------------------------------------------------------------
# JSON files: every value, found by walking the object
# ---------------------------------------------------------------------------------------------
def json_paths(obj: Any, path: tuple = ()) -> list[tuple]:
    """The path of every value (a list: its first three items and its last)."""
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += json_paths(v, path + (k,))
    elif isinstance(obj, list):
        for i in sorted({*range(min(3, len(obj))), len(obj) - 1} - {-1}):
            out += json_paths(obj[i], path + (i,))
    return out


DEEP = "<nested 5,000 deep>"        # written as [[[...]]] into the text (json.dumps would recurse too deep)
JSON_VALUES = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 1, 2, 3, 255, 256, 2**31, 2**32, 2**53 + 1, 2**63, 2**64, 10**30,
                     -2**63, 0.5, -0.0, 1e308, float("nan"), float("inf"), "", "x", "../x", "/etc/passwd", "a\\b",
                     "NaN", "llama", "qwen3", "default", "linear", [], {}, [0], [[0, 1]], [1, 2, 3], {"a": 1},
                     {"rope_type": "default"}, {"rope_type": "linear", "factor": 2.0}]),
    st.integers(), st.floats(allow_nan=True), st.text(max_size=12), st.just(DEEP),
)


def json_mutation(data: st.DataObject, obj: Any, extra_keys: list[str]) -> tuple[str, bool, str]:
    """(the mutated JSON text, whether it must be refused, what changed): one value replaced or removed, a key
    added, or a key given twice."""
    text, bad, what = _json_mutation(data, obj, extra_keys)
    return text.replace(json.dumps(DEEP), "[" * 5000 + "]" * 5000), bad, what


def _json_mutation(data: st.DataObject, obj: Any, extra_keys: list[str]) -> tuple[str, bool, str]:
    obj = json.loads(json.dumps(obj))
    path = data.draw(st.sampled_from(json_paths(obj)), label="path")
    kind = data.draw(st.sampled_from(["replace", "replace", "remove", "add", "twice"]), label="mutation")
    if kind == "twice":                       # a key repeated with another value: json.loads keeps the last one
        text = json.dumps(obj)
        if not text.startswith("{") or text == "{}":
            return text, False, "unchanged"
        key = json.dumps(next(iter(obj)))
        return "{" + key + ": 12345, " + text[1:], True, f"the key {key} given twice"
    parent = obj
    for step in path[:-1]:
        parent = parent[step]
    if kind == "remove" and path and isinstance(parent, dict):
        del parent[path[-1]]
        return json.dumps(obj), False, f"removed {path}"
    new = data.draw(JSON_VALUES, label="value")
    if kind == "add":
        target = _at(obj, path)
        if isinstance(target, dict):
            key = data.draw(st.sampled_from(extra_keys + ["x"]), label="key")
            target[key] = new
            return json.dumps(obj), False, f"added {path + (key,)} = {str(new)[:60]}"
    if not path:
        return json.dumps(new), False, f"the whole file := {str(new)[:60]}"
    parent[path[-1]] = new
    return json.dumps(obj), False, f"{path} := {str(new)[:60]}"


def _at(obj: Any, path: tuple) -> Any:
    for step in path:
        obj = obj[step]
    return obj


HF_KEYS = ["head_dim", "rope_scaling", "rope_parameters", "rope_theta", "num_key_value_heads", "tie_word_embeddings",
           "attention_bias", "mlp_bias", "hidden_act", "use_sliding_window", "rms_norm_eps", "max_position_embeddings",
           "vocab_size", "num_hidden_layers", "model_type", "weight_map"]
SHARD_NAMES = ["../elsewhere/x.safetensors", "/etc/passwd", "", "a\\b.safetensors", "C:/x.safetensors",
               "model-00002-of-00002.safetensors", "missing.safetensors", "sub/../../x.safetensors", "config.json"]


def copy_folder(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    return Path(shutil.copytree(src, dst))


def hf_mutation(data: st.DataObject, files: Files, work: Path) -> tuple[Path, bool, str]:
    sharded = data.draw(st.booleans(), label="sharded")
    folder = copy_folder(files.sharded if sharded else files.hf, work / "hf")
    target = data.draw(st.sampled_from(["config.json"] + (["index", "shard name"] if sharded else ["safetensors"])),
                       label="file")
    if target == "config.json":
        text, bad, what = json_mutation(data, files.hf_config, HF_KEYS)
        (folder / "config.json").write_text(text)
    elif target == "index":
        index = folder / "model.safetensors.index.json"
        text, bad, what = json_mutation(data, json.loads(index.read_text()), ["weight_map", "metadata"])
        index.write_text(text)
    elif target == "shard name":
        index = folder / "model.safetensors.index.json"
        d = json.loads(index.read_text())
        key = data.draw(st.sampled_from(sorted(d["weight_map"])), label="tensor")
        d["weight_map"][key] = name = data.draw(st.sampled_from(SHARD_NAMES), label="shard")
        index.write_text(json.dumps(d))
        bad, what = name not in SHARD_NAMES[5:6], f"weight_map[{key!r}] := {name!r}"
        if name.startswith(("../", "sub/")):       # a real file there: loading it would be the silent case
            (work / "elsewhere").mkdir(exist_ok=True)
            shutil.copy(folder / "model-00002-of-00002.safetensors", work / "elsewhere" / "x.safetensors")
            shutil.copy(folder / "model-00002-of-00002.safetensors", work / "x.safetensors")
    else:
        what, bad = _mutate_safetensors(data, folder / "model.safetensors")
    return folder, bad, f"{'sharded ' if sharded else ''}{target}: {what}"


def _mutate_safetensors(data: st.DataObject, f: Path) -> tuple[str, bool]:
    """A bit of the header (its 8-byte length, then JSON) flipped, or a value of the header's JSON replaced."""
    raw = f.read_bytes()
    n = struct.unpack_from("<Q", raw)[0]
    if data.draw(st.booleans(), label="json"):
        header = json.loads(raw[8:8 + n])
        text, bad, what = json_mutation(data, header, ["dtype", "shape", "data_offsets", "__metadata__"])
        body = text.encode()
        f.write_bytes(struct.pack("<Q", len(body)) + body + raw[8 + n:])
        return f"header {what}", bad
    at = data.draw(st.integers(0, 8 + n - 1), label="byte")
    flipped = bytearray(raw)
    flipped[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    f.write_bytes(bytes(flipped))
    return f"bit flipped at byte {at}", False


def checkpoint_mutation(data: st.DataObject, files: Files, work: Path) -> tuple[Path, bool, str]:
    folder = copy_folder(files.checkpoint, work / "ckpt")
    if data.draw(st.integers(0, 3), label="file") == 0:
        what, bad = _mutate_safetensors(data, folder / "model.safetensors")
        return folder, bad, f"model.safetensors: {what}"
    meta = json.loads((folder / "config.json").read_text())
    text, bad, what = json_mutation(data, meta, ["model", "train", "extra", "step", "save_id", "head_dim"])
    (folder / "config.json").write_text(text)
    return folder, bad, f"config.json: {what}"


ADAPTER_JSON = ("targets", "model")           # metadata values that are JSON text; the others are plain strings


def adapter_mutation(data: st.DataObject, files: Files, work: Path) -> tuple[Path, bool, str]:
    """An adapter with its tensors' header mutated, or one metadata value: a JSON one mutated as JSON, a plain
    one replaced by any JSON value's text, or removed."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = work / "adapter.safetensors"
    shutil.copy(files.adapter, path)
    if data.draw(st.integers(0, 2), label="file") == 0:
        what, bad = _mutate_safetensors(data, path)
        return path, bad, f"tensors: {what}"
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = dict(f.metadata()), {n: f.get_tensor(n) for n in f.keys()}
    key = data.draw(st.sampled_from(sorted(meta)), label="key")
    if key in ADAPTER_JSON:
        text, bad, what = json_mutation(data, json.loads(meta[key]), ["dim", "n_layers", "rank", "x"])
        meta[key] = text
    elif data.draw(st.booleans(), label="remove"):
        del meta[key]
        bad, what = False, "removed"
    else:
        new = data.draw(JSON_VALUES, label="value")
        meta[key] = "[" * 5000 + "]" * 5000 if new == DEEP else (new if isinstance(new, str) else json.dumps(new))
        bad, what = False, f":= {meta[key][:60]}"
    save_file(tensors, str(path), metadata=meta)
    return path, bad, f"metadata {key}: {what}"


def _use_adapter(path: Path, cfg_of: Path) -> None:
    """An adapter that loads must also run: into a fresh model of its base, then one finite forward."""
    import torch

    from tinylm.lora import load_adapter
    from tinylm.pretrained import load_gguf
    model = load_gguf(cfg_of, progress=False)[0]
    logits, _ = load_adapter(model, path)(torch.zeros(1, 4, dtype=torch.long))
    if not bool(torch.isfinite(logits).all()):
        raise RuntimeError("the adapter loaded, and the model's logits are not finite")


def tokenizer_mutation(data: st.DataObject, files: Files, work: Path) -> tuple[Path, bool, str]:
    text, bad, what = json_mutation(data, files.tokenizer, ["byte_ids", "merge_ids", "bos", "eos", "chat_template"])
    (work / "tokenizer.json").write_text(text)
    return work / "tokenizer.json", bad, what


# ---------------------------------------------------------------------------------------------
# running: one outcome per example, under a time limit and a memory cap
# ---------------------------------------------------------------------------------------------
def outcome(load: Callable[[], Any], bad: bool) -> tuple[str, str]:
    try:
        with limits(SECONDS, HEADROOM):
            load()
    except TimeoutError as e:
        return "hang", str(e)
    except MemoryError as e:
        return "oom", f"MemoryError {e}"
    except ValueError as e:
        return ("clear" if str(e) else "crash"), f"ValueError: {e}"[:300]
    except Exception as e:                     # noqa: BLE001  (any other exception is the finding)
        kind = "oom" if isinstance(e, RuntimeError) and "alloc" in str(e) else "crash"
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
        return kind, f"{type(e).__name__} at {where}: {e}"[:300]
    return ("silent" if bad else "worked"), "loaded"


def _capped(load: Callable) -> Callable:
    """load with max_bytes=MAX_BYTES (a tinylm from before issue 28 has no such argument: then as it is)."""
    if "max_bytes" in inspect.signature(load).parameters:
        return functools.partial(load, max_bytes=MAX_BYTES)
    return load


TARGETS = ["gguf", "gguf_q4", "tokenizer", "hf", "checkpoint", "adapter"]


def targets() -> dict[str, Callable[[st.DataObject, Files, Path], tuple[str, str, str]]]:
    """target name -> run one example: (outcome, message, what changed)."""
    from tinylm.hf import load_hf_dir
    from tinylm.gguf_q4 import load_gguf_q4
    from tinylm.pretrained import load_gguf
    from tinylm.tokenizer import BPETokenizer
    from tinylm.train import load_checkpoint
    load_gguf, load_gguf_q4, load_hf_dir, load_checkpoint = map(_capped, (load_gguf, load_gguf_q4, load_hf_dir,
                                                                         load_checkpoint))

    def gguf(data, files, work):
        raw, bad, what = gguf_mutation(data, files)
        (work / "m.gguf").write_bytes(raw)
        return (*outcome(lambda: load_gguf(work / "m.gguf", progress=False), bad), what)

    def gguf_q4(data, files, work):               # the 4-bit loader reads the same files (issue 37)
        raw, bad, what = gguf_mutation(data, files)
        (work / "m.gguf").write_bytes(raw)
        return (*outcome(lambda: load_gguf_q4(work / "m.gguf"), bad), what)

    def adapter(data, files, work):
        path, bad, what = adapter_mutation(data, files, work)
        (work / "base.gguf").write_bytes(files.gguf)
        return (*outcome(lambda: _use_adapter(path, work / "base.gguf"), bad), what)

    def tokenizer(data, files, work):
        path, bad, what = tokenizer_mutation(data, files, work)
        return (*outcome(lambda: _use_tokenizer(BPETokenizer.load(path)), bad), what)

    def hf(data, files, work):
        folder, bad, what = hf_mutation(data, files, work)
        return (*outcome(lambda: load_hf_dir(folder), bad), what)

    def checkpoint(data, files, work):
        folder, bad, what = checkpoint_mutation(data, files, work)
        return (*outcome(lambda: load_checkpoint(folder), bad), what)
    return {"gguf": gguf, "gguf_q4": gguf_q4, "tokenizer": tokenizer, "hf": hf, "checkpoint": checkpoint,
            "adapter": adapter}


def _use_tokenizer(tok) -> None:
    """A loaded tokenizer must also work: encode and decode a text, and a chat when it has a template."""
    ids = tok.encode("Hello world 123!")
    tok.decode(ids)
    if tok.chat_template is not None:
        tok.encode_chat([{"role": "user", "content": "Hi"}])


def fuzz(name: str, files: Files, examples: int, rng_seed: int) -> list[dict]:
    """Run `examples` mutations of one target; every example's outcome."""
    run, results = targets()[name], []
    work = files.root / f"work-{name}"
    work.mkdir(exist_ok=True)

    @seed(rng_seed)
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def example(data):
        t0 = time.perf_counter()
        kind, message, what = run(data, files, work)
        results.append({"target": name, "outcome": kind, "change": what, "message": message,
                        "seconds": round(time.perf_counter() - t0, 4)})
    example()
    return results


def report(results: list[dict], seconds: dict[str, float]) -> None:
    print("| target | examples | per second | " + " | ".join(OUTCOMES) + " |")
    print("|---|---|---|" + "---|" * len(OUTCOMES))
    for name in seconds:
        rows = [r for r in results if r["target"] == name]
        counts = Counter(r["outcome"] for r in rows)
        print(f"| {name} | {len(rows)} | {len(rows) / seconds[name]:.0f} | "
              + " | ".join(str(counts[o]) for o in OUTCOMES) + " |")
    findings: dict[str, dict] = {}
    for r in results:
        if r["outcome"] not in ("clear", "worked"):
            findings.setdefault(f"[{r['outcome']}] {r['target']}: {r['message'][:120]}", r)
    print(f"\n{len(findings)} distinct findings" + (":" if findings else ""))
    for key, r in findings.items():
        print(f"  {key}\n      after: {r['change'][:150]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=300, help="examples per target (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis's seed (default 0)")
    parser.add_argument("--only", nargs="*", choices=TARGETS, help="some targets")
    parser.add_argument("--json", type=Path, help="write every example's outcome here")
    args = parser.parse_args()
    import warnings

    import torch
    import tinylm
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    print(f"tinylm from {Path(tinylm.__file__).parent}; {args.examples} examples per target, seed {args.seed}")
    results, seconds = [], {}
    with tempfile.TemporaryDirectory(prefix="tinylm-fuzz-") as tmp:
        files = make_files(Path(tmp))
        for name in args.only or TARGETS:
            t0 = time.perf_counter()
            results += fuzz(name, files, args.examples, args.seed)
            seconds[name] = time.perf_counter() - t0
    report(results, seconds)
    total = math.fsum(seconds.values())
    print(f"\n{total:.0f} s for {len(results)} examples ({total / max(len(results), 1) * 1000:.0f} ms each)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
