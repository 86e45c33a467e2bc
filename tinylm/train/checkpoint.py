"""Checkpoints: a folder with the weights, the settings, the optimizer and RNG state, and the tokenizer.

    model.safetensors   the weights (safetensors, no pickle)
    config.json         {"format": "tinylm-checkpoint", "version": 1, "step", "model", "train", "extra"}
    train_state.pt      optimizer moments, sampler RNG, PyTorch's RNG, history (torch.load, weights_only)
    tokenizer.json      written next to them by the command line (`tinylm.train.cli`)

`save_checkpoint` writes every file under a temporary name and then swaps them in, so a run killed
while saving keeps its previous checkpoint whole.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_model, save_model

from .._checks import check_header
from ..config import Config
from ..model import TinyLM
from .settings import History, TrainConfig

CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "tinylm-checkpoint", 1


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
    return check_header(meta, CHECKPOINT_FORMAT, CHECKPOINT_VERSION, str(f), "checkpoint",
                        required=("step", "model", "train"))


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
