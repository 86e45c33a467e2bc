"""IsoFLOP fits: per budget, a parabola of loss in log N and its vertex N_opt; then N_opt = k C^a in log-log.

    run_flops(cfg, seq_len, tokens)   a run's training FLOPs: (6 N + 12 L H D T) per token x the tokens seen
    fit_budget(params, bpb, ...)       one budget's parabola and its vertex, flagged inside the sampled sizes
    fit_budgets(rows)                  every budget of a run log's rows (tools/isoflop.py)
    fit_power_law(c, n)                n = k c^a by least squares on the logs
    fit(rows)                          all of it, with the exponent of each refit leaving one run out

Hoffmann et al. (2022, "approach 2"): for each compute budget C, train several sizes N, fit a parabola of the
final loss in log N, take its minimum as the compute-optimal N_opt(C), then fit N_opt ∝ C^a across budgets.
Here a budget is a number of wall-clock minutes; its C is the geometric mean of its runs' FLOPs (they differ:
small models run at a lower FLOP rate than large ones in the same minutes).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ._checks import check_int
from .config import Config
from .params import train_flops_per_token


def run_flops(cfg: Config, seq_len: int, tokens: int) -> int:
    """Training FLOPs of a run of cfg on tokens tokens in windows of seq_len (`train_flops_per_token`)."""
    check_int("tokens", tokens, low=0)
    return train_flops_per_token(cfg, seq_len) * tokens


@dataclass(frozen=True)
class BudgetFit:
    """One budget's runs and the parabola bpb = c2 x^2 + c1 x + c0 in x = ln N, with its vertex."""

    budget: float                        # the budget's label (minutes)
    flops: float                         # C: the geometric mean of the runs' training FLOPs (nan if unknown)
    params: tuple[int, ...]              # N of each run, ascending
    bpb: tuple[float, ...]               # validation bits per byte of each run
    coef: tuple[float, float, float]     # c2, c1, c0
    n_opt: float                         # the vertex: exp(-c1 / (2 c2))
    bpb_opt: float                       # the parabola's value there
    inside: bool                         # N_opt lies within the sampled sizes

    def curve(self, n: np.ndarray) -> np.ndarray:
        """The fitted parabola at sizes n."""
        return np.polyval(self.coef, np.log(np.asarray(n, dtype=float)))


def fit_budget(params: Sequence[float], bpb: Sequence[float], budget: float = math.nan,
               flops: Sequence[float] | None = None) -> BudgetFit:
    """The least-squares parabola of bpb in ln params (at least 3 different sizes) and its minimum."""
    if len(params) != len(bpb):
        raise ValueError(f"params and bpb must have one value per run, got {len(params)} and {len(bpb)}")
    n, y = np.asarray(params, dtype=float), np.asarray(bpb, dtype=float)
    if not (np.all(np.isfinite(n)) and np.all(n > 0) and np.all(np.isfinite(y))):
        raise ValueError("every parameter count must be positive and every bpb finite")
    if len(set(n.tolist())) < 3:
        raise ValueError(f"budget {budget:g}: a parabola needs runs of at least 3 different sizes, got "
                         f"{sorted(set(n.astype(int).tolist()))}; train more sizes at this budget")
    order = np.argsort(n, kind="stable")
    n, y = n[order], y[order]
    c2, c1, c0 = np.polyfit(np.log(n), y, 2)
    if c2 <= 0:
        raise ValueError(f"budget {budget:g}: bpb is not convex in log N on these sizes (no minimum: "
                         f"curvature {c2:.3g}); add sizes on the side where bpb keeps falling")
    x_opt = -c1 / (2 * c2)
    c = math.nan if flops is None else math.exp(float(np.mean(np.log(np.asarray(flops, dtype=float)))))
    return BudgetFit(budget=budget, flops=c, params=tuple(int(v) for v in n), bpb=tuple(float(v) for v in y),
                     coef=(float(c2), float(c1), float(c0)), n_opt=math.exp(x_opt),
                     bpb_opt=float(np.polyval([c2, c1, c0], x_opt)),
                     inside=bool(np.log(n[0]) <= x_opt <= np.log(n[-1])))


def fit_budgets(rows: list[dict], n_key: str = "params", budget_key: str = "minutes") -> list[BudgetFit]:
    """One `fit_budget` per budget of the rows (run-log dicts with n_key, budget_key, val_bpb, flops),
    in increasing budget; diverged runs (val_bpb None) are left out."""
    groups: dict[float, list[dict]] = defaultdict(list)
    for r in rows:
        missing = [k for k in (n_key, budget_key, "val_bpb") if k not in r]
        if missing:
            raise ValueError(f"a run row lacks {missing}: is this a tools/isoflop.py log? (row {r.get('name')})")
        if r["val_bpb"] is not None:
            groups[float(r[budget_key])].append(r)
    if not groups:
        raise ValueError("no scored run in the rows")
    return [fit_budget([r[n_key] for r in g], [r["val_bpb"] for r in g], budget,
                       [r["flops"] for r in g] if all("flops" in r for r in g) else None)
            for budget, g in sorted(groups.items())]


@dataclass(frozen=True)
class PowerLaw:
    """n = coefficient x c^exponent."""

    exponent: float
    coefficient: float

    def __call__(self, c: float | np.ndarray) -> float | np.ndarray:
        return self.coefficient * np.asarray(c, dtype=float) ** self.exponent


def fit_power_law(c: Sequence[float], n: Sequence[float]) -> PowerLaw:
    """Least squares of ln n = a ln c + b over at least 2 different c."""
    x, y = np.log(np.asarray(c, dtype=float)), np.log(np.asarray(n, dtype=float))
    if len(x) != len(y):
        raise ValueError(f"c and n must have one value per budget, got {len(x)} and {len(y)}")
    if len(set(x.tolist())) < 2 or not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
        raise ValueError("a power law needs at least 2 budgets of different, positive, known compute")
    a, b = np.polyfit(x, y, 1)
    return PowerLaw(float(a), math.exp(b))


@dataclass(frozen=True)
class ScalingFit:
    budgets: list[BudgetFit]
    law: PowerLaw                        # N_opt = k C^a over the budgets
    left_out: tuple[float, ...]          # the exponent refitted with each run left out, where a refit exists
    left_out_failed: int                 # runs whose removal leaves a budget without an inner minimum


def _check_inside(budgets: list[BudgetFit]) -> None:
    for b in budgets:
        if not b.inside:
            side = "smaller" if b.n_opt < b.params[0] else "larger"
            raise ValueError(f"budget {b.budget:g}: the best size is at the edge of the sampled sizes (the "
                             f"parabola's minimum {b.n_opt:,.0f} lies outside {b.params[0]:,} to "
                             f"{b.params[-1]:,}); train a {side} size at this budget, or leave the budget out")


def fit(rows: list[dict], n_key: str = "params", budget_key: str = "minutes") -> ScalingFit:
    """The budgets' parabolas, then N_opt = k C^a; every budget's minimum must lie inside its sizes.

    The spread: the exponent refitted with each scored run left out in turn (a refit that leaves a budget
    with fewer than 3 sizes or its minimum outside them is counted in left_out_failed)."""
    budgets = fit_budgets(rows, n_key, budget_key)
    _check_inside(budgets)
    law = fit_power_law([b.flops for b in budgets], [b.n_opt for b in budgets])
    scored = [r for r in rows if r.get("val_bpb") is not None]
    left_out, failed = [], 0
    for i in range(len(scored)):
        try:
            refit = fit_budgets(scored[:i] + scored[i + 1:], n_key, budget_key)
            _check_inside(refit)
            left_out.append(fit_power_law([b.flops for b in refit], [b.n_opt for b in refit]).exponent)
        except ValueError:
            failed += 1
    return ScalingFit(budgets, law, tuple(left_out), failed)
