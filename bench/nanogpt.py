"""nanoGPT's CPU recipe beside tinylm's best configuration, on the same text, threads and minutes.

    python bench/bench.py --nanogpt PATH/TO/nanoGPT            # a checkout of karpathy/nanoGPT
    python bench/nanogpt.py PATH/TO/nanoGPT --threads 2        # the same, alone

1. nanoGPT: its README's CPU command (character level, 4 layers x 128, context 64, batch 12, 2,000
   iterations), run from the user's checkout on Shakespeare's train works as a character dataset it reads
   the usual way (data/<dataset>/train.bin, val.bin, meta.pkl, written to a temporary folder; nothing of
   nanoGPT is copied into this repository). Only --dataset, --out_dir and --always_save_checkpoint=True (so
   the final weights are scored) are added to its flags. Its training time is timed from its first
   iteration to its end (its imports and data loading left out, as tinylm's tokenizer and encoding are).
2. tinylm: the best configuration of the 3-minute sweep (BEST; see tinylm/data/runs/sweep_3min.log) for
   nanoGPT's measured time, then for 3 minutes (`TrainConfig.minutes`).
3. Both scored on the same held-out works, every character or token predicted once, in bits per byte (the
   works are ASCII: one character is one byte); tokens/s and MFU against the same measured matmul peak.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from tinylm import corpus  # noqa: E402
from tinylm.params import count_params  # noqa: E402
from tinylm.tokenizer import BPETokenizer  # noqa: E402
from tinylm.train.loop import build_model, train  # noqa: E402
from tinylm.train.measure import cpu_class, matmul_peak_flops, text_bits_per_byte, throughput  # noqa: E402
import sweep  # noqa: E402  (tools/sweep.py: the configurations by name)

# nanoGPT's README, "I only have a macbook" (its CPU recipe), word for word
NANOGPT_FLAGS = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
                 "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
                 "--n_embd=128", "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0"]
DATASET = "tinylm_shakespeare_char"
# tinylm's best 3-minute configuration, by name in tools/sweep.py (its log: tinylm/data/runs/sweep_3min.log)
BEST = "d96x4+v1024+b8+lr5e-3"


def write_char_dataset(folder: Path, texts: dict[str, str]) -> dict:
    """nanoGPT's shakespeare_char format: uint16 ids of each character, meta.pkl with stoi/itos."""
    chars = sorted(set("".join(texts.values())))
    stoi = {c: i for i, c in enumerate(chars)}
    folder.mkdir(parents=True)
    for split, name in (("train", "train.bin"), ("val", "val.bin")):
        np.array([stoi[c] for c in texts[split]], dtype=np.uint16).tofile(folder / name)
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)
    return meta


def run_nanogpt(checkout: Path, work: Path, threads: int, extra_flags: list[str] = ()) -> dict:
    """Train with nanoGPT's recipe in work; returns its timing, iterations and printed losses."""
    (work / "configurator.py").symlink_to(checkout / "configurator.py")   # train.py execs it from the cwd
    (work / "config").symlink_to(checkout / "config")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, str(checkout / "train.py"), *NANOGPT_FLAGS, f"--dataset={DATASET}",
           f"--out_dir={work / 'out'}", "--always_save_checkpoint=True", *extra_flags]
    start = time.perf_counter()
    first = last = None
    iters, lines = 0, []
    with subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        for line in p.stdout:
            lines.append(line.rstrip())
            if line.startswith("iter "):
                now = time.perf_counter()
                first = first or now
                last = now
                iters = int(line.split()[1].rstrip(":"))
    if p.returncode:
        raise RuntimeError("nanoGPT failed:\n" + "\n".join(lines[-20:]))
    evals = [line for line in lines if line.startswith("step ")]
    return {"command": " ".join(["python", "train.py", *NANOGPT_FLAGS]), "seconds": last - first,
            "wall": time.perf_counter() - start, "iters": iters, "evals": evals}


@torch.no_grad()
def nanogpt_bits_per_byte(checkout: Path, ckpt_path: Path, meta: dict, text: str, batch: int = 64) -> float:
    """Bits per character of text under nanoGPT's checkpoint: windows of block_size, every char but the first."""
    sys.path.insert(0, str(checkout))
    from model import GPT, GPTConfig   # nanoGPT's model.py, from the user's checkout

    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    model = GPT(GPTConfig(**ckpt["model_args"]))
    state = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    model.load_state_dict(state)
    model.eval()
    ids = torch.tensor([meta["stoi"][c] for c in text], dtype=torch.long)
    T = ckpt["model_args"]["block_size"]
    nats, count = 0.0, 0
    starts = list(range(0, len(ids) - 1, T))
    for i in range(0, len(starts), batch):
        chunk = [ids[s : s + T + 1] for s in starts[i : i + batch]]
        x = torch.zeros(len(chunk), T, dtype=torch.long)
        y = torch.full((len(chunk), T), -1, dtype=torch.long)          # nanoGPT ignores -1
        for b, c in enumerate(chunk):
            x[b, : len(c) - 1], y[b, : len(c) - 1] = c[:-1], c[1:]
        logits, _ = model(x, y)                                         # (B, T, V)
        nats += F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-1, reduction="sum").item()
        count += int((y != -1).sum())
    n_params = model.get_num_params()      # without the position table; the tied head counted once
    cfg = ckpt["model_args"]
    per_token = 6 * n_params + 12 * cfg["n_layer"] * cfg["n_embd"] * T
    return nats / math.log(2) / count, per_token, n_params


def run_tinylm(seconds: float, texts: dict[str, str], tok: BPETokenizer) -> dict:
    cfg, tc = sweep.configuration(BEST, seconds / 60)
    train_ids = torch.tensor(tok.encode(texts["train"]), dtype=torch.long)
    val_ids = torch.tensor(tok.encode(texts["val"]), dtype=torch.long)
    model = build_model(cfg, tc.seed)
    history = train(model, train_ids, val_ids, tc, progress=False)
    tokens = history.step[-1] * tc.batch_size * tc.seq_len
    return {"model": model, "cfg": cfg, "tc": tc, "seconds": history.time[-1], "steps": history.step[-1],
            "tokens_per_s": tokens / history.time[-1], "params": count_params(cfg).total}


def compare(checkout: Path, threads: int = 2, minutes: float = 3.0) -> tuple[list[str], list[dict]]:
    """Both rows (and tinylm at 3 minutes): the printed lines, and one dict per row."""
    checkout = checkout.resolve()
    if not (checkout / "train.py").is_file() or not (checkout / "model.py").is_file():
        raise ValueError(f"{checkout} is not a nanoGPT checkout (no train.py and model.py); pass the folder of "
                         "a clone of karpathy/nanoGPT")
    torch.set_num_threads(threads)
    texts = {split: corpus.shakespeare_text(split) for split in corpus.SHAKESPEARE_SPLITS}
    peak = matmul_peak_flops()
    rows: list[dict] = []
    lines = [f"Shakespeare, held-out works {', '.join(corpus.VAL_WORKS)} (val) and {', '.join(corpus.TEST_WORKS)} "
             f"(test); {threads} threads, CPU {cpu_class()}, fp32 matmul peak {peak / 1e9:.0f} GFLOP/s",
             f"{'run':34s} {'params':>9s} {'seconds':>7s} {'tokens/s':>9s} {'MFU':>5s} {'val bpb':>8s} "
             f"{'test bpb':>8s}"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        meta = write_char_dataset(work / "data" / DATASET, texts)
        ng = run_nanogpt(checkout, work, threads)
        scores = [nanogpt_bits_per_byte(checkout, work / "out" / "ckpt.pt", meta, texts[s]) for s in ("val", "test")]
        per_token, n_params = scores[0][1], scores[0][2]
        tok_s = ng["iters"] * 12 * 64 / ng["seconds"]
        rows.append({"run": "nanoGPT CPU recipe (characters)", "params": n_params, "seconds": ng["seconds"],
                     "tokens_per_s": tok_s, "mfu": per_token * tok_s / peak, "val_bpb": scores[0][0],
                     "test_bpb": scores[1][0], "bytes_per_token": 1.0, "iters": ng["iters"]})
        lines.append(f"{'nanoGPT CPU recipe (chars)':34s} {n_params:>9,} {ng['seconds']:>7.1f} {tok_s:>9,.0f} "
                     f"{per_token * tok_s / peak:>5.0%} {scores[0][0]:>8.3f} {scores[1][0]:>8.3f}")
    tok = BPETokenizer.train(texts["train"], sweep.configuration(BEST, minutes)[0].vocab_size)
    for label, seconds in (("tinylm, nanoGPT's time", ng["seconds"]), (f"tinylm, {minutes:g} minutes", 60 * minutes)):
        run = run_tinylm(seconds, texts, tok)
        bpb = [text_bits_per_byte(run["model"], tok, texts[s], run["tc"].seq_len, 64)[0] for s in ("val", "test")]
        _, mfu = throughput(run["cfg"], run["tc"].seq_len, run["tokens_per_s"], peak)
        n_bytes = len(texts["train"].encode())
        rows.append({"run": label, "params": run["params"], "seconds": run["seconds"],
                     "tokens_per_s": run["tokens_per_s"], "mfu": mfu, "val_bpb": bpb[0], "test_bpb": bpb[1],
                     "bytes_per_token": n_bytes / len(tok.encode(texts["train"])), "steps": run["steps"]})
        lines.append(f"{label:34s} {run['params']:>9,} {run['seconds']:>7.1f} {run['tokens_per_s']:>9,.0f} "
                     f"{mfu:>5.0%} {bpb[0]:>8.3f} {bpb[1]:>8.3f}")
    lines.append(f"nanoGPT: {ng['command']} (iterations {ng['iters']}; its own last estimate: {ng['evals'][-1]})")
    return lines, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("nanogpt", type=Path, help="a checkout of karpathy/nanoGPT")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--log", type=Path, help="also write the rows here: '#' lines, then one JSON object per row")
    args = p.parse_args(argv)
    try:
        lines, rows = compare(args.nanogpt, args.threads, args.minutes)
    except ValueError as e:
        p.error(str(e))
    print("\n".join(lines))
    if args.log:
        command = " ".join(["python bench/nanogpt.py", *(argv if argv is not None else sys.argv[1:])])
        args.log.write_text("\n".join([f"# {command}", f"# {lines[0]}", *(json.dumps(r) for r in rows),
                                       *(f"# {line}" for line in lines[1:])]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
