# Shared fixtures. Run the unit tests with: .venv/bin/python -m pytest tests
import pytest
import torch

from tinylm import Config

# Small configs that cover every attention variant the course teaches.
SMALL_CONFIGS = {
    "multi-head": Config(vocab_size=101, dim=64, n_layers=2, n_heads=4, n_kv_heads=4, ffn_dim=96, max_seq_len=32),
    "grouped": Config(vocab_size=101, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, max_seq_len=32),
    "multi-query": Config(vocab_size=101, dim=64, n_layers=2, n_heads=4, n_kv_heads=1, ffn_dim=96, max_seq_len=32),
    "qk-norm": Config(vocab_size=101, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, max_seq_len=32,
                      qk_norm=True),
    "untied": Config(vocab_size=101, dim=64, n_layers=2, n_heads=8, n_kv_heads=2, ffn_dim=80, max_seq_len=32,
                     tie_embeddings=False),
    "qk-norm-untied": Config(vocab_size=97, dim=48, n_layers=3, n_heads=6, n_kv_heads=3, ffn_dim=64,
                             max_seq_len=32, qk_norm=True, tie_embeddings=False, rope_base=500000.0),
}


@pytest.fixture(params=sorted(SMALL_CONFIGS))
def small_cfg(request) -> Config:
    return SMALL_CONFIGS[request.param]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
