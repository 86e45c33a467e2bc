"""Chapter "Preferences and rewards"'s exercise checker: the learner writes GRPO's group advantages."""

from __future__ import annotations

from typing import Callable

import torch

from .. import dpo, grpo
from .._checks import check_int
from .checkers import Verdict, _as_numpy, check_function
from .sandbox import _call_with_deadline

# (prompts, group size, reward levels): 0/1 rewards like the checker's, then graded ones; the first case holds a
# silent group (every answer right) and groups of different means, so that each usual slip shows in it
_CASES = [(4, 4, (0.0, 1.0)), (3, 6, (0.0, 0.5, 1.0)), (2, 8, (0.0, 1.0)), (5, 3, (0.0, 0.25, 1.0))]


def advantages_reference(rewards: torch.Tensor) -> torch.Tensor:
    """`tinylm.grpo.group_advantages`: (r - group mean) / (group sample std + 1e-4), rewards (P, G) -> (P, G)."""
    return grpo.group_advantages(rewards)


def _cases(seed: int) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    out = []
    for prompts, size, levels in _CASES:
        pick = torch.randint(len(levels), (prompts, size), generator=g)
        rewards = torch.tensor(levels)[pick]                                 # (P, G)
        rewards[0] = levels[-1]                                              # a silent group: all right
        rewards[1, 0], rewards[1, 1] = levels[0], levels[-1]                 # a group that disagrees
        out.append((rewards,))
    return out


def check_group_advantages(user_fn: Callable, seed: int = 0) -> Verdict:
    """Grade user_fn(rewards (P, G)) -> advantages (P, G) against `tinylm.grpo.group_advantages` on random
    rewards, each case with a group whose rewards are all equal (advantage 0); calling tinylm.grpo (or tinylm.dpo)
    is refused. The tolerance (2e-3) lets any small eps pass, or none with silent groups set to 0 by hand.

    A NOT YET on the values names the usual slip: the mean or the std over the whole batch instead of each
    group, the population std (divided by G) instead of the sample one (G - 1), no eps (a silent group gives
    0 / 0), the mean not subtracted."""
    if not callable(user_fn):
        raise ValueError(f"user_fn must be a function rewards (P, G) -> advantages (P, G), got "
                         f"{type(user_fn).__name__}")
    cases = _cases(seed)
    verdict = check_function(user_fn, advantages_reference, cases, name="your group advantages", atol=2e-3,
                             rtol=2e-3, forbid=[grpo, dpo])   # any eps up to ~1e-4, or none with 0 for a silent group
    if verdict or not ("values differ" in verdict.message or "infinite (or nan)" in verdict.message):
        return verdict
    (r,) = cases[0]                              # which slip is it? (the first case ran once already)
    got = torch.from_numpy(_as_numpy(_call_with_deadline(user_fn, cases[0], 10.0))[0]).double()
    r = r.double()
    mean, std = r.mean(dim=1, keepdim=True), r.std(dim=1, keepdim=True)
    slips = [((r - r.mean()) / (r.std() + 1e-4), "the mean and the std are each group's (dim=1), not the "
              "whole batch's"),
             ((r - mean) / (r.std() + 1e-4), "the std is each group's (dim=1, keepdim=True), not the batch's"),
             ((r - r.mean()) / (std + 1e-4), "the mean is each group's (dim=1, keepdim=True), not the batch's"),
             ((r - mean) / (r.std(dim=1, unbiased=False, keepdim=True) + 1e-4), "the std is the sample one, "
              "divided by G - 1 (torch's .std() default), not the population one (divided by G)"),
             ((r - mean) / std, "a group whose rewards are all equal has std 0: add eps = 1e-4 to the std"),
             (r / (std + 1e-4), "subtract the group's mean first")]
    hints = [hint for slip, hint in slips if got.shape == slip.shape
             and torch.allclose(torch.nan_to_num(got, nan=7.0), torch.nan_to_num(slip, nan=7.0), atol=1e-3)]
    return Verdict(False, verdict.message + (f" Hint: {hints[0]}." if hints else ""))
