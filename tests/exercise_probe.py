# Runs inside a chapter's kernel, in nbval's execution of the chapter (tests/exercise_nbval.py adds the cells that
# load it; not a test file itself: pytest does not collect it). Stdlib only, and nothing at import time: the kernel
# loads it by path at an exercise.
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
import json
import os
import random
import select
import signal
import sys
import tempfile
import time
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


@contextlib.contextmanager
def _no_trace():
    """Run candidates in a temporary folder (a `save` method writes there, if anywhere) and put the random
    generators back afterwards (Python's, NumPy's, torch's), so the chapter's later cells see the state they
    would have seen without the probe."""
    cwd, state = os.getcwd(), random.getstate()
    np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    np_state = np.random.get_state() if np is not None else None
    torch_state = torch.random.get_rng_state() if torch is not None else None
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        try:
            yield
        finally:
            os.chdir(cwd)
            random.setstate(state)
            if np_state is not None:
                np.random.set_state(np_state)
            if torch_state is not None:
                torch.random.set_rng_state(torch_state)


def _run(check, solutions: list, found: list[tuple[str, object]]) -> dict:
    with _no_trace():
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


def run(check, solutions: list, found: list[tuple[str, object]], timeout: float = 600) -> dict:
    """The checker on the solution, then on each candidate in each argument position (the solution in the
    others). Returns {"solution": (passed, verdict), "bypasses": [(position, label, verdict), ...], "tried": n}.

    Where the system can fork, the calls run in a forked copy of the kernel: a candidate that changes an object
    it is handed or bound to (a model's method setting an attribute to the checker's array) changes the copy, not
    the chapter's objects, and the chapter's later cells see what they would have seen without the probe."""
    if not hasattr(os, "fork"):
        return _run(check, solutions, found)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                      # the copy: run, send the report, leave without cleanup
        code = 0
        try:
            os.close(read)
            torch = sys.modules.get("torch")
            if torch is not None:
                torch.set_num_threads(1)              # as PyTorch's own forked data-loader workers do
            data = json.dumps(_run(check, solutions, found)).encode()
        except BaseException as e:
            data, code = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode(), 1
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(write, view):]
        finally:
            os._exit(code)
    os.close(write)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([read], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                raise TimeoutError(f"the probe's calls took more than {timeout:g} s")
            chunk = os.read(read, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    if not chunks:
        raise RuntimeError("the probe's forked copy died before it reported (out of memory, or a crash)")
    report = json.loads(b"".join(chunks))
    if "error" in report:
        raise RuntimeError(f"the probe failed: {report['error']}")
    return report


def verdict(report: dict, what: str, names: list[str]) -> None:
    """Raise an AssertionError naming every problem of `report` (from `run`): a refused solution, each
    callable that passed."""
    problems = []
    passed, said = report["solution"]
    if not passed:
        problems.append(f"{what}: the checker refuses the chapter's own solution: {said}")
    for position, label, said in report["bypasses"]:
        slot = f" as argument {position + 1}" if len(names) > 1 else ""
        problems.append(f"{what}: `{label}`{slot} passes the checker ({said})")
    if problems:
        raise AssertionError("an exercise that can be bypassed:\n" + "\n".join(problems))
    if report["tried"] == 0:
        raise AssertionError(f"{what}: the probe found no callable to try")


def named(ns: dict, chapter: str) -> list[tuple[str, object]]:
    """The chapter's named shortcuts and wrong answers (tests/exercise_bypasses.py), defined in a copy of `ns`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tl_bypasses", os.path.join(os.path.dirname(__file__),
                                                                                "exercise_bypasses.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.named(ns, chapter)
