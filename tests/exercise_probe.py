# Runs inside a chapter's kernel for tests/test_exercise_bypass.py (not a test file itself: pytest does not collect
# it). Stdlib only, and nothing at import time: the kernel loads it by path at an exercise.
"""At an exercise of a chapter: every callable the learner could reach, each run through the chapter's checker.

`candidates(ns)` lists what the learner can call at that point: every callable name of the namespace (functions,
classes, callable objects such as a model), the functions and classes of every module there that belongs to a
library an exercise could be bypassed with (tinylm, and gguf for the GGUF exercise), one submodule deep, the
methods of tinylm's classes (`Block.forward`, called with the block) and of the namespace's tinylm objects (a
tokenizer's `encode`). `run(...)` then calls the chapter's `check`
with each candidate in place of the learner's function and says which pass.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import sys
import types

LIBRARIES = ("tinylm", "gguf")           # modules whose functions a learner could answer an exercise with
IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}


def _root(module_name: str) -> str:
    return (module_name or "").partition(".")[0]


def _module_members(module: types.ModuleType, depth: int = 1):
    """(dotted label, value) of the module's callables (its own and the ones it imports from the same library),
    and of its submodules' down to `depth` more levels."""
    root = _root(module.__name__)
    for attr, value in sorted(vars(module).items()):
        if attr.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            if depth > 0 and _root(value.__name__) == root and value.__name__.startswith(module.__name__ + "."):
                yield from ((f"{attr}.{label}", v) for label, v in _module_members(value, depth - 1))
        elif callable(value) and _root(getattr(value, "__module__", "") or "") == root:
            yield attr, value


def _tinylm_methods(obj):
    """The public methods of an object whose class comes from tinylm, bound to it."""
    for klass in type(obj).__mro__:
        if _root(klass.__module__) != "tinylm":
            continue
        for attr, value in vars(klass).items():
            if not attr.startswith("_") and inspect.isfunction(value):
                yield attr, getattr(obj, attr)


def candidates(ns: dict, skip: set[str]) -> list[tuple[str, object]]:
    """Everything callable the learner can reach in namespace `ns` (names in `skip` aside), once each."""
    found, seen = [], set()

    def add(label: str, value) -> None:
        key = id(getattr(value, "__func__", value)), id(getattr(value, "__self__", None))
        if key in seen:
            return
        seen.add(key)
        found.append((label, value))
        if isinstance(value, type) and _root(value.__module__) == "tinylm":   # Block.forward(block, ...) too
            for attr, method in vars(value).items():
                if not attr.startswith("_") and inspect.isfunction(method):
                    add(f"{label}.{attr}", method)

    for name, value in sorted(ns.items()):
        if name.startswith("_") or name in IPYTHON_NAMES or name in skip:
            continue
        if isinstance(value, types.ModuleType):
            if _root(value.__name__) in LIBRARIES:
                for label, member in _module_members(value):
                    add(f"{name}.{label}", member)
            continue
        if callable(value) and getattr(value, "__module__", None) != "builtins":
            add(name, value)
        if _root(type(value).__module__) == "tinylm" and not isinstance(value, type):
            for attr, method in _tinylm_methods(value):
                add(f"{name}.{attr}", method)
    return found


def _passed(verdict) -> bool:
    """A checker returns a Verdict (tinylm.book): its `passed`; anything else is judged by its truth."""
    return bool(getattr(verdict, "passed", verdict))


def _quietly(fn, *args):
    """fn(*args) with its prints swallowed; (passed, what happened)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            verdict = fn(*args)
        return _passed(verdict), repr(verdict)[:300]
    except KeyboardInterrupt:
        raise
    except BaseException as e:     # SystemExit from a candidate such as sys.exit is a failure, not the end
        return False, f"{type(e).__name__}: {e}"[:300]
    finally:
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            plt.close("all")


def run(check, solutions: list, found: list[tuple[str, object]]) -> dict:
    """The checker on the solution, then on each candidate in each argument position (the solution in the
    others). Returns {"solution": (passed, verdict), "bypasses": [(position, label, verdict), ...], "tried": n}."""
    report = {"solution": _quietly(check, *solutions), "bypasses": [], "tried": 0}
    for position in range(len(solutions)):
        for label, value in found:
            if any(value is s for s in solutions):
                continue
            args = list(solutions)
            args[position] = value
            report["tried"] += 1
            passed, verdict = _quietly(check, *args)
            if passed:
                report["bypasses"].append((position, label, verdict))
    return report
