"""Training on a CPU or GPU: next-token cross-entropy, AdamW, warmup then cosine decay, clipping, checkpoints.

One job per module:

    tinylm.train.settings     TrainConfig (the settings of a run), History, the shipped data files
    tinylm.train.loop         the pieces (get_batch, ChatRows, lr_at, evaluate, make_optimizer, ...) and `train`
    tinylm.train.measure      bits per byte of a held-out text, FLOPs per token, the matmul peak, MFU
    tinylm.train.checkpoint   save_checkpoint / load_checkpoint: a folder per checkpoint, written atomically
    tinylm.train.cli          `python -m tinylm.train ...`, every Config and TrainConfig field a flag

A notebook imports the pieces from here: `from tinylm.train import TrainConfig, build_model, train`.
"""

from .checkpoint import (Checkpoint, load_checkpoint, load_mini_companion, load_weights, read_checkpoint_config,
                         save_checkpoint)
from .cli import build_parser, main, pick_device
from .loop import (
    ChatRows, Objective, StopTraining, TrainingDiverged, bits_per_byte, build_model, evaluate, get_batch, lr_at, make_optimizer,
    pad_conversations, split_train_val, train,
)
from .settings import DATA_DIR, DEFAULT_CHAT, DEFAULT_TEXT, MINI_COMPANION, STORIES_TEXT, History, TrainConfig

__all__ = [
    "ChatRows", "Checkpoint", "DATA_DIR", "DEFAULT_CHAT", "DEFAULT_TEXT", "History", "MINI_COMPANION", "Objective",
    "STORIES_TEXT", "TrainConfig",
    "StopTraining", "TrainingDiverged", "bits_per_byte", "build_model", "build_parser", "evaluate", "get_batch", "load_checkpoint",
    "load_mini_companion", "load_weights", "lr_at", "main", "make_optimizer", "pad_conversations", "pick_device",
    "read_checkpoint_config", "save_checkpoint", "split_train_val", "train",
]
