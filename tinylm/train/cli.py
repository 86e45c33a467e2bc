"""The command line `python -m tinylm.train`: pretrain, fine-tune on chat turns, resume, with torchrun too.

    python -m tinylm.train --steps 600 --out runs/mini                  # pretrain the mini companion
    python -m tinylm.train --chat --init runs/mini --out runs/chat      # fine-tune it on chat turns
    python -m tinylm.train --resume runs/mini --out runs/mini           # continue exactly where it stopped
    torchrun --nproc_per_node=2 -m tinylm.train --out runs/mini         # the same on 2 processes (or GPUs)

Every field of `Config` (the model) and of `TrainConfig` (the run) is a flag, generated from the dataclass:
its type, and its help from the comment beside the field. The library prints nothing; `main` does.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import time
import typing
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import load_model
from tqdm.auto import tqdm

from .. import distributed
from ..chat import ChatSession, encode_chat, load_conversations
from ..config import PRESETS, Config
from ..generate import generate
from ..tokenizer import BPETokenizer
from .checkpoint import load_checkpoint, read_checkpoint_config
from .loop import ChatRows, build_model, evaluate, split_train_val, train
from .settings import DEFAULT_CHAT, DEFAULT_TEXT, TrainConfig

CHAT_DEFAULTS = {"lr": 1e-4, "min_lr": 1e-5, "warmup": 20}   # fine-tuning uses a gentler schedule
EXAMPLES = """Examples:
  python -m tinylm.train --steps 600 --out runs/mini --threads 1
  python -m tinylm.train --chat --init runs/mini --steps 300 --out runs/chat
  python -m tinylm.train --resume runs/mini --out runs/mini
  torchrun --nproc_per_node=2 -m tinylm.train --steps 600 --out runs/mini   # 2 processes or GPUs
  torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --master_addr=HOST --master_port=29500 \\
      -m tinylm.train --steps 600 --out runs/mini                          # machine 0 of 2
Under torchrun --batch-size stays the global batch: each of the N processes takes batch-size / N.
A checkpoint folder holds model.safetensors, config.json, train_state.pt and tokenizer.json."""


# ---------------------------------------------------------------------------------------------
# Flags generated from a dataclass
# ---------------------------------------------------------------------------------------------
def field_comments(cls: type) -> dict[str, str]:
    """The comment beside each field of a dataclass, `name: type = default  # comment`, by field name."""
    found: dict[str, str] = {}
    for name, comment in re.findall(r"^\s+(\w+):[^#\n]*#\s*(.+?)\s*$", inspect.getsource(cls), re.M):
        found.setdefault(name, comment)          # the first: the field's line, not a method's
    return {f.name: found[f.name] for f in fields(cls)}


def add_dataclass_flags(group: argparse._ArgumentGroup, cls: type,
                        default_note: Callable[[str], str]) -> None:
    """One flag per field of cls: --field-name, typed like the field (a bool gets --x / --no-x), with the
    field's comment as help, followed by default_note(name). Every default is None: "not given"."""
    types, comments = typing.get_type_hints(cls), field_comments(cls)
    for f in fields(cls):
        flag, text = "--" + f.name.replace("_", "-"), f"{comments[f.name]} {default_note(f.name)}"
        text = text.replace("%", "%%")   # argparse formats help with %
        if types[f.name] is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, help=text)
        else:
            group.add_argument(flag, type=types[f.name], metavar=types[f.name].__name__.upper(), help=text)


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of cls whose flag was given on the command line."""
    return {f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name) is not None}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tinylm.train",
        description="Train a tinylm model on a text file (or fine-tune it on chat turns) on a CPU or GPU.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    m = p.add_argument_group("model (not with --resume/--init: the checkpoint fixes the model)")
    m.add_argument("--preset", default="mini-companion", choices=sorted(PRESETS),
                   help="model preset to start from; the flags below change its fields (default: mini-companion)")
    mini = PRESETS["mini-companion"]
    add_dataclass_flags(m, Config, lambda name: f"(default: the preset's; mini-companion: {getattr(mini, name)})")

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
    add_dataclass_flags(t, TrainConfig, lambda name: f"(default {getattr(TrainConfig, name)})")

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


# ---------------------------------------------------------------------------------------------
# The steps of a run
# ---------------------------------------------------------------------------------------------
def pick_device(name: str = "auto") -> torch.device:
    """'auto' picks cuda, then mps, then cpu; or name one ('cpu', 'cuda', 'cuda:1', 'mps')."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use 'auto', 'cpu', 'cuda' or 'mps'") from None


def _device(args: argparse.Namespace, launch: distributed.Launch) -> torch.device:
    device = pick_device(args.device)
    if launch.distributed and args.device == "auto" and device.type == "mps":
        device = torch.device("cpu")        # gloo and nccl cannot move mps tensors
    device = distributed.launch_device(launch, device)
    if args.bf16 and device.type not in ("cpu", "cuda"):
        raise ValueError(f"--bf16 runs on cpu or cuda, not {device.type}; drop --bf16 or pass --device cpu")
    return device


def _train_config(args: argparse.Namespace, ckpt) -> TrainConfig:
    """The checkpoint's settings (--resume) or the defaults (--chat: gentler), then every flag given."""
    base = asdict(ckpt.train_config) if ckpt else asdict(TrainConfig())
    if ckpt is None and args.chat:
        base.update(CHAT_DEFAULTS)
    return TrainConfig(**{**base, **given(args, TrainConfig)})


def _model_config(args: argparse.Namespace, ckpt) -> Config:
    if ckpt:
        return ckpt.model.cfg
    if args.init:
        return Config.from_dict(read_checkpoint_config(args.init)["model"])
    return Config.from_preset(args.preset, **given(args, Config))


def _load_or_train_tokenizer(args, text_for_training: Callable[[], str], vocab_size: int, out: Path):
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


def _sample(model, tok: BPETokenizer, chat: bool, n_tokens: int, seed: int, device: torch.device) -> None:
    """Print what the trained model says: three chat answers, or a continuation of a dialogue."""
    limit = model.cfg.max_seq_len
    if chat:
        session = ChatSession(model, tok, max_new_tokens=min(n_tokens, limit - 32), temperature=0.7, top_k=50,
                              seed=seed)
        for question in ("Hello!", "What color is the sky?", "I have a headache. What should I do?"):
            print(f"user: {question}\nassistant: {session.ask(question)}")
    else:
        prompt = tok.encode("Anna: Hello, Tom! How are you?\nTom:")
        gen = torch.Generator(device=device).manual_seed(seed)
        out_ids = generate(model, torch.tensor([prompt], device=device), min(n_tokens, limit - len(prompt)),
                           temperature=0.8, top_k=50, generator=gen)
        print(tok.decode(out_ids[0].tolist()))


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.resume and args.init:
        parser.error("use --resume (continue a run) or --init (new run from weights), not both")
    if (args.resume or args.init) and given(args, Config):
        flag = next(iter(given(args, Config))).replace("_", "-")
        parser.error(f"--{flag} cannot change a model loaded with --resume/--init")
    try:
        launch = distributed.read_launch()      # rank 0 of 1, or what torchrun set (RANK, WORLD_SIZE, ...)
        device = _device(args, launch)
    except ValueError as e:
        parser.error(str(e))
    if args.threads:
        torch.set_num_threads(args.threads)
    say = (lambda s: print(s, file=sys.stderr)) if launch.is_main else (lambda s: None)  # noqa: E731
    out = args.out

    ckpt = load_checkpoint(args.resume, device) if args.resume else None
    try:
        tc = _train_config(args, ckpt)
        per_rank = distributed.check_batch_size(tc.batch_size, launch.world_size)
        model_cfg = _model_config(args, ckpt)
    except ValueError as e:
        parser.error(str(e))
    distributed.init(launch, device)            # several processes: join the others (nothing otherwise)
    chat = args.chat or bool(ckpt and ckpt.extra.get("chat"))
    data_path = args.data or (Path(ckpt.extra["data"]) if ckpt and "data" in ckpt.extra else None) \
        or (DEFAULT_CHAT if chat else DEFAULT_TEXT)

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
    if chat:   # one whole conversation per batch row, padded (ChatRows): no window starts mid-answer
        cut = max(1, int(len(conversations) * (1 - args.val_fraction)))
        pad = tok.special_ids["<eos>"]
        train_ids = ChatRows([encode_chat(tok, c) for c in conversations[:cut]], pad_id=pad)
        val_ids = ChatRows([encode_chat(tok, c) for c in conversations[cut:]], pad_id=pad)
        train_labels = val_labels = None
    else:
        ids = torch.tensor(tok.encode(text), dtype=torch.long)
        train_ids, val_ids = split_train_val(ids, args.val_fraction)
        train_labels = val_labels = None
    t_enc = time.perf_counter() - t_enc

    if ckpt:
        model = ckpt.model
    else:
        model = build_model(model_cfg, tc.seed, device)
        if args.init:
            load_model(model, str(args.init / "model.safetensors"), device=str(device))
    n_params = sum(p.numel() for p in model.parameters())
    say(f"model: {n_params:,} parameters {model_cfg}")
    if chat:
        longer = sum(len(ids) > tc.seq_len + 1 for ids, _ in train_ids.encoded + val_ids.encoded)
        sizes = (f"{len(train_ids):,} train / {len(val_ids):,} val conversations, {train_ids.n_tokens:,} / "
                 f"{val_ids.n_tokens:,} tokens, one per batch row ({longer} longer than seq-len + 1: cut)")
    else:
        sizes = f"{len(train_ids):,} train / {len(val_ids):,} val tokens"
    say(f"tokenizer: {tok_path} ({tok.vocab_size} ids, {t_tok:.2f} s); data: {data_path} -> "
        f"{sizes} (encoded in {t_enc:.2f} s); device {device}, "
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
        _sample(model, tok, chat, args.sample_tokens, tc.seed, device)
    return 0
