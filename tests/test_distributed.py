# Run: .venv/bin/python -m pytest tests/test_distributed.py   (the torchrun launches are marked e2e:
# `make unit` skips them, `make test` runs them; -m "not e2e" runs the rest of this file)
"""torchrun + DistributedDataParallel on CPU (gloo): 2 processes match 1, resume across world sizes, bad launches."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from helpers import chat_jsonl, corpus_text

from tinylm import Config
from tinylm.distributed import Launch, check_batch_size, launch_device, loss_weight, read_launch, shard
from tinylm.tokenizer import BPETokenizer
from tinylm.train import build_model, get_batch, load_checkpoint, main, train, TrainConfig

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-5   # gloo adds the two halves' gradients in another order than one process: equal up to rounding
# A 19k-parameter model, 6 steps of 4 sequences x 16 tokens: each launch is dominated by starting Python.
STEPS = ["--steps", "6", "--eval-every", "3", "--batch-size", "4", "--seq-len", "16", "--eval-batches", "2",
         "--lr", "3e-3", "--warmup", "2", "--seed", "3", "--threads", "1", "--no-progress", "--sample-tokens", "0"]
SHAPE = ["--vocab-size", "300", "--dim", "32", "--n-layers", "1", "--n-heads", "2", "--n-kv-heads", "1",
         "--ffn-dim", "64", "--max-seq-len", "64"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A small text, a chat file and a tokenizer trained once (so no process trains its own)."""
    d = tmp_path_factory.mktemp("dist")
    text = corpus_text(15_000)
    (d / "data.txt").write_text(text, encoding="utf-8")
    (d / "chat.jsonl").write_text(chat_jsonl(40), encoding="utf-8")
    BPETokenizer.train(text, 300).save(d / "tokenizer.json")
    return {"dir": d, "data": d / "data.txt", "chat": d / "chat.jsonl", "tokenizer": d / "tokenizer.json"}


def _main(args: list[str]) -> None:
    """One plain process, in this Python (main sets the thread count: put it back)."""
    threads = torch.get_num_threads()
    try:
        assert main(args) == 0
    finally:
        torch.set_num_threads(threads)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(args: list[str], nproc: int = 2) -> subprocess.CompletedProcess:
    """`torchrun --nproc_per_node=nproc -m tinylm.train args` on this machine, rendezvous on a free port."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
           f"--master_port={_free_port()}", "-m", "tinylm.train", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=180)


def _flags(files) -> list[str]:
    return ["--data", str(files["data"]), "--tokenizer", str(files["tokenizer"]), *SHAPE, *STEPS]


@pytest.fixture(scope="module")
def one(files) -> Path:
    """The reference: one process, 6 steps."""
    _main([*_flags(files), "--out", str(files["dir"] / "one")])
    return files["dir"] / "one"


@pytest.fixture(scope="module")
def one_part(files) -> Path:
    """One process, the same run stopped after step 3 (with its checkpoint)."""
    _main([*_flags(files), "--out", str(files["dir"] / "one_part"), "--stop-after", "3"])
    return files["dir"] / "one_part"


@pytest.fixture(scope="module")
def two_part(files) -> tuple[Path, subprocess.CompletedProcess]:
    """Two processes under torchrun, the same run stopped after step 3."""
    out = files["dir"] / "two_part"
    r = _torchrun([*_flags(files), "--out", str(out), "--stop-after", "3"])
    assert r.returncode == 0, r.stderr[-3000:]
    return out, r


def _assert_same_run(a, b, tol: float = TOL) -> None:
    assert b.step == a.step
    assert b.history.step == a.history.step
    assert b.history.loss == pytest.approx(a.history.loss, abs=tol, rel=0)
    assert b.history.grad_norm == pytest.approx(a.history.grad_norm, abs=tol, rel=1e-4)
    b_val = dict(zip(b.history.val_step, b.history.val_loss))     # a resumed run also evaluated at its stop
    assert [b_val[s] for s in a.history.val_step] == pytest.approx(a.history.val_loss, abs=tol, rel=0)
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.allclose(sa[name], sb[name], atol=tol, rtol=0), name


# ---------------------------------------------------------------------------------------------
# two processes train like one
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_two_processes_reach_the_loss_and_weights_of_one(one_part, two_part):
    out, r = two_part
    a, b = load_checkpoint(one_part), load_checkpoint(out)
    assert a.step == b.step == 3
    _assert_same_run(a, b)
    assert a.history.loss[-1] < a.history.loss[0] - 0.05             # it did learn something
    assert b.extra["world_size"] == 2 and a.extra["world_size"] == 1
    with safe_open(str(out / "model.safetensors"), "pt") as f:         # the plain module's names were saved
        assert not any(k.startswith("module.") for k in f.keys())
    # only rank 0 logs: one line per evaluation (steps 0 and 3) and one summary
    assert r.stderr.count("val loss") == 2 and r.stderr.count("done in") == 1
    assert "2 processes (gloo), 2 of the 4 sequences" in r.stderr


@pytest.mark.e2e
def test_two_processes_match_one_with_the_chat_loss_mask(files, one):
    # the -100 mask gives each rank a different number of supervised positions: the loss is re-weighted
    # (one whole conversation per row: 48 tokens reach past every prompt into the assistant's answer)
    flags = ["--chat", "--init", str(one), "--data", str(files["chat"]), "--steps", "3", "--eval-every", "3",
             "--batch-size", "4", "--seq-len", "48", "--eval-batches", "100", "--threads", "1", "--no-progress",
             "--sample-tokens", "0"]
    _main([*flags, "--out", str(files["dir"] / "chat1")])
    r = _torchrun([*flags, "--out", str(files["dir"] / "chat2")])
    assert r.returncode == 0, r.stderr[-3000:]
    _assert_same_run(load_checkpoint(files["dir"] / "chat1"), load_checkpoint(files["dir"] / "chat2"))


# ---------------------------------------------------------------------------------------------
# stop, then resume under another world size
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_stopped_on_two_processes_resumed_on_one(files, one, two_part):
    out = files["dir"] / "two_then_one"
    _main(["--resume", str(two_part[0]), "--out", str(out), "--threads", "1", "--no-progress", "--sample-tokens", "0"])
    _assert_same_run(load_checkpoint(one), load_checkpoint(out))


@pytest.mark.e2e
def test_stopped_on_one_process_resumed_on_two(files, one, one_part):
    out = files["dir"] / "one_then_two"
    r = _torchrun(["--resume", str(one_part), "--out", str(out), "--threads", "1", "--no-progress",
                   "--sample-tokens", "0"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming at step 3" in r.stderr
    _assert_same_run(load_checkpoint(one), load_checkpoint(out))


# ---------------------------------------------------------------------------------------------
# bad launches
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_batch_not_divisible_by_the_world_size_is_a_clear_error(files):
    r = _torchrun([*_flags(files), "--batch-size", "3", "--out", str(files["dir"] / "bad")])
    assert r.returncode != 0
    assert "--batch-size 3 (the global batch) is not divisible by the 2 processes" in r.stderr
    assert not (files["dir"] / "bad" / "config.json").exists()


@pytest.mark.e2e
def test_an_error_only_rank_0_sees_stops_every_process(files, one):
    # rank 0 alone checks --out and loads the tokenizer; the others must get its error, not wait for it forever
    r = _torchrun([*_flags(files), "--out", str(one)])          # a fresh run into a folder holding a run
    assert r.returncode != 0
    assert r.stderr.count(f"--out {one} already holds a run") == 2   # said by both processes


def test_missing_rendezvous_variables_are_a_clear_error(files, monkeypatch, capsys):
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(SystemExit) as e:
        main([*_flags(files), "--out", str(files["dir"] / "bad2")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "MASTER_ADDR and MASTER_PORT are not set" in err and "torchrun --nproc_per_node" in err


def test_read_launch_reads_torchrun_variables_and_names_the_bad_one():
    assert read_launch({}) == Launch(rank=0, world_size=1, local_rank=0) and not read_launch({}).distributed
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    got = read_launch(env)
    assert (got.rank, got.world_size, got.local_rank, got.distributed, got.is_main) == (3, 4, 1, True, False)
    assert not read_launch({"RANK": "0", "WORLD_SIZE": "1"}).distributed   # torchrun --nproc_per_node=1
    for bad, field in [({**env, "RANK": "4"}, "RANK"), ({**env, "WORLD_SIZE": "two"}, "WORLD_SIZE"),
                       ({"WORLD_SIZE": "2"}, "RANK"), ({**env, "MASTER_PORT": ""}, "MASTER_PORT"),
                       ({**env, "LOCAL_RANK": "-1"}, "LOCAL_RANK")]:
        with pytest.raises(ValueError, match=field):
            read_launch(bad)


def test_devices_under_torchrun():
    two = Launch(rank=1, world_size=2, local_rank=1)
    assert launch_device(two, torch.device("cpu")) == torch.device("cpu")
    assert launch_device(Launch(), torch.device("cuda", 1)) == torch.device("cuda", 1)   # one process: as given
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        launch_device(two, torch.device("cuda", 0))           # each process takes the GPU of its LOCAL_RANK
    with pytest.raises(ValueError, match="cpu or cuda"):
        launch_device(two, torch.device("mps"))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no GPU"):
            launch_device(two, torch.device("cuda"))


# ---------------------------------------------------------------------------------------------
# the arithmetic behind it, in one process
# ---------------------------------------------------------------------------------------------
TINY = Config(vocab_size=300, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=64, qk_norm=True)


def test_shards_tile_the_global_batch():
    batch = torch.arange(6 * 5).view(6, 5)
    assert torch.equal(torch.cat([shard(batch, r, 3) for r in range(3)]), batch)
    assert torch.equal(shard(batch, 1, 2), batch[3:])
    assert check_batch_size(8, 4) == 2
    with pytest.raises(ValueError, match="--batch-size 6"):
        shard(batch, 0, 4)


def test_weighted_rank_losses_average_to_the_global_gradient():
    """Two simulated ranks with unequal masks: averaging their weighted gradients gives the whole batch's."""
    tokens = torch.randint(0, TINY.vocab_size, (500,))
    x, y = get_batch(tokens, 4, 16, torch.Generator().manual_seed(0))
    y = y.clone()
    y[:2, :12] = -100                                       # rank 0 keeps 8 targets, rank 1 keeps 32
    model = build_model(TINY, seed=0)

    def grads(loss: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    want = grads(model(x, y)[1])                                        # one process, mean over 40 targets
    n = [(y[:2] != -100).sum(), (y[2:] != -100).sum()]
    halves = [(x[:2], y[:2]), (x[2:], y[2:])]
    weighted = [grads(model(xr, yr)[1] * loss_weight(nr, n[0] + n[1], 2)) for (xr, yr), nr in zip(halves, n)]
    plain = [grads(model(xr, yr)[1]) for xr, yr in halves]
    for w, g0, g1, p0, p1 in zip(want, *weighted, *plain):
        assert torch.allclose((g0 + g1) / 2, w, atol=1e-7)             # what DDP computes with the weights
    assert not all(torch.allclose((p0 + p1) / 2, w, atol=1e-5) for w, p0, p1 in zip(want, *plain))


def test_bf16_autocast_trains_with_fp32_weights():
    tokens = torch.randint(0, TINY.vocab_size, (2000,))
    cfg = TrainConfig(steps=3, batch_size=2, seq_len=16, lr=3e-3, warmup=0, eval_every=3, eval_batches=1)
    plain, half = build_model(TINY, seed=0), build_model(TINY, seed=0)
    h32 = train(plain, tokens, tokens, cfg, progress=False)
    h16 = train(half, tokens, tokens, cfg, progress=False, bf16=True)
    assert all(p.dtype == torch.float32 for p in half.parameters())
    assert h16.loss == pytest.approx(h32.loss, abs=0.05)                # bf16 keeps ~3 significant digits
    assert h16.loss != h32.loss                                         # ... and autocast was really on
