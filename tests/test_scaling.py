# tinylm/scaling.py on synthetic runs with a planted answer. Run: .venv/bin/python -m pytest tests/test_scaling.py
import math

import numpy as np
import pytest

from tinylm import Config
from tinylm.params import train_flops_per_token
from tinylm.scaling import fit, fit_budget, fit_budgets, fit_power_law, run_flops


def synthetic_rows(exponent=0.5, k=3.0, budgets=(1e12, 4e12, 16e12, 64e12), noise=0.0, seed=0, shift=None):
    """Runs of 5 sizes per budget whose bpb is a parabola in ln N around N_opt = k C^exponent, and whose
    FLOPs are C times a factor that averages to 1 in the log (the geometric mean is C). shift: {minutes: s}
    moves that budget's sizes by a factor e^s, away from its N_opt."""
    rng = np.random.default_rng(seed)
    rows = []
    for minutes, c in enumerate(budgets, 1):
        n_opt = k * c ** exponent
        for j, step in enumerate((-1.0, -0.5, 0.1, 0.6, 1.1)):
            n = n_opt * math.exp(step + (shift or {}).get(minutes, 0.0))
            rows.append({"minutes": float(minutes), "params": round(n), "val_bpb": 2.5 - 0.1 * minutes
                         + 0.2 * (math.log(n) - math.log(n_opt)) ** 2 + noise * rng.standard_normal(),
                         "flops": c * 2.0 ** (j - 2)})
    return rows


def test_a_planted_exponent_comes_back_exactly_without_noise_and_closely_with_it():
    result = fit(synthetic_rows())
    assert result.law.exponent == pytest.approx(0.5, abs=1e-3)
    assert result.law.coefficient == pytest.approx(3.0, rel=1e-2)
    assert [b.n_opt for b in result.budgets] == pytest.approx([3.0 * c ** 0.5 for c in (1e12, 4e12, 16e12, 64e12)],
                                                              rel=2e-3)   # (rounded N)
    assert all(b.inside for b in result.budgets) and len(result.left_out) == 20 and result.left_out_failed == 0
    assert result.budgets[0].flops == pytest.approx(1e12)                 # the geometric mean of the runs'
    noisy = fit(synthetic_rows(exponent=0.7, noise=0.002))
    assert noisy.law.exponent == pytest.approx(0.7, abs=0.05)
    assert min(noisy.left_out) < noisy.law.exponent < max(noisy.left_out)


def test_a_budget_s_parabola_and_its_vertex():
    n = [1e4, 2e4, 4e4, 8e4]
    b = fit_budget(n, [(math.log(v) - math.log(3e4)) ** 2 + 1 for v in n], budget=2.0)
    assert b.n_opt == pytest.approx(3e4) and b.bpb_opt == pytest.approx(1.0) and b.inside
    assert b.curve(np.array([3e4]))[0] == pytest.approx(1.0) and math.isnan(b.flops)
    outside = fit_budget(n, [(math.log(v) - math.log(2e5)) ** 2 for v in n])
    assert not outside.inside and outside.n_opt == pytest.approx(2e5)


def test_bad_input_is_refused_with_what_to_change():
    with pytest.raises(ValueError, match="at least 3 different sizes"):
        fit_budget([1e4, 1e4, 2e4], [2.0, 2.1, 1.9])
    with pytest.raises(ValueError, match="not convex"):
        fit_budget([1e4, 2e4, 4e4], [2.0, 2.1, 1.9])
    with pytest.raises(ValueError, match="one value per run"):
        fit_budget([1e4, 2e4], [2.0])
    with pytest.raises(ValueError, match="positive"):
        fit_budget([0, 2e4, 4e4], [2.0, 1.0, 2.0])
    rows = synthetic_rows()
    with pytest.raises(ValueError, match="budget 4: the best size is at the edge.*train a larger size"):
        fit(synthetic_rows(shift={4: -2.2}))          # budget 4's sizes all below its N_opt
    with pytest.raises(ValueError, match="at least 2 budgets"):
        fit([r for r in rows if r["minutes"] == 1.0])
    with pytest.raises(ValueError, match="lacks \\['minutes'\\]"):
        fit_budgets([{"params": 1, "val_bpb": 2.0}])


def test_diverged_runs_are_left_out_and_a_power_law_on_exact_points():
    rows = synthetic_rows() + [{"minutes": 1.0, "params": 5, "val_bpb": None, "flops": 1e12}]
    assert fit_budgets(rows)[0].params == tuple(r["params"] for r in synthetic_rows()[:5])
    law = fit_power_law([1e10, 1e12], [2 * 1e10 ** 0.25, 2 * 1e12 ** 0.25])
    assert (law.exponent, law.coefficient) == pytest.approx((0.25, 2.0))
    assert law(1e14) == pytest.approx(2 * 1e14 ** 0.25)


def test_a_run_s_flops_are_its_tokens_times_the_formula():
    cfg = Config(vocab_size=1024, dim=64, n_layers=4, n_heads=2, n_kv_heads=1, ffn_dim=192, max_seq_len=256)
    assert run_flops(cfg, 128, 1000) == 1000 * train_flops_per_token(cfg, 128)
    with pytest.raises(ValueError, match="tokens"):
        run_flops(cfg, 128, -1)
