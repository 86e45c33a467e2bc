# GRPO (tinylm.grpo) on tiny random models, in a few seconds. Run: .venv/bin/python -m pytest tests/test_grpo.py
"""Group advantages and the clipped loss against hand computations, one step moves the policy toward the
high-reward answer, silent groups teach nothing, the objective is seeded and timed, bad input is a ValueError."""

from __future__ import annotations

import math

import pytest
import torch

from helpers import corpus_text, random_model, tiny
from tinylm.grpo import EPS, GRPOObjective, group_advantages, grpo_loss
from tinylm.logprobs import sequence_logps, token_logps
from tinylm.lora import LoRAConfig, add_lora, adapter_state_dict
from tinylm.tasks import make_splits
from tinylm.tokenizer import BPETokenizer
from tinylm.train import TrainConfig, train


def test_group_advantages_against_a_hand_computation():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    adv = group_advantages(rewards)
    std = math.sqrt(4 * 0.25 / 3)                                            # sample std of 1, 0, 0, 1 (G - 1)
    assert adv[0].tolist() == pytest.approx([0.5 / (std + EPS), -0.5 / (std + EPS)] * 1 + [-0.5 / (std + EPS),
                                            0.5 / (std + EPS)], rel=1e-6)
    assert adv[1].tolist() == [0.0] * 4                                      # all right: a silent group
    std3 = math.sqrt((0.75 ** 2 + 3 * 0.25 ** 2) / 3)                         # one right of four
    assert adv[2].tolist() == pytest.approx([0.75 / (std3 + EPS)] + [-0.25 / (std3 + EPS)] * 3, rel=1e-6)
    assert float(adv[2].sum()) == pytest.approx(0.0, abs=1e-6)               # advantages sum to 0 in a group


def test_grpo_loss_against_a_hand_computation():
    logps = torch.log(torch.tensor([[0.5, 0.25, 1.0], [0.5, 0.5, 0.5]]))    # 2 answers of 2 and 3 tokens
    mask = torch.tensor([[True, True, False], [True, True, True]])
    adv = torch.tensor([1.0, -1.0])
    loss, stats = grpo_loss(logps, logps, adv, mask)                          # ratio 1: -mean A
    assert float(loss) == pytest.approx(0.0) and stats["clipped"] == 0
    loss, _ = grpo_loss(logps, logps, adv, mask, n_total=4)                  # two silent answers count in the mean
    assert float(loss) == pytest.approx(0.0)
    loss, _ = grpo_loss(logps, logps, torch.tensor([2.0, 0.0]), mask)
    assert float(loss) == pytest.approx(-1.0)                                # -(2 + 0) / 2
    old = logps - torch.log(torch.tensor([[1.5, 1.0, 1.0], [0.5, 1.0, 1.0]]))   # ratios 1.5 and 0.5 at t = 0
    loss, stats = grpo_loss(logps, old, adv, mask, clip_eps=0.2)
    first = (min(1.5, 1.2) * 1 + 1.0) / 2                                   # A > 0: the ratio's gain is capped
    second = -(max(0.5, 0.8) + 1.0 + 1.0) / 3                                # A < 0: min picks the clipped 0.8
    assert float(loss) == pytest.approx(-(first + second) / 2, rel=1e-6)
    assert stats["clipped"] == pytest.approx(2 / 5)                          # 2 of the 5 answer tokens
    ref = logps + math.log(2)                                                # π_ref = 2π on every token
    loss, stats = grpo_loss(logps, logps, torch.zeros(2), mask, ref, kl_coef=0.5)
    d = 2 - math.log(2) - 1                                                  # π_ref/π - log(π_ref/π) - 1
    assert stats["kl"] == pytest.approx(d, rel=1e-6) and float(loss) == pytest.approx(0.5 * d, rel=1e-6)


def test_one_step_moves_the_policy_toward_the_high_reward_answer():
    model = add_lora(random_model(tiny(max_seq_len=32), std=0.1), LoRAConfig(rank=4, alpha=8))
    prompts, answers = [[1, 2, 3]] * 2, [[10, 11, 12], [20, 21]]             # one prompt, a group of two
    adv = group_advantages(torch.tensor([[1.0, 0.0]]))[0]                     # the first answer was right
    before = sequence_logps(model, prompts, answers).detach()
    logps, mask = token_logps(model, prompts, answers)
    loss, _ = grpo_loss(logps, logps.detach(), adv, mask)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= 0.05 * p.grad
    after = sequence_logps(model, prompts, answers).detach()
    assert after[0] > before[0] and after[1] < before[1]


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(corpus_text(5000), 300)


def run(tok, reward, steps=2, **kw):
    model = add_lora(random_model(tiny(vocab_size=300, max_seq_len=64), std=0.05), LoRAConfig(rank=2))
    problems = make_splits("addition", 16, 4, 4)["train"]
    objective = GRPOObjective(tok, problems, group_size=3, reward=reward, max_new_tokens=5, seed=1, **kw)
    train(model, objective, None, TrainConfig(steps=steps, batch_size=2, lr=1e-2, warmup=0, eval_every=steps),
          progress=False)
    return model, objective


def odd_length(problem, reply: str) -> float:
    return float(len(reply) % 2)


def test_the_objective_is_seeded_timed_and_logged(tok):
    _, a = run(tok, odd_length, updates_per_sample=2, kl_coef=0.1)
    _, b = run(tok, odd_length, updates_per_sample=2, kl_coef=0.1)
    assert [e["reward"] for e in a.log] == [e["reward"] for e in b.log]      # the same groups every run
    assert a.log[0]["sample_s"] > 0 and a.log[1]["sample_s"] == 0           # the batch reused once
    assert a.sample_seconds == pytest.approx(sum(e["sample_s"] for e in a.log))
    assert a.log[0]["kl"] == pytest.approx(0.0, abs=1e-6) and "clipped" in a.log[1]
    assert 0 <= a.log[0]["informative"] <= 1 and a.log[0]["answer_tokens"] > 0


def test_silent_groups_teach_nothing(tok):
    model, objective = run(tok, lambda problem, reply: 0.0)                  # every answer wrong
    assert [e["loss"] for e in objective.log] == [0.0, 0.0] and objective.log[0]["informative"] == 0
    assert all(float(t.abs().max()) == 0 for n, t in adapter_state_dict(model).items() if n.endswith("lora_B"))


@pytest.mark.parametrize("call, message", [
    (lambda: group_advantages(torch.ones(3)), "group of at least 2"),
    (lambda: group_advantages(torch.ones(2, 1)), "group of at least 2"),
    (lambda: group_advantages(torch.tensor([[1.0, float("nan")]])), "rewards must be finite"),
    (lambda: group_advantages(torch.tensor([[0.0, 1.0], [float("inf"), 0.0]])), "prompt 1"),
    (lambda: grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3)), "advantages"),
    (lambda: grpo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1), torch.ones(1, 2), kl_coef=0.1),
     "needs ref_logps"),
    (lambda: grpo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1), torch.ones(1, 2), clip_eps=1.5),
     "clip_eps must be"),
    (lambda: GRPOObjective(None, make_splits("addition", 4, 2, 2)["train"], group_size=1), "group_size must be"),
    (lambda: GRPOObjective(None, [], group_size=4), "problems must be"),
])
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
