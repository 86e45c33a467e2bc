"""Checkpoints: a folder with the weights, the settings, the optimizer and RNG state, and the tokenizer.

    model.safetensors        the weights
    train_state.safetensors  AdamW's moments by parameter name, the sampler's and PyTorch's RNG, the History
    config.json              {"format": "tinylm-checkpoint", "version": 2, "step", "save_id", "model",
                              "train", "extra"}
    tokenizer.json           the tokenizer, when `save_checkpoint` is given one (the command line always is)

No pickle: loading reads tensors and JSON only, so opening a stranger's checkpoint cannot run code. Both
safetensors files carry the step and a random save_id in their metadata, and `load_checkpoint` checks
them against config.json: files of two different saves are never loaded together. Every value is checked
(and every tensor shape against `params.weight_shapes`) before the model is allocated; a bad file gives a
ValueError that names the file and the field.

Saving is atomic, with a small journal inside the folder:
    1. every file is written into `.saving/` and flushed to disk;
    2. `.saving/` is renamed `.complete/`: the commit point;
    3. the files move from `.complete/` into the folder, one by one, and `.complete/` is removed.
Killed before 2, the folder still holds the previous checkpoint, whole (the next save deletes `.saving/`).
Killed during 3, the new checkpoint is whole across the two folders: loading takes each file from
`.complete/` while it is there, and the next save finishes the moves first.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .._checks import check_fields, check_header, check_int
from .._loading import FLOAT_DTYPES, as_path, check_device, check_memory, read_json
from ..config import Config
from ..model import TinyLM
from ..params import layer_counts, state_size, weight_shapes
from ..tokenizer import BPETokenizer
from .settings import MINI_COMPANION, History, TrainConfig

CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "tinylm-checkpoint", 2
WEIGHTS, STATE, CONFIG, TOKENIZER = "model.safetensors", "train_state.safetensors", "config.json", "tokenizer.json"
SAVING, COMPLETE = ".saving", ".complete"       # the journal: a save being written, a save being moved in
MAX_CONFIG_BYTES = 1 << 20                      # config.json holds settings only: 1 MiB is plenty
ADAM_KEYS = ("step", "exp_avg", "exp_avg_sq")   # AdamW's state of one parameter (torch.optim.AdamW)
HISTORY_INTS = ("step", "val_step")             # History's lists of ints; the others hold floats


@dataclass
class Checkpoint:
    """Everything `load_checkpoint` reads back; pass it to `train(..., resume=ckpt)` to continue."""

    model: TinyLM
    train_config: TrainConfig
    step: int                          # optimizer steps already taken
    optimizer_state: dict              # parameter name -> {"step", "exp_avg", "exp_avg_sq"} (AdamW's state)
    sampler_state: torch.Tensor        # state of the torch.Generator that draws the batches
    torch_rng_state: torch.Tensor      # PyTorch's global CPU RNG (unused by TinyLM today; dropout would draw from it)
    history: History
    extra: dict                        # free-form notes (data path, chat mode, ...)


# ---------------------------------------------------------------------------------------------
# saving
# ---------------------------------------------------------------------------------------------
def save_checkpoint(path: str | Path, model: TinyLM, optimizer: torch.optim.Optimizer, step: int,
                    config: TrainConfig, sampler: torch.Generator, history: History, extra: dict | None = None,
                    tokenizer: BPETokenizer | None = None) -> None:
    """Write a checkpoint folder atomically: the previous checkpoint stays whole until the new one is.

    Refuses (ValueError) to write a weight or an optimizer moment that is not finite. Pass the plain model,
    not a DistributedDataParallel wrapper: its names carry no "module." prefix, so any number of processes
    can load the checkpoint.
    """
    path = Path(path)
    step = check_int("step", step, 0, config.steps, span=f"in [0, steps={config.steps}]")
    weights = model.state_dict()                      # the names of params.weight_shapes; a tied head once:
    if model.cfg.tie_embeddings:                      # as embed_tokens.weight (Hugging Face's convention)
        del weights["lm_head.weight"]
    moments = optimizer_tensors(optimizer, dict(model.named_parameters()))
    for name, t in [*weights.items(), *moments.items()]:
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"refusing to save a checkpoint at step {step}: {name} holds NaN or inf; the "
                             "previous checkpoint is kept")
    save_id = uuid.uuid4().hex
    stamp = {"format": CHECKPOINT_FORMAT, "step": str(step), "save_id": save_id}
    meta = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "step": step, "save_id": save_id,
            "model": model.cfg.to_dict(), "train": asdict(config), "extra": extra or {}}
    state = {**moments, "rng.sampler": sampler.get_state(), "rng.torch": torch.get_rng_state()}
    for f in fields(History):
        dtype = torch.int64 if f.name in HISTORY_INTS else torch.float64
        state[f"history.{f.name}"] = torch.tensor(getattr(history, f.name), dtype=dtype)

    path.mkdir(parents=True, exist_ok=True)
    _finish_save(path)                                # a save killed earlier: complete it, or drop it
    staging = path / SAVING
    staging.mkdir()
    save_file({n: t.contiguous().cpu() for n, t in weights.items()}, str(staging / WEIGHTS), metadata=stamp)
    save_file({n: t.contiguous().cpu() for n, t in state.items()}, str(staging / STATE), metadata=stamp)
    if tokenizer is not None:
        tokenizer.save(staging / TOKENIZER)
    (staging / CONFIG).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    for f in staging.iterdir():
        _fsync(f)
    _fsync(staging)
    os.rename(staging, path / COMPLETE)               # the commit point
    _fsync(path)
    _finish_save(path)


def optimizer_tensors(optimizer: torch.optim.Optimizer,
                      named: dict[str, torch.nn.Parameter]) -> dict[str, torch.Tensor]:
    """AdamW's state as flat tensors by parameter name: "exp_avg.layers.0.self_attn.q_proj.weight", ..."""
    names = {id(p): n for n, p in named.items()}
    out = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            for key, value in optimizer.state.get(p, {}).items():
                if key not in ADAM_KEYS or not isinstance(value, torch.Tensor):
                    raise ValueError(f"cannot save optimizer state {key!r}: checkpoints hold AdamW's {ADAM_KEYS}")
                out[f"{key}.{names[id(p)]}"] = value.detach()
    return out


def restore_optimizer(optimizer: torch.optim.Optimizer, model: TinyLM, state: dict) -> None:
    """Put a Checkpoint's optimizer_state (parameter name -> AdamW tensors) into a fresh optimizer of model."""
    named = dict(model.named_parameters())
    for name, tensors in state.items():
        p = named[name]
        optimizer.state[p] = {k: (v.clone() if k == "step" else v.to(p.device, p.dtype)) for k, v in tensors.items()}


def _finish_save(path: Path) -> None:
    """Move a committed save (`.complete/`) into the folder, config.json last; delete an uncommitted one."""
    complete = path / COMPLETE
    if complete.is_dir():
        for f in sorted(complete.iterdir(), key=lambda f: f.name == CONFIG):
            os.replace(f, path / f.name)
        _fsync(path)
        complete.rmdir()
        if (path / "train_state.pt").is_file():       # the pickle of a version 1 checkpoint: replaced now
            (path / "train_state.pt").unlink()
    if (path / SAVING).exists():
        shutil.rmtree(path / SAVING)


def _fsync(path: Path) -> None:
    """Flush a file (or, on Linux and macOS, a folder's list of names) to the disk."""
    if path.is_dir() and os.name != "posix":
        return                                        # Windows cannot open a folder to flush it
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------
def checkpoint_file(path: str | Path, name: str) -> Path:
    """Where a checkpoint's file is now: in `.complete/` while a killed save is being moved in, else the folder."""
    path = Path(path)
    return path / COMPLETE / name if (path / COMPLETE / name).is_file() else path / name


def read_checkpoint_config(path: str | Path, versions: tuple[int, ...] = (CHECKPOINT_VERSION,)) -> dict:
    """The parsed config.json of a checkpoint folder, every field checked; ValueError names the file and field."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path} is not a checkpoint folder: "
                         f"{'it is a file' if path.exists() else 'no such folder'}")
    f = checkpoint_file(path, CONFIG)
    if not f.is_file():
        raise ValueError(f"{path} is not a checkpoint folder: {CONFIG} is missing")
    meta = read_json(f, "a checkpoint's config.json", MAX_CONFIG_BYTES)
    version = meta.get("version") if isinstance(meta, dict) and type(meta.get("version")) is int else None
    if version == 1 and 1 not in versions and meta.get("format") == CHECKPOINT_FORMAT:
        raise ValueError(
            f"{path} is a version 1 checkpoint: its optimizer state (train_state.pt) is a pickle, which this "
            "tinylm no longer opens (unpickling a file can run code). Its weights are plain safetensors: start "
            f"a new run from them with --init {path} (or tinylm.train.load_weights), but it cannot be resumed")
    check_header(meta, CHECKPOINT_FORMAT, version if version in versions else CHECKPOINT_VERSION, str(f),
                 "checkpoint")
    v1 = version == 1
    check_fields(meta, str(f), ("format", "version", "step", "model", "train", "extra", *(() if v1 else ("save_id",))))
    check_int(f"{f}: field 'step'", meta["step"], low=0)
    if not v1 and not isinstance(meta["save_id"], str):
        raise ValueError(f"{f}: field 'save_id' must be a string, got {meta['save_id']!r}")
    for field in ("model", "train", "extra"):
        if not isinstance(meta[field], dict):
            raise ValueError(f"{f}: field {field!r} must be a JSON object, got {type(meta[field]).__name__}")
    try:
        Config.from_dict(meta["model"])
    except ValueError as e:
        raise ValueError(f"{f}: field 'model': {e}") from None
    check_fields(meta["train"], f"{f}: field 'train'", [t.name for t in fields(TrainConfig) if t.name != "minutes"],
                 optional=("minutes",))   # minutes: absent before the wall-clock budget existed
    try:
        tc = TrainConfig(**meta["train"])
    except ValueError as e:
        raise ValueError(f"{f}: field 'train': {e}") from None
    if not v1:
        check_int(f"{f}: field 'step'", meta["step"], 0, tc.steps, span=f"in [0, train.steps={tc.steps}]")
    return meta


def load_weights(path: str | Path, device: torch.device | str = "cpu", max_bytes: int | None = None) -> TinyLM:
    """The model of a checkpoint folder, weights only (no optimizer state): a version 2 checkpoint, or a
    version 1 one (its model.safetensors and config.json; its train_state.pt pickle is never opened).
    max_bytes: refuse a model that needs more memory (None: half of this machine's RAM)."""
    path, device = as_path(path), check_device(device)
    meta = read_checkpoint_config(path, versions=(1, CHECKPOINT_VERSION))
    return _load_model(path, meta, device, max_bytes)


def load_mini_companion(device: torch.device | str = "cpu") -> tuple[TinyLM, BPETokenizer]:
    """The mini companion the course's command-line run trained on Shakespeare's works: (model, tokenizer),
    read from tinylm/data/mini_companion (the run's last checkpoint, weights only; its log:
    tinylm/data/runs/companion.log)."""
    return load_weights(MINI_COMPANION, device), BPETokenizer.load(MINI_COMPANION / TOKENIZER)


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu", max_bytes: int | None = None) -> Checkpoint:
    """Read a checkpoint folder written by `save_checkpoint` (weights, settings, optimizer and RNG state).

    Every file is checked (formats, fields, shapes, finite values, the same step and save_id) before the
    model is built; a ValueError names the file and what is wrong with it. device: 'cpu', 'cuda', ...;
    max_bytes: refuse a model that needs more memory (None: half of this machine's RAM).
    """
    path, device = as_path(path), check_device(device)
    meta = read_checkpoint_config(path)
    model = _load_model(path, meta, device, max_bytes)
    state = _read_state(path, meta, dict(model.named_parameters()))
    f = checkpoint_file(path, STATE)
    history = History(**{h.name: state.pop(f"history.{h.name}").tolist() for h in fields(History)
                         if f"history.{h.name}" in state})   # history.time: absent before the --minutes budget
    for a, b in (("step", "loss"), ("step", "lr"), ("step", "grad_norm"), ("val_step", "val_loss"),
                 ("val_step", "val_ppl"), ("step", "time")):
        if len(getattr(history, a)) != len(getattr(history, b)) and not (b == "time" and not history.time):
            raise ValueError(f"{f}: history.{a} and history.{b} must have the same length")
    optimizer_state: dict[str, dict[str, torch.Tensor]] = {}
    for key in [k for k in state if k.split(".")[0] in ADAM_KEYS]:
        kind, name = key.split(".", 1)
        optimizer_state.setdefault(name, {})[kind] = state.pop(key)
    for name, tensors in optimizer_state.items():
        if set(tensors) != set(ADAM_KEYS):
            raise ValueError(f"{f}: the optimizer state of {name} has {sorted(tensors)}, expected {list(ADAM_KEYS)}")
    return Checkpoint(model=model, train_config=TrainConfig(**meta["train"]), step=meta["step"],
                      optimizer_state=optimizer_state, sampler_state=state["rng.sampler"],
                      torch_rng_state=state["rng.torch"], history=history, extra=meta["extra"])


def _open(f: Path, meta: dict):
    """safe_open of one of the checkpoint's safetensors files, its step and save_id checked against config.json."""
    if not f.is_file():
        raise ValueError(f"{f.parent} is not a complete checkpoint: {f.name} is missing")
    try:
        handle = safe_open(str(f), framework="pt")
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{f} is not a readable safetensors file ({e}); the checkpoint is damaged") from None
    stamp = handle.metadata() or {}
    if "save_id" in meta and (stamp.get("save_id"), stamp.get("step")) != (meta["save_id"], str(meta["step"])):
        raise ValueError(f"{f} does not belong with config.json: it is from step {stamp.get('step')} "
                         f"(save {stamp.get('save_id')}), config.json from step {meta['step']} "
                         f"(save {meta['save_id']}); files of two saves were mixed, so this checkpoint cannot "
                         "be trusted")
    return handle


def _load_model(path: Path, meta: dict, device: torch.device, max_bytes: int | None) -> TinyLM:
    """Check model.safetensors' names, shapes and dtypes against config.json's model, then build and fill."""
    cfg = Config.from_dict(meta["model"])
    f = checkpoint_file(path, WEIGHTS)
    with _open(f, meta) as st:
        names = set(st.keys())
        # at least the MLP's matrices in every dense block and expert: a hostile n_layers cannot make us list 10**9
        (dense, moe), matrices = layer_counts(cfg), (3 if cfg.mlp == "swiglu" else 2)
        at_least = matrices * (dense + moe * cfg.n_experts)
        expected = state_size(cfg)[0] if at_least <= len(names) else None
        if expected != len(names):
            raise ValueError(f"{f} holds {len(names)} tensors, config.json's model needs "
                             f"{expected if expected else f'at least {at_least:,}'}; the weights and the config do "
                             "not belong together")
        shapes = weight_shapes(cfg)
        if cfg.tie_embeddings:       # one tensor, stored under either name (version 1 kept either)
            tied = "lm_head.weight" if "lm_head.weight" in names else "embed_tokens.weight"
            shapes = {(tied if n == "embed_tokens.weight" else n): s for n, s in shapes.items()
                      if n != "lm_head.weight"}
        if names != set(shapes):
            missing, unknown = sorted(set(shapes) - names), sorted(names - set(shapes))
            raise ValueError(f"{f} does not match config.json's model: missing {missing[:5]}, unexpected "
                             f"{unknown[:5]}")
        for name, shape in shapes.items():
            piece = st.get_slice(name)
            if tuple(piece.get_shape()) != shape or piece.get_dtype() not in FLOAT_DTYPES:
                raise ValueError(f"{f}: tensor {name} is {piece.get_dtype()} {tuple(piece.get_shape())}, "
                                 f"config.json's model needs a float tensor of shape {shape}")
        check_memory(str(checkpoint_file(path, CONFIG)), cfg, max_bytes)
        model = TinyLM(cfg, max_bytes).to(device)   # every check passed: the sizes are those of the file on disk
        weights = model.state_dict()     # tensors sharing the model's storage: copy_ fills the model
        for name in shapes:
            t = st.get_tensor(name)
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{f}: tensor {name} holds NaN or inf; the run that wrote it had diverged")
            weights[name].copy_(t)       # a tied lm_head.weight (version 1) is the embedding
    return model


def _read_state(path: Path, meta: dict, params: dict[str, torch.nn.Parameter]) -> dict[str, torch.Tensor]:
    """train_state.safetensors' tensors, every name, shape and dtype checked."""
    f = checkpoint_file(path, STATE)
    rng_shape = tuple(torch.Generator().get_state().shape)
    with _open(f, meta) as st:
        names = set(st.keys())
        required = {"rng.sampler", "rng.torch", *(f"history.{h.name}" for h in fields(History) if h.name != "time")}
        if required - names:
            raise ValueError(f"{f} misses {sorted(required - names)}")
        for name in sorted(names - required - {"history.time"}):
            kind, _, param = name.partition(".")
            if kind not in ADAM_KEYS or param not in params:
                raise ValueError(f"{f}: unexpected tensor {name!r}; expected AdamW's {ADAM_KEYS} of the model's "
                                 "parameters, rng.* and history.*")
        state = {}
        for name in sorted(names):
            piece = st.get_slice(name)
            shape, dtype = tuple(piece.get_shape()), piece.get_dtype()
            kind, _, param = name.partition(".")
            if name.startswith("rng."):
                want = (rng_shape, ("U8",))
            elif kind == "history":
                want = (shape if len(shape) == 1 else (-1,), ("I64",) if param in HISTORY_INTS else ("F64",))
            elif kind == "step":
                want = ((), ("F32", "F64", "I64"))
            else:
                want = (tuple(params[param].shape), FLOAT_DTYPES)
            if shape != want[0] or dtype not in want[1]:
                raise ValueError(f"{f}: tensor {name!r} is {dtype} {shape}, expected {'/'.join(want[1])} "
                                 f"{'1-D' if want[0] == (-1,) else want[0]}")
            t = st.get_tensor(name)
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise ValueError(f"{f}: tensor {name!r} holds NaN or inf")
            state[name] = t
    for name in ("rng.sampler", "rng.torch"):
        try:
            torch.Generator().set_state(state[name])
        except RuntimeError as e:
            raise ValueError(f"{f}: tensor {name!r} is not a valid random generator state ({e})") from None
    if any(not math.isfinite(float(t)) or float(t) < 0 for k, t in state.items() if k.startswith("step.")):
        raise ValueError(f"{f}: an AdamW step count is negative")
    return state
