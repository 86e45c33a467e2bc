# Each exercise checker of chapters 1-7 refuses a plausible wrong answer and an answer that calls tinylm's own
# implementation, and accepts the chapter's solution. The checker is the chapter's own cell, run in a fresh
# namespace after the chapter's import cell. Run: .venv/bin/python -m pytest tests/test_exercise_checkers_ch01_07.py
import contextlib
import io
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cells(name: str) -> list[dict]:
    nb = json.loads((ROOT / "chapters" / f"{name}.ipynb").read_text())
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def chapter_checker(name: str) -> dict:
    """The namespace after the chapter's import cell, its checker cell and its solution cell (printing muted)."""
    code = cells(name)
    source = ["".join(c["source"]) for c in code]
    tags = [c["metadata"].get("tags", []) for c in code]
    exercise = next(i for i, t in enumerate(tags) if "exercise" in t)
    checker = max(i for i in range(exercise) if "check = " in source[i])
    solution = next(i for i, t in enumerate(tags) if "solution" in t)
    ns: dict = {"__name__": f"chapter_{name[:2]}"}
    with contextlib.redirect_stdout(io.StringIO()):
        for i in (1, checker, solution):  # code cell 0 is the Colab install cell
            exec(compile(source[i], f"{name}[{i}]", "exec"), ns)
    return ns


def refused(verdict, calls: bool = False) -> bool:
    return not verdict.passed and (not calls or " calls " in verdict.message)


def test_ch01_attention_params():
    ns = chapter_checker("01_parameter_counting")
    check, Config = ns["check"], ns["Config"]
    assert check(ns["attention_params"]).passed
    assert refused(check(ns["attention_params_square"]))
    # head_dim taken as dim // n_heads: right for the running example, wrong for Qwen3's shapes
    assert refused(check(lambda c, h, k, d: 2 * c * h * (c // h) + 2 * c * k * (c // h)))

    def by_count_params(c, h, k, d):
        cfg = Config(dim=c, n_layers=1, n_heads=h, n_kv_heads=k, head_dim=d)
        return ns["count_params"](cfg).attention

    def by_package(c, h, k, d):
        import tinylm.params
        return tinylm.params.attention_params(Config(dim=c, n_heads=h, n_kv_heads=k, head_dim=d))

    assert refused(check(by_count_params), calls=True)
    assert refused(check(by_package), calls=True)


def test_ch02_rms_norm():
    ns = chapter_checker("02_rmsnorm")
    check, ref, np, torch = ns["check"], ns["ref"], ns["np"], ns["torch"]
    assert check(ns["rms_norm"]).passed
    assert refused(check(ns["rms_norm_eps_outside"]))
    assert refused(check(lambda x, w, eps=1e-5: x / np.sqrt(np.mean(x ** 2, axis=0, keepdims=True) + eps) * w))
    assert refused(check(lambda x, w, eps=1e-5: ref.rms_norm(x, w, eps)), calls=True)
    assert refused(check(lambda x, w, eps=1e-5: x / ref.rms(x, eps)[..., None] * w), calls=True)

    def by_module(x, w, eps=1e-5):
        norm = ns["RMSNorm"](x.shape[-1], eps).double()
        norm.weight.data = torch.tensor(w)
        return norm(torch.tensor(x)).detach().numpy()

    assert refused(check(by_module), calls=True)


def test_ch03_causal_mask():
    ns = chapter_checker("03_attention")
    check, np = ns["check"], ns["np"]
    assert check(ns["causal_mask"]).passed
    assert refused(check(ns["causal_mask_no_offset"]))
    assert refused(check(lambda T, S: np.triu(np.ones((T, S), dtype=bool), S - T)))

    def by_positions(T, S):
        from tinylm.positions import causal_mask
        return causal_mask(T, S)

    def by_model(T, S):
        import tinylm.model
        return tinylm.model.causal_mask(T, S).numpy()

    assert refused(check(by_positions), calls=True)
    assert refused(check(by_model), calls=True)


def test_ch04_rope():
    ns = chapter_checker("04_rope")
    check, ref, np = ns["check"], ns["ref"], ns["np"]
    assert check(ns["rope"]).passed
    assert refused(check(ns["rope_half_exponent"]))
    assert refused(check(lambda x, positions, base=10000.0: ref.rope(x, positions, base)), calls=True)

    def by_tables(x, positions, base=10000.0):
        cos, sin = ref.rope_tables(x.shape[-1], int(np.max(positions)) + 1, base)
        return ref.apply_rope(x, cos[positions], sin[positions])

    def by_speeds(x, positions, base=10000.0):
        return ref.rope_with_inv_freq(x, positions, ref.rope_inv_freq(x.shape[-1], base))

    assert refused(check(by_tables), calls=True)
    assert refused(check(by_speeds), calls=True)


def test_ch05_gqa_attention():
    ns = chapter_checker("05_gqa_kv_cache")
    check, ref, np = ns["check"], ns["ref"], ns["np"]
    assert check(ns["gqa_attention"]).passed
    assert refused(check(ns["gqa_attention_no_offset"]))
    assert refused(check(lambda q, k, v: ref.attention(q, k, v)), calls=True)

    # written in the chapter's namespace, as a learner would: repeat_kv is the name the chapter imported
    exec("""def by_repeat_kv(q, k, v):
    n_rep = q.shape[1] // k.shape[1]
    k, v = (repeat_kv(torch.from_numpy(a), n_rep).numpy() for a in (k, v))
    T, S = q.shape[2], k.shape[2]
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones((T, S), dtype=bool), S - T), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True) @ v
""", ns)
    by_repeat_kv = ns["by_repeat_kv"]

    def by_torch_attention(q, k, v):
        import torch
        out = ns["tinylm"].model.attention(*(torch.from_numpy(a) for a in (q, k, v)))
        return out.numpy()

    assert refused(check(by_repeat_kv), calls=True)
    assert refused(check(by_torch_attention), calls=True)


def test_ch06_swiglu():
    ns = chapter_checker("06_swiglu")
    check, ref, np, torch = ns["check"], ns["ref"], ns["np"], ns["torch"]
    assert check(ns["swiglu"]).passed
    assert refused(check(ns["swiglu_sigmoid_gate"]))
    assert refused(check(lambda x, g, u, d: ref.swiglu(x, g, u, d)), calls=True)
    assert refused(check(lambda x, g, u, d: (ref.silu(x @ g.T) * (x @ u.T)) @ d.T), calls=True)

    def by_module(x, g, u, d):
        mlp = ns["SwiGLU"](g.shape[1], g.shape[0]).double()
        with torch.no_grad():
            for layer, w in ((mlp.gate_proj, g), (mlp.up_proj, u), (mlp.down_proj, d)):
                layer.weight.copy_(torch.from_numpy(w))
            return mlp(torch.from_numpy(x)).numpy()

    assert refused(check(by_module), calls=True)


def test_ch07_block_forward():
    ns = chapter_checker("07_assembling")
    check = ns["check"]
    assert check(ns["block_forward"]).passed
    assert refused(check(ns["block_forward_norms_swapped"]))

    def one_norm_twice(block, x, cos, sin):
        x = x + block.self_attn(block.input_layernorm(x), cos, sin)
        return x + block.mlp(block.input_layernorm(x))

    def calls_it(block, x, cos, sin):
        return block(x, cos, sin)

    def calls_forward(block, x, cos, sin):
        return ns["tinylm"].Block.forward(block, x, cos, sin)

    assert refused(check(one_norm_twice))
    assert refused(check(calls_it), calls=True)
    assert refused(check(calls_forward), calls=True)
