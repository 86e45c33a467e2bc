"""Running a learner's function: a deadline it cannot swallow, and the library's own functions refused."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence


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


class _Forbidden(BaseException):
    """Raised when a learner's function calls the implementation the exercise asks them to write (not an
    Exception, so that `except Exception` in the learner's code cannot swallow it)."""


# a class's dunders stay allowed (printing an object is no answer), except the ones that run it
_RUNS = {"__init__", "__new__", "__call__"}


def _allowed_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and name not in _RUNS


@dataclass
class _Refusals:
    """What a learner's function must not call. Python code is matched by where it was written (its file,
    first line and name), so a reference held anywhere, a name imported into the learner's namespace, and a
    copy made by `importlib.reload` are all the same function; C functions (torch's built-ins) by identity."""

    files: dict[str, str] = field(default_factory=dict)                 # file -> label: a whole module
    codes: dict[tuple[str, int, str], str] = field(default_factory=dict)  # (file, line, name) -> label
    builtins: dict[int, str] = field(default_factory=dict)              # id(C function) -> label
    keep: list = field(default_factory=list)                            # the C functions, so ids stay theirs
    pending: list[str] = field(default_factory=list)                    # dotted names of modules not loaded yet

    def label(self, code: types.CodeType) -> str | None:
        name = code.co_name
        if _allowed_dunder(name):
            return None
        found = self.codes.get((code.co_filename, code.co_firstlineno, name))
        module = self.files.get(code.co_filename)
        return found if found is not None or module is None else f"{module}.{code.co_qualname}"


def _code_key(fn: Any) -> tuple[str, int, str]:
    code = fn.__code__
    return code.co_filename, code.co_firstlineno, code.co_name


def _add(refusals: _Refusals, owner: Any, name: str) -> None:
    """Refuse `owner`: a module (every function its file defines), a class (its methods), or one function."""
    if isinstance(owner, types.ModuleType):
        path = getattr(owner, "__file__", None)
        if not path:
            raise ValueError(f"forbid: module {owner.__name__} has no source file to refuse")
        refusals.files[path] = owner.__name__
        return
    if isinstance(owner, type):
        for attr, value in vars(owner).items():
            fn = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if isinstance(fn, types.FunctionType) and not _allowed_dunder(attr):
                refusals.codes[_code_key(fn)] = f"{name}.{attr}"
        return
    fn = getattr(owner, "__func__", owner)
    if isinstance(fn, types.FunctionType):
        refusals.codes[_code_key(fn)] = name
    elif callable(fn):  # a C function: torch.rms_norm, F.scaled_dot_product_attention
        refusals.builtins[id(fn)] = name
        refusals.keep.append(fn)
    else:
        raise ValueError(f"forbid must list modules, classes or functions (e.g. [tinylm.tokenizer]), got {owner!r}")


def _dotted(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
    return qual if not module or qual.startswith(module + ".") else f"{module}.{qual}"


def _forbidden_functions(forbid: Sequence[Any]) -> _Refusals:
    """The refusals for `forbid`: modules, classes and functions, or dotted names ("transformers.
    TopPLogitsWarper") of things in packages the learner may not have imported; a name is looked up only
    once its top package is loaded (import it and the next case refuses it), so the checker never loads a
    package the learner did not (the lookup itself may load a submodule of one, as a lazy package does)."""
    refusals = _Refusals()
    for owner in forbid:
        if isinstance(owner, str):
            if not all(part.isidentifier() for part in owner.split(".")) or "." not in owner:
                raise ValueError(f"forbid: {owner!r} is not a dotted name such as 'transformers.TopPLogitsWarper'")
            refusals.pending.append(owner)
        else:
            _add(refusals, owner, owner.__name__ if isinstance(owner, types.ModuleType) else _dotted(owner))
    return _resolve(refusals)


def _resolve(refusals: _Refusals) -> _Refusals:
    """`refusals` with each dotted name whose package is loaded looked up and added."""
    for dotted in list(refusals.pending):
        parts = dotted.split(".")
        if parts[0] not in sys.modules:
            continue
        value: Any = sys.modules[parts[0]]
        for part in parts[1:]:
            value = getattr(value, part, None)
            if value is None:
                raise ValueError(f"forbid: {dotted!r} names nothing in the loaded {parts[0]} "
                                 f"(its version lacks it, or the name is misspelt)")
        _add(refusals, value, dotted)
        refusals.pending.remove(dotted)
    return refusals


def _watched(fn: Callable, refusals: _Refusals, called: list[str]) -> Callable:
    """fn, run under a profile hook that records and refuses (raises _Forbidden at) any call the refusals
    name, in whichever thread runs it. Code that turns the hook off is refused too."""
    _resolve(refusals)

    def hook(frame, event, arg):
        if event == "call":
            label = refusals.label(frame.f_code)
        elif event == "c_call":
            label = refusals.builtins.get(id(arg))
        else:
            return
        if label is not None:
            called.append(label)
            raise _Forbidden(label)    # raising here also removes the hook: the call is over

    def watched(*args):
        previous = sys.getprofile()
        sys.setprofile(hook)
        try:
            result = fn(*args)
            if sys.getprofile() is not hook and not called:
                called.append("sys.setprofile (which turns off the checker's watch)")
            return result
        finally:
            sys.setprofile(previous)
    return watched
