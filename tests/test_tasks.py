# Synthetic tasks (tinylm.tasks): splits disjoint by construction, right answers, the encoding's loss mask.
# Run: .venv/bin/python -m pytest tests/test_tasks.py
from __future__ import annotations

import re
from collections import Counter

import pytest

from helpers import corpus_text
from tinylm._checks import IGNORE_INDEX
from tinylm.chat import encode_chat
from tinylm.tasks import (
    COUNTS, TASKS, Problem, addition, balanced_words, constant_share, encode_problem, end_id, letter_count,
    make_splits, most_repeated, multiplication, prompt_ids, task_rows, words,
)
from tinylm.tokenizer import BPETokenizer
from tinylm.train import pad_conversations


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(corpus_text(5000), 300)          # the course's chat template


@pytest.mark.parametrize("task", TASKS)
def test_splits_are_disjoint_by_key_and_sized_as_asked(task):
    splits = make_splits(task, n_train=1500, n_val=100, n_test=150, seed=1)
    assert {s: len(p) for s, p in splits.items()} == {"train": 1500, "val": 100, "test": 150}
    keys = {s: {p.key for p in problems} for s, problems in splits.items()}
    assert not keys["train"] & keys["val"] and not keys["train"] & keys["test"] and not keys["val"] & keys["test"]
    for split in ("val", "test"):                          # held-out problems are all different
        assert len(keys[split]) == len(splits[split])
    if not task.startswith("letter"):
        assert len(keys["train"]) == 1500
        for p in splits["test"]:                           # the key is the unordered pair: b + a is a + b
            a, b = map(int, re.findall(r"\d+", p.question))
            assert p.key == f"{min(a, b)}{'+' if task == 'addition' else '*'}{max(a, b)}"


@pytest.mark.parametrize("task", TASKS)
def test_the_test_split_depends_only_on_the_seed_and_its_size(task):
    small = make_splits(task, n_train=10, n_val=20, n_test=50, seed=0)
    large = make_splits(task, n_train=2000, n_val=20, n_test=50, seed=0)
    assert small["test"] == large["test"] and small["val"] == large["val"]
    assert make_splits(task, n_train=10, n_val=20, n_test=50, seed=0) == small     # deterministic
    assert make_splits(task, n_train=10, n_val=20, n_test=50, seed=1)["test"] != small["test"]


@pytest.mark.parametrize("task", TASKS)
def test_every_answer_is_right_and_ends_with_its_number(task):
    for p in make_splits(task, n_train=300, n_val=10, n_test=10)["train"]:
        numbers = [int(n) for n in re.findall(r"\d+", p.question)]
        if task == "addition":
            assert 100 <= min(numbers) and max(numbers) <= 999 and p.target == numbers[0] + numbers[1]
        elif task == "multiplication":
            assert 10 <= min(numbers) and max(numbers) <= 99 and p.target == numbers[0] * numbers[1]
        else:
            letter, word = re.fullmatch(r'How many times does the letter "(.)" appear in the word "(\w+)"\?',
                                        p.question).groups()
            assert p.target == sum(c == letter for c in word) and p.answer.startswith("-".join(word) + ": ")
        assert re.findall(r"\d+", p.answer)[-1] == str(p.target)


def test_problems_read_as_stated():
    assert addition(742, 696) == Problem("What is 742 + 696?", "742 + 696 = 1438", 1438, "696+742")
    assert multiplication(64, 50).answer == "64 * 50 = 3200"
    assert letter_count("strawberry", "r").answer == 's-t-r-a-w-b-e-r-r-y: "r" appears 3 times'
    assert letter_count("banana", "b").answer.endswith('"b" appears 1 time')
    assert letter_count("banana", "z").target == 0
    with pytest.raises(ValueError, match="one letter"):
        letter_count("banana", "an")


def test_letter_count_words_and_letters():
    pool = words()
    assert len(pool) == 1943 and list(pool) == sorted(set(pool))
    assert all(w.isalpha() and w.islower() and 4 <= len(w) <= 12 for w in pool)
    train = make_splits("letter_count", n_train=2000, n_val=100, n_test=200)["train"]
    assert len({p.key for p in train}) == len(pool) - 300      # every remaining word is used, some twice
    absent = sum(p.target == 0 for p in train) / len(train)
    assert 0.15 < absent < 0.25                                 # about one in five asks for a missing letter


def test_balanced_words_add_the_plays():
    pool = balanced_words()
    assert len(pool) == 19342 and list(pool) == sorted(set(pool)) and set(words()) <= set(pool)
    assert all(w.isalpha() and w.islower() and 4 <= len(w) <= 12 for w in pool)
    assert sum(most_repeated(w) >= 3 for w in pool) == 1702 and most_repeated("banana") == 3


def test_the_unbalanced_task_lets_always_1_win():
    # why letter_balanced exists: on letter_count the constant answer 1 is right most of the time
    answer, share = constant_share(make_splits("letter_count")["test"])
    assert answer == 1 and share > 0.6


@pytest.mark.parametrize("n_test", [200, 37])
def test_letter_counts_are_balanced_so_no_constant_answer_wins(n_test):
    splits = make_splits("letter_balanced", n_train=2000, n_val=100, n_test=n_test)
    for split, problems in splits.items():
        counts = Counter(min(p.target, COUNTS[-1]) for p in problems)     # 3 stands for 3 or more
        assert set(counts) == set(COUNTS)
        assert max(counts.values()) - min(counts.values()) <= 1, (split, counts)
        answer, share = constant_share(problems)
        assert share <= -(-len(problems) // 4) / len(problems), (split, answer, share)
    test = splits["test"]
    assert constant_share(test) == (0, 0.25) if n_test == 200 else constant_share(test)[1] == 10 / 37
    assert sum(p.target == 1 for p in test) == -(-n_test // 4) or sum(p.target == 1 for p in test) == n_test // 4
    # the order is shuffled: the counts do not cycle 0, 1, 2, 3 through the split
    assert [min(p.target, 3) for p in test[:8]] != [0, 1, 2, 3, 0, 1, 2, 3]


def test_constant_share_names_the_best_constant_answer():
    ps = [letter_count("banana", c) for c in "bnaaz"]                 # targets 1, 2, 3, 3, 0
    assert constant_share(ps) == (3, 0.4)
    with pytest.raises(ValueError, match="empty"):
        constant_share([])


@pytest.mark.parametrize("kwargs, message", [
    (dict(task="subtraction"), "task must be one of"),
    (dict(task="multiplication", n_train=4000), "4,095 distinct operand pairs"),
    (dict(task="letter_count", n_test=1900), "1,943 words"),
    (dict(task="letter_balanced", n_test=7000), "1,702 of them with a letter 3 or more times"),
    (dict(task="addition", n_val=0), "n_val must be a positive int"),
    (dict(task="addition", seed=-1), "seed must be an int >= 0"),
])
def test_bad_split_requests_say_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_splits(**kwargs)


def test_encoding_supervises_only_the_answer_and_the_end_token(tok):
    p = addition(742, 696)
    ids, labels = encode_problem(tok, p)
    prompt = prompt_ids(tok, p)
    answer = tok.encode("742 + 696 = 1438")
    assert ids == prompt + answer + [tok.special_ids["<eos>"]] and end_id(tok) == tok.special_ids["<eos>"]
    assert labels == [IGNORE_INDEX] * len(prompt) + answer + [tok.special_ids["<eos>"]]
    # the prompt is what the chat template gives up to the reply, so training sees what generation sees
    full, _ = encode_chat(tok, [{"role": "user", "content": p.question}, {"role": "assistant", "content": p.answer}])
    assert ids == full and prompt[-1] == tok.special_ids["<|assistant|>"]


def test_task_rows_feed_the_training_loop(tok):
    problems = make_splits("addition", n_train=8, n_val=2, n_test=2)["train"]
    rows = task_rows(tok, problems)
    x, y = rows.batch([0, 1])
    want = pad_conversations([encode_problem(tok, p) for p in problems[:2]], pad_id=tok.special_ids["<eos>"])
    assert x.tolist() == want[0].tolist() and y.tolist() == want[1].tolist()
    supervised = [t for t in y[0].tolist() if t != IGNORE_INDEX]
    assert tok.decode(supervised) == problems[0].answer + "<eos>"
    with pytest.raises(ValueError, match="empty"):
        task_rows(tok, [])
    with pytest.raises(ValueError, match="no chat template"):
        prompt_ids(BPETokenizer.train(corpus_text(2000), 280, specials=()), problems[0])
