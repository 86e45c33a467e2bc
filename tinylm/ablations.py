"""The ablation log read: each variant's rate chosen at the first seed, mean and spread over the seeds, and its
difference to the base against the seeds' spread (tools/ablate.py writes the log).

    find(rows, variant, lr, seed, budget)      the run of a log with these settings, or None
    best_lr(rows, variant, lrs, seed, budget)  the grid's rate with the lowest val bpb at that seed
    results(rows, variants, lrs, seeds, budget) -> {variant: VariantResult}
    difference(result, base)                   mean - base mean, its standard error, and whether |delta| > 2 se
    paired(result, base)                       the seed-by-seed differences and their paired t-test
    grid_of(rows)                              the variants, rates, seeds and budget a log holds

A budget is wall-clock minutes (a number: the row's "minutes") or a number of optimizer steps (the text
"2000 steps": the row's "steps_budget", its "minutes" None). A steps budget gives every variant the same
tokens whatever the machine's load; minutes give it the same time.

The rule for "larger than the seed spread": |delta| > 2 se, where se = sqrt(sd_v^2 / n_v + sd_b^2 / n_b) is the
standard error of a difference of two means, each sd the sample standard deviation over its seeds. With 3 seeds
each it is a rough screen, not a test at 95% (that needs about 2.8 se at 4 degrees of freedom).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from . import stats


def steps_budget(steps: int) -> str:
    """The budget of a run of `steps` optimizer steps, as find and results take it: '2000 steps'."""
    return f"{int(steps)} steps"


def budget_of(row: dict) -> float | str:
    """A log row's budget: its minutes, or '<n> steps' for a run of a fixed number of steps."""
    return steps_budget(row["steps_budget"]) if row.get("steps_budget") else float(row["minutes"])


def _budget(budget: float | str) -> float | str:
    return budget if isinstance(budget, str) else float(budget)


def key(variant: str, lr: float, seed: int, budget: float | str) -> tuple:
    return variant, float(lr), int(seed), _budget(budget)


def find(rows: list[dict], variant: str, lr: float, seed: int, budget: float | str) -> dict | None:
    """The first row with these settings (rows of tools/ablate.py's log), or None."""
    want = key(variant, lr, seed, budget)
    return next((r for r in rows if key(r["variant"], r["lr"], r["seed"], budget_of(r)) == want), None)


def best_lr(rows: list[dict], variant: str, lrs: list[float], seed: int, budget: float | str) -> float | None:
    """The grid's learning rate with the lowest val bpb at seed (None: every one diverged or is missing)."""
    scored = [(r["val_bpb"], lr) for lr in lrs if (r := find(rows, variant, lr, seed, budget))
              and r["val_bpb"] is not None]
    return min(scored)[1] if scored else None


@dataclass(frozen=True)
class VariantResult:
    """One variant: its grid at the first seed, its chosen rate, and its scores at that rate over the seeds."""

    variant: str
    grid: dict[float, float | None]      # lr -> val bpb at the first seed (None: diverged or not run)
    lr: float | None                     # the chosen rate (None: nothing scored)
    scores: tuple[float, ...]            # val bpb at lr, one per seed that ran and did not diverge
    params: int | None
    seeds: tuple[int, ...] = ()          # the seed of each score, in the same order

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores) if self.scores else math.nan

    @property
    def sd(self) -> float:
        """Sample standard deviation over the seeds (nan with fewer than 2)."""
        return statistics.stdev(self.scores) if len(self.scores) > 1 else math.nan


@dataclass(frozen=True)
class Difference:
    delta: float                         # the variant's mean minus the base's
    se: float                            # its standard error, sqrt(sd_v^2 / n_v + sd_b^2 / n_b)

    @property
    def exceeds(self) -> bool:
        """Larger than the seeds' spread: |delta| > 2 se (False where se is unknown)."""
        return not math.isnan(self.se) and abs(self.delta) > 2 * self.se


def results(rows: list[dict], variants: list[str], lrs: list[float], seeds: list[int], budget: float | str
            ) -> dict[str, VariantResult]:
    """Each variant's VariantResult: the rate is chosen at seeds[0], so that seed's score is slightly optimistic."""
    if not seeds:
        raise ValueError("results needs at least one seed")
    out = {}
    for v in variants:
        grid = {lr: (r["val_bpb"] if (r := find(rows, v, lr, seeds[0], budget)) else None) for lr in lrs}
        lr = best_lr(rows, v, lrs, seeds[0], budget)
        done = [r for s in seeds if lr is not None and (r := find(rows, v, lr, s, budget))]
        scored = [r for r in done if r["val_bpb"] is not None]
        out[v] = VariantResult(v, grid, lr, tuple(r["val_bpb"] for r in scored),
                               scored[0].get("params") if scored else None, tuple(int(r["seed"]) for r in scored))
    return out


def difference(result: VariantResult, base: VariantResult) -> Difference:
    """result's mean minus base's, with the standard error of that difference."""
    if not result.scores or not base.scores:
        raise ValueError(f"no scores for {result.variant if not result.scores else base.variant}: run it first")
    se = math.sqrt(result.sd**2 / len(result.scores) + base.sd**2 / len(base.scores))
    return Difference(result.mean - base.mean, se)


def grid_of(rows: list[dict]) -> tuple[list[str], list[float], list[int], float | str]:
    """The variants (in the log's order), learning rates, seeds (ascending) and the one budget of a log."""
    budgets = sorted({budget_of(r) for r in rows}, key=str)
    if len(budgets) != 1:
        raise ValueError(f"the rows hold runs of several budgets {budgets}: select one budget first")
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    return variants, sorted({float(r["lr"]) for r in rows}), sorted({int(r["seed"]) for r in rows}), budgets[0]


@dataclass(frozen=True)
class Paired:
    """A variant against the base seed by seed: the same seed draws the same batches for both."""

    seeds: tuple[int, ...]               # the seeds both have
    deltas: tuple[float, ...]            # variant minus base at each of them
    test: "stats.TTest"                  # the paired t-test of the deltas' mean against 0

    @property
    def delta(self) -> float:
        return self.test.mean

    def holds(self, alpha: float = 0.05) -> bool:
        """A verdict: the two-sided p-value of the paired t-test is below alpha."""
        return self.test.p < alpha


def paired(result: VariantResult, base: VariantResult) -> Paired:
    """result against base on the seeds both ran: their differences and the paired t-test (stats.paired_t)."""
    mine, theirs = dict(zip(result.seeds, result.scores)), dict(zip(base.seeds, base.scores))
    common = tuple(s for s in result.seeds if s in theirs)
    if len(common) < 2:
        raise ValueError(f"{result.variant} and {base.variant} share {len(common)} seed(s) {list(common)}; "
                         "a paired test needs at least 2: run the same seeds for both")
    test = stats.paired_t([mine[s] for s in common], [theirs[s] for s in common])
    return Paired(common, tuple(mine[s] - theirs[s] for s in common), test)
