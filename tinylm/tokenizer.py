"""Byte-level BPE tokenizer (Sennrich et al., 2016; byte-level as in GPT-2, Radford et al., 2019).

    text ──► pre-tokenise (regex: words, numbers, punctuation, spaces) ──► UTF-8 bytes of each piece
         ──► apply the learned merges, earliest first ──► token ids

Id layout (vocab_size = 256 + n_merges + n_specials):

    0 ... 255                      the 256 byte values: any text can be encoded, nothing is "unknown"
    256 ... 255 + n_merges         merge i joins two earlier tokens into token 256 + i
    the last n_specials ids        special tokens such as <bos>, <|user|>, <|assistant|>, <eos>

Specials are control signals, not text: `encode(text)` treats the string "<eos>" as five ordinary
characters, and only `encode(text, allow_specials=True)` maps special strings to their ids. Merges never
produce a special id, so ordinary text can never forge one.
"""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter
from pathlib import Path

from ._checks import check_header, check_int, is_int

# GPT-2's split, written for Python's `re` (no \p{L}): an optional space followed by letters, or digits,
# or other symbols; English contractions; runs of whitespace. [^\W\d_] is "a letter": word characters
# minus digits and underscore. Every character falls into exactly one branch, so the pieces always
# join back to the text. Merges happen inside a piece only, so tokens never cross word boundaries.
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
DEFAULT_SPECIALS = ("<bos>", "<|user|>", "<|assistant|>", "<eos>")
FORMAT, VERSION = "tinylm-bpe", 1


class BPETokenizer:
    """Byte-level BPE. Build one with `BPETokenizer.train(text, vocab_size)` or `BPETokenizer.load(path)`."""

    def __init__(self, merges: list[tuple[int, int]], specials: tuple[str, ...] = DEFAULT_SPECIALS,
                 pattern: str = PATTERN):
        _check_merges(merges)
        _check_specials(specials)
        self.merges = [tuple(m) for m in merges]          # merges[i] = (left id, right id) -> id 256 + i
        self.ranks = {m: i for i, m in enumerate(self.merges)}  # pair -> merge order (lower merges first)
        self.specials = tuple(specials)
        self.pattern = pattern
        self._split = re.compile(pattern)
        n_ordinary = 256 + len(self.merges)
        self.special_ids = {s: n_ordinary + i for i, s in enumerate(self.specials)}
        # byte string of every ordinary token, built up merge by merge
        self._bytes = [bytes([i]) for i in range(256)]
        for a, b in self.merges:
            self._bytes.append(self._bytes[a] + self._bytes[b])
        longest_first = sorted(self.specials, key=len, reverse=True)   # so "<a>" can't shadow "<a><b>"
        self._special_split = (re.compile("(" + "|".join(map(re.escape, longest_first)) + ")")
                               if self.specials else None)
        self._cache: dict[str, list[int]] = {}  # piece -> ids; text repeats the same words again and again

    # -----------------------------------------------------------------------------------------
    # training
    # -----------------------------------------------------------------------------------------
    @classmethod
    def train(cls, text: str, vocab_size: int, specials: tuple[str, ...] = DEFAULT_SPECIALS) -> "BPETokenizer":
        """Learn vocab_size - 256 - len(specials) merges from text.

        Repeatedly joins the most frequent adjacent pair of tokens (ties: the smallest pair of ids).
        Counts are kept per distinct piece (word) times its frequency and updated incrementally after
        each merge, touching only the words that contain the merged pair. Stops early if no pair is left
        (tiny text), so the result's vocab_size can be smaller than asked.
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        check_int("vocab_size", vocab_size)
        specials = tuple(specials)
        _check_specials(specials)
        n_merges = vocab_size - 256 - len(specials)
        if n_merges < 0:
            raise ValueError(f"vocab_size ({vocab_size}) must be at least 256 bytes + {len(specials)} specials "
                             f"= {256 + len(specials)}")

        counts = Counter(re.findall(PATTERN, text))          # distinct piece -> how often it occurs
        words = [list(piece.encode("utf-8")) for piece in counts]
        freqs = list(counts.values())
        pair_counts: Counter = Counter()                       # (a, b) -> occurrences in the whole text
        where: dict[tuple[int, int], set[int]] = {}            # (a, b) -> indices of words containing it
        for w, (word, f) in enumerate(zip(words, freqs)):
            for pair in zip(word, word[1:]):
                pair_counts[pair] += f
                where.setdefault(pair, set()).add(w)
        heap = [(-c, pair) for pair, c in pair_counts.items()]  # max-heap by count; stale entries skipped
        heapq.heapify(heap)

        merges: list[tuple[int, int]] = []
        while len(merges) < n_merges and heap:
            neg, pair = heapq.heappop(heap)
            if pair_counts.get(pair, 0) != -neg:   # count changed since this entry was pushed
                continue
            new_id = 256 + len(merges)
            merges.append(pair)
            changed = set()
            for w in where.pop(pair, ()):
                old, f = words[w], freqs[w]
                new = _merge(old, pair, new_id)
                if len(new) == len(old):           # an earlier merge already consumed the pair here
                    continue
                for p in zip(old, old[1:]):        # remove the word's old pairs ...
                    pair_counts[p] -= f
                    changed.add(p)
                for p in zip(new, new[1:]):        # ... and add its new ones
                    pair_counts[p] += f
                    changed.add(p)
                    where.setdefault(p, set()).add(w)
                words[w] = new
            for p in changed:
                c = pair_counts[p]
                if c > 0:
                    heapq.heappush(heap, (-c, p))
                else:
                    del pair_counts[p]
        return cls(merges, specials)

    # -----------------------------------------------------------------------------------------
    # encoding and decoding
    # -----------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of ids: 256 bytes + merges + specials."""
        return 256 + len(self.merges) + len(self.specials)

    def encode(self, text: str, allow_specials: bool = False) -> list[int]:
        """Token ids of text.

        allow_specials=False (default): special strings such as "<eos>" are ordinary text.
        allow_specials=True: each special string in text becomes its single special id.
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        try:
            return self._encode(text, allow_specials)
        except UnicodeEncodeError as e:
            raise ValueError(f"text holds a lone surrogate {e.object[e.start:e.end]!r}, which has no UTF-8 encoding; "
                             "fix the text (e.g. decode its bytes with errors='replace')") from None

    def _encode(self, text: str, allow_specials: bool) -> list[int]:
        if not allow_specials or self._special_split is None:
            return self._encode_ordinary(text)
        ids: list[int] = []
        for part in self._special_split.split(text):   # the capture group keeps the specials as parts
            if part in self.special_ids:
                ids.append(self.special_ids[part])
            elif part:
                ids.extend(self._encode_ordinary(part))
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self._split.findall(text):
            cached = self._cache.get(piece)
            if cached is None:
                cached = self._encode_piece(piece)
                if len(self._cache) >= 100_000:   # bound the memory on endless new text
                    self._cache.clear()
                self._cache[piece] = cached
            ids.extend(cached)
        return ids

    def _encode_piece(self, piece: str) -> list[int]:
        """Apply merges to one piece in the order they were learned (lowest rank first)."""
        ids = list(piece.encode("utf-8"))
        while len(ids) > 1:
            pair = min(zip(ids, ids[1:]), key=lambda p: self.ranks.get(p, len(self.ranks)))
            rank = self.ranks.get(pair)
            if rank is None:
                break
            ids = _merge(ids, pair, 256 + rank)
        return ids

    def decode(self, ids: list[int]) -> str:
        """Text of ids. Specials decode to their strings.

        Ids from `encode` always decode to exactly the original text. An arbitrary id sequence (e.g.
        sampled from a model) can cut a multi-byte UTF-8 character; those invalid bytes become U+FFFD.
        """
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def token_bytes(self, id: int) -> bytes:
        """The bytes of one token (a special gives its string as UTF-8), e.g. for display."""
        if not is_int(id):
            try:
                id = int(id)  # torch integers
            except (TypeError, ValueError):
                raise ValueError(f"token ids must be ints, got {id!r}") from None
        if 0 <= id < len(self._bytes):
            return self._bytes[id]
        if len(self._bytes) <= id < self.vocab_size:
            return self.specials[id - len(self._bytes)].encode("utf-8")
        raise ValueError(f"token id {id} is outside the vocabulary [0, {self.vocab_size})")

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, specials={list(self.specials)})"

    # -----------------------------------------------------------------------------------------
    # saving and loading
    # -----------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "pattern": self.pattern,
                "specials": list(self.specials), "merges": [list(m) for m in self.merges]}

    def save(self, path: str | Path) -> None:
        """Write the tokenizer as JSON (format, version, pattern, specials, merges)."""
        Path(path).write_text(json.dumps(self.to_dict()), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "BPETokenizer":
        """Read a tokenizer saved by `save`; ValueError says what is wrong with a bad file."""
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is not a valid tokenizer file: not JSON ({e})") from None
        return cls.from_dict(d, source=str(path))

    @classmethod
    def from_dict(cls, d: dict, source: str = "tokenizer") -> "BPETokenizer":
        check_header(d, FORMAT, VERSION, source, "tokenizer file", required=("pattern", "specials", "merges"))
        if not isinstance(d["pattern"], str):
            raise ValueError(f"{source}: field 'pattern' must be a string")
        try:
            re.compile(d["pattern"])
        except re.error as e:
            raise ValueError(f"{source}: field 'pattern' is not a valid regular expression ({e})") from None
        if not isinstance(d["specials"], list):
            raise ValueError(f"{source}: field 'specials' must be a list of strings")
        if not isinstance(d["merges"], list):
            raise ValueError(f"{source}: field 'merges' must be a list of [left, right] id pairs")
        try:
            merges = [tuple(m) if isinstance(m, list) else m for m in d["merges"]]
            return cls(merges, tuple(d["specials"]), d["pattern"])
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of pair (left to right) in ids by new_id."""
    out, i, n = [], 0, len(ids)
    a, b = pair
    while i < n:
        if i < n - 1 and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _check_merges(merges) -> None:
    for i, m in enumerate(merges):
        if (not isinstance(m, tuple) or len(m) != 2
                or not all(is_int(x) for x in m)):
            raise ValueError(f"merge {i} must be a pair of ints, got {m!r}")
        if not all(0 <= x < 256 + i for x in m):
            raise ValueError(f"merge {i} = {m} may only join ids below {256 + i} (bytes and earlier merges)")
    if len(set(map(tuple, merges))) != len(merges):
        raise ValueError("merges contain the same pair twice")


def _check_specials(specials) -> None:
    if not all(isinstance(s, str) and s for s in specials):
        raise ValueError(f"specials must be non-empty strings, got {list(specials)!r}")
    if len(set(specials)) != len(specials):
        raise ValueError(f"specials must be distinct, got {list(specials)!r}")
