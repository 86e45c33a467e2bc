# Parameter counting against PyTorch's own count. Run: .venv/bin/python -m pytest tests/test_params.py
import pytest
import torch
from hypothesis import given, settings, strategies as st

from tinylm import Config, KVCache, TinyLM, count_params, kv_cache_bytes
from tinylm.numpy_model import param_shapes, params_from_torch
from tinylm.params import state_size, weight_shapes


def numel(cfg: Config) -> int:
    return sum(p.numel() for p in TinyLM(cfg).parameters())


@pytest.mark.parametrize("name, expected", [
    ("running-example", 63_910_656), ("small-variant", 26_878_464), ("mini-companion", 3_869_184)])
def test_presets_match_the_curriculum_and_numel(name, expected):
    cfg = Config.from_preset(name)
    assert count_params(cfg).total == expected
    assert numel(cfg) == expected


def test_mini_companion_breakdown():
    p = count_params(Config.from_preset("mini-companion"))
    assert p.embedding == 4096 * 256
    assert p.attention == 4 * (2 * 256 * 256 + 2 * 256 * 64 + 2 * 32)
    assert p.feed_forward == 4 * 3 * 256 * 704
    assert p.norms == 4 * 2 * 256 + 256
    assert p.head == 0


def test_untying_adds_vocab_times_dim():
    cfg = Config()
    assert count_params(cfg.replace(tie_embeddings=False)).total - count_params(cfg).total == 6400 * 768


@st.composite
def configs(draw):
    n_kv = draw(st.integers(1, 4))
    n_heads = n_kv * draw(st.integers(1, 3))
    head_dim = 2 * draw(st.integers(1, 8))
    n_experts = draw(st.sampled_from([0, 0, 1, 3]))
    n_layers = draw(st.integers(1, 3))
    free_head_dim = draw(st.booleans())   # head_dim set apart from dim // n_heads (Qwen3), or derived
    return Config(
        vocab_size=draw(st.integers(1, 300)), dim=draw(st.integers(1, 40)) if free_head_dim else n_heads * head_dim,
        n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=head_dim if free_head_dim else None, ffn_dim=draw(st.integers(1, 64)), max_seq_len=draw(st.integers(1, 64)),
        qk_norm=draw(st.booleans()), tie_embeddings=draw(st.booleans()), n_experts=n_experts,
        experts_per_token=1 if n_experts < 2 else draw(st.sampled_from([1, 2])),
        moe_every=draw(st.integers(1, n_layers)), moe_renormalize=draw(st.booleans()),
    )


@settings(max_examples=300, deadline=None)  # chapter 1 says: hundreds of random configs
@given(configs())
def test_count_equals_numel_for_any_config(cfg):
    assert count_params(cfg).total == numel(cfg)


@settings(max_examples=100, deadline=None)
@given(configs())
def test_state_size_counts_without_listing_the_layers(cfg):
    tensors = len(weight_shapes(cfg)) - cfg.tie_embeddings            # a tied head is stored once
    assert state_size(cfg) == (tensors, count_params(cfg).total)


def test_state_size_of_a_billion_layers_is_instant():
    cfg = Config(vocab_size=10, dim=8, n_layers=10**9, n_heads=2, n_kv_heads=1, ffn_dim=8, n_experts=10**6,
                 moe_every=2)
    small = cfg.replace(n_layers=2, n_experts=3)                         # one dense block, one with experts
    assert state_size(small) == (len(weight_shapes(small)) - 1, count_params(small).total)
    assert state_size(cfg)[0] == 2 + 5 * 10**8 * 9 + 5 * 10**8 * (9 - 3 + 1 + 3 * 10**6)


@settings(max_examples=30, deadline=None)
@given(configs())
def test_weight_shapes_are_the_state_dict_for_any_config(cfg):
    state = TinyLM(cfg).state_dict()
    assert list(weight_shapes(cfg).items()) == [(k, tuple(v.shape)) for k, v in state.items()]   # names, order


def test_numpy_model_expects_the_same_shapes(small_cfg):
    params = params_from_torch(TinyLM(small_cfg))
    assert {k: v.shape for k, v in params.items()} == param_shapes(small_cfg)
    assert ("lm_head.weight" in params) == (not small_cfg.tie_embeddings)


def test_kv_cache_bytes_reference_figures():
    cfg = Config(n_layers=8, dim=768, n_heads=8)  # head_dim 96
    mha, gqa, mqa = (kv_cache_bytes(cfg.replace(n_kv_heads=h), seq_len=2048, bytes_per=2) for h in (8, 4, 1))
    assert mha == 2 * 8 * 8 * 2048 * 96 * 2 == 50_331_648
    assert (gqa, mqa) == (mha // 2, mha // 8)
    assert kv_cache_bytes(cfg, 10, batch=3, bytes_per=4) == 2 * 8 * 3 * 4 * 10 * 96 * 4


def test_head_dim_sets_the_attention_shapes_and_the_cache():
    cfg = Config(vocab_size=50, dim=48, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=64)
    p = count_params(cfg)
    assert p.attention == 2 * (2 * 48 * 4 * 16 + 2 * 48 * 2 * 16)   # q, o: 48 x 64; k, v: 48 x 32
    assert p.total == numel(cfg)
    assert kv_cache_bytes(cfg, 10) == 2 * 2 * 1 * 2 * 10 * 16 * 4 == KVCache(cfg, 1, 10).nbytes


def test_kv_cache_bytes_and_kv_cache_default_to_the_same_dtype():
    cfg = Config(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=16)
    assert KVCache(cfg, 3, 16).nbytes == kv_cache_bytes(cfg, 16, 3)       # fp32, like TinyLM's weights


@pytest.mark.parametrize("kwargs, name", [({"seq_len": 0}, "seq_len"), ({"seq_len": 4, "batch": -1}, "batch"),
                                          ({"seq_len": 4, "bytes_per": 0}, "bytes_per")])
def test_kv_cache_bytes_rejects_bad_sizes(kwargs, name):
    with pytest.raises(ValueError, match=name):
        kv_cache_bytes(Config(), **kwargs)
