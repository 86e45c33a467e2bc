# Answer log-probabilities (tinylm.logprobs) and DPO (tinylm.dpo) on tiny random models, in a few seconds.
# Run: .venv/bin/python -m pytest tests/test_dpo.py
"""Only answer tokens count (against a direct sum), the reference is the base model exactly, the DPO loss against
a hand computation, one DPO step moves the policy toward the chosen answers, pairs are seeded, bad input is a
ValueError."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from helpers import corpus_text, random_model, tiny
from tinylm.dpo import DPOObjective, Pair, dpo_loss, make_pairs, prefer_correct, prefer_shorter
from tinylm.logprobs import kl_to_reference, reference, sequence_logps, token_logps
from tinylm.lora import LoRAConfig, add_lora, lora_layers
from tinylm.tasks import addition, make_splits
from tinylm.tokenizer import BPETokenizer
from tinylm.train import TrainConfig, train

CFG = tiny(vocab_size=64, max_seq_len=48)
PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10]]
ANSWERS = [[11, 12], [13, 14, 15, 16], [17]]


def adapted(seed: int = 0):
    """(base, the same model with a LoRA adapter whose B is random: not the base any more)."""
    base = random_model(CFG, std=0.1, seed=seed)
    model = add_lora(copy.deepcopy(base), LoRAConfig(rank=4, alpha=8))
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(1))
    return base, model


def direct_sum(model, prompt: list[int], answer: list[int]) -> float:
    """log p(answer | prompt), one row alone, summed token by token from the full log-softmax."""
    ids = torch.tensor([prompt + answer])
    with torch.no_grad():
        logp = model(ids)[0][0].log_softmax(-1)                               # (T, V)
    return sum(float(logp[len(prompt) + j - 1, a]) for j, a in enumerate(answer))


def test_only_answer_tokens_count_against_a_direct_sum():
    base = random_model(CFG, std=0.1)
    with torch.no_grad():
        logps, mask = token_logps(base, PROMPTS, ANSWERS, pad_id=63)
        seq = sequence_logps(base, PROMPTS, ANSWERS)
    assert mask.sum(dim=1).tolist() == [len(a) for a in ANSWERS]             # answer positions only
    assert bool((logps[~mask] == 0).all())
    for n, (p, a) in enumerate(zip(PROMPTS, ANSWERS)):
        assert float(seq[n]) == pytest.approx(direct_sum(base, p, a), abs=1e-4)
        assert mask[n].nonzero().flatten().tolist() == list(range(len(p) - 1, len(p) + len(a) - 1))
    other = [[1, 2, 30], [4, 5], [6, 7, 8, 9, 10]]                          # a prompt token changed: its row moves
    with torch.no_grad():
        moved = sequence_logps(base, other, ANSWERS)
    assert float(moved[0]) != float(seq[0]) and torch.equal(moved[1:], seq[1:])


def test_the_reference_is_the_base_model_exactly():
    base, model = adapted()
    with torch.no_grad():
        want = sequence_logps(base, PROMPTS, ANSWERS)
        policy = sequence_logps(model, PROMPTS, ANSWERS)
    with reference(model):
        ref = sequence_logps(model, PROMPTS, ANSWERS)
        assert not ref.requires_grad
    assert torch.equal(ref, want)                                            # the adapter off: the base, bit for bit
    assert (policy - want).abs().max() > 1e-3                               # the adapter on: another model
    assert torch.equal(sequence_logps(model, PROMPTS, ANSWERS).detach(), policy)   # and on again afterwards


def test_the_reference_has_no_dropout_and_keeps_the_model_training():
    base = random_model(tiny(vocab_size=64, max_seq_len=48, dropout=0.5), std=0.1)
    with torch.no_grad():
        want = sequence_logps(base, PROMPTS, ANSWERS)                        # eval mode: no dropout
    model = add_lora(copy.deepcopy(base), LoRAConfig(rank=4)).train()       # training: dropout on
    with reference(model):
        first, second = sequence_logps(model, PROMPTS, ANSWERS), sequence_logps(model, PROMPTS, ANSWERS)
    assert torch.equal(first, want) and torch.equal(second, want)           # the same function every call
    assert model.training                                                    # the mode given back


def test_dpo_loss_against_a_hand_computation():
    pc, pr = torch.tensor([-1.0, -3.0]), torch.tensor([-2.0, -1.0])
    rc, rr = torch.tensor([-1.5, -2.0]), torch.tensor([-1.0, -1.5])
    loss, stats = dpo_loss(pc, pr, rc, rr, beta=0.5)
    m1 = 0.5 * ((-1.0 + 1.5) - (-2.0 + 1.0))                                # 0.75: chosen gained, rejected lost
    m2 = 0.5 * ((-3.0 + 2.0) - (-1.0 + 1.5))                                # -0.75: the other way round
    want = (math.log(1 + math.exp(-m1)) + math.log(1 + math.exp(-m2))) / 2   # -log sigmoid(m) = log(1 + e^-m)
    assert float(loss) == pytest.approx(want, rel=1e-6)
    assert stats["margin"] == pytest.approx((m1 + m2) / 2) and stats["accuracy"] == 0.5
    assert stats["chosen_reward"] == pytest.approx(0.5 * (0.5 - 1.0) / 2)
    same, start = dpo_loss(pc, pr, pc, pr, beta=0.1)                        # policy = reference: ln 2, margin 0
    assert float(same) == pytest.approx(math.log(2)) and start["margin"] == pytest.approx(0, abs=1e-6) and start["accuracy"] == 0
    assert float(dpo_loss(pc, pr, rc, rr, beta=2.0)[0]) != pytest.approx(want)   # beta matters


def test_the_nll_term_is_the_chosen_answers_loss_per_token():
    pc, pr = torch.tensor([-1.0, -3.0]), torch.tensor([-2.0, -1.0])
    rc, rr = torch.tensor([-1.5, -2.0]), torch.tensor([-1.0, -1.5])
    plain, _ = dpo_loss(pc, pr, rc, rr, beta=0.5)
    lengths = torch.tensor([2, 4])
    loss, stats = dpo_loss(pc, pr, rc, rr, beta=0.5, nll_coef=0.3, chosen_lengths=lengths)
    nll = (1.0 / 2 + 3.0 / 4) / 2                                            # -log p per token, averaged: 0.625
    assert stats["nll"] == pytest.approx(nll) and float(loss) == pytest.approx(float(plain) + 0.3 * nll)
    # its gradient raises the chosen answers' log-probabilities: d loss / d pc is more negative with the term
    pc.requires_grad_(True)
    grads = []
    for coef in (0.0, 1.0):
        pc.grad = None
        dpo_loss(pc, pr, rc, rr, 0.5, coef, lengths)[0].backward()
        grads.append(pc.grad.clone())
    assert torch.allclose(grads[1] - grads[0], -1.0 / lengths / 2)
    with pytest.raises(ValueError, match="needs chosen_lengths"):
        dpo_loss(pc, pr, rc, rr, nll_coef=1.0)


def test_with_the_nll_term_the_chosen_answers_become_likelier():
    """Plain DPO on pairs that share most tokens may lower both answers; with the NLL term the chosen rises."""
    problem = addition(1, 2)
    pairs = [Pair(problem, p, c + [30], c + [31]) for p, c in zip(PROMPTS, ANSWERS)]   # differ in the last token
    chosen_logp = {}
    for coef in (0.0, 1.0):
        model = add_lora(random_model(CFG, std=0.1), LoRAConfig(rank=4, alpha=8))
        objective = DPOObjective(model, pairs, beta=0.1, nll_coef=coef)
        start = float(objective.ref_chosen.sum())
        train(model, objective, None, TrainConfig(steps=5, batch_size=3, lr=1e-2, warmup=0, eval_every=5),
              progress=False)
        with torch.no_grad():
            chosen_logp[coef] = float(sequence_logps(model, PROMPTS, [p.chosen for p in pairs]).sum()) - start
        assert ("nll" in objective.log[0]) == (coef > 0)
    assert chosen_logp[1.0] > 0 and chosen_logp[1.0] > chosen_logp[0.0] + 0.5


def test_one_dpo_step_moves_the_policy_toward_the_chosen_answers():
    model = add_lora(random_model(CFG, std=0.1), LoRAConfig(rank=4, alpha=8))
    problem = addition(1, 2)
    pairs = [Pair(problem, p, c, r) for p, c, r in zip(PROMPTS, ANSWERS, [[20, 21], [22], [23, 24, 25]])]
    objective = DPOObjective(model, pairs, beta=0.1)
    before = objective.metrics(model)
    assert before["margin"] == 0 and before["loss"] == pytest.approx(math.log(2))   # B = 0: the policy is the ref
    train(model, objective, None, TrainConfig(steps=1, batch_size=3, lr=1e-2, warmup=0, eval_every=1),
          progress=False)
    after = objective.metrics(model)
    assert after["margin"] > 0 and after["accuracy"] > 0.5 and after["loss"] < math.log(2)
    assert len(objective.log) == 1 and objective.log[0]["loss"] == pytest.approx(math.log(2))


def test_preference_rules():
    problem = addition(1, 2)                                                 # target 3
    assert prefer_correct(problem, ["1 + 2 = 4", "1 + 2 = 3", "5"], [[1], [2], [3]]) == (1, 0)
    assert prefer_correct(problem, ["3", "3"], [[1], [2]]) is None           # all right: no pair
    assert prefer_correct(problem, ["4", "5"], [[1], [2]]) is None           # all wrong: no pair
    assert prefer_shorter(problem, ["a", "b", "c"], [[1, 2], [1], [1, 2, 3]]) == (1, 2)   # right or wrong
    assert prefer_shorter(problem, ["a", "b"], [[1], [2]]) is None


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(corpus_text(5000), 300)


def test_on_policy_pairs_are_seeded_and_follow_the_rule(tok):
    model = add_lora(random_model(tiny(vocab_size=300, max_seq_len=64), std=0.05), LoRAConfig(rank=2))
    problems = make_splits("addition", 16, 4, 4)["train"]         # some answers stop early, most run to 8 tokens
    pairs = make_pairs(model, tok, problems, n_samples=4, prefer="shorter", max_new_tokens=8, seed=0)
    again = make_pairs(model, tok, problems, n_samples=4, prefer="shorter", max_new_tokens=8, seed=0)
    assert pairs and pairs == again
    assert all(len(p.chosen) < len(p.rejected) for p in pairs)
    assert {p.problem for p in pairs} <= set(problems)
    kl = kl_to_reference(model, tok, problems[:4], max_new_tokens=6)       # B = 0: policy = reference
    assert kl["kl"] == 0 and kl["n"] == 4


@pytest.mark.parametrize("call, message", [
    (lambda m: token_logps(m, [[1]], [[]]), "an answer at least one token"),
    (lambda m: token_logps(m, [[1], [2]], [[3]]), "2 prompts but 1 answers"),
    (lambda m: token_logps(m, [[1] * 40], [[2] * 10]), "more than the model's max_seq_len"),
    (lambda m: token_logps(m, [[1]], [[64]]), r"row 0: token ids must be ints in \[0, 64\)"),
    (lambda m: token_logps(m, [[1], [-1]], [[2], [3]]), r"row 1: token ids must be ints in \[0, 64\)"),
    (lambda m: token_logps(m, [[1.5]], [[2]]), "token ids must be ints"),
    (lambda m: dpo_loss(torch.zeros(2), torch.zeros(3), torch.zeros(2), torch.zeros(2)), "the same length"),
    (lambda m: dpo_loss(*[torch.zeros(2)] * 4, beta=0), "beta must be"),
    (lambda m: dpo_loss(*[torch.zeros(2)] * 4, nll_coef=-1), "nll_coef must be"),
    (lambda m: DPOObjective(m, []), "no pair was found"),
    (lambda m: make_pairs(m, None, [addition(1, 2)], n_samples=1), "n_samples must be"),
    (lambda m: make_pairs(m, None, [addition(1, 2)], prefer="longer"), "prefer must be"),
])
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call(add_lora(random_model(CFG), LoRAConfig(rank=2)))
