"""Synthetic tasks whose answers can be checked: addition, multiplication, counting a letter in a word.

    addition        What is 742 + 696?                                  742 + 696 = 1438
    multiplication  What is 64 * 50?                                    64 * 50 = 3200
    letter_count    How many times does the letter "r" appear in        s-t-r-a-w-b-e-r-r-y: "r" appears 3 times
                    the word "strawberry"?

Problems are made by code from a seed, as many as asked, and the splits share nothing by construction: no
operand pair (in either order) and no word is in two of train, val and test (`Problem.key`). The test split
is drawn first, so it depends only on the seed and its own size: a larger training set never changes it.
Words come from the course's own corpus (`tinylm.corpus`, stories and conversations): 1,943 distinct
lowercase words of 4 to 12 letters. SmolLM2 reads digits one by one but a word as a few pieces, so
counting letters means knowing how each piece is spelled; the answer spells the word out first.

Every answer ends with its number; the evaluator reads the last integer of a reply
(`tinylm.evaluate.parse_answer`). Encoded for a chat model (`encode_problem`), the question goes through the
tokenizer's chat template up to where the reply starts, exactly what generation is given; then come the
answer and the template's end token, which are the only supervised positions:

    ids     <|im_start|>system\\n...<|im_end|>\\n<|im_start|>user\\nWhat is 742 + 696?<|im_end|>\\n
            <|im_start|>assistant\\n 7 4 2 ␣+ ␣ 6 9 6 ␣= ␣ 1 4 3 8 <|im_end|>
    labels  -100 ...                                    -100 7 4 2 ␣+ ␣ 6 9 6 ␣= ␣ 1 4 3 8 <|im_end|>
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache

from . import corpus
from ._checks import IGNORE_INDEX, check_int, check_one_of
from .tokenizer import BPETokenizer
from .train.loop import ChatRows

TASKS = ("addition", "multiplication", "letter_count")
SPLITS = ("train", "val", "test")
OPERANDS = {"addition": (100, 999), "multiplication": (10, 99)}   # three-digit sums, two-digit products
ABSENT_LETTER = 0.2     # share of letter-count problems that ask for a letter the word lacks (answer 0)
WORD = re.compile(r"(?<![\w'-])[a-z]{4,12}(?![\w'-])")   # a lowercase word of 4 to 12 letters, standing alone


@dataclass(frozen=True)
class Problem:
    """One problem: what the user asks, the reply to learn, the right number and what splits never share."""

    question: str   # the user's message
    answer: str     # the assistant's reply to train on; it ends with the number
    target: int     # the right answer
    key: str        # the operand pair ("64*50", smaller first) or the word: no two splits share one


def addition(a: int, b: int) -> Problem:
    return Problem(f"What is {a} + {b}?", f"{a} + {b} = {a + b}", a + b, f"{min(a, b)}+{max(a, b)}")


def multiplication(a: int, b: int) -> Problem:
    return Problem(f"What is {a} * {b}?", f"{a} * {b} = {a * b}", a * b, f"{min(a, b)}*{max(a, b)}")


def letter_count(word: str, letter: str) -> Problem:
    if not (isinstance(word, str) and word.isalpha() and isinstance(letter, str) and len(letter) == 1):
        raise ValueError(f"letter_count needs a word of letters and one letter, got {word!r} and {letter!r}")
    n = word.count(letter)
    return Problem(f'How many times does the letter "{letter}" appear in the word "{word}"?',
                   f'{"-".join(word)}: "{letter}" appears {n} time{"" if n == 1 else "s"}', n, word)


@lru_cache(maxsize=1)
def words() -> tuple[str, ...]:
    """The letter-count task's words, sorted: every distinct lowercase word of 4 to 12 letters in the
    course's corpus (both splits of the stories and of the conversations)."""
    texts = [s for split in corpus.SPLITS for s in corpus.stories(split)]
    texts += [t["content"] for split in corpus.SPLITS for c in corpus.conversations(split) for t in c["messages"]]
    return tuple(sorted(set(WORD.findall("\n".join(texts)))))


def make_splits(task: str, n_train: int = 5000, n_val: int = 200, n_test: int = 200,
                seed: int = 0) -> dict[str, list[Problem]]:
    """{"train": [...], "val": [...], "test": [...]}: problems of task drawn from seed, disjoint by key.

    Arithmetic: distinct operand pairs drawn uniformly (test first, then val, then train), each asked in a
    random order. Letter counting: the words shuffled, the first n_test for test, the next n_val for val,
    the rest for train (n_train problems cycle through them, a new letter each time: a word may come back);
    one problem in five asks for a letter the word lacks.
    """
    check_one_of("task", task, TASKS)
    sizes = {s: check_int(f"n_{s}", n, low=1) for s, n in zip(SPLITS, (n_train, n_val, n_test))}
    rng = random.Random(f"tinylm.tasks {task} {check_int('seed', seed, low=0)}")   # str seeds: stable everywhere
    if task == "letter_count":
        return _letter_splits(sizes, rng)
    low, high = OPERANDS[task]
    span = high - low + 1
    available = span * (span + 1) // 2                                # unordered pairs, a = b included
    if sum(sizes.values()) > available:
        raise ValueError(f"{task} has {available:,} distinct operand pairs, fewer than the "
                         f"{sum(sizes.values()):,} problems asked for; ask for fewer")
    make = addition if task == "addition" else multiplication
    seen: set[tuple[int, int]] = set()
    out: dict[str, list[Problem]] = {}
    for split in ("test", "val", "train"):
        problems = []
        while len(problems) < sizes[split]:
            a, b = rng.randint(low, high), rng.randint(low, high)
            if (min(a, b), max(a, b)) not in seen:
                seen.add((min(a, b), max(a, b)))
                problems.append(make(a, b))
        out[split] = problems
    return {s: out[s] for s in SPLITS}


def _letter_splits(sizes: dict[str, int], rng: random.Random) -> dict[str, list[Problem]]:
    pool = list(words())
    if sizes["test"] + sizes["val"] >= len(pool):
        raise ValueError(f"letter_count has {len(pool):,} words; n_test + n_val must leave some for training")
    rng.shuffle(pool)
    cut = sizes["test"] + sizes["val"]
    groups = {"test": pool[: sizes["test"]], "val": pool[sizes["test"] : cut], "train": pool[cut:]}

    def ask(word: str) -> Problem:
        absent = sorted(set("abcdefghijklmnopqrstuvwxyz") - set(word))
        letter = rng.choice(absent) if rng.random() < ABSENT_LETTER else rng.choice(word)  # by position:
        return letter_count(word, letter)                                                # repeats likelier

    drawn = {s: [ask(groups[s][i % len(groups[s])]) for i in range(sizes[s])] for s in ("test", "val", "train")}
    return {s: drawn[s] for s in SPLITS}


# ---------------------------------------------------------------------------------------------
# Encoding for a chat model
# ---------------------------------------------------------------------------------------------
def prompt_ids(tokenizer: BPETokenizer, problem: Problem) -> list[int]:
    """The question in the tokenizer's chat template, ending where the reply starts: what a model continues."""
    return tokenizer.encode_chat([{"role": "user", "content": problem.question}])


def end_id(tokenizer: BPETokenizer) -> int:
    """The id that ends a reply in the tokenizer's chat template (ChatML's <|im_end|>, the course's <eos>)."""
    template = tokenizer._template()
    return tokenizer.special_ids[template.stop[0]]


def encode_problem(tokenizer: BPETokenizer, problem: Problem) -> tuple[list[int], list[int]]:
    """(ids, labels) of prompt + answer + end token, labels -100 on the prompt: a row for `ChatRows`."""
    prompt = prompt_ids(tokenizer, problem)
    answer = tokenizer.encode(problem.answer) + [end_id(tokenizer)]
    return prompt + answer, [IGNORE_INDEX] * len(prompt) + answer


def task_rows(tokenizer: BPETokenizer, problems: list[Problem]) -> ChatRows:
    """The problems as ChatRows (one per batch row, right-padded with the end token): what `train` takes."""
    if not problems:
        raise ValueError("problems is empty: make some with make_splits")
    return ChatRows([encode_problem(tokenizer, p) for p in problems], pad_id=end_id(tokenizer))
