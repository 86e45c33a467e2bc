"""Synthetic tasks whose answers can be checked: addition, multiplication, counting a letter in a word.

    addition        What is 742 + 696?                                  742 + 696 = 1438
    multiplication  What is 64 * 50?                                    64 * 50 = 3200
    letter_count    How many times does the letter "r" appear in        s-t-r-a-w-b-e-r-r-y: "r" appears 3 times
                    the word "strawberry"?
    letter_balanced the same question, counts balanced (below)

Problems are made by code from a seed, as many as asked, and the splits share nothing by construction: no
operand pair (in either order) and no word is in two of train, val and test (`Problem.key`). The test split
is drawn first, so it depends only on the seed and its own size: a larger training set never changes it.
Words come from the course's own corpus (`tinylm.corpus`, stories and conversations): 1,943 distinct
lowercase words of 4 to 12 letters. SmolLM2 reads digits one by one but a word as a few pieces, so
counting letters means knowing how each piece is spelled; the answer spells the word out first.

letter_count asks, four times in five, for a letter the word holds, and most letters of a word appear once:
a model that always answers "1" is right on about two thirds of its problems (the shipped GRPO run learned
just that). letter_balanced fixes it: in every split a quarter of the problems ask for a letter the word
lacks (0), a quarter for one it holds once, a quarter twice and a quarter three times or more, so no constant
answer is right on more than a quarter of them (`constant_share`). It needs more words with a letter three
times than the stories hold, so its words come from the plays too (`balanced_words`: 19,342 words, 1,702 of
them with a letter three times or more).

Every answer ends with its number; the evaluator reads the last number of a reply
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

TASKS = ("addition", "multiplication", "letter_count", "letter_balanced")
SPLITS = ("train", "val", "test")
OPERANDS = {"addition": (100, 999), "multiplication": (10, 99)}   # three-digit sums, two-digit products
ABSENT_LETTER = 0.2     # share of letter-count problems that ask for a letter the word lacks (answer 0)
ALPHABET = frozenset("abcdefghijklmnopqrstuvwxyz")
COUNTS = (0, 1, 2, 3)   # letter_balanced's counts, a quarter of the problems each; 3 stands for 3 or more
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


@lru_cache(maxsize=1)
def balanced_words() -> tuple[str, ...]:
    """letter_balanced's words, sorted: `words()` and every distinct lowercase word of 4 to 12 letters in the
    Shakespeare plays (every split): enough words with a letter three times or more for a quarter of each split."""
    plays = "\n".join(corpus.shakespeare_text(split) for split in ("train", "val", "test"))
    return tuple(sorted(set(words()) | set(WORD.findall(plays))))


def most_repeated(word: str) -> int:
    """How many times the word's most frequent letter appears in it ("banana": 3)."""
    return max(word.count(c) for c in set(word))


def constant_share(problems: list[Problem]) -> tuple[int, float]:
    """(answer, share): the constant answer right on the most problems, and on what share of them."""
    if not problems:
        raise ValueError("problems is empty: make some with make_splits")
    targets = [p.target for p in problems]
    best = max(sorted(set(targets)), key=targets.count)
    return best, targets.count(best) / len(targets)


def make_splits(task: str, n_train: int = 5000, n_val: int = 200, n_test: int = 200,
                seed: int = 0) -> dict[str, list[Problem]]:
    """{"train": [...], "val": [...], "test": [...]}: problems of task drawn from seed, disjoint by key.

    Arithmetic: distinct operand pairs drawn uniformly (test first, then val, then train), each asked in a
    random order. Letter counting: the words shuffled, the first n_test for test, the next n_val for val,
    the rest for train (n_train problems cycle through them, a new letter each time: a word may come back);
    one problem in five asks for a letter the word lacks. letter_balanced: see `_balanced_letter_splits`.
    """
    check_one_of("task", task, TASKS)
    sizes = {s: check_int(f"n_{s}", n, low=1) for s, n in zip(SPLITS, (n_train, n_val, n_test))}
    rng = random.Random(f"tinylm.tasks {task} {check_int('seed', seed, low=0)}")   # str seeds: stable everywhere
    if task == "letter_count":
        return _letter_splits(sizes, rng)
    if task == "letter_balanced":
        return _balanced_letter_splits(sizes, rng)
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
        absent = sorted(ALPHABET - set(word))
        letter = rng.choice(absent) if rng.random() < ABSENT_LETTER else rng.choice(word)  # by position:
        return letter_count(word, letter)                                                # repeats likelier

    drawn = {s: [ask(groups[s][i % len(groups[s])]) for i in range(sizes[s])] for s in ("test", "val", "train")}
    return {s: drawn[s] for s in SPLITS}


def _balanced_letter_splits(sizes: dict[str, int], rng: random.Random) -> dict[str, list[Problem]]:
    """Deal the words, test first, then val, then train. A word can be asked about a letter it lacks (0),
    holds once (1, most words), twice (2) or three times or more (3); a held-out split takes a new word
    for every problem, a quarter of them for each count, in a shuffled order, so no word is asked twice.
    Train gets every word left and cycles through those that fit each count. The letter is drawn among the
    word's letters with that count."""
    pool = list(balanced_words())
    rng.shuffle(pool)

    def letters(word: str, count: int) -> list[str]:
        if count == 0:
            return sorted(ALPHABET - set(word))
        if count == COUNTS[-1]:                                           # 3 stands for 3 or more
            return sorted(c for c in set(word) if word.count(c) >= count)
        return sorted(c for c in set(word) if word.count(c) == count)

    fits = {c: [w for w in pool if letters(w, c)] for c in COUNTS}        # the words that can be asked so
    taken: set[str] = set()
    out: dict[str, list[Problem]] = {}
    for split in ("test", "val", "train"):
        order = [COUNTS[i % len(COUNTS)] for i in range(sizes[split])]
        rng.shuffle(order)
        need = {c: order.count(c) for c in COUNTS}
        if split == "train":
            mine = {c: [w for w in fits[c] if w not in taken] for c in COUNTS}
        else:
            mine = {}
            for c in sorted(COUNTS, key=lambda c: len(fits[c])):          # the scarcest count first
                mine[c] = [w for w in fits[c] if w not in taken][: need[c]]
                taken.update(mine[c])
        short = [c for c in COUNTS if need[c] and len(mine[c]) < (1 if split == "train" else need[c])]
        if short:
            raise ValueError(f"letter_balanced has {len(pool):,} words, {len(fits[COUNTS[-1]]):,} of them with a "
                             f"letter 3 or more times: too few left for {split} (count {short[0]}); ask for "
                             f"fewer test and val problems")
        used = dict.fromkeys(COUNTS, 0)
        problems = []
        for c in order:
            word = mine[c][used[c] % len(mine[c])]
            used[c] += 1
            problems.append(letter_count(word, rng.choice(letters(word, c))))
        out[split] = problems
    return {s: out[s] for s in SPLITS}


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
