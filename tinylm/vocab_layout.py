"""A BPE vocabulary's id layout, checked: which ids are bytes, merges and specials, each token's bytes capped."""

from __future__ import annotations

from typing import Any

from ._checks import is_int

MAX_TOKEN_BYTES = 4096                # longest token a file may describe (real vocabularies: < 300 bytes)
MAX_VOCAB_BYTES = 64 * 2**20          # all tokens together (SmolLM2: 0.4 MB)


def build_vocabulary(byte_ids: list[int | None], merge_ids: list[int], special_ids: dict[str, int],
                     merges: list[tuple[int, int]]) -> list[bytes]:
    """The bytes of every id, merge by merge, checking the layout and the size caps as it goes."""
    owner: dict[int, str] = {}
    for kind, ids in (("byte", byte_ids), ("merge", merge_ids), ("special", special_ids.values())):
        for i in ids:
            if i in owner:
                raise ValueError(f"id {i} is given twice (a {owner[i]} token and a {kind} token)")
            if i is not None:
                owner[i] = kind
    V = len(owner)
    if set(owner) != set(range(V)):
        missing = sorted(set(range(V)) - set(owner))[:5]
        raise ValueError(f"the ids must be 0 ... {V - 1} without gaps; missing {missing}")
    vocab: list[bytes | None] = [None] * V
    for b, i in enumerate(byte_ids):
        if i is not None:
            vocab[i] = bytes([b])
    for s, i in special_ids.items():
        vocab[i] = s.encode("utf-8")
    total = 0
    seen: set[tuple[int, int]] = set()
    made = [b is not None for b in vocab]          # ids a merge may join: bytes now, merge results later
    for i in special_ids.values():
        made[i] = False
    for r, m in enumerate(merges):
        if not (type(m) is tuple and len(m) == 2 and is_int(m[0]) and is_int(m[1])):
            raise ValueError(f"merge {r} must be a pair of ints, got {m!r}")
        a, b = m
        if not (0 <= a < V and 0 <= b < V and made[a] and made[b]):
            raise ValueError(f"merge {r} = {m} may only join tokens made before it (byte tokens and the results "
                             f"of merges 0 ... {r - 1}), never specials")
        if m in seen:
            raise ValueError(f"merges contain the same pair twice: {m}")
        seen.add(m)
        made[merge_ids[r]] = True
        new = vocab[a] + vocab[b]
        total += len(new)
        if len(new) > MAX_TOKEN_BYTES or total > MAX_VOCAB_BYTES:
            raise ValueError(f"merge {r} makes a token of {len(new):,} bytes ({total:,} bytes in all tokens so far); "
                             f"a tokenizer's tokens are capped at {MAX_TOKEN_BYTES:,} bytes each and "
                             f"{MAX_VOCAB_BYTES:,} in all: this is not a real vocabulary")
        vocab[merge_ids[r]] = new
    return vocab


def check_ids(name: str, ids: list[Any], n: int, allow_none: bool = False) -> list[int | None]:
    if len(ids) != n:
        raise ValueError(f"{name} must hold {n} ids, got {len(ids)}")
    for i in ids:
        if not ((i is None and allow_none) or (is_int(i) and i >= 0)):
            raise ValueError(f"{name} must hold ints >= 0{' or None' if allow_none else ''}, got {i!r}")
    return [None if i is None else int(i) for i in ids]


def check_specials(specials: Any) -> None:
    if isinstance(specials, str) or not isinstance(specials, (tuple, list)):
        raise ValueError(f"specials must be a tuple of strings such as ('<eos>',), got {specials!r}")
    if not all(isinstance(s, str) and s for s in specials):
        raise ValueError(f"specials must be non-empty strings, got {list(specials)!r}")
    if len(set(specials)) != len(specials):
        raise ValueError(f"specials must be distinct, got {list(specials)!r}")
