"""GRPO (Shao et al., 2024, "DeepSeekMath", section 4.1): reinforcement learning from a checker's reward, with
each prompt's group of sampled answers as its own baseline (no value model).

    for a prompt q: G answers o_1..o_G sampled from the policy, rewards r_i (1 right, 0 wrong: the checker)
    advantage     A_i = (r_i - mean(r)) / (std(r) + eps)            the same for every token of o_i
    objective     1/G Σ_i 1/|o_i| Σ_t [ min(ρ_t A_i, clip(ρ_t, 1 - ε, 1 + ε) A_i) - β D_t ]      (maximised)
                  ρ_t = π(o_t | q, o_<t) / π_old(o_t | q, o_<t), the ratio to the policy that sampled o
                  D_t = π_ref/π - log(π_ref/π) - 1, the paper's per-token KL estimator (>= 0), π_ref the
                  reference: the adapter off

The standard deviation is torch's sample one (G - 1), as Hugging Face TRL's GRPOTrainer computes it, with
eps = 1e-4; a group whose answers all score the same has advantage 0 and teaches nothing (only the KL term,
if β > 0, acts on it): with sparse rewards most groups are silent, which `GRPOObjective.log` counts.

With one update per sampled batch (updates_per_sample = 1; the paper's RL also makes "a single update
following each exploration stage"), π_old is the policy itself: ρ = 1 with gradient ∇ log π, the clip never
acts, and the step is REINFORCE with the group baseline. updates_per_sample > 1 reuses a batch for several
steps, where the ratio and its clip matter.

Sampling is most of the cost on a CPU (G answers per prompt, one token at a time): `GRPOObjective` times it.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from ._checks import check_int, check_number
from .evaluate import is_right, reply_ids, reply_text
from .logprobs import reference, token_logps
from .model import TinyLM
from .tasks import Problem, prompt_ids
from .tokenizer import BPETokenizer
from .train.loop import Objective

EPS = 1e-4


def correctness(problem: Problem, reply: str) -> float:
    """The verifiable reward: 1.0 if the checker accepts the reply (`tinylm.evaluate.is_right`), else 0.0."""
    return 1.0 if is_right(problem, reply) else 0.0


def group_advantages(rewards: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """rewards (P, G), G answers to each of P prompts -> advantages (P, G): (r - mean) / (std + eps) by group."""
    check_number("eps", eps, 0, low_open=True)
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 2 or rewards.shape[1] < 2 or rewards.shape[0] < 1:
        got = tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
        raise ValueError(f"rewards must be a (prompts, group size) tensor with a group of at least 2 answers, got {got}")
    rewards = rewards.double()
    finite = torch.isfinite(rewards).all(dim=1)
    if not finite.all():
        row = int((~finite).nonzero()[0])
        raise ValueError(f"rewards must be finite: prompt {row}'s group holds {rewards[row].tolist()}; make the "
                         "reward function return a finite number for every answer")
    mean = rewards.mean(dim=1, keepdim=True)                                 # (P, 1)
    std = rewards.std(dim=1, keepdim=True)                                   # (P, 1), sample std (G - 1)
    return ((rewards - mean) / (std + eps)).float()                          # (P, G)


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              ref_logps: torch.Tensor | None = None, kl_coef: float = 0.0, clip_eps: float = 0.2,
              n_total: int | None = None) -> tuple[torch.Tensor, dict]:
    """The negated GRPO objective (a loss to minimise) over N answers, and its measures.

    logps, old_logps, ref_logps (N, T): per-token log-probabilities under the policy (with gradients), the
    sampling policy and the reference; mask (N, T): the answer tokens; advantages (N,). Each answer's terms are
    averaged over its tokens, then summed over answers and divided by n_total (default N: answers left out
    because their advantage is 0 still count in the mean). Measures: "kl" (mean D_t over answer tokens, with
    ref_logps), "clipped" (share of answer tokens whose ratio was clipped against them)."""
    check_number("clip_eps", clip_eps, 0, 1, low_open=True, high_open=True)
    check_number("kl_coef", kl_coef, 0)
    shapes = [tuple(t.shape) for t in (logps, old_logps, mask)]
    if logps.dim() != 2 or len(set(shapes)) != 1 or tuple(advantages.shape) != (logps.shape[0],):
        raise ValueError(f"logps, old_logps and mask must be (N, T) alike and advantages (N,), got {shapes} and "
                         f"{tuple(advantages.shape)}")
    if kl_coef > 0 and ref_logps is None:
        raise ValueError("kl_coef > 0 needs ref_logps, the reference's per-token log-probabilities")
    mask = mask.float()
    ratio = torch.exp(logps - old_logps)                                     # (N, T)
    adv = advantages[:, None].to(logps.dtype)                                # (N, 1)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)  # (N, T)
    per_token = surrogate
    clipped = (surrogate != ratio * adv).detach().float()
    stats = {"clipped": float((clipped * mask).sum() / mask.sum().clamp(min=1))}
    if ref_logps is not None:
        log_ratio = ref_logps - logps                                        # (N, T) log π_ref/π
        kl = torch.exp(log_ratio) - log_ratio - 1                            # (N, T) >= 0
        per_token = per_token - kl_coef * kl
        stats["kl"] = float((kl.detach() * mask).sum() / mask.sum().clamp(min=1))
    per_answer = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # (N,)
    n_total = logps.shape[0] if n_total is None else check_int("n_total", n_total, low=logps.shape[0])
    return -per_answer.sum() / n_total, stats


class GRPOObjective(Objective):
    """GRPO for `tinylm.train.train`: every updates_per_sample steps it draws batch_size problems (the loop's
    seeded sampler), samples group_size answers to each (its own seeded generator), scores them with reward and
    turns them into group advantages; each step returns `grpo_loss` on that batch.

    log: one entry per step: "reward" (the batch's mean reward), "informative" (share of groups whose rewards
    differ), "sample_s" (seconds of sampling and scoring, 0 on a reused batch), "answer_tokens", "loss", and
    "kl" with kl_coef > 0. sample_seconds: their total.
    """

    def __init__(self, tokenizer: BPETokenizer, problems: Sequence[Problem], group_size: int = 8,
                 reward: Callable[[Problem, str], float] = correctness, max_new_tokens: int = 32,
                 temperature: float = 1.0, kl_coef: float = 0.0, clip_eps: float = 0.2, updates_per_sample: int = 1,
                 seed: int = 0, pad_id: int = 0, gen_batch_size: int = 64):
        if not problems or not all(isinstance(p, Problem) for p in problems):
            raise ValueError("problems must be a non-empty list of tinylm.tasks.Problem (make_splits makes them)")
        self.tokenizer, self.problems, self.reward = tokenizer, list(problems), reward
        self.group_size = check_int("group_size", group_size, low=2, hint=" (a group baseline needs 2 answers)")
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=1)
        self.temperature = check_number("temperature", temperature, 0, low_open=True,
                                        hint=" (greedy answers to one prompt would all be the same)")
        self.kl_coef = check_number("kl_coef", kl_coef, 0)
        self.clip_eps = check_number("clip_eps", clip_eps, 0, 1, low_open=True, high_open=True)
        self.updates_per_sample = check_int("updates_per_sample", updates_per_sample, low=1)
        self.seed, self.pad_id = check_int("seed", seed, low=0), check_int("pad_id", pad_id, low=0)
        self.gen_batch_size = check_int("gen_batch_size", gen_batch_size, low=1)
        self._generator: torch.Generator | None = None
        self._batch: dict | None = None
        self._steps = 0
        self.log: list[dict] = []
        self.sample_seconds = 0.0

    def sample(self, model: TinyLM, problems: Sequence[Problem]) -> dict:
        """A group of answers to each problem, scored: {"prompts", "answers" (P·G each, by problem), "texts",
        "rewards" (P, G), "advantages" (P, G)}."""
        if self._generator is None:
            self._generator = torch.Generator(device=next(model.parameters()).device).manual_seed(self.seed)
        G = self.group_size
        prompts = [prompt_ids(self.tokenizer, p) for p in problems for _ in range(G)]
        answers = reply_ids(model, self.tokenizer, prompts, self.max_new_tokens, self.gen_batch_size,
                            temperature=self.temperature, generator=self._generator)
        texts = [reply_text(self.tokenizer, a) for a in answers]
        rewards = torch.tensor([float(self.reward(problems[i // G], t)) for i, t in enumerate(texts)]).view(-1, G)
        return {"prompts": prompts, "answers": answers, "texts": texts, "rewards": rewards,
                "advantages": group_advantages(rewards)}

    def step_loss(self, model: TinyLM, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, int]:
        sample_s = 0.0
        if self._steps % self.updates_per_sample == 0:
            t0 = time.perf_counter()
            rows = torch.randint(len(self.problems), (batch_size,), generator=generator).tolist()
            batch = self.sample(model, [self.problems[i] for i in rows])
            sample_s = time.perf_counter() - t0
            self.sample_seconds += sample_s
            advantages = batch["advantages"].flatten()                       # (P·G,)
            # answers with advantage 0 add exactly 0 to the clipped term: without a KL penalty, leave them out
            keep = list(range(len(advantages))) if self.kl_coef > 0 else advantages.nonzero().flatten().tolist()
            batch["keep"] = keep
            if keep:
                prompts, answers = [batch["prompts"][i] for i in keep], [batch["answers"][i] for i in keep]
                if self.updates_per_sample > 1:       # with one update, π_old is the policy: logps.detach()
                    with torch.no_grad():
                        batch["old"] = token_logps(model, prompts, answers, self.pad_id)[0]
                if self.kl_coef > 0:
                    with reference(model):
                        batch["ref"] = token_logps(model, prompts, answers, self.pad_id)[0]
            self._batch = batch
        self._steps += 1
        batch = self._batch
        rewards = batch["rewards"]
        entry = {"reward": float(rewards.mean()), "informative": float((rewards.std(dim=1) > 0).float().mean()),
                 "sample_s": sample_s, "answer_tokens": sum(len(a) for a in batch["answers"]) / len(batch["answers"])}
        keep = batch["keep"]
        if not keep:                                  # every group silent, no KL term: nothing to learn from
            self.log.append(entry | {"loss": 0.0})
            return torch.zeros((), requires_grad=True), 0
        prompts, answers = [batch["prompts"][i] for i in keep], [batch["answers"][i] for i in keep]
        logps, mask = token_logps(model, prompts, answers, self.pad_id)     # (N, T) each
        old = batch["old"] if "old" in batch else logps.detach()
        loss, stats = grpo_loss(logps, old, batch["advantages"].flatten()[keep].to(logps.device), mask,
                                batch.get("ref"), self.kl_coef, self.clip_eps, n_total=len(batch["answers"]))
        self.log.append(entry | {"loss": float(loss.detach())} | stats)
        return loss, sum(len(p) + len(a) for p, a in zip(prompts, answers))
