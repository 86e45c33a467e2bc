"""Helpers only the book needs, one job per module; chapters import them from here (`from tinylm.book import ...`).

Everything here works in the three places a reader meets a chapter:
- the static HTML book (no kernel): quizzes and static explorers are plain HTML + inline JavaScript;
- Colab (ipywidgets 7.7) and local Jupyter (ipywidgets 8): live explorers use only widgets both share.
Element ids are derived from a key the chapter gives, so re-executing a chapter prints the same HTML.

- `display`: glue (numbers for the prose), the plot style, tables, `millions`;
- `quizzes`: `Question`, `quiz`;
- `checkers`: `check_function`, `check_swiglu_backward`, their `Verdict`, `case_seed` (cases drawn per answer);
- `lora_checker`: chapter 16's `check_lora_forward` (the LoRA forward against `tinylm.lora`);
- `grpo_checker`: chapter 17's `check_group_advantages` (GRPO's advantages against `tinylm.grpo`);
- `sandbox`: how a checker runs the learner's code (a deadline; `forbid`'s refused functions);
- `explorers`: `static_explorer`, `live_explorer`.
"""

from .checkers import Verdict, case_seed, check_function, check_swiglu_backward
from .display import Approx, Table, Timed, Varies, glue, millions, plot_style, table
from .grpo_checker import advantages_reference, check_group_advantages
from .lora_checker import check_lora_forward, lora_reference
from .explorers import StaticExplorer, live_explorer, static_explorer
from .quizzes import Question, Quiz, quiz

__all__ = [
    "Approx", "Question", "Quiz", "StaticExplorer", "Table", "Timed", "Varies", "Verdict", "advantages_reference", "case_seed", "check_function",
    "check_group_advantages", "check_lora_forward",
    "check_swiglu_backward", "glue", "lora_reference", "live_explorer", "millions", "plot_style", "quiz", "static_explorer", "table",
]
