"""Log-probabilities of answers given their prompts, under the policy and under the reference (the adapter off).

    token_logps(model, prompts, answers)        (N, T) log p(answer token | prompt, the answer before it), and
                                                the (N, T) mask of answer positions (0 and False elsewhere)
    sequence_logps(model, prompts, answers)     (N,) log p(answer | prompt): the sum over the answer's tokens
    reference(model)                            `with reference(model):` the reference model of DPO and GRPO
    kl_to_reference(model, tok, problems)       KL(policy || reference) in nats per answer, on sampled answers

Only the answer's tokens count. A row is prompt + answer, right-padded, labelled -100 on the prompt and the
padding (`tinylm.train.pad_conversations`, the SFT loss mask), so position t scores the label at t + 1:

    x       p0   p1   p2   a0   a1   pad          the prompt's last token predicts the answer's first
    y       -    -    a0   a1   -    -            log p(a0 | p) + log p(a1 | p, a0) = log p(answer | prompt)

The reference is the same model with its LoRA adapter turned off (`tinylm.lora.adapter_disabled`): the base
weights, exactly, with no second copy of the model in memory. At step 0 (B = 0) policy and reference agree
bit for bit, so every KL starts at exactly 0.
"""

from __future__ import annotations

import operator

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from ._checks import IGNORE_INDEX, check_int
from .evaluate import reply_ids
from .lora import adapter_disabled
from .model import TinyLM
from .tasks import Problem, prompt_ids
from .tokenizer import BPETokenizer
from .train.loop import pad_conversations


def _is_id(t, vocab_size: int) -> bool:
    """t is an integer (a Python, NumPy or 0-d torch one; not a bool) in [0, vocab_size)."""
    if isinstance(t, bool):
        return False
    try:
        return 0 <= operator.index(t) < vocab_size
    except TypeError:
        return False


def _check_rows(prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], vocab_size: int) -> None:
    if not isinstance(prompts, (list, tuple)) or not isinstance(answers, (list, tuple)) or not prompts:
        raise ValueError("prompts and answers must be non-empty lists of token-id lists")
    if len(prompts) != len(answers):
        raise ValueError(f"got {len(prompts)} prompts but {len(answers)} answers: one answer per prompt")
    for n, (p, a) in enumerate(zip(prompts, answers)):
        if len(p) < 1 or len(a) < 1:
            raise ValueError(f"row {n}: a prompt needs at least one token (it predicts the answer's first) and "
                             f"an answer at least one token to score, got {len(p)} and {len(a)}")
        bad = [t for t in (*p, *a) if not _is_id(t, vocab_size)]
        if bad:
            raise ValueError(f"row {n}: token ids must be ints in [0, {vocab_size}) (the model's vocab_size), got "
                             f"{bad[0]!r}; encode the text with the model's own tokenizer")


def token_logps(model: TinyLM, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]],
                pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(logps (N, T), mask (N, T) bool): the log-probability of each answer token at the position that predicts
    it, 0 where mask is False (prompt and padding). Gradients flow when called outside torch.no_grad()."""
    _check_rows(prompts, answers, model.cfg.vocab_size)
    longest = max(len(p) + len(a) for p, a in zip(prompts, answers))
    if longest - 1 > model.cfg.max_seq_len:
        raise ValueError(f"a prompt + answer holds {longest} tokens, more than the model's max_seq_len + 1 = "
                         f"{model.cfg.max_seq_len + 1}; ask shorter questions or generate shorter answers")
    encoded = [(list(p) + list(a), [IGNORE_INDEX] * len(p) + list(a)) for p, a in zip(prompts, answers)]
    x, y = pad_conversations(encoded, pad_id=pad_id)                         # (N, T) each
    device = next(model.parameters()).device
    x, y = x.to(device), y.to(device)
    logits = model(x)[0]                                                     # (N, T, V)
    logps = -F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), ignore_index=IGNORE_INDEX,
                             reduction="none").view(y.shape)                 # (N, T), 0 where y is -100
    return logps, y != IGNORE_INDEX


def sequence_logps(model: TinyLM, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]],
                   pad_id: int = 0) -> torch.Tensor:
    """(N,) log p(answer | prompt) = the sum of the answer tokens' log-probabilities (`token_logps`)."""
    return token_logps(model, prompts, answers, pad_id)[0].sum(dim=-1)


@contextmanager
def reference(model: TinyLM) -> Iterator[TinyLM]:
    """`with reference(model):` the reference model, no gradients: the adapter off (`adapter_disabled`), in eval
    mode (no dropout, so the reference is the same function at every step), the model's mode restored after."""
    was_training = model.training
    model.eval()
    try:
        with adapter_disabled(model), torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def batched(fn, model: TinyLM, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]],
            batch_size: int = 32, pad_id: int = 0) -> torch.Tensor:
    """fn(model, prompts, answers, pad_id) -> (N,) over rows in batches of batch_size, under torch.no_grad()."""
    check_int("batch_size", batch_size, low=1)
    _check_rows(prompts, answers, model.cfg.vocab_size)
    with torch.no_grad():
        parts = [fn(model, prompts[i : i + batch_size], answers[i : i + batch_size], pad_id)
                 for i in range(0, len(prompts), batch_size)]
    return torch.cat(parts)


def kl_to_reference(model: TinyLM, tokenizer: BPETokenizer, problems: Sequence[Problem], max_new_tokens: int = 32,
                    seed: int = 0, batch_size: int = 32) -> dict:
    """KL(policy || reference) per answer, estimated on one answer per problem sampled from the policy
    (temperature 1, no filter): the mean of log π(y|x) - log π_ref(y|x) over y ~ π, in nats.

    Returns {"kl": the mean, "stderr": its standard error, "n": answers}. The estimate is unbiased but noisy
    (a single answer can give a negative term); it is 0 exactly while the policy is the reference. Answers cut
    at max_new_tokens count as they are."""
    if not problems or not all(isinstance(p, Problem) for p in problems):
        raise ValueError("problems must be a non-empty list of tinylm.tasks.Problem (make_splits makes them)")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(check_int("seed", seed, low=0))
    prompts = [prompt_ids(tokenizer, p) for p in problems]
    answers = reply_ids(model, tokenizer, prompts, max_new_tokens, batch_size, temperature=1.0, generator=generator)
    policy = batched(sequence_logps, model, prompts, answers, batch_size)
    with reference(model):
        ref = batched(sequence_logps, model, prompts, answers, batch_size)
    terms = (policy - ref).double()                                          # (N,)
    stderr = float(terms.std() / len(terms) ** 0.5) if len(terms) > 1 else float("nan")
    return {"kl": float(terms.mean()), "stderr": stderr, "n": len(terms)}
