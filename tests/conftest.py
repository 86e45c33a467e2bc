# Shared fixtures. Run the fast tests with `make unit` (pytest -m "not e2e" tests), everything with `make test`.
import pytest
import torch

from tinylm import Config

# The test models are tiny: one thread is faster (several threads spin and wait on every small op, worst on a
# busy machine), and results do not depend on the core count.
torch.set_num_threads(1)

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
    # head_dim set apart from dim // n_heads: heads wider than their share (Qwen3-0.6B), and narrower
    "wide-heads-qk-norm": Config(vocab_size=101, dim=48, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                                 ffn_dim=64, max_seq_len=32, qk_norm=True),
    "narrow-heads": Config(vocab_size=101, dim=64, n_layers=2, n_heads=4, n_kv_heads=1, head_dim=6, ffn_dim=96,
                           max_seq_len=32, tie_embeddings=False),
}


@pytest.fixture(params=sorted(SMALL_CONFIGS))
def small_cfg(request) -> Config:
    return SMALL_CONFIGS[request.param]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------------------------------------
# The HTML book, built once per test session (tests/test_browser.py opens its pages)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def book_html(tmp_path_factory):
    """Build the book exactly as `make book` does (warnings are errors) into a temporary folder; return
    the folder of its HTML pages."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jupyter_book), "build", str(root), "--warningiserror", "--nitpick", "--keep-going",
           "--path-output", str(out)]
    run = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    assert run.returncode == 0, f"the book does not build cleanly:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return out / "_build" / "html"
