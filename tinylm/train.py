"""Training on a CPU: next-token cross-entropy, AdamW, warmup then cosine decay, gradient clipping, checkpoints.

    python -m tinylm.train --steps 600 --out runs/mini                  # pretrain the mini companion
    python -m tinylm.train --chat --init runs/mini --out runs/chat      # fine-tune it on chat turns
    python -m tinylm.train --resume runs/mini --out runs/mini           # continue exactly where it stopped
    torchrun --nproc_per_node=2 -m tinylm.train --out runs/mini         # the same run on 2 processes (or GPUs)

One step:  x, y = get_batch(...)            random windows of the token stream, y = x shifted by one
           loss = cross_entropy(model(x), y)  (positions labelled -100 are skipped: the chat loss mask)
           loss.backward(); clip the gradient norm; AdamW step with lr = lr_at(step)

A notebook calls the same pieces: `train(model, train_ids, val_ids, TrainConfig(steps=50))` returns the
loss history. A checkpoint is a folder: model.safetensors (weights), config.json (model and training
settings, step), train_state.pt (optimizer moments, sampler RNG, history), tokenizer.json.

Under torchrun (see `tinylm.distributed`) `train` wraps the model in DistributedDataParallel, gives each
process its rows of the same global batch, and only rank 0 logs and writes checkpoints; `evaluate` splits
its batches between the processes and adds up the results.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from safetensors.torch import load_model, save_model
from tqdm.auto import tqdm

from . import distributed
from .config import PRESETS, Config
from .model import TinyLM

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_TEXT = DATA_DIR / "dialogues.txt"
DEFAULT_CHAT = DATA_DIR / "chat.jsonl"
CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "tinylm-checkpoint", 1


@dataclass
class TrainConfig:
    """Settings of one training run (saved in every checkpoint)."""

    steps: int = 1000          # optimizer steps of the whole run; the cosine reaches min_lr at the last one
    batch_size: int = 16       # sequences per step
    seq_len: int = 128         # tokens per sequence (at most the model's max_seq_len)
    lr: float = 3e-4           # peak learning rate, reached at the end of warmup
    min_lr: float = 3e-5       # learning rate at the last step
    warmup: int = 100          # steps of linear warmup from lr / warmup up to lr
    weight_decay: float = 0.1  # AdamW decay on weight matrices (not on norm gains)
    grad_clip: float = 1.0     # clip the global gradient norm to this (0: no clipping)
    eval_every: int = 100      # evaluate (and checkpoint) every this many steps, and after the last
    eval_batches: int = 10     # validation batches per evaluation
    seed: int = 0              # seeds the model init and the batch sampler

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_batches"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        for name in ("warmup", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        _check_lr(self.lr, self.min_lr)
        for name in ("weight_decay", "grad_clip"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")


@dataclass
class History:
    """What happened during training, one entry per step (and per evaluation for the val_ lists)."""

    step: list[int] = field(default_factory=list)         # steps done after this entry (1, 2, ...)
    loss: list[float] = field(default_factory=list)       # training loss of that step's batch
    lr: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)  # global gradient norm before clipping
    val_step: list[int] = field(default_factory=list)     # steps done when evaluated (0 = before training)
    val_loss: list[float] = field(default_factory=list)
    val_ppl: list[float] = field(default_factory=list)
    tokens_per_s: list[float] = field(default_factory=list)  # training throughput between evaluations


# ---------------------------------------------------------------------------------------------
# The pieces
# ---------------------------------------------------------------------------------------------
def _check_lr(peak: float, min_lr: float) -> None:
    if isinstance(peak, bool) or not isinstance(peak, (int, float)) or not peak > 0:
        raise ValueError(f"lr (the peak learning rate) must be a number > 0, got {peak!r}")
    if isinstance(min_lr, bool) or not isinstance(min_lr, (int, float)) or not 0 <= min_lr <= peak:
        raise ValueError(f"min_lr must be a number in [0, lr={peak}], got {min_lr!r}")


def lr_at(step: int, peak: float, min_lr: float, warmup: int, total: int) -> float:
    """Learning rate of step (0-based): linear warmup, then cosine decay (Loshchilov & Hutter, 2017).

        step < warmup    peak * (step + 1) / warmup             peak / warmup at step 0, peak at step warmup - 1
        step >= warmup   min_lr + (peak - min_lr) * (1 + cos(pi * t)) / 2,   t = (step - warmup) / (total - 1 - warmup)
                         t runs from 0 (peak, at step warmup) to 1 (min_lr, at the last step total - 1);
                         steps past the end stay at min_lr
    """
    _check_lr(peak, min_lr)
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - 1 - warmup))
    return min_lr + (peak - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def get_batch(tokens: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator | None = None,
              labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """batch_size random windows of a 1-D token stream: x (B, T) and the next tokens y (B, T).

    y[b, t] = tokens[s + t + 1] for a window starting at s, or labels[s + t + 1] when labels (the same
    length as tokens, -100 where not supervised) are given. Draws the starts from generator.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1:
        raise ValueError("tokens must be a 1-D tensor of token ids (the whole stream)")
    if len(tokens) < seq_len + 1:
        raise ValueError(f"tokens has {len(tokens)} ids, fewer than seq_len + 1 = {seq_len + 1}; use a shorter seq_len")
    if labels is not None and labels.shape != tokens.shape:
        raise ValueError(f"labels must have the shape of tokens {tuple(tokens.shape)}, got {tuple(labels.shape)}")
    targets = tokens if labels is None else labels
    starts = torch.randint(len(tokens) - seq_len, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(seq_len)                                                     # (T,)
    pos = starts[:, None] + offsets[None, :]                                            # (B, T)
    return tokens[pos], targets[pos + 1]


@torch.no_grad()
def evaluate(model: TinyLM, tokens: torch.Tensor, batch_size: int, seq_len: int, max_batches: int | None = None,
             labels: torch.Tensor | None = None, with_accuracy: bool = False) -> tuple[float, ...]:
    """Mean cross-entropy and perplexity exp(loss) on tokens -> (loss, perplexity).

    Deterministic: the stream is cut into consecutive windows of seq_len (from the start), at most
    max_batches * batch_size of them, so every evaluation scores the same positions. With labels, only
    positions whose label is not -100 count. with_accuracy=True also returns the fraction of positions
    where the most likely token is the right one: (loss, perplexity, accuracy). Under torchrun every rank
    must call it: each scores every world_size-th batch and the sums are added over the ranks.
    """
    if len(tokens) < seq_len + 1:
        raise ValueError(f"tokens has {len(tokens)} ids, fewer than seq_len + 1 = {seq_len + 1}; "
                         "use more validation data or a shorter seq_len")
    targets = tokens if labels is None else labels
    n = (len(tokens) - 1) // seq_len
    if max_batches is not None:
        n = min(n, max_batches * batch_size)
    x_all = tokens[: n * seq_len].view(n, seq_len)             # (N, T)
    y_all = targets[1 : n * seq_len + 1].view(n, seq_len)     # (N, T)
    device = next(model.parameters()).device
    rank, world = distributed.rank_and_world()
    was_training = model.training
    model.eval()
    loss_sum, count, correct = 0.0, 0, 0
    try:
        for i in range(rank * batch_size, n, world * batch_size):   # one process: every batch
            x, y = x_all[i : i + batch_size].to(device), y_all[i : i + batch_size].to(device)
            logits, _ = model(x)                                   # (B, T, V)
            loss_sum += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), ignore_index=-100,
                                        reduction="sum").item()
            mask = y != -100
            count += int(mask.sum())
            correct += int(((logits.argmax(-1) == y) & mask).sum())
    finally:
        model.train(was_training)
    if world > 1:
        loss_sum, count, correct = distributed.all_reduce_sum([loss_sum, count, correct], device)
        count, correct = round(count), round(correct)
    if count == 0:
        raise ValueError("no position to score: every label in the evaluated windows is -100; "
                         "evaluate more batches (max_batches) or longer windows (seq_len)")
    loss = loss_sum / count
    ppl = math.exp(min(loss, 700.0))
    return (loss, ppl, correct / count) if with_accuracy else (loss, ppl)


def pick_device(name: str = "auto") -> torch.device:
    """'auto' picks cuda, then mps, then cpu; or name one ('cpu', 'cuda', 'cuda:1', 'mps')."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use 'auto', 'cpu', 'cuda' or 'mps'") from None


def build_model(cfg: Config, seed: int = 0, device: torch.device | str = "cpu") -> TinyLM:
    """A freshly initialised TinyLM; the same seed gives the same weights."""
    torch.manual_seed(seed)
    return TinyLM(cfg).to(device)


def make_optimizer(model: TinyLM, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95),
                   eps: float = 1e-8) -> torch.optim.AdamW:
    """AdamW (Loshchilov & Hutter, 2019) with weight decay on matrices (embedding, projections) only.

    Norm gains (1-D) are not decayed: pulling them towards 0 would shrink every activation.
    """
    params = [p for p in model.parameters() if p.requires_grad]   # the tied embedding/head appears once
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def split_train_val(tokens: torch.Tensor, val_fraction: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """The first (1 - val_fraction) of a stream for training, the last val_fraction for validation."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    cut = int(len(tokens) * (1 - val_fraction))
    return tokens[:cut], tokens[cut:]


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------
@dataclass
class Checkpoint:
    """Everything `load_checkpoint` reads back; pass it to `train(..., resume=ckpt)` to continue."""

    model: TinyLM
    train_config: TrainConfig
    step: int                          # optimizer steps already taken
    optimizer_state: dict
    sampler_state: torch.Tensor        # state of the torch.Generator that draws the batches
    torch_rng_state: torch.Tensor      # PyTorch's global CPU RNG (unused by TinyLM today; dropout would draw from it)
    history: History
    extra: dict                        # free-form notes (data path, chat mode, ...)


def train(model: TinyLM, train_tokens: torch.Tensor, val_tokens: torch.Tensor | None = None,
          config: TrainConfig | None = None, *, train_labels: torch.Tensor | None = None,
          val_labels: torch.Tensor | None = None, resume: Checkpoint | None = None,
          out: str | Path | None = None, extra: dict | None = None, until: int | None = None,
          progress: bool = True, log: Callable[[str], None] | None = None, bf16: bool = False) -> History:
    """Train model in place for config.steps steps and return the History.

    train_tokens / val_tokens: 1-D token streams. train_labels / val_labels: optional label streams of
    the same length (-100 = not supervised; the chat loss mask). resume: a Checkpoint from
    `load_checkpoint` (model weights already loaded into model) to continue exactly where it stopped.
    out: a folder to write a checkpoint to at every evaluation and at the end. until: stop after this
    many steps (the schedule still spans config.steps; checkpoints there too), e.g. to continue later.
    log: called with one line per evaluation (the CLI passes a printer; the library prints nothing).
    progress: show a tqdm bar with the loss and tokens per second. bf16: run the forward pass under bfloat16
    autocast (cuda or cpu; the weights, gradients and optimizer stay fp32).

    Under torchrun (a process group is initialised, world size W > 1) every rank calls train with the same
    arguments: the model (pass the plain TinyLM) is wrapped in DistributedDataParallel, every rank draws the
    same global batch of config.batch_size sequences and trains on its batch_size / W rows, and only rank 0
    shows progress, logs and writes checkpoints. The losses in History are those of the global batch.
    """
    cfg = config or TrainConfig()
    if cfg.seq_len > model.cfg.max_seq_len:
        raise ValueError(f"seq_len ({cfg.seq_len}) exceeds the model's max_seq_len ({model.cfg.max_seq_len})")
    device = next(model.parameters()).device
    if bf16 and device.type not in ("cpu", "cuda"):
        raise ValueError(f"bf16 autocast runs on cpu or cuda, not {device.type}; drop bf16 (--bf16) or change device")
    rank, world = distributed.rank_and_world()
    distributed.check_batch_size(cfg.batch_size, world)
    net = distributed.wrap(model) if world > 1 else model   # DDP averages the gradients over the ranks
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay)
    sampler = torch.Generator().manual_seed(cfg.seed)   # CPU generator: batches are cut on the CPU
    start, history = 0, History()
    if resume is not None:
        optimizer.load_state_dict(resume.optimizer_state)
        sampler.set_state(resume.sampler_state)
        torch.set_rng_state(resume.torch_rng_state)
        start, history = resume.step, resume.history
    stop = cfg.steps if until is None else until
    if isinstance(stop, bool) or not isinstance(stop, int) or not start <= stop <= cfg.steps:
        raise ValueError(f"until must be an int in [{start}, steps={cfg.steps}], got {until!r}")
    tokens_per_step = cfg.batch_size * cfg.seq_len

    def run_eval(step: int) -> None:
        if val_tokens is not None:
            loss, ppl = evaluate(model, val_tokens, cfg.batch_size, cfg.seq_len, cfg.eval_batches, val_labels)
            history.val_step.append(step)
            history.val_loss.append(loss)
            history.val_ppl.append(ppl)
            if log and rank == 0:
                train_loss = f"train loss {history.loss[-1]:.3f} | " if history.loss else ""
                log(f"step {step:>6} | {train_loss}val loss {loss:.3f} | val ppl {ppl:.1f}")

    if start == 0 and not history.val_step:
        run_eval(0)                                     # the starting point: about ln(vocab_size)
    model.train()
    bar = tqdm(range(start, stop), initial=start, total=cfg.steps, disable=not progress or rank != 0,
               desc="training", dynamic_ncols=True)
    t0, steps_timed = time.perf_counter(), 0
    for step in bar:
        lr = lr_at(step, cfg.lr, cfg.min_lr, cfg.warmup, cfg.steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_tokens, cfg.batch_size, cfg.seq_len, sampler, train_labels)  # (B, T) each
        if world > 1:                                      # every rank drew the same batch: keep this rank's rows
            x, y = distributed.shard(x, rank, world), distributed.shard(y, rank, world)  # (B / W, T) each
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext():
            _, loss = net(x, y)
        if world > 1 and train_labels is not None:         # the mask leaves ranks unequal counts: reweight
            loss = distributed.rebalance_loss(loss, y, world)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()                                    # under DDP the gradients arrive averaged over ranks
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
        optimizer.step()

        loss_value = loss.item()
        if world > 1:                                      # the global batch's loss: average over ranks
            loss_value = distributed.all_reduce_sum([loss_value], device)[0] / world
        history.step.append(step + 1)
        history.loss.append(loss_value)
        history.lr.append(lr)
        history.grad_norm.append(norm.item())
        steps_timed += 1
        tok_s = tokens_per_step * steps_timed / (time.perf_counter() - t0)
        bar.set_postfix(loss=f"{history.loss[-1]:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s:,.0f}")
        if (step + 1) % cfg.eval_every == 0 or step + 1 in (cfg.steps, stop):
            history.tokens_per_s.append(tok_s)
            run_eval(step + 1)
            if out is not None and rank == 0:              # the plain model: no DDP "module." prefix
                save_checkpoint(out, model, optimizer, step + 1, cfg, sampler, history, extra)
            t0, steps_timed = time.perf_counter(), 0    # don't count evaluation and saving as training time
    bar.close()
    return history


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------
def save_checkpoint(path: str | Path, model: TinyLM, optimizer: torch.optim.Optimizer, step: int,
                    config: TrainConfig, sampler: torch.Generator, history: History, extra: dict | None = None) -> None:
    """Write a checkpoint folder: model.safetensors, config.json, train_state.pt (all written, then swapped in).

    Pass the plain model, not a DistributedDataParallel wrapper: its names carry no "module." prefix, so any
    number of processes can load the checkpoint.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    meta = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "step": step,
            "model": model.cfg.to_dict(), "train": asdict(config), "extra": extra or {}}
    state = {"optimizer": optimizer.state_dict(), "sampler": sampler.get_state(), "torch_rng": torch.get_rng_state(),
             "history": asdict(history)}
    writers: dict[str, Callable[[Path], None]] = {
        "model.safetensors": lambda p: save_model(model, str(p)),
        "train_state.pt": lambda p: torch.save(state, p),
        "config.json": lambda p: p.write_text(json.dumps(meta, indent=2), encoding="utf-8")}
    for name, write in writers.items():
        write(path / (name + ".tmp"))
    for name in writers:      # all three written: swap them in together, so a run killed while writing
        os.replace(path / (name + ".tmp"), path / name)   # keeps the previous checkpoint whole


def read_checkpoint_config(path: str | Path) -> dict:
    """The parsed config.json of a checkpoint folder (checked)."""
    f = Path(path) / "config.json"
    if not f.is_file():
        raise ValueError(f"{path} is not a checkpoint folder: {f.name} is missing")
    try:
        meta = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{f} is not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{f}: field 'format' must be {CHECKPOINT_FORMAT!r}; is this a tinylm checkpoint?")
    if meta.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{f}: unsupported version {meta.get('version')!r}; this tinylm reads {CHECKPOINT_VERSION}")
    for key in ("step", "model", "train"):
        if key not in meta:
            raise ValueError(f"{f}: missing field {key!r}")
    return meta


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """Read a checkpoint folder written by `save_checkpoint` (weights, settings, optimizer and RNG state)."""
    path = Path(path)
    meta = read_checkpoint_config(path)
    for name in ("model.safetensors", "train_state.pt"):
        if not (path / name).is_file():
            raise ValueError(f"{path} is not a complete checkpoint: {name} is missing")
    model = TinyLM(Config.from_dict(meta["model"])).to(device)
    load_model(model, str(path / "model.safetensors"), device=str(device))
    state = torch.load(path / "train_state.pt", map_location="cpu", weights_only=True)
    known = {f.name for f in fields(History)}
    history = History(**{k: v for k, v in state["history"].items() if k in known})
    return Checkpoint(model=model, train_config=TrainConfig(**meta["train"]), step=meta["step"],
                      optimizer_state=state["optimizer"], sampler_state=state["sampler"],
                      torch_rng_state=state["torch_rng"],
                      history=history, extra=meta.get("extra", {}))


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------
MODEL_FLAGS = ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "max_seq_len")
CHAT_DEFAULTS = {"lr": 1e-4, "min_lr": 1e-5, "warmup": 20}   # fine-tuning uses a gentler schedule


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tinylm.train",
        description="Train a tinylm model on a text file (or fine-tune it on chat turns) on a CPU or GPU.",
        epilog="Examples:\n"
               "  python -m tinylm.train --steps 600 --out runs/mini --threads 1\n"
               "  python -m tinylm.train --chat --init runs/mini --steps 300 --out runs/chat\n"
               "  python -m tinylm.train --resume runs/mini --out runs/mini\n"
               "  torchrun --nproc_per_node=2 -m tinylm.train --steps 600 --out runs/mini   # 2 processes or GPUs\n"
               "  torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --master_addr=HOST --master_port=29500 \\\n"
               "      -m tinylm.train --steps 600 --out runs/mini                          # machine 0 of 2\n"
               "Under torchrun --batch-size stays the global batch: each of the N processes takes batch-size / N.\n"
               "A checkpoint folder holds model.safetensors, config.json, train_state.pt and tokenizer.json.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    m = p.add_argument_group("model (ignored with --resume/--init: the checkpoint fixes the shape)")
    m.add_argument("--preset", default="mini-companion", choices=sorted(PRESETS),
                   help="model preset to start from (default: mini-companion)")
    m.add_argument("--vocab-size", type=int, help="override the preset's vocab_size (also the tokenizer's size)")
    m.add_argument("--dim", type=int, help="override the width of the residual stream")
    m.add_argument("--n-layers", type=int, help="override the number of blocks")
    m.add_argument("--n-heads", type=int, help="override the number of query heads")
    m.add_argument("--n-kv-heads", type=int, help="override the number of key/value heads")
    m.add_argument("--ffn-dim", type=int, help="override the SwiGLU hidden width")
    m.add_argument("--max-seq-len", type=int, help="override the longest sequence the model handles")

    d = p.add_argument_group("data")
    d.add_argument("--data", type=Path, help=f"training data: a UTF-8 text file (default: the shipped "
                   f"{DEFAULT_TEXT.name}), or with --chat a .jsonl of conversations (default: {DEFAULT_CHAT.name})")
    d.add_argument("--tokenizer", type=Path, help="tokenizer JSON; trained on --data and saved there if missing "
                   "(default: tokenizer.json in --out, or in the --resume/--init folder)")
    d.add_argument("--val-fraction", type=float, default=0.05, help="last fraction of the data held out (default 0.05)")
    d.add_argument("--chat", action="store_true", help="fine-tune on conversations with the assistant-only loss "
                   f"mask (defaults become lr {CHAT_DEFAULTS['lr']}, min-lr {CHAT_DEFAULTS['min_lr']}, "
                   f"warmup {CHAT_DEFAULTS['warmup']})")

    t = p.add_argument_group("training (defaults from TrainConfig; with --resume, from the checkpoint)")
    t.add_argument("--steps", type=int, help=f"total optimizer steps of the run (default {TrainConfig.steps})")
    t.add_argument("--batch-size", type=int, help=f"sequences per step (default {TrainConfig.batch_size})")
    t.add_argument("--seq-len", type=int, help=f"tokens per sequence (default {TrainConfig.seq_len})")
    t.add_argument("--lr", type=float, help=f"peak learning rate (default {TrainConfig.lr})")
    t.add_argument("--min-lr", type=float, help=f"final learning rate of the cosine (default {TrainConfig.min_lr})")
    t.add_argument("--warmup", type=int, help=f"linear warmup steps (default {TrainConfig.warmup})")
    t.add_argument("--weight-decay", type=float,
                   help=f"AdamW weight decay on matrices (default {TrainConfig.weight_decay})")
    t.add_argument("--grad-clip", type=float,
                   help=f"max global gradient norm, 0 = off (default {TrainConfig.grad_clip})")
    t.add_argument("--eval-every", type=int,
                   help=f"evaluate and checkpoint every N steps (default {TrainConfig.eval_every})")
    t.add_argument("--eval-batches", type=int,
                   help=f"validation batches per evaluation (default {TrainConfig.eval_batches})")
    t.add_argument("--seed", type=int, help=f"seed of the model init and batch sampler (default {TrainConfig.seed})")

    r = p.add_argument_group("run")
    r.add_argument("--out", type=Path, default=Path("runs/mini"), help="checkpoint folder (default runs/mini)")
    r.add_argument("--resume", type=Path, help="continue a run exactly from this checkpoint folder")
    r.add_argument("--init", type=Path, help="start from these weights (e.g. a pretrained checkpoint) with a new "
                   "optimizer and schedule; for --chat fine-tuning")
    r.add_argument("--stop-after", type=int, help="stop after this many steps (the schedule still spans --steps); "
                   "continue later with --resume")
    r.add_argument("--threads", type=int, help="CPU threads for PyTorch (default: PyTorch's choice)")
    r.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda or mps (default auto); "
                   "under torchrun each process takes the GPU of its LOCAL_RANK")
    r.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward pass (cuda or cpu); "
                   "weights and optimizer stay fp32")
    r.add_argument("--sample-tokens", type=int, default=60,
                   help="tokens to sample after training, 0 = none (default 60)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")
    return p


def _load_or_train_tokenizer(args, text_for_training: Callable[[], str], vocab_size: int, out: Path):
    from .tokenizer import BPETokenizer

    source = args.resume or args.init
    path = args.tokenizer or ((source / "tokenizer.json") if source else out / "tokenizer.json")
    if path.is_file():
        tok = BPETokenizer.load(path)
    else:
        if source and not args.tokenizer:
            raise ValueError(f"{source} has no tokenizer.json; pass --tokenizer")
        tok = BPETokenizer.train(text_for_training(), vocab_size)
        path.parent.mkdir(parents=True, exist_ok=True)
        tok.save(path)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "tokenizer.json").resolve() != path.resolve():
        tok.save(out / "tokenizer.json")   # every checkpoint folder carries its tokenizer
    return tok, path


def main(argv: list[str] | None = None) -> int:
    from .chat import encode_conversations, load_conversations

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.resume and args.init:
        parser.error("use --resume (continue a run) or --init (new run from weights), not both")
    given_model = {k: getattr(args, k) for k in MODEL_FLAGS if getattr(args, k) is not None}
    if (args.resume or args.init) and given_model:
        parser.error(f"--{next(iter(given_model)).replace('_', '-')} cannot change a model loaded with --resume/--init")
    try:
        launch = distributed.read_launch()      # rank 0 of 1, or what torchrun set (RANK, WORLD_SIZE, ...)
        device = pick_device(args.device)
        if launch.distributed and args.device == "auto" and device.type == "mps":
            device = torch.device("cpu")        # gloo and nccl cannot move mps tensors
        device = distributed.launch_device(launch, device)
    except ValueError as e:
        parser.error(str(e))
    if args.bf16 and device.type not in ("cpu", "cuda"):
        parser.error(f"--bf16 runs on cpu or cuda, not {device.type}; drop --bf16 or pass --device cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    say = (lambda s: print(s, file=sys.stderr)) if launch.is_main else (lambda s: None)  # noqa: E731
    out = args.out

    # settings: checkpoint (resume) or defaults, then any flag given on the command line
    ckpt = load_checkpoint(args.resume, device) if args.resume else None
    base = asdict(ckpt.train_config) if ckpt else asdict(TrainConfig())
    if ckpt is None and args.chat:
        base.update(CHAT_DEFAULTS)
    flags = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name) is not None}
    try:
        tc = TrainConfig(**{**base, **flags})
        per_rank = distributed.check_batch_size(tc.batch_size, launch.world_size)
    except ValueError as e:
        parser.error(str(e))
    distributed.init(launch, device)            # several processes: join the others (nothing otherwise)
    chat = args.chat or bool(ckpt and ckpt.extra.get("chat"))
    data_path = args.data or (Path(ckpt.extra["data"]) if ckpt and "data" in ckpt.extra else None) \
        or (DEFAULT_CHAT if chat else DEFAULT_TEXT)

    if ckpt:
        model, model_cfg = ckpt.model, ckpt.model.cfg
    elif args.init:
        model_cfg = Config.from_dict(read_checkpoint_config(args.init)["model"])
    else:
        try:
            model_cfg = Config.from_preset(args.preset, **given_model)
        except ValueError as e:
            parser.error(str(e))

    # tokenizer and data
    if chat:
        conversations = load_conversations(data_path)
        raw = lambda: "\n".join(t["content"] for c in conversations for t in c)  # noqa: E731
    else:
        text = Path(data_path).read_text(encoding="utf-8")
        raw = lambda: text  # noqa: E731
    t_tok = time.perf_counter()
    tok = tok_path = None
    if launch.is_main:                          # under torchrun rank 0 loads (or trains) it and sends it to
        tok, tok_path = _load_or_train_tokenizer(args, raw, model_cfg.vocab_size, out)
    tok, tok_path = distributed.broadcast_object((tok, tok_path))   # the others: no shared disk needed
    t_tok = time.perf_counter() - t_tok
    if tok.vocab_size > model_cfg.vocab_size:
        parser.error(f"the tokenizer {tok_path} has {tok.vocab_size} ids but the model only {model_cfg.vocab_size}")
    t_enc = time.perf_counter()
    if chat:
        cut = max(1, int(len(conversations) * (1 - args.val_fraction)))
        train_ids, train_labels = encode_conversations(tok, conversations[:cut])
        val_ids, val_labels = encode_conversations(tok, conversations[cut:])
    else:
        ids = torch.tensor(tok.encode(text), dtype=torch.long)
        train_ids, val_ids = split_train_val(ids, args.val_fraction)
        train_labels = val_labels = None
    t_enc = time.perf_counter() - t_enc

    if not ckpt:
        model = build_model(model_cfg, tc.seed, device)
        if args.init:
            load_model(model, str(args.init / "model.safetensors"), device=str(device))
    n_params = sum(p.numel() for p in model.parameters())
    say(f"model: {n_params:,} parameters {model_cfg}")
    say(f"tokenizer: {tok_path} ({tok.vocab_size} ids, {t_tok:.2f} s); data: {data_path} -> "
        f"{len(train_ids):,} train / {len(val_ids):,} val tokens (encoded in {t_enc:.2f} s); device {device}, "
        f"{torch.get_num_threads()} threads" + (", bf16 autocast" if args.bf16 else ""))
    if launch.distributed:
        say(f"distributed: {launch.world_size} processes ({distributed.backend(device)}), "
            f"{per_rank} of the {tc.batch_size} sequences of each batch per process")
    say(f"training: {tc}" + (f" (resuming at step {ckpt.step})" if ckpt else ""))

    extra = {"data": str(data_path), "chat": chat, "init": str(args.init) if args.init else None,
             "world_size": launch.world_size, "bf16": args.bf16}
    t0 = time.perf_counter()
    history = train(model, train_ids, val_ids, tc, train_labels=train_labels, val_labels=val_labels, resume=ckpt,
                    out=out, extra=extra, until=args.stop_after, progress=not args.no_progress and launch.is_main,
                    log=lambda s: tqdm.write(s, file=sys.stderr), bf16=args.bf16)
    wall = time.perf_counter() - t0
    loss, ppl, acc = evaluate(model, val_ids, tc.batch_size, tc.seq_len, None, val_labels, with_accuracy=True)
    distributed.close()                         # every rank is done (and rank 0 has saved)
    say(f"done in {wall:.1f} s: full validation loss {loss:.3f}, perplexity {ppl:.2f}, next-token accuracy "
        f"{acc:.3f}; checkpoint in {out}")
    if history.tokens_per_s:
        say(f"throughput: {history.tokens_per_s[-1]:,.0f} tokens/s over the last training steps "
            f"({launch.world_size} process{'es' if launch.distributed else ''})")

    if args.sample_tokens > 0 and launch.is_main:
        from .generate import generate

        gen = torch.Generator(device=device).manual_seed(tc.seed)
        if chat:
            from .chat import ChatSession

            session = ChatSession(model, tok, max_new_tokens=min(args.sample_tokens, model_cfg.max_seq_len - 32),
                                  temperature=0.7, top_k=50, seed=tc.seed)
            for question in ("Hello!", "What color is the sky?", "I have a headache. What should I do?"):
                print(f"user: {question}\nassistant: {session.ask(question)}")
        else:
            prompt = tok.encode("Anna: Hello, Tom! How are you?\nTom:")
            idx = torch.tensor([prompt], device=device)
            out_ids = generate(model, idx, min(args.sample_tokens, model_cfg.max_seq_len - len(prompt)),
                               temperature=0.8, top_k=50, generator=gen)
            print(tok.decode(out_ids[0].tolist()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
