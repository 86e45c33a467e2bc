# The evaluator (tinylm.evaluate): the answer-parsing rule, Wilson intervals, batched greedy replies, the
# forgetting check. Run: .venv/bin/python -m pytest tests/test_evaluate.py   (add -m slow for SmolLM2)
from __future__ import annotations

import math

import pytest
import torch

from helpers import corpus_text, random_model
from tinylm import Config
from tinylm.chat import ChatSession
from tinylm.evaluate import (
    CHAT_PROMPTS, TaskResult, english_ids, english_perplexity, evaluate_task, forgetting, greedy_replies,
    parse_answer, wilson_interval,
)
from tinylm.lora import LoRAConfig, add_lora, lora_layers
from tinylm.tasks import addition, make_splits, prompt_ids
from tinylm.tokenizer import BPETokenizer

CFG = Config(vocab_size=300, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=160)


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(corpus_text(5000), 300)


@pytest.mark.parametrize("reply, answer", [
    ("742 + 696 = 1438", 1438),                 # the trained format: the last integer is the sum
    ("742 + 696 = 1438.", 1438),
    ("The answer is 1,438", 1438),              # commas between groups of three
    ("12,345,678 and then 7", 7),
    ("1,43", 43),                               # not a group of three: two integers
    ("s-t-r-a-w-b-e-r-r-y: \"r\" appears 3 times", 3),
    ("It is -5", 5), ("about 2.5", 5),          # no signs, no decimals
    ("", None), ("none of them", None), ("someone said so", None),   # "one" inside a word is no number
    ("1438 is 742 + 696", 696),                 # the last integer, even when the sum came first
    ("three", 3), ('"r" appears Three times', 3), ("TWENTY", 20), ("zero", 0),   # number words, any case
    ('"e" appears once', 1), ("twice", 2), ("4, or rather five", 5), ("one, no, 2", 2),
    ("twenty-one", 1),                          # only zero to twenty: "twenty-one" is twenty, then one
])
def test_the_answer_is_the_last_number(reply, answer):
    assert parse_answer(reply) == answer


def test_wilson_interval_matches_its_formula_and_known_values():
    z = 1.959963984540054
    assert wilson_interval(0, 100) == (0.0, pytest.approx(z * z / (100 + z * z)))    # k = 0: [0, z²/(n + z²)]
    low, high = wilson_interval(100, 100)
    assert high == 1.0 and low == pytest.approx(100 / (100 + z * z))
    low, high = wilson_interval(4, 20)         # p = 0.2: center (p + z²/2n) / (1 + z²/n)
    center = (0.2 + z * z / 40) / (1 + z * z / 20)
    half = z / (1 + z * z / 20) * math.sqrt(0.2 * 0.8 / 20 + z * z / 1600)
    assert (low, high) == (pytest.approx(center - half), pytest.approx(center + half))
    assert (round(low, 4), round(high, 4)) == (0.0807, 0.4160)
    assert wilson_interval(93, 100) == (pytest.approx(0.8625, abs=1e-4), pytest.approx(0.9657, abs=1e-4))
    for bad, message in [((5, 4), r"correct must be an int in \[0, n=4\]"), ((0, 0), "n must be a positive int")]:
        with pytest.raises(ValueError, match=message):
            wilson_interval(*bad)


def test_task_result_counts_exact_matches():
    problems = [addition(100, 200), addition(123, 877), addition(500, 500)]
    result = TaskResult(problems, ["100 + 200 = 300", "123 + 877 = 999", "no idea"])
    assert result.answers == [300, 999, None] and result.right == [True, False, False]
    assert (result.correct, result.n) == (1, 3) and result.accuracy == pytest.approx(1 / 3)
    assert result.summary().startswith("1/3 = 33.3% (95% Wilson interval 6.1% to 79.2%)")


def test_batched_greedy_replies_equal_one_at_a_time(tok):
    model = random_model(CFG, std=0.3)
    problems = make_splits("letter_count", n_train=1, n_val=1, n_test=5)["test"] + [addition(742, 696)]
    prompts = [prompt_ids(tok, p) for p in problems]
    assert len({len(p) for p in prompts}) > 1                       # lengths differ: left padding is used
    batched = greedy_replies(model, tok, prompts, max_new_tokens=10, batch_size=4)
    for p, reply in zip(problems, batched):
        alone = ChatSession(model, tok, max_new_tokens=10, temperature=0).ask(p.question)
        assert reply == alone
    result = evaluate_task(model, tok, problems, max_new_tokens=10, batch_size=4)
    assert result.replies == batched and result.n == 6
    with pytest.raises(ValueError, match="Problem"):
        evaluate_task(model, tok, [])


def test_english_ids_start_like_the_whole_text_and_forgetting_compares_base_and_adapter(tok):
    from pydoc_data.topics import topics

    ids = english_ids(tok, 200)
    whole = tok.encode("\n".join(topics.values())[:20_000])        # far more text than 201 tokens need
    assert ids.tolist() == whole[:201]
    model = random_model(CFG, std=0.1)
    add_lora(model, LoRAConfig(rank=2, targets="q_proj"))
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.normal_(0, 0.5)                             # an adapter that changes the model
    report = forgetting(model, tok, n_tokens=128, window=64, max_new_tokens=6)
    assert report["ppl"] == pytest.approx(english_perplexity(model, tok, 128, 64))
    assert report["ppl_ratio"] == pytest.approx(report["ppl"] / report["ppl_base"]) and report["ppl_ratio"] != 1
    assert [c["question"] for c in report["chat"]] == list(CHAT_PROMPTS)
    assert all(isinstance(c["base"], str) and isinstance(c["adapted"], str) for c in report["chat"])


@pytest.mark.slow
def test_smollm2_english_perplexity_is_chapter_14s_text():
    """The forgetting check reads the same 1,024 tokens chapter 15 compares weight formats on."""
    from pydoc_data.topics import topics

    from tinylm.pretrained import load_gguf, smollm2_gguf_path

    model, tok = load_gguf(smollm2_gguf_path(), progress=False, max_seq_len=1024)
    assert english_ids(tok).tolist() == tok.encode("\n".join(topics.values()))[:1025]
    ppl = english_perplexity(model, tok)
    assert 5 < ppl < 30, ppl                                         # a good model on English prose
    problem = addition(742, 696)
    reply = evaluate_task(model, tok, [problem, addition(123, 898)], max_new_tokens=24).replies
    assert all(r and "<|im_end|>" not in r for r in reply)


def test_a_reply_with_thousands_of_digits_reads_as_no_answer_not_a_crash():
    """Python refuses to read an int of more than 4,300 digits (ValueError); a model can write one."""
    from tinylm.evaluate import MAX_DIGITS

    assert parse_answer("the sum is " + "7" * 5000) is None
    assert parse_answer("1" * (MAX_DIGITS + 1) + " or 12") == 12           # the last integer still counts
    assert parse_answer("9" * MAX_DIGITS) == int("9" * MAX_DIGITS)
