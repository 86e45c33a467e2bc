"""Ablations: each variant of the block, tuned over a learning-rate grid, then its best rate at 3 seeds.

    python tools/ablate.py --minutes 3 --log tinylm/data/runs/ablate_3min.log           # every variant
    python tools/ablate.py --minutes 3 --log runs/ablate.log --variants base nope --dry-run  # the plan only

Stage 1: every variant (tools/sweep.py's VARIANTS: one swap each from the base model) at every --lrs, with
min_lr = lr / 10 and --seeds' first seed. Stage 2: the variant's best learning rate (lowest validation bits
per byte in stage 1) at the other --seeds. Every run is tools/sweep.py's `run_one`: the same Shakespeare
train works, tokenizer, batches and wall-clock --minutes, scored on the validation works in bits per byte.

The log gets one JSON line per run (variant, lr, seed, minutes, and sweep's fields); a run whose variant,
lr, seed and minutes are already in the log is not run again, so the same command resumes a stopped
ablation. A run that diverges is logged with val_bpb null and never chosen. At the end: the mean, sample
standard deviation and range over the seeds at the chosen rate, printed and appended to the log as '#'
lines. The chosen rate is the best of the first seed, so that seed's score is slightly optimistic. Run it
alone on the machine: a timed run beside another job measures the job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sweep  # noqa: E402  (puts the repository on sys.path)

from tinylm.ablations import best_lr, difference, find, grid_of, paired, results, steps_budget  # noqa: E402
from tinylm.runlog import read_log  # noqa: E402
from tinylm.train import TrainingDiverged  # noqa: E402

LRS = (1.5e-3, 3e-3, 6e-3)   # around the base run's 3e-3, a factor of 2 each way
SEEDS = (0, 1, 2)


def variant_changes(variant: str, base: str = "") -> dict:
    """A variant's changes to the base model (a sweep name, '' for sweep's BASE_MODEL): each variant is
    computed from the base's own width, MLP width and heads (the GELU width, 'kvall')."""
    return sweep.variants(sweep.base_model(base))[variant]


def run_name(variant: str, lr: float, seed: int, base: str = "") -> str:
    """The sweep configuration of one ablation run: 'nope+lr=0.003+min_lr=0.0003+seed=1', or with a base
    'd128x4+b8+positions=none+lr=0.003+min_lr=0.0003+seed=1' (the variant's fields written out)."""
    if not base:
        return f"{variant}+lr={lr!r}+min_lr={lr / 10:.6g}+seed={seed}"
    fields = "".join(f"+{f}={v}" for f, v in variant_changes(variant, base).items())
    return f"{base}{fields}+lr={lr!r}+min_lr={lr / 10:.6g}+seed={seed}"


def run(variant: str, lr: float, seed: int, minutes: float | None, texts: dict, cache: Path, peak: float,
        base: str = "", steps: int | None = None) -> dict:
    """One run as a log row; a diverged run has val_bpb None and the error. With steps (and minutes None) the
    run is that many optimizer steps, logged as "steps_budget"."""
    head = {"variant": variant, "lr": lr, "seed": seed, "minutes": minutes, "base": base,
            "changes": variant_changes(variant, base), **({"steps_budget": steps} if steps else {})}
    try:
        row = sweep.run_one(run_name(variant, lr, seed, base), minutes, texts, cache, peak, steps)
    except TrainingDiverged as e:
        return {**head, "val_bpb": None, "diverged": str(e).splitlines()[0]}
    return {**head, **row, "load": round(os.getloadavg()[0], 1)}


def chosen_rates(rows: list[dict], variants: list[str], base: str = "") -> dict[str, list[float]]:
    """Each variant's rate chosen in another ablation log (its best at that log's first seed), as a grid of one."""
    rows = [r for r in rows if r.get("base", "") == base]
    if not rows:
        raise ValueError(f"--lr-from has no runs of the base {base!r}: give a log of the same --base")
    names, lrs, seeds, budget = grid_of(rows)
    found = results(rows, names, lrs, seeds, budget)
    missing = [v for v in variants if v not in found or found[v].lr is None]
    if missing:
        raise ValueError(f"--lr-from chose no rate for {missing}: run them in that log first, or leave them out")
    return {v: [found[v].lr] for v in variants}


def budget_words(budget: float | str) -> str:
    return budget if isinstance(budget, str) else f"{budget:g} min"


def summary(rows: list[dict], variants: list[str], lrs: list[float], seeds: list[int], budget: float | str) -> str:
    """Mean, sample standard deviation and range of val bpb over the seeds at each variant's chosen rate, and
    its difference to base ('*': |delta| > 2 standard errors of the difference, tinylm.ablations' rule), with
    the paired t-test's p-value over the seeds both ran."""
    head = (f"{'variant':11s} {'params':>9s} {'lr':>7s} {'seeds':>5s} {'mean bpb':>8s} {'sd':>6s} {'min':>6s} "
            f"{'max':>6s} {'vs base':>7s} {'paired p':>8s}")
    lines = [f"val bits per byte after {budget_words(budget)}; lr grid {', '.join(f'{lr:g}' for lr in lrs)}, "
             f"chosen at seed {seeds[0]}; seeds {', '.join(map(str, seeds))}", head, "-" * len(head)]
    found = results(rows, variants, lrs, seeds, budget)
    base = found.get("base")
    for v, res in found.items():
        if not res.scores:
            lines.append(f"{v:11s} {'':>9s} {'':>7s} {0:>5} diverged or not run")
            continue
        delta = p_value = ""
        if base is not None and base.scores and v != "base":
            d = difference(res, base)
            delta = f"{d.delta:+7.3f}" + (" *" if d.exceeds else "")
            if len(set(res.seeds) & set(base.seeds)) >= 2:
                p_value = f"{paired(res, base).test.p:.3f}"
        lines.append(f"{v:11s} {res.params:>9,} {res.lr:>7g} {len(res.scores):>5} {res.mean:>8.3f} {res.sd:>6.3f} "
                     f"{min(res.scores):>6.3f} {max(res.scores):>6.3f} {delta:>7s} {p_value:>8s}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", default=list(sweep.VARIANTS),
                   help=f"names from tools/sweep.py's VARIANTS (default all, base first): {', '.join(sweep.VARIANTS)}")
    p.add_argument("--lrs", nargs="+", type=float, default=list(LRS), help="the learning-rate grid (default %(default)s)")
    p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS),
                   help="seeds; the grid runs at the first (default %(default)s)")
    p.add_argument("--base", default="", help="the base model as a sweep name (CONFIGS names and field=value "
                   "joined by +, e.g. d128x4+n_kv_heads=2+b8); default tools/sweep.py's BASE_MODEL")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, help="wall-clock budget of each run (default 3)")
    budget.add_argument("--steps", type=int, help="a budget of optimizer steps instead: every run the same "
                        "tokens, whatever the load")
    p.add_argument("--lr-from", type=Path, help="another ablation log: each variant runs only at the rate chosen "
                   "there (its best at that log's first seed), no grid")
    sweep.resumable_arguments(p, threads=2)
    args = p.parse_args(argv)
    unknown = [v for v in args.variants if v not in sweep.VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; choose from {list(sweep.VARIANTS)}")
    if args.steps is None and args.minutes is None:
        args.minutes = 3.0
    if ((args.minutes is not None and args.minutes <= 0) or (args.steps is not None and args.steps < 1)
            or any(lr <= 0 for lr in args.lrs) or len(set(args.seeds)) != len(args.seeds)):
        p.error("--minutes, --steps and every --lrs must be positive, and --seeds distinct")
    budget = args.minutes if args.steps is None else steps_budget(args.steps)
    try:
        if args.base:
            sweep.configuration(args.base, 1.0)
        # this base's runs only
        rows = [r for r in read_log(args.log, missing_ok=True) if r.get("base", "") == args.base]
        rates = {v: args.lrs for v in args.variants}
        if args.lr_from:
            rates = chosen_rates(read_log(args.lr_from), args.variants, args.base)
    except ValueError as e:
        p.error(str(e))
    first, rest = args.seeds[0], args.seeds[1:]
    grid = [(v, lr, first) for v in args.variants for lr in rates[v]]
    todo = [r for r in grid if not find(rows, *r, budget)]
    if args.dry_run:
        lrs = {v: best_lr(rows, v, rates[v], first, budget) for v in args.variants}
        later = sum(len(rest) if lr is None else sum(not find(rows, v, lr, s, budget) for s in rest)
                    for v, lr in lrs.items())
        print(f"{len(todo)} of {len(grid)} grid runs to do, then at most {later} runs of the other seeds at the "
              f"best rates: {len(todo) + later} runs of {budget_words(budget)}, plus scoring")
        for r in todo:
            print("  ", run_name(*r, args.base))
        return 0
    texts, peak, log = sweep.start("tools/ablate.py", argv, args.threads, args.log)
    with log:

        def do(variant: str, lr: float, seed: int) -> None:
            if find(rows, variant, lr, seed, budget):
                return
            row = run(variant, lr, seed, args.minutes, texts, args.cache, peak, args.base, args.steps)
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)

        for variant, lr, seed in grid:
            do(variant, lr, seed)
        for variant in args.variants:
            lr = best_lr(rows, variant, rates[variant], first, budget)
            for seed in rest if lr is not None else ():
                do(variant, lr, seed)
        lrs = sorted({lr for v in args.variants for lr in rates[v]})
        text = summary(rows, args.variants, lrs, args.seeds, budget)
        log.write("\n".join("# " + line for line in text.splitlines()) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
