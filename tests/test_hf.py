# tinylm against Hugging Face transformers on the same weights (the architecture is Llama/Qwen3).
# Run: .venv/bin/python -m pytest tests/test_hf.py
import pytest
import torch

from tinylm import Config, TinyLM
from tinylm.hf import to_hf, to_hf_state_dict


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
