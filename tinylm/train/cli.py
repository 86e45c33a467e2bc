"""The command line `python -m tinylm.train`: pretrain, fine-tune on chat turns, resume, with torchrun too.

    python -m tinylm.train --data shakespeare --minutes 3 --out runs/s3  # 3 minutes on Shakespeare's works
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
import math
import os
import re
import sys
import time
import typing
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from .. import corpus, distributed
from .._checks import IGNORE_INDEX, check_bool, check_int, check_number, check_threads
from .._loading import check_device, model_bytes
from ..chat import ChatSession, encode_chat, load_conversations
from ..config import PRESETS, Config
from ..generate import generate
from ..params import count_params, train_flops_per_token
from ..tokenizer import BPETokenizer
from .checkpoint import (CONFIG, TOKENIZER, WEIGHTS, checkpoint_file, load_checkpoint, load_weights,
                         read_checkpoint_config)
from .loop import ChatRows, TrainingDiverged, build_model, evaluate, split_train_val, train
from .measure import matmul_peak_flops, text_bits_per_byte, throughput
from .settings import DEFAULT_CHAT, DEFAULT_TEXT, TrainConfig

SAMPLE_PROMPT = "Once upon a time"   # how the pretrained model's samples start (stories, text files)
SHAKESPEARE_PROMPT = "KING.\n"       # a speaker's name on its own line, as the plays print it
N_SAMPLES = 3
BUDGET_STEPS = 10**9                  # --minutes without --steps: a ceiling never reached
CHAT_DEFAULTS = {"lr": 1e-4, "min_lr": 1e-5, "warmup": 20}   # fine-tuning uses a gentler schedule
EXAMPLES = """Examples:
  python -m tinylm.train --data shakespeare --minutes 3 --out runs/s3
  python -m tinylm.train --steps 600 --out runs/mini --threads 1
  python -m tinylm.train --chat --init runs/mini --steps 300 --out runs/chat
  python -m tinylm.train --resume runs/mini --out runs/mini
  torchrun --nproc_per_node=2 -m tinylm.train --steps 600 --out runs/mini   # 2 processes or GPUs
  torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --master_addr=HOST --master_port=29500 \\
      -m tinylm.train --steps 600 --out runs/mini                          # machine 0 of 2
Under torchrun --batch-size stays the global batch: each of the N processes takes batch-size / N.
A checkpoint folder holds model.safetensors, train_state.safetensors, config.json and tokenizer.json.
Exit status: 0 trained, 2 a usage error (nothing trained or written), 1 training diverged (the last
good checkpoint is kept: continue it with --resume and a lower --lr)."""


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
        kind = types[f.name]
        if type(None) in typing.get_args(kind):   # `int | None`: the flag takes an int (not given: None)
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if kind is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, help=text)
        else:
            group.add_argument(flag, type=kind, metavar=kind.__name__.upper(), help=text)


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
    d.add_argument("--data", type=Path, help="training data: 'shakespeare' (the default: the shipped works, "
                   "held-out plays for validation and test), 'stories' (the shipped stories), or a UTF-8 text "
                   f"file; with --chat a .jsonl of conversations (default: {DEFAULT_CHAT.name}); "
                   "the corpus's training files bring their validation split (tinylm.corpus)")
    d.add_argument("--tokenizer", type=Path, help="tokenizer JSON; trained on --data and saved there if missing "
                   "(default: the --resume/--init folder's, else one trained on --data); every checkpoint keeps "
                   "a copy")
    d.add_argument("--val-fraction", type=float, default=0.05, help="last fraction of the data held out (default 0.05; "
                   "not used with the corpus, which has its own split)")
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
                   help="tokens to sample at every evaluation and after training, 0 = none (default 60)")
    r.add_argument("--sample-prompt", help="the samples' prompt (default: 'KING.' and a newline for Shakespeare, "
                   f"{SAMPLE_PROMPT!r} otherwise)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")
    return p


# ---------------------------------------------------------------------------------------------
# The steps of a run. Each raises ValueError for anything the flags, the files or the machine get wrong;
# `main` turns it into a usage error (exit status 2) before anything is trained or written.
# ---------------------------------------------------------------------------------------------
def pick_device(name: str = "auto") -> torch.device:
    """'auto' picks cuda, then mps, then cpu; or name one ('cpu', 'cuda', 'cuda:1', 'mps'), which must exist."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return check_device(name)


def _device(args: argparse.Namespace, launch: distributed.Launch) -> torch.device:
    device = pick_device(args.device)
    if launch.distributed and args.device == "auto" and device.type == "mps":
        device = torch.device("cpu")        # gloo and nccl cannot move mps tensors
    device = distributed.launch_device(launch, device)
    if args.bf16 and device.type not in ("cpu", "cuda"):
        raise ValueError(f"--bf16 runs on cpu or cuda, not {device.type}; drop --bf16 or pass --device cpu")
    return device


def _check_flags(args: argparse.Namespace) -> None:
    """The flags that are not fields of Config or TrainConfig (those check themselves)."""
    check_number("--val-fraction", args.val_fraction, 0, 1, low_open=True, high_open=True)
    check_int("--sample-tokens", args.sample_tokens, low=0, hint=" (0: no sample)")
    if args.stop_after is not None:
        check_int("--stop-after", args.stop_after, low=1)
    if args.threads is not None:
        check_threads("--threads", args.threads)
    if args.out == Path():             # --out '' (argparse gives Path('.')) or --out .: the working directory
        raise ValueError("--out must name a folder for the run's checkpoints (e.g. --out runs/mini), not the "
                         "working directory itself ('' or '.')")


def _train_config(args: argparse.Namespace, ckpt) -> TrainConfig:
    """The checkpoint's settings (--resume) or the defaults (--chat: gentler), then every flag given."""
    base = asdict(ckpt.train_config) if ckpt else asdict(TrainConfig())
    if ckpt is None and args.chat:
        base.update(CHAT_DEFAULTS)
    flags = given(args, TrainConfig)
    if ckpt is None and "minutes" in flags and "steps" not in flags:
        base["steps"] = BUDGET_STEPS           # the minutes decide when to stop
    return TrainConfig(**{**base, **flags})


def _model_config(args: argparse.Namespace, ckpt) -> Config:
    if ckpt:
        return ckpt.model.cfg
    if args.init:
        return Config.from_dict(read_checkpoint_config(args.init, versions=(1, 2))["model"])
    return Config.from_preset(args.preset, **given(args, Config))


def _check_run(args: argparse.Namespace, tc: TrainConfig, cfg: Config, ckpt, device: torch.device) -> int:
    """The settings against the model, the checkpoint and the machine; returns the step to stop after."""
    if tc.seq_len > cfg.max_seq_len:
        raise ValueError(f"--seq-len {tc.seq_len} exceeds the model's max_seq_len {cfg.max_seq_len}; lower --seq-len"
                         + (" (the checkpoint fixes max_seq_len)" if ckpt or args.init else " or raise --max-seq-len"))
    start = ckpt.step if ckpt else 0
    if start >= tc.steps:
        raise ValueError(f"the checkpoint in {args.resume} is at step {start}, so --steps {tc.steps} leaves nothing "
                         "to train; pass a larger --steps to continue (the cosine schedule stretches to it)")
    spent = ckpt.history.time[-1] if ckpt and ckpt.history.time else 0.0     # seconds the run has trained
    if ckpt and tc.minutes is not None and spent >= 60.0 * tc.minutes:
        raise ValueError(f"the checkpoint in {args.resume} is at step {start} after {spent:.1f} s of training, so the "
                         f"run's budget of {tc.minutes:g} minutes is already spent and leaves nothing to train; pass a "
                         "larger --minutes to continue (the cosine schedule stretches to it)")
    stop = tc.steps if args.stop_after is None else args.stop_after
    check_int("--stop-after", stop, start + 1, tc.steps, span=f"in [{start + 1}, --steps={tc.steps}]",
              hint=" (the step to stop after" + (f"; the checkpoint is at step {start})" if ckpt else ")"))
    _check_memory(cfg, tc, device)
    return stop


def _param_count(cfg: Config) -> int:
    """count_params(cfg).total without listing every layer and expert (a flag may ask for 10**9 of them): the
    count grows linearly in n_layers and in n_experts, so two or three small configs give it exactly."""
    def total(layers: int, experts: int) -> int:
        return count_params(cfg.replace(n_layers=layers, n_experts=experts,
                                        experts_per_token=min(cfg.experts_per_token, max(experts, 1)))).total
    experts = cfg.n_experts
    if experts:   # one layer with E experts = one with 1 expert + (E - 1) x (the second expert)
        one_layer = total(1, 1) + (experts - 1) * (total(1, 2) - total(1, 1))
        layer = total(2, 1) - total(1, 1) + (experts - 1) * (total(1, 2) - total(1, 1))
    else:
        one_layer, layer = total(1, 0), total(2, 0) - total(1, 0)
    return one_layer + (cfg.n_layers - 1) * layer


def _memory_bytes(device: torch.device) -> int | None:
    """The memory of the device: RAM for the cpu (Linux, macOS), the GPU's for cuda; None when unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "cpu" and os.name == "posix":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return None


def _check_memory(cfg: Config, tc: TrainConfig, device: torch.device) -> None:
    """Refuse, before allocating anything, a model or batch that cannot fit: fp32 weights, gradients and two
    AdamW moments (16 bytes per parameter), the RoPE tables, plus the activations of a batch (a rough estimate)."""
    available = _memory_bytes(device)
    if available is None:
        return
    params = _param_count(cfg)
    tokens = tc.batch_size * tc.seq_len
    per_token = 4 * (3 * cfg.vocab_size + cfg.n_layers * (16 * cfg.dim + 4 * cfg.ffn_dim * cfg.experts_per_token))
    rope = model_bytes(cfg)["RoPE tables"]
    need = 16 * params + rope + tokens * per_token
    if need > available:
        gb = lambda n: f"{n / 2**30:,.1f} GiB"  # noqa: E731
        raise ValueError(f"this run needs about {gb(need)} ({params:,} parameters x 16 bytes for the weights, "
                         f"gradients and AdamW moments, {gb(rope)} of RoPE tables for --max-seq-len "
                         f"{cfg.max_seq_len}, plus {gb(tokens * per_token)} of activations for "
                         f"--batch-size {tc.batch_size} x --seq-len {tc.seq_len}), more than the {gb(available)} "
                         f"of the {device.type}; choose a smaller model (--vocab-size, --dim, --n-layers, --ffn-dim, "
                         "--n-experts) or batch")


def _check_out(args: argparse.Namespace) -> None:
    """--out must be a folder we may write, and not another run's: a fresh run never reuses or overwrites one."""
    out = args.out
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; --out names the folder the checkpoints go to")
    continuing = args.resume is not None and out.resolve() == args.resume.resolve()
    held = [name for name in (CONFIG, WEIGHTS, TOKENIZER) if checkpoint_file(out, name).is_file()]
    if held and not continuing:
        try:
            what = f"a checkpoint at step {read_checkpoint_config(out, versions=(1, 2))['step']}"
        except ValueError:
            what = ", ".join(held)
        reuse = f"; to train a new run with its tokenizer, pass --tokenizer {out / TOKENIZER}" \
            if TOKENIZER in held else ""
        raise ValueError(f"--out {out} already holds a run ({what}); continue it with --resume {out}, or pass "
                         f"another --out (or delete {out}) to start afresh{reuse}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot create --out {out}: {e.strerror}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out} is not writable; pass a folder you can write to")


CORPORA = ("shakespeare", "stories")    # --data names a shipped corpus, or is a file


def corpus_split(path: Path) -> tuple[str, Path] | None:
    """("shakespeare", "stories" or "chat", folder) if path names a shipped corpus or is a training file of the
    corpus (`tinylm.corpus`), else None."""
    if str(path) in CORPORA and not path.exists():
        return str(path), corpus.SHAKESPEARE_DIR if str(path) == "shakespeare" else corpus.DATA_DIR
    for kind, files in (("stories", corpus.STORY_FILES), ("chat", corpus.CHAT_FILES)):
        if path.name == files["train"]:
            return kind, path.parent
    return None


def _read_data(path: Path, chat: bool):
    """(training, validation) data of --data: text (or, with --chat, conversations), and validation None when
    --val-fraction is to cut it. A training file of the corpus brings its own validation split (no leak).
    ValueError says what is wrong with the file."""
    found = corpus_split(path)
    if found and found[0] == "shakespeare":
        if chat:
            raise ValueError("--data shakespeare is text to pretrain on; drop --chat, or pass conversations")
        return tuple(corpus.shakespeare_text(split) for split in ("train", "val"))
    if not path.exists() and not found:
        raise ValueError(f"--data {path}: no such file; pass a text file, or one of {', '.join(CORPORA)}")
    if not path.exists():
        raise ValueError(f"--data {path}: no such file; write the corpus with `{corpus.MAKE_COMMAND} --help`")
    if not path.is_file():
        raise ValueError(f"--data {path} is a folder; pass a UTF-8 text file" + (" (.jsonl)" if chat else ""))
    if found:
        kind, folder = found
        if (kind == "chat") != chat:
            raise ValueError(f"--data {path} holds {'conversations' if kind == 'chat' else 'stories'}: "
                             + ("drop --chat to pretrain on it" if kind == "chat" else "pass conversations with "
                                f"--chat, e.g. {folder / corpus.CHAT_FILES['train']}"))
        if chat:
            return tuple([c["messages"] for c in corpus.conversations(split, folder)] for split in corpus.SPLITS)
        return tuple(corpus.story_text(split, folder) for split in corpus.SPLITS)
    if chat:
        return load_conversations(path), None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"--data {path} is not UTF-8 text (byte {e.start}: {e.reason}); convert it, e.g. with "
                         "iconv -t utf-8") from None
    if not text.strip():
        raise ValueError(f"--data {path} holds no text")
    return text, None


def _tokenizer(args: argparse.Namespace, text_for_training: Callable[[], str], vocab_size: int):
    """The run's tokenizer and where it came from: --tokenizer (trained on --data and saved there if missing),
    else the --resume/--init folder's, else a new one trained on --data. Nothing is written before it passed
    every check; the run saves it with every checkpoint."""
    source = args.resume or args.init
    given_path = args.tokenizer
    if given_path is not None and given_path.exists() and not given_path.is_file():
        raise ValueError(f"--tokenizer {given_path} is a folder; pass a tokenizer .json file")
    if given_path is not None and given_path.is_file():
        tok, origin = BPETokenizer.load(given_path), given_path
    elif given_path is None and source is not None:
        path = checkpoint_file(source, TOKENIZER)
        if not path.is_file():
            raise ValueError(f"{source} has no tokenizer.json; pass the tokenizer it was trained with as --tokenizer")
        tok, origin = BPETokenizer.load(path), path
    else:
        tok, origin = BPETokenizer.train(text_for_training(), vocab_size), "trained on --data"
    if tok.vocab_size > vocab_size:
        raise ValueError(f"the tokenizer ({origin}) has {tok.vocab_size} ids but the model only {vocab_size}"
                         + ("" if source else "; pass a smaller tokenizer or a larger --vocab-size"))
    if given_path is not None and source is not None and checkpoint_file(source, TOKENIZER).is_file() \
            and BPETokenizer.load(checkpoint_file(source, TOKENIZER)).to_dict() != tok.to_dict():
        raise ValueError(f"--tokenizer {given_path} differs from the tokenizer of {source}; the model only "
                         "understands the ids it was trained with: drop --tokenizer")
    if given_path is not None and not given_path.is_file():     # a new tokenizer, checked: save it there
        given_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = given_path.with_name(given_path.name + ".tmp")
        tok.save(tmp)
        os.replace(tmp, given_path)
        origin = given_path
    return tok, origin


def _encode(tok: BPETokenizer, data, val_data, chat: bool, val_fraction: float, seq_len: int, data_path: Path):
    """Training and validation parts: token streams, each long enough for one window; or, for chat,
    ChatRows (one whole conversation per batch row, the loss on the assistant's tokens only). val_data None:
    the last val_fraction of data is held out."""
    if chat:
        if val_data is None and len(_chat_halves(data, None, val_fraction)[1]) == 0:
            raise ValueError(f"--data {data_path} has {len(data)} conversation(s): too few to keep one for "
                             f"validation with --val-fraction {val_fraction}; use more data or a larger --val-fraction")
        pad = tok.eos_id if tok.eos_id is not None else 0
        parts = [ChatRows([encode_chat(tok, c) for c in part], pad_id=pad)
                 for part in _chat_halves(data, val_data, val_fraction)]
        for name, rows in zip(("training", "validation"), parts):
            if not any(label != IGNORE_INDEX for _, labels in rows.encoded for label in labels[1:seq_len + 1]):
                raise ValueError(f"--data {data_path}: the {name} conversations have no assistant text to learn "
                                 f"from within --seq-len {seq_len}")
        return parts[0], parts[1], None, None
    if val_data is None:
        train_ids, val_ids = split_train_val(torch.tensor(tok.encode(data), dtype=torch.long), val_fraction)
    else:
        train_ids, val_ids = (torch.tensor(tok.encode(t), dtype=torch.long) for t in (data, val_data))
    if min(len(train_ids), len(val_ids)) < seq_len + 1:
        raise ValueError(f"--data {data_path} gives {len(train_ids):,} tokens to train on and {len(val_ids):,} to "
                         f"validate on (--val-fraction {val_fraction}); each part needs at least --seq-len + 1 = "
                         f"{seq_len + 1}: use more data, another --val-fraction or a shorter --seq-len")
    return train_ids, val_ids, None, None


def _chat_halves(data: list, val_data: list | None, val_fraction: float) -> tuple[list, list]:
    """Training and validation conversations: val_data, or else the last val_fraction of data."""
    if val_data is not None:
        return data, val_data
    cut = max(1, int(len(data) * (1 - val_fraction)))
    return data[:cut], data[cut:]




def sample_text(model, tok: BPETokenizer, prompt: str, n_tokens: int, seed: int) -> str:
    """The prompt and n_tokens the model writes after it: temperature 0.8, top-k 50, seeded; unedited."""
    device = next(model.parameters()).device
    limit = model.cfg.max_seq_len
    ids = tok.encode(prompt)[-max(1, limit // 2):]
    gen = torch.Generator(device=device).manual_seed(seed)
    was_training = model.training
    out_ids = generate(model, torch.tensor([ids], device=device), min(n_tokens, limit - len(ids)),
                       temperature=0.8, top_k=50, generator=gen)
    model.train(was_training)
    return tok.decode(out_ids[0].tolist())


def _sample(model, tok: BPETokenizer, chat: bool, n_tokens: int, seed: int, questions: list[str],
            prompt: str) -> None:
    """Print what the trained model says: its answers to questions (chat), or three texts it starts from
    prompt (seeds seed, seed + 1, ...). Sampled at temperature 0.8 (chat 0.7), top-k 50; unedited."""
    limit = model.cfg.max_seq_len
    if chat:
        session = ChatSession(model, tok, max_new_tokens=min(n_tokens, max(1, limit // 2)), temperature=0.7,
                              top_k=50, seed=seed)
        for question in questions:
            print(f"user: {question}\nassistant: {session.ask(question)}")
        return
    for n in range(N_SAMPLES):
        print(f"[sample {n + 1}, seed {seed + n}] {sample_text(model, tok, prompt, n_tokens, seed + n)}")


def _report(model, tok: BPETokenizer, tc: TrainConfig, history, data_path: Path, val_text: str | None,
            world: int) -> list[str]:
    """The end of a run in numbers: bits per byte on the held-out text (Shakespeare: the validation and test
    works), tokens/s, achieved FLOP/s and MFU against this machine's measured fp32 matmul peak."""
    lines = []
    held_out = {"val": val_text} if val_text is not None else {}
    if corpus_split(data_path) and corpus_split(data_path)[0] == "shakespeare":
        held_out = {split: corpus.shakespeare_text(split) for split in ("val", "test")}
    for split, text in held_out.items():
        bpb, n_bytes, n_tokens = text_bits_per_byte(model, tok, text, tc.seq_len, max(tc.batch_size, 64))
        works = f" ({', '.join(corpus.VAL_WORKS if split == 'val' else corpus.TEST_WORKS)})" \
            if len(held_out) == 2 else ""
        nats = bpb * math.log(2) * n_bytes / n_tokens
        lines.append(f"{split} bits per byte {bpb:.3f} on {n_bytes:,} bytes{works}: {n_tokens:,} tokens, "
                     f"{n_bytes / n_tokens:.2f} bytes per token, loss {nats:.3f} nats per token")
    steps = [b - a for a, b in zip(history.val_step, history.val_step[1:])]
    timed = [(n, r) for n, r in zip(steps, history.tokens_per_s) if r > 0]
    if timed:
        tokens = sum(n for n, _ in timed) * tc.batch_size * tc.seq_len
        tok_s = tokens / sum(n * tc.batch_size * tc.seq_len / r for n, r in timed)   # evaluations left out
        peak = matmul_peak_flops()
        flops, mfu = throughput(model.cfg, tc.seq_len, tok_s, peak)
        per_token = train_flops_per_token(model.cfg, tc.seq_len)
        lines.append(f"throughput {tok_s:,.0f} tokens/s ({world} process{'es' if world > 1 else ''}); "
                     f"{per_token:,} FLOPs per token (6 N + 12 L H D T) -> {flops / 1e9:.1f} GFLOP/s, MFU "
                     f"{mfu:.1%} of the measured fp32 matmul peak {peak / 1e9:.1f} GFLOP/s "
                     f"({torch.get_num_threads()} threads)")
    if history.time:
        lines.append(f"wall clock {history.time[-1]:.1f} s for {history.step[-1]} steps "
                     f"({history.step[-1] * tc.batch_size * tc.seq_len:,} tokens)")
    return lines


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Run the command line. Exit status 0: trained; 2: a usage error (flags, files, memory; nothing was
    trained or written); 1: training diverged (the last good checkpoint is kept); 130: interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.resume and args.init:
        parser.error("use --resume (continue a run) or --init (new run from weights), not both")
    if (args.resume or args.init) and given(args, Config):
        flag = next(iter(given(args, Config))).replace("_", "-")
        parser.error(f"--{flag} cannot change a model loaded with --resume/--init")
    try:
        _check_flags(args)
        launch = distributed.read_launch()      # rank 0 of 1, or what torchrun set (RANK, WORLD_SIZE, ...)
        device = _device(args, launch)
        ckpt = load_checkpoint(args.resume, device) if args.resume else None
        tc = _train_config(args, ckpt)
        per_rank = distributed.check_batch_size(tc.batch_size, launch.world_size)
        model_cfg = _model_config(args, ckpt)
        stop = _check_run(args, tc, model_cfg, ckpt, device)
        extra = ckpt.extra if ckpt else {}
        chat = args.chat or check_bool("the checkpoint's extra.chat", extra.get("chat", False))
        if not isinstance(extra.get("data", ""), str):
            raise ValueError(f"{args.resume}: the checkpoint's extra.data must be a path, got {extra['data']!r}")
        data_path = args.data or (Path(extra["data"]) if "data" in extra else None) \
            or (DEFAULT_CHAT if chat else DEFAULT_TEXT)
        data, val_data = _read_data(data_path, chat)
    except ValueError as e:
        parser.error(str(e))
    if args.threads:
        torch.set_num_threads(args.threads)
    say = (lambda s: print(s, file=sys.stderr)) if launch.is_main else (lambda s: None)  # noqa: E731
    out = args.out
    distributed.init(launch, device)            # several processes: join the others (nothing otherwise)

    # the output folder and the tokenizer: rank 0 checks and loads (or trains) them and sends the result,
    # or its error, to the others (no shared disk needed, and no rank left waiting)
    t_tok = time.perf_counter()
    found = None
    if launch.is_main:
        try:
            _check_out(args)
            raw = (lambda: "\n".join(t["content"] for c in data for t in c)) if chat else (lambda: data)  # noqa: E731
            found = _tokenizer(args, raw, model_cfg.vocab_size)
        except ValueError as e:
            found = str(e)
    found = distributed.broadcast_object(found)
    if isinstance(found, str):
        parser.error(found)
    tok, tok_origin = found
    t_tok = time.perf_counter() - t_tok
    t_enc = time.perf_counter()
    try:
        train_ids, val_ids, train_labels, val_labels = _encode(tok, data, val_data, chat, args.val_fraction,
                                                               tc.seq_len, data_path)
    except ValueError as e:
        parser.error(str(e))
    t_enc = time.perf_counter() - t_enc

    if ckpt:
        model = ckpt.model
    elif args.init:
        torch.manual_seed(tc.seed)              # the same random draws as build_model, then the weights
        model = load_weights(args.init, device)
    else:
        model = build_model(model_cfg, tc.seed, device)
    n_params = sum(p.numel() for p in model.parameters())
    say(f"model: {n_params:,} parameters {model_cfg}")
    if chat:
        longer = sum(len(ids) > tc.seq_len + 1 for ids, _ in train_ids.encoded + val_ids.encoded)
        sizes = (f"{len(train_ids):,} train / {len(val_ids):,} val conversations, {train_ids.n_tokens:,} / "
                 f"{val_ids.n_tokens:,} tokens, one per batch row ({longer} longer than seq-len + 1: cut)")
    else:
        sizes = f"{len(train_ids):,} train / {len(val_ids):,} val tokens"
    say(f"tokenizer: {tok_origin} ({tok.vocab_size} ids, {t_tok:.2f} s); data: {data_path} -> "
        f"{sizes} (encoded in {t_enc:.2f} s); device {device}, "
        f"{torch.get_num_threads()} threads" + (", bf16 autocast" if args.bf16 else ""))
    if launch.distributed:
        say(f"distributed: {launch.world_size} processes ({distributed.backend(device)}), "
            f"{per_rank} of the {tc.batch_size} sequences of each batch per process")
    say(f"training: {tc}" + (f" (resuming at step {ckpt.step})" if ckpt else ""))

    extra = {"data": str(data_path), "chat": chat, "init": str(args.init) if args.init else None,
             "world_size": launch.world_size, "bf16": args.bf16}
    shakespeare = corpus_split(data_path) is not None and corpus_split(data_path)[0] == "shakespeare"
    prompt = args.sample_prompt if args.sample_prompt is not None else \
        SHAKESPEARE_PROMPT if shakespeare else SAMPLE_PROMPT

    def on_eval(step: int) -> str | None:       # a sample at every evaluation: watch words, lines, speakers come
        if chat or args.sample_tokens == 0:
            return None
        text = sample_text(model, tok, prompt, args.sample_tokens, tc.seed)
        return f"sample at step {step}: {text!r}"
    t0 = time.perf_counter()
    try:
        history = train(model, train_ids, val_ids, tc, train_labels=train_labels, val_labels=val_labels,
                        resume=ckpt, out=out, extra=extra, until=stop,
                        progress=not args.no_progress and launch.is_main,
                        log=lambda s: tqdm.write(s, file=sys.stderr), bf16=args.bf16, tokenizer=tok,
                        on_eval=on_eval)
    except TrainingDiverged as e:
        say(f"error: {e}" + (f". Continue from the checkpoint with --resume {out} and, e.g., --lr {tc.lr / 10:g}"
                             if e.saved_step is not None else ""))
        return 1
    except KeyboardInterrupt:
        try:
            kept = f"its checkpoint (step {read_checkpoint_config(out)['step']}) is whole: continue with --resume {out}"
        except ValueError:
            kept = "no checkpoint was written"
        say(f"interrupted; {kept}")
        return 130
    wall = time.perf_counter() - t0
    last = history.step[-1] if history.step else stop
    if chat:      # the conversations' masked loss; a text's figure is its bits per byte (below)
        loss, ppl, acc = evaluate(model, val_ids, tc.batch_size, tc.seq_len, None, val_labels, with_accuracy=True)
        scores = (f": full validation loss {loss:.3f}, perplexity {ppl:.2f}, next-token accuracy {acc:.3f}")
    else:
        scores = ""
    distributed.close()                         # every rank is done (and rank 0 has saved)
    say(f"done in {wall:.1f} s{scores}; checkpoint in {out} (step {last})")
    if launch.is_main and not chat:
        val_text = val_data if val_data is not None else tok.decode(val_ids.tolist())
        for line in _report(model, tok, tc, history, data_path, val_text, launch.world_size):
            say(line)
    if args.sample_tokens > 0 and launch.is_main:
        held_out = _chat_halves(data, val_data, args.val_fraction)[1] if chat else []
        questions = [c[0]["content"] for c in held_out[:N_SAMPLES]]     # questions it was not trained on
        _sample(model, tok, chat, args.sample_tokens, tc.seed, questions, prompt)
    return 0
