"""`python -m tinylm.finetune`: LoRA fine-tuning of SmolLM2-135M-Instruct on a checkable task (SFT, DPO or GRPO).

    python -m tinylm.finetune --task addition --baseline             # the base model on the test split only
    python -m tinylm.finetune --task addition --out runs/lora-addition --threads 2
    python -m tinylm.finetune --method dpo --adapter runs/lora-addition/adapter.safetensors --out runs/dpo
    python -m tinylm.finetune --method grpo --task multiplication --out runs/grpo --minutes 5

The run: load SmolLM2 (fp32, or a frozen int8 base with --format int8), make the task's disjoint splits
(`tinylm.tasks`), wrap the target layers with LoRA (`tinylm.lora`), train with `tinylm.train.train` (its
schedule, clipping, validation loss; the loss only on the answer tokens), then save the adapter and measure:
exact-match accuracy on the test split with a 95% interval, adapted and base (`tinylm.evaluate`), and the
forgetting check. --out gets adapter.safetensors (A and B only, a few MB) and summary.json (every figure).

Checkpoints: `train`'s own are whole-model folders (540 MB of SmolLM2's weights each), so this command
passes it no checkpoint folder and saves the adapter alone instead: at every evaluation (train's on_eval),
after the last step, and on Ctrl-C as far as it got. An adapter holds no optimizer state: a run cannot be
resumed, only restarted. --minutes (a TrainConfig field) gives the run a wall-clock budget.

--method dpo (`tinylm.dpo`) and grpo (`tinylm.grpo`) train through the same loop (`tinylm.train.Objective`) and
report the same test accuracy, before (the start model) and after. They start from the base or from an SFT
adapter (--adapter), which is merged into the base weights first: that merged model is both the starting
policy and the reference (a fresh adapter on top, turned off), so the KL to the reference starts at 0. The
adapter they save applies to the base with --adapter merged in (summary.json names it). DPO makes its pairs
from the start model's own answers (--prefer correct or shorter); GRPO samples --group-size answers per
prompt at every step and reports the reward curve and how the time splits between sampling and updates.
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

from ._checks import IGNORE_INDEX, check_threads
from .chat import load_chat_model
from .dpo import PREFERENCES, DPOObjective, make_pairs
from .evaluate import TaskResult, evaluate_task, forgetting
from .grpo import GRPOObjective
from .logprobs import kl_to_reference
from .lora import (INITS, TARGET_GROUPS, LoRAConfig, adapter_disabled, adapter_state_dict, add_lora, check_lora_rank,
                   count_trainable, load_adapter, remove_lora, save_adapter)
from .quantize import quantize
from .tasks import TASKS, end_id, make_splits, prompt_ids, task_rows
from .train.cli import add_dataclass_flags, given
from .train.loop import ChatRows, Objective, StopTraining, TrainingDiverged, train
from .train.settings import TrainConfig

# LoRA trains a few million weights from a good start: a higher peak rate than pretraining, no decay
FINETUNE_DEFAULTS = {"steps": 600, "batch_size": 16, "seq_len": 96, "lr": 1e-3, "min_lr": 1e-4, "warmup": 30,
                     "weight_decay": 0.0, "eval_every": 100, "eval_batches": 4}
# DPO and GRPO move a good start a little: lower rates, fewer and costlier steps (GRPO: batch_size prompts a step)
METHOD_DEFAULTS = {"sft": {},
                   "dpo": {"steps": 200, "batch_size": 8, "lr": 2e-4, "min_lr": 2e-5, "warmup": 10, "eval_every": 25},
                   "grpo": {"steps": 100, "batch_size": 4, "lr": 1e-4, "min_lr": 1e-5, "warmup": 5, "eval_every": 10}}
METHODS = tuple(METHOD_DEFAULTS)
ANSWERS = ("task", "chosen")    # --method sft copies the task's answers, or the chosen answers of --prefer's pairs
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
    lo.add_argument("--rank", type=int, default=8, help="r, the rank of B A, at most min(in, out) of every targeted "
                    "layer (default 8)")
    lo.add_argument("--alpha", type=float, default=16.0, help="the update is scaled by alpha / rank (default 16)")
    lo.add_argument("--targets", default="all", help=f"layers to adapt: names (q_proj,v_proj) or a group: "
                    f"{', '.join(f'{k} = {chr(44).join(v)}' for k, v in TARGET_GROUPS.items() if k != 'all')}, "
                    "all = both (default all)")
    lo.add_argument("--init", default="kaiming", choices=INITS, help="A's initialisation (default kaiming)")

    tr = p.add_argument_group("training (tinylm.train's TrainConfig; --seed also seeds A and the sampling)")
    add_dataclass_flags(tr, TrainConfig, lambda n: f"(default {FINETUNE_DEFAULTS.get(n, getattr(TrainConfig, n))}"
                        + "".join(f"; {m} {d[n]}" for m, d in METHOD_DEFAULTS.items() if n in d) + ")")

    rl = p.add_argument_group("DPO and GRPO (--method dpo|grpo)")
    rl.add_argument("--method", default="sft", choices=METHODS, help="sft: copy the task's answers; dpo: prefer "
                    "chosen over rejected answers (tinylm.dpo); grpo: the checker's reward (tinylm.grpo) "
                    "(default sft)")
    rl.add_argument("--adapter", type=Path, help="dpo/grpo: start from this adapter (e.g. an SFT run's "
                    "adapter.safetensors), merged into the base, which then is the reference too")
    rl.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the answers that "
                    "make pairs (dpo) or groups (grpo) (default 1.0)")
    rl.add_argument("--beta", type=float, default=0.1, help="dpo: β, how far from the reference (default 0.1)")
    rl.add_argument("--nll-coef", type=float, default=0.0, help="dpo: weight of the chosen answers' NLL per "
                    "token added to the loss (Pang et al. 2024's RPO: 1; 0 is plain DPO) (default 0)")
    rl.add_argument("--prefer", default="correct", choices=tuple(PREFERENCES), help="dpo: which answer is chosen: "
                    "a right one over a wrong one, or the shortest over the longest (default correct)")
    rl.add_argument("--patience", type=int, help="dpo: early stopping: end the run once the held-out pairs' loss "
                    "has not improved for this many evaluations, and keep the adapter of the best one "
                    "(default: off, every step runs)")
    rl.add_argument("--answers", default="task", choices=ANSWERS, help="sft: what the loss copies: the task's "
                    "answers, or the chosen answers of the pairs --prefer makes from the base model's own samples "
                    "(SFT on chosen: DPO's pairs without the rejected answers) (default task)")
    rl.add_argument("--samples", type=int, default=4, help="dpo (and sft --answers chosen): answers sampled per "
                    "prompt (default 4)")
    rl.add_argument("--pair-prompts", type=int, default=256, help="dpo (and sft --answers chosen): training "
                    "problems sampled for pairs (default 256)")
    rl.add_argument("--group-size", type=int, default=8, help="grpo: G, answers sampled per prompt (default 8)")
    rl.add_argument("--kl-coef", type=float, default=0.0, help="grpo: β of the KL penalty to the reference "
                    "(DeepSeekMath: 0.04) (default 0)")
    rl.add_argument("--clip-eps", type=float, default=0.2, help="grpo: ε, the ratio's clip (default 0.2)")
    rl.add_argument("--updates-per-sample", type=int, default=1, help="grpo: steps on each sampled batch; 1 is "
                    "REINFORCE with the group baseline (default 1)")
    rl.add_argument("--kl-samples", type=int, default=64, help="dpo/grpo: test prompts whose sampled answers "
                    "measure the KL to the reference at the end (default 64)")

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
    r.add_argument("--resume", type=Path, help=argparse.SUPPRESS)   # refused with what to do instead (_check)
    return p


def _check(args: argparse.Namespace) -> LoRAConfig:
    """Every flag that is not a TrainConfig field; ValueError says which and why. (--rank against the model's
    layers: `check_lora_rank`, once the model is loaded.)"""
    if args.resume is not None:
        raise ValueError(f"--resume: a fine-tuning run cannot be resumed ({ADAPTER} holds A and B, no optimizer "
                         "state or step); start a new run with another --out, or start --method dpo or grpo from "
                         f"the run's adapter with --adapter {args.resume / ADAPTER}")
    for flag in ("n_train", "n_val", "n_test", "max_new_tokens", "eval_batch_size", "threads", "samples",
                 "pair_prompts", "group_size", "updates_per_sample", "kl_samples", "patience"):
        value = getattr(args, flag)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"--{flag.replace('_', '-')} must be a positive int, got {value}")
    if args.threads is not None:
        check_threads("--threads", args.threads)
    if args.task_seed < 0:
        raise ValueError(f"--task-seed must be an int >= 0, got {args.task_seed}")
    _check_out(args.out)
    if not args.baseline and (args.out / ADAPTER).exists():
        raise ValueError(f"--out {args.out} already holds {ADAPTER}; pass another --out or delete it")
    if args.adapter is not None and args.method == "sft" and not args.baseline:
        raise ValueError("--adapter is a start for --method dpo or grpo (or what --baseline measures); "
                         "--method sft trains a new adapter on the base")
    if args.patience is not None and (args.method != "dpo" or args.baseline):
        raise ValueError("--patience stops a --method dpo run on its held-out pairs' loss; drop it for "
                         f"{'--baseline' if args.baseline else '--method ' + args.method}")
    if args.answers == "chosen" and (args.method != "sft" or args.baseline):
        raise ValueError("--answers chosen is what --method sft copies; "
                         f"{'--baseline trains nothing' if args.baseline else '--method ' + args.method + ' makes its own'}"
                         "; drop it")
    if (args.method == "dpo" or args.answers == "chosen") and args.samples < 2:
        raise ValueError(f"--samples must be >= 2 (a pair compares two answers), got {args.samples}")
    if args.method == "grpo" and args.group_size < 2:
        raise ValueError(f"--group-size must be >= 2 (the group is the baseline), got {args.group_size}")
    for flag in ("temperature", "beta"):
        if not getattr(args, flag) > 0:
            raise ValueError(f"--{flag} must be > 0, got {getattr(args, flag)}")
    if not args.nll_coef >= 0:
        raise ValueError(f"--nll-coef must be >= 0 (0 is plain DPO), got {args.nll_coef}")
    if not 0 < args.clip_eps < 1 or not args.kl_coef >= 0:
        raise ValueError(f"--clip-eps must be in (0, 1) and --kl-coef >= 0, got {args.clip_eps} and {args.kl_coef}")
    return LoRAConfig(rank=args.rank, alpha=args.alpha, targets=args.targets, init=args.init)


def _check_out(out: Path) -> None:
    """--out must be a folder, or a path where one can be made: not a file, nor inside one, and writable."""
    what = f"a folder (made if missing) for {ADAPTER} and {SUMMARY}, or {BASELINE} with --baseline"
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; pass {what}")
    parent = next((p for p in out.parents if p.exists()), Path("."))    # the nearest folder that exists
    if not parent.is_dir():
        raise ValueError(f"--out {out} is inside {parent}, a file; pass {what}")
    if not os.access(out if out.exists() else parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out} is not writable; pass a folder you can write to")


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
    """The test figures, which problems were right (1) or wrong (0) and each reply's length in characters, in the
    problems' order: two scorings of the same problems (the start and the end) can then be paired
    (`tinylm.stats.mcnemar`, `paired_t`)."""
    return {"correct": result.correct, "n": result.n, "accuracy": result.accuracy, "interval95": result.interval,
            "right": [int(r) for r in result.right], "reply_chars": [len(r) for r in result.replies]}


def _add_adapter(model, lora: LoRAConfig, tc: TrainConfig) -> tuple[int, int]:
    add_lora(model, lora, seed=tc.seed)
    trainable, total = count_trainable(model)
    print(f"LoRA {lora}: {trainable:,} trainable of {total:,} parameters ({trainable / total:.2%})")
    print(f"training: {tc}", flush=True)
    return trainable, total


def _train(args: argparse.Namespace, model, data, val_rows, tc: TrainConfig, on_eval):
    """`train` with the command's progress bar and log; a History, or the exit status if it stopped."""
    log = lambda s: tqdm.write(s, file=sys.stdout)  # noqa: E731
    try:
        return train(model, data, val_rows, tc, progress=not args.no_progress, log=log, bf16=args.bf16,
                     on_eval=on_eval)
    except TrainingDiverged as e:
        print(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        path = save_adapter(model, args.out / ADAPTER)
        print(f"interrupted; the adapter as far as it got is in {path}")
        return 130


def _forgetting(model, tok, adapted: TaskResult, base: TaskResult | None, t_eval: float) -> dict:
    """The forgetting check (`tinylm.evaluate.forgetting`), printed with the examples; returns its figures."""
    window = min(512, model.cfg.max_seq_len // 2)              # SmolLM2: 2 windows of 512 tokens
    forgot = forgetting(model, tok, n_tokens=2 * window, window=window, max_new_tokens=min(48, window))
    print(f"forgetting: English perplexity {forgot['ppl_base']:.3f} (base) -> {forgot['ppl']:.3f} (adapted), "
          f"ratio {forgot['ppl_ratio']:.4f}; evaluated in {time.perf_counter() - t_eval:.1f} s")
    for row in _examples(adapted, base):
        print(f"  {row['question']!r}: {row.get('base_reply', '')!r} -> {row['reply']!r} (target {row['target']})")
    for chat in forgot["chat"]:
        print(f"  chat {chat['question']!r}\n    base:    {chat['base']!r}\n    adapted: {chat['adapted']!r}")
    return forgot


def _pairs(args: argparse.Namespace, tc: TrainConfig, model, tok, splits) -> tuple[list, list, dict]:
    """Preference pairs from the model's own answers (`make_pairs`, --prefer): from the first --pair-prompts
    training problems (seeded with --seed) and from the validation problems (--seed + 1), and their counts."""
    t0 = time.perf_counter()
    make = lambda problems, seed: make_pairs(model, tok, problems, args.samples, args.prefer,  # noqa: E731
                                             args.max_new_tokens, args.temperature, seed, args.eval_batch_size)
    prompts = splits["train"][: args.pair_prompts]
    pairs, val_pairs = make(prompts, tc.seed), make(splits["val"], tc.seed + 1)
    info = {"prefer": args.prefer, "train_prompts": len(prompts), "train_pairs": len(pairs),
            "val_prompts": len(splits["val"]), "val_pairs": len(val_pairs), "seconds": time.perf_counter() - t0}
    print(f"pairs ({args.prefer}): {len(pairs)} from {len(prompts)} training prompts, {len(val_pairs)} from "
          f"{len(splits['val'])} validation prompts ({args.samples} answers each), in {info['seconds']:.1f} s")
    if not pairs:
        raise ValueError(f"no preference pair: the {args.samples} answers to every prompt were all "
                         f"{'right or all wrong' if args.prefer == 'correct' else 'as long'}; pass more --samples, "
                         "a higher --temperature, more --pair-prompts or another --prefer")
    return pairs, val_pairs, info


def _chosen_rows(pairs: list, pad_id: int) -> ChatRows:
    """SFT rows of the pairs' chosen answers: prompt + chosen (with its stop token where the model wrote one),
    the loss on the answer only, as `task_rows` makes them from the task's answers."""
    return ChatRows([(p.prompt + p.chosen, [IGNORE_INDEX] * len(p.prompt) + p.chosen) for p in pairs], pad_id)


def _objective(args: argparse.Namespace, tc: TrainConfig, model, tok, splits) -> tuple[Objective, dict]:
    """The method's Objective (DPO: pairs made from the start model now), and what it measures on held-out data
    ({"measure": a function of nothing, or None; "pairs": counts})."""
    pad = end_id(tok)
    if args.method == "grpo":
        return GRPOObjective(tok, splits["train"], args.group_size, max_new_tokens=args.max_new_tokens,
                             temperature=args.temperature, kl_coef=args.kl_coef, clip_eps=args.clip_eps,
                             updates_per_sample=args.updates_per_sample, seed=tc.seed, pad_id=pad,
                             gen_batch_size=args.eval_batch_size), {"measure": None}
    pairs, val_pairs, info = _pairs(args, tc, model, tok, splits)
    held_out = DPOObjective(model, val_pairs, args.beta, pad, args.eval_batch_size, args.nll_coef) \
        if val_pairs else None
    return DPOObjective(model, pairs, args.beta, pad, args.eval_batch_size, args.nll_coef), \
        {"measure": held_out and (lambda: held_out.metrics(model, args.eval_batch_size)), "pairs": info}


def _run_rl(args: argparse.Namespace, tc: TrainConfig, lora: LoRAConfig, model, tok, name: str, splits,
            evaluate) -> int:
    """--method dpo or grpo: the start model measured, a fresh adapter trained by the method's Objective with
    `train`'s loop, then measured again (test accuracy, KL to the reference, the method's own figures)."""
    t0 = time.perf_counter()
    start = evaluate(model.eval())                   # the start model: the reference, the policy at step 0
    print(f"test accuracy, start: {start.summary()} in {time.perf_counter() - t0:.1f} s")
    trainable, total = _add_adapter(model, lora, tc)
    try:
        objective, held = _objective(args, tc, model, tok, splits)
    except ValueError as e:
        print(f"error: {e}")
        return 2
    evals: list[dict] = []
    seconds = {"eval": 0.0}
    if args.patience is not None and held["measure"] is None:
        print("error: --patience needs held-out pairs, and the validation problems gave none; pass more "
              "--samples or a higher --temperature, or drop --patience")
        return 2
    best: dict = {}                    # --patience: the best evaluation so far, and its adapter's tensors

    def on_eval(step: int) -> str | None:
        t = time.perf_counter()
        row: dict = {"step": step}
        if held["measure"] is not None:
            row |= {f"val_{k}": v for k, v in held["measure"]().items()}
        if args.patience is None:
            if step:
                save_adapter(model, args.out / ADAPTER, start=args.adapter)
        elif not best or row["val_loss"] < best["val_loss"]:       # a new best: keep it (step 0: the start)
            best.update(step=step, val_loss=row["val_loss"], since=0,
                        tensors={k: v.clone() for k, v in adapter_state_dict(model).items()})
            if step:
                save_adapter(model, args.out / ADAPTER, start=args.adapter)
        else:
            best["since"] += 1
        recent = [e for e in objective.log[-tc.eval_every:]] if step else []
        if recent:
            row |= {k: sum(e.get(k, 0.0) for e in recent) / len(recent) for k in ("loss", "reward", "margin")
                    if k in recent[0]}
        evals.append(row)
        seconds["eval"] += time.perf_counter() - t
        if best and best["since"] >= args.patience:
            raise StopTraining(f"the held-out loss has not gone below step {best['step']}'s "
                               f"{best['val_loss']:.4g} for {args.patience} evaluations")
        return " | ".join(f"{k} {v:.4g}" for k, v in row.items() if k != "val_n") if step else None

    t0 = time.perf_counter()
    history = _train(args, model, objective, None, tc, on_eval)
    if isinstance(history, int):
        return history
    wall = time.perf_counter() - t0
    if best:                                         # --patience: back to the best evaluation's adapter
        with torch.no_grad():
            for name, tensor in adapter_state_dict(model).items():
                tensor.copy_(best["tensors"][name])
        print(f"early stopping: the adapter of step {best['step']} (held-out loss {best['val_loss']:.4g}), "
              f"after {history.step[-1]} steps")
    path = save_adapter(model, args.out / ADAPTER, start=args.adapter)   # the start named: chat stacks it
    sampling = objective.sample_seconds if isinstance(objective, GRPOObjective) else 0.0
    split = {"train_seconds": wall, "sampling_seconds": sampling, "eval_seconds": seconds["eval"],
             "update_seconds": wall - sampling - seconds["eval"]}
    print(f"trained {history.step[-1]} steps in {wall:.1f} s: sampling {sampling:.1f} s ({sampling / wall:.0%}), "
          f"updates {split['update_seconds']:.1f} s ({split['update_seconds'] / wall:.0%}), held-out measures "
          f"and saving {seconds['eval']:.1f} s; adapter: {path}")

    t_eval = time.perf_counter()
    adapted = evaluate(model.eval())
    print(f"test accuracy, start:   {start.summary()}\ntest accuracy, adapted: {adapted.summary()}")
    kl = kl_to_reference(model, tok, splits["test"][: args.kl_samples], args.max_new_tokens, tc.seed,
                         args.eval_batch_size)
    print(f"KL to the reference on {kl['n']} sampled test answers: {kl['kl']:.4f} ± {kl['stderr']:.4f} nats "
          "per answer (0 at the start)")
    method: dict = {"evals": evals, "log": objective.log}
    if args.method == "dpo":
        method |= {"beta": args.beta, "nll_coef": args.nll_coef, "samples": args.samples, "pairs": held["pairs"]}
        if best:
            method["early_stopping"] = {"patience": args.patience, "metric": "val_loss", "best_step": best["step"],
                                        "best_val_loss": best["val_loss"], "steps_run": history.step[-1]}
    else:
        method |= {"group_size": args.group_size, "kl_coef": args.kl_coef, "clip_eps": args.clip_eps,
                   "updates_per_sample": args.updates_per_sample,
                   "reward_curve": [[i + 1, e["reward"]] for i, e in enumerate(objective.log) if e["sample_s"] > 0]}
    forgot = _forgetting(model, tok, adapted, start, t_eval)
    summary = {
        "command": COMMAND + sys.argv[1:], "method": args.method, "base": name, "start_adapter": str(args.adapter or ""),
        "format": args.format, "task": args.task, "lora": asdict(lora), "train": asdict(tc),
        "temperature": args.temperature, "max_new_tokens": args.max_new_tokens, "trainable_params": trainable,
        "total_params": total, "steps": history.step[-1], "time": split, "peak_memory_bytes": peak_memory_bytes(),
        "loss": history.loss, "test_start": _accuracy(start), "test": _accuracy(adapted), "kl": kl,
        args.method: method, "forgetting": forgot, "examples": _examples(adapted, start),
        "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
    }
    (args.out / SUMMARY).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Exit status 0: done; 2: a usage error (nothing trained or written); 1: diverged; 130: interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        tc = TrainConfig(**{**asdict(TrainConfig()), **FINETUNE_DEFAULTS, **METHOD_DEFAULTS[args.method],
                            **given(args, TrainConfig)})
        lora = _check(args)
        splits = make_splits(args.task, args.n_train, args.n_val, args.n_test, seed=args.task_seed)
        if args.threads:
            torch.set_num_threads(args.threads)
        t_load = time.perf_counter()
        model, tok, name = load_chat_model(args.model_dir)
        if tc.seq_len > model.cfg.max_seq_len:
            raise ValueError(f"--seq-len {tc.seq_len} exceeds the model's max_seq_len {model.cfg.max_seq_len}")
        train_rows, val_rows = task_rows(tok, splits["train"]), task_rows(tok, splits["val"])
        if args.adapter is not None:             # the start model: base + adapter, merged (the reference too)
            remove_lora(load_adapter(model, args.adapter), merge=True)
        if not args.baseline:
            check_lora_rank(model, lora, "--rank")   # before training (and before A and B are allocated)
        longest_prompt = max(len(prompt_ids(tok, p)) for s in splits.values() for p in s)
        if longest_prompt + args.max_new_tokens > model.cfg.max_seq_len:
            raise ValueError(f"prompts of up to {longest_prompt} tokens + --max-new-tokens {args.max_new_tokens} "
                             f"exceed the model's max_seq_len {model.cfg.max_seq_len}; pass a smaller --max-new-tokens")
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

    if args.method != "sft":
        return _run_rl(args, tc, lora, model, tok, name, splits, evaluate)
    pairs_info = None
    if args.answers == "chosen":        # the base model's own answers: the chosen one of each pair is copied
        try:
            pairs, val_pairs, pairs_info = _pairs(args, tc, model, tok, splits)
        except ValueError as e:
            print(f"error: {e}")
            return 2
        train_rows = _chosen_rows(pairs, end_id(tok))
        val_rows = _chosen_rows(val_pairs, end_id(tok)) if val_pairs else None
        longest = max(len(ids) for ids, _ in train_rows.encoded + (val_rows.encoded if val_rows else []))
    if longest > tc.seq_len + 1:
        parser.error(f"rows are up to {longest} tokens, more than --seq-len + 1 = {tc.seq_len + 1}: answers would "
                     f"be cut; pass --seq-len {longest - 1}")
    trainable, total = _add_adapter(model, lora, tc)
    t0 = time.perf_counter()
    history = _train(args, model, train_rows, val_rows, tc,
                     lambda step: save_adapter(model, args.out / ADAPTER) and None if step else None)
    if isinstance(history, int):
        return history
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
    forgot = _forgetting(model, tok, adapted, base, t_eval)
    summary = {
        "command": COMMAND + sys.argv[1:], "base": name, "format": args.format, "task": args.task,
        "lora": asdict(lora), "answers": args.answers, **({"pairs": pairs_info} if pairs_info else {}),
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
