# GPT-2's learned absolute positions, a module swap of tinylm.variants (issue 35, item 2): the same numbers as
# when tinylm/model.py added them itself. Run: .venv/bin/python -m pytest tests/test_learned_positions.py
import inspect
import sys
from pathlib import Path

import pytest
import torch

import tinylm.fast
import tinylm.model
from tinylm import Config, TinyLM, count_params
from tinylm.params import weight_shapes
from tinylm.train import build_model

TINY = Config(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=16,
              positions="learned")
CONFIGS = {"learned": {}, "gpt2": dict(norm="layernorm", mlp="gelu", bias=True, ffn_dim=96),
           "post-norm": dict(norm_placement="post")}
MASK = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 1], [1] * 10])   # row 0: three pads in front
CHUNKS = ((0, 4), (4, 7), (7, 8), (8, 10))

# logits[:, :, 0] at torch.manual_seed(0), token ids of `ids()`, computed by tinylm/model.py before the swap
# (commit 6acda23, where TinyLM.__init__ built embed_positions and forward added its rows): the initialisation
# and the positions are what they were
BEFORE = {
    "learned": [0.045284, -0.04011, -0.11938, -0.027976, 0.015653, 0.144209, 0.012703, -0.054366, 0.065376,
                0.448163, 0.060182, -0.018201, -0.123776, -0.113247, 0.084991, 0.09682, -0.113812, 0.291747,
                0.20818, 0.094528],
    "learned padded": [0.045284, 0.106763, 0.083061, 0.055564, -0.062832, -0.034729, 0.012907, -0.023366,
                       0.005329, 0.392155],   # row 0 under MASK (row 1 has no pad: as above)
    "gpt2": [-0.109527, 0.012341, 0.065665, -0.136166, -0.118194, -0.145221, 0.007622, 0.045387, -0.099487,
             0.31647, -0.052527, -0.122294, 0.055669, -0.150127, -0.079429, -0.103587, -0.002277, -0.122202,
             -0.113925, -0.02312],
    "gpt2 padded": [-0.109527, -0.015024, 0.040609, -0.087765, -0.083829, 0.016497, -0.150694, 0.074499,
                    -0.117118, 0.40232],
}


def ids() -> torch.Tensor:
    return torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))


def built(name: str) -> TinyLM:
    torch.manual_seed(0)
    return TinyLM(TINY.replace(**CONFIGS[name])).eval()


def reference(model: TinyLM, idx: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """GPT-2's input written out from the state dict, wte[idx] + wpe[position], through the model's blocks,
    final norm and head. A position counts a row's real tokens only (its first is 0, as Hugging Face's
    position_ids); a pad is at 0 and sees only itself; with no mask the positions are 0 ... T-1."""
    sd = model.state_dict()
    B, T = idx.shape
    real = torch.ones(B, T, dtype=torch.long) if attention_mask is None else attention_mask.long()
    pos = (real.cumsum(-1) - 1).clamp(min=0)                                              # (B, T)
    x = sd["embed_tokens.weight"][idx] + sd["embed_positions.weight"][pos]              # (B, T, C)
    allowed = (torch.ones(T, T).tril().bool() & real.bool()[:, None, :]) | torch.eye(T).bool()  # (B, T, T)
    for layer in model.layers:
        x = layer(x, None, None, None, allowed[:, None])
    return model.lm_head(model.norm(x))


def decoded(model: TinyLM, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """The logits of idx (a) in one call, (b) in chunks through a KV cache, (c) left-padded under MASK in one
    call, and padded through a cache (a prompt of 7, then one token at a time)."""
    with torch.no_grad():
        plain = model(idx)[0]
        cache = model.new_cache(2)
        chunked = torch.cat([model(idx[:, a:b], cache=cache)[0] for a, b in CHUNKS], 1)
        padded = model(idx, attention_mask=MASK)[0]
        cache = model.new_cache(2)
        steps = [model(idx[:, :7], cache=cache, attention_mask=MASK[:, :7])[0]]
        steps += [model(idx[:, t : t + 1], cache=cache, attention_mask=MASK[:, : t + 1])[0] for t in range(7, 10)]
    return {"plain": plain, "chunked": chunked, "padded": padded, "padded cached": torch.cat(steps, 1)}


@pytest.mark.parametrize("name", CONFIGS)
def test_learned_positions_are_each_tokens_row_with_a_cache_and_with_padding(name):
    model, idx = built(name), ids()
    with torch.no_grad():
        want, want_padded = reference(model, idx), reference(model, idx, MASK)
    got = decoded(model, idx)
    for case in ("plain", "chunked"):
        torch.testing.assert_close(got[case], want, atol=1e-6, rtol=0, msg=case)
    for case in ("padded", "padded cached"):
        torch.testing.assert_close(got[case], want_padded, atol=1e-6, rtol=0, msg=case)
    assert not torch.allclose(want_padded[0], want[0], atol=1e-3)      # the positions of row 0 did move


@pytest.mark.parametrize("name", ["learned", "gpt2"])
def test_the_same_weights_and_logits_at_a_seed_as_before_the_swap(name):
    got = decoded(built(name), ids())
    for case in ("plain", "chunked", "padded", "padded cached"):
        assert torch.allclose(got[case][1, :, 0], torch.tensor(BEFORE[name][10:]), atol=1e-5, rtol=0), case
    for case in ("plain", "chunked"):
        assert torch.allclose(got[case][:, :, 0].flatten(), torch.tensor(BEFORE[name]), atol=1e-5, rtol=0), case
    for case in ("padded", "padded cached"):
        assert torch.allclose(got[case][0, :, 0], torch.tensor(BEFORE[f"{name} padded"]), atol=1e-5, rtol=0), case


def test_the_compiled_decoders_step_adds_the_row_of_the_cache_position(monkeypatch):
    """tinylm.fast's one-token step (its block eager here: nothing compiled) reads the same rows."""
    model, idx = built("gpt2"), ids()
    monkeypatch.setattr(tinylm.fast, "_compiled_block_step", lambda: tinylm.fast._block_step)
    decoder = tinylm.fast.CompiledDecoder(model)
    cache = decoder.new_cache(2)
    with torch.no_grad():
        want = reference(model, idx)
        got = torch.cat([decoder(idx[:, :3], cache=cache)[0]] + [decoder(idx[:, t : t + 1], cache=cache)[0]
                                                                   for t in range(3, 10)], 1)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", CONFIGS)
def test_the_state_dict_and_the_parameter_count_are_unchanged(name):
    cfg = TINY.replace(**CONFIGS[name])
    model = built(name)
    names = list(model.state_dict())
    assert names[:2] == ["embed_tokens.weight", "embed_positions.weight"]
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == weight_shapes(cfg)
    assert count_params(cfg).total == sum(p.numel() for p in model.parameters())
    assert count_params(cfg).total == {"learned": 21152, "gpt2": 21760, "post-norm": 21120}[name]
    assert count_params(cfg).embedding == (64 + 16) * 32
    again = TinyLM.from_weights(cfg, model.state_dict())                # a saved model loads back
    with torch.no_grad():
        torch.testing.assert_close(again(ids())[0], model(ids())[0], atol=0, rtol=0)


def test_the_ablations_learned_position_variants_still_build():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import ablate
    import sweep

    base = "d128x4+n_kv_heads=2+b8"      # the base of chapter 13's ablations (tinylm/data/runs/ablate_1min.log)
    for variant, params in (("learnedpos", 951_680), ("gpt2", 958_212)):
        cfg, _ = sweep.configuration(ablate.run_name(variant, 3e-3, 0, base), 1.0)
        assert cfg.positions == "learned"
        model = build_model(cfg, 0)
        assert count_params(cfg).total == sum(p.numel() for p in model.parameters()) == params, variant
        with torch.no_grad():
            assert model(torch.zeros(1, 4, dtype=torch.long))[0].shape == (1, 4, cfg.vocab_size)


def test_model_py_is_the_one_model_under_400_lines():
    source = Path(tinylm.model.__file__).read_text()
    assert "embed_positions" not in source and "learned" not in inspect.getsource(TinyLM.forward)
    assert len(source.splitlines()) < 400
