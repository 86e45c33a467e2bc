"""Checking gradients: a hand-written backward pass against central differences of its forward.

    grad_check(f, x)                                  numerical gradient of a scalar f at x
    check_backward(forward, backward, inputs)         every input's gradient compared, as a GradCheck

`forward(*inputs) -> (out, cache)` and `backward(dout, cache) -> grads` are a pair from
`tinylm.numpy_model` and `tinylm.backprop` (or a learner's own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


def grad_check(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Numerical gradient of a scalar f at x by central differences: (f(x + eps e_i) - f(x - eps e_i)) / 2eps.

    Works on a float64 copy of x (f receives that copy), one entry at a time: 2 * x.size calls of f.
    Error is O(eps^2) from truncation plus O(1e-16 |f| / eps) from rounding, about 1e-9 relative here.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"grad_check needs a floating-point x, got dtype {x.dtype}")
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    x = x.astype(np.float64, copy=True)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        f_plus = float(f(x))
        x[i] = old - eps
        f_minus = float(f(x))
        x[i] = old
        grad[i] = (f_plus - f_minus) / (2 * eps)
    return grad


@dataclass(frozen=True)
class GradCheck:
    """Analytic vs numerical gradient. Relative error = max |analytic - numerical| / max |numerical|."""

    max_abs_err: float
    max_rel_err: float
    per_input: dict[str, tuple[float, float]]  # name -> (max abs error, relative error)

    def __str__(self) -> str:
        rows = [f"{name:>12}: abs {a:.2e}  rel {r:.2e}" for name, (a, r) in self.per_input.items()]
        return "\n".join(rows + [f"{'worst':>12}: abs {self.max_abs_err:.2e}  rel {self.max_rel_err:.2e}"])


def max_errors(analytic: np.ndarray, numerical: np.ndarray) -> tuple[float, float]:
    """(max |analytic - numerical|, that divided by max |numerical|): absolute and relative error."""
    abs_err = float(np.max(np.abs(analytic - numerical))) if numerical.size else 0.0
    scale = float(np.max(np.abs(numerical))) if numerical.size else 0.0
    return abs_err, (abs_err / max(scale, 1e-300) if abs_err else 0.0)


def check_backward(forward_fn: Callable, backward_fn: Callable, inputs: Sequence, wrt: Sequence[int] | None = None,
                   names: Sequence[str] | None = None, eps: float = 1e-6, seed: int = 0) -> GradCheck:
    """Compare backward_fn with central differences for forward_fn(*inputs) -> (out, cache).

    backward_fn(dout, cache) must return the gradients of inputs[i] for i in wrt (default: all inputs),
    in that order (a single array if one). The scalar checked is L = sum(out * dout) with a fixed random
    dout, so every output element matters. Use small shapes: it costs 2 forwards per input entry.
    """
    inputs = list(inputs)
    wrt = list(range(len(inputs))) if wrt is None else list(wrt)
    names = [f"input {i}" for i in wrt] if names is None else list(names)
    if len(names) != len(wrt):
        raise ValueError(f"names has {len(names)} entries but wrt has {len(wrt)}; give one name per checked input")
    for i in wrt:
        inputs[i] = np.asarray(inputs[i], dtype=np.float64)
    out, cache = forward_fn(*inputs)
    dout = np.random.default_rng(seed).normal(size=np.shape(out)) if np.ndim(out) else 1.0
    grads = backward_fn(dout, cache)
    grads = (grads,) if isinstance(grads, np.ndarray) else tuple(grads)
    if len(grads) != len(wrt):
        raise ValueError(f"backward_fn returned {len(grads)} gradients for {len(wrt)} inputs in wrt={wrt}; "
                         "set wrt to the inputs it differentiates, in order")
    per_input = {}
    for name, i, g in zip(names, wrt, grads):
        def loss(xi, i=i):
            args = list(inputs)
            args[i] = xi
            return np.sum(forward_fn(*args)[0] * dout)
        num = grad_check(loss, inputs[i], eps)
        if np.shape(g) != num.shape:
            raise ValueError(f"gradient of {name} has shape {np.shape(g)}, the input has shape {num.shape}")
        per_input[name] = max_errors(np.asarray(g), num)
    return GradCheck(max_abs_err=max((a for a, _ in per_input.values()), default=0.0),
                     max_rel_err=max((r for _, r in per_input.values()), default=0.0),
                     per_input=per_input)
