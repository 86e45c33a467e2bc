"""Helpers only the book needs: quizzes, exercise checkers, explorers (live and static), plot style.

Everything here works in the three places a reader meets a chapter:
- the static HTML book (no kernel): quizzes and static explorers are plain HTML + inline JavaScript;
- Colab (ipywidgets 7.7) and local Jupyter (ipywidgets 8): live explorers use only widgets both share.
Element ids are derived from a key the chapter gives, so re-executing a chapter prints the same HTML.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import hashlib
import html
import io
import itertools
import json
import os
import random
import re
import signal
import threading
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from . import backprop, numpy_model
from ._checks import check_number
from .gradcheck import max_errors


# ---------------------------------------------------------------------------------------------
# Glue: numbers computed in a chapter, used in its prose
# ---------------------------------------------------------------------------------------------
class Timed(float):
    """A number measured with a clock. Its text form carries a trailing `# timed` comment, which
    `{glue:text}` drops (it reads the number back with `ast.literal_eval`) and `nbval_sanitize.cfg` masks: a
    re-executed chapter is compared on every glued number except the timings, which differ from run to run."""

    def __repr__(self) -> str:
        return f"{float(self)!r}  # timed"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:      # IPython's text/plain
        p.text(repr(self))


def glue(name: str, value: Any, display: bool = False, timed: bool = False) -> None:
    """myst-nb's `glue` when it is installed (building the book, running the tests); elsewhere (Colab) the
    value has no page to go to, so it is only shown when display=True. timed: the value is a measured time or
    rate (glued as a `Timed` number, which nbval does not compare)."""
    if timed:
        value = Timed(value)
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        if display:
            from IPython.display import display as show

            show(value)
        return
    myst_glue(name, value, display=display)


# ---------------------------------------------------------------------------------------------
# Plot style
# ---------------------------------------------------------------------------------------------
def plot_style() -> None:
    """One look for every figure of the course (call once per chapter)."""
    import matplotlib as mpl

    mpl.rcParams.update({
        "figure.figsize": (6.4, 3.6), "figure.dpi": 100, "savefig.dpi": 100,
        "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
        "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9, "font.size": 10,
        "svg.hashsalt": "tinylm",  # deterministic SVG ids
    })


def _slug(key: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", key).strip("-").lower()
    if not slug:
        raise ValueError(f"key must contain letters or digits, got {key!r}")
    return slug


# ---------------------------------------------------------------------------------------------
# Tables: aligned text for nbval and notebooks, an HTML table in the book
# ---------------------------------------------------------------------------------------------
class Table:
    """rows of cells under headers; numbers are formatted by the caller (so what is printed is what is meant)."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = ""):
        if any(len(r) != len(headers) for r in rows):
            raise ValueError(f"every row needs {len(headers)} cells, one per header")
        self.headers, self.rows, self.title = [str(h) for h in headers], [[str(c) for c in r] for r in rows], title

    def __repr__(self) -> str:
        widths = [max(len(x) for x in col) for col in zip(self.headers, *self.rows)]
        fmt = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        lines = ([self.title] if self.title else []) + [fmt(self.headers), fmt(["-" * w for w in widths])]
        return "\n".join(lines + [fmt(r) for r in self.rows])

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows)
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f'<table class="tl-table">{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> Table:
    """Show rows as a table; leave it as the last expression of a cell."""
    return Table(headers, rows, title)


def millions(n: int | float, digits: int = 1) -> str:
    """63_910_656 -> '63.9M'."""
    return f"{n / 1e6:.{digits}f}M"


# ---------------------------------------------------------------------------------------------
# Quizzes: buttons with feedback, no kernel needed
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# "Your turn" exercises: compare a learner's function with the reference on random inputs
# ---------------------------------------------------------------------------------------------
@dataclass
class Verdict:
    passed: bool
    message: str

    def __repr__(self) -> str:
        return ("PASS: " if self.passed else "NOT YET: ") + self.message

    def __bool__(self) -> bool:
        return self.passed


class _TimeUp(BaseException):
    """Raised inside a learner's function when its time is up (not an Exception: `except Exception` in
    the learner's code cannot swallow it)."""


def _call_with_deadline(fn: Callable, args: Sequence, seconds: float) -> Any:
    """fn(*args), interrupted by _TimeUp after `seconds`.

    In the main thread on Linux and macOS (a Jupyter or Colab kernel, a script) a SIGALRM timer
    interrupts the call, and keeps firing every 0.2 s in case the code catches the first one. Elsewhere
    (Windows, a worker thread) the call runs in a helper thread that is sent _TimeUp when the time is up.
    Either way the interruption lands between two Python bytecodes: a single endless C call (rare in
    exercises) runs to its end first.
    """
    if os.name == "posix" and threading.current_thread() is threading.main_thread():
        def time_up(signum, frame):
            raise _TimeUp
        previous = signal.signal(signal.SIGALRM, time_up)
        outer, start = signal.setitimer(signal.ITIMER_REAL, seconds, 0.2), time.monotonic()
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer[0]:                               # someone else's timer was running: put it back
                signal.setitimer(signal.ITIMER_REAL, max(outer[0] - (time.monotonic() - start), 1e-3), outer[1])
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = fn(*args)
        except BaseException as e:  # handed to the caller below
            done["error"] = e
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():                          # time is up: raise _TimeUp inside the worker (again
        for _ in range(10):                        # if its code catches it), then report to the caller
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(_TimeUp))
            worker.join(0.2)
            if not worker.is_alive():
                break
        raise _TimeUp
    if "error" in done:
        raise done["error"]
    return done["value"]


# The least tolerance an answer in each dtype gets: float32 keeps about 7 digits, float16 3, bfloat16 2.
_TOLERANCE_FLOOR = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 5e-2}


def _as_numpy(value: Any) -> tuple[np.ndarray, str]:
    """An answer as a NumPy array, and the name of the dtype it came in (a torch tensor's too)."""
    if hasattr(value, "detach") and hasattr(value, "dtype"):  # a torch tensor (bfloat16 has no NumPy twin)
        tensor = value.detach().cpu()
        dtype = str(tensor.dtype).removeprefix("torch.")
        return (tensor.double() if tensor.is_floating_point() else tensor).numpy(), dtype
    array = np.asarray(value)
    return array, array.dtype.name


class _Forbidden(BaseException):
    """Raised when a learner's function calls the implementation the exercise asks them to write (not an
    Exception, so that `except Exception` in the learner's code cannot swallow it)."""


def _forbidden_functions(forbid: Sequence[Any]) -> list[tuple[Any, str, str]]:
    """(owner, attribute, dotted name) of every function a module defines (its classes' methods too), or of
    every method a class defines (dunders aside: printing an object stays allowed)."""
    found = []
    for owner in forbid:
        if isinstance(owner, types.ModuleType):
            for attr, value in vars(owner).items():
                if isinstance(value, types.FunctionType) and value.__module__ == owner.__name__:
                    found.append((owner, attr, f"{owner.__name__}.{attr}"))
                elif isinstance(value, type) and value.__module__ == owner.__name__:
                    found += _forbidden_functions([value])
        elif isinstance(owner, type):
            for attr, value in vars(owner).items():
                if (isinstance(value, (types.FunctionType, classmethod, staticmethod))
                        and not (attr.startswith("__") and attr.endswith("__"))):
                    found.append((owner, attr, f"{owner.__module__}.{owner.__qualname__}.{attr}"))
        else:
            raise ValueError(f"forbid must list modules or classes (e.g. [tinylm.tokenizer]), got {owner!r}")
    return found


@contextlib.contextmanager
def _forbidding(functions: list[tuple[Any, str, str]], namespace: dict, called: list[str]):
    """While inside, each forbidden function (and any name in `namespace` bound to one, such as a learner's
    `from tinylm.tokenizer import _merge`) records its name in `called` and raises _Forbidden; put back after."""
    def refuse(label: str) -> Callable:
        def refused(*args, **kwargs):
            called.append(label)
            raise _Forbidden(label)
        return refused
    saved, labels = [], {}
    for owner, attr, label in functions:
        value = vars(owner)[attr]
        labels[id(getattr(value, "__func__", value))] = label
        saved.append((owner, attr, value))
    for name, value in list(namespace.items()):
        label = labels.get(id(getattr(value, "__func__", value)))
        if label is not None and callable(value):
            saved.append((namespace, name, value))
    try:
        for owner, attr, value in saved:
            label = labels[id(getattr(value, "__func__", value))]
            if owner is namespace:
                namespace[attr] = refuse(label)
            else:
                setattr(owner, attr, refuse(label))
        yield
    finally:
        for owner, attr, value in reversed(saved):
            if owner is namespace:
                namespace[attr] = value
            else:
                setattr(owner, attr, value)


def check_function(user_fn: Callable, reference_fn: Callable, cases: Sequence[tuple], *,
                   atol: float = 1e-6, rtol: float = 1e-6, name: str = "your function",
                   timeout: float = 10.0, forbid: Sequence[Any] = ()) -> Verdict:
    """Call both functions on each case (a tuple of arguments) and say whether the outputs agree.

    The learner may answer with a NumPy array or a torch tensor. A float32 (or 16-bit) answer is held to
    its precision, at least `_TOLERANCE_FLOOR[dtype]`, and a NOT YET names the dtype and the tolerance.
    The learner's function gets `timeout` seconds for all the cases together: an endless loop ends in a
    NOT YET verdict instead of a kernel that never answers.

    forbid: modules or classes whose functions the learner's code must not call (the implementation the
    exercise asks them to write, e.g. [tinylm.tokenizer]); while it runs they raise, and a call, even one
    the learner's code catches, is a NOT YET that names the function. The reference runs without them.
    """
    functions = _forbidden_functions(forbid)
    namespace = getattr(user_fn, "__globals__", {})
    if not callable(user_fn) or not callable(reference_fn):
        raise ValueError(f"user_fn and reference_fn must be functions, got {type(user_fn).__name__} and "
                         f"{type(reference_fn).__name__}")
    if isinstance(cases, (str, bytes)) or not isinstance(cases, Sequence) or not cases:
        raise ValueError("cases must be a non-empty list of argument tuples; with no case, every function "
                         "would pass")
    if not all(isinstance(args, tuple) for args in cases):
        raise ValueError("every case must be a tuple of arguments, e.g. (x,) for one argument")
    check_number("timeout", timeout, 0, low_open=True, hint=" seconds")
    deadline = time.monotonic() + timeout
    for n, args in enumerate(cases):
        expected = np.asarray(reference_fn(*args))
        called: list[str] = []
        try:
            with _forbidding(functions, namespace, called):
                got = _call_with_deadline(user_fn, [a.copy() if isinstance(a, np.ndarray) else a for a in args],
                                          max(deadline - time.monotonic(), 1e-3))
        except _Forbidden:
            pass
        except _TimeUp:
            return Verdict(False, f"{name} did not finish within {timeout:g} s (at case {n + 1}); is there a "
                                  "loop that never ends?")
        except NotImplementedError:
            return Verdict(False, f"{name} is not written yet (it raises NotImplementedError).")
        except Exception as e:  # the learner's bug, reported plainly instead of a traceback
            if not called:
                return Verdict(False, f"{name} raised {type(e).__name__}: {e} on case {n + 1}.")
        if called:
            return Verdict(False, f"{name} calls {called[0]}, tinylm's own implementation: the exercise is to "
                                  "write it yourself, without it.")
        if got is None:
            return Verdict(False, f"{name} returned None; did you forget `return`?")
        got, dtype = _as_numpy(got)
        if got.shape != expected.shape:
            return Verdict(False, f"case {n + 1}: shape {got.shape}, expected {expected.shape}.")
        floor = _TOLERANCE_FLOOR.get(dtype, 0.0)  # a float32 answer cannot match to 1e-9
        tol_a, tol_r = max(atol, floor), max(rtol, floor)
        if not np.allclose(got, expected, atol=tol_a, rtol=tol_r):
            with np.errstate(invalid="ignore"):                  # inf - inf: equal infinities are no error
                gap = np.where(got == expected, 0.0, np.abs(got - expected))
            err = float(np.nan_to_num(gap, nan=np.inf, posinf=np.inf).max())
            if np.isinf(err):
                return Verdict(False, f"case {n + 1}: some values are infinite (or nan) where the "
                                      "reference's are not, or the other way round.")
            return Verdict(False, f"case {n + 1}: values differ by up to {err:.3g} "
                                  f"(tolerance {tol_a:g} for {dtype} values).")
    return Verdict(True, f"{name} matches the reference on {len(cases)} random cases.")


# ---------------------------------------------------------------------------------------------
# Chapter 12's exercise: the learner writes SwiGLU's backward
# ---------------------------------------------------------------------------------------------
_SWIGLU_GRADS = ("dx", "dgate_w", "dup_w", "ddown_w")


def check_swiglu_backward(user_fn: Callable, seed: int = 0, rtol: float = 1e-6) -> Verdict:
    """Grade user_fn(dout, x, gate_w, up_w, down_w) -> (dx, dgate_w, dup_w, ddown_w) on random inputs.

    x (B, T, C); gate_w, up_w (F, C); down_w (C, F); dout (B, T, C). The Verdict names every wrong
    gradient with its relative error and hints at common slips.
    """
    if not callable(user_fn):
        raise ValueError(f"user_fn must be a function (dout, x, gate_w, up_w, down_w) -> 4 arrays, "
                         f"got {type(user_fn).__name__}")
    rng = np.random.default_rng(seed)
    B, T, C, F = 2, 3, 5, 7  # C != F so a transposed weight gradient shows up as a wrong shape
    x, dout = rng.normal(size=(B, T, C)), rng.normal(size=(B, T, C))
    gate_w, up_w, down_w = rng.normal(size=(F, C)), rng.normal(size=(F, C)), rng.normal(size=(C, F))
    _, cache = numpy_model.swiglu_forward(x, gate_w, up_w, down_w)
    expected = dict(zip(_SWIGLU_GRADS, backprop.swiglu_backward(dout, cache)))
    try:
        got = user_fn(dout.copy(), x.copy(), gate_w.copy(), up_w.copy(), down_w.copy())
    except NotImplementedError:
        return Verdict(False, "not written yet (your function raises NotImplementedError)")
    except Exception as e:  # the learner's code: report, don't crash the notebook
        return Verdict(False, f"your function raised {type(e).__name__}: {e}")
    if not isinstance(got, (tuple, list)) or len(got) != 4:
        return Verdict(False, f"return four arrays (dx, dgate_w, dup_w, ddown_w); got {type(got).__name__}"
                              f"{f' of length {len(got)}' if isinstance(got, (tuple, list)) else ''}")

    # Common slips, each as the gradient it would produce, with the hint to give
    _, _, _, _, g, u, s, a, h = cache
    dh = dout @ down_w                                                             # (B, T, F)
    dg, du = dh * u * s * (1 + g * (1 - s)), dh * a
    x2 = x.reshape(-1, C)
    slips = {
        "dx": [(dg @ gate_w, "only the gate path: x also feeds up_proj, add du @ up_w"),
               (du @ up_w, "only the up path: x also feeds gate_proj, add dg @ gate_w")],
        "dgate_w": [((dh * u * s).reshape(-1, F).T @ x2,
                     "SiLU's derivative is s * (1 + g * (1 - s)) with s = sigmoid(g), not sigmoid(g) alone")],
        "dup_w": [(dh.reshape(-1, F).T @ x2, "du = dh * silu(g): the up branch is multiplied by the gate")],
        "ddown_w": [(dout.reshape(-1, C).T @ a.reshape(-1, F), "down_proj's input is h = silu(g) * u, not silu(g)")],
    }
    wrong = []
    for name, g_user in zip(_SWIGLU_GRADS, got):
        want = expected[name]
        try:
            g_user = np.asarray(g_user, dtype=np.float64)
        except (TypeError, ValueError):
            wrong.append(f"{name} is not an array of numbers (got {type(g_user).__name__})")
            continue
        if g_user.shape != want.shape:
            hint = (" (transposed? a weight's gradient has the weight's (out, in) shape)"
                    if g_user.shape == want.shape[::-1] else "")
            wrong.append(f"{name} has shape {g_user.shape}, expected {want.shape}{hint}")
            continue
        abs_err, rel = max_errors(g_user, want)
        if not rel <= rtol:  # written this way round so nan fails too
            msg = f"{name} is wrong: relative error {rel:.2g}"
            if np.isfinite(abs_err):
                where = np.unravel_index(np.argmax(np.abs(g_user - want)), want.shape)
                msg += f" (largest difference {abs_err:.2g} at index {tuple(int(j) for j in where)})"
            hints = [hint for slip, hint in [(-want, "the sign is flipped")] + slips[name]
                     if max_errors(g_user, slip)[1] <= rtol]
            wrong.append(msg + (f". Hint: {hints[0]}" if hints else ""))
    if wrong:
        return Verdict(False, "; ".join(wrong))
    # the tolerance, not the measured error: ~1e-16 differences vary with the machine, a verdict should not
    return Verdict(True, f"dx, dgate_w, dup_w and ddown_w all match (relative error below {rtol:g})")


# ---------------------------------------------------------------------------------------------
# Explorers: a figure or table driven by sliders
#   live_explorer   -> ipywidgets (Jupyter, Colab); render runs in the kernel on every move
#   static_explorer -> plain HTML + JS (the HTML book, or anywhere): every frame precomputed
# `controls` maps a name to the list of values a slider steps through; `render(**values)` returns
# a matplotlib Figure or an HTML string.
# ---------------------------------------------------------------------------------------------
def _frame_html(out: Any) -> str:
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    if isinstance(out, Figure):
        buf = io.BytesIO()
        out.savefig(buf, format="png", bbox_inches="tight", metadata={"Software": None})
        plt.close(out)
        b64 = base64.b64encode(buf.getvalue()).decode()
        return f'<img alt="figure" style="max-width:100%" src="data:image/png;base64,{b64}">'
    if isinstance(out, str):
        return out
    raise ValueError(f"render must return a matplotlib Figure or an HTML string, got {type(out).__name__}")


def _check_controls(controls: dict[str, Sequence]) -> None:
    if not controls:
        raise ValueError("controls must name at least one slider")
    for name, values in controls.items():
        if len(values) < 2:
            raise ValueError(f"control {name!r} needs at least two values, got {list(values)}")


def _script_json(value: Any) -> str:
    """JSON to paste inside <script>: a frame holding "</script>" (or "<!--", "<script") would end or
    derail the script there, so their "<" is written as the JSON escape \\u003c (same string in JS)."""
    return re.sub(r"<(?=/?script|!--)", r"\\u003c", json.dumps(value), flags=re.IGNORECASE)


class StaticExplorer:
    """Sliders over precomputed frames: works in the static HTML book with no kernel and no CDN."""

    MAX_FRAMES = 64

    def __init__(self, key: str, controls: dict[str, Sequence], render: Callable[..., Any],
                 labels: dict[str, str] | None = None):
        _check_controls(controls)
        names = list(controls)
        combos = list(itertools.product(*(range(len(controls[n])) for n in names)))
        if len(combos) > self.MAX_FRAMES:
            raise ValueError(f"{len(combos)} frames is too many for a static page (at most {self.MAX_FRAMES}); "
                             "use fewer slider values")
        self.key, self.controls, self.labels = _slug(key), controls, labels or {}
        self.frames = {"-".join(map(str, c)): _frame_html(render(**{n: controls[n][i] for n, i in zip(names, c)}))
                       for c in combos}

    def _repr_html_(self) -> str:
        k = f"tl-x-{self.key}"
        names = list(self.controls)
        rows = []
        for j, name in enumerate(names):
            values = [str(v) for v in self.controls[name]]
            label = html.escape(self.labels.get(name, name))
            rows.append(
                f'<label style="display:block;margin:.2em 0">{label}: '
                f'<input type="range" min="0" max="{len(values) - 1}" step="1" value="0" data-i="{j}" '
                f'oninput="window[\'{k}_show\']()" style="vertical-align:middle;width:14em"> '
                f'<output>{html.escape(values[0])}</output></label>')
        values_js = _script_json([[str(v) for v in self.controls[n]] for n in names])
        script = (
            f"<script>var {k.replace('-', '_')}_f={_script_json(self.frames)};"
            f"function {k}_show(){{var r=document.getElementById('{k}');var v={values_js};"
            f"var s=Array.from(r.querySelectorAll('input[type=range]'));"
            f"s.forEach(function(e,i){{e.nextElementSibling.textContent=v[i][e.value]}});"
            f"r.querySelector('.tl-frame').innerHTML={k.replace('-', '_')}_f[s.map(function(e){{return e.value}}).join('-')];}}"
            "</script>"
        ).replace(f"function {k}_show", f"window['{k}_show']=function")
        first = self.frames["-".join("0" * len(names))]
        return (f'<div class="tl-explorer" id="{k}" style="border:1px solid #c9d3e0;border-radius:6px;'
                f'padding:.6em 1em;margin:.8em 0">{"".join(rows)}<div class="tl-frame">{first}</div></div>{script}')

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n} ({len(v)} values)" for n, v in self.controls.items())
        return f"Static explorer '{self.key}': {len(self.frames)} precomputed frames over {sizes}."


def static_explorer(key: str, controls: dict[str, Sequence], render: Callable[..., Any],
                    labels: dict[str, str] | None = None) -> StaticExplorer:
    """Precompute render(**values) for every combination and show it behind HTML sliders."""
    return StaticExplorer(key, controls, render, labels)


def live_explorer(controls: dict[str, Sequence], render: Callable[..., Any], labels: dict[str, str] | None = None):
    """An ipywidgets version of the same explorer (runs `render` on every move). Works on ipywidgets 7.7 and 8."""
    import ipywidgets as widgets
    from IPython.display import HTML, display

    _check_controls(controls)
    labels = labels or {}
    sliders = {name: widgets.SelectionSlider(options=list(values), value=values[0],
                                             description=labels.get(name, name),
                                             style={"description_width": "initial"}, continuous_update=False)
               for name, values in controls.items()}
    view = widgets.HTML(value=_frame_html(render(**{n: s.value for n, s in sliders.items()})))

    def redraw(_change=None) -> None:
        view.value = _frame_html(render(**{n: s.value for n, s in sliders.items()}))

    for s in sliders.values():
        s.observe(redraw, names="value")
    return widgets.VBox([*sliders.values(), view])
