# The book's quizzes and exercise checker. Run: .venv/bin/python -m pytest tests/test_book.py
import re

import numpy as np
import pytest
import torch

from tinylm.book import Question, check_function, quiz


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
