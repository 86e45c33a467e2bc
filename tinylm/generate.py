"""Generating text: pick the next token from the logits, append it, repeat.

    prompt idx (B, T) ──► prefill: one forward over the whole prompt, filling the KV cache
                      ──► logits of the last position (B, V) ──► sample_next ──► token (B,)
                      ──► step: one forward of that single token (T = 1) against the cache ──► ...

Sampling (Holtzman et al., 2020, "The Curious Case of Neural Text Degeneration"):
    temperature  divide the logits by t: t < 1 sharpens the distribution, t > 1 flattens it, 0 is greedy
    top-k        keep only the k most likely tokens (Fan et al., 2018)
    top-p        keep the smallest set of most likely tokens whose total probability reaches p (nucleus)
They are applied in that order (as in Hugging Face): temperature, then top-k, then top-p on what remains.
Before all of them (and before greedy's argmax), an optional repetition penalty θ (Keskar et al., 2019, "CTRL")
lowers every token the text already holds: a seen token's logit z becomes z / θ if z > 0, z · θ if z < 0,
as transformers' RepetitionPenaltyLogitsProcessor does (the paper divides every seen logit by θ, which would
make a negative one more likely).
Ties are broken by token id: among equal logits the lower id counts as more likely, so every filter
keeps exactly the tokens it says it keeps, the same ones on every run.

Prompts of different lengths go in one batch with left padding (as in Hugging Face):

    left_pad([[5, 6, 7], [8, 9]], pad_id=0)  ->  idx  [[5, 6, 7],     attention_mask  [[1, 1, 1],
                                                      [0, 8, 9]]                       [0, 1, 1]]
    generate(model, idx, n, attention_mask=attention_mask)   every row continues from its last column

The model never attends to a pad and counts each row's positions from its first real token, so every row
gets the tokens it would get alone (`TinyLM.forward`'s attention_mask).

`stream(model, idx, n)` is the same loop for one prompt, yielding each token as it is chosen (a chat that
prints its reply as it comes, `python -m tinylm.chat`).

Shapes: B batch, T prompt length, V vocab. All helpers work on the last dim and are vectorised over the rest.
"""

from __future__ import annotations

from typing import Iterator

import torch

from ._checks import check_bool, check_int, check_number
from .fast import decoder
from .inputs import check_attention_mask, check_idx
from .model import TinyLM


# ---------------------------------------------------------------------------------------------
# Sampling helpers: pure functions of the logits, usable on a hand-made 5-token distribution.
# ---------------------------------------------------------------------------------------------
def _check_temperature(temperature: float) -> None:
    check_number("temperature", temperature, 0, hint=" (0 means greedy)")


def _check_top_k(top_k: int | None) -> None:
    if top_k is not None:
        check_int("top_k", top_k, low=1, span=">= 1", hint=" or None (no top-k filter)")


def _check_top_p(top_p: float | None) -> None:
    if top_p is not None:
        check_number("top_p", top_p, 0, 1, low_open=True, hint=" or None (no nucleus filter)")


def _check_repetition_penalty(penalty: float | None, name: str = "repetition_penalty") -> None:
    if penalty is not None:
        check_number(name, penalty, 0, low_open=True,
                     hint=" (1 means no penalty and CTRL suggests about 1.2; above 1 discourages tokens already "
                          "in the text, below 1 favours them) or None")


def _check_generator(generator: torch.Generator | None) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits (..., V) / temperature. temperature must be > 0 (greedy decoding is argmax, not t = 0 here)."""
    _check_temperature(temperature)
    if temperature == 0:
        raise ValueError("temperature must be > 0 to rescale logits; temperature 0 means greedy decoding: "
                         "use logits.argmax(-1) or sample_next(logits, temperature=0)")
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep exactly the k largest logits of (..., V), set the rest to -inf.

    Ties: a stable sort puts equal logits in token-id order, so at the boundary the lower ids are kept.
    k >= V keeps everything.
    """
    _check_top_k(k)
    if k >= logits.shape[-1]:
        return logits
    order = logits.argsort(dim=-1, descending=True, stable=True)       # (..., V) token ids, most likely first
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order[..., :k], True)
    return logits.masked_fill(~keep, float("-inf"))


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Lower every token that occurs in `seen`: its logit z becomes z / penalty if z > 0, z * penalty if z < 0.

    logits (..., V) float; seen (..., S) int64 token ids with the same leading dims (S may be 0): the prompt
    and what has been generated so far. A token is penalised once however often it occurs; the rest are
    unchanged. penalty > 1 discourages repeats, < 1 favours them, 1 changes nothing. CTRL (Keskar et al.,
    2019) divides every seen logit by the penalty; dividing a negative logit raises it, so this sign-aware
    form, transformers' RepetitionPenaltyLogitsProcessor (and llama.cpp's), multiplies those instead.
    """
    if penalty is None:
        raise ValueError("penalty must be a number > 0 (1 means no penalty), got None")
    _check_repetition_penalty(penalty, "penalty")
    if not isinstance(logits, torch.Tensor) or logits.dim() == 0 or not logits.is_floating_point():
        raise ValueError("logits must be a float tensor of shape (..., V)")
    if not isinstance(seen, torch.Tensor) or seen.dtype != torch.long:
        what = seen.dtype if isinstance(seen, torch.Tensor) else type(seen).__name__
        raise ValueError(f"seen must be an int64 tensor of token ids (torch.long), got {what}")
    if seen.dim() != logits.dim() or seen.shape[:-1] != logits.shape[:-1]:
        want = tuple(logits.shape[:-1]) + ("S",)
        raise ValueError(f"seen has shape {tuple(seen.shape)}, but logits {tuple(logits.shape)} need seen of shape "
                         f"{want}: one row of seen ids per row of logits".replace("'S'", "S"))
    vocab = logits.shape[-1]
    if seen.numel() and not bool(((seen >= 0) & (seen < vocab)).all()):
        raise ValueError(f"seen holds token ids outside [0, {vocab}), the vocabulary of the logits")
    if penalty == 1 or seen.shape[-1] == 0:
        return logits
    return _penalize(logits, seen, penalty)


def _penalize(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """apply_repetition_penalty without the checks. A repeated id writes the same value twice: no harm."""
    z = logits.gather(-1, seen)                                         # (..., S) logits of the seen tokens
    z = torch.where(z < 0, z * penalty, z / penalty)                    # both move away from likely
    return logits.scatter(-1, seen, z)                                  # (..., V)


NUCLEUS_CANDIDATES = 256  # top_p_filter looks for the nucleus among this many top tokens first


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose total probability is >= p.

    A token is dropped when the tokens ranked above it already hold probability >= p, so the top token
    always stays. Ties are ranked by token id (lower id first). p = 1 keeps everything.
    With a large vocabulary the nucleus is first sought among the NUCLEUS_CANDIDATES most likely tokens
    (a partial sort, 20x faster than sorting 49,152 logits); the full sort runs only when it is not there.
    """
    _check_top_p(p)
    if p == 1:
        return logits
    if logits.shape[-1] > NUCLEUS_CANDIDATES:
        kept = _top_p_among_candidates(logits, p, NUCLEUS_CANDIDATES)
        if kept is not None:
            return kept
    sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)  # (..., V)
    probs = sorted_logits.float().softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs                          # (..., V) probability ranked above
    drop_sorted = mass_before >= p
    drop = torch.empty_like(drop_sorted).scatter_(-1, order, drop_sorted)  # back to token-id order
    return logits.masked_fill(drop, float("-inf"))


def _top_p_among_candidates(logits: torch.Tensor, p: float, k: int) -> torch.Tensor | None:
    """top_p_filter when every row's nucleus lies within its k most likely tokens, else None.

    The nucleus found among the candidates is the true one when each kept token beats the k-th logit
    strictly: then no token outside the candidates ranks above it, ties included.
    """
    values, ids = logits.topk(k, dim=-1)                                # (..., k) ties in any order
    ids, by_id = ids.sort(dim=-1)                                       # rank as the full sort does:
    values, order = values.gather(-1, by_id).sort(dim=-1, descending=True, stable=True)  # value, then id
    ids = ids.gather(-1, order)
    logits32 = logits.float()
    probs = (values.float() - logits32.logsumexp(dim=-1, keepdim=True)).exp()  # (..., k) of the full softmax
    mass_before = probs.cumsum(dim=-1) - probs
    keep_sorted = mass_before < p                                       # (..., k)
    n_kept = keep_sorted.sum(dim=-1, keepdim=True)                      # (..., 1)
    last_kept = values.gather(-1, n_kept - 1)
    if not bool((n_kept < k).all() and (last_kept > values[..., -1:]).all()):
        return None
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, ids, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def _sample(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None,
            generator: torch.Generator | None) -> torch.Tensor:
    """sample_next without the argument checks (generate checks them once, not once per token)."""
    if temperature == 0:
        token = logits.argmax(dim=-1)                                   # greedy; ties go to the lowest id
        # argmax lands on a NaN if there is one, and on -inf only if the row is all -inf: checking the chosen
        # logit is checking the row, at no cost (scanning 49,152 logits twice took 0.36 ms per token)
        picked = logits.gather(-1, token.unsqueeze(-1))
        if bool((picked.isnan() | (picked == float("-inf"))).any()):
            _check_distribution(logits)
        return token
    _check_distribution(logits)
    logits = apply_temperature(logits.float(), temperature)            # (B, V) fp32, even for a bf16 model
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = logits.softmax(dim=-1).reshape(-1, logits.shape[-1])       # (B, V)
    if probs.isnan().any():                                             # +inf logits: inf / inf
        raise ValueError("the logits hold +inf, so the softmax is undefined; they came from an overflow "
                         "(a bf16/fp16 model, or weights that grew too large)")
    return torch.multinomial(probs, 1, generator=generator).view(logits.shape[:-1])


def _check_distribution(logits: torch.Tensor) -> None:
    """NaN logits, or a row of -inf only, leave nothing to choose: argmax would say token 0, silently."""
    if logits.isnan().any():
        raise ValueError("the logits hold NaN, so no token can be chosen (greedy decoding would pick id 0); "
                         "the model's weights or its input are not finite: check "
                         "all(p.isfinite().all() for p in model.parameters()); a diverged training run "
                         "leaves NaN weights, so train again with a lower lr")
    if (logits == float("-inf")).all(dim=-1).any():
        raise ValueError("a row of logits is -inf everywhere: every token is ruled out, none can be chosen")


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick one token id per row of logits (B, V) -> (B,) (or (V,) -> a 0-dim tensor).

    temperature 0 is greedy (argmax, top_k/top_p ignored); otherwise temperature, then top-k, then top-p,
    then one draw from the softmax. Pass a seeded `torch.Generator` to make the draws reproducible.
    """
    _check_temperature(temperature)
    _check_top_k(top_k)
    _check_top_p(top_p)
    if not isinstance(logits, torch.Tensor) or logits.dim() not in (1, 2) or not logits.is_floating_point():
        what = f"shape {tuple(logits.shape)}, dtype {logits.dtype}" if isinstance(logits, torch.Tensor) \
            else type(logits).__name__
        raise ValueError(f"logits must be a float tensor of shape (B, V) or (V,), got {what}")
    _check_generator(generator)
    return _sample(logits, temperature, top_k, top_p, generator)


# ---------------------------------------------------------------------------------------------
# The decoding loop
# ---------------------------------------------------------------------------------------------
def left_pad(prompts: list[list[int]], pad_id: int = 0,
             device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of different lengths -> idx (B, T) with pad_id in front of the shorter ones, and
    attention_mask (B, T) bool, True at real tokens; T is the longest prompt. Feed both to `generate`."""
    if not isinstance(prompts, (list, tuple)) or not prompts or not all(
            isinstance(p, (list, tuple)) and p and all(isinstance(i, int) for i in p) for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty lists of int token ids")
    check_int("pad_id", pad_id, low=0)
    T = max(len(p) for p in prompts)
    idx = torch.tensor([[pad_id] * (T - len(p)) + list(p) for p in prompts], dtype=torch.long, device=device)
    mask = torch.tensor([[False] * (T - len(p)) + [True] * len(p) for p in prompts], device=device)
    return idx, mask                                                      # (B, T) each


def generate(model: TinyLM, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None, eos_id: int | None = None,
             attention_mask: torch.Tensor | None = None, compiled: bool = False,
             repetition_penalty: float | None = None) -> torch.Tensor:
    """Continue each prompt of idx (B, T) by up to max_new_tokens tokens -> (B, T + new) token ids.

    use_cache=True: one prefill call over the prompt fills a KV cache preallocated for T + max_new_tokens
    positions, then every new token is a single-position call (T = 1). use_cache=False recomputes the
    whole sequence for every token (same tokens, much slower; for comparison).
    eos_id: rows that have produced it keep emitting it; generation stops early once every row has.
    attention_mask: (B, T) bool or 0/1 for prompts of different lengths, left-padded (pads first, then at
    least one real token; `left_pad` makes both): each row gets the tokens it would get alone (greedy;
    a sampled row also depends on the draws of the others, which share the generator). The output keeps
    the pads in front.
    compiled: run every one-token step without Python per layer (`tinylm.fast.decoder`): one C++ call for
    all layers where every layer is q4a8 and Llama-shaped, else one transformer block compiled by
    torch.compile. The same logits up to rounding, less overhead per step, after a compilation of seconds of
    CPU (the block: once per format, batch size, cache length bucket and thread count).
    repetition_penalty: θ for `apply_repetition_penalty` on every row's prompt and new tokens so far (pads
    are not text and are not counted), before temperature, filters and greedy alike; None or 1: off.
    Runs under torch.inference_mode() with the model in eval mode (its previous mode is restored).
    """
    _check_generate_args(model, idx, max_new_tokens, temperature, top_k, top_p, use_cache, generator, eos_id,
                         attention_mask)
    check_bool("compiled", compiled)
    _check_repetition_penalty(repetition_penalty)
    penalty = None if repetition_penalty in (None, 1) else repetition_penalty
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = _decode(model, idx, max_new_tokens, temperature, top_k, top_p, use_cache, generator, eos_id,
                          attention_mask, decoder(model) if compiled else model, penalty)
    finally:
        model.train(was_training)
    return out.clone()  # a normal tensor again: inference tensors cannot be fed to a forward that trains


def _decode(model: TinyLM, idx: torch.Tensor, max_new_tokens: int, temperature: float, top_k: int | None,
            top_p: float | None, use_cache: bool, generator: torch.Generator | None,
            eos_id: int | None, attention_mask: torch.Tensor | None, forward,
            penalty: float | None = None) -> torch.Tensor:
    B, T = idx.shape
    out = idx.new_empty(B, T + max_new_tokens)                          # (B, T + new), filled as we go
    out[:, :T] = idx
    if max_new_tokens == 0:
        return out
    mask = None                                                         # no pad: the plain causal path
    if attention_mask is not None and not bool(attention_mask.all()):
        mask = torch.ones(B, T + max_new_tokens, dtype=torch.bool, device=idx.device)  # new tokens are real
        mask[:, :T] = attention_mask.bool()
    cache = forward.new_cache(B, T + max_new_tokens) if use_cache else None  # the model's, or CompiledDecoder's
    finished = torch.zeros(B, dtype=torch.bool, device=idx.device) if eos_id is not None else None
    logits = forward(idx, cache=cache, attention_mask=_upto(mask, T))[0][:, -1]  # (B, V) prefill (or full pass)
    for t in range(T, T + max_new_tokens):
        if penalty is not None:                                         # first, as in transformers
            # (B, t) the text so far; a pad is replaced by the row's last prompt token, which is seen anyway
            seen = out[:, :t] if mask is None else torch.where(mask[:, :t], out[:, :t], out[:, T - 1 : T])
            logits = _penalize(logits, seen, penalty)
        token = _sample(logits, temperature, top_k, top_p, generator)   # (B,)
        if finished is not None:
            token = token.masked_fill(finished, eos_id)                 # finished rows keep emitting eos
            finished |= token == eos_id
        out[:, t] = token
        if t == T + max_new_tokens - 1:
            break                                                       # the last token needs no forward
        if finished is not None and bool(finished.all()):
            return out[:, : t + 1]
        seen = _upto(mask, t + 1)                                       # (B, t + 1) or None
        if use_cache:
            logits = forward(out[:, t : t + 1], cache=cache, attention_mask=seen)[0][:, -1]  # (B, V) one position
        else:
            logits = forward(out[:, : t + 1], attention_mask=seen)[0][:, -1]  # (B, V) recompute everything
    return out


def _upto(mask: torch.Tensor | None, n: int) -> torch.Tensor | None:
    return None if mask is None else mask[:, :n]


def _check_generate_args(model, idx, max_new_tokens, temperature, top_k, top_p, use_cache, generator,
                         eos_id, attention_mask) -> None:
    if not isinstance(model, TinyLM):
        raise ValueError(f"model must be a tinylm.TinyLM, got {type(model).__name__}")
    check_idx(idx, model.cfg.vocab_size)
    device = model.embed_tokens.weight.device
    for name, t in (("idx", idx), ("attention_mask", attention_mask)):
        if isinstance(t, torch.Tensor) and t.device != device:
            raise ValueError(f"{name} is on {t.device}, the model on {device}; move it with {name}.to({str(device)!r})")
    if idx.shape[1] == 0:
        raise ValueError("idx must hold at least one prompt token per row (e.g. a <bos> id), got time length 0")
    check_int("max_new_tokens", max_new_tokens, low=0)
    _check_temperature(temperature)
    _check_top_k(top_k)
    _check_top_p(top_p)
    check_bool("use_cache", use_cache)
    _check_generator(generator)
    vocab = model.cfg.vocab_size
    if eos_id is not None:
        check_int("eos_id", eos_id, 0, vocab - 1, span=f"in [0, vocab_size={vocab})", hint=" or None")
    if attention_mask is not None:
        check_attention_mask(attention_mask, tuple(idx.shape))
        real = attention_mask.long()                                    # (B, T)
        if not bool(real[:, -1].all()) or bool((real[:, 1:] < real[:, :-1]).any()):
            raise ValueError("attention_mask must be left-padded: in every row pads (0) first, then the prompt "
                             "(1) up to the last column, at least one real token; build it with left_pad")
    T, limit = idx.shape[1], model.cfg.max_seq_len
    if T + max_new_tokens > limit:
        fix = (f"ask for at most {max(limit - T, 0)} new tokens, or keep only the last {limit - max_new_tokens} prompt "
               f"tokens (idx[:, -{limit - max_new_tokens}:])" if max_new_tokens < limit else
               "max_new_tokens alone must stay below max_seq_len; generate in pieces with a cropped prompt")
        raise ValueError(f"prompt length {T} + max_new_tokens {max_new_tokens} = {T + max_new_tokens} exceeds the "
                         f"model's max_seq_len ({limit}); {fix}, or build the model with a larger max_seq_len")


def stream(model: TinyLM, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
           stop_ids: frozenset[int] | set[int] = frozenset(),
           repetition_penalty: float | None = None, compiled: bool = False) -> Iterator[int]:
    """`generate` for one prompt idx (1, T), one token at a time: yields each new id as soon as it is chosen.

    Stops before a token of stop_ids (not yielded) or after max_new_tokens. The same cached decoding as
    generate (repetition_penalty included), so it yields the tokens generate returns (with the same generator
    state). The model is in eval mode while the stream is open (its previous mode comes back when it ends or
    is closed); each forward runs under torch.inference_mode(), which does not leak into the caller between
    tokens. compiled: each one-token step through `tinylm.fast.decoder`, as in generate.
    """
    _check_generate_args(model, idx, max_new_tokens, temperature, top_k, top_p, True, generator, None, None)
    _check_repetition_penalty(repetition_penalty)
    check_bool("compiled", compiled)
    penalty = None if repetition_penalty in (None, 1) else repetition_penalty
    if idx.shape[0] != 1:
        raise ValueError(f"stream takes one prompt, idx of shape (1, T), got {tuple(idx.shape)}; use generate "
                         "for a batch")
    if max_new_tokens == 0:
        return
    was_training = model.training
    model.eval()
    try:
        T = idx.shape[1]
        seen = idx.new_empty(1, T + max_new_tokens)                          # (1, T + new) the text so far
        seen[:, :T] = idx
        forward = decoder(model) if compiled else model
        with torch.inference_mode():
            cache = forward.new_cache(1, T + max_new_tokens)                 # the model's, or CompiledDecoder's
            logits = forward(idx, cache=cache)[0][:, -1]                     # (1, V) prefill
        for t in range(max_new_tokens):
            with torch.inference_mode():
                if penalty is not None:
                    logits = _penalize(logits, seen[:, : T + t], penalty)
                token = _sample(logits, temperature, top_k, top_p, generator)  # (1,)
            if int(token) in stop_ids:
                return
            seen[:, T + t] = token
            yield int(token)
            if t < max_new_tokens - 1:
                with torch.inference_mode():
                    logits = forward(token[:, None], cache=cache)[0][:, -1]  # (1, V) one position
    finally:
        model.train(was_training)
