"""A survey of bad, hostile and edge-case inputs against tinylm's public API and its command line (issue 19).

    .venv/bin/python tools/hostile_survey.py                       # the table, then every case that is not fine
    .venv/bin/python tools/hostile_survey.py --json survey.json    # also every case's outcome and message
    .venv/bin/python tools/hostile_survey.py --only checkpoint cli # some groups only
    PYTHONPATH=/other/checkout .venv/bin/python tools/hostile_survey.py   # survey another version of tinylm

Each case declares its input bad (it must end in a clear error) or valid (it must work, and give the right
result where the case can tell). Its outcome is one of:

    clear      bad input -> a ValueError with a message; the command line: exit status 2 from argparse, or a
               non-zero status with an "error:" line and no traceback
    silent     bad input accepted, or valid input that gave a wrong result (or was refused)
    traceback  any other exception; the command line: a traceback
    hang/oom   past the time limit (10 CPU seconds a case), or over the memory cap (the address space of the worker
               is capped at what it maps after importing torch + 4 GiB), or the worker died
    worked     valid input that worked

The cases run in a worker process (torch is imported once), one after the other, each in its own
temporary folder. A case that hangs inside C code (a regular expression) cannot be interrupted there: the
parent kills the worker after 20 s, records the case and starts a new worker for the rest. Time limits count
CPU seconds (the worker's, from /proc), so that a machine busy with other work slows the survey down without
turning slow cases into hangs. Linux only (the memory cap and the CPU times read /proc). The "tokenizer" group
covers tinylm/tokenizer.py, whose cases are reported apart. The groups "gguf", "hf" and "corpus" (issue 28)
load the files a learner downloads, made small by tools/fuzz_loaders.py and broken one way each: a path
outside the folder, sizes that ask for gigabytes, weights that are not what they claim, malformed values.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import pickle
import re
import resource
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT / "tests"))        # gguf_files: GGUF files written as llama.cpp's converter does
OUTCOMES = ("clear", "silent", "traceback", "hang/oom", "worked")
CASE_SECONDS, KILL_SECONDS, HEADROOM = 10.0, 20.0, 4 << 30


@dataclass
class Case:
    group: str
    bad: bool                       # True: must raise a clear error; False: must work
    run: Callable[["Ctx"], Any]     # returns CLI(argv) to run the command line, or a result to check
    check: Callable[[Any], bool] | None = None   # valid cases: is the result right?


@dataclass
class CLI:
    argv: list
    after: Callable[[int, str], bool] | None = None   # (exit status, stderr) -> was it right? (valid runs)


class Ctx:
    """A case's temporary folder, and the shared fixtures of this worker."""

    def __init__(self, tmp: Path, shared: Path):
        self.tmp, self.shared = tmp, shared


CASES: dict[str, Case] = {}


def bad(group: str, name: str, run: Callable) -> None:
    CASES[f"{group}: {name}"] = Case(group, True, run)


def valid(group: str, name: str, run: Callable, check: Callable | None = None) -> None:
    CASES[f"{group}: {name}"] = Case(group, False, run, check)


# ---------------------------------------------------------------------------------------------
# fixtures, made once per worker
# ---------------------------------------------------------------------------------------------
SHAPE = ["--vocab-size", "300", "--dim", "32", "--n-layers", "1", "--n-heads", "2", "--n-kv-heads", "1",
         "--ffn-dim", "64", "--max-seq-len", "64"]
QUIET = ["--batch-size", "2", "--seq-len", "16", "--eval-batches", "1", "--sample-tokens", "0", "--no-progress",
         "--threads", "1"]


def tiny_cfg(**changes):
    from tinylm import Config
    base = dict(vocab_size=300, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=64)
    return Config(**{**base, **changes})


def model(**changes):
    import torch

    from tinylm import TinyLM
    torch.manual_seed(0)
    return TinyLM(tiny_cfg(**changes))


def ids(*shape, high=300):
    import torch
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(1))


@cache
def corpus_text() -> str:
    """The shipped training stories (tinylm.corpus), as the command line pretrains on them."""
    from tinylm import corpus
    return corpus.story_text("train")


@cache
def text() -> str:
    return corpus_text()[:15_000]


def shared_files(ctx: Ctx) -> dict[str, Path]:
    """data.txt, tokenizer.json (300 ids), chat.jsonl and a checkpoint of 2 steps ("ckpt") with a later one
    of the same run ("ckpt4"), written by this version's command line."""
    d = ctx.shared
    files = {"data": d / "data.txt", "tok": d / "tokenizer.json", "chat": d / "chat.jsonl", "ckpt": d / "ckpt",
             "ckpt4": d / "ckpt4"}
    if not files["tok"].exists():
        from tinylm.tokenizer import BPETokenizer
        from tinylm.train import main
        files["data"].write_text(text(), encoding="utf-8")
        from tinylm import corpus
        lines = [json.dumps(c, ensure_ascii=False) + "\n" for c in corpus.conversations("train")[:40]]
        files["chat"].write_text("".join(lines), encoding="utf-8")
        BPETokenizer.train(text(), 300).save(files["tok"])
        flags = ["--data", files["data"], "--tokenizer", files["tok"], *SHAPE, *QUIET, "--eval-every", "2"]
        with contextlib.redirect_stderr(io.StringIO()):
            main([str(a) for a in [*flags, "--steps", "4", "--stop-after", "2", "--out", files["ckpt"]]])
            main([str(a) for a in [*flags, "--steps", "4", "--out", files["ckpt4"]]])
    return files


def tok(ctx: Ctx):
    from tinylm.tokenizer import BPETokenizer
    return BPETokenizer.load(shared_files(ctx)["tok"])


def copy_ckpt(ctx: Ctx, name: str = "ckpt") -> Path:
    return Path(shutil.copytree(shared_files(ctx)[name], ctx.tmp / name))


def flags(ctx: Ctx, out: str = "out") -> list:
    """A 2-step run (so that a bad flag accepted silently finishes, and counts as silent, not as a hang)."""
    f = shared_files(ctx)
    return ["--data", f["data"], "--tokenizer", f["tok"], *SHAPE, *QUIET, "--steps", "2", "--eval-every", "2",
            "--out", ctx.tmp / out]


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------
def _config_cases() -> None:
    import numpy as np

    from tinylm import Config
    ints = {"vocab_size": 1, "dim": 1, "n_layers": 1, "n_heads": 1, "n_kv_heads": 1, "ffn_dim": 1, "max_seq_len": 1,
            "n_experts": 0}
    for field, low in ints.items():
        for label, value in [("below minimum", low - 1), ("-1", -1), ("1.5", 1.5), ("'8'", "8"), ("None", None),
                             ("True", True), ("nan", float("nan")), ("float 8.0", 8.0), ("inf", float("inf"))]:
            bad("config", f"{field}={label}", lambda c, f=field, v=value: Config(**{f: v}))
        valid("config", f"{field}=numpy int", lambda c, f=field: Config(**{f: np.int64(getattr(Config(), f))}),
              lambda cfg, f=field: type(getattr(cfg, f)) is int and json.dumps(cfg.to_dict()) is not None)
    for field, values in {"rope_base": [float("inf"), float("nan"), 1.0, 0, -5.0, "1e4", None, True],
                          "norm_eps": [float("inf"), float("nan"), 0.0, -1e-5, "1e-5", None],
                          "mlp_aux_weight": [-1.0, float("inf"), float("nan"), "0.1"]}.items():
        for value in values:
            bad("config", f"{field}={value!r}", lambda c, f=field, v=value: Config(**{f: v}))
        valid("config", f"{field}=numpy float32", lambda c, f=field: Config(**{f: np.float32(getattr(Config(), f))}),
              lambda cfg: json.dumps(cfg.to_dict()) is not None)
    for field, values in {"qk_norm": [1, "yes", None, np.bool_(True)], "tie_embeddings": [0, "no"],
                          "experts_per_token": [3, 0, 2.0, True, "2", None]}.items():
        for value in values:
            bad("config", f"{field}={value!r}", lambda c, f=field, v=value: Config(**{f: v}))
    valid("config", "experts_per_token=numpy int", lambda c: Config(n_experts=4, experts_per_token=np.int64(2)),
          lambda cfg: type(cfg.experts_per_token) is int and json.dumps(cfg.to_dict()) is not None)
    bad("config", "dim not divisible by n_heads", lambda c: Config(dim=770))
    bad("config", "n_heads not divisible by n_kv_heads", lambda c: Config(n_kv_heads=3))
    bad("config", "odd head_dim", lambda c: Config(dim=72, n_heads=8, n_kv_heads=4))
    bad("config", "experts_per_token > n_experts", lambda c: Config(n_experts=1, experts_per_token=2))
    bad("config", "max_seq_len=10**9 (RoPE tables)", lambda c: model(max_seq_len=10**9))
    bad("config", "from_dict unknown field", lambda c: Config.from_dict({"width": 3}))
    bad("config", "from_dict not a dict", lambda c: Config.from_dict([1, 2]))
    bad("config", "replace unknown field", lambda c: Config().replace(width=3))
    bad("config", "unknown preset", lambda c: Config.from_preset("huge"))
    bad("config", "preset change invalid", lambda c: Config.from_preset("mini-companion", dim=-1))
    valid("config", "round trip", lambda c: Config.from_dict(Config().to_dict()) == Config(), bool)
    valid("config", "every preset", lambda c: [Config.from_preset(n) for n in ("running-example", "mini-companion")])
    valid("config", "max_seq_len=4096 builds fast", lambda c: model(max_seq_len=4096).cos.shape[0] == 4096, bool)


# ---------------------------------------------------------------------------------------------
# TinyLM: construction and forward
# ---------------------------------------------------------------------------------------------
def _model_cases() -> None:
    import torch
    bad("model", "TinyLM('cfg')", lambda c: __import__("tinylm").TinyLM("cfg"))
    bad("model", "TinyLM(None)", lambda c: __import__("tinylm").TinyLM(None))
    bad("model", "TinyLM(dict)", lambda c: __import__("tinylm").TinyLM({"dim": 8}))
    for label, make in {
        "float idx": lambda: ids(2, 4).float(), "1-D idx": lambda: ids(4), "3-D idx": lambda: ids(2, 4, 1),
        "int32 idx": lambda: ids(2, 4).int(), "list idx": lambda: [[1, 2, 3]], "numpy idx": lambda: ids(2, 4).numpy(),
        "id = vocab_size": lambda: torch.full((1, 3), 300), "id -1": lambda: torch.full((1, 3), -1),
        "too long": lambda: ids(1, 65), "bool idx": lambda: ids(1, 3).bool(), "None": lambda: None,
    }.items():
        bad("model", f"forward {label}", lambda c, m=make: model()(m()))
    bad("model", "targets of another shape", lambda c: model()(ids(2, 4), ids(2, 3)))
    bad("model", "targets float", lambda c: model()(ids(2, 4), ids(2, 4).float()))
    bad("model", "targets int32", lambda c: model()(ids(2, 4), ids(2, 4).int()))
    bad("model", "target id = vocab_size", lambda c: model()(ids(2, 4), torch.full((2, 4), 300)))
    bad("model", "target id -5", lambda c: model()(ids(2, 4), torch.full((2, 4), -5)))
    bad("model", "cache too short", lambda c: (lambda m: m(ids(1, 8), cache=m.new_cache(1, 4)))(model()))
    bad("model", "cache of another model", lambda c: model()(ids(1, 4), cache=model(n_kv_heads=2).new_cache(1, 8)))
    bad("model", "new_cache batch 0", lambda c: model().new_cache(0, 8))
    bad("model", "new_cache max_len -1", lambda c: model().new_cache(1, -1))
    valid("model", "all targets -100: loss 0, finite gradients",
          lambda c: (lambda m: (m(ids(2, 4), torch.full((2, 4), -100))[1], m))(model()),
          lambda r: r[0].item() == 0 and (r[0].backward() or True)
          and all(bool(p.grad.isfinite().all()) for p in r[1].parameters() if p.grad is not None))
    valid("model", "forward", lambda c: model()(ids(2, 8))[0].shape == (2, 8, 300), bool)
    valid("model", "loss with -100 mask",
          lambda c: model()(ids(2, 8), torch.where(ids(2, 8) > 150, ids(2, 8), -100))[1],
          lambda loss: bool(loss.isfinite()))
    valid("model", "explicit path = fused (finite weights)",
          lambda c: (model()(ids(2, 8))[0] - model().set_explicit_attention()(ids(2, 8))[0]).abs().max() < 1e-5, bool)
    valid("model", "cache decode = full", lambda c: _cache_equals_full(), bool)
    valid("model", "bf16 autocast forward", lambda c: _bf16_forward(), lambda logits: bool(logits.isfinite().all()))
    valid("model", "empty batch (0, 4)", lambda c: model()(ids(0, 4))[0].shape == (0, 4, 300), bool)
    valid("model", "MoE forward", lambda c: model(n_experts=4)(ids(2, 4), ids(2, 4))[1], lambda x: bool(x.isfinite()))


def _bf16_forward():
    import torch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return model()(ids(1, 4))[0]


def _cache_equals_full() -> bool:
    import torch
    m, x = model(), ids(1, 10)
    cache = m.new_cache(1, 10)
    with torch.no_grad():
        steps = [m(x[:, :6], cache=cache)[0][:, -1]] + [m(x[:, t:t + 1], cache=cache)[0][:, -1] for t in range(6, 10)]
        full = m(x)[0][:, 5:]
    return (torch.stack(steps, 1) - full).abs().max() < 1e-5


# ---------------------------------------------------------------------------------------------
# generation and sampling
# ---------------------------------------------------------------------------------------------
def _generate_cases() -> None:
    import torch

    from tinylm.generate import apply_temperature, generate, sample_next, top_k_filter, top_p_filter

    def gen(**kwargs):
        args = {"max_new_tokens": 3, **kwargs}
        return generate(args.pop("model", None) or model(), args.pop("idx", ids(1, 4)), **args)
    for name, value in [("temperature", -1.0), ("temperature", float("nan")), ("temperature", float("inf")),
                        ("temperature", "1"), ("temperature", None), ("top_k", 0), ("top_k", -1), ("top_k", 1.5),
                        ("top_k", True), ("top_p", 0.0), ("top_p", 1.5), ("top_p", float("nan")), ("top_p", -0.1),
                        ("max_new_tokens", -1), ("max_new_tokens", 1.5), ("max_new_tokens", None),
                        ("eos_id", -1), ("eos_id", 300), ("eos_id", 1.5), ("generator", "seed"), ("use_cache", 1),
                        ("max_new_tokens", 100), ("idx", ids(1, 0)), ("idx", ids(4)), ("idx", ids(1, 3).float()),
                        ("model", "not a model")]:
        bad("generate", f"generate {name}={value if not isinstance(value, torch.Tensor) else tuple(value.shape)}",
            lambda c, n=name, v=value: gen(**{n: v}))
    nan = torch.full((2, 5), float("nan"))
    bad("generate", "greedy from NaN logits", lambda c: sample_next(nan, temperature=0))
    bad("generate", "sampling from NaN logits", lambda c: sample_next(nan))
    bad("generate", "greedy from all -inf", lambda c: sample_next(torch.full((5,), float("-inf")), temperature=0))
    bad("generate", "sampling from all -inf", lambda c: sample_next(torch.full((5,), float("-inf"))))
    bad("generate", "sampling from +inf logits", lambda c: sample_next(torch.tensor([0.0, float("inf")])))
    bad("generate", "int logits", lambda c: sample_next(torch.tensor([1, 2])))
    bad("generate", "3-D logits", lambda c: sample_next(torch.zeros(1, 2, 3)))
    bad("generate", "list logits", lambda c: sample_next([0.1, 0.2]))
    bad("generate", "apply_temperature 0", lambda c: apply_temperature(torch.zeros(3), 0))
    bad("generate", "top_k_filter k=0", lambda c: top_k_filter(torch.zeros(3), 0))
    bad("generate", "top_p_filter p=0", lambda c: top_p_filter(torch.zeros(3), 0.0))
    bad("generate", "generate with a NaN model (greedy)",
        lambda c: gen(model=_nan_model(), temperature=0))
    bad("generate", "generate with a NaN model (sampling)", lambda c: gen(model=_nan_model()))
    valid("generate", "greedy = top_k 1", lambda c: torch.equal(gen(temperature=0), gen(top_k=1)), bool)
    valid("generate", "seeded sampling repeats",
          lambda c: torch.equal(gen(generator=torch.Generator().manual_seed(3)),
                                gen(generator=torch.Generator().manual_seed(3))), bool)
    valid("generate", "cache = no cache",
          lambda c: torch.equal(gen(temperature=0), gen(temperature=0, use_cache=False)),
          bool)
    valid("generate", "max_new_tokens 0", lambda c: gen(max_new_tokens=0).shape == (1, 4), bool)
    valid("generate", "eos stops",
          lambda c: gen(eos_id=int(gen(temperature=0)[0, 4]), temperature=0).shape[1] == 5, bool)
    valid("generate", "top_p tiny keeps the top token", lambda c: top_p_filter(torch.tensor([3.0, 1.0]), 1e-6),
          lambda x: x[0] == 3.0 and x[1] == float("-inf"))


def _nan_model():
    import torch
    m = model()
    with torch.no_grad():
        m.norm.weight.fill_(float("nan"))
    return m


# ---------------------------------------------------------------------------------------------
# the tokenizer (tinylm/tokenizer.py)
# ---------------------------------------------------------------------------------------------
def _tok_file(ctx: Ctx, **changes) -> Path:
    d = {"format": "tinylm-bpe", "version": 1, "pattern": tok(ctx).pattern, "specials": ["<eos>"], "merges": []}
    d.update(changes)
    path = ctx.tmp / "tok.json"
    path.write_text(json.dumps(d) if not isinstance(changes.get("raw"), str) else changes["raw"], encoding="utf-8")
    return path


def _load(ctx: Ctx, **changes):
    from tinylm.tokenizer import BPETokenizer
    return BPETokenizer.load(_tok_file(ctx, **changes))


def _tokenizer_cases() -> None:
    from tinylm.tokenizer import BPETokenizer
    bomb = [[97, 97]] + [[255 + i, 255 + i] for i in range(1, 40)]
    bad("tokenizer", "load: 560-byte memory bomb (merges double a token 40 times)", lambda c: _load(c, merges=bomb))
    bad("tokenizer", "load: pattern [a-z]+ loses text",
        lambda c: _roundtrip_or_raise(_load(c, pattern="[a-z]+"), "Hello World 123!"))
    bad("tokenizer", "load: pattern (a+)+$|. backtracks",
        lambda c: _load(c, pattern="(a+)+$|.").encode("a" * 32 + "b"))
    bad("tokenizer", "load: pattern with two groups", lambda c: _load(c, pattern="(a)(b)|.").encode("abc"))
    bad("tokenizer", "load: pattern not a regex", lambda c: _load(c, pattern="(["))
    bad("tokenizer", "load: pattern not a string", lambda c: _load(c, pattern=5))
    bad("tokenizer", "load: pattern matching the empty string",
        lambda c: _roundtrip_or_raise(_load(c, pattern="x*"), "abc"))
    for label, merges in [("not a list", {"a": 1}), ("merge of 3", [[1, 2, 3]]), ("merge of strings", [["a", "b"]]),
                          ("future id", [[300, 1]]), ("negative id", [[-1, 2]]), ("duplicate", [[1, 2], [1, 2]]),
                          ("float ids", [[1.0, 2.0]]), ("bool ids", [[True, False]]), ("null", None)]:
        bad("tokenizer", f"load: merges {label}", lambda c, m=merges: _load(c, merges=m))
    for label, specials in [("a string", "<eos>"), ("not a list", 5), ("empty string", [""]), ("duplicate", ["a", "a"]),
                            ("non-string", [3])]:
        bad("tokenizer", f"load: specials {label}", lambda c, s=specials: _load(c, specials=s))
    for label, raw in [("not JSON", "{x"), ("a list", "[]"), ("empty", ""), ("nested", "[" * 100_000)]:
        bad("tokenizer", f"load: file {label}", lambda c, r=raw: _load(c, raw=r))
    bad("tokenizer", "load: not UTF-8", lambda c: (lambda p: (p.write_bytes(b"\xff\xfe"), BPETokenizer.load(p)))(
        ctx_path(c, "t.json")))
    bad("tokenizer", "load: wrong format", lambda c: _load(c, format="gpt2"))
    bad("tokenizer", "load: version 9", lambda c: _load(c, version=9))
    bad("tokenizer", "load: missing merges", lambda c: (lambda p: (p.write_text(json.dumps(
        {"format": "tinylm-bpe", "version": 1, "pattern": "x", "specials": []})), BPETokenizer.load(p)))(
        ctx_path(c, "t.json")))
    bad("tokenizer", "load: missing file", lambda c: BPETokenizer.load(c.tmp / "nope.json"))
    bad("tokenizer", "load: a folder", lambda c: BPETokenizer.load(c.tmp))
    for label, value in [("bytes", b"abc"), ("None", None), ("int", 5), ("list", ["a"])]:
        bad("tokenizer", f"encode {label}", lambda c, v=value: tok(c).encode(v))
    bad("tokenizer", "encode lone surrogate", lambda c: tok(c).encode("a\ud800b"))
    bad("tokenizer", "encode allow_specials='yes'", lambda c: tok(c).encode("<eos>", allow_specials="yes"))
    valid("tokenizer", "encode 1 MB of letters without spaces (4,096 ids) within 10 s",
          lambda c: len(_tok4096(c).encode(_letters(1 << 20))) > 0, bool)
    valid("tokenizer", "encode 1 MB of English (4,096 ids)",
          lambda c: len(_tok4096(c).encode(corpus_text()[:1 << 20])) > 0,
          bool)
    for label, value in [("a string '123'", "123"), ("floats", [1.5]), ("-1", [-1]), ("vocab_size", [300]),
                         ("None", None), ("nested", [[1, 2]]), ("huge id", [10**20])]:
        bad("tokenizer", f"decode {label}", lambda c, v=value: tok(c).decode(v))
    bad("tokenizer", "train text None", lambda c: BPETokenizer.train(None, 300))
    bad("tokenizer", "train vocab 100", lambda c: BPETokenizer.train("abc", 100))
    bad("tokenizer", "train vocab 1.5", lambda c: BPETokenizer.train("abc", 1.5))
    bad("tokenizer", "train specials='<eos>' (a string)",
        lambda c: BPETokenizer.train(text()[:2000], 300, specials="<eos>"))
    bad("tokenizer", "train specials duplicate", lambda c: BPETokenizer.train("abc", 300, specials=("a", "a")))
    bad("tokenizer", "train specials non-string", lambda c: BPETokenizer.train("abc", 300, specials=(1,)))
    valid("tokenizer", "train vocab 10**6 on a small text stops early",
          lambda c: BPETokenizer.train("hello world", 10**6).vocab_size, lambda n: n < 400)
    valid("tokenizer", "round trip unicode", lambda c: _roundtrip_or_raise(tok(c), "Grüße, 世界! 🙂 \t\n x"),
          bool)
    valid("tokenizer", "allow_specials",
          lambda c: tok(c).encode("<eos>", allow_specials=True) == [tok(c).special_ids["<eos>"]], bool)
    valid("tokenizer", "decode numpy ids", lambda c: tok(c).decode(__import__("numpy").array([72, 105])) == "Hi", bool)
    valid("tokenizer", "decode torch ids", lambda c: tok(c).decode(__import__("torch").tensor([72, 105])) == "Hi", bool)
    valid("tokenizer", "save and load",
          lambda c: (tok(c).save(c.tmp / "t.json"), BPETokenizer.load(c.tmp / "t.json").merges == tok(c).merges)[1],
          bool)


def _tok4096(ctx: Ctx):
    """A tokenizer of 4,096 ids (the mini companion's) trained on the whole corpus, once per survey."""
    from tinylm.tokenizer import BPETokenizer
    path = ctx.shared / "tokenizer4096.json"
    if not path.exists():
        BPETokenizer.train(corpus_text(), 4096).save(path)
    return BPETokenizer.load(path)


def _letters(n: int) -> str:
    """n letters of the corpus with everything else removed: English without spaces."""
    letters = re.sub(r"[^A-Za-z]", "", corpus_text())
    return (letters * (n // len(letters) + 1))[:n]


def ctx_path(ctx: Ctx, name: str) -> Path:
    return ctx.tmp / name


def _roundtrip_or_raise(t, s: str) -> bool:
    if t.decode(t.encode(s)) != s:
        raise AssertionError(f"decode(encode({s!r})) = {t.decode(t.encode(s))!r}")   # silent loss of text
    return True


# ---------------------------------------------------------------------------------------------
# chat
# ---------------------------------------------------------------------------------------------
def _chat_cases() -> None:
    from tinylm.chat import ChatSession, encode_chat, encode_conversations, load_conversations, render_chat
    for label, turns in [("not a list", "hi"), ("turn not a dict", ["hi"]), ("extra key", [{"role": "user",
                         "content": "x", "x": 1}]), ("role system", [{"role": "system", "content": "x"}]),
                         ("content None", [{"role": "user", "content": None}]),
                         ("missing content", [{"role": "user"}])]:
        bad("chat", f"encode_chat {label}", lambda c, t=turns: encode_chat(tok(c), t))
        bad("chat", f"render_chat {label}", lambda c, t=turns: render_chat(t))
    bad("chat", "encode_chat tokenizer without specials",
        lambda c: encode_chat(__import__("tinylm.tokenizer", fromlist=["x"]).BPETokenizer([], ()),
                              [{"role": "user", "content": "x"}]))
    for label, content in [("not JSON", "{x\n"), ("no messages", '{"a": 1}\n'), ("bad turn", '{"messages": [1]}\n'),
                           ("empty", ""), ("a list", "[1]\n")]:
        bad("chat", f"load_conversations {label}", lambda c, s=content: (ctx_path(c, "c.jsonl").write_text(s),
                                                                          load_conversations(c.tmp / "c.jsonl")))
    bad("chat", "load_conversations not UTF-8", lambda c: (ctx_path(c, "c.jsonl").write_bytes(b'{"\xff"}\n'),
                                                           load_conversations(c.tmp / "c.jsonl")))
    bad("chat", "load_conversations missing", lambda c: load_conversations(c.tmp / "nope.jsonl"))
    bad("chat", "load_conversations a folder", lambda c: load_conversations(c.tmp))

    def session(c, **kwargs):
        return ChatSession(model(), tok(c), **{"max_new_tokens": 4, **kwargs})
    bad("chat", "ChatSession model None", lambda c: ChatSession(None, tok(c)))
    bad("chat", "ChatSession max_new_tokens 0", lambda c: session(c, max_new_tokens=0))
    bad("chat", "ChatSession max_new_tokens = max_seq_len", lambda c: session(c, max_new_tokens=64))
    bad("chat", "ChatSession tokenizer bigger than the model",
        lambda c: ChatSession(model(vocab_size=100), tok(c)))
    bad("chat", "ChatSession seed 'x'", lambda c: session(c, seed="x"))
    bad("chat", "ask(5)", lambda c: session(c).ask(5))
    bad("chat", "ask(None)", lambda c: session(c).ask(None))
    bad("chat", "ask with temperature -1 keeps no turn", lambda c: _ask_keeps_no_turn(session(c, temperature=-1.0)))
    bad("chat", "ask lone surrogate keeps no turn", lambda c: _ask_keeps_no_turn(session(c), "a\ud800"))
    valid("chat", "ask twice", lambda c: (lambda s: (s.ask("Hi"), s.ask("And?"), len(s.turns))[2])(session(c)),
          lambda n: n == 4)
    valid("chat", "a user typing <eos> gets no special id",
          lambda c: tok(c).special_ids["<eos>"]
          not in encode_chat(tok(c), [{"role": "user", "content": "<eos>"}])[0][2:], bool)
    valid("chat", "encode_conversations of none", lambda c: encode_conversations(tok(c), [])[0].numel() == 0, bool)


def _ask_keeps_no_turn(session, text="Hello"):
    """ask() must refuse, and leave the conversation as it was (a turn kept after an error is 'silent')."""
    before = list(session.turns)
    try:
        session.ask(text)
    finally:
        if session.turns != before:
            raise AssertionError("the user turn was kept although ask failed")


# ---------------------------------------------------------------------------------------------
# checkpoint files
# ---------------------------------------------------------------------------------------------
def _edit_json(path: Path, change) -> None:
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


def _rewrite_tensors(path: Path, change) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(str(path), "pt") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    change(tensors)
    save_file(tensors, str(path), metadata=meta)


def _load_ckpt(path: Path):
    from tinylm.train import load_checkpoint
    return load_checkpoint(path)


def _checkpoint_cases() -> None:
    import torch

    def damaged(change):
        def run(c):
            path = copy_ckpt(c)
            change(path)
            return _load_ckpt(path)
        return run
    for name in ("model.safetensors", "config.json", "train state"):
        def damage_file(change, n=name):
            def run(c):
                path = copy_ckpt(c)
                change(_state_file(path) if n == "train state" else path / n)
                return _load_ckpt(path)
            return run
        bad("checkpoint", f"{name} truncated", damage_file(lambda p: p.write_bytes(p.read_bytes()[:-7])))
        bad("checkpoint", f"{name} empty", damage_file(lambda p: p.write_bytes(b"")))
        bad("checkpoint", f"{name} garbage", damage_file(lambda p: p.write_bytes(os.urandom(400))))
        bad("checkpoint", f"{name} missing", damage_file(lambda p: p.unlink()))
    for label, change in {
        "step '2'": lambda m: m.update(step="2"), "step -5": lambda m: m.update(step=-5),
        "step True": lambda m: m.update(step=True), "step 2.0": lambda m: m.update(step=2.0),
        "step past train.steps": lambda m: m.update(step=99), "train {}": lambda m: m.update(train={}),
        "train unknown field": lambda m: m["train"].update(lrr=1), "train lr -1": lambda m: m["train"].update(lr=-1),
        "train a list": lambda m: m.update(train=[]), "no train": lambda m: m.pop("train"),
        "no step": lambda m: m.pop("step"), "unknown field": lambda m: m.update(oops=1),
        "extra a list": lambda m: m.update(extra=[]), "format other": lambda m: m.update(format="x"),
        "version 99": lambda m: m.update(version=99), "version '2'": lambda m: m.update(version="2"),
        "model {}": lambda m: m.update(model={}), "model a list": lambda m: m.update(model=[]),
        "model unknown field": lambda m: m["model"].update(width=1),
        "model vocab_size 10**12": lambda m: m["model"].update(vocab_size=10**12),
        "model dim 2**20": lambda m: m["model"].update(dim=2**20, ffn_dim=2**20),
        "model max_seq_len 10**9": lambda m: m["model"].update(max_seq_len=10**9),
        "model n_layers 10**9": lambda m: m["model"].update(n_layers=10**9),
        "model n_experts 10**6": lambda m: m["model"].update(n_experts=10**6),
        "model experts_per_token 2.0": lambda m: m["model"].update(experts_per_token=2.0),
        "model qk_norm flipped": lambda m: m["model"].update(qk_norm=not m["model"]["qk_norm"]),
        "model tie flipped": lambda m: m["model"].update(tie_embeddings=not m["model"]["tie_embeddings"]),
    }.items():
        bad("checkpoint", f"config.json {label}", damaged(lambda p, ch=change: _edit_json(p / "config.json", ch)))
    for label, raw in [("not JSON", "{x"), ("a list", "[]"), ("nested", "[" * 100_000), ("2 MB", " " * (2 << 20)),
                       ("Infinity lr", None)]:
        def run(c, r=raw):
            path = copy_ckpt(c)
            f = path / "config.json"
            f.write_text(r if r is not None else re.sub(r'"lr": [0-9.e-]+', '"lr": Infinity', f.read_text()))
            return _load_ckpt(path)
        bad("checkpoint", f"config.json {label}", run)
    bad("checkpoint", "config.json not UTF-8", damaged(lambda p: (p / "config.json").write_bytes(b"\xff\xfe{}")))

    def weights(change):
        return damaged(lambda p: _rewrite_tensors(p / "model.safetensors", change))
    bad("checkpoint", "a NaN weight", weights(lambda t: t[next(k for k in t if "q_proj" in k)].fill_(float("nan"))))
    bad("checkpoint", "an inf weight", weights(lambda t: t["norm.weight"].fill_(float("inf"))))
    bad("checkpoint", "a weight of the wrong shape", weights(lambda t: t.update({"norm.weight": torch.ones(5)})))
    bad("checkpoint", "a weight as ints", weights(lambda t: t.update({"norm.weight": t["norm.weight"].int()})))
    bad("checkpoint", "a weight missing", weights(lambda t: t.pop("norm.weight")))
    bad("checkpoint", "an extra weight", weights(lambda t: t.update(evil=torch.zeros(1))))
    bad("checkpoint", "weights of a later save (mixed files)",   # loading at all is the silent case
        lambda c: (lambda p: (shutil.copy(shared_files(c)["ckpt4"] / "model.safetensors", p / "model.safetensors"),
                              _load_ckpt(p)))(copy_ckpt(c)))
    bad("checkpoint", "train state of a later save (mixed files)", lambda c: _mixed_state(c))
    bad("checkpoint", "a pickle payload as train_state.pt", lambda c: _pickle_payload(c))
    bad("checkpoint", "missing folder", lambda c: _load_ckpt(c.tmp / "nope"))
    bad("checkpoint", "a file, not a folder", lambda c: (ctx_path(c, "f").write_text("x"), _load_ckpt(c.tmp / "f")))
    bad("checkpoint", "an empty folder", lambda c: _load_ckpt(c.tmp))
    bad("checkpoint", "save_checkpoint with NaN weights", lambda c: _save_nan(c))
    valid("checkpoint", "load a good checkpoint", lambda c: _load_ckpt(copy_ckpt(c)).step, lambda s: s == 2)
    valid("checkpoint", "load a later one", lambda c: _load_ckpt(copy_ckpt(c, "ckpt4")).step, lambda s: s == 4)


def _state_file(path: Path) -> Path:
    """The optimizer and RNG state of a checkpoint: train_state.pt (before issue 19) or train_state.safetensors."""
    return next(path / n for n in ("train_state.safetensors", "train_state.pt") if (path / n).exists())


def _mixed_state(c: Ctx):
    path = copy_ckpt(c)
    shutil.copy(_state_file(shared_files(c)["ckpt4"]), _state_file(path))
    return _load_ckpt(path)


def _pickle_payload(c: Ctx):
    """An old-format folder whose train_state.pt would create a marker file when unpickled."""
    path, marker = copy_ckpt(c), c.tmp / "code-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))
    (path / "train_state.pt").write_bytes(pickle.dumps({"optimizer": Payload()}))
    _edit_json(path / "config.json", lambda m: m.update(version=1))
    try:
        return _load_ckpt(path)
    finally:
        if marker.exists():
            raise AssertionError("unpickling the checkpoint ran code")


def _save_nan(c: Ctx):
    import torch

    from tinylm.train import History, TrainConfig, make_optimizer, save_checkpoint
    m = _nan_model()
    save_checkpoint(c.tmp / "c", m, make_optimizer(m, 1e-3, 0.1), 1, TrainConfig(steps=2), torch.Generator(),
                    History())


# ---------------------------------------------------------------------------------------------
# training, as a library
# ---------------------------------------------------------------------------------------------
def _train_cases() -> None:
    import torch

    from tinylm.train import (TrainConfig, evaluate, get_batch, lr_at, make_optimizer, split_train_val,
                              train)
    for field, values in {"steps": [0, -1, 1.5, "9", None], "batch_size": [0, 2.0], "seq_len": [0, -8],
                          "eval_every": [0], "eval_batches": [0], "warmup": [-1, 0.5], "seed": [-1, "0"],
                          "lr": [0, -1e-3, float("inf"), float("nan"), "1e-3"], "min_lr": [-1.0, 1.0, float("nan")],
                          "weight_decay": [-0.1, float("inf")], "grad_clip": [-1.0, float("inf")]}.items():
        for value in values:
            bad("train", f"TrainConfig {field}={value!r}", lambda c, f=field, v=value: TrainConfig(**{f: v}))
    stream = lambda: ids(400)  # noqa: E731

    def run(**kwargs):
        cfg = TrainConfig(**{"steps": 3, "batch_size": 2, "seq_len": 16, "warmup": 1, "eval_every": 3,
                             "eval_batches": 1, **kwargs.pop("cfg", {})})
        m = kwargs.pop("model", None) or model()
        return train(m, kwargs.pop("tokens", stream()), kwargs.pop("val", stream()), cfg, progress=False, **kwargs)
    bad("train", "lr 1e6 diverges", lambda c: run(cfg={"lr": 1e6, "steps": 30, "grad_clip": 0.0, "eval_every": 1},
                                                  out=c.tmp / "c"))
    bad("train", "a NaN weight", lambda c: run(model=_nan_model()))
    bad("train", "a NaN weight in q_proj (fused attention may hide it)", lambda c: run(model=_nan_q()))
    bad("train", "seq_len > max_seq_len", lambda c: run(cfg={"seq_len": 65}))
    bad("train", "tokens too short", lambda c: run(tokens=ids(10)))
    bad("train", "tokens 2-D", lambda c: run(tokens=ids(2, 200)))
    bad("train", "labels of another length", lambda c: run(train_labels=ids(10)))
    bad("train", "until past steps", lambda c: run(until=9))
    bad("train", "bf16 on meta device", lambda c: run(model=model().to("meta"), bf16=True))
    bad("train", "get_batch seq_len too long", lambda c: get_batch(ids(10), 2, 16))
    bad("train", "get_batch tokens a list", lambda c: get_batch([1, 2, 3], 1, 1))
    bad("train", "evaluate tokens too short", lambda c: evaluate(model(), ids(5), 2, 16))
    bad("train", "evaluate all labels -100",
        lambda c: evaluate(model(), ids(40), 2, 16, labels=torch.full((40,), -100)))
    for v in (0.0, 1.0, -0.5, float("nan")):
        bad("train", f"split_train_val {v}", lambda c, v=v: split_train_val(ids(100), v))
    bad("train", "lr_at min_lr > lr", lambda c: lr_at(0, 1e-3, 1e-2, 10, 100))
    bad("train", "make_optimizer lr inf", lambda c: make_optimizer(model(), float("inf"), 0.1))
    valid("train", "a fully masked batch warns and trains on", lambda c: run(train_labels=torch.full((400,), -100))
          .loss, lambda losses: all(x == 0 for x in losses))
    valid("train", "loss goes down", lambda c: run(cfg={"steps": 20, "lr": 3e-3}, tokens=ids(400, high=20),
                                                   val=ids(400, high=20)).loss, lambda losses: losses[-1] < losses[0])
    valid("train", "save and resume exactly", lambda c: _resume_exact(c), bool)


def _nan_q():
    import torch
    m = model()
    with torch.no_grad():
        m.layers[0].self_attn.q_proj.weight[0, 0] = float("nan")
    return m


def _resume_exact(c: Ctx) -> bool:
    import torch

    from tinylm.train import TrainConfig, load_checkpoint, train
    cfg = TrainConfig(steps=4, batch_size=2, seq_len=16, warmup=1, eval_every=2, eval_batches=1)
    a = model()
    train(a, ids(400), ids(400), cfg, progress=False)
    b = model()
    train(b, ids(400), ids(400), cfg, progress=False, out=c.tmp / "c", until=2)
    ck = load_checkpoint(c.tmp / "c")
    train(ck.model, ids(400), ids(400), ck.train_config, resume=ck, progress=False)
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), ck.model.state_dict().values()))


# ---------------------------------------------------------------------------------------------
# the book's helpers
# ---------------------------------------------------------------------------------------------
def _endless(*args):
    while True:
        pass


def _book_cases() -> None:
    import numpy as np

    from tinylm import book
    bad("book", "check_function: an endless loop ends in NOT YET",
        lambda c: _verdict_or_raise(book.check_function(_endless, abs, [(1,)])))
    bad("book", "check_function: an empty case list", lambda c: _verdict_or_raise(book.check_function(abs, abs, [])))
    bad("book", "check_function: cases not tuples", lambda c: _verdict_or_raise(book.check_function(abs, abs, [1, 2])))
    bad("book", "check_function: user_fn None", lambda c: _verdict_or_raise(book.check_function(None, abs, [(1,)])))
    valid("book", "check_function: a wrong answer is NOT YET",
          lambda c: book.check_function(lambda x: x + 1, abs, [(np.ones(2),)]), lambda v: not v)
    valid("book", "check_function: returns None is NOT YET",
          lambda c: book.check_function(lambda x: None, abs, [(1,)]), lambda v: not v and "return" in v.message)
    valid("book", "check_function: a raising function is NOT YET",
          lambda c: book.check_function(lambda x: 1 / 0, abs, [(1,)]), lambda v: not v)
    valid("book", "check_function: right is PASS", lambda c: book.check_function(abs, abs, [(-1,), (2,)]), bool)
    valid("book", "static_explorer: a frame holding </script> stays inside its script",
          lambda c: book.static_explorer("k", {"v": [1, 2]}, lambda v: "<p>ok</p>" if v == 1 else
                                         "<p></script><script>x()</script></p>")._repr_html_(),
          lambda h: h.lower().count("<script") == 1)        # (the first frame, shown as HTML, is harmless)
    valid("book", "static_explorer: a value holding </script> stays inside its script",
          lambda c: book.static_explorer("k", {"v": ["a", "</script><b>"]}, lambda v: "<p>x</p>")._repr_html_(),
          lambda h: h.lower().count("</script") == 1)
    bad("book", "static_explorer: no controls", lambda c: book.static_explorer("k", {}, lambda: "x"))
    bad("book", "static_explorer: one value", lambda c: book.static_explorer("k", {"v": [1]}, lambda v: "x"))
    bad("book", "static_explorer: too many frames",
        lambda c: book.static_explorer("k", {"a": list(range(10)), "b": list(range(10))}, lambda a, b: "x"))
    bad("book", "static_explorer: render returns 5", lambda c: book.static_explorer("k", {"v": [1, 2]}, lambda v: 5))
    bad("book", "static_explorer: key ''", lambda c: book.static_explorer("", {"v": [1, 2]}, lambda v: "x"))
    bad("book", "Question: answer out of range", lambda c: book.Question("q", ["a", "b"], 2, ["x", "y"]))
    bad("book", "Question: one option", lambda c: book.Question("q", ["a"], 0, ["x"]))
    bad("book", "Question: feedback short", lambda c: book.Question("q", ["a", "b"], 0, ["x"]))
    bad("book", "quiz: no question", lambda c: book.quiz("k"))
    bad("book", "table: short row", lambda c: book.table(["a", "b"], [[1]]))
    bad("book", "check_swiglu_backward: not a function", lambda c: book.check_swiglu_backward(5))
    valid("book", "check_swiglu_backward: wrong shapes are NOT YET",
          lambda c: book.check_swiglu_backward(lambda *a: (1, 2, 3, 4)), lambda v: not v)
    valid("book", "quiz escapes HTML", lambda c: book.quiz("k", book.Question("<b>q</b>", ["<i>", "b"], 0, ["x", "y"]))
          ._repr_html_(), lambda h: "<b>q</b>" not in h)


def _verdict_or_raise(verdict):
    """A verdict is the checker's answer: a PASS for a bad input is the silent case, NOT YET is clear."""
    if verdict:
        return verdict
    raise ValueError(repr(verdict))


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------
def _cli_cases() -> None:
    def f(*extra, out="out"):
        return lambda c: CLI([*flags(c, out), *extra])
    for flag, values in {"--steps": ["0", "-1"], "--batch-size": ["0"], "--seq-len": ["0"], "--lr": ["0", "-1", "inf",
                         "nan"], "--min-lr": ["1"], "--warmup": ["-1"], "--weight-decay": ["-1", "inf"],
                         "--grad-clip": ["-1", "inf"], "--eval-every": ["0"], "--eval-batches": ["0"], "--seed": ["-1"],
                         "--dim": ["33", "0"], "--n-heads": ["0"], "--n-kv-heads": ["3"], "--vocab-size": ["100"],
                         "--max-seq-len": [str(10**9)], "--norm-eps": ["inf"], "--rope-base": ["inf"],
                         "--experts-per-token": ["3"], "--n-experts": ["-1"], "--steps ": ["abc"],
                         "--threads": ["-1", "0"], "--stop-after": ["-1", "0", "5000"],
                         "--val-fraction": ["0", "1", "-0.5", "nan", "0.0001"], "--sample-tokens": ["-1"],
                         "--device": ["cuda", "cuda:9", "tpu", "mps"], "--preset": ["huge"]}.items():
        for v in values:
            bad("cli", f"{flag.strip()} {v}", f(flag.strip(), v))
    for flag, v in [("--vocab-size", str(10**12)), ("--n-layers", str(10**9)), ("--batch-size", str(10**9)),
                    ("--dim", str(2**20))]:
        bad("cli", f"{flag} {v} (memory)", f(flag, v))
    bad("cli", "--seq-len > --max-seq-len", f("--seq-len", "100"))
    bad("cli", "--out is a file", lambda c: (ctx_path(c, "file").write_text("x"), CLI(flags(c, "file")))[1])
    bad("cli", "--out cannot be created", lambda c: (ctx_path(c, "file").write_text("x"), CLI(flags(c, "file/sub")))[1])
    bad("cli", "--data missing", lambda c: CLI([*flags(c), "--data", c.tmp / "nope.txt"]))
    bad("cli", "--data a folder", lambda c: CLI([*flags(c), "--data", c.tmp]))
    bad("cli", "--data not UTF-8", lambda c: (ctx_path(c, "d.txt").write_bytes("café ".encode("latin-1") * 900),
                                              CLI([*flags(c), "--data", c.tmp / "d.txt"]))[1])
    bad("cli", "--data empty", lambda c: (ctx_path(c, "d.txt").write_text(""),
                                          CLI([*SHAPE, *QUIET, "--data", c.tmp / "d.txt", "--out", c.tmp / "o"]))[1])
    bad("cli", "--data too short", lambda c: (ctx_path(c, "d.txt").write_text("hello"),
                                              CLI([*flags(c), "--data", c.tmp / "d.txt"]))[1])
    bad("cli", "--chat with plain text", lambda c: CLI([*flags(c), "--chat"]))
    bad("cli", "--chat with an empty .jsonl", lambda c: (ctx_path(c, "c.jsonl").write_text("\n"),
                                                         CLI([*flags(c), "--chat", "--data", c.tmp / "c.jsonl"]))[1])
    bad("cli", "--tokenizer a folder", lambda c: CLI([*flags(c), "--tokenizer", c.tmp]))
    bad("cli", "--tokenizer not JSON", lambda c: (ctx_path(c, "t.json").write_text("{x"),
                                                  CLI([*flags(c), "--tokenizer", c.tmp / "t.json"]))[1])
    bad("cli", "--tokenizer with more ids than the model", lambda c: _big_tokenizer(c, CLI))
    bad("cli", "--resume missing", lambda c: CLI(["--resume", c.tmp / "nope", "--out", c.tmp / "o"]))
    bad("cli", "--resume a file", lambda c: (ctx_path(c, "f").write_text("x"), CLI(["--resume", c.tmp / "f"]))[1])
    bad("cli", "--resume an empty folder", lambda c: CLI(["--resume", c.tmp, "--out", c.tmp / "o"]))
    bad("cli", "--resume a damaged checkpoint",
        lambda c: (lambda p: ((p / "model.safetensors").write_bytes(b"x"), CLI(["--resume", p, "--out", p]))[1])(
            copy_ckpt(c)))
    bad("cli", "--resume a finished run", lambda c: (lambda p: CLI(["--resume", p, "--out", p, *QUIET[-5:]]))(
        copy_ckpt(c, "ckpt4")))
    bad("cli", "--resume with --stop-after at its step", lambda c: (lambda p: CLI(
        ["--resume", p, "--out", p, "--stop-after", "2", *QUIET[-5:]]))(copy_ckpt(c)))
    bad("cli", "--init missing", lambda c: CLI(["--init", c.tmp / "nope", "--out", c.tmp / "o"]))
    bad("cli", "--resume and --init", lambda c: CLI(["--resume", c.tmp, "--init", c.tmp]))
    bad("cli", "--resume with --dim", lambda c: CLI(["--resume", c.tmp, "--dim", "64"]))
    bad("cli", "--bf16 with --device meta", f("--bf16", "--device", "meta"))
    bad("cli", "a fresh run into a folder holding a run", lambda c: (lambda p: CLI([*flags(c, "x")[:-1], p,
                                                                                    "--steps", "6"]))(copy_ckpt(c)))
    bad("cli", "a fresh run into a folder holding only a tokenizer.json (reused silently?)",
        lambda c: _other_tokenizer_in_out(c))
    valid("cli", "a run after one that failed with a too-large --tokenizer (poisoned?)", lambda c: _poisoned(c))
    bad("cli", "--lr 1e6 diverges", f("--lr", "1e6", "--grad-clip", "0", "--warmup", "1", "--steps", "30",
                                      "--eval-every", "1"))
    bad("cli", "--lr 1e6 with sampling", f("--lr", "1e6", "--grad-clip", "0", "--warmup", "1", "--steps", "30",
                                           "--eval-every", "5", "--sample-tokens", "10"))
    valid("cli", "a tiny run", f("--steps", "2", "--eval-every", "2"))
    valid("cli", "a tiny run with a sample", f("--steps", "2", "--eval-every", "2", "--sample-tokens", "5"))
    bad("cli", "--max-seq-len 16 --chat (rows of 16 tokens hold prompts only: nothing to learn)", lambda c: CLI(
        [*flags(c), "--chat", "--data", shared_files(c)["chat"], "--max-seq-len", "16", "--steps", "2",
         "--eval-every", "2", "--eval-batches", "50", "--sample-tokens", "60"]))
    valid("cli", "--max-seq-len 48 --chat with a sample of 60 tokens", lambda c: CLI(
        [*flags(c), "--chat", "--data", shared_files(c)["chat"], "--max-seq-len", "48", "--seq-len", "48",
         "--steps", "2", "--eval-every", "2", "--eval-batches", "50", "--sample-tokens", "60"]))
    valid("cli", "--stop-after then --resume", lambda c: _stop_then_resume(c))
    valid("cli", "--chat --init", lambda c: CLI(["--chat", "--init", copy_ckpt(c), "--data", shared_files(c)["chat"],
                                                 *QUIET, "--seq-len", "48", "--steps", "2", "--eval-every", "2",
                                                 "--eval-batches", "50", "--out", c.tmp / "chat"]))
    valid("cli", "--resume continues", lambda c: (lambda p: CLI(["--resume", p, "--out", p, *QUIET[-5:]],
                                                                after=lambda code, err: _step_is(p, 4)))(copy_ckpt(c)))


def _step_is(path: Path, step: int) -> bool:
    return _load_ckpt(path).step == step


def _big_tokenizer(c: Ctx, cli) -> CLI:
    from tinylm.tokenizer import BPETokenizer
    BPETokenizer.train(text(), 400).save(c.tmp / "big.json")
    return cli([*flags(c), "--tokenizer", c.tmp / "big.json"])


def _other_tokenizer_in_out(c: Ctx) -> CLI:
    """A tokenizer of 280 ids sits in --out; the run asks for --vocab-size 300 and its own --data."""
    from tinylm.tokenizer import BPETokenizer
    out = c.tmp / "out"
    out.mkdir()
    BPETokenizer.train(text()[:4000], 280).save(out / "tokenizer.json")
    argv = [a for a in flags(c) if a not in ("--tokenizer", shared_files(c)["tok"])]
    return CLI([*argv, "--steps", "2", "--eval-every", "2"])


def _poisoned(c: Ctx):
    """First a run with a too-large --tokenizer (which must fail), then the same run without it must work."""
    from tinylm.train import main
    from tinylm.tokenizer import BPETokenizer
    BPETokenizer.train(text(), 400).save(c.tmp / "big.json")
    argv = [a for a in flags(c) if a not in ("--tokenizer", shared_files(c)["tok"])]
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            main([str(a) for a in [*argv, "--tokenizer", c.tmp / "big.json", "--steps", "2", "--eval-every", "2"]])
        except SystemExit:
            pass
    return CLI([*argv, "--steps", "2", "--eval-every", "2"])   # must work: a bad input only if it fails


def _stop_then_resume(c: Ctx) -> CLI:
    from tinylm.train import main
    out = c.tmp / "out"
    with contextlib.redirect_stderr(io.StringIO()):
        assert main([str(a) for a in [*flags(c), "--steps", "4", "--eval-every", "2", "--stop-after", "2"]]) == 0
    assert _step_is(out, 2), "--stop-after 2 wrote no step-2 checkpoint"
    return CLI(["--resume", out, "--out", out, *QUIET[-5:]], after=lambda code, err: _step_is(out, 4))


# ---------------------------------------------------------------------------------------------
# files from the internet (issue 28): GGUF files, Hugging Face folders, checkpoints, corpus files
# ---------------------------------------------------------------------------------------------
@cache
def _loader_files(shared: Path):
    """The fuzzer's real small files (tools/fuzz_loaders.py): a GGUF, a tokenizer file, two HF folders, a checkpoint."""
    import fuzz_loaders
    root = shared / f"loaders-{os.getpid()}"       # a worker started after a kill writes its own
    root.mkdir()
    return fuzz_loaders.make_files(root)


def _files(c: Ctx):
    return _loader_files(c.shared)


def _patched_gguf(c: Ctx, change, data_change=None) -> Path:
    """The tiny GGUF with its header changed by change(header bytearray, its fields: fuzz_loaders.walk), then
    padded again, so that the tensors' data stays where their offsets say; data_change(data, header, fields)
    edits that."""
    import fuzz_loaders
    raw = _files(c).gguf
    h = fuzz_loaders.walk(raw)
    head, data = bytearray(raw[:h.end]), bytearray(raw[-(-h.end // 32) * 32:])
    change(head, h)
    if data_change is not None:
        data_change(data, head, h)
    path = c.tmp / "m.gguf"
    path.write_bytes(bytes(head) + b"\0" * (-len(head) % 32) + bytes(data))
    return path


def _gguf_load(path: Path, **kwargs):
    from tinylm.pretrained import load_gguf
    return load_gguf(path, progress=False, **kwargs)


def _field_at(h, what: str) -> int:
    return next(offset for offset, _, name in h.fields if name == what)


def _offset_of(raw, h, name: str) -> int:
    import fuzz_loaders
    return fuzz_loaders._tensor_offset(bytes(raw), h, name)


def _weight(value: float):
    """A data change: the first weight of output_norm.weight (F32) set to value."""
    return lambda data, head, h: struct.pack_into("<f", data, _offset_of(head, h, "output_norm.weight"), value)


def _set_value(key: str, vtype: int, value):
    """A change that gives metadata key `key` a new value of GGUF type vtype."""
    def change(raw, h):
        import fuzz_loaders
        start, at, end, _ = next(kv for kv in h.kvs if kv[3] == key)
        raw[at - 4:end] = struct.pack("<I", vtype) + fuzz_loaders.gguf_value(vtype, value)
    return change


def _repeat_record(kind: str):
    def change(raw, h):
        records, count_at = (h.kvs, 16) if kind == "key" else (h.tensors, 8)
        start, end = records[0][0], records[0][-2]
        raw[start:start] = raw[start:end]
        struct.pack_into("<Q", raw, count_at, struct.unpack_from("<Q", raw, count_at)[0] + 1)
    return change


def _second_spelling(raw, h):
    """A second record for blk.1.attn_q.weight, spelled blk.01 and pointing at the same data."""
    import fuzz_loaders
    start, end, name = next(t for t in h.tensors if t[2] == "blk.1.attn_q.weight")
    record = fuzz_loaders.gguf_value(8, "blk.01.attn_q.weight") + raw[start + 8 + len(name):end]
    raw[end:end] = record
    struct.pack_into("<Q", raw, 8, struct.unpack_from("<Q", raw, 8)[0] + 1)


def _byte_typed_control(raw, h):
    """token_type 3 (control) for the byte token 'a': every encode would drop the letter a."""
    tokens = _tokens(raw, h)
    start, at, end, _ = next(kv for kv in h.kvs if kv[3] == "tokenizer.ggml.token_type")
    struct.pack_into("<i", raw, at + 12 + 4 * tokens.index("a"), 3)


def _tokens(raw, h) -> list[str]:
    start, at, end, _ = next(kv for kv in h.kvs if kv[3] == "tokenizer.ggml.tokens")
    pos, out = at + 12, []
    while pos < end:
        n = struct.unpack_from("<Q", raw, pos)[0]
        out.append(bytes(raw[pos + 8:pos + 8 + n]).decode())
        pos += 8 + n
    return out


def _nested(raw, h):
    """The last metadata record replaced by [[[...[1]...]]], 5,001 arrays deep."""
    import fuzz_loaders
    start, _, end, _ = h.kvs[-1]
    deep = struct.pack("<IQ", 9, 1) * 5000 + struct.pack("<IQI", 4, 1, 1)
    raw[start:end] = fuzz_loaders.gguf_value(8, "deep") + struct.pack("<I", 9) + deep


def _wide_gguf(c: Ctx, head_dim: int, context: int) -> Path:
    """A GGUF of a few hundred KB whose shapes match its metadata, with a wide head and a long context (written
    from tensors: a Config of such a head_dim may be refused before any file is read)."""
    import types

    import torch
    from gguf_files import write_gguf
    torch.manual_seed(0)
    D, C = head_dim, 16
    shapes = {"embed_tokens.weight": (300, C), "layers.0.input_layernorm.weight": (C,),
              "layers.0.self_attn.q_proj.weight": (D, C), "layers.0.self_attn.k_proj.weight": (D, C),
              "layers.0.self_attn.v_proj.weight": (D, C), "layers.0.self_attn.o_proj.weight": (C, D),
              "layers.0.post_attention_layernorm.weight": (C,), "layers.0.mlp.gate_proj.weight": (C, C),
              "layers.0.mlp.up_proj.weight": (C, C), "layers.0.mlp.down_proj.weight": (C, C), "norm.weight": (C,)}
    state = {name: torch.randn(shape) * 0.1 for name, shape in shapes.items()}
    cfg = types.SimpleNamespace(n_layers=1, max_seq_len=8, dim=C, ffn_dim=C, n_heads=1, n_kv_heads=1, head_dim=D,
                                rope_base=10000.0, norm_eps=1e-5, vocab_size=300, tie_embeddings=True)
    fake = types.SimpleNamespace(cfg=cfg, state_dict=lambda: state)
    return write_gguf(c.tmp / "wide.gguf", fake, tok(c), meta={"context_length": context})


def _gguf_meta(c: Ctx, vocab_size: int = 300, **meta) -> Path:
    """A GGUF of a 2-layer model of vocab_size ids, with the 300 tokens of tok(c) and `meta` overriding metadata."""
    import torch
    from gguf_files import write_gguf
    torch.manual_seed(0)
    return write_gguf(c.tmp / "meta.gguf", model(n_layers=2, vocab_size=vocab_size), tok(c), meta=meta)


def _gguf_cases() -> None:
    def patched(change, **kwargs):
        return lambda c: _gguf_load(_patched_gguf(c, change), **kwargs)
    valid("gguf", "load a tiny GGUF", lambda c: _gguf_load(_patched_gguf(c, lambda raw, h: None))[0].cfg.n_layers,
          lambda n: n == 2)
    valid("gguf", "load with max_bytes=10**9", patched(lambda raw, h: None, max_bytes=10**9))
    bad("gguf", "block_count 10**9 with two layers of tensors", lambda c: _gguf_load(_gguf_meta(c, block_count=10**9)))
    bad("gguf", "key_length 4096 and context 2**17 (8 GiB of RoPE tables from a small file)",
        lambda c: _gguf_load(_wide_gguf(c, 4096, 2**17)))
    bad("gguf", "key_length 1024 and context 2**17 (2 GiB of RoPE tables)",
        lambda c: _gguf_load(_wide_gguf(c, 1024, 2**17)))
    bad("gguf", "vocab_size smaller than the token list (embedding of 299 rows, 300 tokens)",
        lambda c: _gguf_load(_gguf_meta(c, vocab_size=299)))
    bad("gguf", "a NaN weight", lambda c: _gguf_load(_patched_gguf(c, lambda raw, h: None, _weight(float("nan")))))
    bad("gguf", "an inf weight", lambda c: _gguf_load(_patched_gguf(c, lambda raw, h: None, _weight(float("inf")))))
    bad("gguf", "two tensors' data overlap", patched(lambda raw, h: struct.pack_into(
        "<Q", raw, _field_at(h, "output_norm.weight offset"), _offset_of(raw, h, "token_embd.weight"))))
    bad("gguf", "a tensor's data unaligned", patched(lambda raw, h: struct.pack_into(
        "<Q", raw, _field_at(h, "blk.0.attn_norm.weight offset"), _offset_of(raw, h, "blk.0.attn_norm.weight") + 4)))
    bad("gguf", "an int32 tensor (I32)", patched(lambda raw, h: struct.pack_into(
        "<I", raw, _field_at(h, "output_norm.weight ggml type"), 26)))
    bad("gguf", "a metadata key given twice", patched(_repeat_record("key")))
    bad("gguf", "a tensor given twice", patched(_repeat_record("tensor")))
    bad("gguf", "a tensor given twice under two spellings (blk.1, blk.01)", patched(_second_spelling))
    bad("gguf", "a byte token typed control", patched(_byte_typed_control))
    bad("gguf", "metadata arrays nested 5,000 deep", patched(_nested))
    bad("gguf", "general.alignment 0", lambda c: _gguf_load(_patched_gguf(c, _add_alignment(0))))
    bad("gguf", "general.alignment 48 (not a power of two)", lambda c: _gguf_load(_patched_gguf(c, _add_alignment(48))))
    for key, vtype, value, label in [
        ("tokenizer.ggml.tokens", 4, 253, "tokens a number"),
        ("tokenizer.ggml.token_type", 7, False, "token_type a bool"),
        ("tokenizer.ggml.merges", 8, "a b", "merges a string"),
        ("tokenizer.ggml.pre", 9, (8, ["smollm"]), "pre a list"),
        ("tokenizer.ggml.eos_token_id", 7, True, "eos_token_id True"), ("tokenizer.ggml.eos_token_id", 4, 10**6,
                                                                         "eos_token_id past the vocabulary"),
        ("llama.block_count", 8, "2", "block_count a string"), ("llama.block_count", 7, True, "block_count True"),
        ("llama.embedding_length", 9, (4, [32]), "embedding_length a list"),
        ("llama.attention.layer_norm_rms_epsilon", 6, float("nan"), "rms epsilon NaN"),
        ("llama.rope.freq_base", 6, float("inf"), "rope.freq_base inf"),
        ("general.architecture", 9, (8, ["llama"]), "architecture a list"),
        ("llama.context_length", 10, 2**64 - 1, "context_length 2**64 - 1"),
    ]:
        bad("gguf", label, lambda c, k=key, t=vtype, v=value: _gguf_load(_patched_gguf(c, _set_value(k, t, v))))
    bad("gguf", "chat_template a list", lambda c: _gguf_load(_patched_gguf(c, _add_key(
        "tokenizer.chat_template", 9, (8, ["x"])))))
    bad("gguf", "max_bytes=1000", patched(lambda raw, h: None, max_bytes=1000))
    bad("gguf", "max_bytes=-1", patched(lambda raw, h: None, max_bytes=-1))
    bad("gguf", "load_gguf(None)", lambda c: _gguf_load(None))
    bad("gguf", "load_gguf(a folder)", lambda c: _gguf_load(c.tmp))


def _add_key(key: str, vtype: int, value):
    def change(raw, h):
        import fuzz_loaders
        at = h.kvs[-1][2]
        raw[at:at] = fuzz_loaders.gguf_value(8, key) + struct.pack("<I", vtype) + fuzz_loaders.gguf_value(vtype, value)
        struct.pack_into("<Q", raw, 16, struct.unpack_from("<Q", raw, 16)[0] + 1)
    return change


def _add_alignment(value: int):
    return _add_key("general.alignment", 4, value)


def _hf_copy(c: Ctx, sharded: bool = False) -> Path:
    f = _files(c)
    return Path(shutil.copytree(f.sharded if sharded else f.hf, c.tmp / "hf"))


def _hf_load(path, **kwargs):
    from tinylm.hf import load_hf_dir
    return load_hf_dir(path, **kwargs)


def _hf_config(c: Ctx, **changes) -> Path:
    path = _hf_copy(c)
    _edit_json(path / "config.json", lambda d: d.update(changes))
    return path


def _hf_index(c: Ctx, change) -> Path:
    path = _hf_copy(c, sharded=True)
    _edit_json(path / "model.safetensors.index.json", change)
    return path


def _hf_outside(c: Ctx, name: str) -> Path:
    """The second shard's tensors named by `name`; a real copy of that shard waits there (loading it is silent)."""
    path = _hf_copy(c, sharded=True)
    second = "model-00002-of-00002.safetensors"
    (c.tmp / "elsewhere").mkdir()
    shutil.copy(path / second, c.tmp / "elsewhere" / "x.safetensors")
    _edit_json(path / "model.safetensors.index.json", lambda d: d["weight_map"].update(
        {k: name.replace("TMP", str(c.tmp)) if isinstance(name, str) else name
         for k, v in d["weight_map"].items() if v == second}))
    return path


def _hf_tensors(c: Ctx, change, sharded: bool = False) -> Path:
    path = _hf_copy(c, sharded)
    f = path / ("model-00002-of-00002.safetensors" if sharded else "model.safetensors")
    _rewrite_tensors(f, change)
    return path


def _later_copy(c: Ctx):
    """A tensor of the first shard also in the second, as 7s: the weight map names the first. The model must
    hold the first shard's values."""
    import torch
    from safetensors.torch import load_file
    path = _hf_copy(c, sharded=True)
    first = load_file(path / "model-00001-of-00002.safetensors")
    key = sorted(first)[0]
    _rewrite_tensors(path / "model-00002-of-00002.safetensors",
                     lambda t: t.update({key: torch.full_like(first[key], 7.0)}))
    return torch.equal(_hf_load(path).state_dict()[key.removeprefix("model.")], first[key])


def _other_shard(index: dict) -> None:
    """The first tensor of the first shard moved, in the weight map only, to the second shard."""
    key = sorted(k for k, v in index["weight_map"].items() if v.startswith("model-00001"))[0]
    index["weight_map"][key] = "model-00002-of-00002.safetensors"


def _hf_cases() -> None:
    import torch
    valid("hf", "load a folder", lambda c: _hf_load(_hf_copy(c)).cfg.n_layers, lambda n: n == 2)
    valid("hf", "load a sharded folder", lambda c: _hf_load(_hf_copy(c, sharded=True)).cfg.n_layers, lambda n: n == 2)
    valid("hf", "a tensor also in a later shard: the weight map's shard wins", _later_copy, bool)
    valid("hf", "a shard holding a tensor the weight map does not name (it is not read)",
          lambda c: _hf_load(_hf_tensors(c, lambda t: t.update(evil=torch.zeros(3)), sharded=True)).cfg.n_layers,
          lambda n: n == 2)
    valid("hf", "load with max_bytes=10**9", lambda c: _hf_load(_hf_copy(c), max_bytes=10**9))
    for label, name in [("../elsewhere/x.safetensors", "../elsewhere/x.safetensors"),
                        ("an absolute path", "TMP/elsewhere/x.safetensors"),
                        ("sub/../../elsewhere/x.safetensors", "sub/../../elsewhere/x.safetensors"),
                        ("a missing file", "missing.safetensors"), ("config.json", "config.json"), ("''", ""),
                        ("a number", 7), ("None", None)]:
        bad("hf", f"index: a shard named {label}", lambda c, n=name: _hf_load(_hf_outside(c, n)))
    bad("hf", "index: a tensor its shard lacks", lambda c: _hf_load(_hf_index(c, _other_shard)))
    for label, raw in [("not JSON", "{x"), ("a list", "[1]"), ("no weight_map", '{"metadata": {}}'),
                       ("weight_map a list", '{"weight_map": []}'), ("nested", "[" * 100_000), ("empty", "")]:
        bad("hf", f"index: {label}", lambda c, r=raw: (lambda p: ((p / "model.safetensors.index.json").write_text(r),
                                                                  _hf_load(p))[1])(_hf_copy(c, sharded=True)))
    bad("hf", "index: a key given twice", lambda c: (lambda p: (
        (p / "model.safetensors.index.json").write_text('{"weight_map": {}, ' + (
            p / "model.safetensors.index.json").read_text()[1:]), _hf_load(p))[1])(_hf_copy(c, sharded=True)))
    for label, changes in [("rope_theta null", {"rope_theta": None}),
                           ("rope_scaling 'linear'", {"rope_scaling": "linear"}),
                           ("rope_parameters without rope_theta", {"rope_parameters": {"rope_type": "default"}}),
                           ("rope_parameters a list", {"rope_parameters": [1]}),
                           ("model_type a list", {"model_type": ["llama"]}),
                           ("head_dim 2**18 (8 GiB of RoPE tables from a few hundred bytes)",
                            {"head_dim": 2**18, "max_position_embeddings": 2048}),
                           ("head_dim 1024 and 2**17 positions", {"head_dim": 1024, "max_position_embeddings": 2**17}),
                           ("num_hidden_layers 10**9", {"num_hidden_layers": 10**9}),
                           ("vocab_size 2**40", {"vocab_size": 2**40}), ("hidden_size '32'", {"hidden_size": "32"}),
                           ("tie_word_embeddings 'yes'", {"tie_word_embeddings": "yes"}),
                           ("rms_norm_eps NaN", {"rms_norm_eps": float("nan")})]:
        bad("hf", f"config.json {label}", lambda c, ch=changes: _hf_load(_hf_config(c, **ch)))
    for label, raw in [("not JSON", "{x"), ("a list", "[]"), ("nested", "[" * 100_000)]:
        bad("hf", f"config.json {label}", lambda c, r=raw: (lambda p: ((p / "config.json").write_text(r),
                                                                       _hf_load(p))[1])(_hf_copy(c)))
    bad("hf", "config.json: a key given twice", lambda c: (lambda p: ((p / "config.json").write_text(
        '{"model_type": "qwen3", ' + (p / "config.json").read_text()[1:]), _hf_load(p))[1])(_hf_copy(c)))
    bad("hf", "model.safetensors of random bytes", lambda c: (lambda p: (
        (p / "model.safetensors").write_bytes(os.urandom(5000)), _hf_load(p))[1])(_hf_copy(c)))
    bad("hf", "model.safetensors empty", lambda c: (lambda p: ((p / "model.safetensors").write_bytes(b""),
                                                               _hf_load(p))[1])(_hf_copy(c)))
    bad("hf", "a NaN weight", lambda c: _hf_load(_hf_tensors(c, lambda t: t["model.norm.weight"].fill_(float("nan")))))
    bad("hf", "an int32 weight of the right shape", lambda c: _hf_load(_hf_tensors(
        c, lambda t: t.update({"model.norm.weight": t["model.norm.weight"].int()}))))
    bad("hf", "two names for one tensor (model.norm.weight, norm.weight)", lambda c: _hf_load(_hf_tensors(
        c, lambda t: t.update({"norm.weight": t["model.norm.weight"].clone()}))))
    bad("hf", "dtype='float16'", lambda c: _hf_load(_hf_copy(c), dtype="float16"))
    bad("hf", "dtype=torch.int8", lambda c: _hf_load(_hf_copy(c), dtype=torch.int8))
    bad("hf", "max_bytes=1000", lambda c: _hf_load(_hf_copy(c), max_bytes=1000))
    bad("hf", "load_hf_dir(None)", lambda c: _hf_load(None))
    bad("hf", "an empty folder", lambda c: _hf_load(c.tmp))


def _loader_cases() -> None:
    """Arguments, memory estimates and the corpus readers."""
    import torch

    from tinylm import Config, KVCache, TinyLM, corpus
    from tinylm.generate import generate
    from tinylm.train import load_checkpoint, load_weights
    for device in ("cuda:4096", "tpu", 5, "meta"):
        bad("checkpoint", f"load_checkpoint(device={device!r})", lambda c, d=device: load_checkpoint(copy_ckpt(c), d))
        bad("checkpoint", f"load_weights(device={device!r})", lambda c, d=device: load_weights(copy_ckpt(c), d))
    bad("checkpoint", "load_checkpoint(None)", lambda c: load_checkpoint(None))
    bad("checkpoint", "load_checkpoint max_bytes=1000", lambda c: load_checkpoint(copy_ckpt(c), max_bytes=1000))
    bad("checkpoint", "config.json: a key given twice", damaged_json('{"step": 0, '))
    bad("config", "TinyLM(Config(vocab_size=2**31, dim=16)) (128 GiB)",
        lambda c: TinyLM(Config(vocab_size=2**31, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=16)))
    bad("config", "Config(head_dim=4096, max_seq_len=2**17) (8 GiB of RoPE tables)",
        lambda c: Config(dim=16, n_heads=1, n_kv_heads=1, head_dim=4096, max_seq_len=2**17))
    bad("config", "TinyLM with head_dim 1024 and 2**17 positions (2 GiB of RoPE tables)",
        lambda c: TinyLM(Config(vocab_size=10, dim=16, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=1024,
                                ffn_dim=16, max_seq_len=2**17)))
    bad("config", "TinyLM(cfg, max_bytes=1000)", lambda c: TinyLM(tiny_cfg(), max_bytes=1000))
    bad("model", "KVCache of batch 10**7 (76 GiB)", lambda c: KVCache(tiny_cfg(), 10**7, 64))
    bad("model", "new_cache of batch 10**7", lambda c: model().new_cache(10**7))
    bad("generate", "a prompt on another device than the model", lambda c: generate(model().to("meta"), ids(1, 4), 2))
    valid("corpus", "the shipped stories and conversations",
          lambda c: (corpus.stories("val"), corpus.conversations("val")),
          lambda r: all(isinstance(s, str) for s in r[0]) and all("messages" in x for x in r[1]))
    for label, content in [("not gzip", b"plain text"), ("truncated gzip", gzip.compress(b'{"text": "a"}\n')[:-9]),
                           ("not UTF-8", gzip.compress(b"\xff\xfe\n")),
                           ("a line not JSON", gzip.compress(b'{"text": "a"}\n{x\n')),
                           ("text a number", gzip.compress(b'{"text": 5}\n')),
                           ("a record a list", gzip.compress(b'[1]\n'))]:
        bad("corpus", f"stories: {label}", lambda c, b=content: _corpus(c, "stories", b))
    for label, record in [("messages a string", {"messages": "hi"}),
                          ("content None", {"messages": [{"role": "user", "content": None}]}),
                          ("role system", {"messages": [{"role": "system", "content": "x"}]}),
                          ("a turn with an extra key", {"messages": [{"role": "user", "content": "x", "id": 1}]})]:
        bad("corpus", f"conversations: {label}", lambda c, r=record: _corpus(
            c, "conversations", gzip.compress(json.dumps(r).encode())))


def damaged_json(prefix: str):
    def run(c):
        path = copy_ckpt(c)
        (path / "config.json").write_text(prefix + (path / "config.json").read_text()[1:])
        return _load_ckpt(path)
    return run


def _corpus(c: Ctx, kind: str, content: bytes):
    from tinylm import corpus
    name = (corpus.STORY_FILES if kind == "stories" else corpus.CHAT_FILES)["train"]
    (c.tmp / name).write_bytes(content)
    return getattr(corpus, kind)("train", c.tmp)


def _cli_loader_cases() -> None:
    def f(*extra):
        return lambda c: CLI([*flags(c), *extra])
    bad("cli", "--seed 2**70", f("--seed", str(2**70)))
    bad("cli", "--seed 2**64", f("--seed", str(2**64)))
    bad("cli", "--threads 100000", f("--threads", "100000"))
    bad("cli", "--out '' (the working directory)", lambda c: (os.chdir(c.tmp), CLI([*flags(c)[:-2], "--out", ""]))[1])
    bad("cli", "--out .", lambda c: (os.chdir(c.tmp), CLI([*flags(c)[:-2], "--out", "."]))[1])


def catalogue() -> dict[str, Case]:
    if not CASES:
        for make in (_config_cases, _model_cases, _generate_cases, _tokenizer_cases, _chat_cases, _checkpoint_cases,
                     _train_cases, _book_cases, _cli_cases, _gguf_cases, _hf_cases, _loader_cases, _cli_loader_cases):
            make()
    return CASES


# ---------------------------------------------------------------------------------------------
# running one case (in the worker)
# ---------------------------------------------------------------------------------------------
class Hang(BaseException):
    """The case's time is up."""


def _oom(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and "allocate" in str(e))


def _run_cli(argv: list, after) -> tuple[str, str]:
    import torch

    from tinylm.train import main
    err, threads = io.StringIO(), torch.get_num_threads()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    except Hang:
        raise
    except BaseException as e:
        kind = "hang/oom" if _oom(e) else "traceback"
        return kind, f"{type(e).__name__}: {e}"[:300]
    finally:
        torch.set_num_threads(threads)
    text = err.getvalue()
    lines = [line for line in text.splitlines() if "error" in line.lower()]
    if "Traceback" in text:
        return "traceback", text.strip().splitlines()[-1][:300]
    if code == 0:
        ok = after(code, text) if after else True
        return ("worked" if ok else "wrong"), "exit 0" + ("" if ok else ": the result is wrong")
    if lines:
        return "clear", f"exit {code}: {lines[-1][:300]}"
    return "traceback", f"exit {code} without an error line: {text[-300:]}"


def run_case(name: str, ctx: Ctx) -> tuple[str, str]:
    """(outcome, message) of one case."""
    case = catalogue()[name]

    def time_up(signum, frame):
        raise Hang
    signal.signal(signal.SIGPROF, time_up)
    signal.setitimer(signal.ITIMER_PROF, CASE_SECONDS)      # CPU seconds: a loaded machine makes no false hang
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = case.run(ctx)
            if isinstance(result, CLI):
                kind, message = _run_cli(result.argv, result.after)
            else:
                right = case.check(result) if case.check else True
                kind, message = ("worked" if right else "wrong"), "returned" + ("" if right else " a wrong result")
    except Hang:
        return "hang/oom", f"still running after {CASE_SECONDS:g} CPU seconds"
    except ValueError as e:
        kind, message = ("clear" if str(e) else "traceback"), f"ValueError: {e}"
    except AssertionError as e:
        kind, message = "wrong", f"wrong: {e}"
    except BaseException as e:
        kind, message = ("hang/oom" if _oom(e) else "traceback"), f"{type(e).__name__}: {e}"
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        os.chdir(ROOT)                          # a case may run the command line in its own folder
    if case.bad:
        outcome = {"clear": "clear", "worked": "silent", "wrong": "silent"}.get(kind, kind)
    else:
        outcome = {"worked": "worked", "clear": "silent", "wrong": "silent"}.get(kind, kind)
    return outcome, message.replace("\n", " ")[:400]


def worker(shared: Path) -> None:
    """Read case names from stdin, answer one JSON line each on stdout; fixtures go to (and come from) shared."""
    import torch
    torch.set_num_threads(1)
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])     # import what a training run needs, once
    import tinylm.train  # noqa: F401
    catalogue()
    mapped = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + HEADROOM, resource.getrlimit(resource.RLIMIT_AS)[1]))
    root = Path(tempfile.mkdtemp(dir=shared.parent))   # the parent's temporary folder: removed at the end
    shared_files(Ctx(root, shared))             # the fixtures, before the first case's clock starts
    _tok4096(Ctx(root, shared))
    out = sys.stdout
    sys.stdout = io.StringIO()                  # a case's prints must not reach the protocol stream
    for n, line in enumerate(sys.stdin):
        name = line.rstrip("\n")
        tmp = root / f"case{n}"
        tmp.mkdir()
        outcome, message = run_case(name, Ctx(tmp, shared))
        shutil.rmtree(tmp, ignore_errors=True)
        out.write(json.dumps({"case": name, "outcome": outcome, "message": message}) + "\n")
        out.flush()
        sys.stdout = io.StringIO()


# ---------------------------------------------------------------------------------------------
# the parent: run every case in workers, print the tables
# ---------------------------------------------------------------------------------------------
def survey(names: list[str], shared: Path) -> list[dict]:
    results, todo = [], list(names)
    while todo:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", str(shared)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1, cwd=ROOT)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        started = True
        while todo:
            name = todo[0]
            proc.stdin.write(name + "\n")
            proc.stdin.flush()
            limit = KILL_SECONDS + (60 if started else 0)            # the first case waits for imports
            started = False
            if (line := _answer(proc, sel, limit)):
                results.append(json.loads(line))
                todo.pop(0)
                continue
            proc.kill()
            proc.wait()
            died = proc.returncode not in (None, -signal.SIGKILL)
            results.append({"case": name, "outcome": "hang/oom",
                            "message": "the worker died" if died else f"killed after {limit:g} CPU s"})
            todo.pop(0)
            break
        else:
            proc.stdin.close()
            proc.wait()
    return results


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux: /proc/<pid>/stat); inf once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("inf")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _answer(proc: subprocess.Popen, sel: selectors.BaseSelector, limit: float) -> str:
    """The worker's answer line, or '' once it has spent `limit` CPU seconds on this case (or 50 x limit of wall
    time, for a worker that waits on something), or died."""
    cpu, wall = _cpu_seconds(proc.pid), time.monotonic()
    while not sel.select(timeout=1.0):
        if _cpu_seconds(proc.pid) - cpu > limit or time.monotonic() - wall > 50 * limit:
            return ""
    return proc.stdout.readline()


def print_tables(results: list[dict]) -> None:
    parts = {"tinylm without the tokenizer": [r for r in results if not r["case"].startswith("tokenizer:")],
             "tokenizer (tinylm/tokenizer.py)": [r for r in results if r["case"].startswith("tokenizer:")]}
    for title, rows in parts.items():
        if not rows:
            continue
        print(f"\n{title}: {len(rows)} cases")
        print(f"| outcome | cases |\n|---|---|")
        for outcome in OUTCOMES:
            print(f"| {outcome} | {sum(r['outcome'] == outcome for r in rows)} |")
    groups = sorted({r["case"].split(":")[0] for r in results})
    print("\nby group: " + ", ".join(
        f"{g} {sum(r['case'].startswith(g + ':') for r in results)}"
        f" ({sum(r['case'].startswith(g + ':') and r['outcome'] in ('clear', 'worked') for r in results)} fine)"
        for g in groups))
    print("\ncases that are not fine (not clear, not worked):")
    for r in results:
        if r["outcome"] not in ("clear", "worked"):
            print(f"  [{r['outcome']}] {r['case']} -> {r['message'][:200]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)   # the fixtures' folder
    parser.add_argument("--json", type=Path, help="write every case's outcome here")
    parser.add_argument("--only", nargs="*", help="run only these groups")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if not Path("/proc/self/statm").exists():
        raise SystemExit("the survey needs Linux (its memory cap reads /proc/self/statm)")
    names = [n for n, c in catalogue().items() if not args.only or c.group in args.only]
    import tinylm
    print(f"tinylm from {Path(tinylm.__file__).parent}; {len(names)} cases")
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tinylm-survey-") as tmp:
        (Path(tmp) / "shared").mkdir()
        results = survey(names, Path(tmp) / "shared")
    print_tables(results)
    print(f"\n{time.time() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
