"""The exercise checkers: a learner's function against the reference on random cases, with a Verdict."""

from __future__ import annotations

import hashlib
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .. import backprop, numpy_model
from .._checks import check_number
from ..gradcheck import max_errors
from .sandbox import _call_with_deadline, _Forbidden, _forbidden_functions, _TimeUp, _watched


@dataclass
class Verdict:
    passed: bool
    message: str

    def __repr__(self) -> str:
        return ("PASS: " if self.passed else "NOT YET: ") + self.message

    def __bool__(self) -> bool:
        return self.passed


# The least tolerance an answer in each dtype gets: float32 keeps about 7 digits, float16 3, bfloat16 2.
# A 16-bit answer gets its floor only where the reference is 16-bit too: against a float32 or float64
# reference it is refused, since at 1e-2 a wrong answer (a block without its MLP) would pass.
_TOLERANCE_FLOOR = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 5e-2}
_SIXTEEN_BITS = {"float16", "bfloat16"}


def case_seed(*fns: Callable) -> int:
    """A seed for the cases a checker draws, from what the answer's code says: its name and the names and
    constants it uses (not its bytecode, which changes between Python versions). The same answer draws the
    same cases on every run and machine, so a chapter prints the same verdict; another answer draws others,
    and no case is shown in advance, so none can be answered from a table."""
    parts: list[str] = []

    def walk(code: types.CodeType) -> None:
        parts.extend(code.co_names + code.co_varnames)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)
            else:
                parts.append(repr(const))
    for fn in fns:
        fn = getattr(fn, "__func__", fn)
        parts.append(getattr(fn, "__qualname__", type(fn).__qualname__))
        if isinstance(getattr(fn, "__code__", None), types.CodeType):
            walk(fn.__code__)
    return int.from_bytes(hashlib.sha256("\0".join(sorted(set(parts))).encode()).digest()[:8], "big")


def _as_numpy(value: Any) -> tuple[np.ndarray, str]:
    """An answer as a NumPy array, and the name of the dtype it came in (a torch tensor's too)."""
    if hasattr(value, "detach") and hasattr(value, "dtype"):  # a torch tensor (bfloat16 has no NumPy twin)
        tensor = value.detach().cpu()
        dtype = str(tensor.dtype).removeprefix("torch.")
        return (tensor.double() if tensor.is_floating_point() else tensor).numpy(), dtype
    array = np.asarray(value)
    return array, array.dtype.name


def check_function(user_fn: Callable, reference_fn: Callable,
                   cases: Sequence[tuple] | Callable[[np.random.Generator], Sequence[tuple]], *,
                   atol: float = 1e-6, rtol: float = 1e-6, name: str = "your function",
                   timeout: float = 10.0, forbid: Sequence[Any] = (), seed_from: Callable | None = None) -> Verdict:
    """Call both functions on each case (a tuple of arguments) and say whether the outputs agree.

    cases: a list of argument tuples, or a function `draw(rng)` that returns one, called at each check with
    a NumPy generator seeded by `case_seed(seed_from or user_fn)` (seed_from: the learner's function, where
    user_fn wraps it): cases drawn at check time, never shown, cannot be answered from a table.

    The learner may answer with a NumPy array or a torch tensor. A float32 answer is held to its
    precision, at least `_TOLERANCE_FLOOR["float32"]`, and a NOT YET names the dtype and the tolerance; a
    16-bit answer is refused unless the reference is 16-bit too (the tolerance never follows a coarser
    answer).
    The learner's function gets `timeout` seconds for all the cases together: an endless loop ends in a
    NOT YET verdict instead of a kernel that never answers.

    forbid: what the learner's code must not call (the implementation the exercise asks them to write):
    modules (every function in their file, e.g. [tinylm.tokenizer]), classes (their methods and
    constructor), functions (Python or C, e.g. torch.nn.functional.silu) or dotted names of optional
    packages ("transformers.TopPLogitsWarper", refused once loaded). A call, even one the learner's code
    catches, is a NOT YET that names the function. The reference runs without them.
    """
    refusals = _forbidden_functions(forbid)
    if not callable(user_fn) or not callable(reference_fn):
        raise ValueError(f"user_fn and reference_fn must be functions, got {type(user_fn).__name__} and "
                         f"{type(reference_fn).__name__}")
    if callable(cases):
        cases = cases(np.random.default_rng(case_seed(seed_from or user_fn)))
    if isinstance(cases, (str, bytes)) or not isinstance(cases, Sequence) or not cases:
        raise ValueError("cases must be a non-empty list of argument tuples; with no case, every function "
                         "would pass")
    if not all(isinstance(args, tuple) for args in cases):
        raise ValueError("every case must be a tuple of arguments, e.g. (x,) for one argument")
    check_number("timeout", timeout, 0, low_open=True, hint=" seconds")
    deadline = time.monotonic() + timeout
    for n, args in enumerate(cases):
        expected, expected_dtype = _as_numpy(reference_fn(*args))
        called: list[str] = []
        try:
            got = _call_with_deadline(_watched(user_fn, refusals, called),
                                      [a.copy() if isinstance(a, np.ndarray) else a for a in args],
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
            whose = ("tinylm's own implementation" if called[0].startswith("tinylm.")
                     else "a library function that does the exercise for you")
            return Verdict(False, f"{name} calls {called[0]}, {whose}: the exercise is to write it yourself, "
                                  "without it.")
        if got is None:
            return Verdict(False, f"{name} returned None; did you forget `return`?")
        got, dtype = _as_numpy(got)
        if got.shape != expected.shape:
            return Verdict(False, f"case {n + 1}: shape {got.shape}, expected {expected.shape}.")
        if dtype in _SIXTEEN_BITS and expected_dtype not in _SIXTEEN_BITS:
            return Verdict(False, f"case {n + 1}: {name} returns {dtype} values; compute and return float32 "
                                  f"or float64 (the reference is {expected_dtype}).")
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
