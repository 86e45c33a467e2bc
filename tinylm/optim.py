"""Training in NumPy: gradient clipping and AdamW (Loshchilov & Hutter, 2019), as torch computes them.

    params = numpy_model.params_from_torch(model); state = {}
    grads = backprop.model_backward(numpy_model.model_forward(params, cfg, idx, targets)[2])
    clip_grad_norm(grads, 1.0); adamw_step(params, grads, state, lr=3e-4)
"""

from __future__ import annotations

import numpy as np

from ._checks import check_number


def clip_grad_norm(grads: dict[str, np.ndarray], max_norm: float) -> float:
    """Scale all grads in place so their joint L2 norm is at most max_norm; return the norm before.

    Same rule as torch.nn.utils.clip_grad_norm_: factor min(1, max_norm / (norm + 1e-6)).
    """
    check_number("max_norm", max_norm, 0, low_open=True)
    total = float(np.sqrt(sum(float(np.sum(g * g)) for g in grads.values())))
    coef = min(1.0, max_norm / (total + 1e-6))
    for g in grads.values():
        g *= coef
    return total


def decays(shape: tuple[int, ...]) -> bool:
    """The course's weight-decay rule: matrices (embedding, projections) are decayed, 1-D norm gains are
    not (pulling a gain towards 0 would shrink every activation). `adamw_step` and
    `tinylm.train.make_optimizer` both follow it."""
    return len(shape) >= 2


def adamw_step(params: dict[str, np.ndarray], grads: dict[str, np.ndarray], state: dict, lr: float = 1e-3,
               betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01) -> None:
    """One AdamW update of params, in place. Defaults are torch.optim.AdamW's.

    state: an empty dict before the first step; it keeps the step count and the moment estimates.
        p <- p * (1 - lr * wd)                         decoupled weight decay (matrices only: `decays`)
        m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2
        p <- p - lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
    The same update as torch.optim.AdamW with `make_optimizer`'s two parameter groups.
    """
    missing = sorted(set(params) - set(grads))
    if missing:
        raise ValueError(f"grads has no entry for {missing[:4]}; pass model_backward's output for these params")
    b1, b2 = betas
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"betas must lie in [0, 1), got {betas}")
    if not state:
        state.update(step=0, exp_avg={k: np.zeros_like(p) for k, p in params.items()},
                     exp_avg_sq={k: np.zeros_like(p) for k, p in params.items()})
    state["step"] += 1
    t = state["step"]
    bias1, bias2_sqrt = 1 - b1 ** t, np.sqrt(1 - b2 ** t)
    for k, p in params.items():
        g, m, v = grads[k], state["exp_avg"][k], state["exp_avg_sq"][k]
        if decays(p.shape):
            p *= 1 - lr * weight_decay
        m += (1 - b1) * (g - m)
        v *= b2
        v += (1 - b2) * g * g
        p -= (lr / bias1) * m / (np.sqrt(v) / bias2_sqrt + eps)
