"""DPO (Rafailov et al., 2023, "Direct Preference Optimization"): learning from pairs of answers, one preferred.

    loss = -log σ(β · ((log π(y_c|x) - log π_ref(y_c|x)) - (log π(y_r|x) - log π_ref(y_r|x))))

y_c the chosen answer, y_r the rejected one, π the policy (LoRA on), π_ref the reference (the adapter off,
`tinylm.logprobs.reference`: the model DPO starts from). r(y) = β (log π(y|x) - log π_ref(y|x)) is the
implicit reward the paper derives; the reward margin is r(y_c) - r(y_r) and the reward accuracy the share of
pairs with r(y_c) > r(y_r) (both 0 at step 0, where π = π_ref; the loss is then ln 2). β sets how far the
policy may move from the reference: the loss saturates once β times the log-ratio gap is a few units.

Pairs come from the model itself (on-policy), by a seeded tool: `make_pairs` samples several answers per
prompt and a preference rule picks one chosen and one rejected answer among them:

    "correct"   a right answer over a wrong one (the task's checker, `tinylm.evaluate.is_right`); prompts whose
                answers are all right or all wrong give no pair
    "shorter"   the shortest answer over the longest, right or wrong: DPO learns whatever the pairs prefer

The reference log-probabilities of a fixed set of pairs never change, so `DPOObjective` computes them once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from ._checks import check_int, check_number, check_one_of
from .evaluate import is_right, reply_ids, reply_text
from .logprobs import batched, reference, sequence_logps
from .model import TinyLM
from .tasks import Problem, prompt_ids
from .tokenizer import BPETokenizer
from .train.loop import Objective


@dataclass(frozen=True)
class Pair:
    """One preference: the prompt's ids, the chosen and the rejected answer's ids (each ends with its stop token
    when the model produced one), and the problem they answer."""

    problem: Problem
    prompt: list[int]
    chosen: list[int]
    rejected: list[int]


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float = 0.1, nll_coef: float = 0.0,
             chosen_lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """The mean DPO loss over N pairs from four (N,) sequence log-probabilities, and its measures:
    {"margin": mean r_c - r_r, "accuracy": share of r_c > r_r, "chosen_reward", "rejected_reward": means}.

    nll_coef > 0 adds the chosen answers' negative log-likelihood per token, times nll_coef (Pang et al., 2024,
    "Iterative Reasoning Preference Optimization": DPO plus a length-normalised NLL term on the winner, their
    α = 1): plain DPO may lower the chosen answer's likelihood as long as the rejected one falls faster, and this
    term holds the chosen one up. It needs chosen_lengths, the (N,) answer token counts; stats gain "nll"."""
    check_number("beta", beta, 0, low_open=True)
    check_number("nll_coef", nll_coef, 0)
    logps = (policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    if not all(isinstance(t, torch.Tensor) and t.dim() == 1 for t in logps) or len({t.shape for t in logps}) != 1 \
            or policy_chosen.numel() == 0:
        raise ValueError("dpo_loss takes four 1-D tensors of the same length N >= 1 (sequence log-probabilities of "
                         f"the chosen and rejected answers under the policy and the reference), got shapes "
                         f"{[tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in logps]}")
    chosen_reward = beta * (policy_chosen - ref_chosen)                      # (N,)
    rejected_reward = beta * (policy_rejected - ref_rejected)                # (N,)
    margin = chosen_reward - rejected_reward                                 # (N,)
    loss = -F.logsigmoid(margin).mean()
    margin, chosen_reward, rejected_reward = margin.detach(), chosen_reward.detach(), rejected_reward.detach()
    stats = {"margin": float(margin.mean()), "accuracy": float((margin > 0).float().mean()),
             "chosen_reward": float(chosen_reward.mean()), "rejected_reward": float(rejected_reward.mean())}
    if nll_coef > 0:
        if not isinstance(chosen_lengths, torch.Tensor) or chosen_lengths.shape != policy_chosen.shape \
                or bool((chosen_lengths <= 0).any()):
            raise ValueError("nll_coef > 0 needs chosen_lengths: a 1-D tensor of the chosen answers' token counts "
                             f"(each >= 1), as long as policy_chosen ({policy_chosen.numel()}), got "
                             f"{tuple(chosen_lengths.shape) if isinstance(chosen_lengths, torch.Tensor) else chosen_lengths!r}")
        nll = (-policy_chosen / chosen_lengths.to(policy_chosen)).mean()
        loss = loss + nll_coef * nll
        stats["nll"] = float(nll.detach())
    return loss, stats


# ---------------------------------------------------------------------------------------------
# Preference rules: which of a prompt's sampled answers is chosen, which rejected (None: no pair)
# ---------------------------------------------------------------------------------------------
def prefer_correct(problem: Problem, texts: list[str], ids: list[list[int]]) -> tuple[int, int] | None:
    """The first right answer over the first wrong one (the checker decides); None if they all agree."""
    right = [is_right(problem, t) for t in texts]
    if all(right) or not any(right):
        return None
    return right.index(True), right.index(False)


def prefer_shorter(problem: Problem, texts: list[str], ids: list[list[int]]) -> tuple[int, int] | None:
    """The answer of fewest tokens over the one of most, whatever their correctness; None if all are as long."""
    lengths = [len(a) for a in ids]
    if min(lengths) == max(lengths):
        return None
    return lengths.index(min(lengths)), lengths.index(max(lengths))


PREFERENCES: dict[str, Callable[[Problem, list[str], list[list[int]]], tuple[int, int] | None]] = {
    "correct": prefer_correct, "shorter": prefer_shorter}


def make_pairs(model: TinyLM, tokenizer: BPETokenizer, problems: Sequence[Problem], n_samples: int = 4,
               prefer: str = "correct", max_new_tokens: int = 32, temperature: float = 1.0, seed: int = 0,
               batch_size: int = 32) -> list[Pair]:
    """On-policy preference pairs: n_samples answers per problem sampled from model (`reply_ids`, a generator
    seeded with seed: the same pairs every run), then the rule PREFERENCES[prefer] picks one pair or none."""
    check_one_of("prefer", prefer, tuple(PREFERENCES))
    n_samples = check_int("n_samples", n_samples, low=2, hint=" (a pair needs two answers to compare)")
    check_number("temperature", temperature, 0, low_open=True, hint=" (greedy answers would all be the same)")
    if not problems or not all(isinstance(p, Problem) for p in problems):
        raise ValueError("problems must be a non-empty list of tinylm.tasks.Problem (make_splits makes them)")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(check_int("seed", seed, low=0))
    prompts = [prompt_ids(tokenizer, p) for p in problems]
    answers = reply_ids(model, tokenizer, [p for p in prompts for _ in range(n_samples)], max_new_tokens,
                        batch_size, temperature=temperature, generator=generator)
    pairs = []
    for n, (problem, prompt) in enumerate(zip(problems, prompts)):
        ids = answers[n * n_samples : (n + 1) * n_samples]
        picked = PREFERENCES[prefer](problem, [reply_text(tokenizer, a) for a in ids], ids)
        if picked is not None:
            pairs.append(Pair(problem, prompt, ids[picked[0]], ids[picked[1]]))
    return pairs


class DPOObjective(Objective):
    """DPO over a fixed list of pairs, for `tinylm.train.train`: each step draws batch_size pairs (with
    replacement) and returns their mean loss (plus nll_coef times the chosen answers' NLL per token). The
    reference log-probabilities are computed here, once, with the model's adapter off; `log` gets each step's
    loss, margin and accuracy."""

    def __init__(self, model: TinyLM, pairs: Sequence[Pair], beta: float = 0.1, pad_id: int = 0,
                 batch_size: int = 32, nll_coef: float = 0.0):
        if not pairs or not all(isinstance(p, Pair) for p in pairs):
            raise ValueError("pairs must be a non-empty list of tinylm.dpo.Pair (make_pairs makes them); no pair "
                             "was found: sample more answers per prompt, at a higher temperature, or more prompts")
        self.pairs, self.pad_id = list(pairs), check_int("pad_id", pad_id, low=0)
        self.beta = check_number("beta", beta, 0, low_open=True)
        self.nll_coef = check_number("nll_coef", nll_coef, 0)
        prompts = [p.prompt for p in self.pairs]
        with reference(model):
            self.ref_chosen = batched(sequence_logps, model, prompts, [p.chosen for p in self.pairs], batch_size,
                                      self.pad_id)                           # (N,)
            self.ref_rejected = batched(sequence_logps, model, prompts, [p.rejected for p in self.pairs],
                                        batch_size, self.pad_id)            # (N,)
        self.log: list[dict] = []

    def _loss(self, model: TinyLM, rows: list[int]) -> tuple[torch.Tensor, dict]:
        pairs = [self.pairs[i] for i in rows]
        prompts = [p.prompt for p in pairs]
        logps = sequence_logps(model, prompts + prompts, [p.chosen for p in pairs] + [p.rejected for p in pairs],
                               self.pad_id)                                  # (2B,): chosen, then rejected
        index = torch.tensor(rows, device=self.ref_chosen.device)
        lengths = torch.tensor([len(p.chosen) for p in pairs], device=logps.device)
        return dpo_loss(logps[: len(rows)], logps[len(rows):], self.ref_chosen[index].to(logps.device),
                        self.ref_rejected[index].to(logps.device), self.beta, self.nll_coef, lengths)

    def step_loss(self, model: TinyLM, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, int]:
        rows = torch.randint(len(self.pairs), (batch_size,), generator=generator).tolist()
        loss, stats = self._loss(model, rows)
        self.log.append({"loss": float(loss.detach()), **stats})
        tokens = sum(2 * len(self.pairs[i].prompt) + len(self.pairs[i].chosen) + len(self.pairs[i].rejected)
                     for i in rows)
        return loss, tokens

    def metrics(self, model: TinyLM, batch_size: int = 16) -> dict:
        """{"loss", "margin", "accuracy", "chosen_reward", "rejected_reward", "n"} over every pair, no gradients."""
        check_int("batch_size", batch_size, low=1)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                parts = [self._loss(model, list(range(i, min(i + batch_size, len(self.pairs)))))
                         for i in range(0, len(self.pairs), batch_size)]
        finally:
            model.train(was_training)
        sizes = [min(batch_size, len(self.pairs) - i) for i in range(0, len(self.pairs), batch_size)]
        out = {"loss": sum(float(loss) * n for (loss, _), n in zip(parts, sizes)) / len(self.pairs)}
        for key in parts[0][1]:
            out[key] = sum(stats[key] * n for (_, stats), n in zip(parts, sizes)) / len(self.pairs)
        return out | {"n": len(self.pairs)}
