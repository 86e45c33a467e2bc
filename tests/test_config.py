# Config validation and presets. Run: .venv/bin/python -m pytest tests/test_config.py
import pytest

from tinylm import PRESETS, Config


def test_defaults_are_the_running_example():
    c = Config()
    assert (c.vocab_size, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.ffn_dim, c.max_seq_len) == (
        6400, 768, 8, 8, 4, 2432, 1024)
    assert (c.rope_base, c.norm_eps, c.qk_norm, c.tie_embeddings) == (10000.0, 1e-5, False, True)
    assert c.head_dim == 96 and c.n_rep == 2
    assert PRESETS["running-example"] == c


def test_presets():
    assert set(PRESETS) == {"running-example", "small-variant", "mini-companion", "shakespeare-3min",
                            "shakespeare-companion"}
    mini = Config.from_preset("mini-companion")
    assert (mini.vocab_size, mini.dim, mini.n_layers, mini.n_heads, mini.n_kv_heads, mini.ffn_dim,
            mini.max_seq_len, mini.qk_norm, mini.head_dim) == (4096, 256, 4, 8, 2, 704, 256, True, 32)
    assert Config.from_preset("small-variant", n_layers=2).n_layers == 2
    with pytest.raises(ValueError, match="unknown preset"):
        Config.from_preset("large")


@pytest.mark.parametrize("field, value, rule", [
    ("vocab_size", 0, "positive"),
    ("dim", -8, "positive"),
    ("n_layers", 0, "positive"),
    ("n_heads", 0, "positive"),
    ("n_kv_heads", 0, "positive"),
    ("ffn_dim", 0, "positive"),
    ("max_seq_len", 0, "in [1, 131072]"),
    ("dim", 770, "divisible by n_heads"),
    ("n_kv_heads", 3, "divisible by n_kv_heads"),
    ("rope_base", 1.0, "> 1"),
    ("norm_eps", 0.0, "> 0"),
    ("vocab_size", 6400.0, "int"),
    ("qk_norm", 1, "True or False"),
    ("tie_embeddings", "yes", "True or False"),
    ("n_experts", -1, ">= 0"),
    ("experts_per_token", 3, "1 or 2"),
])
def test_every_rule_names_the_field(field, value, rule):
    with pytest.raises(ValueError) as err:
        Config(**{field: value})
    assert field in str(err.value) and rule in str(err.value)


def test_odd_head_dim_is_refused_for_rope():
    with pytest.raises(ValueError, match="head_dim .* must be even"):
        Config(dim=72, n_heads=8, n_kv_heads=4)  # head_dim 9


def test_experts_per_token_cannot_exceed_experts():
    with pytest.raises(ValueError, match="experts_per_token"):
        Config(n_experts=1, experts_per_token=2)


def test_replace_validates_and_rejects_unknown_fields():
    with pytest.raises(ValueError, match="n_kv_heads"):
        Config().replace(n_kv_heads=5)
    with pytest.raises(ValueError, match="unknown Config field"):
        Config().replace(width=5)
    assert Config.from_dict(Config().to_dict()) == Config()


def test_head_dim_defaults_to_dim_over_heads_and_can_be_set():
    assert Config().head_dim == 96 and Config(head_dim=None) == Config()
    qwen = Config(vocab_size=151_936, dim=1024, n_layers=28, n_heads=16, n_kv_heads=8, head_dim=128, ffn_dim=3072)
    assert qwen.head_dim == 128 != qwen.dim // qwen.n_heads
    assert Config(dim=770, n_heads=8, head_dim=96).head_dim == 96   # set explicitly, dim need not divide


@pytest.mark.parametrize("value, rule", [(0, r"int in \[1, 1024\]"), (-4, r"int in \[1, 1024\]"), (9, "must be even"),
                                         (64.0, "int"), (True, "int"), (2048, "MAX_HEAD_DIM")])
def test_head_dim_is_validated(value, rule):
    with pytest.raises(ValueError, match=rule) as err:
        Config(head_dim=value)
    assert "head_dim" in str(err.value)


def test_the_rope_tables_are_bounded_by_max_seq_len_times_head_dim():
    assert Config(n_heads=1, n_kv_heads=1, head_dim=128, max_seq_len=2**17).max_seq_len == 2**17   # Llama 3.1's
    with pytest.raises(ValueError, match=r"max_seq_len x head_dim = 131,072 x 256 exceeds .* 0.5 GiB; use "
                                         r"max_seq_len <= 65,536"):
        Config(n_heads=1, n_kv_heads=1, head_dim=256, max_seq_len=2**17)


def test_replace_rederives_a_derived_head_dim_and_keeps_a_set_one():
    assert Config().replace(dim=512).head_dim == 64            # 512 / 8 heads: follows the new width
    assert Config().replace(n_heads=16, n_kv_heads=4).head_dim == 48
    qwen = Config(dim=1024, n_heads=16, n_kv_heads=8, head_dim=128)
    assert qwen.replace(n_layers=2).head_dim == 128             # not dim // n_heads: kept
    assert qwen.replace(head_dim=64).head_dim == 64
    assert Config.from_dict(qwen.to_dict()) == qwen


def test_a_saved_config_without_head_dim_still_loads():
    old = {k: v for k, v in Config().to_dict().items() if k != "head_dim"}   # config.json from before the field
    assert Config.from_dict(old) == Config()
