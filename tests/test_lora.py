# LoRA (tinylm.lora) on tiny random models; one slow test on SmolLM2-135M.
# Run: .venv/bin/python -m pytest tests/test_lora.py   (add -m slow for the real model)
"""Step 0 is the base model exactly, only A and B train, merging and unmerging, the adapter turned off,
adapter files that round-trip and files that do not fit, refused with a ValueError."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from conftest import SMALL_CONFIGS
from helpers import random_model, tiny
from tinylm.lora import (
    LoRAConfig, LoRALinear, adapter_chain, adapter_disabled, adapter_state_dict, add_lora, count_trainable, load_adapter,
    lora_config, lora_layers, merge_lora, parse_targets, read_adapter_config, remove_lora, save_adapter,
    set_adapter_enabled, unmerge_lora,
)
from tinylm.quantize import Int8Linear, quantize
from tinylm.train import TrainConfig, train

CFG = tiny(dim=48, ffn_dim=80, vocab_size=96, max_seq_len=32)


def ids(n: int = 12, batch: int = 2, vocab: int = 96, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))


def logits(model, x) -> torch.Tensor:
    with torch.no_grad():
        return model(x)[0]


def base_tensors(model) -> dict[str, torch.Tensor]:
    """Every tensor of the model that is not the adapter, cloned, by the plain model's names: the base's bytes."""
    return {n.replace(".base.", "."): t.detach().clone() for n, t in model.state_dict().items() if ".lora_" not in n}


def trained(config: LoRAConfig | None = None, steps: int = 4, model=None):
    """A tiny model with an adapter trained a few steps by `tinylm.train.train` (B is no longer zero)."""
    model = model if model is not None else random_model(CFG, std=0.1)
    add_lora(model, config or LoRAConfig(rank=4, alpha=8))
    stream = torch.randint(0, 96, (400,), generator=torch.Generator().manual_seed(1))
    train(model, stream, None, TrainConfig(steps=steps, batch_size=4, seq_len=16, lr=1e-2, warmup=0,
                                           eval_every=steps), progress=False)
    return model.eval()


# ---------------------------------------------------------------------------------------------
# the adapter at step 0, and what trains
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["grouped", "qk-norm-untied", "wide-heads-qk-norm"])
@pytest.mark.parametrize("init", ["kaiming", "gaussian"])
def test_step_zero_is_the_base_model_exactly(name, init):
    cfg = SMALL_CONFIGS[name]
    base = random_model(cfg, std=0.1)
    model = add_lora(copy.deepcopy(base), LoRAConfig(rank=4, alpha=8, targets="all", init=init))
    x = ids(vocab=cfg.vocab_size)
    assert torch.equal(logits(model, x), logits(base, x))          # B = 0: B A x adds exact zeros
    layer = lora_layers(model)["layers.0.mlp.up_proj"]
    assert layer.lora_A.abs().max() > 0 and layer.lora_B.abs().max() == 0


def test_a_starts_random_with_its_stated_scale_and_seed():
    a = add_lora(random_model(CFG), LoRAConfig(rank=4, init="kaiming"), seed=3)
    b = add_lora(random_model(CFG), LoRAConfig(rank=4, init="kaiming"), seed=3)
    c = add_lora(random_model(CFG), LoRAConfig(rank=4, init="kaiming"), seed=4)
    A = lora_layers(a)["layers.1.mlp.down_proj"].lora_A                  # (4, ffn_dim 80)
    assert A.abs().max() <= 1 / 80 ** 0.5 and A.abs().max() > 0.9 / 80 ** 0.5   # U(-1/sqrt(in), 1/sqrt(in))
    assert torch.equal(A, lora_layers(b)["layers.1.mlp.down_proj"].lora_A)
    assert not torch.equal(A, lora_layers(c)["layers.1.mlp.down_proj"].lora_A)
    wide = random_model(tiny(dim=64, ffn_dim=512))
    state = torch.get_rng_state()
    g = add_lora(wide, LoRAConfig(rank=32, init="gaussian"))
    assert torch.equal(torch.get_rng_state(), state)                     # its own generator
    std = torch.cat([layer.lora_A.detach().flatten() for layer in lora_layers(g).values()]).std()
    assert abs(float(std) - 1 / 32) < 0.002                              # Gaussian, std 1/r


def test_at_step_zero_only_b_gets_a_gradient():
    """B = 0 makes dL/dA = (alpha/r) Bᵀ g xᵀ zero; dL/dB = (alpha/r) g (A x)ᵀ is not: B moves first."""
    model = add_lora(random_model(CFG, std=0.1), LoRAConfig(rank=4, targets="q_proj"))
    x = ids()
    _, loss = model(x, x)
    loss.backward()
    layer = lora_layers(model)["layers.0.self_attn.q_proj"]
    assert layer.lora_A.grad.abs().max() == 0 and layer.lora_B.grad.abs().max() > 0
    assert all(p.grad is None for n, p in model.named_parameters() if ".lora_" not in n)


def test_only_the_adapter_trains_and_the_base_bytes_stay():
    model = random_model(CFG, std=0.1)
    before = base_tensors(model)
    trained(model=model)                                 # 4 AdamW steps of tinylm.train.train
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith((".lora_A", ".lora_B")) for n in trainable)
    after = base_tensors(model)
    assert before.keys() == after.keys() and all(torch.equal(before[n], after[n]) for n in before)
    assert any(layer.lora_B.abs().max() > 0 for layer in lora_layers(model).values())


def test_count_trainable_is_rank_times_in_plus_out():
    model = add_lora(random_model(CFG), LoRAConfig(rank=4, targets=("q_proj", "v_proj")))
    C, H, Hkv, D, L = CFG.dim, CFG.n_heads, CFG.n_kv_heads, CFG.head_dim, CFG.n_layers
    per_layer = 4 * (C + H * D) + 4 * (C + Hkv * D)
    base = sum(p.numel() for p in random_model(CFG).parameters())
    assert count_trainable(model) == (L * per_layer, base + L * per_layer)


# ---------------------------------------------------------------------------------------------
# merging, turning off, removing
# ---------------------------------------------------------------------------------------------
def test_merged_logits_equal_unmerged_and_unmerge_restores_the_base_exactly():
    model = trained()
    x = ids()
    before, weights = logits(model, x), base_tensors(model)
    merge_lora(model)
    assert all(layer.merged for layer in lora_layers(model).values())
    merged = logits(model, x)
    torch.testing.assert_close(merged, before, rtol=0, atol=1e-5)
    assert not torch.equal(base_tensors(model)["layers.0.self_attn.q_proj.weight"],
                           weights["layers.0.self_attn.q_proj.weight"])      # W' = W + BA really changed
    unmerge_lora(model)
    assert all(torch.equal(t, weights[n]) for n, t in base_tensors(model).items())
    assert torch.equal(logits(model, x), before)


def test_adapter_off_gives_the_base_models_logits_exactly():
    base = random_model(CFG, std=0.1)
    model = trained(model=copy.deepcopy(base))
    x = ids()
    adapted = logits(model, x)
    with adapter_disabled(model):
        assert torch.equal(logits(model, x), logits(base, x))
    assert torch.equal(logits(model, x), adapted) and not torch.equal(adapted, logits(base, x))
    set_adapter_enabled(model, False)
    assert torch.equal(logits(model, x), logits(base, x))
    set_adapter_enabled(model, True)
    merge_lora(model)
    with pytest.raises(ValueError, match="unmerge_lora"):
        set_adapter_enabled(model, False)


def test_remove_lora_gives_a_plain_model_back_merged_or_not():
    base = random_model(CFG, std=0.1)
    model = trained(model=copy.deepcopy(base))
    x = ids()
    adapted = logits(model, x)
    plain = remove_lora(copy.deepcopy(model))
    assert lora_layers(plain) == {} and lora_config(plain) is None
    assert torch.equal(logits(plain, x), logits(base, x))
    baked = remove_lora(copy.deepcopy(model), merge=True)
    assert not any(isinstance(m, LoRALinear) for m in baked.modules())
    torch.testing.assert_close(logits(baked, x), adapted, rtol=0, atol=1e-5)
    assert quantize(baked, "int8") is baked                              # a plain model quantizes as usual


def test_an_int8_base_trains_an_adapter_but_does_not_merge():
    """QLoRA-style: the frozen base int8 (dequantize fallback: the fused kernel has no backward), A and B fp32."""
    model = quantize(random_model(CFG, std=0.1), "int8", kernel=False)
    before = base_tensors(model)
    x = ids()
    base_logits = logits(model, x)
    trained(model=model)
    assert isinstance(lora_layers(model)["layers.0.mlp.gate_proj"].base, Int8Linear)
    assert all(torch.equal(t, before[n]) for n, t in base_tensors(model).items())
    assert not torch.equal(logits(model, x), base_logits)
    with adapter_disabled(model):
        assert torch.equal(logits(model, x), base_logits)
    with pytest.raises(ValueError, match="int8"):
        merge_lora(model)


# ---------------------------------------------------------------------------------------------
# adapter files
# ---------------------------------------------------------------------------------------------
def test_save_and_load_round_trip(tmp_path):
    config = LoRAConfig(rank=4, alpha=6, targets="q_proj,v_proj,down_proj", init="gaussian")
    model = trained(config)
    path = save_adapter(model, tmp_path / "a" / "adapter.safetensors")
    assert path.is_file() and not list(path.parent.glob("*.tmp"))
    fields = {k: v for k, v in CFG.to_dict().items() if k not in ("max_seq_len", "dropout")}
    assert read_adapter_config(path) == (config, fields)
    with safe_open(str(path), framework="pt") as f:
        assert set(f.keys()) == set(adapter_state_dict(model))
        assert json.loads(f.metadata()["targets"]) == ["q_proj", "v_proj", "down_proj"]
    fresh = load_adapter(random_model(CFG, std=0.1), path)              # the same base, no adapter yet
    assert lora_config(fresh) == config
    x = ids()
    assert torch.equal(logits(fresh, x), logits(model, x))
    again = load_adapter(fresh, path)                                     # into the same adapter: fine
    assert torch.equal(logits(again, x), logits(model, x))


def test_an_adapter_saved_before_the_block_variants_existed_still_fits(tmp_path):
    """Config fields added after an adapter was saved (norm, mlp, positions, ...) are compared as their
    defaults: the shipped adapter of tinylm/data/lora predates them. A non-default model still refuses it."""
    from safetensors.torch import load_file, save_file

    path = save_adapter(trained(), tmp_path / "adapter.safetensors")
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata())
    model_fields = json.loads(meta["model"])
    for name in ("norm", "norm_placement", "positions", "mlp", "bias"):
        model_fields.pop(name)
    meta["model"] = json.dumps(model_fields)
    old = tmp_path / "old.safetensors"
    save_file(load_file(str(path)), str(old), metadata=meta)
    x = ids()
    assert torch.equal(logits(load_adapter(random_model(CFG, std=0.1), old), x),
                       logits(load_adapter(random_model(CFG, std=0.1), path), x))
    with pytest.raises(ValueError, match="another base model: its norm 'rmsnorm' .this model: 'layernorm'"):
        load_adapter(random_model(CFG.replace(norm="layernorm"), std=0.1), old)


def test_a_model_with_shorter_rope_tables_or_dropout_still_fits(tmp_path):
    path = save_adapter(trained(), tmp_path / "adapter.safetensors")
    short = random_model(CFG.replace(max_seq_len=16, dropout=0.1), std=0.1)
    assert lora_layers(load_adapter(short, path))


def _rewrite(src, dst, drop: str | None = None, tensors: dict | None = None, meta: dict | None = None):
    """Copy an adapter file with a tensor dropped or replaced, or metadata changed (None: a key removed)."""
    with safe_open(str(src), framework="pt") as f:
        old_meta = dict(f.metadata())
        old = {n: f.get_tensor(n) for n in f.keys() if n != drop}
    for k, v in (meta or {}).items():
        if v is None:
            old_meta.pop(k)
        else:
            old_meta[k] = v
    save_file({**old, **(tensors or {})}, str(dst), metadata=old_meta)
    return dst


@pytest.mark.parametrize("change, message", [
    (dict(drop="layers.1.self_attn.q_proj.lora_B"), "missing"),
    (dict(tensors={"layers.2.self_attn.q_proj.lora_A": torch.zeros(4, 48)}), "modules the model lacks"),
    (dict(tensors={"layers.0.self_attn.q_proj.lora_A": torch.zeros(5, 48)}), r"needs a float tensor \(4, 48\)"),
    (dict(tensors={"layers.0.self_attn.q_proj.lora_A": torch.full((4, 48), float("nan"))}), "NaN"),
    (dict(meta={"format": "peft"}), "tinylm-lora"),
    (dict(meta={"version": "7"}), "version"),
    (dict(meta={"alpha": None}), "misses"),
    (dict(meta={"rank": "four"}), "not a valid LoRA configuration"),
    (dict(meta={"rank": "0"}), "rank must be a positive int"),
    (dict(meta={"targets": '["wq"]'}), "unknown LoRA target 'wq'"),
    (dict(meta={"model": json.dumps({**CFG.to_dict(), "dim": 576})}), "another base model: its dim 576"),
    (dict(meta={"alpha": "1e300"}), r"alpha must be a number in \(0, 10000"),       # inf logits otherwise
    (dict(meta={"model": "[" * 100_000 + "]" * 100_000}), "nested too deep"),      # a RecursionError before
    (dict(meta={"targets": "[" * 100_000 + "]" * 100_000}), "nested too deep"),
])
def test_an_adapter_that_does_not_fit_is_refused(tmp_path, change, message):
    path = save_adapter(trained(), tmp_path / "good.safetensors")
    bad = _rewrite(path, tmp_path / "bad.safetensors", **change)
    model = random_model(CFG, std=0.1)
    x = ids()
    before = logits(model, x)
    with pytest.raises(ValueError, match=message):
        load_adapter(model, bad)
    assert lora_layers(model) == {} and torch.equal(logits(model, x), before)   # nothing changed


def test_adapters_of_other_models_and_other_files_are_refused(tmp_path):
    path = save_adapter(trained(), tmp_path / "adapter.safetensors")
    with pytest.raises(ValueError, match="another base model: its n_layers 2 .this model: 3"):
        load_adapter(random_model(CFG.replace(n_layers=3)), path)
    other = add_lora(random_model(CFG), LoRAConfig(rank=2))
    with pytest.raises(ValueError, match="already carries"):
        load_adapter(other, path)
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_adapter(random_model(CFG), tmp_path / "junk.safetensors")
    with pytest.raises(ValueError, match="no such file"):
        load_adapter(random_model(CFG), tmp_path / "missing.safetensors")
    with pytest.raises(ValueError, match="a folder"):
        read_adapter_config(tmp_path)


# ---------------------------------------------------------------------------------------------
# arguments
# ---------------------------------------------------------------------------------------------
def test_targets_by_name_or_group_in_the_models_order():
    assert parse_targets("v_proj,q_proj") == ("q_proj", "v_proj")
    assert parse_targets("attention") == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert parse_targets(["mlp", "q_proj"]) == ("q_proj", "gate_proj", "up_proj", "down_proj")
    assert len(parse_targets("all")) == 7
    for bad, message in [("wq", "unknown LoRA target 'wq'"), ("", "unknown LoRA target ''"), (3, "must name")]:
        with pytest.raises(ValueError, match=message):
            parse_targets(bad)


@pytest.mark.parametrize("kwargs, message", [
    (dict(rank=0), "rank must be a positive int"), (dict(alpha=0), r"alpha must be a number in \(0, 10000"),
    (dict(alpha=1e300), "alpha / rank scales the update"),
    (dict(init="zeros"), "init must be"), (dict(targets="lm_head"), "unknown LoRA target"),
])
def test_bad_lora_configs_say_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LoRAConfig(**kwargs)


def test_misuse_is_a_value_error():
    model = random_model(CFG)
    for call in (merge_lora, unmerge_lora, adapter_state_dict, lambda m: set_adapter_enabled(m, False)):
        with pytest.raises(ValueError, match="no LoRA adapter"):
            call(model)
    with pytest.raises(ValueError, match="TinyLM"):
        add_lora(torch.nn.Linear(3, 3))
    add_lora(model)
    with pytest.raises(ValueError, match="already has a LoRA adapter"):
        add_lora(model)
    from tinylm.config import Config
    moe = random_model(Config(vocab_size=64, dim=32, n_layers=1, n_heads=4, ffn_dim=32, max_seq_len=16,
                              n_experts=2, experts_per_token=1))
    adapted = add_lora(moe, LoRAConfig(rank=2, targets="mlp"))           # every expert's linears
    assert "layers.0.mlp.experts.1.down_proj" in lora_layers(adapted)


def test_a_rank_above_the_narrowest_targeted_layer_is_refused_before_anything_is_allocated():
    from helpers import limits
    from tinylm.lora import max_lora_rank
    model = random_model(CFG)                                        # dim 48; k_proj and v_proj: 48 -> 24
    assert max_lora_rank(model, "all") == 24
    assert max_lora_rank(model, "q_proj,o_proj") == 48
    with limits(seconds=5), pytest.raises(ValueError, match=r"rank must be an int in \[1, 24\] \(at most the "
                                          r"narrowest targeted layer's min\(in, out\): layers\.0\.self_attn\.k_proj "
                                          r"is 48 -> 24\), got 1000000000"):
        add_lora(model, LoRAConfig(rank=10**9))
    assert not lora_layers(model) and all(p.requires_grad for p in model.parameters())   # nothing changed
    add_lora(model, LoRAConfig(rank=48, targets="q_proj,o_proj"))   # the bound itself is allowed
    assert lora_config(model).rank == 48


# ---------------------------------------------------------------------------------------------
# SmolLM2-135M (slow)
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_adapter_step_zero_train_and_reload(tmp_path):
    from tinylm.pretrained import load_gguf, smollm2_gguf_path

    model, tok = load_gguf(smollm2_gguf_path(), progress=False, max_seq_len=64)
    x = torch.tensor([tok.encode("The capital of France is Paris, and the capital of Italy is Rome.")])
    base = logits(model, x)
    add_lora(model, LoRAConfig(rank=8, alpha=16, targets="all"))
    assert torch.equal(logits(model, x), base)
    trainable, total = count_trainable(model)
    assert trainable == 30 * 8 * (6 * 576 + 2 * 192 + 3 * (576 + 1536)) and total == 134_515_008 + trainable
    before = base_tensors(model)
    train(model, x[0].repeat(8), None, TrainConfig(steps=2, batch_size=1, seq_len=32, lr=1e-3, warmup=0,
                                                   eval_every=2), progress=False)
    assert all(torch.equal(t, before[n]) for n, t in base_tensors(model).items())
    path = save_adapter(model, tmp_path / "adapter.safetensors")
    assert path.stat().st_size < 11 * 2**20                              # 2.4M fp32 weights: under 10 MB
    adapted = logits(model.eval(), x)
    with adapter_disabled(model):
        assert torch.equal(logits(model, x), base)
    fresh, _ = load_gguf(smollm2_gguf_path(), progress=False, max_seq_len=64)
    assert torch.equal(logits(load_adapter(fresh, path), x), adapted)


def test_an_adapter_of_the_base_is_its_own_chain_and_an_old_run_names_its_start_in_its_summary(tmp_path):
    sft = save_adapter(trained(), tmp_path / "sft" / "adapter.safetensors")
    assert adapter_chain(sft) == [sft]
    old = save_adapter(trained(), tmp_path / "dpo" / "adapter.safetensors")   # saved before the 'start' key
    (tmp_path / "dpo" / "summary.json").write_text(json.dumps({"start_adapter": str(sft)}))
    assert adapter_chain(old) == [sft, old]
    looped = save_adapter(trained(), tmp_path / "loop" / "adapter.safetensors")
    (tmp_path / "loop" / "summary.json").write_text(json.dumps({"start_adapter": str(looped)}))
    with pytest.raises(ValueError, match="more than 8 adapters"):
        adapter_chain(looped)
