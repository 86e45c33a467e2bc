"""IsoFLOP runs: model sizes trained for each of a few wall-clock budgets, for the compute-optimal size.

    python tools/isoflop.py --minutes 0.25 0.5 1 2 --log tinylm/data/runs/isoflop.log --threads 1
    python tools/isoflop.py --minutes 2 --log runs/isoflop_b.log --dry-run        # the plan only

Every --sizes shape (a tools/sweep.py CONFIGS name: width x depth, head_dim 32 where the width allows) is
trained for every --minutes budget, one after the other in this process, with the ablation's run settings
(tools/ablate.py --base d128x4+n_kv_heads=2+b8): batch 8 x 128 tokens, warmup 50 steps, then a cosine on the
clock from --lr to --lr / 10, weight decay 0.1, --seed. Each size has half as many KV heads as query heads (at
least one), so d128x4 is the ablation's base model. Every run is tools/sweep.py's `run_one` (the same
Shakespeare train works, tokenizer and validation bits per byte), and its log row adds the run's training FLOPs:
`tinylm.params.train_flops_per_token` (6 N + 12 L H D T) x the tokens it trained on, and its non-embedding
parameters. A run whose size, minutes, lr and seed are in the log already is not run again, so the same command
resumes; a run that diverges is logged with val_bpb null. Several processes may share the work on disjoint
budgets, each with its own --log: `tinylm.scaling.fit` reads them together. Run alone on the machine (or one
process per core): a timed run beside another job measures the job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sweep  # noqa: E402  (puts the repository on sys.path)

from tinylm.params import count_params  # noqa: E402
from tinylm.runlog import read_log  # noqa: E402
from tinylm.scaling import run_flops  # noqa: E402
from tinylm.train import TrainingDiverged  # noqa: E402

SIZES = ("d32x4", "d48x4", "d64x4", "d96x4", "d128x4")
MINUTES = (0.25, 0.5, 1.0, 2.0)
LR = 3e-3    # the ablation base's best rate at seed 0 (grid 3e-3, 6e-3, 1.2e-2; 1 minute, one thread)


def run_name(size: str, lr: float, seed: int) -> str:
    """The sweep configuration of one run: 'd64x4+b8+n_kv_heads=1+lr=0.003+min_lr=0.0003+seed=0'."""
    heads = sweep.CONFIGS[size]["n_heads"]
    return f"{size}+b8+n_kv_heads={max(1, heads // 2)}+lr={lr!r}+min_lr={lr / 10:.6g}+seed={seed}"


def key(size: str, minutes: float, lr: float, seed: int) -> tuple:
    return size, float(minutes), float(lr), int(seed)


def run(size: str, minutes: float, lr: float, seed: int, texts: dict, cache: Path, peak: float) -> dict:
    """One run as a log row, with its FLOPs; a diverged run has val_bpb None and the error."""
    name = run_name(size, lr, seed)
    cfg, tc = sweep.configuration(name, minutes)
    count = count_params(cfg)
    head = {"size": size, "minutes": minutes, "lr": lr, "seed": seed, "ffn_dim": cfg.ffn_dim,
            "non_embedding_params": count.total - count.embedding}
    try:
        row = sweep.run_one(name, minutes, texts, cache, peak)
    except TrainingDiverged as e:
        return {**head, "name": name, "params": count.total, "val_bpb": None, "diverged": str(e).splitlines()[0]}
    return {**head, **row, "flops": run_flops(cfg, tc.seq_len, row["tokens"]), "load": round(os.getloadavg()[0], 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", nargs="+", type=float, default=list(MINUTES),
                   help="the wall-clock budgets (default %(default)s)")
    p.add_argument("--sizes", nargs="+", default=list(SIZES), help="tools/sweep.py shapes (default %(default)s)")
    p.add_argument("--lr", type=float, default=LR, help="peak learning rate of every run (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="the seed of every run (default 0)")
    sweep.resumable_arguments(p, threads=1)
    args = p.parse_args(argv)
    unknown = [s for s in args.sizes if s not in sweep.CONFIGS or "dim" not in sweep.CONFIGS[s]]
    if unknown:
        p.error(f"unknown size(s) {unknown}; choose shapes of tools/sweep.py's CONFIGS, e.g. {list(SIZES)}")
    if any(m <= 0 for m in args.minutes) or args.lr <= 0 or args.threads < 1:
        p.error("every --minutes and --lr must be positive, and --threads at least 1")
    try:
        rows = read_log(args.log, missing_ok=True)
    except ValueError as e:
        p.error(str(e))
    done = {key(r["size"], r["minutes"], r["lr"], r["seed"]) for r in rows}
    todo = [(s, m) for m in args.minutes for s in args.sizes if key(s, m, args.lr, args.seed) not in done]
    if args.dry_run:
        print(f"{len(todo)} of {len(args.minutes) * len(args.sizes)} runs to do: "
              f"{sum(m for _, m in todo):g} minutes of training, plus scoring")
        for s, m in todo:
            print(f"   {m:g} min  {run_name(s, args.lr, args.seed)}")
        return 0
    texts, peak, log = sweep.start("tools/isoflop.py", argv, args.threads, args.log)
    with log:
        for size, minutes in todo:
            row = run(size, minutes, args.lr, args.seed, texts, args.cache, peak)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
