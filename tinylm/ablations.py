"""The ablation log read: each variant's rate chosen at the first seed, mean and spread over the seeds, and its
difference to the base against the seeds' spread (tools/ablate.py writes the log).

    find(rows, variant, lr, seed, minutes)     the run of a log with these settings, or None
    best_lr(rows, variant, lrs, seed, minutes) the grid's rate with the lowest val bpb at that seed
    results(rows, variants, lrs, seeds, minutes) -> {variant: VariantResult}
    difference(result, base)                   mean - base mean, its standard error, and whether |delta| > 2 se
    grid_of(rows)                              the variants, rates, seeds and minutes a log holds

The rule for "larger than the seed spread": |delta| > 2 se, where se = sqrt(sd_v^2 / n_v + sd_b^2 / n_b) is the
standard error of a difference of two means, each sd the sample standard deviation over its seeds. With 3 seeds
each it is a rough screen, not a test at 95% (that needs about 2.8 se at 4 degrees of freedom).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


def key(variant: str, lr: float, seed: int, minutes: float) -> tuple:
    return variant, float(lr), int(seed), float(minutes)


def find(rows: list[dict], variant: str, lr: float, seed: int, minutes: float) -> dict | None:
    """The first row with these settings (rows of tools/ablate.py's log), or None."""
    want = key(variant, lr, seed, minutes)
    return next((r for r in rows if key(r["variant"], r["lr"], r["seed"], r["minutes"]) == want), None)


def best_lr(rows: list[dict], variant: str, lrs: list[float], seed: int, minutes: float) -> float | None:
    """The grid's learning rate with the lowest val bpb at seed (None: every one diverged or is missing)."""
    scored = [(r["val_bpb"], lr) for lr in lrs if (r := find(rows, variant, lr, seed, minutes))
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


def results(rows: list[dict], variants: list[str], lrs: list[float], seeds: list[int], minutes: float
            ) -> dict[str, VariantResult]:
    """Each variant's VariantResult: the rate is chosen at seeds[0], so that seed's score is slightly optimistic."""
    if not seeds:
        raise ValueError("results needs at least one seed")
    out = {}
    for v in variants:
        grid = {lr: (r["val_bpb"] if (r := find(rows, v, lr, seeds[0], minutes)) else None) for lr in lrs}
        lr = best_lr(rows, v, lrs, seeds[0], minutes)
        done = [r for s in seeds if lr is not None and (r := find(rows, v, lr, s, minutes))]
        scored = [r for r in done if r["val_bpb"] is not None]
        out[v] = VariantResult(v, grid, lr, tuple(r["val_bpb"] for r in scored),
                               scored[0].get("params") if scored else None)
    return out


def difference(result: VariantResult, base: VariantResult) -> Difference:
    """result's mean minus base's, with the standard error of that difference."""
    if not result.scores or not base.scores:
        raise ValueError(f"no scores for {result.variant if not result.scores else base.variant}: run it first")
    se = math.sqrt(result.sd**2 / len(result.scores) + base.sd**2 / len(base.scores))
    return Difference(result.mean - base.mean, se)


def grid_of(rows: list[dict]) -> tuple[list[str], list[float], list[int], float]:
    """The variants (in the log's order), learning rates, seeds (ascending) and the one budget of a log."""
    minutes = sorted({float(r["minutes"]) for r in rows})
    if len(minutes) != 1:
        raise ValueError(f"the rows hold runs of {minutes} minutes: select one budget first")
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    return variants, sorted({float(r["lr"]) for r in rows}), sorted({int(r["seed"]) for r in rows}), minutes[0]
