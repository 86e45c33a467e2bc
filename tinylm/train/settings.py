"""The settings of one training run (`TrainConfig`), what happened in it (`History`), and the shipped data."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import corpus
from .._checks import check_int, check_number

DATA_DIR = corpus.DATA_DIR
# the shipped corpus (tinylm.corpus), training splits; the CLI holds out their "val" splits, which share
# no story, question or line with them
DEFAULT_TEXT = Path("shakespeare")                      # pretraining: the shipped works (tinylm.corpus)
STORIES_TEXT = DATA_DIR / corpus.STORY_FILES["train"]   # the shipped stories (--data stories)
DEFAULT_CHAT = DATA_DIR / corpus.CHAT_FILES["train"]    # conversations for chat fine-tuning
MINI_COMPANION = DATA_DIR / "mini_companion"             # the CLI run's trained model (load_mini_companion)


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
    minutes: float | None = None  # wall-clock budget in minutes; steps becomes a ceiling, the cosine spans the minutes

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_batches"):
            setattr(self, name, check_int(name, getattr(self, name), low=1))   # numpy ints -> int
        self.warmup = check_int("warmup", self.warmup, low=0)
        self.seed = check_int("seed", self.seed, 0, 2**63 - 1, hint=" (a 64-bit seed: torch's generators take it)")
        check_lr(self.lr, self.min_lr)
        for name in ("weight_decay", "grad_clip"):
            check_number(name, getattr(self, name), 0)
        if self.minutes is not None:
            check_number("minutes", self.minutes, 0, 60 * 24 * 365, low_open=True, span="in (0, a year]")


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
    time: list[float] = field(default_factory=list)      # wall-clock seconds of the run after each step


def check_lr(peak: float, min_lr: float) -> None:
    """The peak learning rate must be > 0, the final one in [0, peak]."""
    check_number("lr (the peak learning rate)", peak, 0, low_open=True)
    check_number("min_lr", min_lr, 0, peak, span=f"in [0, lr={peak}]")
