# Run: .venv/bin/python -m pytest tests/test_hostile.py          (the crash test is marked e2e: -m e2e)
"""Hostile files, diverging runs and crashes (issue 19): nothing lost, nothing hangs, every error says what to do.

Every bad file or flag below is made here, in a temporary folder, and must end in a ValueError (the command
line: a usage error, exit status 2) naming the file or flag, within a few seconds and under a memory cap
(`limits`: RLIMIT_AS a little above what the process already maps, so an allocation of a hostile size fails
instead of swapping). A diverging run stops and keeps its last good checkpoint; a run killed while it
saves leaves a checkpoint that resumes exactly, or a clear refusal (the crash test).
"""

import io
import json
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import redirect_stderr
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file, save_model

from helpers import corpus_text, limits

from tinylm import Config
from tinylm.book import check_function, static_explorer
from tinylm.chat import ChatSession
from tinylm.generate import generate, sample_next
from tinylm.tokenizer import BPETokenizer
from tinylm.train import (History, TrainConfig, TrainingDiverged, build_model, evaluate, load_checkpoint,
                          load_weights, main, make_optimizer, save_checkpoint, train)
from tinylm.train.checkpoint import COMPLETE, SAVING

ROOT = Path(__file__).resolve().parent.parent
TINY = Config(vocab_size=300, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=64)
SHAPE = ["--vocab-size", "300", "--dim", "32", "--n-layers", "1", "--n-heads", "2", "--n-kv-heads", "1",
         "--ffn-dim", "64", "--max-seq-len", "64"]
RUN = ["--batch-size", "2", "--seq-len", "16", "--eval-batches", "1", "--sample-tokens", "0", "--no-progress",
       "--threads", "1"]


def test_the_memory_cap_bites():
    with pytest.raises((MemoryError, RuntimeError)):          # torch: "DefaultCPUAllocator: can't allocate"
        with limits():
            torch.empty(4 << 30, dtype=torch.uint8)             # 4 GiB, over the 1 GiB headroom


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A small text and a tokenizer for it (300 ids), trained once."""
    d = tmp_path_factory.mktemp("hostile")
    text = corpus_text(15_000)
    (d / "data.txt").write_text(text, encoding="utf-8")
    BPETokenizer.train(text, 300).save(d / "tokenizer.json")
    return {"dir": d, "data": d / "data.txt", "tokenizer": d / "tokenizer.json"}


def cli(argv: list, seconds: float = 10.0) -> tuple[int, str]:
    """main(argv) in this process (under limits): (exit status, what it wrote to stderr)."""
    err, threads = io.StringIO(), torch.get_num_threads()
    try:
        with redirect_stderr(err), limits(seconds):
            code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    finally:
        torch.set_num_threads(threads)
    assert "Traceback" not in err.getvalue()
    return code, err.getvalue()


# ---------------------------------------------------------------------------------------------
# item 6: corrupt and hostile checkpoints -> ValueError naming the file and the field, before allocating
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A checkpoint of a tiny model after 2 steps (so AdamW has state)."""
    path = tmp_path_factory.mktemp("good") / "ckpt"
    ids = torch.randint(0, 300, (400,), generator=torch.Generator().manual_seed(0))
    train(build_model(TINY, seed=1), ids, ids, TrainConfig(steps=2, batch_size=2, seq_len=16, eval_every=2,
                                                           eval_batches=1), out=path, progress=False)
    return path


def _json(path: Path, change) -> None:
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def _tensors(path: Path, change) -> None:
    """Rewrite a safetensors file with change(tensors) applied, keeping its metadata (the step stamp)."""
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    change(tensors)
    save_file(tensors, str(path), metadata=meta)


def _nan_weight(t: dict) -> None:
    t["layers.0.self_attn.q_proj.weight"][0, 0] = float("nan")


def _model(**changes):
    return lambda m: m["model"].update(changes)


CORRUPTIONS = {   # name: (file, how to damage it, words the error must contain)
    "truncated state": ("train_state.safetensors", _truncate, "train_state.safetensors is not a readable safetensors"),
    "truncated weights": ("model.safetensors", _truncate, "model.safetensors is not a readable safetensors"),
    "garbage weights": ("model.safetensors", lambda p: p.write_bytes(os.urandom(300)), "not a readable safetensors"),
    "empty weights": ("model.safetensors", lambda p: p.write_bytes(b""), "not a readable safetensors"),
    "missing state": ("train_state.safetensors", lambda p: p.unlink(), "train_state.safetensors is missing"),
    "missing config": ("config.json", lambda p: p.unlink(), "config.json is missing"),
    "config not json": ("config.json", lambda p: p.write_text("{broken"), "config.json is not valid JSON"),
    "config not utf-8": ("config.json", lambda p: p.write_bytes(b"\xff\xfe{}"), "config.json is not valid JSON"),
    "config nested": ("config.json", lambda p: p.write_text("[" * 100_000), "config.json is not valid JSON"),
    "config too large": ("config.json", lambda p: p.write_text(" " * (2 << 20) + "{}"), "too large"),
    "config a list": ("config.json", lambda p: p.write_text("[]"), "expected a JSON object"),
    "wrong format": ("config.json", lambda p: _json(p, lambda m: m.update(format="x")), "field 'format'"),
    "version 3": ("config.json", lambda p: _json(p, lambda m: m.update(version=3)), "unsupported version 3"),
    "missing train": ("config.json", lambda p: _json(p, lambda m: m.pop("train")), "misses 'train'"),
    "unknown field": ("config.json", lambda p: _json(p, lambda m: m.update(oops=1)), "unknown 'oops'"),
    "step a string": ("config.json", lambda p: _json(p, lambda m: m.update(step="2")), "field 'step' must be an int"),
    "step negative": ("config.json", lambda p: _json(p, lambda m: m.update(step=-5)), "field 'step' must be an int"),
    "step a bool": ("config.json", lambda p: _json(p, lambda m: m.update(step=True)), "field 'step' must be an int"),
    "step past steps": ("config.json", lambda p: _json(p, lambda m: m.update(step=9)), r"in \[0, train.steps=2\]"),
    "train empty": ("config.json", lambda p: _json(p, lambda m: m.update(train={})), "field 'train' misses 'steps'"),
    "train unknown": ("config.json", lambda p: _json(p, lambda m: m["train"].update(lrr=1)), "unknown 'lrr'"),
    "train lr inf": ("config.json", lambda p: p.write_text(p.read_text().replace('"lr": 0.0003', '"lr": Infinity')),
                     "field 'train': lr .* got inf"),
    "extra a list": ("config.json", lambda p: _json(p, lambda m: m.update(extra=[])), "field 'extra' must be a JSON"),
    "model empty": ("config.json", lambda p: _json(p, lambda m: m.update(model={})), "model.safetensors holds"),
    "model unknown": ("config.json", lambda p: _json(p, _model(width=3)), "field 'model': unknown Config field"),
    "huge vocab": ("config.json", lambda p: _json(p, _model(vocab_size=10**12)), "embed_tokens.weight is F32 "),
    "huge max_seq_len": ("config.json", lambda p: _json(p, _model(max_seq_len=10**9)), "max_seq_len must be"),
    "huge n_layers": ("config.json", lambda p: _json(p, _model(n_layers=10**9)), "needs at least 3,000,000,000"),
    "huge n_experts": ("config.json", lambda p: _json(p, _model(n_experts=10**9)), "needs at least 3,000,000,000"),
    "experts 2.0": ("config.json", lambda p: _json(p, _model(experts_per_token=2.0)), "experts_per_token must be"),
    "nan weight": ("model.safetensors", lambda p: _tensors(p, _nan_weight), "q_proj.weight holds NaN"),
    "wrong shape": ("model.safetensors", lambda p: _tensors(p, lambda t: t.update({"norm.weight": torch.ones(5)})),
                    r"norm.weight is F32 \(5,\)"),
    "int weights": ("model.safetensors", lambda p: _tensors(p, lambda t: t.update({"norm.weight": t["norm.weight"].int()})),
                    "norm.weight is I32"),
    "missing weight": ("model.safetensors", lambda p: _tensors(p, lambda t: t.pop("norm.weight")), "holds 10 tensors"),
    "moment shape": ("train_state.safetensors",
                     lambda p: _tensors(p, lambda t: t.update({"exp_avg.norm.weight": torch.zeros(3)})),
                     r"'exp_avg.norm.weight' is F32 \(3,\), expected"),
    "unknown tensor": ("train_state.safetensors", lambda p: _tensors(p, lambda t: t.update(evil=torch.zeros(1))),
                       "unexpected tensor 'evil'"),
    "rng size": ("train_state.safetensors",
                 lambda p: _tensors(p, lambda t: t.update({"rng.sampler": torch.zeros(7, dtype=torch.uint8)})),
                 "'rng.sampler' is U8 \\(7,\\)"),
    "rng invalid": ("train_state.safetensors",
                    lambda p: _tensors(p, lambda t: t.update({"rng.torch": torch.zeros(5056, dtype=torch.uint8)})),
                    "not a valid random generator state"),
    "history lengths": ("train_state.safetensors",
                        lambda p: _tensors(p, lambda t: t.update({"history.loss": torch.zeros(5, dtype=torch.float64)})),
                        "history.step and history.loss must have the same length"),
    "history dtype": ("train_state.safetensors",
                      lambda p: _tensors(p, lambda t: t.update({"history.step": t["history.step"].float()})),
                      "'history.step' is F32"),
    "nan moment": ("train_state.safetensors",
                   lambda p: _tensors(p, lambda t: t["exp_avg_sq.norm.weight"].fill_(float("inf"))), "holds NaN or inf"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_a_damaged_checkpoint_is_a_clear_error(good, tmp_path, case):
    name, damage, words = CORRUPTIONS[case]
    ckpt = shutil.copytree(good, tmp_path / "c")
    damage(ckpt / name)
    with limits(), pytest.raises(ValueError, match=words) as err:
        load_checkpoint(ckpt)
    assert str(ckpt) in str(err.value)                            # names the folder or the file


def test_files_of_two_saves_are_never_loaded_together(good, tmp_path):
    other = shutil.copytree(good, tmp_path / "other")
    ckpt = load_checkpoint(other)
    opt = make_optimizer(ckpt.model, 1e-3, 0.1)
    save_checkpoint(other, ckpt.model, opt, 2, ckpt.train_config, torch.Generator(), ckpt.history)  # a new save_id
    for name in ("model.safetensors", "train_state.safetensors"):
        mixed = shutil.copytree(good, tmp_path / name)
        shutil.copy(other / name, mixed / name)
        with pytest.raises(ValueError, match=f"{name} does not belong with config.json.*files of two saves"):
            load_checkpoint(mixed)


def _version_1(path: Path, marker: Path) -> Path:
    """A checkpoint as tinylm wrote them before: config.json version 1, save_model weights, a train_state.pt
    pickle, here one that would create `marker` if anything unpickled it."""
    model = build_model(TINY, seed=2)
    path.mkdir()
    save_model(model, str(path / "model.safetensors"))
    meta = {"format": "tinylm-checkpoint", "version": 1, "step": 3, "model": TINY.to_dict(),
            "train": vars(TrainConfig(steps=3)), "extra": {}}
    (path / "config.json").write_text(json.dumps(meta))

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))
    (path / "train_state.pt").write_bytes(pickle.dumps({"optimizer": Payload()}))
    return path


def test_old_checkpoints_load_their_weights_but_never_a_pickle(tmp_path, monkeypatch):
    marker = tmp_path / "code-ran"
    old = _version_1(tmp_path / "old", marker)
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    with pytest.raises(ValueError, match="version 1 checkpoint.*pickle.*--init") as err:
        load_checkpoint(old)
    assert "weights_only" not in str(err.value)
    model = load_weights(old)                                       # --init reads only safetensors and JSON
    for a, b in zip(build_model(TINY, seed=2).state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)
    assert model.lm_head.weight is model.embed_tokens.weight
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# item 5: an atomic save, whatever moment it is stopped at
# ---------------------------------------------------------------------------------------------
class Crash(Exception):
    """Stands for a kill: raised from inside the save."""


def _save_again(path: Path) -> None:
    """Save step 1 over the step-2 checkpoint at path, with norm.weight + 1 (to tell the two apart)."""
    ckpt = load_checkpoint(path)
    with torch.no_grad():
        ckpt.model.norm.weight.add_(1.0)
    save_checkpoint(path, ckpt.model, make_optimizer(ckpt.model, 1e-3, 0.1), 1, ckpt.train_config,
                    torch.Generator(), History())


def _crash_on_call(n: int, real):
    """real, except that its n-th call raises Crash."""
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(args)
        if len(calls) == n:
            raise Crash
        return real(*args, **kwargs)
    return wrapped


@pytest.mark.parametrize("crash_at, new", [
    ("writing the 2nd file", False), ("the commit", False), ("moving the 1st file in", True),
    ("moving config.json in", True), ("removing .complete", True)])
def test_a_save_stopped_anywhere_leaves_the_old_or_the_new_checkpoint(good, tmp_path, monkeypatch, crash_at, new):
    import tinylm.train.checkpoint as checkpoint
    path = shutil.copytree(good, tmp_path / "c")
    target, name, n = {"writing the 2nd file": (checkpoint, "save_file", 2), "the commit": (os, "rename", 1),
                       "moving the 1st file in": (os, "replace", 1), "moving config.json in": (os, "replace", 3),
                       "removing .complete": (os, "rmdir", 1)}[crash_at]
    monkeypatch.setattr(target, name, _crash_on_call(n, getattr(target, name)))
    with pytest.raises(Crash):
        _save_again(path)
    monkeypatch.undo()
    back = load_checkpoint(path)
    assert back.step == (1 if new else 2)                                      # the old or the new, never a mix
    assert torch.equal(back.model.norm.weight, load_checkpoint(good).model.norm.weight + new)
    save_checkpoint(path, back.model, make_optimizer(back.model, 1e-3, 0.1), 2, back.train_config,
                    torch.Generator(), back.history)                           # the next save tidies up
    assert not (path / SAVING).exists() and not (path / COMPLETE).exists()
    assert load_checkpoint(path).step == 2


# ---------------------------------------------------------------------------------------------
# item 3: a diverging run stops at once and keeps the last good checkpoint
# ---------------------------------------------------------------------------------------------
def test_a_diverging_run_stops_and_keeps_the_good_checkpoint(tmp_path):
    ids = torch.randint(0, 300, (400,), generator=torch.Generator().manual_seed(0))
    cfg = TrainConfig(steps=40, batch_size=2, seq_len=16, lr=1e6, warmup=1, grad_clip=0.0, eval_every=1,
                      eval_batches=1)
    with pytest.raises(TrainingDiverged, match="lower lr.*gradient clipping") as err:
        train(build_model(TINY), ids, ids, cfg, out=tmp_path / "c", progress=False)
    assert isinstance(err.value, ValueError) and err.value.saved_step is not None
    back = load_checkpoint(tmp_path / "c")
    assert back.step == err.value.saved_step < err.value.step
    assert all(bool(p.isfinite().all()) for p in back.model.parameters())
    with pytest.raises(ValueError, match="refusing to save .* holds NaN"):  # never over the good one
        with torch.no_grad():
            back.model.norm.weight[0] = float("nan")
        save_checkpoint(tmp_path / "c", back.model, make_optimizer(back.model, 1e-3, 0.1), 40, cfg,
                        torch.Generator(), History())
    assert load_checkpoint(tmp_path / "c").step == back.step


def test_rates_of_inf_are_refused_up_front():
    for field in ("lr", "weight_decay", "grad_clip", "min_lr"):
        with pytest.raises(ValueError, match=f"{field}.*got inf"):
            TrainConfig(**{field: float("inf")})


# ---------------------------------------------------------------------------------------------
# item 9: NaN and fully masked batches
# ---------------------------------------------------------------------------------------------
def test_a_batch_with_nothing_to_learn_has_loss_0_and_zero_gradients():
    model = build_model(TINY)
    x = torch.randint(0, 300, (2, 8))
    _, loss = model(x, torch.full_like(x, -100))
    loss.backward()
    assert loss.item() == 0.0
    assert all(not p.grad.any() for p in model.parameters() if p.grad is not None)
    with pytest.raises(ValueError, match="no position to score"):           # evaluation refuses instead
        evaluate(model, x[0], 2, 4, labels=torch.full_like(x[0], -100))
    ids = torch.randint(0, 300, (200,))
    with pytest.warns(RuntimeWarning, match="every label of the batch is -100"):
        train(model, ids, None, TrainConfig(steps=1, batch_size=2, seq_len=8, warmup=0), progress=False,
              train_labels=torch.full_like(ids, -100))


def test_nothing_is_chosen_from_nan_logits():
    nan = torch.full((2, 5), float("nan"))
    for temperature in (0.0, 1.0):
        with pytest.raises(ValueError, match="logits hold NaN"):
            sample_next(nan, temperature=temperature)
    with pytest.raises(ValueError, match="-inf everywhere"):
        sample_next(torch.full((5,), float("-inf")), temperature=0)
    with pytest.raises(ValueError, match=r"\+inf"):
        sample_next(torch.tensor([0.0, float("inf")]))
    model = build_model(TINY)
    with torch.no_grad():
        model.norm.weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="logits hold NaN"):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 4, temperature=0)


@pytest.mark.parametrize("T", [2, 16])
def test_a_nan_weight_stops_training_whichever_attention_path(T):
    """torch 2.13's fused CPU attention returns 0 for a NaN query row where the explicit path returns NaN, so
    the two paths can disagree on the loss (documented in `tinylm.model.attention`); the gradient norm is
    NaN either way, and that is where `train` stops."""
    losses = {}
    for explicit in (False, True):
        model = build_model(TINY).set_explicit_attention(explicit)
        with torch.no_grad():
            model.layers[0].self_attn.q_proj.weight[0, 0] = float("nan")
        x = torch.randint(0, 300, (2, T), generator=torch.Generator().manual_seed(0))
        losses[explicit] = model(x, x)[1].item()
        ids = torch.randint(0, 300, (200,))
        with pytest.raises(TrainingDiverged, match="step 1: the loss is .* gradient norm nan"):
            train(model, ids, None, TrainConfig(steps=2, batch_size=2, seq_len=T, warmup=0), progress=False)
    assert np.isnan(losses[True])                                   # the explicit path shows it in the loss
    assert np.isnan(losses[False]) or np.isfinite(losses[False])   # the fused one may hide it (T=2 on 2.13)


# ---------------------------------------------------------------------------------------------
# item 10: Config, the book's checkers and explorers, the chat session
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value, words", [
    ("norm_eps", float("inf"), "norm_eps must be a number > 0"),
    ("rope_base", float("inf"), "rope_base must be a number > 1"),
    ("experts_per_token", 2.0, "experts_per_token must be 1 or 2, got 2.0"),
    ("experts_per_token", True, "experts_per_token must be 1 or 2, got True"),
    ("max_seq_len", 10**9, r"max_seq_len must be an int in \[1, 131072\]"),
])
def test_config_refuses_inf_floats_for_ints_and_endless_tables(field, value, words):
    with limits(seconds=2), pytest.raises(ValueError, match=words):
        Config(**{field: value})


def test_config_stores_numpy_numbers_as_plain_ones():
    cfg = Config(n_experts=np.int64(4), experts_per_token=np.int64(2), rope_base=np.float32(5e5),
                 norm_eps=np.float64(1e-6), mlp_aux_weight=np.float32(0.5), max_seq_len=np.int32(64))
    assert [type(getattr(cfg, f)) for f in ("experts_per_token", "rope_base", "max_seq_len")] == [int, float, int]
    assert Config.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def _endless(x):
    while True:
        pass


def test_check_function_ends_an_endless_loop_and_needs_cases():
    start = time.monotonic()
    verdict = check_function(_endless, lambda x: x, [(np.ones(2),)], timeout=0.5)
    assert not verdict and "did not finish within 0.5 s" in repr(verdict)
    assert time.monotonic() - start < 3
    box = {}                                                          # off the main thread: no SIGALRM there
    worker = threading.Thread(target=lambda: box.update(v=check_function(_endless, abs, [(1,)], timeout=0.5)))
    worker.start()
    worker.join(5)
    assert not worker.is_alive() and not box["v"]
    for cases in ([], (), "abc"):
        with pytest.raises(ValueError, match="non-empty list of argument tuples"):
            check_function(abs, abs, cases)
    assert check_function(abs, abs, [(-1,), (2,)])


class _Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts, self._in = [], False

    def handle_starttag(self, tag, attrs):
        self._in |= tag == "script"
        self.scripts += [""] if tag == "script" else []

    def handle_endtag(self, tag):
        self._in &= tag != "script"

    def handle_data(self, data):
        if self._in:
            self.scripts[-1] += data


def test_static_explorer_frames_cannot_break_out_of_their_script():
    evil = '</script><script>alert("x")</script><!--'               # a frame's HTML, or a slider's value
    x = static_explorer("k", {"v": ["plain", evil, "b</SCRIPT >"]}, lambda v: f"<p>{v}</p>")
    parser = _Scripts()
    parser.feed(x._repr_html_())                                      # (the first frame is shown as HTML)
    assert len(parser.scripts) == 1                                   # one script, not three
    frames = json.loads(parser.scripts[0].split("_f=", 1)[1].split(";window[", 1)[0])
    assert frames == x.frames and evil in frames["1"]                 # the same strings once parsed


def test_chat_session_keeps_no_turn_when_asking_fails(files):
    tok = BPETokenizer.load(files["tokenizer"])
    session = ChatSession(build_model(TINY.replace(vocab_size=tok.vocab_size)), tok, max_new_tokens=4)
    session.ask("Hello!")
    before = list(session.turns)
    with pytest.raises(ValueError, match="lone surrogate"):
        session.ask("bad \ud800 text")
    with torch.no_grad():
        session.model.norm.weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="logits hold NaN"):
        session.ask("Hi again")
    assert session.turns == before and len(before) == 2


# ---------------------------------------------------------------------------------------------
# items 4 and 7: the command line
# ---------------------------------------------------------------------------------------------
def _flags(files, out) -> list:
    return ["--data", files["data"], "--tokenizer", files["tokenizer"], *SHAPE, *RUN, "--out", out]


@pytest.mark.parametrize("extra, words", [
    (["--seq-len", "100"], "--seq-len 100 exceeds the model's max_seq_len 64"),
    (["--val-fraction", "0"], r"--val-fraction must be a number in \(0, 1\)"),
    (["--val-fraction", "0.001"], "needs at least --seq-len"),
    (["--stop-after", "-1"], "--stop-after must be a positive int"),
    (["--stop-after", "0"], "--stop-after must be a positive int"),
    (["--stop-after", "5000"], r"--stop-after must be an int in \[1, --steps=1000\]"),
    (["--threads", "-1"], r"--threads must be an int in \[1, "),
    (["--threads", "0"], r"--threads must be an int in \[1, "),
    (["--sample-tokens", "-1"], "--sample-tokens must be an int >= 0"),
    (["--device", "cuda:99"], "device 'cuda:99'"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--lr", "inf"], "lr .* got inf"),
    (["--lr", "nan"], "lr .* got nan"),
    (["--weight-decay", "inf"], "weight_decay must be a number >= 0, got inf"),
    (["--max-seq-len", str(10**9)], r"max_seq_len must be an int in \[1, 131072\]"),
    (["--vocab-size", str(10**12)], "this run needs about .* more than the"),
    (["--n-layers", str(10**9)], "this run needs about"),
    (["--n-experts", str(10**9), "--experts-per-token", "1"], "this run needs about"),
    (["--batch-size", str(10**9)], "this run needs about"),
    (["--experts-per-token", "3", "--n-experts", "4"], "experts_per_token must be 1 or 2"),
    (["--resume", "nowhere"], "cannot change a model loaded with --resume"),
])
def test_bad_flags_are_usage_errors(files, tmp_path, extra, words):
    code, err = cli([*_flags(files, tmp_path / "out"), *extra])
    assert code == 2 and "error:" in err and re.search(words, err), err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())   # nothing written


@pytest.mark.parametrize("changes", [{}, {"n_layers": 5}, {"n_experts": 6, "n_layers": 3}, {"tie_embeddings": False},
                                     {"n_experts": 1, "experts_per_token": 1, "qk_norm": True}])
def test_the_memory_check_counts_parameters_exactly_without_listing_them(changes):
    from tinylm.params import count_params
    from tinylm.train.cli import _param_count
    cfg = TINY.replace(**changes)
    assert _param_count(cfg) == count_params(cfg).total
    with limits(seconds=1):
        assert _param_count(TINY.replace(n_layers=10**9, n_experts=10**9)) > 10**18


def test_bad_files_and_folders_are_usage_errors(files, tmp_path):
    bad_utf8, a_file = tmp_path / "latin1.txt", tmp_path / "a_file"
    bad_utf8.write_bytes("caf\xe9 ".encode("latin-1") * 100)
    a_file.write_text("x")
    base = [*SHAPE, *RUN]
    for argv, words in [
        ([*_flags(files, a_file)], "--out .*a_file is a file"),
        ([*base, "--data", tmp_path / "missing.txt", "--out", tmp_path / "o"], "missing.txt: no such file"),
        ([*base, "--data", tmp_path, "--out", tmp_path / "o"], "is a folder; pass a UTF-8 text file"),
        ([*base, "--data", bad_utf8, "--out", tmp_path / "o"], "latin1.txt is not UTF-8 text"),
        ([*base, "--data", a_file, "--out", tmp_path / "o"], "needs at least --seq-len"),
        ([*base, "--chat", "--data", files["data"], "--out", tmp_path / "o"], "line 1: not valid JSON"),
        ([*base, "--data", files["data"], "--tokenizer", tmp_path, "--out", tmp_path / "o"], "is a folder"),
        (["--resume", tmp_path / "missing", "--out", tmp_path / "o"], "missing is not a checkpoint folder"),
        (["--init", a_file, "--out", tmp_path / "o"], "a_file is not a checkpoint folder: it is a file"),
        (["--resume", tmp_path, "--out", tmp_path / "o"], "config.json is missing"),
    ]:
        code, err = cli(argv)
        assert code == 2 and re.search(words, err), (argv, err)


def test_a_fresh_run_never_reuses_or_poisons_a_folder(files, tmp_path):
    out, big, other = tmp_path / "out", tmp_path / "big.json", tmp_path / "other.json"
    text = files["data"].read_text(encoding="utf-8")
    BPETokenizer.train(text, 400).save(big)
    BPETokenizer.train(text[:3000], 290).save(other)
    code, err = cli(["--data", files["data"], "--tokenizer", big, *SHAPE, *RUN, "--out", out])  # 400 ids > 300
    assert code == 2 and "has 400 ids but the model only 300" in err
    assert not (out / "tokenizer.json").exists()                     # not copied in before the check
    assert cli([*_flags(files, out), "--steps", "2", "--eval-every", "2"])[0] == 0
    code, err = cli([*_flags(files, out), "--steps", "2"])           # the same folder again: refused
    assert code == 2 and f"--out {out} already holds a run (a checkpoint at step 2)" in err
    assert f"--resume {out}" in err and f"--tokenizer {out / 'tokenizer.json'}" in err
    code, err = cli(["--resume", out, "--out", out, "--no-progress"])   # resuming a finished run
    assert code == 2 and "leaves nothing to train; pass a larger --steps" in err
    code, err = cli(["--resume", out, "--out", out, "--steps", "4", "--tokenizer", other])
    assert code == 2 and "differs from the tokenizer of" in err
    lone = tmp_path / "lone"                                          # a folder holding only a tokenizer
    lone.mkdir()
    shutil.copy(big, lone / "tokenizer.json")
    code, err = cli([*_flags(files, lone), "--steps", "2"])
    assert code == 2 and "already holds a run (tokenizer.json)" in err


def test_resuming_a_run_whose_minutes_are_spent_says_so(files, tmp_path):
    out = tmp_path / "out"
    assert cli([*_flags(files, out), "--minutes", "0.0001", "--eval-every", "1000"])[0] == 0   # 6 ms: a step or two
    code, err = cli(["--resume", out, "--out", out, "--no-progress"])                # it raised in train: a traceback
    assert code == 2 and re.search(r"at step \d+ after .* s of training, so the run's budget of 0.0001 minutes is "
                                   r"already spent .*pass a larger --minutes", err), err


def test_cli_divergence_exits_1_and_says_what_to_try(files, tmp_path):
    out = tmp_path / "out"
    code, err = cli([*_flags(files, out), "--steps", "40", "--eval-every", "1", "--warmup", "1", "--lr", "1e6",
                     "--grad-clip", "0"])
    assert code == 1 and "training diverged at step" in err and "a lower lr (now 1e+06)" in err
    assert f"--resume {out}" in err and "done in" not in err
    ckpt = load_checkpoint(out)
    assert all(bool(p.isfinite().all()) for p in ckpt.model.parameters())


def test_ctrl_c_says_what_is_kept(files, tmp_path, monkeypatch):
    import tinylm.train.cli as cli_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_module, "train", interrupted)
    code, err = cli([*_flags(files, tmp_path / "out"), "--steps", "2"])
    assert code == 130 and "interrupted; no checkpoint was written" in err


# ---------------------------------------------------------------------------------------------
# crash test: kill a training process at random moments while it saves, then resume
# ---------------------------------------------------------------------------------------------
# One Python imports tinylm and what a run needs (seconds), then forks a fresh child per run: a run costs a
# fork, not an import.
# In each child, os.fsync/replace/rename/rmdir and shutil.rmtree (what a save calls, and nothing else in a
# run does) print "stage" before and after they act and pause PAUSE seconds, so that the test can kill the
# child (SIGKILL) at a chosen moment inside the save.
PAUSE = 0.01
DRIVER = f"""
import json, os, shutil, sys, time
import torch
import tinylm.train.cli as cli
torch.optim.AdamW([torch.zeros(1, requires_grad=True)])   # imports torch._dynamo (seconds), once, before forking

def instrument():
    def wrap(module, name):
        real = getattr(module, name)
        def staged(*args, **kwargs):
            os.write(1, b"stage\\n"); time.sleep({PAUSE})
            result = real(*args, **kwargs)
            os.write(1, b"stage\\n"); time.sleep({PAUSE})
            return result
        setattr(module, name, staged)
    for name in ("fsync", "replace", "rename", "rmdir"):
        wrap(os, name)
    wrap(shutil, "rmtree")

for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        instrument()
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        try:
            code = cli.main(json.loads(line))
        except SystemExit as e:
            code = e.code
        os.write(1, f"exit {{code}}\\n".encode())
        os._exit(code if isinstance(code, int) else 3)
    os.write(1, f"pid {{pid}}\\n".encode())
    os.waitpid(pid, 0)
    os.write(1, b"done\\n")
"""


def _state(ckpt) -> list[torch.Tensor]:
    """Everything a resume depends on, as tensors: weights, AdamW moments, the sampler, the losses."""
    moments = [t for name in sorted(ckpt.optimizer_state) for t in ckpt.optimizer_state[name].values()]
    return [*ckpt.model.state_dict().values(), *moments, ckpt.sampler_state, torch.tensor(ckpt.history.loss)]


@pytest.mark.e2e
def test_kills_while_saving_leave_a_checkpoint_that_resumes_exactly(files, tmp_path):
    steps, kills_wanted = 8, 24
    settings = ["--steps", steps, "--eval-every", "1", "--seed", "5"]
    resume = RUN[-5:]                                    # --sample-tokens 0 --no-progress --threads 1
    # the reference: the same run in this process, stopped after every step (resume is exact: test_train)
    refs = {}
    for k in range(1, steps + 1):
        ref = tmp_path / f"ref{k}"
        if k == 1:
            argv = [*_flags(files, ref), *settings]
        else:
            shutil.copytree(tmp_path / f"ref{k - 1}", ref)
            argv = ["--resume", ref, "--out", ref, *resume]
        assert cli([*argv, "--stop-after", k], seconds=60)[0] == 0
        refs[k] = _state(load_checkpoint(ref))
    fresh = [*_flags(files, tmp_path / "run"), *settings]

    rng = random.Random(19)
    out = tmp_path / "run"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, bufsize=1)
    stats = {"kills": 0, "runs": 0, "consistent": 0, "refused": 0, "phase": {"writing": 0, "moving in": 0, "other": 0}}
    deadline = time.monotonic() + 150
    try:
        while stats["kills"] < kills_wanted and time.monotonic() < deadline:
            try:
                step = load_checkpoint(out).step
            except ValueError as e:                                   # killed before its first commit
                assert "is not a checkpoint folder" in str(e), e
                step = None
            if step == steps:
                shutil.rmtree(out)
                step = None
            argv = fresh if step is None else ["--resume", out, "--out", out, *resume]
            driver.stdin.write(json.dumps([str(a) for a in argv]) + "\n")
            pid = int(driver.stdout.readline().split()[1])
            kill_at, seen, killed = rng.randint(1, 80), 0, False
            for line in iter(driver.stdout.readline, ""):
                if line.startswith("stage"):
                    seen += 1
                    if seen == kill_at:
                        time.sleep(rng.uniform(0, PAUSE))
                        os.kill(pid, signal.SIGKILL)
                        killed = True
                elif line.startswith("exit"):
                    assert line.split()[1] == "0", line
                elif line.startswith("done"):
                    break
            stats["runs"] += 1
            if not killed:
                continue
            stats["kills"] += 1
            phase = "writing" if (out / SAVING).exists() else "moving in" if (out / COMPLETE).exists() else "other"
            stats["phase"][phase] += 1
            try:
                ckpt = load_checkpoint(out)
            except ValueError as e:
                assert "is not a checkpoint folder" in str(e), e       # a clear refusal: no checkpoint yet
                stats["refused"] += 1
                continue
            for a, b in zip(_state(ckpt), refs[ckpt.step], strict=True):   # the state of exactly that step
                assert torch.equal(a, b), ckpt.step
            stats["consistent"] += 1
    finally:
        driver.stdin.close()
        driver.kill()
        driver.wait()
    print(f"crash test: {stats}")
    assert stats["kills"] >= kills_wanted and stats["consistent"] + stats["refused"] == stats["kills"]
    assert stats["phase"]["writing"] and stats["phase"]["moving in"]   # the kills did land inside saves
    try:                                                              # finally: resume to the end
        step = load_checkpoint(out).step
    except ValueError:
        step = None
    if step is not None and step < steps:
        assert cli(["--resume", out, "--out", out, *resume], seconds=60)[0] == 0
        for a, b in zip(_state(load_checkpoint(out)), refs[steps], strict=True):
            assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------
# the survey tool (tools/hostile_survey.py) keeps working
# ---------------------------------------------------------------------------------------------
def test_the_survey_classifies_cases(tmp_path):
    from tools import hostile_survey as survey
    cases = survey.catalogue()
    assert len(cases) >= 400
    for group in {c.group for c in cases.values()}:
        kinds = {c.bad for c in cases.values() if c.group == group}
        assert kinds == {True, False}, group                       # every group has bad and valid inputs
    ctx = survey.Ctx(tmp_path, tmp_path)
    for name, outcome in [("config: dim=-1", "clear"), ("generate: greedy from NaN logits", "clear"),
                          ("book: check_function: an empty case list", "clear"), ("config: round trip", "worked"),
                          ("cli: --resume and --init", "clear")]:
        assert survey.run_case(name, ctx)[0] == outcome, name
