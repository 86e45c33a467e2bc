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
