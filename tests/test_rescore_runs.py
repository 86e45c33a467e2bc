# tools/rescore_runs.py: the logic with the model faked (no SmolLM2), then once end to end on a tiny random model.
# Run: .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_rescore_runs.py
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import rescore_runs  # noqa: E402
from helpers import corpus_text, random_model  # noqa: E402
from tinylm import Config  # noqa: E402
from tinylm.evaluate import TaskResult  # noqa: E402
from tinylm.finetune import _accuracy, main as finetune  # noqa: E402
from tinylm.lora import LoRAConfig, add_lora, lora_layers, save_adapter  # noqa: E402
from tinylm.tasks import make_splits  # noqa: E402
from tinylm.tokenizer import BPETokenizer  # noqa: E402
from tinylm.train import History, TrainConfig, make_optimizer, save_checkpoint  # noqa: E402

CFG = Config(vocab_size=300, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=128)
N_TEST = 6
START_RIGHT = [1, 1, 0, 0, 1, 0]
END_RIGHT = {"a": [1, 0, 1, 1, 1, 1], "b": [0, 0, 0, 0, 1, 0], "c": [1] * 8, "base": [0] * N_TEST}
BASE_RIGHT = [1, 0, 0, 0, 0, 0]


def _problems(n_test: int = N_TEST):
    return make_splits("addition", 20, 4, n_test, seed=0)["test"]


def _adapter(path: Path, start: Path | None = None, seed: int = 0) -> Path:
    model = add_lora(random_model(CFG, std=0.05), LoRAConfig(rank=2), seed=seed)
    return save_adapter(model, path, start=start)


@pytest.fixture
def start(tmp_path):
    return _adapter(tmp_path / "sft.safetensors")


def _reply(problem, right: int) -> str:
    return f"It is {problem.target}." if right else "I do not know."


def _run(tmp_path: Path, name: str, start: Path | None, n_test: int = N_TEST, recorded=(3, 4), meta=True) -> Path:
    """A run folder as tinylm.finetune --method grpo writes it (the adapter's tensors are random; nothing
    loads them here), with its start named and its first two examples' replies."""
    folder = tmp_path / name
    folder.mkdir()
    _adapter(folder / "adapter.safetensors", start=start if meta else None, seed=1)
    command = ["python", "-m", "tinylm.finetune", "--method", "grpo", "--task", "addition", "--n-train", "20",
               "--n-val", "4", "--n-test", str(n_test), "--threads", "2", "--out", str(folder)]
    command += ["--adapter", str(start)] if start else []
    problems = _problems(n_test)
    key = "base" if start is None else name
    examples = [{"question": p.question, "target": p.target, "reply": _reply(p, END_RIGHT[key][i]),
                 "right": bool(END_RIGHT[key][i]), "base_reply": _reply(p, _start_right(start, n_test)[i])}
                for i, p in enumerate(problems[:2])]
    summary = {"command": command, "method": "grpo", "base": "SmolLM2-135M-Instruct",
               "start_adapter": str(start or ""), "format": "fp32", "task": "addition", "max_new_tokens": 32,
               "test_start": {"correct": recorded[0], "n": n_test}, "test": {"correct": recorded[1], "n": n_test},
               "examples": examples, "threads": 2, "cpu_count": 2}
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return folder


def _start_right(start, n_test):
    if start is None:
        return BASE_RIGHT
    return START_RIGHT if n_test == N_TEST else [1] * n_test


class FakeModel:
    def __init__(self):
        self.loaded: list[str] = []        # the adapters loaded onto it, in order
        self.merged = 0

    def eval(self):
        return self


@pytest.fixture
def fake(monkeypatch):
    """The tool's loading and scoring replaced: a model that remembers its adapters, and an evaluate_task that
    answers from END_RIGHT / START_RIGHT by which adapters are on the model."""
    seen = {"loads": 0, "scored": []}

    def load_chat_model(model_dir=None):
        seen["loads"] += 1
        return FakeModel(), "tok", "SmolLM2-135M-Instruct"

    def load_adapter(model, path):
        model.loaded.append(Path(path).name if Path(path).name != "adapter.safetensors" else Path(path).parent.name)
        return model

    def remove_lora(model, merge=False):
        assert merge                     # the start is merged, as finetune does
        model.merged = len(model.loaded)
        return model

    def evaluate_task(model, tok, problems, max_new_tokens=32, batch_size=32):
        seen["scored"].append((tuple(model.loaded), len(problems), max_new_tokens, batch_size))
        if not model.loaded:
            right = BASE_RIGHT
        elif model.loaded == ["sft.safetensors"]:
            assert model.merged == 1
            right = START_RIGHT if len(problems) == N_TEST else [1] * len(problems)
        else:
            assert model.merged == len(model.loaded) - 1     # the run's adapter on top, not merged
            right = END_RIGHT[model.loaded[-1]]
        return TaskResult(list(problems), [_reply(p, r) for p, r in zip(problems, right)])

    for name, f in [("load_chat_model", load_chat_model), ("load_adapter", load_adapter),
                    ("remove_lora", remove_lora), ("evaluate_task", evaluate_task)]:
        monkeypatch.setattr(rescore_runs, name, f)
    return seen


def test_accuracy_records_which_problems_were_right():
    problems = _problems()
    result = TaskResult(problems, [_reply(p, r) for p, r in zip(problems, END_RIGHT["a"])])
    record = _accuracy(result)
    assert record["right"] == END_RIGHT["a"] and all(type(r) is int for r in record["right"])
    assert record["correct"] == sum(END_RIGHT["a"]) == 5 and record["n"] == N_TEST


def test_writes_the_lists_the_counts_and_mcnemar(tmp_path, start, fake, capsys):
    a, b = _run(tmp_path, "a", start), _run(tmp_path, "b", start, recorded=(3, 1))
    argv = ["--runs", str(a), str(b), "--threads", "1"]
    assert rescore_runs.main(argv) == 0
    text = (a / "rescored.json").read_text()
    done = json.loads(text)
    assert done["start_right"] == START_RIGHT and done["end_right"] == END_RIGHT["a"]
    assert '"end_right": [1, 0, 1, 1, 1, 1]' in text               # one line per list
    # each reply's length: "It is N." when right, "I do not know." when wrong
    assert all(n == (len("I do not know.") if not r else n) for n, r in zip(done["end_reply_chars"],
                                                                             done["end_right"]))
    assert len(done["start_reply_chars"]) == len(START_RIGHT) and min(done["end_reply_chars"]) > 0
    assert done["recorded"] == {"start_correct": 3, "end_correct": 4}      # the summary's, kept
    assert done["rescored"] == {"start_correct": 3, "end_correct": 5}      # what was scored now
    # by hand: right only at the start on problem 1, only at the end on 2, 3 and 5: 4 discordant, 1 of them
    # the start's; two-sided exact binomial p = 2 (C(4,0) + C(4,1)) / 2^4
    assert done["mcnemar"]["only_start"] == 1 and done["mcnemar"]["only_end"] == 3
    assert done["mcnemar"]["p"] == pytest.approx(2 * (1 + 4) / 16)
    assert done["examples_same"] == {"of": 2, "start": 2, "end": 2}
    assert done["recorded_right_same"] == {"start": None, "end": None}   # the summary had no lists
    assert done["command"] == ["python", "tools/rescore_runs.py", *argv]
    assert done["n"] == N_TEST and done["task"] == "addition" and done["start_adapter"] == str(start)
    assert done["machine"]["threads"] == 1 and done["machine"]["torch"] == torch.__version__
    assert {"cpu", "cpu_class", "cores"} <= set(done["machine"]) and done["run_machine"]["threads"] == 2
    other = json.loads((b / "rescored.json").read_text())
    # b: problems 0 and 1 right only at the start, none only at the end: p = 2 C(2,0) / 2^2
    assert other["mcnemar"] == {"only_start": 2, "only_end": 0, "p": 0.5}
    assert other["start_right"] == START_RIGHT and other["end_right"] == END_RIGHT["b"]
    printed = capsys.readouterr().out
    assert "[1/2]" in printed and "[2/2]" in printed and "p = 0.625" in printed


def test_a_shared_start_is_scored_once_per_problem_list(tmp_path, start, fake, capsys):
    a, b = _run(tmp_path, "a", start), _run(tmp_path, "b", start)
    c = _run(tmp_path, "c", start, n_test=8)          # the same start on other problems: scored again
    base = _run(tmp_path, "base", None)                # another start: the base
    assert rescore_runs.main(["--runs", str(a), str(b), str(c), str(base), "--threads", "1"]) == 0
    starts = [s for s in fake["scored"] if s[0] in ((), ("sft.safetensors",))]
    assert starts == [(("sft.safetensors",), N_TEST, 32, 50), (("sft.safetensors",), 8, 32, 50), ((), N_TEST, 32, 50)]
    ends = [s[0] for s in fake["scored"] if s not in starts]
    assert ends == [("sft.safetensors", "a"), ("sft.safetensors", "b"), ("sft.safetensors", "c"), ("base",)]
    assert fake["loads"] == 4                           # one model per run: nothing carries over
    assert json.loads((b / "rescored.json").read_text())["start_right"] == START_RIGHT    # from the cache
    assert json.loads((c / "rescored.json").read_text())["start_right"] == [1] * 8
    assert json.loads((base / "rescored.json").read_text())["start_right"] == BASE_RIGHT
    assert "scored already" in capsys.readouterr().out


def _no(*args, **kwargs):
    raise AssertionError("a model was loaded or scored")


def test_dry_run_loads_nothing_and_says_what_it_would_score(tmp_path, start, monkeypatch, capsys):
    for name in ("load_chat_model", "load_adapter", "evaluate_task", "load_start", "score"):
        monkeypatch.setattr(rescore_runs, name, _no)
    a, b, base = _run(tmp_path, "a", start), _run(tmp_path, "b", start), _run(tmp_path, "base", None)
    assert rescore_runs.main(["--runs", str(a), str(b), str(base), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"{a}: grpo on addition, {N_TEST} test problems" in printed and f"start {start} [start 1]" in printed
    assert "start the base model [start 2]" in printed
    assert f"to score: 2 start(s) on {2 * N_TEST} problems and 3 end(s) on {3 * N_TEST}, {5 * N_TEST} problems" \
        in printed
    assert not any(f.name == "rescored.json" for f in tmp_path.rglob("*"))


def test_the_shipped_runs_plan_without_a_model(monkeypatch, capsys):
    monkeypatch.setattr(rescore_runs, "load_chat_model", _no)
    assert rescore_runs.main(["--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "to score: 3 start(s) on 900 problems and 5 end(s) on 1600, 2500 problems in all" in printed


def _break(case, tmp_path, start):
    folder = _run(tmp_path, "a", start)
    if case == "no summary":
        (folder / "summary.json").unlink()
    elif case == "no adapter":
        (folder / "adapter.safetensors").unlink()
    elif case == "no start":
        start.unlink()
    elif case == "start changed":
        start.write_bytes(start.read_bytes()[:-4] + b"\1\2\3\4")      # its B was 0: other bytes
    elif case == "edited":
        summary = json.loads((folder / "summary.json").read_text())
        summary["max_new_tokens"] = 16
        (folder / "summary.json").write_text(json.dumps(summary))
    elif case == "other problems":
        summary = json.loads((folder / "summary.json").read_text())
        summary["examples"][0]["question"] = "What is 1 + 1?"
        (folder / "summary.json").write_text(json.dumps(summary))
    elif case == "an sft run":
        summary = json.loads((folder / "summary.json").read_text())
        del summary["test_start"]
        (folder / "summary.json").write_text(json.dumps(summary))
    return folder if case != "missing folder" else tmp_path / "nowhere"


@pytest.mark.parametrize("case, words", [
    ("no summary", ["has no summary.json", "pass the folder of a run made by python -m tinylm.finetune"]),
    ("no adapter", ["has no adapter.safetensors", "put the run's adapter back"]),
    ("no start", ["sft.safetensors (summary.json's start_adapter", "is not here", "put that file there"]),
    ("start changed", ["that file has changed since"]),
    ("edited", ["--max-new-tokens is 32 but the summary records 16", "restore it"]),
    ("other problems", ["not the first problems of the rebuilt test split"]),
    ("an sft run", ["not a DPO or GRPO run's summary"]),
    ("missing folder", ["no such run folder", "dpo/addition"]),
])
def test_a_broken_run_is_refused_before_anything_is_scored(tmp_path, start, monkeypatch, case, words):
    for name in ("load_chat_model", "evaluate_task", "load_start", "score"):
        monkeypatch.setattr(rescore_runs, name, _no)
    good = tmp_path / "good"
    good.mkdir()
    good = _run(good, "b", _adapter(good / "sft.safetensors"))
    bad = _break(case, tmp_path, start)
    with pytest.raises(SystemExit) as stop:
        rescore_runs.main(["--runs", str(good), str(bad)])
    message = str(stop.value.code)
    assert message.startswith("rescore_runs: ") and all(w in message for w in words), message
    assert not (good / "rescored.json").exists()          # every run is checked before any is scored


# ---------------------------------------------------------------------------------------------
# End to end: a real (tiny) finetune run, re-scored for real, gives the run's own lists and replies
# ---------------------------------------------------------------------------------------------
def test_rescoring_a_real_run_gives_back_what_it_recorded(tmp_path, monkeypatch):
    model_dir = tmp_path / "tiny"
    model = random_model(CFG, std=0.05)
    save_checkpoint(model_dir, model, make_optimizer(model, 1e-3, 0.0), 0, TrainConfig(steps=1), torch.Generator(),
                    History(), tokenizer=BPETokenizer.train(corpus_text(5000), 300))
    sft = add_lora(random_model(CFG, std=0.05), LoRAConfig(rank=2))    # a start whose B is not zero
    with torch.no_grad():
        for layer in lora_layers(sft).values():
            layer.lora_B.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(0))
    sft = save_adapter(sft, tmp_path / "sft.safetensors")
    out = tmp_path / "dpo"
    flags = ["--model-dir", str(model_dir), "--out", str(out), "--method", "dpo", "--adapter", str(sft),
             "--prefer", "shorter", "--samples", "3", "--pair-prompts", "6", "--steps", "2", "--batch-size", "2",
             "--lr", "5e-2", "--rank", "2",
             "--n-train", "32", "--n-val", "4", "--n-test", "6", "--max-new-tokens", "5", "--eval-batch-size", "4",
             "--eval-every", "2", "--kl-samples", "4", "--temperature", "1.5", "--threads", "1", "--no-progress"]
    monkeypatch.setattr(sys, "argv", ["-m", *flags])      # the command summary.json records, as typed
    assert finetune(flags) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["test"]["right"]) == len(summary["test_start"]["right"]) == 6
    assert rescore_runs.main(["--runs", str(out), "--threads", "1"]) == 0
    done = json.loads((out / "rescored.json").read_text())
    assert done["start_right"] == summary["test_start"]["right"] and done["end_right"] == summary["test"]["right"]
    assert done["recorded_right_same"] == {"start": 6, "end": 6}
    assert done["rescored"] == done["recorded"]
    assert done["examples_same"] == {"of": 6, "start": 6, "end": 6}   # every reply, character for character
    assert done["eval_batch_size"] == 4 and done["max_new_tokens"] == 5
    # the end is not the start: the run's adapter changed some replies (else the test would prove little)
    assert [e["reply"] for e in summary["examples"]] != [e["base_reply"] for e in summary["examples"]]
    assert math.isfinite(done["mcnemar"]["p"])
