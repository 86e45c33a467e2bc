# The torch model against the NumPy references, RoPE and causality properties, bad input.
# Run: .venv/bin/python -m pytest tests/test_model.py
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinylm import Config, RMSNorm, SwiGLU, TinyLM, apply_rope, attention, attention_explicit, rope_tables
from tinylm import reference as ref

rng = np.random.default_rng(0)


def test_rms_norm_matches_reference_in_float64():
    x, w = rng.normal(size=(3, 5, 16)), rng.normal(size=16)
    norm = RMSNorm(16, eps=1e-5).double()
    norm.weight.data = torch.tensor(w)
    np.testing.assert_allclose(norm(torch.tensor(x)).detach().numpy(), ref.rms_norm(x, w, 1e-5), rtol=1e-12)


def test_rms_norm_computes_in_fp32_and_casts_back():
    x = torch.full((2, 8), 300.0, dtype=torch.float16)  # 300^2 overflows fp16
    y = RMSNorm(8).half()(x)
    assert y.dtype == torch.float16 and torch.isfinite(y).all()
    torch.testing.assert_close(y.float(), torch.ones(2, 8), atol=1e-3, rtol=0)


def test_rope_matches_reference_and_offset():
    x = rng.normal(size=(2, 3, 10, 8))
    cos, sin = rope_tables(8, 32, 10000.0)
    np.testing.assert_allclose(apply_rope(torch.tensor(x), cos, sin).numpy(), ref.rope(x), rtol=1e-12)
    shifted = apply_rope(torch.tensor(x), cos, sin, offset=5).numpy()
    np.testing.assert_allclose(shifted, ref.rope(x, positions=np.arange(5, 15)), rtol=1e-12)


def test_rope_score_depends_only_on_distance_and_keeps_norms():
    D = 16
    q, k = rng.normal(size=(1, D)), rng.normal(size=(1, D))

    def score(m, n):
        qm = ref.rope(np.repeat(q, m + 1, 0))[m]
        kn = ref.rope(np.repeat(k, n + 1, 0))[n]
        return qm @ kn

    s = [score(3, 1), score(7, 5), score(11, 9)]
    np.testing.assert_allclose(s, s[0], rtol=1e-10)
    assert abs(score(7, 1) - s[0]) > 1e-3
    x = rng.normal(size=(20, D))
    np.testing.assert_allclose(np.linalg.norm(ref.rope(x), axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)


def test_interleaved_layout_differs_and_permutation_reconciles():
    x = rng.normal(size=(6, 8))
    a, b = ref.rope(x), ref.rope_interleaved(x)
    assert np.abs(a - b).max() > 1e-2
    p = ref.interleaved_to_half(8)
    np.testing.assert_allclose(ref.rope(x[:, p]), b[:, p], atol=1e-12)


def test_swiglu_matches_reference():
    mlp = SwiGLU(12, 20).double()
    x = rng.normal(size=(4, 12))
    w = [m.weight.detach().numpy() for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)]
    np.testing.assert_allclose(mlp(torch.tensor(x)).detach().numpy(), ref.swiglu(x, *w), rtol=1e-10)
    np.testing.assert_allclose(ref.silu(np.array([0.0, 1.0])), [0.0, 1 / (1 + np.exp(-1))])


@pytest.mark.parametrize("n_kv", [4, 2, 1])
@pytest.mark.parametrize("T, S", [(7, 7), (1, 7), (3, 7)])
def test_attention_paths_agree_with_reference(n_kv, T, S):
    q = rng.normal(size=(2, 4, T, 8))
    k, v = rng.normal(size=(2, n_kv, S, 8)), rng.normal(size=(2, n_kv, S, 8))
    expected = ref.attention(q, k, v)
    tq, tk, tv = map(torch.tensor, (q, k, v))
    np.testing.assert_allclose(attention(tq, tk, tv).numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(attention_explicit(tq, tk, tv).numpy(), expected, atol=1e-12)


def test_gqa_with_as_many_kv_heads_is_multi_head_attention():
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    mha = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(attention(q, k, v), mha)


def test_float64_model_equals_numpy_pieces_exactly():
    cfg = Config(vocab_size=50, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=16)
    model = TinyLM(cfg).double().eval()
    assert model.cos.dtype == torch.float64
    attn = model.layers[0].self_attn
    x = rng.normal(size=(1, 10, 32))
    W = {n: getattr(attn, n).weight.detach().numpy() for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
    q = (x @ W["q_proj"].T).reshape(1, 10, 4, 8).transpose(0, 2, 1, 3)
    k = (x @ W["k_proj"].T).reshape(1, 10, 2, 8).transpose(0, 2, 1, 3)
    v = (x @ W["v_proj"].T).reshape(1, 10, 2, 8).transpose(0, 2, 1, 3)
    y = ref.attention(ref.rope(q), ref.rope(k), v).transpose(0, 2, 1, 3).reshape(1, 10, 32) @ W["o_proj"].T
    got = attn(torch.tensor(x), model.cos, model.sin).detach().numpy()
    np.testing.assert_allclose(got, y, rtol=1e-10, atol=1e-13)


def test_explicit_model_path_equals_fused(small_cfg):
    model = TinyLM(small_cfg).eval()
    idx = torch.randint(0, small_cfg.vocab_size, (2, 16))
    fused, _ = model(idx)
    explicit, _ = model.set_explicit_attention(True)(idx)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)


def test_later_tokens_never_change_earlier_logits(small_cfg):
    model = TinyLM(small_cfg).eval()
    idx = torch.randint(0, small_cfg.vocab_size, (1, 20))
    changed = idx.clone()
    changed[0, 12:] = (changed[0, 12:] + 1) % small_cfg.vocab_size
    a, b = model(idx)[0], model(changed)[0]
    torch.testing.assert_close(a[:, :12], b[:, :12])
    assert (a[:, 12:] - b[:, 12:]).abs().max() > 1e-4


def test_tied_head_is_the_embedding_and_init_std():
    model = TinyLM(Config.from_preset("mini-companion"))
    assert model.lm_head.weight is model.embed_tokens.weight
    assert abs(model.layers[0].mlp.gate_proj.weight.std().item() - 0.02) < 1e-3
    untied = TinyLM(Config.from_preset("mini-companion", tie_embeddings=False))
    assert untied.lm_head.weight is not untied.embed_tokens.weight


def test_loss_ignores_minus_100():
    cfg = Config(vocab_size=50, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=16)
    model = TinyLM(cfg)
    idx = torch.randint(0, 50, (2, 8))
    targets = torch.randint(0, 50, (2, 8))
    targets[:, :3] = -100
    logits, loss = model(idx, targets)
    expected = F.cross_entropy(logits[:, 3:].reshape(-1, 50), targets[:, 3:].reshape(-1))
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("make_idx, words", [
    (lambda: torch.zeros(8, dtype=torch.long), "batch"),                       # wrong rank
    (lambda: torch.zeros(1, 2, 8, dtype=torch.long), "(batch, time)"),
    (lambda: torch.zeros(1, 8), "dtype"),                                      # float ids
    (lambda: torch.zeros(1, 8, dtype=torch.int32), "torch.long"),             # one rule with generate()
    (lambda: torch.zeros(1, 17, dtype=torch.long), "max_seq_len"),             # too long
    (lambda: torch.full((1, 4), 50), "vocab_size"),                            # id out of range
    (lambda: torch.full((1, 4), -1), "vocab_size"),
    (lambda: [[1, 2, 3]], "idx"),                                              # not a tensor
])
def test_bad_input_raises_a_clear_error(make_idx, words):
    cfg = Config(vocab_size=50, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=16)
    with pytest.raises(ValueError) as err:
        TinyLM(cfg)(make_idx())
    assert words in str(err.value)


def test_model_and_generate_share_the_idx_rules():
    from tinylm.generate import generate

    model = TinyLM(Config(vocab_size=50, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=16))
    for idx in (torch.zeros(1, 4, dtype=torch.int32), torch.full((1, 4), 50), torch.zeros(4, dtype=torch.long)):
        with pytest.raises(ValueError) as by_model:
            model(idx)
        with pytest.raises(ValueError) as by_generate:
            generate(model, idx, 2)
        assert str(by_model.value) == str(by_generate.value)


def test_targets_must_match_idx():
    cfg = Config(vocab_size=50, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=16)
    with pytest.raises(ValueError, match="targets"):
        TinyLM(cfg)(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="Config"):
        TinyLM({"dim": 32})


def test_from_weights_takes_the_tensors_without_copying(small_cfg):
    model = TinyLM(small_cfg).eval()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    if small_cfg.tie_embeddings:
        del weights["lm_head.weight"]                       # a tied head may be left out
    built = TinyLM.from_weights(small_cfg, weights)
    assert not built.training
    assert built.embed_tokens.weight.data_ptr() == weights["embed_tokens.weight"].data_ptr()  # no copy
    assert (built.lm_head.weight is built.embed_tokens.weight) == small_cfg.tie_embeddings
    assert sum(p.numel() for p in built.parameters()) == sum(p.numel() for p in model.parameters())
    assert torch.equal(built.cos, model.cos) and built.cos.device.type == "cpu"
    idx = torch.randint(0, small_cfg.vocab_size, (2, 7))
    assert torch.equal(built(idx)[0], model(idx)[0])


def test_from_weights_says_what_does_not_fit():
    cfg = Config(vocab_size=50, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=16)
    weights = dict(TinyLM(cfg).state_dict())
    with pytest.raises(ValueError, match="missing .*layers.0.mlp.up_proj.weight"):
        TinyLM.from_weights(cfg, {k: v for k, v in weights.items() if "up_proj" not in k})
    with pytest.raises(ValueError, match=r"wrong shapes .*norm.weight \(31,\)"):
        TinyLM.from_weights(cfg, weights | {"norm.weight": torch.ones(31)})
    with pytest.raises(ValueError, match="unexpected .*extra"):
        TinyLM.from_weights(cfg, weights | {"extra": torch.ones(1)})
