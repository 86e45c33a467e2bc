# Hand-written backprop (tinylm.backprop) against central differences, torch autograd and torch AdamW.
# Run: .venv/bin/python -m pytest tests/test_backprop.py
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinylm import Config, TinyLM
from tinylm import backprop as bp
from tinylm import reference as ref
from tinylm.book import Verdict, check_swiglu_backward
from tinylm.train import make_optimizer

NUM_RTOL = 1e-6    # hand gradient vs central differences (eps 1e-6), relative to the gradient's scale
TORCH_ATOL = 1e-8  # hand gradient vs autograd, float64


def _rng(seed=0):
    return np.random.default_rng(seed)


def _model(cfg: Config) -> TinyLM:
    """A float64 TinyLM with weights large enough that every gradient is far from zero."""
    model = TinyLM(cfg).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "norm" in name else 0.3 * torch.randn_like(p))
    return model


def _batch(cfg: Config, B=2, T=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    targets = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    targets[0, :3] = -100  # e.g. a prompt the loss skips
    targets[1, -1] = -100
    return idx, targets


# --- forwards equal the references -----------------------------------------------------------------
def test_forwards_match_reference():
    r = _rng()
    x, w = r.normal(size=(2, 5, 8)), r.normal(size=8)
    np.testing.assert_allclose(bp.rms_norm_forward(x, w, 1e-5)[0], ref.rms_norm(x, w, 1e-5), rtol=1e-13)
    cos, sin = ref.rope_tables(8, 5)
    q = r.normal(size=(2, 3, 5, 8))
    np.testing.assert_allclose(bp.rope_forward(q, cos, sin)[0], ref.rope(q), rtol=1e-13)
    k, v = r.normal(size=(2, 1, 7, 8)), r.normal(size=(2, 1, 7, 8))
    q = r.normal(size=(2, 3, 4, 8))  # 4 queries after 3 earlier positions: S > T
    for causal in (True, False):
        np.testing.assert_allclose(bp.attention_forward(q, k, v, causal)[0], ref.attention(q, k, v, causal),
                                   rtol=1e-13, atol=1e-15)
    gw, uw, dw = r.normal(size=(6, 8)), r.normal(size=(6, 8)), r.normal(size=(8, 6))
    np.testing.assert_allclose(bp.swiglu_forward(x, gw, uw, dw)[0], ref.swiglu(x, gw, uw, dw), rtol=1e-13)
    logits, t = r.normal(size=(2, 5, 11)), r.integers(0, 11, size=(2, 5))
    t[0, 1] = -100
    want = F.cross_entropy(torch.tensor(logits).flatten(0, 1), torch.tensor(t).flatten(), ignore_index=-100)
    assert bp.cross_entropy_forward(logits, t)[0] == pytest.approx(want.item(), rel=1e-13)


# --- every backward against central differences ---------------------------------------------------
def _component_checks():
    r = _rng(1)
    cos, sin = ref.rope_tables(6, 5)
    idx = np.array([[1, 3, 3], [0, 3, 1]])  # token 3 three times: its gradient rows must add up
    t = r.integers(0, 7, size=(2, 4))
    t[1, 0] = t[0, 3] = -100
    return {
        "linear": (bp.linear_forward, bp.linear_backward, [r.normal(size=(2, 3, 4)), r.normal(size=(5, 4))],
                   None),
        "embedding": (bp.embedding_forward, bp.embedding_backward, [idx, r.normal(size=(5, 4))], [1]),
        "rms_norm": (bp.rms_norm_forward, bp.rms_norm_backward,
                     [r.normal(size=(2, 3, 6)), 1 + 0.3 * r.normal(size=6), 1e-5], [0, 1]),
        "rms_norm_tiny_x": (bp.rms_norm_forward, bp.rms_norm_backward,  # eps matters when x is small
                            [0.002 * r.normal(size=(3, 4)), r.normal(size=4), 1e-5], [0, 1]),
        "rope": (bp.rope_forward, bp.rope_backward, [r.normal(size=(2, 2, 5, 6)), cos, sin], [0]),
        "softmax": (lambda s: (ref.softmax(s), ref.softmax(s)), bp.softmax_backward, [r.normal(size=(3, 5))],
                    None),
        "attention_grouped": (bp.attention_forward, bp.attention_backward,
                              [r.normal(size=(2, 4, 5, 3)), r.normal(size=(2, 2, 5, 3)), r.normal(size=(2, 2, 5, 3))],
                              None),
        "attention_multi_query": (bp.attention_forward, bp.attention_backward,
                                  [r.normal(size=(1, 3, 4, 2)), r.normal(size=(1, 1, 4, 2)),
                                   r.normal(size=(1, 1, 4, 2))], None),
        "attention_multi_head": (bp.attention_forward, bp.attention_backward,
                                 [r.normal(size=(2, 2, 4, 3)), r.normal(size=(2, 2, 4, 3)),
                                  r.normal(size=(2, 2, 4, 3))], None),
        "attention_chunk_after_cache": (bp.attention_forward, bp.attention_backward,  # T=3 queries, S=6 keys
                                        [r.normal(size=(1, 4, 3, 2)), r.normal(size=(1, 2, 6, 2)),
                                         r.normal(size=(1, 2, 6, 2))], None),
        "attention_not_causal": (lambda q, k, v: bp.attention_forward(q, k, v, causal=False), bp.attention_backward,
                                 [r.normal(size=(1, 2, 4, 3)), r.normal(size=(1, 1, 4, 3)),
                                  r.normal(size=(1, 1, 4, 3))], None),
        "swiglu": (bp.swiglu_forward, bp.swiglu_backward,
                   [r.normal(size=(2, 3, 4)), r.normal(size=(6, 4)), r.normal(size=(6, 4)), r.normal(size=(4, 6))],
                   None),
        "cross_entropy": (bp.cross_entropy_forward, bp.cross_entropy_backward, [3 * r.normal(size=(2, 4, 7)), t],
                          [0]),
    }


@pytest.mark.parametrize("name", sorted(_component_checks()))
def test_backward_matches_central_differences(name):
    forward, backward, inputs, wrt = _component_checks()[name]
    result = bp.check_backward(forward, backward, inputs, wrt=wrt)
    assert result.max_rel_err < NUM_RTOL, f"{name}:\n{result}"
    assert all(abs_err > 0 for abs_err, _ in result.per_input.values()), "a check that cannot fail"


def test_check_backward_catches_a_wrong_backward():
    r = _rng(2)
    x, w = 1 + 0.3 * r.normal(size=(3, 6)), r.normal(size=6)

    def forgot_the_projection(dout, cache):  # the common slip: dx = r * g, missing the xhat term
        xhat, rr, weight = cache
        return rr * dout * weight, (dout * xhat).sum(0)

    result = bp.check_backward(bp.rms_norm_forward, forgot_the_projection, [x, w], names=["dx", "dweight"])
    assert result.per_input["dx"][1] > 1e-3 and result.per_input["dweight"][1] < NUM_RTOL
    assert result.max_rel_err == result.per_input["dx"][1]


def test_grad_check_on_a_known_gradient():
    x = _rng(3).normal(size=(3, 4))
    np.testing.assert_allclose(bp.grad_check(lambda a: np.sum(np.sin(a) * a), x),
                               np.cos(x) * x + np.sin(x), atol=1e-9)
    x0 = x.copy()
    bp.grad_check(lambda a: np.sum(a ** 2), x)
    np.testing.assert_array_equal(x, x0)  # the caller's array is left alone


def test_softmax_backward_is_the_jacobian_product():
    r = _rng(4)
    y, dy = ref.softmax(r.normal(size=6)), r.normal(size=6)
    jacobian = np.diag(y) - np.outer(y, y)  # dy_i/ds_j = y_i (delta_ij - y_j), symmetric
    np.testing.assert_allclose(bp.softmax_backward(dy, y), jacobian @ dy, rtol=1e-13, atol=1e-15)


def test_rope_backward_is_rotation_by_minus_angle():
    x = _rng(5).normal(size=(2, 7, 8))
    cos, sin = ref.rope_tables(8, 7)
    y, cache = bp.rope_forward(x, cos, sin)
    np.testing.assert_allclose(bp.rope_backward(y, cache), x, atol=1e-13)  # R(-a) R(a) = I
    np.testing.assert_allclose(bp.rope_backward(y, cache), bp.rope_forward(y, cos, -sin)[0], atol=1e-15)


def test_whole_model_gradient_against_central_differences():
    """No torch involved: every parameter of a tiny untied QK-norm model against finite differences."""
    cfg = Config(vocab_size=7, dim=8, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=6, max_seq_len=8,
                 qk_norm=True, tie_embeddings=False)
    params = bp.params_from_torch(_model(cfg))
    idx, targets = (a.numpy() for a in _batch(cfg, B=2, T=5))
    _, _, cache = bp.model_forward(params, cfg, idx, targets)
    grads = bp.model_backward(cache)
    worst = 0.0
    for key, p in params.items():
        def loss(value, key=key):
            return bp.model_forward({**params, key: value}, cfg, idx, targets)[1]
        abs_err = np.max(np.abs(bp.grad_check(loss, p) - grads[key]))
        worst = max(worst, abs_err / np.max(np.abs(grads[key])))
    assert worst < NUM_RTOL


# --- the whole model against TinyLM and autograd ---------------------------------------------------
def test_model_forward_equals_tinylm(small_cfg):
    model = _model(small_cfg)
    idx, targets = _batch(small_cfg)
    with torch.no_grad():
        want = model(idx)[0]
    want_loss = F.cross_entropy(want.flatten(0, 1), targets.flatten(), ignore_index=-100)
    logits, loss, _ = bp.model_forward(bp.params_from_torch(model), small_cfg, idx.numpy(), targets.numpy())
    assert logits.shape == tuple(want.shape) and np.abs(want.numpy()).max() > 1  # not a near-zero signal
    np.testing.assert_allclose(logits, want.numpy(), rtol=0, atol=1e-10)
    assert loss == pytest.approx(want_loss.item(), abs=1e-12)


def test_model_backward_equals_autograd(small_cfg):
    model = _model(small_cfg)
    idx, targets = _batch(small_cfg)
    logits = model(idx)[0]
    # float64 cross-entropy here: TinyLM's own loss casts the logits to float32
    F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100).backward()
    params = bp.params_from_torch(model)
    _, _, cache = bp.model_forward(params, small_cfg, idx.numpy(), targets.numpy())
    grads = bp.model_backward(cache)
    torch_params = dict(model.named_parameters())  # tied: lm_head.weight is embed_tokens.weight, listed once
    assert sorted(grads) == sorted(params) == sorted(torch_params)
    for key, g in grads.items():
        want = torch_params[key].grad.numpy()
        assert np.abs(want).max() > 1e-3, key
        np.testing.assert_allclose(g, want, rtol=0, atol=TORCH_ATOL, err_msg=key)


def test_tied_embedding_gets_both_gradients():
    cfg = Config(vocab_size=13, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=24, max_seq_len=8)
    params = bp.params_from_torch(_model(cfg))
    assert "lm_head.weight" not in params
    idx, targets = (a.numpy() for a in _batch(cfg, T=6))
    _, _, cache = bp.model_forward(params, cfg, idx, targets)
    grads = bp.model_backward(cache)
    dhead = bp.linear_backward(bp.cross_entropy_backward(1.0, cache["loss"]), cache["lm_head"])[1]
    unused = np.setdiff1d(np.arange(cfg.vocab_size), idx)  # rows never gathered: only the head's gradient
    assert unused.size
    np.testing.assert_allclose(grads["embed_tokens.weight"][unused], dhead[unused], rtol=1e-14)
    used = np.unique(idx)
    assert np.abs(grads["embed_tokens.weight"][used] - dhead[used]).max() > 1e-3


def test_model_backward_with_given_dlogits():
    cfg = Config(vocab_size=11, dim=16, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=24, max_seq_len=8)
    model = _model(cfg)
    idx = _batch(cfg, T=5)[0]
    logits = model(idx)[0]
    dlogits = torch.randn_like(logits)
    (logits * dlogits).sum().backward()
    _, loss, cache = bp.model_forward(bp.params_from_torch(model), cfg, idx.numpy())
    assert loss is None
    grads = bp.model_backward(cache, dlogits.numpy())
    for key, p in model.named_parameters():
        np.testing.assert_allclose(grads[key], p.grad.numpy(), rtol=0, atol=TORCH_ATOL, err_msg=key)
    with pytest.raises(ValueError, match="dlogits"):
        bp.model_backward(cache)


# --- training in NumPy tracks torch ----------------------------------------------------------------
def test_clip_grad_norm_matches_torch():
    r = _rng(6)
    grads = {"a": r.normal(size=(3, 4)), "b": r.normal(size=5)}
    tensors = [torch.tensor(g, requires_grad=True) for g in grads.values()]
    for t, g in zip(tensors, grads.values()):
        t.grad = torch.tensor(g)
    want = torch.nn.utils.clip_grad_norm_(tensors, 0.5)
    assert bp.clip_grad_norm(grads, 0.5) == pytest.approx(want.item(), rel=1e-14)
    for t, g in zip(tensors, grads.values()):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-14)


@pytest.mark.parametrize("cfg", [
    Config(vocab_size=32, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=16, qk_norm=True),
    Config(vocab_size=32, dim=32, n_layers=1, n_heads=4, n_kv_heads=1, ffn_dim=48, max_seq_len=16,
           tie_embeddings=False),
], ids=["mini-companion-shaped", "untied-multi-query"])
def test_numpy_adamw_training_tracks_torch(cfg):
    model = TinyLM(cfg).double()  # the usual std 0.02 init, as a real run starts
    params = bp.params_from_torch(model)
    opt = make_optimizer(model, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95))  # matrices decayed only
    state: dict = {}
    torch_losses, numpy_losses = [], []
    for step in range(6):
        idx, targets = _batch(cfg, B=4, T=12, seed=step)
        targets = torch.where(targets == -100, targets, (3 * idx + 1) % cfg.vocab_size)  # a learnable rule
        opt.zero_grad()
        loss = F.cross_entropy(model(idx)[0].flatten(0, 1), targets.flatten(), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch_losses.append(loss.item())

        _, np_loss, cache = bp.model_forward(params, cfg, idx.numpy(), targets.numpy())
        grads = bp.model_backward(cache)
        bp.clip_grad_norm(grads, 1.0)
        bp.adamw_step(params, grads, state, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
        numpy_losses.append(np_loss)
    np.testing.assert_allclose(numpy_losses, torch_losses, rtol=0, atol=1e-10)
    assert torch_losses[-1] < torch_losses[0] - 0.1  # it trained, so the comparison covers real updates
    for key, p in model.named_parameters():
        np.testing.assert_allclose(params[key], p.detach().numpy(), rtol=0, atol=1e-10, err_msg=key)


def test_adamw_step_defaults_match_torch():
    r = _rng(7)
    p0 = r.normal(size=(4, 3))
    params, state = {"w": p0.copy()}, {}
    w = torch.tensor(p0, requires_grad=True)
    opt = torch.optim.AdamW([w])  # torch defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01
    for _ in range(3):
        g = r.normal(size=(4, 3))
        w.grad = torch.tensor(g)
        opt.step()
        bp.adamw_step(params, {"w": g}, state)
    assert state["step"] == 3
    np.testing.assert_allclose(params["w"], w.detach().numpy(), rtol=0, atol=1e-14)
    assert np.abs(params["w"] - p0).max() > 1e-3


def test_adamw_step_decays_matrices_and_leaves_norm_gains_alone():
    params = {"w": np.ones((2, 3)), "norm.weight": np.ones(3)}
    zero = {k: np.zeros_like(v) for k, v in params.items()}   # no gradient: only the decay moves a weight
    bp.adamw_step(params, zero, {}, lr=0.1, weight_decay=0.5)
    np.testing.assert_allclose(params["w"], 1 - 0.1 * 0.5)
    np.testing.assert_array_equal(params["norm.weight"], 1.0)


# --- the exercise checker --------------------------------------------------------------------------
def _learner_swiglu_backward(dout, x, gate_w, up_w, down_w, slip=None):
    """A learner's answer written from the formulas (not from tinylm.backprop), with optional slips."""
    g, u = x @ gate_w.T, x @ up_w.T
    s = 1 / (1 + np.exp(-g))
    h = g * s * u
    dh = dout @ down_w
    dsilu = s if slip == "sigmoid" else s * (1 + g * (1 - s))
    dg = dh * u * dsilu
    du = dh if slip == "no_gate" else dh * g * s
    X, C, F_ = x.reshape(-1, x.shape[-1]), x.shape[-1], g.shape[-1]
    dx = dg @ gate_w if slip == "gate_path_only" else dg @ gate_w + du @ up_w
    H, dO = h.reshape(-1, F_), dout.reshape(-1, C)
    ddown = H.T @ dO if slip == "transposed" else dO.T @ H
    dgate = dg.reshape(-1, F_).T @ X
    if slip == "sign":
        dgate = -dgate
    return dx, dgate, du.reshape(-1, F_).T @ X, ddown


def test_checker_passes_a_correct_answer():
    verdict = check_swiglu_backward(_learner_swiglu_backward)
    assert isinstance(verdict, Verdict) and verdict.passed, verdict
    assert repr(verdict).startswith("PASS: dx, dgate_w, dup_w and ddown_w all match"), verdict


@pytest.mark.parametrize("slip, wrong, right, hint", [
    ("sigmoid", ["dgate_w", "dx"], ["dup_w", "ddown_w"], "SiLU's derivative"),
    ("no_gate", ["dup_w", "dx"], ["dgate_w", "ddown_w"], "multiplied by the gate"),
    ("gate_path_only", ["dx"], ["dgate_w", "dup_w", "ddown_w"], "add du @ up_w"),
    ("transposed", ["ddown_w"], ["dx", "dgate_w", "dup_w"], "transposed"),
    ("sign", ["dgate_w"], ["dx", "dup_w", "ddown_w"], "sign is flipped"),
])
def test_checker_names_the_wrong_gradient(slip, wrong, right, hint):
    verdict = check_swiglu_backward(lambda *a: _learner_swiglu_backward(*a, slip=slip))
    assert not verdict.passed, verdict
    for name in wrong:
        assert f"{name} " in verdict.message, verdict
    for name in right:
        assert f"{name} " not in verdict.message, verdict
    assert hint in verdict.message, verdict


def test_checker_reports_crashes_and_wrong_returns():
    def crashes(dout, x, gate_w, up_w, down_w):
        return dout @ gate_w  # (B, T, C) @ (F, C): shapes do not line up
    assert repr(check_swiglu_backward(crashes)).startswith("NOT YET: your function raised ValueError")
    assert "four arrays" in check_swiglu_backward(lambda *a: a[0]).message

    def stub(dout, x, gate_w, up_w, down_w):
        raise NotImplementedError
    assert repr(check_swiglu_backward(stub)) == "NOT YET: not written yet (your function raises NotImplementedError)"
    with pytest.raises(ValueError, match="user_fn"):
        check_swiglu_backward("not a function")


# --- bad input ---------------------------------------------------------------------------------------
def test_bad_input_raises_helpful_errors():
    cfg = Config(vocab_size=11, dim=16, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=24, max_seq_len=8)
    params = bp.params_from_torch(_model(cfg))
    ok = np.zeros((1, 4), dtype=np.int64)
    with pytest.raises(ValueError, match="batch"):
        bp.model_forward(params, cfg, np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="vocab_size"):
        bp.model_forward(params, cfg, ok + 11)
    with pytest.raises(ValueError, match="max_seq_len"):
        bp.model_forward(params, cfg, np.zeros((1, 9), dtype=np.int64))
    with pytest.raises(ValueError, match="missing"):
        bp.model_forward({k: v for k, v in params.items() if k != "norm.weight"}, cfg, ok)
    with pytest.raises(ValueError, match="lm_head"):
        bp.model_forward(params, cfg.replace(tie_embeddings=False), ok)
    with pytest.raises(ValueError, match="n_experts"):
        bp.model_forward(params, cfg.replace(n_experts=2), ok)
    with pytest.raises(ValueError, match="n_experts"):
        bp.params_from_torch(TinyLM(cfg.replace(n_experts=2)))
    with pytest.raises(ValueError, match="targets"):
        bp.model_forward(params, cfg, ok, np.zeros((1, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="divisible"):
        bp.attention_forward(np.zeros((1, 3, 2, 2)), np.zeros((1, 2, 2, 2)), np.zeros((1, 2, 2, 2)))
    with pytest.raises(ValueError, match="ignore_index"):
        bp.cross_entropy_forward(np.zeros((2, 5)), np.array([1, 7]))
    with pytest.raises(ValueError, match="floating"):
        bp.grad_check(lambda a: 0.0, np.arange(3))
    with pytest.raises(ValueError, match="wrt"):
        bp.check_backward(bp.linear_forward, lambda d, c: bp.linear_backward(d, c)[0],
                          [np.ones((2, 3)), np.ones((4, 3))])
    with pytest.raises(ValueError, match="grads"):
        bp.adamw_step({"w": np.ones(2)}, {}, {})
