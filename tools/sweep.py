"""Train configurations for a wall-clock budget on Shakespeare's train works; log validation bits per byte.

    python tools/sweep.py --minutes 2 --configs v512 v1024 v2048 v4096 --log runs/vocab.log    # vocabulary
    python tools/sweep.py --minutes 3 --configs d192x4 d256x4 d256x6 --log runs/sweep.log      # shapes
    python tools/sweep.py --minutes 3 --configs base layernorm nope gelu --log runs/variants.log   # blocks
    python tools/sweep.py --minutes 3 --configs norm=layernorm+lr=5e-3 --log runs/one.log      # any field

Each configuration is a name in CONFIGS (model fields of `Config` and run fields of `TrainConfig`), or a
field=value of either (VARIANTS: the other blocks, for tools/ablate.py); all are
trained one after the other in this process, on the same data, with the same seed and threads, for the same
minutes (`TrainConfig.minutes`: warmup, then a cosine over the budget), and scored on the validation works
(`tinylm.corpus.VAL_WORKS`) with `tinylm.train.measure.text_bits_per_byte`. Tokenizers are trained once per
vocabulary size on the train works and kept in --cache. The log holds one line per run and a table at the
end; run it alone on the machine (a timed run beside another job measures the job).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tinylm import corpus  # noqa: E402
from tinylm.config import Config  # noqa: E402
from tinylm.params import count_params  # noqa: E402
from tinylm.tokenizer import BPETokenizer  # noqa: E402
from tinylm.train.loop import build_model, train  # noqa: E402
from tinylm.train.measure import cpu_class, matmul_peak_flops, text_bits_per_byte, throughput  # noqa: E402
from tinylm.train.settings import TrainConfig  # noqa: E402
from tinylm.variants import gelu_ffn_dim  # noqa: E402

# the model every configuration starts from (QK-norm, tied head, 2 KV heads), and the run's settings
BASE_MODEL = dict(vocab_size=1024, dim=192, n_layers=4, n_heads=6, n_kv_heads=2, ffn_dim=512, max_seq_len=256,
                  qk_norm=True)
BASE_RUN = dict(batch_size=16, seq_len=128, lr=3e-3, min_lr=3e-4, warmup=50, weight_decay=0.1, eval_every=10**9,
                eval_batches=4, seed=0)


def shape(dim: int, layers: int, heads: int, ffn: int, **more) -> dict:
    return dict(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=max(1, heads // 3), ffn_dim=ffn, **more)


CONFIGS: dict[str, dict] = {
    # vocabulary, at the base shape
    **{f"v{v}": dict(vocab_size=v) for v in (256, 512, 1024, 2048, 4096)},
    # width x depth (ffn ~ 8/3 x width, a multiple of 64; head_dim 32)
    "d128x4": shape(128, 4, 4, 384), "d192x4": shape(192, 4, 6, 512), "d192x6": shape(192, 6, 6, 512),
    "d256x4": shape(256, 4, 8, 704), "d256x3": shape(256, 3, 8, 704), "d160x5": shape(160, 5, 5, 448),
    "d256x6": shape(256, 6, 8, 704), "d320x4": shape(320, 4, 10, 832), "d128x8": shape(128, 8, 4, 384),
    "d128x3": shape(128, 3, 4, 384), "d96x4": shape(96, 4, 3, 256), "d64x4": shape(64, 4, 2, 192), "d128x2": shape(128, 2, 4, 384),
    # the IsoFLOP runs' smallest (tools/isoflop.py)
    "d48x4": shape(48, 4, 2, 128), "d32x4": shape(32, 4, 1, 96), "d24x4": shape(24, 4, 1, 64),
    "d16x4": shape(16, 4, 1, 48),
    # the run's settings at the base shape
    "lr2e-3": dict(lr=2e-3, min_lr=2e-4), "lr5e-3": dict(lr=5e-3, min_lr=5e-4), "lr8e-3": dict(lr=8e-3, min_lr=8e-4),
    "b8": dict(batch_size=8), "b32": dict(batch_size=32), "t64": dict(seq_len=64, batch_size=32),
    "t256": dict(seq_len=256, batch_size=8),
    # another seed (model init and batches), for the run-to-run spread; dropout against overfitting
    "s1": dict(seed=1), "s2": dict(seed=2), "drop0.1": dict(dropout=0.1), "drop0.2": dict(dropout=0.2),
}


# the blocks of the ablations (issue 23), each one swap from a base model (RMSNorm, pre-norm, RoPE, SwiGLU,
# grouped KV heads, QK-norm, tied head); the GELU MLP is as wide as has SwiGLU's parameters
def variants(model: dict) -> dict[str, dict]:
    """Each ablation's changes to the model fields `model` (dim, ffn_dim, n_heads as Config's)."""
    dim, ffn, heads = model["dim"], model["ffn_dim"], model["n_heads"]
    return {
        "base": {}, "layernorm": dict(norm="layernorm"), "nonorm": dict(norm="none"),
        "postnorm": dict(norm_placement="post"), "learnedpos": dict(positions="learned"),
        "nope": dict(positions="none"), "gelu": dict(mlp="gelu", ffn_dim=gelu_ffn_dim(dim, ffn)),
        "kv1": dict(n_kv_heads=1), "kvall": dict(n_kv_heads=heads), "noqknorm": dict(qk_norm=False),
        "untied": dict(tie_embeddings=False),
        "gpt2": dict(norm="layernorm", positions="learned", mlp="gelu", bias=True,
                     ffn_dim=gelu_ffn_dim(dim, ffn, bias=True)),
    }


VARIANTS: dict[str, dict] = variants(BASE_MODEL)
CONFIGS |= VARIANTS


def parse_value(field: str, text: str):
    """'5e-3' -> 5e-3 for a float field, '2' -> 2, 'true' -> True, else the text (a choice such as 'layernorm')."""
    kinds = {f: type(v) for f, v in {**Config().to_dict(), **TrainConfig().__dict__}.items() if v is not None}
    if field not in Config.__dataclass_fields__ and field not in TrainConfig.__dataclass_fields__:
        raise ValueError(f"unknown field {field!r} in {field}={text}; fields of Config and TrainConfig: "
                         f"{sorted({*Config.__dataclass_fields__, *TrainConfig.__dataclass_fields__})}")
    kind = {"head_dim": int, "minutes": float}.get(field) or kinds.get(field, str)
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{field} takes true or false, got {text!r}")
        return text.lower() == "true"
    try:
        return kind(float(text)) if kind is int and "e" in text.lower() else kind(text)
    except ValueError:
        raise ValueError(f"{field}={text}: {text!r} is not a {kind.__name__}") from None


def parse_name(name: str) -> dict:
    """A name of CONFIGS or a field=value, or several joined by '+' (later ones win): 'd256x4+v2048+lr=5e-3'."""
    changes: dict = {}
    for part in name.split("+"):
        if "=" in part:
            field, text = part.split("=", 1)
            changes[field] = parse_value(field, text)
            continue
        if part not in CONFIGS:
            raise ValueError(f"unknown configuration {part!r}; choose from {sorted(CONFIGS)}, or write field=value")
        changes |= CONFIGS[part]
    return changes


def base_model(base: str) -> dict:
    """The model fields of BASE_MODEL with a name's model fields over them ('' is BASE_MODEL itself)."""
    changes = parse_name(base) if base else {}
    return {**BASE_MODEL, **{f: v for f, v in changes.items() if f in Config.__dataclass_fields__}}


def tokenizer_for(vocab: int, text: str, cache: Path) -> BPETokenizer:
    path = cache / f"shakespeare_bpe_{vocab}.json"
    if path.is_file():
        return BPETokenizer.load(path)
    tok = BPETokenizer.train(text, vocab)
    cache.mkdir(parents=True, exist_ok=True)
    tok.save(path)
    return tok


def configuration(name: str, minutes: float | None, steps: int | None = None) -> tuple[Config, TrainConfig]:
    """The model and the run a name stands for, trained for minutes (or, with minutes None, for steps)."""
    changes = parse_name(name)
    model_fields = {f: changes[f] for f in changes if f in Config.__dataclass_fields__}
    run_fields = {f: changes[f] for f in changes if f in TrainConfig.__dataclass_fields__}
    return (Config(**{**BASE_MODEL, **model_fields}),
            TrainConfig(**{**BASE_RUN, **run_fields, "steps": 10**9 if steps is None else steps,
                           "minutes": minutes}))


def run_one(name: str, minutes: float | None, texts: dict[str, str], cache: Path, peak: float,
            steps: int | None = None) -> dict:
    cfg, tc = configuration(name, minutes, steps)
    tok = tokenizer_for(cfg.vocab_size, texts["train"], cache)
    train_ids = torch.tensor(tok.encode(texts["train"]), dtype=torch.long)
    val_ids = torch.tensor(tok.encode(texts["val"]), dtype=torch.long)
    model = build_model(cfg, tc.seed)
    history = train(model, train_ids, val_ids, tc, progress=False)
    bpb, n_bytes, n_tokens = text_bits_per_byte(model, tok, texts["val"], tc.seq_len, 64)
    tokens = history.step[-1] * tc.batch_size * tc.seq_len
    tok_s = tokens / history.time[-1]
    _, mfu = throughput(cfg, tc.seq_len, tok_s, peak)
    return {"name": name, "params": count_params(cfg).total, "vocab": cfg.vocab_size, "dim": cfg.dim,
            "layers": cfg.n_layers, "heads": f"{cfg.n_heads}/{cfg.n_kv_heads}", "batch": tc.batch_size,
            "seq_len": tc.seq_len, "lr": tc.lr, "steps": history.step[-1], "seconds": round(history.time[-1], 1),
            "tokens": tokens, "epochs": round(tokens / len(train_ids), 2), "tokens_per_s": round(tok_s),
            "mfu": round(mfu, 3), "train_bytes_per_token": round(len(texts["train"].encode()) / len(train_ids), 3),
            "val_bytes_per_token": round(n_bytes / n_tokens, 3), "last_train_loss": round(history.loss[-1], 3),
            "val_bpb": round(bpb, 4), "curve": curve(history)}


def curve(history, every: int = 5) -> dict:
    """The training curve, every `every`-th step and the last: steps, seconds and that batch's loss."""
    keep = [i for i, s in enumerate(history.step) if s % every == 0 or i == len(history.step) - 1]
    return {"step": [history.step[i] for i in keep], "seconds": [round(history.time[i], 2) for i in keep],
            "loss": [round(history.loss[i], 4) for i in keep]}


def table(rows: list[dict]) -> str:
    head = (f"{'config':24s} {'params':>9s} {'V':>5s} {'B x T':>8s} {'lr':>7s} {'steps':>6s} {'epochs':>6s} "
            f"{'tok/s':>7s} {'MFU':>5s} {'B/tok':>5s} {'val bpb':>8s}")
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: r["val_bpb"]):
        lines.append(f"{r['name']:24s} {r['params']:>9,} {r['vocab']:>5} {r['batch']:>3}x{r['seq_len']:<4} "
                     f"{r['lr']:>7.0e} {r['steps']:>6} {r['epochs']:>6.2f} {r['tokens_per_s']:>7,} {r['mfu']:>5.0%} "
                     f"{r['val_bytes_per_token']:>5.2f} {r['val_bpb']:>8.3f}")
    return "\n".join(lines)


def header(tool: str, argv: list[str], threads: int, peak: float) -> str:
    """The log's '#' lines before the runs: the command, and the machine it ran on."""
    return (f"# {' '.join(['python', tool, *argv])}\n"
            f"# {time.strftime('%Y-%m-%d %H:%M')} torch {torch.__version__}, {threads} threads, "
            f"CPU {cpu_class()}, {os.cpu_count()} cores, load "
            f"{os.getloadavg()[0]:.1f}; fp32 matmul peak {peak / 1e9:.0f} GFLOP/s\n")


def start(tool: str, argv: list[str] | None, threads: int, log_path: Path) -> tuple[dict[str, str], float, TextIO]:
    """What every run tool does first: set the threads, read the train and val texts, measure the matmul peak,
    and open the log (appended) with its header -> (texts, peak, the open log)."""
    torch.set_num_threads(threads)
    texts = {split: corpus.shakespeare_text(split) for split in ("train", "val")}
    peak = matmul_peak_flops()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a")
    log.write(header(tool, argv if argv is not None else sys.argv[1:], threads, peak))
    log.flush()
    return texts, peak, log


def resumable_arguments(p: argparse.ArgumentParser, threads: int) -> None:
    """The options of the run tools that resume from their log (tools/ablate.py, tools/isoflop.py)."""
    p.add_argument("--threads", type=int, default=threads, help=f"torch threads (default {threads})")
    p.add_argument("--log", type=Path, required=True, help="log file, appended to and resumed from")
    p.add_argument("--cache", type=Path, default=Path("runs/tokenizers"), help="tokenizers, one per vocabulary")
    p.add_argument("--dry-run", action="store_true", help="print the runs still to do, and run none")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", required=True,
                   help=f"names or field=value (join with +): {', '.join(CONFIGS)}")
    p.add_argument("--minutes", type=float, default=3.0, help="wall-clock budget of each run (default 3)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--log", type=Path, required=True, help="log file (appended: one JSON line per run, then a table)")
    p.add_argument("--cache", type=Path, default=Path("runs/tokenizers"), help="tokenizers, one per vocabulary")
    args = p.parse_args(argv)
    try:
        for name in args.configs:
            parse_name(name)
    except ValueError as e:
        p.error(str(e))
    texts, peak, log = start("tools/sweep.py", argv, args.threads, args.log)
    with log:
        rows = []
        for name in args.configs:
            row = run_one(name, args.minutes, texts, args.cache, peak)
            row["load"] = round(os.getloadavg()[0], 1)
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)
        log.write("\n".join("# " + line for line in table(rows).splitlines()) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
