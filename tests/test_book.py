# The book's quizzes and exercise checker. Run: .venv/bin/python -m pytest tests/test_book.py
import re

import numpy as np
import pytest
import torch

from tinylm.book import Question, case_seed, check_function, check_group_advantages, check_lora_forward, quiz
from tinylm.lora import LoRAConfig, LoRALinear


def shown(q) -> list[list[tuple[str, bool]]]:
    """Per question, the (option, is it the key) pairs in the order the HTML shows them."""
    blocks = q._repr_html_().split('<div class="tl-q"')[1:]
    return [[(text, flag == "true") for flag, text in re.findall(r'data-correct="(\w+)"[^>]*>([^<]*)</button>', b)]
            for b in blocks]


QUESTIONS = [Question(f"q{n}?", [f"{n}-{i}" for i in range(4)], n % 4, [f"fb{n}-{i}" for i in range(4)])
             for n in range(6)]


def test_quiz_shuffles_options_but_the_key_stays_the_key():
    q = quiz("ch-test", *QUESTIONS)
    for question, options in zip(QUESTIONS, shown(q)):
        assert sorted(o for o, _ in options) == sorted(question.options)          # every option, once
        assert [o for o, key in options if key] == [question.options[question.answer]]
    # feedback follows its option: clicking "n-i" shows "fbn-i"
    html = q._repr_html_()
    for n, question in enumerate(QUESTIONS):
        for i, option in enumerate(question.options):
            button = re.search(rf'<button[^>]*onclick="([^"]*)">{option}</button>', html).group(1)
            assert f"fb{n}-{i}" in button


def test_quiz_order_is_the_same_on_every_run_and_depends_on_the_key():
    assert quiz("ch-test", *QUESTIONS)._repr_html_() == quiz("ch-test", *QUESTIONS)._repr_html_()
    orders = {tuple(tuple(o for o, _ in opts) for opts in shown(quiz(f"key-{k}", *QUESTIONS))) for k in range(5)}
    assert len(orders) > 1, "the shuffle ignores the quiz key"


@pytest.mark.parametrize("key", [f"k{n}" for n in range(40)])
def test_keys_written_in_one_position_are_spread_when_shown(key):
    same_slot = [Question(f"{n}?", ["right", "x", "y"], 0, ["a", "b", "c"]) for n in range(3)]
    positions = [[k for _, k in opts].index(True) for opts in shown(quiz(key, *same_slot))]
    assert len(set(positions)) > 1
    assert all(a != b for a, b in zip(positions, positions[1:])), "neighbours never share the key's position"


def test_quiz_text_repr_lists_the_shown_order():
    q = quiz("ch-test", *QUESTIONS)
    lines = [line.strip() for line in repr(q).splitlines() if line.startswith("   ")]
    assert [line[3:] for line in lines[:4]] == [o for o, _ in shown(q)[0]]


def square(x):
    return x ** 2


CASES = [(np.random.default_rng(n).standard_normal((3, 4)),) for n in range(3)]


def test_check_function_passes_a_float32_or_torch_answer_at_its_precision():
    assert check_function(lambda x: (x ** 2).astype(np.float32), square, CASES, atol=1e-9, rtol=1e-9)
    assert check_function(lambda x: torch.from_numpy(x).float() ** 2, square, CASES, atol=1e-9, rtol=1e-9)
    assert check_function(lambda x: torch.from_numpy(x) ** 2, square, CASES, atol=1e-9, rtol=1e-9)


def test_check_function_names_the_dtype_when_it_refuses():
    v = check_function(lambda x: (x ** 2 + 1e-3).astype(np.float32), square, CASES, atol=1e-9)
    assert not v and "float32" in v.message and "1e-05" in v.message, v.message
    v = check_function(lambda x: x ** 2 + 1e-6, square, CASES, atol=1e-9, rtol=1e-9)
    assert not v and "float64" in v.message and "1e-09" in v.message, v.message


def test_check_function_reports_stubs_shapes_and_errors():
    def stub(x):
        raise NotImplementedError

    assert "not written yet" in check_function(stub, square, CASES).message
    assert "shape" in check_function(lambda x: x.T ** 2, square, CASES).message
    assert "ZeroDivisionError" in check_function(lambda x: 1 / 0, square, CASES).message
    assert "None" in check_function(lambda x: None, square, CASES).message


def test_check_function_explains_infinities_without_warnings(recwarn):
    masked = lambda x: np.where(x > 0, x, -np.inf)
    assert check_function(masked, masked, CASES)                  # equal infinities are no error
    v = check_function(lambda x: np.where(x > 0.5, x, -np.inf), masked, CASES)
    assert not v and "infinite" in v.message, v.message
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# check_function(..., forbid=[module or class]): the learner's own code, not tinylm's
from tinylm import tokenizer as tokenizer_module  # noqa: E402
from tinylm.tokenizer import BPETokenizer, _merge  # noqa: E402

TOK = BPETokenizer.train("the cat sat on the mat; the hat is that flat hat. " * 3, 280)
TEXTS = [("the cat",), ("a flat hat sat",), ("that mat!",)]


def own_encode(text):
    """BPE encoding written from scratch: the lowest-ranked pair first, in every piece."""
    ranks = {pair: r for r, pair in enumerate(TOK.merges)}
    ids = []
    for piece in re.findall(tokenizer_module.PATTERN, text):
        word = list(piece.encode("utf-8"))
        while len(word) > 1:
            best = min(zip(word, word[1:]), key=lambda p: ranks.get(p, len(ranks)))
            if best not in ranks:
                break
            new, i = [], 0
            while i < len(word):
                if tuple(word[i:i + 2]) == best:
                    new.append(256 + ranks[best])
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = new
        ids += word
    return ids


def test_check_function_with_forbid_passes_own_code_and_refuses_tinylms():
    forbid = [tokenizer_module]
    assert check_function(own_encode, TOK.encode, TEXTS, forbid=forbid)
    v = check_function(lambda text: TOK.encode(text), TOK.encode, TEXTS, forbid=forbid, name="encode")
    assert not v and "tinylm.tokenizer.BPETokenizer.encode" in v.message and "yourself" in v.message, v.message
    v = check_function(lambda text: BPETokenizer.train(text, 300).encode(text), TOK.encode, TEXTS, forbid=forbid)
    assert not v and "BPETokenizer.train" in v.message, v.message
    # a class alone: its methods, not the rest of its module
    assert check_function(lambda text: own_encode(text) if _merge([1], (1, 1), 2) else None, TOK.encode, TEXTS,
                          forbid=[BPETokenizer])


def test_forbid_catches_names_imported_into_the_learners_namespace_and_swallowed_errors():
    namespace = {"_merge": _merge, "encode": TOK.encode, "own_encode": own_encode}
    exec("def by_alias(text):\n    return encode(text)\n"
         "def swallowed(text):\n"
         "    try:\n        _merge([1, 2], (1, 2), 3)\n    except BaseException:\n        pass\n"
         "    return own_encode(text)\n", namespace)
    for fn, called in ((namespace["by_alias"], "BPETokenizer.encode"), (namespace["swallowed"], "_merge")):
        v = check_function(fn, TOK.encode, TEXTS, forbid=[tokenizer_module])
        assert not v and called in v.message, v.message
    # everything is put back: the module, the class and the learner's names
    assert tokenizer_module._merge is _merge and namespace["_merge"] is _merge
    assert namespace["encode"].__func__ is BPETokenizer.encode and TOK.encode("the cat") == own_encode("the cat")


def test_forbid_must_name_modules_classes_functions_or_dotted_names():
    for bad, says in ((3, "modules, classes or functions"), ("tinylm", "not a dotted name"),
                      ("numpy.no_such_function", "names nothing in the loaded numpy")):
        with pytest.raises(ValueError, match=says):
            check_function(own_encode, TOK.encode, TEXTS, forbid=[bad])


def _rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w


NORM_CASES = [(np.random.default_rng(s).normal(size=(3, 8)), np.random.default_rng(9).normal(size=8))
              for s in range(3)]
TORCH_NORMS = [torch.nn.functional.rms_norm, torch.rms_norm, torch.nn.RMSNorm]


@pytest.mark.parametrize("answer, called", [
    (lambda x, w: torch.nn.functional.rms_norm(torch.from_numpy(x), (8,), torch.from_numpy(w), 1e-6),
     "torch.nn.functional.rms_norm"),
    (lambda x, w: torch.rms_norm(torch.from_numpy(x), (8,), torch.from_numpy(w), 1e-6), "rms_norm"),
    (lambda x, w: torch.nn.RMSNorm(8, eps=1e-6)(torch.from_numpy(x)) * torch.from_numpy(w), "RMSNorm.__init__"),
])
def test_forbid_refuses_torchs_built_ins_python_or_c(answer, called):
    v = check_function(answer, _rms, NORM_CASES, forbid=TORCH_NORMS, name="rms_norm")
    assert not v and called in v.message and "library function that does the exercise" in v.message, v.message
    assert check_function(lambda x, w: torch.from_numpy(_rms(x, w)), _rms, NORM_CASES, forbid=TORCH_NORMS)
    assert torch.nn.functional.rms_norm(torch.ones(1, 8), (8,)).shape == (1, 8)   # and usable again after


def test_forbid_sees_through_a_reloaded_module_and_a_hook_turned_off(tmp_path, monkeypatch):
    import importlib
    import sys

    (tmp_path / "course_norms.py").write_text("import numpy as np\n\n"
                                               "def rms(x, w):\n"
                                               "    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("course_norms")
    try:
        held = module.rms                         # a reference from before the reload
        importlib.reload(module)
        assert held is not module.rms
        for answer in (held, module.rms, lambda x, w: held(x, w)):
            v = check_function(answer, _rms, NORM_CASES, forbid=[module])
            assert not v and "course_norms.rms" in v.message, v.message
        v = check_function(lambda x, w: (sys.setprofile(None), _rms(x, w))[1], _rms, NORM_CASES, forbid=[module])
        assert not v and "turns off the checker's watch" in v.message, v.message
    finally:
        sys.modules.pop("course_norms", None)


def test_forbid_by_dotted_name_waits_for_the_package_and_then_refuses(monkeypatch):
    import sys
    import types

    def answer(x, w):
        return sys.modules["course_extra"].norm(x, w) if "course_extra" in sys.modules else _rms(x, w)
    assert check_function(answer, _rms, NORM_CASES, forbid=["course_extra.norm"])   # not loaded: nothing to refuse
    extra = types.ModuleType("course_extra")
    exec("def norm(x, w):\n    return x / ((x * x).mean(-1, keepdims=True) + 1e-6) ** 0.5 * w\n", vars(extra))
    monkeypatch.setitem(sys.modules, "course_extra", extra)
    v = check_function(answer, _rms, NORM_CASES, forbid=["course_extra.norm"])
    assert not v and "course_extra.norm" in v.message, v.message


def test_a_16_bit_answer_is_refused_against_a_wider_reference_not_let_through_at_its_precision():
    no_gain = lambda x, w: torch.from_numpy(_rms(x, np.ones_like(w)) + 1e-3).half()   # wrong by 1e-3
    v = check_function(no_gain, lambda x, w: _rms(x, np.ones_like(w)), NORM_CASES)
    assert not v and "returns float16" in v.message and "float64" in v.message, v.message
    assert check_function(lambda x, w: torch.from_numpy(_rms(x, w)).float(), _rms, NORM_CASES)
    assert check_function(lambda x: x.half() * 2, lambda x: x * 2, [(torch.ones(3).half(),)])  # 16-bit reference


# Chapter 16's exercise: the LoRA forward, W x + (alpha / r) B A x
def lora_solution(x, W, A, B, alpha):
    return x @ W.T + alpha / A.shape[0] * (x @ A.T) @ B.T


def test_check_lora_forward_passes_a_solution_and_refuses_a_stub():
    assert check_lora_forward(lora_solution)
    assert check_lora_forward(lambda x, W, A, B, alpha: torch.nn.functional.linear(x, W + alpha / len(A) * B @ A))

    def stub(x, W, A, B, alpha):
        raise NotImplementedError
    v = check_lora_forward(stub)
    assert not v and "not written yet" in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda x, W, A, B, alpha: x @ W.T + (x @ A.T) @ B.T, "it is missing"),
    (lambda x, W, A, B, alpha: x @ W.T + alpha * (x @ A.T) @ B.T, "not alpha"),
    (lambda x, W, A, B, alpha: x @ W.T + alpha / A.shape[0] * x @ (B @ A), "(B @ A).T"),
    (lambda x, W, A, B, alpha: x @ W.T, None),                            # the base alone: B is never zero here
])
def test_check_lora_forward_refuses_the_common_slips_and_names_them(wrong, hint):
    v = check_lora_forward(wrong)
    assert not v and "values differ" in v.message, v.message
    assert (hint in v.message) if hint else "Hint" not in v.message, v.message


def test_check_lora_forward_refuses_an_answer_that_calls_tinylm_lora():
    original = LoRALinear.forward
    def via_library(x, W, A, B, alpha):
        layer = LoRALinear(torch.nn.Linear(W.shape[1], W.shape[0], bias=False), LoRAConfig(rank=len(A), alpha=alpha))
        with torch.no_grad():
            layer.base.weight.copy_(W)
            layer.lora_A.copy_(A)
            layer.lora_B.copy_(B)
            return layer(x)
    v = check_lora_forward(via_library)
    assert not v and "calls tinylm.lora." in v.message and "yourself" in v.message, v.message

    def via_delta(x, W, A, B, alpha):     # the merge's delta_weight: also the library's
        layer = LoRALinear(torch.nn.Linear(W.shape[1], W.shape[0], bias=False), LoRAConfig(rank=len(A), alpha=alpha))
        with torch.no_grad():
            layer.lora_A.copy_(A)
            layer.lora_B.copy_(B)
            return x @ (W + layer.delta_weight()).T
    v = check_lora_forward(via_delta)
    assert not v and "calls tinylm.lora." in v.message, v.message

    assert LoRALinear.forward is original                                 # put back after the check


# Chapter 17's exercise: GRPO's group advantages, (r - group mean) / (group sample std + eps)
def advantages_solution(rewards):
    mean, std = rewards.mean(dim=1, keepdim=True), rewards.std(dim=1, keepdim=True)
    return (rewards - mean) / (std + 1e-4)


def advantages_zero_for_silent_groups(rewards):     # no eps, silent groups set to 0 by hand: right too
    mean, std = rewards.mean(dim=1, keepdim=True), rewards.std(dim=1, keepdim=True)
    return torch.where(std > 0, (rewards - mean) / std.clamp(min=1e-12), torch.zeros_like(rewards))


def test_check_group_advantages_passes_solutions_and_refuses_a_stub():
    assert check_group_advantages(advantages_solution)
    assert check_group_advantages(advantages_zero_for_silent_groups)

    def stub(rewards):
        raise NotImplementedError
    v = check_group_advantages(stub)
    assert not v and "not written yet" in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda r: (r - r.mean()) / (r.std() + 1e-4), "not the whole batch's"),
    (lambda r: (r - r.mean(dim=1, keepdim=True)) / (r.std() + 1e-4), "the std is each group's"),
    (lambda r: (r - r.mean()) / (r.std(dim=1, keepdim=True) + 1e-4), "the mean is each group's"),
    (lambda r: (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, unbiased=False, keepdim=True) + 1e-4),
     "not the population one"),
    (lambda r: (r - r.mean(dim=1, keepdim=True)) / r.std(dim=1, keepdim=True), "add eps"),
    (lambda r: r / (r.std(dim=1, keepdim=True) + 1e-4), "subtract the group's mean"),
    (lambda r: r - r.mean(dim=1, keepdim=True), None),                   # not divided at all: no named slip
])
def test_check_group_advantages_refuses_the_common_slips_and_names_them(wrong, hint):
    v = check_group_advantages(wrong)
    assert not v and ("values differ" in v.message or "nan" in v.message), v.message
    assert (hint in v.message) if hint else "Hint" not in v.message, v.message


def test_check_group_advantages_refuses_an_answer_that_calls_tinylm_grpo():
    from tinylm import grpo
    original = grpo.group_advantages.__code__
    v = check_group_advantages(lambda r: grpo.group_advantages(r))
    assert not v and "calls tinylm.grpo." in v.message and "yourself" in v.message, v.message
    v = check_group_advantages(grpo.group_advantages)                    # the library's function as the answer
    assert not v and "calls tinylm.grpo." in v.message, v.message
    assert grpo.group_advantages.__code__ is original                    # put back after the check


def test_cases_drawn_at_check_time_defeat_a_table_of_the_shown_ones():
    draw = lambda rng: [(rng.normal(size=(2, 8)), rng.normal(size=8)) for _ in range(3)]
    shown = draw(np.random.default_rng(0))
    table = {x.tobytes(): _rms(x, w) for x, w in shown}
    from_table = lambda x, w: table[x.tobytes()]
    assert check_function(from_table, _rms, shown)            # a fixed list can be memorised
    v = check_function(from_table, _rms, draw)
    assert not v and "KeyError" in v.message, v.message
    assert check_function(_rms, _rms, draw)


def test_the_cases_follow_the_answers_code_the_same_on_every_run():
    def half_wrong(x, w):                      # wrong where the first entry is negative: the draw decides
        return _rms(x, w) * (1 + (x[..., :1] < 0) * 1e-3)
    draw = lambda rng: [(rng.normal(size=(1, 8)), np.ones(8)) for _ in range(2)]
    first = check_function(half_wrong, _rms, draw).message
    assert all(check_function(half_wrong, _rms, draw).message == first for _ in range(3))   # deterministic
    assert case_seed(half_wrong) == case_seed(half_wrong) != case_seed(_rms)
    assert case_seed(lambda x: x + 1) != case_seed(lambda x: x + 2)      # a constant changes the draw
    wrapped = lambda x, w: half_wrong(x, w)
    assert check_function(wrapped, _rms, draw, seed_from=half_wrong).message == first


def test_a_table_refuses_a_column_without_a_header():
    from tinylm.book import table

    with pytest.raises(ValueError, match=r"column\(s\) \[0, 2\] have an empty header"):
        table(["", "mean", " "], [["a", "1", "2"]])
    shown = table(["measure", "mean"], [["a", "1"]])
    assert "<th>measure</th>" in shown._repr_html_() and "<th></th>" not in shown._repr_html_()
