# tinylm against Hugging Face transformers on the same weights (the architecture is Llama/Qwen3).
# Run: .venv/bin/python -m pytest tests/test_hf.py
import json

import pytest
import torch
from safetensors.torch import save_file

from tinylm import Config, TinyLM
from tinylm.hf import config_from_hf, load_hf_dir, save_hf_dir, to_hf, to_hf_state_dict


def test_logits_equal_transformers(small_cfg):
    model = TinyLM(small_cfg).eval()
    hf = to_hf(model)
    expected_cls = "Qwen3ForCausalLM" if small_cfg.qk_norm else "LlamaForCausalLM"
    assert type(hf).__name__ == expected_cls
    idx = torch.randint(0, small_cfg.vocab_size, (3, small_cfg.max_seq_len))
    with torch.no_grad():
        ours, _ = model(idx)
        theirs = hf(idx).logits
    assert (ours - theirs).abs().max().item() <= 1e-5


def test_state_dict_names_are_hugging_face_names():
    cfg = Config(vocab_size=50, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=16,
                 qk_norm=True, tie_embeddings=False)
    hf = to_hf(TinyLM(cfg))
    assert set(to_hf_state_dict(TinyLM(cfg))) == set(hf.state_dict())


def test_moe_has_no_hf_counterpart():
    with pytest.raises(ValueError, match="n_experts"):
        to_hf(TinyLM(Config(vocab_size=50, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64,
                            max_seq_len=16, n_experts=2)))


# ---------------------------------------------------------------------------------------------
# save_pretrained directories, both ways
# ---------------------------------------------------------------------------------------------
HF_CONFIGS = {
    "llama": dict(vocab_size=120, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rope_theta=100000.0, rms_norm_eps=1e-5,
                  tie_word_embeddings=True),
    # Qwen3-0.6B's shape in miniature: head_dim 32 is not hidden_size / heads = 16
    "qwen3": dict(vocab_size=120, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=64, rope_theta=1000000.0,
                  tie_word_embeddings=False),
}


@pytest.mark.parametrize("kind", sorted(HF_CONFIGS))
def test_load_hf_dir_gives_transformers_logits(tmp_path, kind):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    cls, config_cls = {"llama": (LlamaForCausalLM, LlamaConfig), "qwen3": (Qwen3ForCausalLM, Qwen3Config)}[kind]
    theirs = cls(config_cls(**HF_CONFIGS[kind])).eval()
    with torch.no_grad():                                  # norms away from 1, so a skipped one would show
        for name, p in theirs.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    theirs.save_pretrained(tmp_path)
    ours = load_hf_dir(tmp_path)
    assert ours.cfg.qk_norm == (kind == "qwen3") and ours.cfg.head_dim == (32 if kind == "qwen3" else 16)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    idx = torch.randint(0, 120, (2, 30))
    with torch.no_grad():
        assert (ours(idx)[0] - theirs(idx).logits).abs().max() <= 1e-5


def test_save_hf_dir_round_trip(tmp_path, small_cfg):
    from transformers import AutoModelForCausalLM

    model = TinyLM(small_cfg).eval()
    save_hf_dir(model, tmp_path)
    back = load_hf_dir(tmp_path)
    assert back.cfg == small_cfg
    for name, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], value), name
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    idx = torch.randint(0, small_cfg.vocab_size, (1, 16))
    with torch.no_grad():
        assert (theirs(idx).logits - model(idx)[0]).abs().max() <= 1e-5


def _write_config(path, **changes):
    d = {"model_type": "llama", "vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 1,
         "num_attention_heads": 2, "intermediate_size": 64, "rope_theta": 10000.0} | changes
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(d))
    return path


@pytest.mark.parametrize("changes, message", [
    (dict(model_type="gpt2"), "model_type is 'gpt2'"),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 32.0}), "RoPE scaling 'llama3'"),
    (dict(attention_bias=True), "attention_bias"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(num_attention_heads=3), "divisible by n_heads"),
    ({}, "no model.safetensors"),
])
def test_load_hf_dir_says_what_it_cannot_load(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        load_hf_dir(_write_config(tmp_path / "m", **changes))


def test_load_hf_dir_checks_the_weights_and_the_directory(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        load_hf_dir(tmp_path)
    path = _write_config(tmp_path / "m")
    weights = {"model." + k: v for k, v in TinyLM(config_from_hf(json.loads((path / "config.json").read_text())))
               .state_dict().items() if k != "lm_head.weight"}
    del weights["model.norm.weight"]
    save_file(weights, path / "model.safetensors")
    with pytest.raises(ValueError, match="missing .*norm.weight"):
        load_hf_dir(path)
