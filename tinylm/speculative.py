"""Speculative greedy decoding: prompt-lookup drafts, checked in one forward pass, the KV cache rolled back.

    tokens so far   ... the cat sat on the mat . the cat          last n-gram "the cat" seen before:
    draft           sat on the mat                                 the k tokens that followed it there
    one forward     [cat] sat on the mat   (T = 1 + k positions, against the cache)
    model's argmax  sat on  a   ...        after each position: what plain greedy decoding would choose
    keep            sat on a               the draft while it agrees, then the model's own token
    cache.pos       rolled back to the kept tokens: the static cache's later slots are overwritten next time

Every kept token is the model's argmax given all the tokens before it, so the output is plain greedy decoding's
(Leviathan et al., 2023, "Fast Inference from Transformers via Speculative Decoding"; Chen et al., 2023), while
one forward can yield up to k + 1 tokens. Decoding is bound by reading the weights once per forward, and a
forward over k + 1 positions reads them once too. The draft costs nothing: it is looked up in the text itself
(prompt lookup decoding, Saxena, 2023), so it pays off where the output repeats the prompt (a summary, an edit,
code) and costs one wider forward per token where it does not.
Floating point: the verifying forward sums over several positions at once, in another order than the one-token
steps of `generate`; an argmax that two tokens tie to the last bit could go either way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._checks import check_int
from .generate import _check_generate_args, _sample
from .model import TinyLM

Draft = Callable[[list[int], int], list[int]]   # (tokens so far, at most k) -> proposed next tokens


def prompt_lookup_draft(tokens: list[int], k: int, max_ngram: int = 3) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the sequence's last n-gram, trying
    n = max_ngram down to 1; [] when no n-gram recurs."""
    for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
        tail = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):          # latest occurrence first, not the tail itself
            if tokens[start : start + n] == tail:
                return tokens[start + n : start + n + k]
    return []


@torch.inference_mode()
def speculative_generate(model: TinyLM, idx: torch.Tensor, max_new_tokens: int, k: int = 8,
                         draft: Draft = prompt_lookup_draft, eos_id: int | None = None
                         ) -> tuple[torch.Tensor, dict[str, int]]:
    """Greedy decoding of one prompt idx (1, T) -> (1, T + new) ids, the same as
    `generate(model, idx, max_new_tokens, temperature=0, eos_id=eos_id)`, and the statistics: `drafted` (tokens
    proposed), `accepted` (of those, kept), `forwards` (model calls after the prefill), `new` (tokens made).

    k: most tokens drafted per forward. draft(tokens, k): the drafter (default `prompt_lookup_draft`).
    """
    _check_generate_args(model, idx, max_new_tokens, 0.0, None, None, True, None, eos_id, None)
    check_int("k", k, low=1)
    if idx.shape[0] != 1:
        raise ValueError(f"speculative_generate decodes one prompt at a time, got a batch of {idx.shape[0]}; "
                         "call it once per row")
    was_training = model.training
    model.eval()
    try:
        out, stats = _speculate(model, idx, max_new_tokens, k, draft, eos_id)
    finally:
        model.train(was_training)
    return torch.tensor([out], dtype=idx.dtype, device=idx.device), stats


def _greedy(logits: torch.Tensor) -> torch.Tensor:
    """argmax over the last dim, as generate's greedy step: NaN logits raise instead of choosing id 0."""
    return _sample(logits, 0.0, None, None, None)


def _speculate(model, idx, max_new_tokens, k, draft, eos_id):
    T = idx.shape[1]
    tokens = idx[0].tolist()
    stats = {"drafted": 0, "accepted": 0, "forwards": 0, "new": 0}
    if max_new_tokens == 0:
        return tokens, stats
    cache = model.new_cache(1, min(T + max_new_tokens + k, model.cfg.max_seq_len))
    tokens.append(int(_greedy(model(idx, cache=cache)[0][:, -1])))      # prefill: the first new token
    while len(tokens) - T < max_new_tokens and tokens[-1] != eos_id:
        room = min(max_new_tokens - (len(tokens) - T) - 1, cache.max_len - cache.pos - 1, k)
        proposal = [int(t) for t in draft(tokens, room)][:room] if room > 0 else []
        start = cache.pos                                                # the last token is not cached yet
        x = torch.tensor([tokens[-1:] + proposal], device=idx.device)   # (1, 1 + n)
        choice = _greedy(model(x, cache=cache)[0][0]).tolist()          # (1 + n,) greedy after each position
        kept = 0
        while kept < len(proposal) and proposal[kept] == choice[kept]:
            kept += 1
        tokens += proposal[:kept] + [choice[kept]]
        cache.pos = start + 1 + kept                                     # roll back past the rejected drafts
        stats["drafted"] += len(proposal)
        stats["accepted"] += kept
        stats["forwards"] += 1
    if eos_id is not None and eos_id in tokens[T:]:
        tokens = tokens[: T + tokens[T:].index(eos_id) + 1]             # generate stops at the first eos
    tokens = tokens[: T + max_new_tokens]
    stats["new"] = len(tokens) - T
    return tokens, stats
