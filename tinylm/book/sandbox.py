"""Running a learner's function: a deadline it cannot swallow, and the library's own functions refused."""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
import types
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
    # a package's re-exports too (`tinylm.attention` is `tinylm.model.attention`): every loaded module of the
    # forbidden functions' packages that holds one under another name
    packages = {getattr(owner, "__module__", getattr(owner, "__name__", "")).split(".")[0] for owner, _, _ in functions}
    done = {(id(owner), attr) for owner, attr, _ in saved}
    for mod_name, module in list(sys.modules.items()):
        if module is None or mod_name.split(".")[0] not in packages:
            continue
        for attr, value in list(vars(module).items()):
            if (id(module), attr) not in done and id(getattr(value, "__func__", value)) in labels and callable(value):
                saved.append((module, attr, value))
    # and the functions themselves: a reference held elsewhere (`mask = ref.causal_mask`, or the function passed
    # to the checker as the answer) calls the same function object, so its code is swapped for one that refuses
    # (functions without closure cells: the code of one with cells cannot be replaced by one without)
    swapped = []
    for owner, attr, label in functions:
        fn = getattr(vars(owner)[attr], "__func__", vars(owner)[attr])
        if isinstance(fn, types.FunctionType) and not fn.__code__.co_freevars:
            swapped.append((fn, fn.__code__, _refusing_code(label)))
    builtins.__tinylm_refuse__ = lambda label: (called.append(label), _raise_forbidden(label))
    try:
        for owner, attr, value in saved:
            label = labels[id(getattr(value, "__func__", value))]
            if owner is namespace:
                namespace[attr] = refuse(label)
            else:
                setattr(owner, attr, refuse(label))
        for fn, _, code in swapped:
            fn.__code__ = code
        yield
    finally:
        for fn, code, _ in swapped:
            fn.__code__ = code
        del builtins.__tinylm_refuse__
        for owner, attr, value in reversed(saved):
            if owner is namespace:
                namespace[attr] = value
            else:
                setattr(owner, attr, value)


def _raise_forbidden(label: str):
    raise _Forbidden(label)


def _refusing_code(label: str) -> types.CodeType:
    """The code of `def f(*args, **kwargs)` that reports `label` through the hook `_forbidding` sets up."""
    scope: dict = {}
    exec(f"def refused(*args, **kwargs):\n    __tinylm_refuse__({label!r})\n", {}, scope)
    return scope["refused"].__code__
