"""LoRA (Hu et al., 2021): a frozen model plus a small trainable low-rank update on chosen linear layers.

    y = W x + (alpha / r) · B A x          W (out, in) frozen;  A (r, in) and B (out, r) trained, r << in, out

    x (..., in) ──► W ─────────────────────────────────► + ──► y (..., out)
                └──► A ──► (..., r) ──► B ──► × alpha/r ─┘

Parameters: r · (in + out) per wrapped layer instead of in · out (SmolLM2's q_proj, 576 x 576: 331,776
weights; with r = 8, 9,216 trainable ones).

Initialisation: B = 0, so B A = 0 and the adapted model at step 0 *is* the base model, bit for bit. A is random
(Kaiming-uniform, `init="kaiming"`, as the reference implementation microsoft/LoRA and Hugging Face PEFT do;
or Gaussian with std 1/r, `init="gaussian"`, PEFT's other option; the paper says "a random Gaussian
initialization for A"). With B = 0 the gradient of A is zero at first (dL/dA = alpha/r · Bᵀ g xᵀ), but B's is
not (dL/dB = alpha/r · g (A x)ᵀ): B moves first, then A follows. Both zero would never move; B random would
start from a damaged model.

Merging: W' = W + (alpha / r) B A is one matrix of W's shape, so a merged model runs at the base's speed.
`unmerge_lora` puts the original W back (kept aside while merged: bit for bit, not W' - BA, which rounds).
`adapter_disabled(model)` runs the base model itself: the reference model preference tuning needs.

Saved adapters are safetensors files of the A and B matrices only (a few MB), with rank, alpha, the target
modules and the base model's config in the metadata; `load_adapter` refuses a file that does not fit.
"""

from __future__ import annotations

import hashlib
import json
import math
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from ._checks import check_int, check_number, check_one_of
from ._loading import read_json, unique_keys
from .config import Config
from .model import TinyLM
from .params import count_params
from .quantize import Int8Linear

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
TARGET_GROUPS = {"attention": ATTENTION, "mlp": MLP, "all": ATTENTION + MLP}
INITS = ("kaiming", "gaussian")
ADAPTER_FORMAT, ADAPTER_VERSION = "tinylm-lora", 1
META_KEYS = ("format", "version", "rank", "alpha", "targets", "init", "model")
UNCHECKED_FIELDS = ("max_seq_len", "dropout")   # shorter RoPE tables, or dropout, leave the adapter fitting


def parse_targets(targets: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Module names to wrap: "q_proj,v_proj", a group ("attention", "mlp", "all") or a list of names."""
    names = targets.split(",") if isinstance(targets, str) else targets
    if not isinstance(names, (tuple, list)) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"targets must name linear layers, e.g. 'q_proj,v_proj' or 'all', got {targets!r}")
    out: list[str] = []
    for name in (n.strip() for n in names):
        for one in TARGET_GROUPS.get(name, (name,)):
            if one not in TARGET_GROUPS["all"]:
                raise ValueError(f"unknown LoRA target {one!r}; choose among {', '.join(TARGET_GROUPS['all'])} "
                                 f"or a group: {', '.join(TARGET_GROUPS)}")
            if one not in out:
                out.append(one)
    return tuple(m for m in TARGET_GROUPS["all"] if m in out)    # the model's order, whatever the spelling


# alpha / rank multiplies B A; LoRA's papers use alpha from 1 to a few times the rank. Above this the update
# of a trained adapter overflows float32 (alpha 1e300 gave inf logits), so such a file is refused.
MAX_ALPHA = 1e4


@dataclass(frozen=True)
class LoRAConfig:
    """What an adapter is: its rank, scale and the layers it wraps (saved in every adapter file)."""

    rank: int = 8                         # r: the inner width of B A
    alpha: float = 16.0                   # the update is scaled by alpha / rank
    targets: tuple[str, ...] = TARGET_GROUPS["all"]  # module names wrapped in every block (parse_targets)
    init: str = "kaiming"                 # A's initialisation: "kaiming" (uniform) or "gaussian" (std 1/r)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rank", check_int("rank", self.rank, low=1))
        object.__setattr__(self, "alpha", float(check_number("alpha", self.alpha, 0, MAX_ALPHA, low_open=True,
                                                             hint=" (alpha / rank scales the update)")))
        object.__setattr__(self, "targets", parse_targets(self.targets))
        check_one_of("init", self.init, INITS)

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


class LoRALinear(nn.Module):
    """A frozen linear layer `base` (nn.Linear, or quantize's Int8Linear) plus (alpha / r) · B A.

    x (..., in) -> (..., out). enabled=False, or merged into base, gives base(x) alone.
    """

    def __init__(self, base: nn.Module, config: LoRAConfig, generator: torch.Generator | None = None):
        super().__init__()
        if not isinstance(base, (nn.Linear, Int8Linear)) or getattr(base, "bias", None) is not None:
            raise ValueError(f"LoRA wraps bias-free nn.Linear or Int8Linear layers, got {base!r}")
        device = base.weight.device
        self.base = base.requires_grad_(False)
        self.rank, self.scaling = config.rank, config.scaling
        self.lora_A = nn.Parameter(torch.empty(config.rank, base.in_features, device=device))   # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, config.rank, device=device))  # (out, r)
        with torch.no_grad():
            if config.init == "kaiming":          # what nn.Linear does to its own weight, and microsoft/LoRA
                bound = 1 / math.sqrt(base.in_features)   # kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(in), 1/sqrt(in))
                self.lora_A.uniform_(-bound, bound, generator=generator)
            else:
                self.lora_A.normal_(0.0, 1 / config.rank, generator=generator)
        self.enabled = True
        self._original: torch.Tensor | None = None   # base's own weight while merged

    @property
    def merged(self) -> bool:
        return self._original is not None

    def delta_weight(self) -> torch.Tensor:
        """(alpha / r) · B A: (out, in), what merging adds to W."""
        return self.scaling * (self.lora_B @ self.lora_A)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)                                                     # (..., out)
        if not self.enabled or self.merged:
            return y
        h = F.linear(x.to(self.lora_A.dtype), self.lora_A)                   # (..., r)
        return y + (self.scaling * F.linear(h, self.lora_B)).to(y.dtype)    # (..., out)

    def merge(self) -> None:
        """W <- W + (alpha / r) B A, keeping the original W aside for `unmerge`."""
        if self.merged:
            return
        if not isinstance(self.base, nn.Linear):
            raise ValueError("cannot merge LoRA into int8 weights (W + (alpha/r) B A would need quantizing again): "
                             "load the adapter into the fp32 model, remove_lora(model, merge=True), then quantize")
        w = self.base.weight
        self._original = w.data
        w.data = (w.data.float() + self.delta_weight().detach()).to(w.dtype)

    def unmerge(self) -> None:
        """Put the original W back exactly."""
        if self.merged:
            self.base.weight.data = self._original
            self._original = None

    def extra_repr(self) -> str:
        return f"rank={self.rank}, scaling={self.scaling:g}, enabled={self.enabled}, merged={self.merged}"


# ---------------------------------------------------------------------------------------------
# The whole model
# ---------------------------------------------------------------------------------------------
def _check_model(model: TinyLM) -> None:
    if not isinstance(model, TinyLM):
        raise ValueError(f"model must be a tinylm.TinyLM, got {type(model).__name__}")


def lora_layers(model: TinyLM) -> dict[str, LoRALinear]:
    """The wrapped layers by name ("layers.0.self_attn.q_proj", ...), in the model's order; {} if none."""
    _check_model(model)
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def lora_config(model: TinyLM) -> LoRAConfig | None:
    """The LoRAConfig of the model's adapter (None: no adapter)."""
    layers = lora_layers(model)
    return getattr(model, "_lora_config", None) if layers else None


def add_lora(model: TinyLM, config: LoRAConfig | None = None, seed: int = 0) -> TinyLM:
    """Freeze every weight of model and wrap config.targets in every block with LoRALinear; return model.

    seed: A's random initialisation (a generator of its own: the global RNG is untouched). The targets are
    found by name inside each block, experts of a mixture too (an MoE router is not a target).
    """
    _check_model(model)
    config = config or LoRAConfig()
    if not isinstance(config, LoRAConfig):
        raise ValueError(f"config must be a tinylm.lora.LoRAConfig, got {type(config).__name__}")
    if lora_layers(model):
        raise ValueError("model already has a LoRA adapter; remove it first (remove_lora) or load into it")
    generator = torch.Generator(device=model.embed_tokens.weight.device)
    generator.manual_seed(check_int("seed", seed, low=0))
    found = _target_linears(model, config.targets)
    check_lora_rank(model, config)                  # before anything is allocated: A is (rank, in), B (out, rank)
    model.requires_grad_(False)
    for _, parent, name, child in found:
        setattr(parent, name, LoRALinear(child, config, generator))
    model._lora_config = config
    return model


def _target_linears(model: TinyLM, targets: tuple[str, ...]) -> list[tuple[str, nn.Module, str, nn.Module]]:
    """(full name, parent, attribute, layer) of every linear layer of the blocks named in targets, in the
    model's order; ValueError if a target names no layer."""
    linears = [(".".join(filter(None, (f"layers.{i}", path, name))), parent, name, child)
               for i, block in enumerate(model.layers) for path, parent in block.named_modules()
               for name, child in parent.named_children() if isinstance(child, (nn.Linear, Int8Linear))]
    found = [linear for linear in linears if linear[2] in targets]
    missing = sorted(set(targets) - {name for _, _, name, _ in found})
    if missing:
        raise ValueError(f"the model has no linear layer named {missing[0]!r} to adapt; its blocks hold "
                         f"{sorted({name for _, _, name, _ in linears})}")
    return found


def _narrowest(model: TinyLM, targets) -> tuple[int, str, nn.Module]:
    """(min(in, out), name, layer) of the first narrowest layer named in targets."""
    _check_model(model)
    found = _target_linears(model, parse_targets(targets))
    name, _, _, layer = min(found, key=lambda f: min(f[3].in_features, f[3].out_features))   # the first such
    return min(layer.in_features, layer.out_features), name, layer


def max_lora_rank(model: TinyLM, targets: str | tuple[str, ...] | list[str] = "all") -> int:
    """The largest useful rank for these targets: min(in, out) of the narrowest one (B A has at most that rank)."""
    return _narrowest(model, targets)[0]


def check_lora_rank(model: TinyLM, config: LoRAConfig, name: str = "rank") -> int:
    """config.rank, if it is at most `max_lora_rank(model, config.targets)`; else a ValueError naming the layer
    (checked before any A or B is allocated: a rank of 10**9 would ask for gigabytes)."""
    width, layer_name, layer = _narrowest(model, config.targets)
    return check_int(name, config.rank, 1, width, hint=f" (at most the narrowest targeted layer's min(in, out): "
                     f"{layer_name} is {layer.in_features} -> {layer.out_features})")


def remove_lora(model: TinyLM, merge: bool = False) -> TinyLM:
    """Put the base layers back (with merge=True: W + (alpha/r) B A, the adapter baked in); return model.

    The result is a plain TinyLM again, e.g. to `quantize` it for fast chat. Its weights stay frozen.
    """
    for name, layer in lora_layers(model).items():
        if merge:
            layer.merge()
            layer._original = None            # keep the merged weight
        else:
            layer.unmerge()
        parent = model.get_submodule(name.rpartition(".")[0])
        setattr(parent, name.rpartition(".")[2], layer.base)
    model.__dict__.pop("_lora_config", None)
    return model


def _layers_or_error(model: TinyLM) -> dict[str, LoRALinear]:
    layers = lora_layers(model)
    if not layers:
        raise ValueError("model has no LoRA adapter: add one with add_lora(model, config) or load_adapter(model, path)")
    return layers


def merge_lora(model: TinyLM) -> TinyLM:
    """Merge every adapter layer into its base weight (inference at the base's cost); undo with unmerge_lora."""
    for layer in _layers_or_error(model).values():
        layer.merge()
    return model


def unmerge_lora(model: TinyLM) -> TinyLM:
    """Undo merge_lora: every base weight is exactly the original again."""
    for layer in _layers_or_error(model).values():
        layer.unmerge()
    return model


def set_adapter_enabled(model: TinyLM, enabled: bool) -> TinyLM:
    """Turn the adapter on or off (off: the model computes exactly the base model's logits)."""
    layers = _layers_or_error(model)
    if any(layer.merged for layer in layers.values()):
        raise ValueError("the adapter is merged into the weights: unmerge_lora(model) before turning it off")
    for layer in layers.values():
        layer.enabled = bool(enabled)
    return model


@contextmanager
def adapter_disabled(model: TinyLM) -> Iterator[TinyLM]:
    """`with adapter_disabled(model):` the base model (the reference model of preference tuning)."""
    layers = _layers_or_error(model)
    before = {name: layer.enabled for name, layer in layers.items()}
    set_adapter_enabled(model, False)
    try:
        yield model
    finally:
        for name, layer in layers.items():
            layer.enabled = before[name]


def count_trainable(model: TinyLM) -> tuple[int, int]:
    """(trainable parameters, all parameters): the base model's count (`count_params`, whatever its weight
    format) plus the adapter's."""
    _check_model(model)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    adapter = sum(t.numel() for t in adapter_state_dict(model).values()) if lora_layers(model) else 0
    return trainable, count_params(model.cfg).total + adapter


# ---------------------------------------------------------------------------------------------
# Saving and loading
# ---------------------------------------------------------------------------------------------
def adapter_state_dict(model: TinyLM) -> dict[str, torch.Tensor]:
    """The adapter's tensors by name: "layers.0.self_attn.q_proj.lora_A" (r, in), "....lora_B" (out, r)."""
    out = {}
    for name, layer in _layers_or_error(model).items():
        out[f"{name}.lora_A"] = layer.lora_A.detach()
        out[f"{name}.lora_B"] = layer.lora_B.detach()
    return out


def _model_fields(model: TinyLM) -> dict:
    return {k: v for k, v in model.cfg.to_dict().items() if k not in UNCHECKED_FIELDS}


def save_adapter(model: TinyLM, path: str | Path, start: str | Path | None = None) -> Path:
    """Write the adapter (A and B of every wrapped layer, fp32) to a safetensors file; return its path.

    The metadata holds the format, rank, alpha, targets, init and the base model's config (JSON strings), and
    for an adapter trained on a merged start (DPO or GRPO from an SFT adapter) that start's file and SHA-256,
    so `adapter_chain` can stack it first. Refuses (ValueError) weights that are not finite.
    """
    config = lora_config(model)
    tensors = {n: t.float().contiguous().cpu() for n, t in adapter_state_dict(model).items()}
    for name, t in tensors.items():
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"refusing to save the adapter: {name} holds NaN or inf (the training diverged)")
    meta = {"format": ADAPTER_FORMAT, "version": str(ADAPTER_VERSION), "rank": str(config.rank),
            "alpha": repr(config.alpha), "targets": json.dumps(list(config.targets)), "init": config.init,
            "model": json.dumps(_model_fields(model), sort_keys=True)}
    if start is not None:
        meta["start"] = json.dumps({"file": str(start), "sha256": _sha256(Path(start))})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.replace(path)                                    # never a half-written adapter under the real name
    return path


def read_adapter_config(path: str | Path) -> tuple[LoRAConfig, dict]:
    """(LoRAConfig, the base model's config fields) from an adapter file's metadata; ValueError if it is
    not a tinylm LoRA adapter or its metadata is incomplete or wrong."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not an adapter file ({'a folder' if path.exists() else 'no such file'})")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{path} is not a readable safetensors file ({e})") from None
    if meta.get("format") != ADAPTER_FORMAT:
        raise ValueError(f"{path}: metadata 'format' must be {ADAPTER_FORMAT!r}, got {meta.get('format')!r}; "
                         "is this a tinylm LoRA adapter (tinylm.lora.save_adapter)?")
    if meta.get("version") != str(ADAPTER_VERSION):
        raise ValueError(f"{path}: adapter version {meta.get('version')!r}; this tinylm reads {ADAPTER_VERSION}")
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ValueError(f"{path}: the metadata misses {missing}")
    try:
        rank, alpha = int(meta["rank"]), float(meta["alpha"])
        targets = json.loads(meta["targets"], object_pairs_hook=unique_keys)
        fields = json.loads(meta["model"], object_pairs_hook=unique_keys)   # a key given twice is refused
        config = LoRAConfig(rank=rank, alpha=alpha, targets=tuple(targets), init=meta["init"])
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path}: the metadata is not a valid LoRA configuration ({e})") from None
    except RecursionError:                      # JSON nested thousands deep
        raise ValueError(f"{path}: the metadata's JSON is nested too deep to be an adapter's") from None
    if not isinstance(fields, dict):
        raise ValueError(f"{path}: metadata 'model' must be a JSON object of the base model's Config fields")
    return config, fields


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _start_of(path: Path) -> tuple[str, str | None] | None:
    """(file, sha256 or None) of the start an adapter was trained on: its metadata's 'start', or for a file
    saved before that key, the run's summary.json beside it ('start_adapter'); None for an adapter of the base."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    if "start" in meta:
        try:
            start = json.loads(meta["start"])
            return str(start["file"]), str(start["sha256"])
        except (ValueError, TypeError, KeyError, RecursionError):
            raise ValueError(f"{path}: metadata 'start' must be JSON {{\"file\": ..., \"sha256\": ...}}") from None
    summary = path.parent / "summary.json"
    if summary.is_file():
        try:
            run = read_json(summary, "a fine-tuning run's summary.json")
        except ValueError:                      # not the run's summary: no start named
            return None
        named = run.get("start_adapter") if isinstance(run, dict) else None
        if isinstance(named, str) and named:
            return named, None
    return None


def adapter_chain(path: str | Path, max_depth: int = 8) -> list[Path]:
    """The adapters to merge into the base, in order, for the adapter at `path`: its start first (a DPO or
    GRPO run's adapter applies to the base with its SFT start merged in), then itself. A start's relative path
    is looked up from the working folder, then from the folder that holds the tinylm package (where the
    course's shipped runs name theirs); a missing start, or one whose bytes changed, is a ValueError."""
    chain, path = [], Path(path)
    while True:
        read_adapter_config(path)
        chain.insert(0, path)
        if len(chain) > max_depth:
            raise ValueError(f"{chain[-1]}: more than {max_depth} adapters stacked on one another (a loop?)")
        start = _start_of(path)
        if start is None:
            break
        named, digest = start
        found = next((p for p in (Path(named), Path(__file__).resolve().parent.parent / named) if p.is_file()), None)
        if found is None:
            raise ValueError(f"{path} was trained on top of the adapter {named} (its start, merged into the base), "
                             "which is not here; put that file there, or load the base with it merged first")
        if digest is not None and _sha256(found) != digest:
            raise ValueError(f"{path} was trained on top of {named}, but that file has changed since (SHA-256 "
                             "differs): this adapter would apply to another model")
        path = found
    return chain


def load_adapter(model: TinyLM, path: str | Path) -> TinyLM:
    """Load an adapter file into model: adds LoRA with the file's config if the model has none (else the
    configs must be equal), then copies A and B. Every check runs before anything changes; ValueError
    names what does not fit (the base model's config, a missing module, a shape, non-finite values)."""
    _check_model(model)
    path = Path(path)
    config, fields = read_adapter_config(path)
    have = _model_fields(model)
    # a field the file does not name was added to Config after the adapter was saved: its default then
    fields = {**{k: v for k, v in Config().to_dict().items() if k not in fields and k in have}, **fields}
    wrong = [f"{k} {fields.get(k)!r} (this model: {have.get(k)!r})" for k in sorted(set(have) | set(fields))
             if fields.get(k) != have.get(k)]
    if wrong:
        raise ValueError(f"{path} was trained on another base model: its {', '.join(wrong[:3])}")
    current = lora_config(model)
    if current is not None and current != config:
        raise ValueError(f"{path} is an adapter of {config}, but the model already carries {current}; "
                         "remove_lora(model) first, or load it into a model without an adapter")
    with safe_open(str(path), framework="pt") as f:
        names = set(f.keys())
        tensors = {n: f.get_tensor(n) for n in names}
    expected = {}
    for block in range(model.cfg.n_layers):        # every target of every block (names as add_lora makes them)
        for name, child in model.layers[block].named_modules():
            leaf = name.rpartition(".")[2]
            if leaf in config.targets and isinstance(child, (nn.Linear, Int8Linear, LoRALinear)):
                inner = child.base if isinstance(child, LoRALinear) else child
                full = f"layers.{block}.{name}"
                expected[f"{full}.lora_A"] = (config.rank, inner.in_features)
                expected[f"{full}.lora_B"] = (inner.out_features, config.rank)
    absent, extra = sorted(set(expected) - names), sorted(names - set(expected))
    if absent or extra:
        raise ValueError(f"{path} does not fit this model: missing {absent[:3]}, modules the model lacks {extra[:3]}")
    for name, shape in expected.items():
        t = tensors[name]
        if tuple(t.shape) != shape or not t.is_floating_point():
            raise ValueError(f"{path}: {name} is {t.dtype} {tuple(t.shape)}, this model needs a float tensor {shape}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{path}: {name} holds NaN or inf")
    if any(layer.merged for layer in lora_layers(model).values()):
        raise ValueError("the model's adapter is merged: unmerge_lora(model) before loading another")
    if current is None:
        add_lora(model, config)
    with torch.no_grad():
        for name, layer in lora_layers(model).items():
            layer.lora_A.copy_(tensors[f"{name}.lora_A"])
            layer.lora_B.copy_(tensors[f"{name}.lora_B"])
    return model
