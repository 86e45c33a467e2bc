# The exercise checkers of chapters 8-14, run from the chapters' own cells: each rejects a plausible wrong
# answer and an answer that calls tinylm's (or gguf's) implementation, and accepts the solution.
# Run: .venv/bin/python -m pytest tests/test_exercises_08_13.py
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cells(chapter: str, *needles: str, namespace: dict | None = None) -> dict:
    """Execute, in order, the first code cell of chapters/<chapter> containing each needle; -> the namespace."""
    cells = ["".join(c["source"]) for c in json.loads((ROOT / "chapters" / chapter).read_text())["cells"]
             if c["cell_type"] == "code"]
    ns = {} if namespace is None else namespace
    for needle in needles:
        source = next((s for s in cells if needle in s), None)
        assert source is not None, f"{chapter}: no code cell contains {needle!r}"
        exec(compile(source, f"{chapter}:{needle}", "exec"), ns)
    return ns


def refused_as_library(verdict) -> bool:
    return not verdict and " calls " in verdict.message


def assert_checker(check, solution, wrong, *shortcuts) -> None:
    """check accepts the solution, rejects the wrong answer, and refuses each shortcut as calling the library."""
    assert check(solution), check(solution)
    assert not check(wrong)
    for shortcut in shortcuts:
        assert refused_as_library(check(shortcut)), check(shortcut)


def test_moe_load_balancing_checker():
    ns = run_cells("08_moe.ipynb", "dense = Config.from_preset", "small = Config(vocab_size=64",
                   "moe = MoE(small", "def check(fn)", "def load_balancing_loss_per_token")
    torch, moe = ns["torch"], ns["moe"]
    assert_checker(ns["check"], ns["load_balancing_loss"], ns["load_balancing_loss_per_token"],
                   lambda ids, p, E: ns["MoE"].load_balancing_loss(moe, torch.from_numpy(ids),
                                                                   torch.from_numpy(p)).item())
    assert "reference" not in ns and "layers" not in ns          # the reference lives inside the checker


def test_top_p_checker():
    ns = run_cells("09_generation.ipynb", "from tinylm.generate import", "def check(fn)",
                   "def top_p_filter_inclusive")
    torch = ns["torch"]
    assert_checker(ns["check"], ns["top_p_filter_np"], ns["top_p_filter_inclusive"],
                   lambda x, p: ns["top_p_filter"](torch.from_numpy(x), p).numpy(),
                   lambda x, p: ns["tinylm"].top_p_filter(torch.from_numpy(x), p).numpy())


def test_bpe_encode_checker():
    from tinylm.corpus import shakespeare_text
    from tinylm.tokenizer import BPETokenizer
    text = shakespeare_text("train")[:20_000]
    ns = run_cells("10_tokenizer.ipynb", "from tinylm.tokenizer import PATTERN")
    ns.update(tok=BPETokenizer.train(text, 400), held_out=shakespeare_text("val")[:6_000])
    run_cells("10_tokenizer.ipynb", "def merge(", namespace=ns)
    run_cells("10_tokenizer.ipynb", "case_merges = tok.merges", "def encode_by_tinylm", namespace=ns)
    assert_checker(ns["check"], ns["encode"], ns["encode_left_to_right"], ns["encode_by_tinylm"])


def test_chat_labels_checker():
    ns = run_cells("11_training.ipynb", "works = {s: shakespeare_works(s)")
    ns["tok"] = ns["load_mini_companion"]()[1]                   # the chapter's tokenizer, without its encoding
    ns["chats"] = ns["conversations"]("train")
    run_cells("11_training.ipynb", "eos_case = [", "def chat_ids_and_labels_opener", namespace=ns)
    assert_checker(ns["check"], ns["chat_ids_and_labels"], ns["chat_ids_and_labels_opener"],
                   lambda tok, turns: ns["encode_chat"](tok, turns))


def test_swiglu_backward_checker():
    ns = run_cells("12_backprop.ipynb", "from tinylm import backprop as bp", "def check(fn)",
                   "def swiglu_backward_gate_path_only")
    bp = ns["bp"]
    assert_checker(ns["check"], ns["swiglu_backward"], ns["swiglu_backward_gate_path_only"],
                   lambda dout, *xw: bp.swiglu_backward(dout, bp.swiglu_forward(*xw)[1]))


def test_micrograd_engine_matches_rms_norm_backward():
    ns = run_cells("12_backprop.ipynb", "from tinylm import backprop as bp", "class Value:", "xv = [[Value(a)")
    assert ns["same_dx"] and ns["same_dw"] and ns["n_nodes"] > 8
    Value = ns["Value"]
    v = Value(3.0)
    (v * v).backward()
    assert v.grad == 6.0                                          # the quiz's answer: both paths add


@pytest.mark.slow
def test_q4_1_checker():
    ns = run_cells("14_real_model.ipynb", "from tinylm.pretrained import load_gguf", "path = smollm2_gguf_path()",
                   "gg = read_gguf(path)", "Q4_1 = gguf.GGMLQuantizationType.Q4_1",
                   "q41 = {n: t for n, t in gg.tensors.items()", "def check(fn)", "def q4_1_block_interleaved")
    check, gguf = ns["check"], ns["gguf"]
    assert_checker(check, ns["q4_1_block"], ns["q4_1_block_interleaved"],
                   lambda b: gguf.quants.dequantize(b, ns["Q4_1"]),
                   lambda b: sys.modules["tinylm.gguf_file"].dequantize(ns["q_file"])[0, :32])

    def in_float16(block):                                        # d * q + m rounded to float16: not the file's
        d, m = block[0:2].view(np.float16), block[2:4].view(np.float16)
        codes = np.concatenate([block[4:] & 0x0F, block[4:] >> 4]).astype(np.float16)
        return d * codes + m
    assert not check(in_float16)
    assert not check(lambda b: in_float16(b).astype(np.float32))
