# tools/isoflop.py with the training faked. Run: .venv/bin/python -m pytest tests/test_isoflop.py
import sys
from pathlib import Path

import pytest

from tinylm import count_params
from tinylm.runlog import read_log

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import isoflop  # noqa: E402
import sweep  # noqa: E402
from helpers import fake_run_start  # noqa: E402


@pytest.fixture
def fake_runs(monkeypatch):
    """sweep.run_one without training: 100 tokens per second of budget, val bpb 2 + dim / 1000."""
    calls = []

    def run_one(name, minutes, texts, cache, peak):
        cfg, tc = sweep.configuration(name, minutes)
        calls.append((name, minutes))
        if cfg.dim == 48 and minutes == 1.0:
            raise isoflop.TrainingDiverged("loss is nan at step 3\nmore", 3, None)
        return {"name": name, "params": 1000 + cfg.dim, "tokens": int(6000 * minutes), "val_bpb": 2 + cfg.dim / 1000,
                "curve": {"step": [5], "seconds": [0.1], "loss": [6.0]}}

    monkeypatch.setattr(isoflop.sweep, "run_one", run_one)
    fake_run_start(monkeypatch, sweep)
    return calls


def test_every_size_at_every_budget_with_its_flops_and_a_resumed_log_runs_nothing_twice(fake_runs, tmp_path,
                                                                                         capsys):
    log = tmp_path / "iso.log"
    args = ["--minutes", "0.5", "1", "--sizes", "d32x4", "d48x4", "d128x4", "--log", str(log)]
    assert isoflop.main(args) == 0
    assert [(n.split("+")[0], m) for n, m in fake_runs] == [(s, m) for m in (0.5, 1.0)
                                                             for s in ("d32x4", "d48x4", "d128x4")]
    rows = read_log(log)
    assert len(rows) == 6 and [r["val_bpb"] is None for r in rows] == [False] * 4 + [True, False]
    base = next(r for r in rows if r["size"] == "d128x4" and r["minutes"] == 1.0)
    cfg, tc = sweep.configuration(base["name"], 1.0)
    # d128x4 with 2 KV heads, batch 8 and lr 3e-3 is the ablation's base model and run
    assert (cfg.n_heads, cfg.n_kv_heads, tc.batch_size, tc.lr, tc.min_lr) == (4, 2, 8, 3e-3, 3e-4)
    assert base["flops"] == isoflop.run_flops(cfg, 128, 6000) and base["ffn_dim"] == 384
    assert base["non_embedding_params"] == count_params(cfg).total - 1024 * 128     # less the tied embedding
    fake_runs.clear()
    assert isoflop.main(args + ["--minutes", "0.5", "1", "2"]) == 0       # resumed: only the new budget runs
    assert [m for _, m in fake_runs] == [2.0] * 3
    fake_runs.clear()
    assert isoflop.main(args + ["--dry-run", "--lr", "6e-3"]) == 0 and fake_runs == []
    assert "6 of 6 runs to do: 4.5 minutes" in capsys.readouterr().out


def test_the_tool_refuses_what_it_cannot_run(fake_runs, tmp_path):
    for bad in (["--sizes", "huge"], ["--sizes", "lr5e-3"], ["--minutes", "0"], ["--lr", "-1"]):
        with pytest.raises(SystemExit):
            isoflop.main(bad + ["--log", str(tmp_path / "x.log")])
    (tmp_path / "bad.log").write_text("not json\n")
    with pytest.raises(SystemExit):
        isoflop.main(["--log", str(tmp_path / "bad.log")])
    assert fake_runs == []
