"""`python -m tinylm.finetune`: LoRA fine-tuning of SmolLM2-135M-Instruct on a checkable task, then its evaluation.

    python -m tinylm.finetune --task addition --baseline             # the base model on the test split only
    python -m tinylm.finetune --task addition --out runs/lora-addition --threads 2

The run: load SmolLM2 (fp32, or a frozen int8 base with --format int8), make the task's disjoint splits
(`tinylm.tasks`), wrap the target layers with LoRA (`tinylm.lora`), train with `tinylm.train.train` (its
schedule, clipping, validation loss; the loss only on the answer tokens), then save the adapter and measure:
exact-match accuracy on the test split with a 95% interval, adapted and base (`tinylm.evaluate`), and the
forgetting check. --out gets adapter.safetensors (A and B only, a few MB) and summary.json (every figure).

Checkpoints: `train`'s own are whole-model folders (540 MB of SmolLM2's weights each), so this command
passes it no checkpoint folder and saves the adapter alone instead: at every evaluation (train's on_eval),
after the last step, and on Ctrl-C as far as it got. An adapter holds no optimizer state: a run cannot be
resumed, only restarted. --minutes (a TrainConfig field) gives the run a wall-clock budget.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .chat import load_chat_model
from .evaluate import TaskResult, evaluate_task, forgetting
from .lora import INITS, TARGET_GROUPS, LoRAConfig, adapter_disabled, add_lora, count_trainable, save_adapter
from .quantize import quantize
from .tasks import TASKS, make_splits, task_rows
from .train.cli import add_dataclass_flags, given
from .train.loop import TrainingDiverged, train
from .train.settings import TrainConfig

# LoRA trains a few million weights from a good start: a higher peak rate than pretraining, no decay
FINETUNE_DEFAULTS = {"steps": 600, "batch_size": 16, "seq_len": 96, "lr": 1e-3, "min_lr": 1e-4, "warmup": 30,
                     "weight_decay": 0.0, "eval_every": 100, "eval_batches": 4}
ADAPTER, SUMMARY, BASELINE = "adapter.safetensors", "summary.json", "baseline.json"
N_EXAMPLES = 8   # test problems shown (and saved) with their replies

COMMAND = ["python", "-m", "tinylm.finetune"]   # how the run was started, as a learner would type it


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tinylm.finetune", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:5]))
    t = p.add_argument_group("task (tinylm.tasks)")
    t.add_argument("--task", default="addition", choices=TASKS, help="the task (default addition)")
    t.add_argument("--n-train", type=int, default=20000, help="training problems (default 20000)")
    t.add_argument("--n-val", type=int, default=200, help="validation problems, for the loss (default 200)")
    t.add_argument("--n-test", type=int, default=200, help="test problems, for the accuracy (default 200)")
    t.add_argument("--task-seed", type=int, default=0, help="seed of the problems; the test split depends only "
                   "on it and --n-test (default 0)")
    t.add_argument("--max-new-tokens", type=int, default=32, help="reply length limit when evaluating (default 32)")
    t.add_argument("--eval-batch-size", type=int, default=50, help="prompts per generation batch (default 50)")

    lo = p.add_argument_group("LoRA (tinylm.lora)")
    lo.add_argument("--rank", type=int, default=8, help="r, the rank of B A (default 8)")
    lo.add_argument("--alpha", type=float, default=16.0, help="the update is scaled by alpha / rank (default 16)")
    lo.add_argument("--targets", default="all", help=f"layers to adapt: names (q_proj,v_proj) or a group: "
                    f"{', '.join(f'{k} = {chr(44).join(v)}' for k, v in TARGET_GROUPS.items() if k != 'all')}, "
                    "all = both (default all)")
    lo.add_argument("--init", default="kaiming", choices=INITS, help="A's initialisation (default kaiming)")

    tr = p.add_argument_group("training (tinylm.train's TrainConfig; --seed also seeds A)")
    add_dataclass_flags(tr, TrainConfig, lambda n: f"(default {FINETUNE_DEFAULTS.get(n, getattr(TrainConfig, n))})")

    r = p.add_argument_group("run")
    r.add_argument("--out", type=Path, default=Path("runs/lora"), help="folder for adapter.safetensors and "
                   "summary.json (default runs/lora)")
    r.add_argument("--format", default="fp32", choices=("fp32", "int8"), help="the frozen base's weights: fp32, "
                   "or int8 per output channel (QLoRA-style; A and B stay fp32) (default fp32)")
    r.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward pass")
    r.add_argument("--threads", type=int, help="CPU threads for PyTorch (default: PyTorch's choice)")
    r.add_argument("--baseline", action="store_true", help="only measure the base model on the test split")
    r.add_argument("--no-compare-base", dest="compare_base", action="store_false",
                   help="skip the base model's test accuracy after training")
    r.add_argument("--model-dir", type=Path, help="a tinylm checkpoint folder (with tokenizer.json) to adapt "
                   "instead of SmolLM2, e.g. a small model for a quick try")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _check(args: argparse.Namespace) -> LoRAConfig:
    """Every flag that is not a TrainConfig field; ValueError says which and why."""
    for flag in ("n_train", "n_val", "n_test", "max_new_tokens", "eval_batch_size", "threads"):
        value = getattr(args, flag)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"--{flag.replace('_', '-')} must be a positive int, got {value}")
    if args.task_seed < 0:
        raise ValueError(f"--task-seed must be an int >= 0, got {args.task_seed}")
    if not args.baseline and (args.out / ADAPTER).exists():
        raise ValueError(f"--out {args.out} already holds {ADAPTER}; pass another --out or delete it")
    return LoRAConfig(rank=args.rank, alpha=args.alpha, targets=args.targets, init=args.init)


def peak_memory_bytes() -> int | None:
    """The process's peak resident memory (Linux and macOS; None elsewhere)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024          # macOS counts bytes, Linux KiB


def _examples(result: TaskResult, base: TaskResult | None) -> list[dict]:
    rows = []
    for i, problem in enumerate(result.problems[:N_EXAMPLES]):
        row = {"question": problem.question, "target": problem.target, "reply": result.replies[i],
               "right": result.right[i]}
        if base is not None:
            row |= {"base_reply": base.replies[i], "base_right": base.right[i]}
        rows.append(row)
    return rows


def _accuracy(result: TaskResult) -> dict:
    return {"correct": result.correct, "n": result.n, "accuracy": result.accuracy, "interval95": result.interval}


def main(argv: list[str] | None = None) -> int:
    """Exit status 0: done; 2: a usage error (nothing trained or written); 1: diverged; 130: interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        tc = TrainConfig(**{**asdict(TrainConfig()), **FINETUNE_DEFAULTS, **given(args, TrainConfig)})
        lora = _check(args)
        splits = make_splits(args.task, args.n_train, args.n_val, args.n_test, seed=args.task_seed)
        if args.threads:
            torch.set_num_threads(args.threads)
        t_load = time.perf_counter()
        model, tok, name = load_chat_model(args.model_dir)
        if tc.seq_len > model.cfg.max_seq_len:
            raise ValueError(f"--seq-len {tc.seq_len} exceeds the model's max_seq_len {model.cfg.max_seq_len}")
        train_rows, val_rows = task_rows(tok, splits["train"]), task_rows(tok, splits["val"])
    except (ValueError, ImportError) as e:      # ImportError: SmolLM2's weights are not installed
        parser.error(str(e))
    if args.format == "int8":          # the fused int8 kernel has no backward: the dequantize path trains
        quantize(model, "int8", kernel=args.baseline)
    t_load = time.perf_counter() - t_load
    longest = max(len(ids) for ids, _ in train_rows.encoded + val_rows.encoded)
    print(f"base: {name} ({args.format}), loaded in {t_load:.1f} s; task {args.task}: {len(splits['train']):,} "
          f"train / {len(splits['val'])} val / {len(splits['test'])} test problems, rows up to {longest} tokens; "
          f"{torch.get_num_threads()} threads", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    evaluate = lambda m: evaluate_task(m, tok, splits["test"], args.max_new_tokens, args.eval_batch_size)  # noqa: E731

    if args.baseline:
        t0 = time.perf_counter()
        base = evaluate(model)
        print(f"base model, test accuracy: {base.summary()} in {time.perf_counter() - t0:.1f} s")
        for row in _examples(base, None):
            print(f"  {row['question']!r} -> {row['reply']!r} ({'right' if row['right'] else 'wrong'})")
        summary = {"command": COMMAND + sys.argv[1:], "base": name, "format": args.format, "task": args.task,
                   "max_new_tokens": args.max_new_tokens, "test": _accuracy(base), "examples": _examples(base, None)}
        (args.out / BASELINE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
        return 0

    if longest > tc.seq_len + 1:
        parser.error(f"rows are up to {longest} tokens, more than --seq-len + 1 = {tc.seq_len + 1}: answers would "
                     f"be cut; pass --seq-len {longest - 1}")
    add_lora(model, lora, seed=tc.seed)
    trainable, total = count_trainable(model)
    print(f"LoRA {lora}: {trainable:,} trainable of {total:,} parameters ({trainable / total:.2%})")
    print(f"training: {tc}", flush=True)
    log = lambda s: tqdm.write(s, file=sys.stdout)  # noqa: E731
    t0 = time.perf_counter()
    try:
        history = train(model, train_rows, val_rows, tc, progress=not args.no_progress, log=log, bf16=args.bf16,
                        on_eval=lambda step: save_adapter(model, args.out / ADAPTER) and None if step else None)
    except TrainingDiverged as e:
        print(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        path = save_adapter(model, args.out / ADAPTER)
        print(f"interrupted; the adapter as far as it got is in {path}")
        return 130
    wall = time.perf_counter() - t0
    path = save_adapter(model, args.out / ADAPTER)
    tokens = sum(history.tokens_per_s) / len(history.tokens_per_s) if history.tokens_per_s else float("nan")
    peak = peak_memory_bytes()
    memory = f"; peak memory {peak / 2**20:,.0f} MiB" if peak else ""
    print(f"trained {history.step[-1]} steps in {wall:.1f} s: {tokens:,.0f} tokens/s (padded rows, between "
          f"evaluations), final train loss {history.loss[-1]:.4f}, val loss {history.val_loss[-1]:.4f}{memory}")
    print(f"adapter: {path} ({path.stat().st_size / 2**20:.1f} MiB)")

    t_eval = time.perf_counter()
    adapted = evaluate(model.eval())
    print(f"test accuracy, adapted: {adapted.summary()}")
    base = None
    if args.compare_base:
        with adapter_disabled(model):
            base = evaluate(model)
        print(f"test accuracy, base:    {base.summary()}")
    window = min(512, model.cfg.max_seq_len // 2)              # SmolLM2: 2 windows of 512 tokens
    forgot = forgetting(model, tok, n_tokens=2 * window, window=window, max_new_tokens=min(48, window))
    print(f"forgetting: English perplexity {forgot['ppl_base']:.3f} (base) -> {forgot['ppl']:.3f} (adapted), "
          f"ratio {forgot['ppl_ratio']:.4f}; evaluated in {time.perf_counter() - t_eval:.1f} s")
    for row in _examples(adapted, base):
        print(f"  {row['question']!r}: {row.get('base_reply', '')!r} -> {row['reply']!r} (target {row['target']})")
    for chat in forgot["chat"]:
        print(f"  chat {chat['question']!r}\n    base:    {chat['base']!r}\n    adapted: {chat['adapted']!r}")
    summary = {
        "command": COMMAND + sys.argv[1:], "base": name, "format": args.format, "task": args.task,
        "lora": asdict(lora),
        "train": asdict(tc), "trainable_params": trainable, "total_params": total, "steps": history.step[-1],
        "train_seconds": wall, "tokens_per_s": tokens, "peak_memory_bytes": peak, "adapter_bytes": path.stat().st_size,
        "final_train_loss": history.loss[-1], "val_loss": dict(zip(history.val_step, history.val_loss)),
        "test": _accuracy(adapted), "test_base": _accuracy(base) if base else None,
        "forgetting": forgot, "examples": _examples(adapted, base), "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }
    (args.out / SUMMARY).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
