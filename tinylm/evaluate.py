"""Evaluation that counts: exact-match accuracy with a Wilson interval over greedy answers, and a forgetting check.

    result = evaluate_task(model, tok, splits["test"])     # batched greedy replies, left padding
    result.accuracy, result.interval                       # 0.93, (0.89, 0.96): 95% Wilson interval
    forgetting(model, tok)                                 # perplexity on English prose, adapter off and on

The answer of a reply is its last number (`parse_answer`): a run of digits, commas allowed between groups
of three ("1,438" reads 1438), or a number word from zero to twenty, "once" or "twice", in any case ("it
appears three times" reads 3, "Twice" 2). Signs and decimals are not read ("-5" reads 5, "2.5" reads 5). A
reply with no number is wrong, as is one whose last integer has more than MAX_DIGITS digits (a model can
write one; Python reads at most 4,300). Exact match: that number equals the target.

Wilson's score interval (Wilson, 1927) for k right out of n, z = 1.96 for 95%:

    center = (p + z²/2n) / (1 + z²/n)      half = z / (1 + z²/n) · sqrt(p(1 - p)/n + z²/4n²)      p = k/n

Unlike p ± z·sqrt(p(1-p)/n) it stays inside [0, 1] and is not zero-width at 0 of 100 or 100 of 100.

The forgetting check scores text that is not the task: the standard library's documentation topics
(`pydoc_data.topics`, English prose every Python ships, as chapter 15 uses), by perplexity over fixed
windows; and a few fixed chat questions answered greedily, before and after.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from ._checks import check_int, check_number
from .generate import generate, left_pad
from .lora import adapter_disabled
from .model import TinyLM
from .tasks import Problem, end_id, prompt_ids
from .tokenizer import BPETokenizer
from .train.loop import evaluate as mean_loss

INTEGER = re.compile(r"\d{1,3}(?:,\d{3})+(?!\d)|\d+")   # 1,438 or 1438
NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())} | {"once": 1, "twice": 2}
NUMBER = re.compile(INTEGER.pattern + r"|\b(?:" + "|".join(NUMBER_WORDS) + r")\b", re.IGNORECASE)
MAX_DIGITS = 1000   # a longer integer is no answer (None): no task asks for one, and Python reads at most 4,300
Z95 = 1.959963984540054                                 # the 97.5% quantile of the standard normal
CHAT_PROMPTS = ("What is the capital of France?", "Give me two tips for sleeping well.",
                "Write one sentence about the sea.")


def parse_answer(reply: str) -> int | None:
    """The last number in reply, digits or a number word (see the module's rule), or None when it holds
    none, or when that number is an integer of more than MAX_DIGITS digits."""
    if not isinstance(reply, str):
        raise ValueError(f"reply must be a str, got {type(reply).__name__}")
    found = NUMBER.findall(reply)
    if not found:
        return None
    last = found[-1].lower()
    if last in NUMBER_WORDS:
        return NUMBER_WORDS[last]
    digits = last.replace(",", "")
    return int(digits) if len(digits) <= MAX_DIGITS else None


def wilson_interval(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) of Wilson's score interval for correct successes out of n trials (z = 1.96: 95%)."""
    n = check_int("n", n, low=1)
    correct = check_int("correct", correct, 0, n, span=f"in [0, n={n}]")
    z = check_number("z", z, 0, low_open=True)
    p = correct / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if correct == 0 else max(0.0, center - half)       # exactly 0 and 1 at the ends (no rounding)
    high = 1.0 if correct == n else min(1.0, center + half)
    return low, high


@dataclass
class TaskResult:
    """Exact-match results on a list of problems: each reply as generated and the integer read from it."""

    problems: list[Problem]
    replies: list[str]
    answers: list[int | None] = field(init=False)

    def __post_init__(self) -> None:
        self.answers = [parse_answer(r) for r in self.replies]

    @property
    def right(self) -> list[bool]:
        return [is_right(p, r) for p, r in zip(self.problems, self.replies)]

    @property
    def correct(self) -> int:
        return sum(self.right)

    @property
    def n(self) -> int:
        return len(self.problems)

    @property
    def accuracy(self) -> float:
        return self.correct / self.n

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.n)

    def summary(self) -> str:
        low, high = self.interval
        return f"{self.correct}/{self.n} = {self.accuracy:.1%} (95% Wilson interval {low:.1%} to {high:.1%})"


def reply_ids(model: TinyLM, tokenizer: BPETokenizer, prompts: list[list[int]], max_new_tokens: int = 32,
              batch_size: int = 32, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
              generator: torch.Generator | None = None) -> list[list[int]]:
    """Each prompt's reply ids (prompts end where the reply starts), up to and including the template's first
    stop token (none if the reply ran out of max_new_tokens first). temperature 0 is greedy; otherwise one
    sample per prompt from `tinylm.generate` (temperature, top_k, top_p, a seeded generator: reproducible).
    Prompts go in batches of similar lengths, left-padded (`tinylm.generate.left_pad`)."""
    check_int("max_new_tokens", max_new_tokens, low=1)
    check_int("batch_size", batch_size, low=1)
    template = tokenizer._template()
    stop_ids = {tokenizer.special_ids[s] for s in template.stop}
    eos = end_id(tokenizer)
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))    # little padding in each batch
    replies: list[list[int]] = [[] for _ in prompts]
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        idx, mask = left_pad([prompts[i] for i in rows], pad_id=eos, device=device)          # (B, T) each
        out = generate(model, idx, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                       generator=generator, eos_id=eos, attention_mask=mask)
        for b, i in enumerate(rows):
            new = out[b, idx.shape[1]:].tolist()
            cut = next((t + 1 for t, token in enumerate(new) if token in stop_ids), len(new))
            replies[i] = new[:cut]
    return replies


def reply_text(tokenizer: BPETokenizer, ids: list[int]) -> str:
    """A reply's text: its ids without the stop token that ends it, decoded and stripped."""
    stop_ids = {tokenizer.special_ids[s] for s in tokenizer._template().stop}
    return tokenizer.decode(ids[:-1] if ids and ids[-1] in stop_ids else ids).strip()


def greedy_replies(model: TinyLM, tokenizer: BPETokenizer, prompts: list[list[int]], max_new_tokens: int = 32,
                   batch_size: int = 32) -> list[str]:
    """The greedy reply to each prompt (ids ending where the reply starts), cut at the template's first stop
    token (`reply_ids` with temperature 0, decoded)."""
    return [reply_text(tokenizer, r) for r in reply_ids(model, tokenizer, prompts, max_new_tokens, batch_size)]


def is_right(problem: Problem, reply: str) -> bool:
    """The checker: the reply's last number (`parse_answer`) is the problem's target."""
    return parse_answer(reply) == problem.target


def evaluate_task(model: TinyLM, tokenizer: BPETokenizer, problems: list[Problem], max_new_tokens: int = 32,
                  batch_size: int = 32) -> TaskResult:
    """Exact-match accuracy of the model's greedy replies to problems (asked in the chat template)."""
    if not problems or not all(isinstance(p, Problem) for p in problems):
        raise ValueError("problems must be a non-empty list of tinylm.tasks.Problem (make_splits makes them)")
    prompts = [prompt_ids(tokenizer, p) for p in problems]
    return TaskResult(list(problems), greedy_replies(model, tokenizer, prompts, max_new_tokens, batch_size))


# ---------------------------------------------------------------------------------------------
# Forgetting
# ---------------------------------------------------------------------------------------------
def english_ids(tokenizer: BPETokenizer, n_tokens: int = 1024) -> torch.Tensor:
    """(n_tokens + 1,) ids of the standard library's documentation topics: English prose, not any task."""
    from pydoc_data.topics import topics

    check_int("n_tokens", n_tokens, low=2)
    text = "\n".join(topics.values())
    chars = 8 * n_tokens
    while True:   # encode a prefix only: the ids it starts with are those of the whole text, but the last few
        ids = tokenizer.encode(text[:chars])
        if len(ids) > n_tokens + 64 or chars >= len(text):
            break
        chars *= 2
    if len(ids) < n_tokens + 1:
        raise ValueError(f"the documentation topics hold {len(ids):,} tokens, fewer than n_tokens + 1; ask for fewer")
    return torch.tensor(ids[: n_tokens + 1], dtype=torch.long)


def english_perplexity(model: TinyLM, tokenizer: BPETokenizer, n_tokens: int = 1024, window: int = 512) -> float:
    """Perplexity on the first n_tokens of `english_ids`, in consecutive windows of `window` tokens."""
    check_int("window", window, 1, n_tokens, span=f"in [1, n_tokens={n_tokens}]")
    ids = english_ids(tokenizer, n_tokens).to(next(model.parameters()).device)
    return mean_loss(model, ids, batch_size=1, seq_len=window)[1]


def chat_answers(model: TinyLM, tokenizer: BPETokenizer, questions: tuple[str, ...] = CHAT_PROMPTS,
                 max_new_tokens: int = 48) -> list[str]:
    """Greedy replies to fixed chat questions (one turn each), to read before and after fine-tuning."""
    prompts = [tokenizer.encode_chat([{"role": "user", "content": q}]) for q in questions]
    return greedy_replies(model, tokenizer, prompts, max_new_tokens)


def forgetting(model: TinyLM, tokenizer: BPETokenizer, n_tokens: int = 1024, window: int = 512,
               max_new_tokens: int = 48) -> dict:
    """The base model (adapter off) against the adapted one: English perplexity of each and their ratio,
    and each one's replies to CHAT_PROMPTS. The model must carry a LoRA adapter (`tinylm.lora`)."""
    with adapter_disabled(model):
        ppl_base = english_perplexity(model, tokenizer, n_tokens, window)
        before = chat_answers(model, tokenizer, max_new_tokens=max_new_tokens)
    ppl = english_perplexity(model, tokenizer, n_tokens, window)
    after = chat_answers(model, tokenizer, max_new_tokens=max_new_tokens)
    return {"ppl_base": ppl_base, "ppl": ppl, "ppl_ratio": ppl / ppl_base,
            "chat": [{"question": q, "base": b, "adapted": a} for q, b, a in zip(CHAT_PROMPTS, before, after)]}
