"""Baselines a trained model must beat, in bits per byte of held-out text: counts and a compressor.

    unigram_bits_per_byte(tok, train, val)   each token by its frequency in train (add-one smoothing)
    bigram_bits_per_byte(tok, train, val)    each token given the one before, counted in train
    xz_bits_per_byte(train, val)             what xz adds to compress val after train: xz "given" train

The count models are scored like `tinylm.train.measure.text_bits_per_byte` scores a model: every token of
val but the first is predicted, and the bytes are those of the predicted tokens, so the three figures are
comparable with a model's. The bigram interpolates absolute discounting (d = 0.75, as in Kneser and Ney's
smoothing) with the unigram: P(w | v) = max(c(v, w) - d, 0) / c(v) + d * n(v) / c(v) * P(w), where n(v) is the
number of distinct tokens seen after v; a v never seen in train falls back to P(w). Nothing is tuned on val.
"""

from __future__ import annotations

import lzma
import math

import torch

from ._checks import check_number
from .tokenizer import BPETokenizer

DISCOUNT = 0.75
XZ_PRESET = 9 | lzma.PRESET_EXTREME   # xz -9e: its dictionary (64 MiB) holds the whole training text


def train_ids(tokenizer: BPETokenizer, train: str) -> torch.Tensor:
    """train's ids under tokenizer: pass them as `train` to score several texts and encode train once."""
    return _ids(tokenizer, train, "train", 1)


def _ids(tokenizer: BPETokenizer, text: str | torch.Tensor, what: str, least: int) -> torch.Tensor:
    if what == "train" and isinstance(text, torch.Tensor):
        if text.dtype != torch.long or text.dim() != 1:
            raise ValueError(f"train ids must be a 1-D long tensor (from baselines.train_ids), got {text.dtype} "
                             f"of shape {tuple(text.shape)}")
        ids = text
    elif not isinstance(text, str):
        raise TypeError(f"{what} must be a str of text, got {type(text).__name__}")
    else:
        ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    if len(ids) and not 0 <= int(ids.min()) <= int(ids.max()) < tokenizer.vocab_size:
        raise ValueError(f"{what} holds ids outside 0..{tokenizer.vocab_size - 1}: encode it with this tokenizer")
    if len(ids) < least:
        raise ValueError(f"{what} holds {len(ids)} tokens; give it at least {least} "
                         "(the first token of val is never predicted)")
    return ids


def _scored_bytes(tokenizer: BPETokenizer, ids: torch.Tensor) -> int:
    lengths = {}
    for i in ids.tolist():
        if i not in lengths:
            lengths[i] = len(tokenizer.token_bytes(i))
    return sum(lengths[i] for i in ids.tolist())


def unigram_probs(train_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(V,) float64: each id's count in train_ids plus one, over the total (add-one: no id has probability 0)."""
    counts = torch.bincount(train_ids, minlength=vocab_size).double()
    return (counts + 1) / (counts.sum() + vocab_size)


def bigram_probs(train_ids: torch.Tensor, prev: torch.Tensor, nxt: torch.Tensor, vocab_size: int,
                 discount: float = DISCOUNT) -> torch.Tensor:
    """float64 P(nxt | prev) for each pair (prev[i], nxt[i]) under train_ids' bigram counts, absolute
    discounting over the unigram. Counts are kept sparse (only the pairs train has), so a vocabulary of any
    size costs memory in proportion to train, not V x V."""
    check_number("discount", discount, low=0.0, high=1.0, low_open=True)
    uni = unigram_probs(train_ids, vocab_size)
    pairs, pair_counts = torch.unique(train_ids[:-1] * vocab_size + train_ids[1:], return_counts=True)
    after = torch.bincount(train_ids[:-1], minlength=vocab_size).double()          # c(v)
    distinct = torch.bincount(pairs // vocab_size, minlength=vocab_size).double()  # n(v)
    asked = prev * vocab_size + nxt
    where = torch.searchsorted(pairs, asked).clamp(max=len(pairs) - 1)
    counted = torch.where(pairs[where] == asked, pair_counts[where], 0).double()   # c(prev, nxt)
    c_prev = after[prev]
    seen = c_prev > 0
    c_prev = c_prev.clamp(min=1)
    probs = (counted - discount).clamp(min=0) / c_prev + discount * distinct[prev] / c_prev * uni[nxt]
    return torch.where(seen, probs, uni[nxt])


def _per_byte(nats: float, scored_bytes: int) -> float:
    return nats / math.log(2) / scored_bytes


def unigram_bits_per_byte(tokenizer: BPETokenizer, train: str | torch.Tensor, val: str) -> tuple[float, int, int]:
    """Bits per byte of val's tokens (all but the first) under train's add-one token frequencies
    -> (bits per byte, bytes scored, tokens scored). train: the text, or its `train_ids`."""
    train_ids, val_ids = _ids(tokenizer, train, "train", 1), _ids(tokenizer, val, "val", 2)
    probs = unigram_probs(train_ids, tokenizer.vocab_size)
    target = val_ids[1:]
    n_bytes = _scored_bytes(tokenizer, target)
    return _per_byte(-probs[target].log().sum().item(), n_bytes), n_bytes, len(target)


def bigram_bits_per_byte(tokenizer: BPETokenizer, train: str | torch.Tensor, val: str,
                         discount: float = DISCOUNT) -> tuple[float, int, int]:
    """Bits per byte of val's tokens, each given the token before it, under train's bigram counts
    (`bigram_probs`) -> (bits per byte, bytes scored, tokens scored). train: the text, or its `train_ids`."""
    train_ids, val_ids = _ids(tokenizer, train, "train", 2), _ids(tokenizer, val, "val", 2)
    target = val_ids[1:]
    probs = bigram_probs(train_ids, val_ids[:-1], target, tokenizer.vocab_size, discount)
    n_bytes = _scored_bytes(tokenizer, target)
    return _per_byte(-probs.log().sum().item(), n_bytes), n_bytes, len(target)


def xz_bits_per_byte(train: str, val: str, preset: int = XZ_PRESET) -> tuple[float, int]:
    """Bits per byte xz needs for val once it has seen train: 8 x (|xz(train + val)| - |xz(train)|) / |val|
    -> (bits per byte, bytes of val). With train = "" it is xz on val alone."""
    for what, text in (("train", train), ("val", val)):
        if not isinstance(text, str):
            raise TypeError(f"{what} must be a str of text, got {type(text).__name__}")
    if not val:
        raise ValueError("val is empty: give the held-out text to score")
    before, after = train.encode(), val.encode()
    grown = len(lzma.compress(before + after, preset=preset))
    alone = len(lzma.compress(before, preset=preset)) if before else 0
    return 8 * (grown - alone) / len(after), len(after)
