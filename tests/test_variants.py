# The architecture variants for ablations (tinylm.variants). Run: .venv/bin/python -m pytest tests/test_variants.py
import pytest
import torch

from tinylm import Config, TinyLM, count_params
from tinylm.hf import to_hf
from tinylm.numpy_model import model_forward, params_from_torch
from tinylm.params import state_size, weight_shapes
from tinylm.quantize import quantize
from tinylm.train import History, TrainConfig, build_model, load_checkpoint, make_optimizer, save_checkpoint
from tinylm.variants import gelu_ffn_dim

TINY = Config(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=16)
GPT2 = dict(norm="layernorm", positions="learned", mlp="gelu", bias=True)
VARIANTS = {
    "layernorm": dict(norm="layernorm"), "layernorm+bias": dict(norm="layernorm", bias=True),
    "no-norm": dict(norm="none"), "post-norm": dict(norm_placement="post"),
    "post-layernorm": dict(norm="layernorm", norm_placement="post", bias=True),
    "learned-positions": dict(positions="learned"), "nope": dict(positions="none"),
    "gelu": dict(mlp="gelu", ffn_dim=gelu_ffn_dim(32, 64)), "bias": dict(bias=True),
    "kv1": dict(n_kv_heads=1), "kv-all": dict(n_kv_heads=4), "qk-norm": dict(qk_norm=True),
    "untied": dict(tie_embeddings=False), "gpt2": GPT2, "gpt2-untied-qk": {**GPT2, "tie_embeddings": False,
                                                                          "qk_norm": True},
    "gelu-experts": dict(mlp="gelu", bias=True, n_experts=3, moe_every=2),
    "no-norm-qk-norm": dict(norm="none", qk_norm=True),
}


def variant(name: str) -> Config:
    return TINY.replace(**VARIANTS[name])


def test_the_defaults_are_tinylms_own_block():
    cfg = Config()
    assert (cfg.norm, cfg.norm_placement, cfg.positions, cfg.mlp, cfg.bias) == ("rmsnorm", "pre", "rope", "swiglu",
                                                                                False)
    names = set(TinyLM(TINY).state_dict())
    assert "norm.weight" in names and "layers.0.input_layernorm.weight" in names
    assert not any(n.endswith(".bias") or "embed_positions" in n or "post_feedforward" in n for n in names)


@pytest.mark.parametrize("changes, words", [
    (dict(norm="batchnorm"), "norm must be one of ('rmsnorm', 'layernorm', 'none')"),
    (dict(norm_placement="sandwich"), "norm_placement must be 'pre' or 'post'"),
    (dict(positions="alibi"), "positions must be one of ('rope', 'learned', 'none')"),
    (dict(mlp="relu"), "mlp must be 'swiglu' or 'gelu'"),
    (dict(bias=1), "bias"),
    (dict(norm="none", norm_placement="post"), "norm_placement='pre' with norm='none'"),
])
def test_bad_variant_fields_are_refused_with_what_to_change(changes, words):
    with pytest.raises(ValueError) as e:
        TINY.replace(**changes)
    assert words in str(e.value)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_parameter_formula_is_the_state_dict_for_every_variant(name):
    cfg = variant(name)
    model = TinyLM(cfg)
    assert list(weight_shapes(cfg).items()) == [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    assert count_params(cfg).total == sum(p.numel() for p in model.parameters())
    assert state_size(cfg) == (len(weight_shapes(cfg)) - cfg.tie_embeddings, count_params(cfg).total)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_trains(name):
    """Every parameter gets a finite gradient, five AdamW steps on one batch lower its loss, and cached decoding
    gives the full forward's logits."""
    model = build_model(variant(name), seed=0)
    idx = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    opt = make_optimizer(model, 1e-2, 0.0)
    losses = []
    for _ in range(5):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        unused = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.isfinite().all()]
        assert not unused, unused
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.05 and all(b < a for a, b in zip(losses, losses[1:])), losses
    model.eval()
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.new_cache(2)
        steps = [model(idx[:, :5], cache=cache)[0]] + [model(idx[:, t:t + 1], cache=cache)[0] for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def gpt2_state_dict(model: TinyLM) -> dict[str, torch.Tensor]:
    """tinylm's GPT-2-style weights under GPT2LMHeadModel's names (Conv1D weights are (in, out); q, k, v fused)."""
    sd, out = model.state_dict(), {}
    out["transformer.wte.weight"], out["transformer.wpe.weight"] = sd["embed_tokens.weight"], sd["embed_positions.weight"]
    for i in range(model.cfg.n_layers):
        p, h = f"layers.{i}.", f"transformer.h.{i}."
        for ours, theirs in (("input_layernorm", "ln_1"), ("post_attention_layernorm", "ln_2")):
            out[h + theirs + ".weight"], out[h + theirs + ".bias"] = sd[p + ours + ".weight"], sd[p + ours + ".bias"]
        qkv = [p + f"self_attn.{x}_proj" for x in "qkv"]
        out[h + "attn.c_attn.weight"] = torch.cat([sd[n + ".weight"] for n in qkv]).T
        out[h + "attn.c_attn.bias"] = torch.cat([sd[n + ".bias"] for n in qkv])
        for ours, theirs in (("self_attn.o_proj", "attn.c_proj"), ("mlp.up_proj", "mlp.c_fc"),
                             ("mlp.down_proj", "mlp.c_proj")):
            out[h + theirs + ".weight"], out[h + theirs + ".bias"] = sd[p + ours + ".weight"].T, sd[p + ours + ".bias"]
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = sd["norm.weight"], sd["norm.bias"]
    out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def test_the_gpt2_combination_gives_gpt2lmheadmodels_logits():
    """layernorm + learned positions + GELU MLP + biases, pre-norm, tied: GPT-2 itself, on the same weights
    (every bias and norm gain randomised, so none of them can hide), unpadded and left-padded."""
    transformers = pytest.importorskip("transformers")
    cfg = TINY.replace(n_kv_heads=4, ffn_dim=128, **GPT2)
    torch.manual_seed(0)
    model = TinyLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "layernorm" in name or name.startswith("norm."):
                p.copy_(torch.randn_like(p) * 0.5 + (1.0 if name.endswith("weight") else 0.0))
    hf_cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4, n_inner=128,
                                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, layer_norm_epsilon=cfg.norm_eps, tie_word_embeddings=True)
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    missing, unexpected = hf.load_state_dict(gpt2_state_dict(model), strict=False)
    assert not unexpected and all(k.endswith((".attn.bias", ".attn.masked_bias")) for k in missing), missing
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours, _ = model(idx)
        theirs = hf(idx).logits
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[0, :5] = 0                                              # row 0: five pads in front
        ours = model(idx, attention_mask=mask)[0]
        theirs = hf(idx, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
        torch.testing.assert_close(ours[0, 5:], theirs[0, 5:], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours[1], theirs[1], atol=1e-5, rtol=1e-5)


def test_nope_has_no_positions_so_one_layer_cannot_see_order():
    """NoPE: no position parameter or table; with one layer the last position attends to a set, so
    shuffling the tokens before it changes nothing. RoPE sees the shuffle (the check can fail)."""
    idx = torch.randint(0, 64, (1, 10), generator=torch.Generator().manual_seed(3))
    shuffled = torch.cat([idx[:, :-1].flip(1), idx[:, -1:]], dim=1)
    for positions, same in (("none", True), ("rope", False)):
        torch.manual_seed(0)
        model = TinyLM(TINY.replace(n_layers=1, positions=positions)).eval()
        with torch.no_grad():
            a, b = model(idx)[0][0, -1], model(shuffled)[0][0, -1]
        assert torch.allclose(a, b, atol=1e-5) == same, positions
    nope = TinyLM(TINY.replace(positions="none"))
    assert nope.cos is None and nope.sin is None and not hasattr(nope, "embed_positions")
    assert not any("position" in n for n in nope.state_dict())


def test_learned_positions_add_one_row_per_position():
    model = TinyLM(TINY.replace(positions="learned")).eval()
    assert model.cos is None and model.embed_positions.weight.shape == (16, 32)
    idx = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        before = model(idx)[0]
        model.embed_positions.weight[6:] += 1.0                       # rows past the sequence: unused
        torch.testing.assert_close(model(idx)[0], before, atol=0, rtol=0)
        model.embed_positions.weight[3] += 1.0                        # position 3: from there on, changed
        after = model(idx)[0]
    torch.testing.assert_close(after[:, :3], before[:, :3], atol=0, rtol=0)
    assert not torch.allclose(after[:, 3:], before[:, 3:])


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_post_norm_normalises_the_residual_stream_and_has_no_final_norm(norm):
    model = TinyLM(TINY.replace(norm_placement="post", norm=norm)).eval()
    assert isinstance(model.norm, torch.nn.Identity)
    assert not hasattr(model.layers[0], "input_layernorm")
    outputs = []
    for layer in model.layers:
        layer.register_forward_hook(lambda module, args, out: outputs.append(out))
    with torch.no_grad():
        model(torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(5)))
    for x in outputs:                                                # gains at 1 (and biases at 0): unit scale
        centred = x - x.mean(-1, keepdim=True) if norm == "layernorm" else x
        torch.testing.assert_close(centred.pow(2).mean(-1), torch.ones(2, 8), atol=1e-3, rtol=1e-3)
    pre = TinyLM(TINY.replace(norm=norm)).eval()                      # pre-norm: the stream is not normalised
    pre.layers[-1].register_forward_hook(lambda module, args, out: outputs.append(out))
    with torch.no_grad():
        pre(torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(5)))
    assert not torch.allclose(outputs[-1].pow(2).mean(-1), torch.ones(2, 8), atol=0.1)


def test_no_norm_has_no_norm_weights():
    names = set(TinyLM(variant("no-norm")).state_dict())
    assert not any("norm" in n for n in names) and count_params(variant("no-norm")).norms == 0
    assert any("q_norm" in n for n in TinyLM(variant("no-norm-qk-norm")).state_dict())   # QK-norm is its own


def test_gelu_width_gives_swiglus_parameter_count():
    swiglu = TINY.replace(dim=192, ffn_dim=512)
    gelu = swiglu.replace(mlp="gelu", ffn_dim=gelu_ffn_dim(192, 512))
    assert gelu.ffn_dim == 768 and count_params(gelu).feed_forward == count_params(swiglu).feed_forward
    with_bias = [c.replace(bias=True) for c in (swiglu, swiglu.replace(mlp="gelu", ffn_dim=gelu_ffn_dim(192, 512,
                                                                                                        True)))]
    diff = count_params(with_bias[0]).feed_forward - count_params(with_bias[1]).feed_forward
    assert abs(diff) <= 192 * swiglu.n_layers
    assert count_params(with_bias[0].replace(mlp="gelu", ffn_dim=768)).feed_forward != \
        count_params(with_bias[0]).feed_forward                      # 3F/2 is not the width with biases
    with pytest.raises(ValueError, match="use swiglu_ffn_dim=66"):
        gelu_ffn_dim(32, 65)
    with pytest.raises(ValueError, match="dim"):
        gelu_ffn_dim(0, 64)


@pytest.mark.parametrize("cfg", [variant("gpt2-untied-qk").replace(norm_placement="post"),
                                 variant("gelu-experts"), TINY.replace(n_experts=8, moe_every=2)])
def test_a_variant_checkpoint_saves_and_loads_its_fields(tmp_path, cfg):
    """(Experts in every other block: the tensor count's lower bound once assumed experts in every block.)"""
    model = build_model(cfg, seed=1)
    save_checkpoint(tmp_path / "c", model, make_optimizer(model, 1e-3, 0.1), 0, TrainConfig(steps=3),
                    torch.Generator().manual_seed(3), History())
    back = load_checkpoint(tmp_path / "c")
    assert back.model.cfg == cfg
    idx = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        torch.testing.assert_close(back.model.eval()(idx)[0], model.eval()(idx)[0], atol=0, rtol=0)


def test_a_config_saved_before_the_variants_loads_as_tinylms_block():
    old = {k: v for k, v in TINY.to_dict().items() if k not in ("norm", "norm_placement", "positions", "mlp", "bias")}
    assert Config.from_dict(old) == TINY                             # a config saved before the variants


def test_llama_only_code_refuses_a_variant():
    model = TinyLM(variant("layernorm"))
    with pytest.raises(ValueError, match="norm='layernorm'.*use the defaults norm='rmsnorm'"):
        to_hf(model)
    with pytest.raises(ValueError, match="NumPy model"):
        model_forward(params_from_torch(model), model.cfg, torch.zeros(1, 4, dtype=torch.long).numpy())
    with pytest.raises(ValueError, match="bias-free"):
        quantize(TinyLM(variant("bias")), "int8")
