# `python -m tinylm.finetune` end to end on a tiny random model (--model-dir), in a few seconds.
# Run: .venv/bin/python -m pytest tests/test_finetune.py
from __future__ import annotations

import json

import pytest
import torch

from helpers import corpus_text, limits, random_model
from tinylm import Config
from tinylm.finetune import main
from tinylm.lora import LoRAConfig, adapter_chain, adapter_state_dict, add_lora, load_adapter, lora_config, lora_layers, remove_lora, save_adapter
from tinylm.tokenizer import BPETokenizer
from tinylm.train import History, TrainConfig, load_weights, make_optimizer, save_checkpoint

CFG = Config(vocab_size=300, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=128)
FAST = ["--n-train", "64", "--n-val", "8", "--n-test", "6", "--max-new-tokens", "8", "--no-progress",
        "--seq-len", "64", "--batch-size", "8", "--eval-every", "20", "--eval-batches", "1"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random model and a tokenizer with the course's chat template, saved as a tinylm checkpoint."""
    path = tmp_path_factory.mktemp("tiny")
    model = random_model(CFG, std=0.05)
    save_checkpoint(path, model, make_optimizer(model, 1e-3, 0.0), 0, TrainConfig(steps=1), torch.Generator(),
                    History(), tokenizer=BPETokenizer.train(corpus_text(5000), 300))
    return path


def test_finetune_trains_saves_the_adapter_and_reports(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--model-dir", str(model_dir), "--out", str(out), "--steps", "40", "--lr", "1e-2",
                 "--rank", "4", "--targets", "q_proj,v_proj,down_proj", *FAST]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    L, C, F, Hkv = CFG.n_layers, CFG.dim, CFG.ffn_dim, CFG.n_kv_heads * CFG.head_dim
    assert summary["trainable_params"] == L * 4 * ((C + C) + (C + Hkv) + (F + C))
    assert f"{summary['trainable_params']:,} trainable of {summary['total_params']:,} parameters" in printed
    assert summary["steps"] == 40 and summary["tokens_per_s"] > 0 and summary["peak_memory_bytes"] > 0
    val = summary["val_loss"]
    assert val["40"] < val["0"]                                        # the adapter learned something
    assert summary["test"]["n"] == 6 and summary["test_base"]["n"] == 6
    low, high = summary["test"]["interval95"]
    assert low <= summary["test"]["accuracy"] <= high
    assert summary["forgetting"]["ppl_base"] > 0 and len(summary["forgetting"]["chat"]) == 3
    assert "test accuracy, adapted:" in printed and "forgetting: English perplexity" in printed
    model = load_adapter(load_weights(model_dir), out / "adapter.safetensors")   # the saved adapter fits
    assert lora_config(model).rank == 4 and len(lora_layers(model)) == 3 * L
    with pytest.raises(SystemExit) as stop:                              # never overwrite an adapter
        main(["--model-dir", str(model_dir), "--out", str(out), *FAST])
    assert stop.value.code == 2 and "already holds adapter.safetensors" in capsys.readouterr().err


def test_baseline_measures_the_base_model_only(model_dir, tmp_path, capsys):
    out = tmp_path / "base"
    assert main(["--model-dir", str(model_dir), "--out", str(out), "--baseline", "--task", "letter_count",
                 "--format", "int8", *FAST]) == 0
    base = json.loads((out / "baseline.json").read_text())
    assert base["task"] == "letter_count" and base["format"] == "int8"
    assert base["test"]["n"] == 6 and len(base["examples"]) == 6
    assert not (out / "adapter.safetensors").exists()
    assert "base model, test accuracy:" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--rank", "0"], "rank must be a positive int"),
    (["--targets", "wq"], "unknown LoRA target 'wq'"),
    (["--n-test", "0"], "--n-test must be a positive int"),
    (["--threads", str(10**6)], "--threads must be an int in [1, "),       # torch would start them (and crash)
    (["--seq-len", "16"], "pass --seq-len"),
    (["--seq-len", "500"], "exceeds the model's max_seq_len 128"),
    (["--task", "multiplication", "--n-train", "5000"], "4,095 distinct operand pairs"),
])
def test_bad_flags_are_usage_errors(model_dir, tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as stop:
        main(["--model-dir", str(model_dir), "--out", str(tmp_path / "x"), *FAST, *flags])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "x" / "adapter.safetensors").exists()


RL_FAST = ["--n-train", "32", "--n-val", "4", "--n-test", "4", "--max-new-tokens", "5", "--no-progress",
           "--eval-every", "2", "--kl-samples", "4", "--temperature", "1.5"]


def test_dpo_starts_from_an_adapter_and_reports_before_and_after(model_dir, tmp_path, capsys):
    start = add_lora(load_weights(model_dir), LoRAConfig(rank=2))            # an "SFT" adapter with B not zero
    with torch.no_grad():
        for layer in lora_layers(start).values():
            layer.lora_B.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(0))
    sft = save_adapter(start, tmp_path / "sft.safetensors")
    out = tmp_path / "dpo"
    assert main(["--model-dir", str(model_dir), "--out", str(out), "--method", "dpo", "--adapter", str(sft),
                 "--prefer", "shorter", "--samples", "3", "--pair-prompts", "6", "--steps", "2", "--batch-size",
                 "2", "--lr", "1e-2", "--rank", "2", *RL_FAST]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "dpo" and summary["start_adapter"] == str(sft) and summary["steps"] == 2
    pairs = summary["dpo"]["pairs"]
    assert 0 < pairs["train_pairs"] <= 6 and pairs["train_prompts"] == 6
    first, last = summary["dpo"]["evals"][0], summary["dpo"]["evals"][-1]
    if pairs["val_pairs"]:
        assert first["val_margin"] == pytest.approx(0, abs=1e-5) and first["val_loss"] == pytest.approx(0.6931, abs=1e-4)  # policy = ref
        assert last["step"] == 2 and "val_accuracy" in last
    assert summary["test_start"]["n"] == summary["test"]["n"] == 4 and summary["kl"]["n"] == 4
    assert len(summary["dpo"]["log"]) == 2 and "margin" in summary["dpo"]["log"][0]
    assert "test accuracy, start:" in printed and "KL to the reference" in printed
    model = load_adapter(load_weights(model_dir), sft)
    remove_lora(model, merge=True)
    assert lora_config(load_adapter(model, out / "adapter.safetensors")).rank == 2   # fits the merged start
    # the DPO adapter names its start, so chat stacks the SFT adapter under it instead of loading it bare
    assert adapter_chain(out / "adapter.safetensors") == [sft, out / "adapter.safetensors"]
    (out / "summary.json").unlink()                                        # the file's metadata alone says so
    assert adapter_chain(out / "adapter.safetensors") == [sft, out / "adapter.safetensors"]
    sft.write_bytes(sft.read_bytes()[:-4] + b"\0\0\0\0")                    # the start changed since
    with pytest.raises(ValueError, match="has changed since"):
        adapter_chain(out / "adapter.safetensors")
    sft.unlink()
    with pytest.raises(ValueError, match="trained on top of the adapter .*which is not here"):
        adapter_chain(out / "adapter.safetensors")


def test_sft_on_chosen_answers_copies_the_pairs_chosen_answers(model_dir, tmp_path, monkeypatch):
    # --answers chosen: DPO's pairs from the base model, the loss on each chosen answer and never on the prompt
    import tinylm.finetune as finetune
    seen = {}
    make_pairs, chosen_rows = finetune._pairs, finetune._chosen_rows
    monkeypatch.setattr(finetune, "_pairs", lambda *a: seen.setdefault("pairs", make_pairs(*a)))
    monkeypatch.setattr(finetune, "_chosen_rows", lambda pairs, pad: seen.setdefault(
        "rows" if "rows" not in seen else "val_rows", chosen_rows(pairs, pad)))
    out = tmp_path / "chosen"
    assert main(["--model-dir", str(model_dir), "--out", str(out), "--answers", "chosen", "--prefer", "shorter",
                 "--samples", "3", "--pair-prompts", "6", "--steps", "2", "--batch-size", "2", "--rank", "2",
                 *RL_FAST]) == 0
    pairs, val_pairs, info = seen["pairs"]
    assert pairs and len(seen["rows"]) == len(pairs) == info["train_pairs"]
    for pair, (ids, labels) in zip(pairs, seen["rows"].encoded):
        assert len(pair.chosen) < len(pair.rejected)                    # shorter: the chosen answer is shorter
        assert ids == pair.prompt + pair.chosen
        assert labels == [-100] * len(pair.prompt) + pair.chosen
    summary = json.loads((out / "summary.json").read_text())
    assert summary["answers"] == "chosen" and summary["pairs"] == info and summary["steps"] == 2
    assert len(summary["test"]["reply_chars"]) == summary["test"]["n"] == 4
    assert summary["test"]["reply_chars"] == [len(e["reply"]) for e in summary["examples"]][:4]


def test_dpo_patience_stops_early_and_keeps_the_best_adapter(model_dir, tmp_path, monkeypatch, capsys):
    # the held-out loss scripted: best after step 1, then worse twice; --patience 2 stops after step 3
    import tinylm.finetune as finetune
    real, losses, adapters = finetune._objective, iter([0.69, 0.5, 0.6, 0.7, 0.4, 0.3]), []

    def scripted(args, tc, model, tok, splits):
        objective, held = real(args, tc, model, tok, splits)

        def measure():
            adapters.append({k: v.clone() for k, v in adapter_state_dict(model).items()})
            return {"loss": next(losses)}
        return objective, {**held, "measure": measure}

    monkeypatch.setattr(finetune, "_objective", scripted)
    out = tmp_path / "dpo"
    assert main(["--model-dir", str(model_dir), "--out", str(out), "--method", "dpo", "--prefer", "shorter",
                 "--samples", "3", "--pair-prompts", "6", "--steps", "10", "--batch-size", "2", "--lr", "1e-2",
                 "--rank", "2", *RL_FAST, "--eval-every", "1", "--patience", "2"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [e["step"] for e in summary["dpo"]["evals"]] == [0, 1, 2, 3] and summary["steps"] == 3
    assert summary["dpo"]["early_stopping"] == {"patience": 2, "metric": "val_loss", "best_step": 1,
                                                "best_val_loss": 0.5, "steps_run": 3}
    assert "stopped after step 3" in capsys.readouterr().out
    saved = load_adapter(load_weights(model_dir), out / "adapter.safetensors")
    for name, tensor in adapter_state_dict(saved).items():                 # step 1's adapter, not step 3's
        assert torch.equal(tensor, adapters[1][name]), name
    assert not torch.equal(adapters[1][name], adapters[3][name])


def test_grpo_reports_the_reward_curve_and_the_time_split(model_dir, tmp_path, capsys):
    out = tmp_path / "grpo"
    assert main(["--model-dir", str(model_dir), "--out", str(out), "--method", "grpo", "--group-size", "3",
                 "--steps", "2", "--batch-size", "2", "--kl-coef", "0.04", *RL_FAST]) == 0
    summary = json.loads((out / "summary.json").read_text())
    grpo, split = summary["grpo"], summary["time"]
    assert [step for step, _ in grpo["reward_curve"]] == [1, 2] and grpo["group_size"] == 3
    assert split["sampling_seconds"] > 0 and split["update_seconds"] > 0
    assert split["sampling_seconds"] + split["update_seconds"] + split["eval_seconds"] == \
        pytest.approx(split["train_seconds"])
    assert "sampling" in capsys.readouterr().out and (out / "adapter.safetensors").exists()


@pytest.mark.parametrize("flags, message", [
    (["--adapter", "x.safetensors"], "--adapter is a start for --method dpo or grpo"),
    (["--method", "grpo", "--group-size", "1"], "--group-size must be >= 2"),
    (["--method", "dpo", "--samples", "1"], "--samples must be >= 2"),
    (["--method", "dpo", "--beta", "0"], "--beta must be > 0"),
    (["--method", "grpo", "--max-new-tokens", "120"], "pass a smaller --max-new-tokens"),
    (["--method", "grpo", "--patience", "2"], "--patience stops a --method dpo run"),
    (["--method", "dpo", "--patience", "0"], "--patience must be a positive int"),
    (["--method", "dpo", "--answers", "chosen"], "--answers chosen is what --method sft copies"),
    (["--baseline", "--answers", "chosen"], "--baseline trains nothing"),
    (["--answers", "chosen", "--samples", "1"], "--samples must be >= 2"),
])
def test_bad_rl_flags_are_usage_errors(model_dir, tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as stop:
        main(["--model-dir", str(model_dir), "--out", str(tmp_path / "x"), *FAST, *flags])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def _no_loading(*args, **kwargs):
    raise AssertionError("the model was loaded before the flags were checked")


def test_an_out_that_is_a_file_is_refused_before_loading(model_dir, tmp_path, capsys, monkeypatch):
    import tinylm.finetune
    monkeypatch.setattr(tinylm.finetune, "load_chat_model", _no_loading)
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me")
    for out, words in [(a_file, f"--out {a_file} is a file"), (a_file / "run", f"--out {a_file / 'run'} is inside "
                                                                                f"{a_file}, a file")]:
        for extra in ([], ["--baseline"]):
            with pytest.raises(SystemExit) as stop:
                main(["--model-dir", str(model_dir), "--out", str(out), *FAST, *extra])
            err = capsys.readouterr().err
            assert stop.value.code == 2 and words in err and "pass a folder" in err, err
    assert a_file.read_text() == "keep me"


@pytest.mark.parametrize("flags, message", [      # CFG: dim 32, k_proj and v_proj 32 -> 16, the rest 32 or wider
    (["--rank", str(10**9)], "--rank must be an int in [1, 16] (at most the narrowest targeted layer's min(in, out): "
                             "layers.0.self_attn.k_proj is 32 -> 16), got 1000000000"),
    (["--rank", "17"], "--rank must be an int in [1, 16]"),
    (["--rank", "33", "--targets", "q_proj,o_proj,mlp"], "--rank must be an int in [1, 32] (at most the narrowest "
                                                         "targeted layer's min(in, out): layers.0.self_attn.q_proj"),
    (["--rank", "33", "--method", "grpo", "--group-size", "2"], "--rank must be an int in [1, 16]"),
])
def test_a_rank_wider_than_the_layers_is_refused_before_training(model_dir, tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as stop, limits(seconds=60):
        main(["--model-dir", str(model_dir), "--out", str(tmp_path / "x"), *FAST, "--steps", "2", *flags])
    captured = capsys.readouterr()
    assert stop.value.code == 2 and message in captured.err, captured.err
    assert "trainable of" not in captured.out and not (tmp_path / "x").exists()       # nothing trained or written


def test_resume_says_a_finetune_run_cannot_be_resumed(model_dir, tmp_path, capsys, monkeypatch):
    import tinylm.finetune
    monkeypatch.setattr(tinylm.finetune, "load_chat_model", _no_loading)
    with pytest.raises(SystemExit) as stop:
        main(["--model-dir", str(model_dir), "--out", str(tmp_path / "x"), "--resume", str(tmp_path / "x"), *FAST])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--resume: a fine-tuning run cannot be resumed" in err, err
    assert "another --out" in err and "--adapter" in err
