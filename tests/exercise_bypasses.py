# The natural shortcuts and the plausible wrong answers of each exercise, by chapter (issue 37): the probe
# (tests/exercise_probe.py `named`) defines them in a copy of the chapter's namespace at the exercise and the
# chapter's checker must refuse each one, beside every callable the namespace holds.
"""Answers a learner could give that a checker must refuse: a library function that does the exercise (torch's,
transformers', tinylm's own through importlib.reload), a table of the cases a chapter shows, and wrong answers
that a weak checker let through. Each entry is source code defining one function, named for what it does."""

NAMED = {
    "01_parameter_counting.ipynb": [
        """def numel_of_tinylms_attention(dim, n_heads, n_kv_heads, head_dim):
    cfg = Config(dim=dim, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim)
    return sum(p.numel() for p in tinylm.Attention(cfg).parameters())""",
        """def reloaded_tinylm_params(dim, n_heads, n_kv_heads, head_dim):
    import importlib
    fresh = importlib.reload(importlib.import_module("tinylm.params"))
    return fresh.attention_params(Config(dim=dim, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim))""",
    ],
    "02_rmsnorm.ipynb": [
        """def torch_functional_rms_norm(x, weight, eps):
    t = torch.from_numpy
    return torch.nn.functional.rms_norm(t(x), (x.shape[-1],), t(weight), eps).numpy()""",
        """def torch_rms_norm(x, weight, eps):
    return torch.rms_norm(torch.from_numpy(x), (x.shape[-1],), torch.from_numpy(weight), eps).numpy()""",
        """def torch_nn_rmsnorm(x, weight, eps):
    norm = torch.nn.RMSNorm(x.shape[-1], eps=eps).double()
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(weight))
        return norm(torch.from_numpy(x)).numpy()""",
    ],
    "03_attention.ipynb": [
        """def float_zero_one_mask(T, S):
    return np.tril(np.ones((T, S)), k=S - T)""",
    ],
    "04_rope.ipynb": [
        """def reloaded_reference_rope(x, positions, base):
    import importlib
    return importlib.reload(importlib.import_module("tinylm.reference")).rope(x, positions, base)""",
    ],
    "05_gqa_kv_cache.ipynb": [
        """def sdpa_enable_gqa(q, k, v):
    T, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    t = torch.from_numpy
    return torch.nn.functional.scaled_dot_product_attention(
        t(q), t(k), t(v), attn_mask=mask, enable_gqa=True).numpy()""",
        """def softmax_without_the_max(q, k, v):
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    qg = q.reshape(B, Hkv, H // Hkv, T, D)
    scores = qg @ k[:, :, None].swapaxes(-1, -2) / np.sqrt(D)
    e = np.where(np.tril(np.ones((T, S), dtype=bool), S - T), np.exp(scores), 0.0)
    return (e / e.sum(-1, keepdims=True) @ v[:, :, None]).reshape(B, H, T, D)""",
    ],
    "06_swiglu.ipynb": [
        """def torch_silu(x, gate_w, up_w, down_w):
    return (torch.nn.functional.silu(torch.from_numpy(x @ gate_w.T)).numpy() * (x @ up_w.T)) @ down_w.T""",
        """def torch_nn_silu(x, gate_w, up_w, down_w):
    return (torch.nn.SiLU()(torch.from_numpy(x @ gate_w.T)).numpy() * (x @ up_w.T)) @ down_w.T""",
    ],
    "07_assembling.ipynb": [
        """def no_mlp_in_float16(block, x, cos, sin):
    return (x + block.self_attn(block.input_layernorm(x), cos, sin)).half()""",
    ],
    "08_moe.ipynb": [
        """from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func as _mixtral_loss

def mixtrals_loss(expert_ids, probs, n_experts):
    logits = (torch.from_numpy(np.log(probs)),)
    return _mixtral_loss(logits, n_experts, expert_ids.shape[1]).item()""",
        """def ignoring_expert_ids(expert_ids, probs, n_experts):
    top = np.argsort(-probs, axis=-1)[:, :expert_ids.shape[1]]       # the ids recomputed from probs
    f = np.bincount(top.ravel(), minlength=n_experts) / top.size
    return float(n_experts * (f * probs.mean(axis=0)).sum())""",
    ],
    "09_generation.ipynb": [
        """from transformers import TopPLogitsWarper as _Warper

def transformers_top_p(logits, p):
    return _Warper(p)(None, torch.from_numpy(logits)).numpy()""",
    ],
    "10_tokenizer.ipynb": [
        """import numpy as np

_shown = {text: BPETokenizer(m).encode(text) for text, m in draw(np.random.default_rng(0))}

def table_of_shown_cases(text, merges):
    return _shown[text]""",
    ],
    "11_training.ipynb": [
        """def everything_after_the_first_answer_opener(tok, turns):
    specials = ("<bos>", "<|user|>", "<|assistant|>", "<eos>")
    bos, user, assistant, eos = (tok.special_ids[s] for s in specials)
    ids = [bos]
    for turn in turns:
        text = tok.encode(turn["content"])
        ids += [user] + text if turn["role"] == "user" else [assistant] + text + [eos]
    first = ids.index(assistant)
    return ids, [-100] * (first + 1) + ids[first + 1:]     # right for one exchange only""",
    ],
    "12_backprop.ipynb": [
        """def by_grad_check(dout, x, gate_w, up_w, down_w):
    args = [x, gate_w, up_w, down_w]
    def one(i):
        def loss(a):
            b = list(args)
            b[i] = a
            return float((dout * bp.swiglu_forward(*b)[0]).sum())
        return bp.grad_check(loss, args[i].copy())
    return tuple(one(i) for i in range(4))""",
        """def by_autograd(dout, x, gate_w, up_w, down_w):
    t = [torch.tensor(a, requires_grad=True) for a in (x, gate_w, up_w, down_w)]
    g, u = t[0] @ t[1].T, t[0] @ t[2].T
    ((g * torch.sigmoid(g) * u) @ t[3].T).backward(torch.from_numpy(dout))
    return tuple(a.grad.numpy() for a in t)""",
    ],
    "13_what_each_piece_buys.ipynb": [
        """_shown = {p.tobytes(): best_size(p, y) for p, y in draw(np.random.default_rng(0))}

def table_of_shown_cases(params, bpb):
    return _shown[np.asarray(params, float).tobytes()]""",
    ],
    "14_real_model.ipynb": [
        """_shown = {b.tobytes(): gguf.quants.dequantize(b, Q4_1) for (b,) in draw(np.random.default_rng(0))}

def table_of_shown_blocks(block):
    return _shown[block.tobytes()]""",
    ],
    "17_preferences.ipynb": [
        """def tinylms_dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    return dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)[0]""",
        """def reloaded_tinylm_dpo(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    import importlib
    fresh = importlib.reload(importlib.import_module("tinylm.dpo"))
    return fresh.dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)[0]""",
        """def log_of_sigmoid(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -torch.log(torch.sigmoid(beta * h)).mean()  # -log(0) = inf at beta h = -200""",
        """def log1p_of_exp(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return torch.log1p(torch.exp(-beta * h)).mean()  # exp(200) = inf in float32""",
        """def without_beta(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -F.logsigmoid(h).mean()""",
        """def chosen_and_rejected_swapped(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    h = (policy_rejected - ref_rejected) - (policy_chosen - ref_chosen)
    return -F.logsigmoid(beta * h).mean()""",
        """def without_the_reference(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    return -F.logsigmoid(beta * (policy_chosen - policy_rejected)).mean()""",
        """def summed_over_pairs(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -F.logsigmoid(beta * h).sum()""",
        """def per_pair_losses(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -F.logsigmoid(beta * h)  # (N,), not their mean""",
        """def detached_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -F.logsigmoid(beta * h).mean().detach()  # the right value, no gradient""",
        """def in_float16(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -F.logsigmoid(beta * h.half().float()).mean().half()""",
    ],
}


def named(ns: dict, chapter: str) -> list[tuple[str, object]]:
    """The chapter's named answers, each defined in a copy of the namespace `ns` (the chapter's own names stay
    as they are): (label, function) pairs for the probe."""
    found = []
    for source in NAMED.get(chapter, []):
        scope = dict(ns)
        where = f"<bypass of {chapter}>"
        exec(compile(source, where, "exec"), scope)
        new = [k for k, v in scope.items() if not k.startswith("_")            # defined by the source itself
               and getattr(getattr(v, "__code__", None), "co_filename", None) == where]
        assert len(new) == 1, f"a named bypass of {chapter} must define one function, got {new}"
        found.append((f"{new[0]} (named)", scope[new[0]]))
    return found
