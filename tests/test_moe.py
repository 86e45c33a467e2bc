# Run: .venv/bin/python -m pytest -q tests/test_moe.py
"""Mixture of experts: routing, load-balancing loss, grouped dispatch, gradients, parameter counts."""

import math

import pytest
import torch
import torch.nn.functional as F

from tinylm import Config, SwiGLU, TinyLM, count_params
from tinylm.moe import MoE, moe_naive

TINY = Config(vocab_size=64, dim=16, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=24, max_seq_len=32)


def moe_cfg(n_experts: int = 4, k: int = 2, **changes) -> Config:
    return TINY.replace(n_experts=n_experts, experts_per_token=k, **changes)


def make_moe(n_experts: int = 4, k: int = 2, seed: int = 0) -> MoE:
    torch.manual_seed(seed)
    cfg = moe_cfg(n_experts, k)
    return MoE(cfg, expert=lambda: SwiGLU(cfg.dim, cfg.ffn_dim))


@pytest.mark.parametrize("k", [1, 2])
def test_route_weights_sum_to_one_and_pick_top_k(k):
    moe = make_moe(4, k)
    x = torch.randn(3, 5, 16)
    weights, ids, probs = moe.route(x)
    assert weights.shape == (15, k) and ids.shape == (15, k) and probs.shape == (15, 4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(15))
    torch.testing.assert_close(probs.sum(-1), torch.ones(15))
    # the chosen experts are the k most probable, and the weights are their renormalised probabilities
    logits = x.reshape(15, 16) @ moe.gate.weight.T
    expected_ids = logits.argsort(dim=-1, descending=True)[:, :k]
    assert torch.equal(ids, expected_ids)
    chosen = probs.gather(1, ids)
    torch.testing.assert_close(weights, chosen / chosen.sum(-1, keepdim=True))


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("dims", [(2, 7), (1, 1), (4, 3)])
def test_grouped_dispatch_equals_naive_loop(k, dims):
    moe = make_moe(4, k, seed=k)
    x = torch.randn(*dims, 16)
    y = moe(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y, moe_naive(moe, x), atol=1e-5, rtol=1e-5)
    assert moe.last_counts.dtype == torch.long and int(moe.last_counts.sum()) == x.shape[0] * x.shape[1] * k


def test_one_expert_equals_dense_swiglu():
    moe = make_moe(1, 1)
    dense = SwiGLU(16, 24)
    dense.load_state_dict(moe.experts[0].state_dict())
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(moe(x), dense(x), atol=1e-6, rtol=1e-6)
    assert moe.aux_loss.item() == pytest.approx(1.0)  # f = P = 1 for the only expert


def test_tinylm_with_one_expert_equals_dense_tinylm():
    torch.manual_seed(0)
    dense = TinyLM(TINY)
    moe_model = TinyLM(moe_cfg(1, 1))
    state = {}
    for key, value in dense.state_dict().items():
        if ".mlp." in key:  # layers.i.mlp.gate_proj.weight -> layers.i.mlp.experts.0.gate_proj.weight
            key = key.replace(".mlp.", ".mlp.experts.0.")
        state[key] = value
    for i in range(TINY.n_layers):
        state[f"layers.{i}.mlp.gate.weight"] = torch.randn(1, TINY.dim)  # any router: softmax of one logit is 1
    moe_model.load_state_dict(state)
    idx = torch.randint(0, 64, (2, 10))
    targets = torch.randint(0, 64, (2, 10))
    logits_d, loss_d = dense(idx, targets)
    logits_m, loss_m = moe_model(idx, targets)
    torch.testing.assert_close(logits_m, logits_d, atol=1e-5, rtol=1e-5)
    # one expert: f_0 = P_0 = 1, so aux = 1 and the loss is the dense loss + mlp_aux_weight
    assert moe_model.cfg.mlp_aux_weight == 0.01                                # Switch Transformer's weight
    assert (loss_m - loss_d).item() == pytest.approx(moe_model.cfg.mlp_aux_weight, abs=1e-6)


def test_load_balancing_loss_is_one_for_uniform_routing():
    # Zero router: every probability is 1/E, so P is uniform and E * sum_i f_i / E = 1 whatever the ties do.
    moe = make_moe(4, 2)
    torch.nn.init.zeros_(moe.gate.weight)
    moe(torch.randn(2, 8, 16))
    assert moe.aux_loss.item() == pytest.approx(1.0, abs=1e-6)
    # Balanced and confident: token n points at expert n % 4, so f and P are both exactly uniform.
    moe = make_moe(4, 1)
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.gate.weight[:, :4] = torch.eye(4)
    x = torch.zeros(1, 12, 16)
    x[0, torch.arange(12), torch.arange(12) % 4] = 3.0
    moe(x)
    assert moe.last_counts.tolist() == [3, 3, 3, 3]
    assert moe.aux_loss.item() == pytest.approx(1.0, abs=1e-6)


def test_load_balancing_loss_for_collapsed_routing():
    # Every token has logits [ln 3, 0, 0, 0]: probabilities [1/2, 1/6, 1/6, 1/6], top-1 is always expert 0.
    # f = [1, 0, 0, 0], P_0 = 1/2, so the loss is 4 * 1 * 1/2 = 2.
    moe = make_moe(4, 1)
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.gate.weight[0, 0] = 1.0
    x = torch.randn(2, 5, 16)
    x[..., 0] = math.log(3)
    moe(x)
    assert moe.last_counts.tolist() == [10, 0, 0, 0]
    assert moe.aux_loss.item() == pytest.approx(2.0, abs=1e-6)
    # Top-2 with logits [ln 3, ln 3, 0, 0]: P = [3/8, 3/8, 1/8, 1/8], f = [1/2, 1/2, 0, 0] -> 4 * 3/8 = 1.5.
    moe = make_moe(4, 2)
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.gate.weight[0, 0] = moe.gate.weight[1, 0] = 1.0
    moe(x)
    assert moe.last_counts.tolist() == [10, 10, 0, 0]
    assert moe.aux_loss.item() == pytest.approx(1.5, abs=1e-6)
    # Top-1 onto one fully confident expert reaches the maximum, E: f_0 = 1 and P_0 = 1 - 3e^-30/(...).
    moe = make_moe(4, 1)
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.gate.weight[0, 0] = 30.0 / math.log(3)
    moe(x)
    assert moe.aux_loss.item() == pytest.approx(4.0, abs=1e-6)


def test_load_balancing_loss_matches_f_and_p_computed_by_hand():
    moe = make_moe(4, 2, seed=3)
    x = torch.randn(3, 9, 16)
    moe(x)
    probs = (x.reshape(-1, 16) @ moe.gate.weight.detach().T).softmax(-1)                 # (N, E)
    top2 = probs.topk(2, dim=-1).indices                                          # (N, 2)
    f = F.one_hot(top2, 4).sum(dim=(0, 1)).float() / top2.numel()                 # (E,)
    expected = 4 * (f * probs.mean(0)).sum()
    assert moe.aux_loss.item() == pytest.approx(float(expected), abs=1e-6)
    assert moe.last_counts.tolist() == F.one_hot(top2, 4).sum(dim=(0, 1)).tolist()


def test_aux_loss_is_stored_in_eval_mode_too():
    moe = make_moe(4, 2).eval()
    with torch.no_grad():
        moe(torch.randn(1, 4, 16))
    assert moe.aux_loss is not None and moe.aux_loss.dim() == 0


def test_gradients_reach_used_experts_and_router_but_not_unused_experts():
    moe = make_moe(4, 2)
    with torch.no_grad():  # logits ordered expert 0 > 1 > 2 > 3 for any positive input: top-2 is {0, 1}
        moe.gate.weight.copy_(torch.tensor([1.0, 0.5, 0.0, -1.0])[:, None].expand(4, 16))
    x = torch.randn(2, 6, 16).abs()
    moe(x).pow(2).sum().backward()  # the output alone, without the auxiliary loss
    assert moe.last_counts.tolist() == [12, 12, 0, 0]
    for e in (0, 1):
        for p in moe.experts[e].parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0
    for e in (2, 3):
        for p in moe.experts[e].parameters():
            assert p.grad is None or p.grad.abs().sum() == 0
    assert moe.gate.weight.grad is not None and moe.gate.weight.grad.abs().sum() > 0


def test_top1_router_learns_only_from_the_auxiliary_loss():
    # With k = 1 the renormalised weight is exactly 1: the output carries no gradient to the router.
    moe = make_moe(4, 1)
    x = torch.randn(2, 6, 16)
    moe(x).sum().backward()
    torch.testing.assert_close(moe.gate.weight.grad, torch.zeros(4, 16), atol=1e-6, rtol=0)  # d(w/w)/dw = 0
    moe.zero_grad()
    moe(x)
    moe.aux_loss.backward()
    assert moe.gate.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("changes", [
    dict(n_experts=4, experts_per_token=2),
    dict(n_experts=4, experts_per_token=1),
    dict(n_experts=1, experts_per_token=1),
    dict(n_experts=8, experts_per_token=2, qk_norm=True, tie_embeddings=False),
])
def test_count_params_total_and_active(changes):
    cfg = TINY.replace(**changes)
    torch.manual_seed(0)
    model = TinyLM(cfg)
    counts = count_params(cfg)
    assert counts.total == sum(p.numel() for p in model.parameters())
    # active: every parameter except the experts, plus k experts per layer (counted from the modules)
    expert_params = {id(p) for layer in model.layers for p in layer.mlp.experts.parameters()}
    non_expert = sum(p.numel() for p in model.parameters() if id(p) not in expert_params)
    k_experts = sum(cfg.experts_per_token * sum(p.numel() for p in layer.mlp.experts[0].parameters())
                    for layer in model.layers)
    assert counts.active == non_expert + k_experts
    assert counts.active <= counts.total


def test_tinylm_loss_includes_weighted_aux_loss():
    torch.manual_seed(0)
    model = TinyLM(moe_cfg(4, 2))
    idx = torch.randint(0, 64, (2, 12))
    targets = torch.randint(0, 64, (2, 12))
    logits, loss = model(idx, targets)
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    layer_aux = torch.stack([layer.mlp.aux_loss for layer in model.layers]).mean()
    torch.testing.assert_close(model.last_aux_loss, layer_aux)
    assert (loss - ce).item() == pytest.approx(model.cfg.mlp_aux_weight * model.last_aux_loss.item(), abs=1e-6)
    loss.backward()
    assert all(layer.mlp.gate.weight.grad.abs().sum() > 0 for layer in model.layers)


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_aux_weight_is_a_config_field(weight):
    torch.manual_seed(0)
    model = TinyLM(moe_cfg(4, 2, mlp_aux_weight=weight))
    idx, targets = torch.randint(0, 64, (2, 12)), torch.randint(0, 64, (2, 12))
    logits, loss = model(idx, targets)
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert (loss - ce).item() == pytest.approx(weight * model.last_aux_loss.item(), abs=1e-6)


def test_moe_builds_the_experts_it_is_given():
    moe = MoE(moe_cfg(3, 1), expert=lambda: torch.nn.Linear(16, 16, bias=False))
    assert [type(e) for e in moe.experts] == [torch.nn.Linear] * 3
    assert moe(torch.randn(2, 5, 16)).shape == (2, 5, 16)
    with pytest.raises(ValueError, match="expert"):
        MoE(moe_cfg(3, 1), expert=SwiGLU(16, 24))               # a module, not a function that builds one


@pytest.mark.parametrize("changes, field", [
    (dict(n_experts=4, experts_per_token=3), "experts_per_token"),
    (dict(n_experts=-1), "n_experts"),
    (dict(n_experts=1, experts_per_token=2), "experts_per_token"),
])
def test_bad_moe_config_raises(changes, field):
    with pytest.raises(ValueError, match=field):
        TINY.replace(**changes)


@pytest.mark.parametrize("renormalize", [True, False])
def test_top1_router_gets_language_model_gradient_only_without_renormalisation(renormalize):
    # Switch Transformer: with k = 1 the expert's output is scaled by its raw probability p, so the
    # language-model loss reaches the router; renormalised (p / p = 1) it does not.
    torch.manual_seed(0)
    model = TinyLM(moe_cfg(4, 1, mlp_aux_weight=0.0, moe_renormalize=renormalize))
    idx, targets = torch.randint(0, 64, (2, 12)), torch.randint(0, 64, (2, 12))
    _, loss = model(idx, targets)                   # the language-model loss alone (aux weight 0)
    loss.backward()
    router_grad = sum(layer.mlp.gate.weight.grad.abs().sum().item() for layer in model.layers)
    if renormalize:
        assert router_grad < 1e-9
    else:
        assert router_grad > 1e-6


def test_without_renormalisation_the_weights_are_the_raw_probabilities():
    torch.manual_seed(0)
    cfg = moe_cfg(4, 2, moe_renormalize=False)
    moe = MoE(cfg, expert=lambda: SwiGLU(cfg.dim, cfg.ffn_dim))
    x = torch.randn(2, 5, 16)
    weights, ids, probs = moe.route(x)
    torch.testing.assert_close(weights, probs.gather(1, ids))
    assert (weights.sum(-1) < 1).all()
    torch.testing.assert_close(moe(x), moe_naive(moe, x), atol=1e-5, rtol=1e-5)


def test_load_balancing_loss_is_one_for_flat_probabilities_whatever_the_assignment():
    # P_i = 1/E for every expert: E * sum_i f_i / E = sum_i f_i = 1, even with every slot on expert 0.
    moe = make_moe(4, 1)
    ids = torch.zeros(10, 1, dtype=torch.long)
    flat = torch.full((10, 4), 0.25)
    assert moe.load_balancing_loss(ids, flat).item() == pytest.approx(1.0)


def test_moe_every_puts_experts_in_every_kth_block():
    cfg = TINY.replace(n_layers=4, n_experts=4, experts_per_token=2, moe_every=2)
    torch.manual_seed(0)
    model = TinyLM(cfg)
    assert [isinstance(layer.mlp, MoE) for layer in model.layers] == [False, True, False, True]
    assert [cfg.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    counts = count_params(cfg)
    assert counts.total == sum(p.numel() for p in model.parameters())
    dense_ff = 3 * cfg.dim * cfg.ffn_dim
    router = cfg.n_experts * cfg.dim
    assert counts.feed_forward == 2 * dense_ff + 2 * (router + 4 * dense_ff)
    assert counts.active_feed_forward == 2 * dense_ff + 2 * (router + 2 * dense_ff)
    idx, targets = torch.randint(0, 64, (2, 12)), torch.randint(0, 64, (2, 12))
    logits, loss = model(idx, targets)
    aux = torch.stack([model.layers[1].mlp.aux_loss, model.layers[3].mlp.aux_loss]).mean()
    torch.testing.assert_close(model.last_aux_loss, aux)           # the mean over the MoE blocks only
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert (loss - ce).item() == pytest.approx(cfg.mlp_aux_weight * aux.item(), abs=1e-6)


@pytest.mark.parametrize("changes, field", [
    (dict(n_experts=4, moe_every=0), "moe_every"),
    (dict(n_experts=4, moe_every=3), "moe_every"),            # TINY has 2 layers: no block would get experts
    (dict(n_experts=4, moe_renormalize=1), "moe_renormalize"),
])
def test_bad_moe_placement_or_routing_raises(changes, field):
    with pytest.raises(ValueError, match=field):
        TINY.replace(**changes)
