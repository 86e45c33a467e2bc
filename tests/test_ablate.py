# tools/ablate.py and the variants in tools/sweep.py, with the training faked. Run: .venv/bin/python -m pytest tests/test_ablate.py
import json
import sys
from pathlib import Path

import pytest

from tinylm import ablations, count_params

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ablate  # noqa: E402
import sweep  # noqa: E402
from helpers import fake_run_start  # noqa: E402


def test_a_sweep_names_fields_and_variants():
    assert sweep.parse_name("nope+lr=5e-3+seed=2+qk_norm=false") == {"positions": "none", "lr": 5e-3, "seed": 2,
                                                                      "qk_norm": False}
    assert sweep.parse_name(ablate.run_name("gelu", 3e-3, 1)) == {**sweep.VARIANTS["gelu"], "lr": 3e-3,
                                                                  "min_lr": 3e-4, "seed": 1}
    assert sweep.parse_name("steps=1e3") == {"steps": 1000}
    for bad, words in (("colour=red", "unknown field 'colour'"), ("qk_norm=yes", "true or false"),
                       ("lr=fast", "not a float"), ("huge", "unknown configuration")):
        with pytest.raises(ValueError, match=words):
            sweep.parse_name(bad)
    with pytest.raises(ValueError, match="norm must be one of"):
        sweep.configuration("norm=batchnorm", 1.0)


def test_every_variant_is_one_valid_configuration_and_gelu_keeps_the_parameters():
    base, _ = sweep.configuration("base", 1.0)
    for name in sweep.VARIANTS:
        cfg, tc = sweep.configuration(name, 1.0)
        assert tc.minutes == 1.0 and (name == "base") == (cfg == base)
    gelu, _ = sweep.configuration("gelu", 1.0)
    assert count_params(gelu).total == count_params(base).total
    gpt2, _ = sweep.configuration("gpt2", 1.0)
    assert abs(count_params(gpt2).feed_forward - count_params(base.replace(bias=True)).feed_forward) <= base.dim * 4


@pytest.fixture
def fake_runs(monkeypatch):
    """ablate.run without training: val bpb = 2 + |log2(lr / best)| / 10 + seed / 100; 'nope' at 6e-3 diverges."""
    calls = []

    def run(variant, lr, seed, minutes, texts, cache, peak, base="", steps=None):
        calls.append((variant, lr, seed))
        best = {"base": 3e-3, "nope": 6e-3, "kv1": 1.5e-3}[variant]
        head = {"variant": variant, "lr": lr, "seed": seed, "minutes": minutes,
                **({"steps_budget": steps} if steps else {})}
        if variant == "nope" and lr == 6e-3:
            return {**head, "val_bpb": None, "diverged": "x"}
        bpb = 2 + abs(lr / best - 1) / 10 + seed / 100 + (variant == "kv1") * 0.5
        return {**head, "params": 1000, "val_bpb": bpb}

    monkeypatch.setattr(ablate, "run", run)
    fake_run_start(monkeypatch, sweep)
    return calls


def test_the_grid_then_the_best_rate_at_every_seed_and_a_resumed_log_runs_nothing_twice(fake_runs, tmp_path,
                                                                                         capsys):
    log = tmp_path / "a.log"
    args = ["--variants", "base", "nope", "kv1", "--minutes", "0.5", "--log", str(log)]
    assert ablate.main(args) == 0
    grid = [(v, lr, 0) for v in ("base", "nope", "kv1") for lr in ablate.LRS]
    # nope's best scorer diverged: its best is what ran, 3e-3 (bpb 2.05) over 1.5e-3 (2.075)
    assert fake_runs == grid + [("base", 3e-3, 1), ("base", 3e-3, 2), ("nope", 3e-3, 1), ("nope", 3e-3, 2),
                                ("kv1", 1.5e-3, 1), ("kv1", 1.5e-3, 2)]
    rows = ablate.read_log(log)
    assert len(rows) == 15 and sum(r["val_bpb"] is None for r in rows) == 1
    text = log.read_text().split("\n# val bits per byte")[1]
    base_line = next(line for line in text.splitlines() if line.startswith("# base"))
    assert " 0.003 " in base_line and "2.010" in base_line and "0.010" in base_line   # mean of 2, 2.01, 2.02; sd
    kv1_line = next(line for line in text.splitlines() if line.startswith("# kv1"))
    assert "+0.500 *" in kv1_line                                   # against base's mean, beyond 2 se
    nope_line = next(line for line in text.splitlines() if line.startswith("# nope"))
    assert "+0.050 *" in nope_line                                  # 2.05, 2.06, 2.07 against 2, 2.01, 2.02
    fake_runs.clear()
    assert ablate.main(args + ["--seeds", "0", "1", "2", "3"]) == 0     # resumed: only seed 3 is new
    assert fake_runs == [("base", 3e-3, 3), ("nope", 3e-3, 3), ("kv1", 1.5e-3, 3)]
    fake_runs.clear()
    assert ablate.main(args + ["--dry-run"]) == 0 and fake_runs == []
    assert "0 of 9 grid runs to do, then at most 0 runs" in capsys.readouterr().out
    assert ablate.main(args + ["--dry-run", "--seeds", "0", "4"]) == 0
    assert "then at most 3 runs" in capsys.readouterr().out


def test_the_tool_refuses_what_it_cannot_run(fake_runs, tmp_path):
    for bad in (["--variants", "huge"], ["--lrs", "0"], ["--seeds", "1", "1"], ["--minutes", "0"]):
        with pytest.raises(SystemExit):
            ablate.main(bad + ["--log", str(tmp_path / "x.log")])
    (tmp_path / "bad.log").write_text("not json\n")
    with pytest.raises(SystemExit):
        ablate.main(["--log", str(tmp_path / "bad.log")])
    assert fake_runs == []
    assert json.loads(json.dumps(ablations.key("base", 3e-3, 0, 0.5))) == ["base", 3e-3, 0, 0.5]


def test_a_base_model_gets_its_own_variants_written_out_in_the_run_names():
    base = "d128x4+n_kv_heads=2+b8"
    cfg, tc = sweep.configuration(ablate.run_name("kvall", 6e-3, 2, base), 1.0)
    assert (cfg.dim, cfg.n_heads, cfg.n_kv_heads, tc.batch_size, tc.lr, tc.seed) == (128, 4, 4, 8, 6e-3, 2)
    gelu, _ = sweep.configuration(ablate.run_name("gelu", 3e-3, 0, base), 1.0)
    plain, _ = sweep.configuration(ablate.run_name("base", 3e-3, 0, base), 1.0)
    assert gelu.ffn_dim == 3 * plain.ffn_dim // 2 and count_params(gelu).total == count_params(plain).total
    assert ablate.variant_changes("kvall") == {"n_kv_heads": sweep.BASE_MODEL["n_heads"]}


def test_a_run_keeps_its_training_curve_every_fifth_step_and_the_last():
    from tinylm.train.settings import History
    h = History(step=list(range(1, 13)), loss=[float(i) for i in range(12)], time=[i / 10 for i in range(12)])
    assert sweep.curve(h) == {"step": [5, 10, 12], "seconds": [0.4, 0.9, 1.1], "loss": [4.0, 9.0, 11.0]}


def test_the_log_read_for_the_chapter_mean_spread_and_the_two_standard_error_rule():
    rows = [{"variant": v, "lr": lr, "seed": s, "minutes": 1.0, "params": 10, "val_bpb": bpb}
            for v, lr, s, bpb in [("base", 1e-3, 0, 2.1), ("base", 2e-3, 0, 2.0), ("base", 2e-3, 1, 2.2),
                                  ("base", 2e-3, 2, 2.1), ("nope", 1e-3, 0, None), ("nope", 2e-3, 0, 2.3),
                                  ("nope", 2e-3, 1, 2.35), ("nope", 2e-3, 2, 2.4), ("kv1", 1e-3, 0, 2.05)]]
    assert ablations.grid_of(rows) == (["base", "nope", "kv1"], [1e-3, 2e-3], [0, 1, 2], 1.0)
    found = ablations.results(rows, ["base", "nope", "kv1"], [1e-3, 2e-3], [0, 1, 2], 1.0)
    base, nope, kv1 = found.values()
    assert (base.lr, base.grid, base.mean, base.sd) == (2e-3, {1e-3: 2.1, 2e-3: 2.0}, pytest.approx(2.1),
                                                        pytest.approx(0.1))
    assert nope.grid == {1e-3: None, 2e-3: 2.3} and nope.scores == (2.3, 2.35, 2.4)
    d = ablations.difference(nope, base)    # 0.25 against se = sqrt(0.1^2 / 3 + 0.05^2 / 3) = 0.0645
    assert (d.delta, d.se, d.exceeds) == (pytest.approx(0.25), pytest.approx(0.0645, abs=1e-4), True)
    assert ablations.Difference(0.12, 0.0645).exceeds is False
    assert kv1.scores == (2.05,) and ablations.difference(kv1, base).exceeds is False   # one seed: no sd
    with pytest.raises(ValueError, match="select one budget"):
        ablations.grid_of(rows + [{**rows[0], "minutes": 2.0}])
    with pytest.raises(ValueError, match="no scores for gelu"):
        ablations.difference(ablations.results(rows, ["gelu"], [1e-3], [0], 1.0)["gelu"], base)


def test_a_steps_budget_runs_each_variant_at_the_rate_another_log_chose_and_a_paired_p_value(fake_runs, tmp_path,
                                                                                          capsys):
    grid_log = tmp_path / "grid.log"
    assert ablate.main(["--variants", "base", "nope", "kv1", "--minutes", "0.5", "--log", str(grid_log)]) == 0
    fake_runs.clear()
    log = tmp_path / "steps.log"
    args = ["--variants", "base", "kv1", "--steps", "300", "--lr-from", str(grid_log), "--seeds", "0", "1", "2",
            "--log", str(log)]
    assert ablate.main(args) == 0
    # one rate per variant, the grid log's choice: no grid
    assert fake_runs == [("base", 3e-3, 0), ("kv1", 1.5e-3, 0), ("base", 3e-3, 1), ("base", 3e-3, 2),
                         ("kv1", 1.5e-3, 1), ("kv1", 1.5e-3, 2)]
    rows = ablate.read_log(log)
    assert {r["steps_budget"] for r in rows} == {300} and {r["minutes"] for r in rows} == {None}
    assert ablations.grid_of(rows)[3] == "300 steps"
    text = log.read_text()
    assert "after 300 steps" in text
    kv1_line = next(line for line in text.splitlines() if line.startswith("# kv1"))
    assert kv1_line.split()[-1] == "0.000"          # kv1 - base = 0.5 at every seed: no spread, p = 0
    fake_runs.clear()
    assert ablate.main(args) == 0 and fake_runs == []   # resumed by budget: nothing again
    for bad in (["--steps", "0"], ["--steps", "10", "--minutes", "1"]):
        with pytest.raises(SystemExit):
            ablate.main(["--variants", "base", *bad, "--log", str(tmp_path / "y.log")])
    with pytest.raises(SystemExit):
        ablate.main(["--variants", "gelu", "--steps", "10", "--lr-from", str(grid_log), "--log",
                     str(tmp_path / "z.log")])
    assert "chose no rate for ['gelu']" in capsys.readouterr().err


def test_paired_differences_seed_by_seed_and_the_test_they_need():
    rows = [{"variant": v, "lr": 1e-3, "seed": s, "minutes": None, "steps_budget": 100, "params": 10,
             "val_bpb": bpb}
            for v, s, bpb in [("base", 0, 2.0), ("base", 1, 2.3), ("base", 2, 2.1),
                              ("nope", 0, 2.05), ("nope", 1, 2.36), ("nope", 2, 2.14), ("kv1", 0, 2.0)]]
    found = ablations.results(rows, ["base", "nope", "kv1"], [1e-3], [0, 1, 2], ablations.steps_budget(100))
    base, nope, kv1 = found.values()
    assert nope.seeds == (0, 1, 2)
    pair = ablations.paired(nope, base)
    assert pair.deltas == pytest.approx((0.05, 0.06, 0.04)) and pair.delta == pytest.approx(0.05)
    # unpaired, the base's spread (sd 0.15) hides +0.05; paired, the seeds' shared batches cancel
    assert not ablations.difference(nope, base).exceeds and pair.holds()
    t = 0.05 / (0.01 / 3 ** 0.5)                     # mean over sd / sqrt(n); df 2: p = 1 - t / sqrt(2 + t^2)
    assert pair.test.t == pytest.approx(t) and pair.test.p == pytest.approx(1 - t / (2 + t * t) ** 0.5)
    with pytest.raises(ValueError, match="share 1 seed"):
        ablations.paired(kv1, base)
