"""Byte-level BPE tokenizer (Sennrich et al., 2016; byte-level as in GPT-2, Radford et al., 2019).

    text ──► pre-tokenise (a known split pattern: words, numbers, punctuation, spaces) ──► UTF-8 bytes
         ──► the id of each byte ──► apply the learned merges, lowest rank first ──► token ids

The course's id layout (what `train` makes, and every argument's default):

    0 ... 255                      the 256 byte values: any text can be encoded, nothing is "unknown"
    256 ... 255 + n_merges         merge i joins two earlier tokens into token 256 + i
    the last n_specials ids        special tokens such as <bos>, <|user|>, <|assistant|>, <eos>

A real model's file lays the same three kinds of ids out its own way (`byte_ids`, `merge_ids`,
`special_ids`): SmolLM2 puts its 17 specials first, the byte tokens at 17 ... 251 and merge i at 252 + i,
and has no token for 21 of the 256 byte values (text holding them loses those bytes, in every
implementation; `tinylm.pretrained` builds it from the file).

Specials are control signals, not text: `encode(text)` treats the string "<eos>" as five ordinary
characters, and only `encode(text, allow_specials=True)` maps special strings to their ids. Merges never
produce a special id, so ordinary text can never forge one.

A tokenizer file is data, never code: its split pattern is one of SPLIT_PATTERNS, named
(`tinylm.split_patterns`), and token lengths are capped (MAX_TOKEN_BYTES, MAX_VOCAB_BYTES:
`tinylm.vocab_layout`), so that a few hundred bytes of merges cannot describe terabytes.
"""

from __future__ import annotations

import heapq
import json
import operator
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from ._checks import check_bool, check_header, check_int, is_int
from ._loading import as_path, unique_keys
from .chat_template import COURSE, ChatTemplate
from .split_patterns import (GPT2_PATTERN, LLAMA3_PATTERN, PATTERN, QWEN2_PATTERN, SMOLLM_PATTERN,  # noqa: F401
                             SPLIT_PATTERNS, compile_pattern, split_pattern)
from .vocab_layout import MAX_TOKEN_BYTES, MAX_VOCAB_BYTES, build_vocabulary, check_ids, check_specials  # noqa: F401

DEFAULT_SPECIALS = ("<bos>", "<|user|>", "<|assistant|>", "<eos>")
FORMAT, VERSION = "tinylm-bpe", 2     # version 1 files (the course's layout only) still load
MAX_FILE_BYTES = 32 * 2**20           # a tokenizer file (SmolLM2's: 1 MB; parsing takes ~10x its size in memory)
_CACHE_ITEMS, _CACHE_PIECE = 100_000, 256   # encoded pieces kept (short pieces only)


class BPETokenizer:
    """Byte-level BPE. Build one with `BPETokenizer.train(text, vocab_size)`, `BPETokenizer.load(path)`,
    or from a model file (`tinylm.pretrained.load_gguf`).

    merges[i] = (left id, right id) is merge i, applied in this order; it makes token merge_ids[i].
    byte_ids[b] is the token of byte value b (None: no token, the byte is dropped); special_ids[s] the id of
    special s. Unset, they give the course's layout. Every id below vocab_size is one of the three kinds.
    bos / eos name the specials that begin and end a sequence; chat_template formats conversations
    (default: the course's template when the course's specials are there).
    """

    def __init__(self, merges: list[tuple[int, int]], specials: tuple[str, ...] = DEFAULT_SPECIALS,
                 pattern: str = "tinylm", *, byte_ids: Iterable[int | None] | None = None,
                 merge_ids: Iterable[int] | None = None, special_ids: Iterable[int] | None = None,
                 bos: str | None = None, eos: str | None = None, chat_template: ChatTemplate | None = None):
        check_specials(specials)
        self.specials = tuple(specials)
        self.pattern_name, self.pattern = split_pattern(pattern)
        self._split = compile_pattern(self.pattern)
        if not isinstance(merges, (list, tuple)):
            raise ValueError(f"merges must be a list of (left id, right id) pairs, got {type(merges).__name__}")
        self.merges = [tuple(m) if type(m) is list else m for m in merges]   # JSON gives lists
        self.byte_ids = check_ids("byte_ids", list(range(256)) if byte_ids is None else list(byte_ids), 256,
                                  allow_none=True)
        n_ordinary = len(set(self.byte_ids) - {None}) + len(self.merges)
        self.merge_ids = check_ids("merge_ids", list(range(n_ordinary - len(self.merges), n_ordinary))
                                   if merge_ids is None else list(merge_ids), len(self.merges))
        ids = check_ids("special_ids", list(range(n_ordinary, n_ordinary + len(self.specials)))
                        if special_ids is None else list(special_ids), len(self.specials))
        self.special_ids = dict(zip(self.specials, ids))
        # id -> bytes (a special: its string as UTF-8)
        self._bytes = build_vocabulary(self.byte_ids, self.merge_ids, self.special_ids, self.merges)
        self.merges = [(int(a), int(b)) for a, b in self.merges]   # numpy ints -> int
        V = len(self._bytes)
        self._byte_to_id = [-1 if i is None else i for i in self.byte_ids]
        self._ranks = {a * V + b: r for r, (a, b) in enumerate(self.merges)}   # an int key per pair: fast lookups
        self.bos = self._special_name("bos", bos, "<bos>")
        self.eos = self._special_name("eos", eos, "<eos>")
        if chat_template is None and set(COURSE.specials) <= set(self.specials):
            chat_template = COURSE
        if chat_template is not None and not isinstance(chat_template, ChatTemplate):
            raise ValueError(f"chat_template must be a tinylm ChatTemplate or None, got {type(chat_template).__name__}")
        self.chat_template = chat_template
        longest_first = sorted(self.specials, key=len, reverse=True)   # so "<a>" can't shadow "<a><b>"
        self._special_split = (re.compile("(" + "|".join(map(re.escape, longest_first)) + ")")
                               if self.specials else None)
        self._cache: dict[str, list[int]] = {}  # piece -> ids; text repeats the same words again and again

    def _special_name(self, what: str, given: str | None, default: str) -> str | None:
        if given is None:
            return default if default in self.special_ids else None
        if not isinstance(given, str) or given not in self.special_ids:
            raise ValueError(f"{what} must be one of the specials {list(self.specials)}, got {given!r}")
        return given

    # -----------------------------------------------------------------------------------------
    # training
    # -----------------------------------------------------------------------------------------
    @classmethod
    def train(cls, text: str, vocab_size: int, specials: tuple[str, ...] = DEFAULT_SPECIALS) -> "BPETokenizer":
        """Learn vocab_size - 256 - len(specials) merges from text, in the course's layout and split pattern.

        Repeatedly joins the most frequent adjacent pair of tokens (ties: the smallest pair of ids).
        Counts are kept per distinct piece (word) times its frequency and updated incrementally after
        each merge, touching only the words that contain the merged pair. Stops early if no pair is left
        (tiny text), so the result's vocab_size can be smaller than asked.
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        check_int("vocab_size", vocab_size)
        check_specials(specials)
        specials = tuple(specials)
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
        """Number of ids: byte tokens + merges + specials (256 + merges + specials in the course's layout)."""
        return len(self._bytes)

    @property
    def bos_id(self) -> int | None:
        return None if self.bos is None else self.special_ids[self.bos]

    @property
    def eos_id(self) -> int | None:
        return None if self.eos is None else self.special_ids[self.eos]

    def encode(self, text: str, allow_specials: bool = False) -> list[int]:
        """Token ids of text (no BOS or EOS added).

        allow_specials=False (default): special strings such as "<eos>" are ordinary text.
        allow_specials=True: each special string in text becomes its single special id (transformers'
        default for a tokenizer's specials).
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        check_bool("allow_specials", allow_specials)
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
        cache = self._cache
        for piece in self._split.findall(text):
            cached = cache.get(piece)
            if cached is None:
                cached = self._encode_piece(piece)
                if len(piece) <= _CACHE_PIECE:
                    if len(cache) >= _CACHE_ITEMS:   # bound the memory on endless new text
                        cache.clear()
                    cache[piece] = cached
            ids.extend(cached)
        return ids

    def _encode_piece(self, piece: str) -> list[int]:
        """Apply the merges to one piece, lowest rank first; equal pairs left to right.

        A heap of (rank, position) over a linked list of the piece's tokens: each merge costs O(log n), so a
        piece of a million letters takes seconds, not hours (rescanning for the best pair after every merge
        is quadratic). An entry is the int rank << 32 | position (fast to compare); it is stale once the
        token at its position was merged away or the pair there changed (a pair has exactly one rank).
        """
        to_id = self._byte_to_id
        sym = [to_id[b] for b in piece.encode("utf-8")]
        if -1 in sym:                         # bytes without a token (SmolLM2 has 21): dropped
            sym = [s for s in sym if s >= 0]
        n = len(sym)
        if n < 2:
            return sym
        rank, merge_ids, V = self._ranks.get, self.merge_ids, len(self._bytes)
        nxt = list(range(1, n + 1))           # the token after position i (n: none)
        prv = list(range(-1, n - 1))          # the token before position i (-1: none)
        heap = [r << 32 | i for i in range(n - 1) if (r := rank(sym[i] * V + sym[i + 1])) is not None]
        heapq.heapify(heap)
        pop, push, low = heapq.heappop, heapq.heappush, (1 << 32) - 1
        while heap:
            entry = pop(heap)
            r, i = entry >> 32, entry & low
            j = nxt[i]
            if sym[i] < 0 or j >= n or rank(sym[i] * V + sym[j]) != r:
                continue                       # stale
            sym[i], sym[j] = merge_ids[r], -1  # the right token joins the left one
            k = nxt[j]
            nxt[i] = k
            if k < n:
                prv[k] = i
                if (r2 := rank(sym[i] * V + sym[k])) is not None:
                    push(heap, r2 << 32 | i)
            p = prv[i]
            if p >= 0 and (r2 := rank(sym[p] * V + sym[i])) is not None:
                push(heap, r2 << 32 | p)
        return [s for s in sym if s >= 0]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids (a list of ints). Specials decode to their strings.

        Ids from `encode` decode to exactly the original text (bytes that have no token are lost). An
        arbitrary id sequence (e.g. sampled from a model) can cut a multi-byte UTF-8 character; those invalid
        bytes become U+FFFD.
        """
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise ValueError(f"ids must be a list of token ids (ints), got {type(ids).__name__}; "
                             "to turn text into ids use encode()")
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def token_bytes(self, id: int) -> bytes:
        """The bytes of one token (a special gives its string as UTF-8), e.g. for display."""
        if not is_int(id):
            try:
                if isinstance(id, (bool, str, bytes, float)):
                    raise TypeError
                id = operator.index(id)    # numpy and torch integers
            except TypeError:
                raise ValueError(f"token ids must be ints, got {id!r}") from None
        if 0 <= id < len(self._bytes):
            return self._bytes[id]
        raise ValueError(f"token id {id} is outside the vocabulary [0, {self.vocab_size})")

    # -----------------------------------------------------------------------------------------
    # conversations
    # -----------------------------------------------------------------------------------------
    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """Ids of a conversation in this tokenizer's chat template, ending (by default) where the assistant's
        reply starts: what a chat model continues. Messages are ordinary text. For the loss labels of
        fine-tuning, see `tinylm.chat.encode_chat`."""
        return self._template().encode(self, messages, add_generation_prompt)[0]

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The same conversation as text (what transformers' apply_chat_template(tokenize=False) gives)."""
        return self._template().render(messages, add_generation_prompt)

    def _template(self) -> ChatTemplate:
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template tinylm knows; format the conversation as text "
                             "(e.g. with transformers' apply_chat_template) and encode it with allow_specials=True")
        return self.chat_template

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, specials={list(self.specials)})"

    # -----------------------------------------------------------------------------------------
    # saving and loading
    # -----------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "pattern": self.pattern_name,
                "specials": self.special_ids, "merges": [list(m) for m in self.merges],
                "byte_ids": self.byte_ids, "merge_ids": self.merge_ids, "bos": self.bos, "eos": self.eos,
                "chat_template": None if self.chat_template is None else self.chat_template.to_dict()}

    def save(self, path: str | Path) -> None:
        """Write the tokenizer as JSON (format version 2: pattern name, specials and their ids, merges and their
        ids, the byte ids, bos/eos and the chat template)."""
        Path(path).write_text(json.dumps(self.to_dict()), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "BPETokenizer":
        """Read a tokenizer saved by `save` (versions 1 and 2); ValueError says what is wrong with a bad file."""
        path = as_path(path)
        if not path.is_file():
            raise ValueError(f"{path} is not a tokenizer file: {'it is a folder' if path.is_dir() else 'no such file'}")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"{path} is {path.stat().st_size:,} bytes: too large for a tokenizer file (at most "
                             f"{MAX_FILE_BYTES:,}, tinylm.tokenizer.MAX_FILE_BYTES)")
        try:
            d = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique_keys)
        except (ValueError, RecursionError) as e:      # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise ValueError(f"{path} is not a valid tokenizer file: not JSON ({e})") from None
        return cls.from_dict(d, source=str(path))

    @classmethod
    def from_dict(cls, d: dict, source: str = "tokenizer") -> "BPETokenizer":
        check_header(d, FORMAT, (1, VERSION), source, "tokenizer file", required=("pattern", "specials", "merges"))
        if not isinstance(d["pattern"], str):
            raise ValueError(f"{source}: field 'pattern' must be a string")
        if not isinstance(d["merges"], list):
            raise ValueError(f"{source}: field 'merges' must be a list of [left, right] id pairs")
        try:
            if d["version"] == 1:              # the course's layout: specials listed after the merges
                if not isinstance(d["specials"], list):
                    raise ValueError("field 'specials' must be a list of strings")
                return cls(d["merges"], tuple(d["specials"]), d["pattern"])
            if not isinstance(d["specials"], dict):
                raise ValueError("field 'specials' must map each special string to its id")
            template = None if d.get("chat_template") is None else ChatTemplate.from_dict(d["chat_template"])
            if template is not None and not set(template.specials) <= set(d["specials"]):
                raise ValueError(f"field 'chat_template' needs the special tokens "
                                 f"{sorted(set(template.specials) - set(d['specials']))}, which 'specials' lacks")
            return cls(d["merges"], tuple(d["specials"]), d["pattern"], byte_ids=_list(d, "byte_ids"),
                       merge_ids=_list(d, "merge_ids"), special_ids=list(d["specials"].values()),
                       bos=d.get("bos"), eos=d.get("eos"), chat_template=template)
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None


def _list(d: dict, key: str) -> list:
    if not isinstance(d.get(key), list):
        raise ValueError(f"field {key!r} must be a list")
    return d[key]


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
