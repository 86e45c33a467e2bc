"""Quizzes: multiple-choice questions as HTML buttons with feedback, no kernel needed (plain inline JS)."""

from __future__ import annotations

import hashlib
import html
import json
import random
from dataclasses import dataclass
from typing import Sequence

from .display import _slug


@dataclass
class Question:
    """One multiple-choice question. `answer` is the index of the correct option; `feedback` has one
    explanation per option (shown when that option is clicked)."""

    question: str
    options: Sequence[str]
    answer: int
    feedback: Sequence[str]

    def __post_init__(self) -> None:
        if len(self.options) < 2:
            raise ValueError(f"options needs at least two choices, got {len(self.options)}")
        if len(self.feedback) != len(self.options):
            raise ValueError(f"feedback needs one entry per option ({len(self.options)}), got {len(self.feedback)}")
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer must index options (0..{len(self.options) - 1}), got {self.answer}")


_QUIZ_JS = (
    "var q=this.closest('.tl-q');q.querySelectorAll('button').forEach(function(b){{b.classList.remove('tl-picked')}});"
    "this.classList.add('tl-picked');var f=q.querySelector('.tl-feedback');"
    "f.textContent={fb};f.className='tl-feedback '+({ok}?'tl-right':'tl-wrong');"
)

_QUIZ_CSS = """<style>
.tl-quiz{border:1px solid #c9d3e0;border-radius:6px;padding:.6em 1em;margin:.8em 0;background:#f7f9fc;color:#1d2733}
.tl-q{margin:.6em 0 1em}.tl-q p{margin:.2em 0 .4em;font-weight:600}
.tl-quiz button{display:block;margin:.25em 0;padding:.35em .7em;border:1px solid #9fb0c6;border-radius:4px;
background:#fff;color:#1d2733;cursor:pointer;text-align:left;font:inherit}
.tl-quiz button.tl-picked{border-width:2px;border-color:#36587f}
.tl-feedback{min-height:1.3em;margin-top:.3em}.tl-right{color:#1b6e2e}.tl-wrong{color:#a4262c}
</style>"""


def _option_orders(key: str, questions: Sequence[Question]) -> list[list[int]]:
    """The order in which each question shows its options: a shuffle seeded by the quiz key and the
    question's index (the same on every run), so the right answer does not sit where it was written.
    When a shuffle would put the key where the previous question's key was shown, it is rotated by one
    place, so a quiz of two or more questions never has all its keys in one position."""
    orders, previous = [], None
    for n, q in enumerate(questions):
        seed = int.from_bytes(hashlib.sha256(f"{key}/{n}".encode()).digest()[:8], "big")
        order = list(range(len(q.options)))
        random.Random(seed).shuffle(order)
        if order.index(q.answer) == previous:
            order = order[1:] + order[:1]
        previous = order.index(q.answer)
        orders.append(order)
    return orders


class Quiz:
    """A list of questions rendered as HTML buttons; clicking one shows its feedback (pure JS).

    Each question's options are shown in a shuffled, fixed order (`_option_orders`); `Question.answer`
    still indexes the options as written."""

    def __init__(self, key: str, questions: Sequence[Question]):
        if not questions:
            raise ValueError("questions must not be empty")
        self.key, self.questions = _slug(key), list(questions)
        self.orders = _option_orders(self.key, self.questions)

    def _repr_html_(self) -> str:
        parts = [_QUIZ_CSS, f'<div class="tl-quiz" id="tl-quiz-{self.key}"><b>Quick check</b>']
        for n, (q, order) in enumerate(zip(self.questions, self.orders)):
            parts.append(f'<div class="tl-q" id="tl-quiz-{self.key}-{n}"><p>{n + 1}. {html.escape(q.question)}</p>')
            for i in order:
                verdict = ("Right. " if i == q.answer else "Not quite. ") + q.feedback[i]
                js = _QUIZ_JS.format(fb=json.dumps(verdict), ok="true" if i == q.answer else "false")
                parts.append(f'<button type="button" data-correct="{str(i == q.answer).lower()}" '
                             f'onclick="{html.escape(js)}">{html.escape(q.options[i])}</button>')
            parts.append('<div class="tl-feedback" aria-live="polite"></div></div>')
        parts.append("</div>")
        return "".join(parts)

    def __repr__(self) -> str:
        lines = [f"Quick check ({len(self.questions)} questions): click an answer to see feedback."]
        for n, (q, order) in enumerate(zip(self.questions, self.orders)):
            lines.append(f"{n + 1}. {q.question}")
            lines += [f"   {chr(97 + j)}) {q.options[i]}" for j, i in enumerate(order)]
        return "\n".join(lines)


def quiz(key: str, *questions: Question) -> Quiz:
    """Build a quiz; leave it as the last expression of a cell to show it."""
    return Quiz(key, questions)
