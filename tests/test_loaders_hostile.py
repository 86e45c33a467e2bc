# Run: .venv/bin/python -m pytest tests/test_loaders_hostile.py        (the SmolLM2 case is marked slow)
"""Files from the internet (issue 28): every loader distrusts what it reads, and no input crashes it.

One test per failure class, on small files written here: a path outside the folder; memory or time from
a tiny file; weights that are not what they claim; raw tracebacks from malformed folders, arguments and
flags. Each bad input must end in a ValueError that names the file or argument, within the deadline and
memory cap of `limits` (the loaders are not allowed to allocate what a file merely claims). Last, a few
examples of the mutation fuzzer (tools/fuzz_loaders.py) on every loader.
"""

import gzip
import json
import re
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from gguf_files import tokenizer_metadata, write_gguf
from helpers import limits
from tinylm import Config, KVCache, TinyLM, corpus, count_params, generate
from tinylm._loading import check_finite, default_max_bytes, model_bytes
from tinylm.gguf_q4 import load_gguf_q4
from tinylm.hf import load_hf_dir, to_hf_state_dict
from tinylm.pretrained import load_gguf, smollm2_gguf_path, tokenizer_from_gguf
from tinylm.tokenizer import BPETokenizer
from tinylm.train import History, TrainConfig, load_checkpoint, load_weights, main, make_optimizer, save_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import fuzz_loaders  # noqa: E402  (tools/fuzz_loaders.py: the GGUF header walker, and the fuzzer itself)

TEXT = "The quick brown fox jumps over the lazy dog. 1234 + 5678 = 6912.\n  Indented   code();\n" * 20
CFG = Config(vocab_size=300, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=64)
# both GGUF loaders make the same checks (issue 37: load_gguf_q4 made none of its own)
GGUF_LOADERS = {"load_gguf": lambda path, **kw: load_gguf(path, progress=False, **kw), "load_gguf_q4": load_gguf_q4}
each_gguf_loader = pytest.mark.parametrize("load", list(GGUF_LOADERS.values()), ids=list(GGUF_LOADERS))
HF_CONFIG = {"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 64,
             "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True}


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(TEXT, 300)


def model(cfg: Config = CFG) -> TinyLM:
    torch.manual_seed(0)
    return TinyLM(cfg)


def refused(load, match: str, seconds: float = 5.0, headroom: int = 1 << 30) -> str:
    """load() must raise a ValueError matching `match`, within `seconds` and `headroom` bytes of new memory."""
    with pytest.raises(ValueError, match=match) as err:
        with limits(seconds, headroom):
            load()
    return str(err.value)


def hf_folder(path: Path, weights: dict | None = None, **config) -> Path:
    """A save_pretrained folder of CFG's model: config.json (with changes) and model.safetensors."""
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(HF_CONFIG | config))
    if weights is None:
        weights = {k: v.contiguous() for k, v in to_hf_state_dict(model()).items() if k != "lm_head.weight"}
    save_file(weights, str(path / "model.safetensors"))
    return path


def shard(folder: Path) -> Path:
    """The same folder split in two shards with model.safetensors.index.json; returns the folder."""
    weights = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names = sorted(weights)
    parts = {"a.safetensors": names[: len(names) // 2], "b.safetensors": names[len(names) // 2:]}
    for file, keys in parts.items():
        save_file({k: weights[k] for k in keys}, str(folder / file))
    index = {"weight_map": {k: f for f, keys in parts.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def edit_index(folder: Path, change) -> None:
    f = folder / "model.safetensors.index.json"
    d = json.loads(f.read_text())
    change(d)
    f.write_text(json.dumps(d))


def checkpoint(path: Path, tok: BPETokenizer, cfg: Config = CFG) -> Path:
    m = model(cfg)
    save_checkpoint(path, m, make_optimizer(m, 1e-3, 0.1), 1, TrainConfig(steps=2), torch.Generator(), History(),
                    tokenizer=tok)
    return path


# ---------------------------------------------------------------------------------------------
# a path outside the folder; only the tensors the weight map names
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../elsewhere/b.safetensors", "/tmp/b.safetensors", "sub/../../b.safetensors",
                                  "a\\b.safetensors", "C:/b.safetensors", ""])
def test_a_shard_outside_the_folder_is_refused(tmp_path, name):
    folder = shard(hf_folder(tmp_path / "m"))
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(folder / "b.safetensors", tmp_path / "elsewhere" / "b.safetensors")   # a real file there
    shutil.copy(folder / "b.safetensors", tmp_path / "b.safetensors")
    edit_index(folder, lambda d: d["weight_map"].update({k: name for k, v in d["weight_map"].items()
                                                         if v == "b.safetensors"}))
    message = refused(lambda: load_hf_dir(folder), "weight_map|must be a file name")
    assert "model.safetensors.index.json" in message


def test_only_the_tensors_the_weight_map_names_are_read(tmp_path):
    folder = shard(hf_folder(tmp_path / "m"))
    a, b = load_file(folder / "a.safetensors"), load_file(folder / "b.safetensors")
    key, other = sorted(a)[:2]                                                  # both in a.safetensors
    b[key] = torch.full_like(a[key], 7.0)                    # a later shard's other copy: the map says a's
    b["model.evil.weight"] = torch.zeros(3)                  # a tensor no map names
    save_file(b, str(folder / "b.safetensors"))
    assert torch.equal(load_hf_dir(folder).state_dict()[key.removeprefix("model.")], a[key])
    edit_index(folder, lambda d: d["weight_map"].update({other: "b.safetensors"}))
    refused(lambda: load_hf_dir(folder), f"tensor '{other}' is not in b.safetensors, where the weight map puts it")


def test_two_names_for_one_tensor_are_refused(tmp_path):
    weights = {k: v.contiguous() for k, v in to_hf_state_dict(model()).items() if k != "lm_head.weight"}
    weights["norm.weight"] = weights["model.norm.weight"].clone()             # with and without "model."
    refused(lambda: load_hf_dir(hf_folder(tmp_path / "m", weights)), "are both norm.weight")


# ---------------------------------------------------------------------------------------------
# memory or time from a tiny file
# ---------------------------------------------------------------------------------------------
@each_gguf_loader
def test_a_tiny_gguf_cannot_ask_for_gigabytes_of_rope_tables(tmp_path, tok, load):
    wide = Config(vocab_size=300, dim=16, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=1024, ffn_dim=16,
                  max_seq_len=8)                                                # shapes that match the file
    path = write_gguf(tmp_path / "m.gguf", model(wide), tok, meta={"context_length": 2**17})
    assert path.stat().st_size < 1 << 20
    refused(lambda: load(path), r"max_seq_len x head_dim = 131,072 x 1024 exceeds .*MAX_ROPE",
            headroom=256 << 20)
    message = refused(lambda: load(path, max_seq_len=8192, max_bytes=100 << 20),
                      "needs about", headroom=256 << 20)     # 8,192 x 1024 x 16 bytes = 128 MiB of tables
    assert "RoPE tables 128.0 MiB" in message and "max_bytes = 104,857,600 bytes" in message


@pytest.mark.parametrize("changes, match", [
    ({"head_dim": 2**20}, r"head_dim must be an int in \[1, 1024\]"),
    ({"max_position_embeddings": 2**17, "head_dim": 256}, "MAX_ROPE_ENTRIES"),
    ({"num_hidden_layers": 10**9}, "holds 20 tensors, but config.json's num_hidden_layers = 1,000,000,000 implies"),
])
def test_a_tiny_config_json_cannot_ask_for_memory_or_time(tmp_path, changes, match):
    refused(lambda: load_hf_dir(hf_folder(tmp_path / "m", **changes)), match, seconds=3, headroom=256 << 20)


@each_gguf_loader
@pytest.mark.parametrize("quant", [False, True], ids=["F32", "Q4_1"])
def test_a_gguf_block_count_of_a_billion_is_refused_before_listing_its_layers(tmp_path, tok, load, quant):
    path = write_gguf(tmp_path / "m.gguf", model(), tok, quant=quant, meta={"block_count": 10**9})
    refused(lambda: load(path), "holds 20 tensors, but llama.block_count = 1,000,000,000 "
            "implies", seconds=3)


def test_config_and_tinylm_estimate_memory_before_allocating():
    huge = Config(vocab_size=2**31, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=16)   # a description
    assert model_bytes(huge)["weights"] == 4 * (count_params(huge.replace(vocab_size=10)).total + (2**31 - 10) * 16)
    message = refused(lambda: TinyLM(huge, max_bytes=64 << 30), "needs about 128.0 GiB", headroom=256 << 20)
    assert "max_bytes = 68,719,476,736 bytes" in message
    assert "half of this machine's RAM" in refused(lambda: TinyLM(huge.replace(vocab_size=2**40 // 64)), "needs about")
    small = TinyLM(CFG, max_bytes=1 << 20)           # 28,192 weights (110 KiB) and 16 KiB of tables
    assert sum(p.numel() * 4 for p in small.parameters()) == model_bytes(CFG)["weights"]
    refused(lambda: KVCache(CFG, 10**6, 64, max_bytes=1 << 30), "a KV cache of batch 1000000 x 64 positions")
    assert default_max_bytes() > 1 << 30


def test_every_loader_takes_max_bytes_and_names_it(tmp_path, tok):
    gguf = write_gguf(tmp_path / "m.gguf", model(), tok)
    folder, ckpt = hf_folder(tmp_path / "hf"), checkpoint(tmp_path / "ckpt", tok)
    for load in (lambda b: load_gguf(gguf, progress=False, max_bytes=b), lambda b: load_gguf_q4(gguf, max_bytes=b),
                 lambda b: load_hf_dir(folder, max_bytes=b),
                 lambda b: load_checkpoint(ckpt, max_bytes=b), lambda b: load_weights(ckpt, max_bytes=b)):
        assert "more than max_bytes = 100,000 bytes" in refused(lambda: load(100_000), r"needs about 0\.\d MiB")
        assert load(1 << 20) is not None                 # 126 KiB (the 4-bit loader, fp32 then int8: 157 KiB): loads
    q4 = write_gguf(tmp_path / "q4.gguf", model(), tok, quant=True)    # Q4_1 matrices kept 4-bit: 76 KiB
    assert "more than max_bytes = 50,000 bytes" in refused(lambda: load_gguf_q4(q4, max_bytes=50_000), "needs about")
    assert load_gguf_q4(q4, max_bytes=100_000) is not None
    refused(lambda: load_hf_dir(folder, max_bytes=-1), "max_bytes must be a positive int")


# ---------------------------------------------------------------------------------------------
# weights that are not what they claim
# ---------------------------------------------------------------------------------------------
def gguf_with(tmp_path, tok, change) -> Path:
    """The tiny GGUF with its header bytes changed by change(bytearray, walk(header))."""
    raw = bytearray(write_gguf(tmp_path / "good.gguf", model(), tok).read_bytes())
    change(raw, fuzz_loaders.walk(bytes(raw)))
    (tmp_path / "bad.gguf").write_bytes(bytes(raw))
    return tmp_path / "bad.gguf"


def _field(h, what: str) -> int:
    return next(offset for offset, _, name in h.fields if name == what)


def _nan_norm(raw: bytearray, h) -> None:
    start = -(-h.end // 32) * 32 + fuzz_loaders._tensor_offset(bytes(raw), h, "output_norm.weight")
    raw[start:start + 4] = struct.pack("<f", float("nan"))


def _repeat_first_key(raw: bytearray, h) -> None:
    start, _, end, _ = h.kvs[0]
    raw[start:start] = raw[start:end]
    struct.pack_into("<Q", raw, 16, struct.unpack_from("<Q", raw, 16)[0] + 1)     # n_kv


@pytest.mark.parametrize("change, match", [
    (_nan_norm, "tensor 'output_norm.weight' holds NaN or inf"),
    (lambda raw, h: struct.pack_into("<Q", raw, _field(h, "output_norm.weight offset"),
                                     fuzz_loaders._tensor_offset(bytes(raw), h, "token_embd.weight")), "overlap"),
    (lambda raw, h: struct.pack_into("<Q", raw, _field(h, "output_norm.weight offset"),
                                     fuzz_loaders._tensor_offset(bytes(raw), h, "output_norm.weight") + 4),
     "not a multiple of general.alignment"),
    (lambda raw, h: struct.pack_into("<I", raw, _field(h, "output_norm.weight ggml type"), 26),
     r"holds integers \(I32\)"),
    (_repeat_first_key, "is given twice"),
])
@each_gguf_loader
def test_gguf_weights_that_are_not_what_they_claim(tmp_path, tok, change, match, load):
    assert "bad.gguf" in refused(lambda: load(gguf_with(tmp_path, tok, change)), match)


def _set_scale(raw: bytearray, h, name: str, at: int, value: float) -> None:
    """Tensor name's first block's fp16 at byte `at` (Q4_1: d at 0, m at 2; Q8_0: d at 0) set to value."""
    start = -(-h.end // 32) * 32 + fuzz_loaders._tensor_offset(bytes(raw), h, name) + at
    raw[start:start + 2] = struct.pack("<e", value)


@each_gguf_loader
@pytest.mark.parametrize("name, at, value", [
    ("blk.0.ffn_up.weight", 0, float("nan")), ("blk.1.attn_q.weight", 2, float("inf")),
    ("blk.0.attn_output.weight", 0, -float("inf")), ("token_embd.weight", 0, float("nan")),
], ids=["Q4_1 d NaN", "Q4_1 m inf", "Q4_1 d -inf", "Q8_0 d NaN"])
def test_gguf_block_scales_that_are_nan_or_inf_are_refused(tmp_path, tok, load, name, at, value):
    good = write_gguf(tmp_path / "good.gguf", model(), tok, quant=True)
    raw = bytearray(good.read_bytes())
    _set_scale(raw, fuzz_loaders.walk(bytes(raw)), name, at, value)
    (tmp_path / "bad.gguf").write_bytes(bytes(raw))
    message = refused(lambda: load(tmp_path / "bad.gguf"), f"tensor '{name}'.* holds NaN or inf")
    assert "bad.gguf" in message and "download it again" in message


@each_gguf_loader
@pytest.mark.parametrize("changes, match", [
    ({"drop": "blk.1.ffn_up.weight"}, r"lacks the tensors for \['layers.1.mlp.up_proj.weight'\]"),
    ({"extra": {"blk.5.ffn_up.weight": np.zeros((64, 32), np.float32)}},
     r"tensor 'blk.5.ffn_up.weight' \(layers.5.mlp.up_proj.weight\) has no place"),
    ({"extra": {"blk.0.ffn_gate.bias": np.zeros(64, np.float32)}}, "tensor 'blk.0.ffn_gate.bias' has no place"),
    ({"pre": "nope"}, "tokenizer.ggml.pre is 'nope'"),
], ids=["missing", "extra layer", "unknown name", "tokenizer"])
def test_gguf_tensors_and_tokenizer_are_checked_before_any_is_read(tmp_path, tok, load, changes, match):
    path = write_gguf(tmp_path / "m.gguf", model(), tok, quant=True, **changes)
    assert "m.gguf" in refused(lambda: load(path), match)


@each_gguf_loader
def test_a_gguf_tensor_listed_twice_is_refused(tmp_path, tok, load):
    def repeat(raw: bytearray, h) -> None:
        start, end, _ = h.tensors[-1]
        raw[end:end] = raw[start:end]
        struct.pack_into("<Q", raw, 8, struct.unpack_from("<Q", raw, 8)[0] + 1)   # n_tensors
    path = gguf_with(tmp_path, tok, repeat)
    refused(lambda: load(path), "is listed twice")


@pytest.mark.parametrize("dtype, match", [(torch.int32, "is I32 .*needs a float tensor"),
                                          (torch.float32, "holds NaN or inf")])
def test_hf_weights_that_are_not_what_they_claim(tmp_path, dtype, match):
    weights = {k: v.contiguous() for k, v in to_hf_state_dict(model()).items() if k != "lm_head.weight"}
    norm = weights["model.norm.weight"]
    weights["model.norm.weight"] = norm.to(dtype) if dtype != torch.float32 else norm.clone().fill_(float("nan"))
    refused(lambda: load_hf_dir(hf_folder(tmp_path / "m", weights)), match)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_the_finiteness_check_misses_no_nan_or_inf(value):
    t = torch.randn(1000, 64)
    t[999, 63] = value
    refused(lambda: check_finite(t, "f", "w"), "tensor w holds NaN or inf")
    check_finite(torch.full((1000,), 3e38), "f", "w")                           # finite, though their sum is not
    check_finite(torch.full((1000,), 6e4, dtype=torch.float16), "f", "w")


def test_a_json_key_given_twice_is_refused(tmp_path, tok):
    folder = hf_folder(tmp_path / "m")
    (folder / "config.json").write_text('{"model_type": "qwen3", ' + json.dumps(HF_CONFIG)[1:])
    refused(lambda: load_hf_dir(folder), "the key 'model_type' is given twice")
    ckpt = checkpoint(tmp_path / "ckpt", tok)
    (ckpt / "config.json").write_text('{"step": 0, ' + (ckpt / "config.json").read_text()[1:])
    refused(lambda: load_checkpoint(ckpt), "the key 'step' is given twice")
    tok.save(tmp_path / "t.json")
    (tmp_path / "t.json").write_text('{"pattern": "gpt2", ' + (tmp_path / "t.json").read_text()[1:])
    refused(lambda: BPETokenizer.load(tmp_path / "t.json"), "the key 'pattern' is given twice")


def test_a_gguf_tokenizer_that_would_fail_later_is_refused_now(tmp_path, tok):
    path = write_gguf(tmp_path / "m.gguf", model(CFG.replace(vocab_size=299)), tok)   # 300 tokens, 299 rows
    refused(lambda: load_gguf(path, progress=False), "lists 300 tokens, but llama.vocab_size is 299")
    t = tokenizer_metadata(tok)
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": t["tokens"],
            "tokenizer.ggml.token_type": t["types"], "tokenizer.ggml.merges": t["merges"]}
    assert tokenizer_from_gguf(meta).encode("a") != []
    meta["tokenizer.ggml.token_type"] = [3 if s == "a" else k for s, k in zip(t["tokens"], t["types"])]
    refused(lambda: tokenizer_from_gguf(meta), r"tokens\[\d+\] = 'a' is the byte 0x61, but token_type\[\d+\] = 3")
    meta["tokenizer.ggml.token_type"], meta["tokenizer.ggml.eos_token_id"] = t["types"], True
    refused(lambda: tokenizer_from_gguf(meta), "eos_token_id = True is not the id of a special token")


# ---------------------------------------------------------------------------------------------
# raw tracebacks: malformed folders, arguments and flags
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("changes, match", [
    ({"rope_theta": None}, "rope_theta must be a number > 1, got None"),
    ({"rope_scaling": "linear"}, "rope_scaling must be a JSON object"),
    ({"model_type": ["llama"]}, "model_type is"),
    ({"rope_parameters": {"rope_type": "default"}}, "rope_theta must be a number"),
])
def test_config_json_values_of_the_wrong_type(tmp_path, changes, match):
    assert "config.json" in refused(lambda: load_hf_dir(hf_folder(tmp_path / "m", **changes)), match)


@pytest.mark.parametrize("index, match", [("{not json", "is not valid JSON"),
                                          ("[1, 2]", "expected a JSON object whose"),
                                          ('{"metadata": {}}', "'weight_map' maps each tensor"),
                                          ("[" * 100_000, "is not valid JSON")])
def test_malformed_index_json(tmp_path, index, match):
    folder = shard(hf_folder(tmp_path / "m"))
    (folder / "model.safetensors.index.json").write_text(index)
    refused(lambda: load_hf_dir(folder), match)


def test_a_safetensors_file_of_random_bytes(tmp_path):
    folder = hf_folder(tmp_path / "m")
    (folder / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(5000))
    refused(lambda: load_hf_dir(folder), "model.safetensors is not a readable safetensors file")


@each_gguf_loader
def test_gguf_metadata_nested_thousands_deep(tmp_path, tok, load):
    def nest(raw: bytearray, h) -> None:
        start, at, end, key = next(kv for kv in h.kvs if kv[3] == "general.architecture")
        deep = struct.pack("<IQ", 9, 1) * 5000 + struct.pack("<IQI", 4, 1, 1)   # [[[...[1]...]]], 5,001 deep
        raw[start:end] = fuzz_loaders.gguf_value(8, "x") + struct.pack("<I", 9) + deep
    refused(lambda: load(gguf_with(tmp_path, tok, nest)), "arrays nested more than 3 deep")


@pytest.mark.parametrize("kwargs, match", [({"dtype": "float16"}, "dtype must be a torch floating dtype"),
                                           ({"dtype": torch.int8}, "dtype must be"), ({"path": None}, "path must be")])
def test_load_hf_dir_checks_its_arguments(tmp_path, kwargs, match):
    refused(lambda: load_hf_dir(**{"path": hf_folder(tmp_path / "m"), **kwargs}), match)


@pytest.mark.parametrize("device, match", [("cuda:4096", "CUDA"), ("tpu", "unknown device 'tpu'"),
                                           (5, "device must be"),
                                           ("meta", "tinylm runs on")])
def test_load_checkpoint_checks_its_device(tmp_path, tok, device, match):
    ckpt = checkpoint(tmp_path / "ckpt", tok)
    refused(lambda: load_checkpoint(ckpt, device=device), match)
    refused(lambda: load_weights(ckpt, device=device), match)


def test_generate_checks_the_prompt_device():
    on_meta = model().to("meta")
    refused(lambda: generate(on_meta, torch.zeros(1, 3, dtype=torch.long), 2), "idx is on cpu, the model on meta")


@pytest.mark.parametrize("content, match", [(b"not gzip at all", "is not gzip-compressed UTF-8 text"),
                                            (gzip.compress(b"\xff\xfe\n", mtime=0), "is not gzip-compressed UTF-8 text"),
                                            (gzip.compress(b'{"text": 5}\n', mtime=0), "line 1: 'text' must be a string"),
                                            (gzip.compress(b'{"text": "a"}\n{x\n', mtime=0), "line 2: not JSON")],
                         ids=["not gzip", "not UTF-8", "text not a string", "not JSON"])   # the same ids everywhere
def test_corpus_files_that_are_not_what_they_claim(tmp_path, content, match):
    (tmp_path / corpus.STORY_FILES["train"]).write_bytes(content)
    refused(lambda: corpus.stories("train", tmp_path), match)


def test_corpus_conversations_check_every_turn(tmp_path):
    bad = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None}]}
    (tmp_path / corpus.CHAT_FILES["train"]).write_bytes(gzip.compress(json.dumps(bad).encode()))
    refused(lambda: corpus.conversations("train", tmp_path), "line 1: 'messages': turn 1: content must be a str")


@pytest.mark.parametrize("flags, match", [
    (["--seed", str(2**70)], r"seed must be an int in \[0, 9223372036854775807\]"),
    (["--threads", "100000"], r"--threads must be an int in \[1, "),
    (["--out", ""], "--out must name a folder for the run's checkpoints"),
])
def test_cli_flags_outside_what_the_machine_takes(capsys, flags, match):
    with pytest.raises(SystemExit) as exit_:
        main(flags)
    assert exit_.value.code == 2
    assert re.search(match, capsys.readouterr().err)


def test_cli_memory_check_counts_the_rope_tables(monkeypatch):
    from tinylm.train import cli
    monkeypatch.setattr(cli, "_memory_bytes", lambda device: 200 << 20)      # a machine of 200 MiB
    tc, cpu = TrainConfig(batch_size=1, seq_len=8), torch.device("cpu")
    narrow = Config(vocab_size=300, dim=32, n_layers=1, n_heads=1, n_kv_heads=1, ffn_dim=32, max_seq_len=2**17)
    cli._check_memory(narrow, tc, cpu)                   # 131,072 positions x 32 dims x 16 bytes: 64 MiB fits
    with pytest.raises(ValueError, match=r"0\.\d GiB of RoPE tables for --max-seq-len 131072"):
        cli._check_memory(narrow.replace(dim=128), tc, cpu)   # 131,072 x 128 x 16 bytes = 256 MiB does not


# ---------------------------------------------------------------------------------------------
# the real model, and the fuzzer
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_is_refused_before_dequantizing_when_max_bytes_is_too_small():
    """SmolLM2-135M needs 538 MB of fp32 weights: under 500 MB it is refused from its header, in a second."""
    message = refused(lambda: load_gguf(smollm2_gguf_path(), progress=False, max_bytes=500 * 10**6),
                      r"needs about 521\.1 MiB \(weights 513\.1 MiB, RoPE tables 8\.0 MiB\)", seconds=5, headroom=512 << 20)
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in message


@pytest.fixture(scope="module")
def fuzz_files(tmp_path_factory) -> "fuzz_loaders.Files":
    return fuzz_loaders.make_files(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("target", fuzz_loaders.TARGETS)
def test_a_few_fuzzed_files_end_in_a_model_or_a_clear_error(fuzz_files, target):
    results = fuzz_loaders.fuzz(target, fuzz_files, examples=12, rng_seed=0)
    assert len(results) == 12
    assert [r for r in results if r["outcome"] not in ("clear", "worked")] == []
