# Run: .venv/bin/python -m pytest -q tests/test_corpus.py
"""The corpus API and the rules that make it: cleaning, splitting with no leak, the files, the generation tool.

The shipped corpus is written by a real model (tools/make_stories.py); these tests build a small fixture
corpus of their own, in the test, with a known number of each kind of flaw.
"""

import importlib.util
import random
import sys
from pathlib import Path

import pytest
import torch

from helpers import random_model, tiny

from tinylm import corpus

ROOT = Path(__file__).resolve().parents[1]

NAMES = ["Lily", "Tom", "Mia", "Ben", "Sara", "Max", "Anna", "Sam", "Lucy", "Jack", "Emma", "Leo"]
THINGS = ["ball", "kite", "frog", "cake", "boat", "hat", "drum", "shell", "star", "duck", "lamp", "tree"]
PLACES = ["park", "beach", "garden", "forest", "farm", "kitchen", "river", "hill"]


def fixture_story(rng: random.Random, n: int) -> str:
    """A distinct little story: every paragraph carries the story's number, so no two share a line."""
    name, thing, place = rng.choice(NAMES), rng.choice(THINGS), rng.choice(PLACES)
    return (f"{name} found a {thing} number {n} in the {place} on day {n}.\n\n"
            f"The {thing} was {rng.choice(['red', 'blue', 'small', 'shiny'])} and {name} liked it very much, "
            f"so {name} took it home for story {n} and showed it to everyone in the family that evening.\n\n"
            f"At night {name} put the {thing} of story {n} by the bed and smiled, happy and sleepy after "
            f"a long day.")


def fixture_raw(seed: int = 0) -> tuple[list[dict], dict[str, int]]:
    """Raw generations as the tool writes them, and how many of each flaw they hold."""
    rng = random.Random(seed)
    good = [fixture_story(rng, n) for n in range(80)]
    raw = [{"text": t, "finished": True} for t in good]
    flaws = {"unfinished": 3, "cut": 4, "short": 2, "repetitive": 2, "duplicate": 3, "same_first_sentence": 2,
             "near_duplicate": 2}
    raw += [{"text": good[i], "finished": False} for i in range(3)]                       # no eos: dropped
    raw += [{"text": good[i].rsplit(" ", 3)[0], "finished": True} for i in range(3, 7)]   # cut mid-sentence
    raw += [{"text": "Tom ran. The end.", "finished": True}, {"text": "A cat sat.", "finished": True}]
    raw += [{"text": "Sam had a big red ball. " + "He was happy, he was happy, " * 12 + "he was happy.",
             "finished": True},                                                              # a loop
            {"text": "Mia said: " + "M" * 40 + "! " + " ".join(f"word{i}" for i in range(50)) + ".",
             "finished": True}]                                                              # garbled
    raw += [{"text": "  " + good[i].upper() + "\n", "finished": True} for i in range(7, 10)]   # same up to case
    raw += [{"text": good[i].split("\n\n")[0] + "\n\nThen something else happened, and it was a different "
             "day with different words, a different friend, a song, a dance, a nap, and much more to tell. Later "
             "everybody went outside to look at the clouds and count the birds on the old wooden fence.",
             "finished": True} for i in range(10, 12)]                                       # same first sentence
    raw += [{"text": good[i].replace("on day", "during day") + " The end.", "finished": True}
            for i in range(12, 14)]                                                           # a near copy
    rng.shuffle(raw)
    return raw, flaws


def fixture_chat_raw() -> list[dict]:
    raw = [{"question": f"What does a {t} {n} do?", "answer": f"A {t} number {n} helps {n} people every day. "
            f"The {t} is kind and works hard for answer {n}.", "finished": True}
           for n, t in enumerate(["baker", "farmer", "pilot", "nurse", "vet", "chef"] * 8)]
    raw += [{"question": "What is a cloud?", "answer": "A cloud is made of tiny drops", "finished": True},    # cut
            {"question": "Why is the sky blue?", "answer": "Because", "finished": False},                   # no eos
            {"question": "What does a baker 0 do?", "answer": "Another answer entirely.", "finished": True},  # same q
            {"question": "Tell me a long thing.", "answer": "word " * 100 + "end.", "finished": True},       # long
            {"question": "Are fish good?", "answer": "M" * 60 + ".", "finished": True}]                      # loop
    return raw


# ---------------------------------------------------------------------------------------------
# cleaning
# ---------------------------------------------------------------------------------------------
def test_clean_stories_drops_each_flaw_and_counts_it():
    raw, flaws = fixture_raw()
    kept, stats = corpus.clean_stories(raw)
    assert stats == {"raw": len(raw), **flaws, "kept": 80}
    assert len(kept) == 80 and len({corpus.normalize(t) for t in kept}) == 80
    assert all(corpus.SENTENCE_END.search(t) for t in kept)


def test_tidy_makes_quotes_ascii_and_paragraphs_tidy():
    assert corpus.tidy("  \u201cHi,\u201d she said \u2014 it\u2019s   fun\u2026\n\n\n\nNext.  ") == \
        "\"Hi,\" she said - it's fun...\n\nNext."


def test_clean_conversations_one_answer_per_question():
    convs, stats = corpus.clean_conversations(fixture_chat_raw())
    assert stats == {"raw": 53, "unfinished": 1, "cut": 1, "long": 1, "empty": 0, "repetitive": 1,
                     "duplicate": 1, "near_duplicate": 0, "kept": 48}
    questions = [c["messages"][0]["content"] for c in convs]
    assert len(set(questions)) == len(questions) == 48
    assert all([m["role"] for m in c["messages"]] == ["user", "assistant"] for c in convs)


# ---------------------------------------------------------------------------------------------
# splitting with no leak
# ---------------------------------------------------------------------------------------------
def lines(items) -> set[str]:
    """Independent of tinylm.corpus: every stripped, lower-cased, space-folded line or message."""
    out = set()
    for x in items:
        texts = x.splitlines() if isinstance(x, str) else [m["content"] for m in x["messages"]]
        out |= {" ".join(t.lower().split()) for t in texts if t.strip()}
    return out


def test_story_split_has_no_validation_story_or_line_in_training():
    kept, _ = corpus.clean_stories(fixture_raw()[0])
    kept.append("The end.\n\n" + kept[0].split("\n\n")[1] + "\n\nA new last line for this one.")  # shares a line
    train, val = corpus.train_val_split(kept, val_fraction=0.2)
    assert len(train) + len(val) == len(kept) and 5 <= len(val) <= 30
    assert not set(val) & set(train)
    assert not lines(val) & lines(train)
    assert kept[-1] in train                     # whichever way its hash fell, it shares a line with training


def test_split_is_deterministic_and_independent_of_order():
    kept, _ = corpus.clean_stories(fixture_raw()[0])
    train, val = corpus.train_val_split(kept, 0.2)
    shuffled = kept[::-1]
    train2, val2 = corpus.train_val_split(shuffled, 0.2)
    assert (set(train2), set(val2)) == (set(train), set(val))
    assert corpus.train_val_split(kept, 0.2) == (train, val)
    assert corpus.train_val_split(kept, 0.2, salt="other")[1] != val   # the salt picks another split


def test_conversation_split_by_question_with_zero_overlap():
    convs, _ = corpus.clean_conversations(fixture_chat_raw())
    train, val = corpus.train_val_split(convs, 0.25)
    assert val and train
    q = lambda part: {c["messages"][0]["content"] for c in part}  # noqa: E731
    assert not q(train) & q(val)
    assert not lines(val) & lines(train)


def test_check_no_leak_catches_a_shared_story_or_line():
    with pytest.raises(ValueError, match="also occurs in training"):
        corpus.check_no_leak(["A story.\nTwo lines."], ["a  STORY.\ntwo lines."])
    with pytest.raises(ValueError, match="shares a line"):
        corpus.check_no_leak(["First.\nShared line here."], ["Other.\nshared line here."])
    corpus.check_no_leak(["First.\nA line."], ["Second.\nAnother line."])


# ---------------------------------------------------------------------------------------------
# the API and the files
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def data_dir(tmp_path) -> Path:
    stories, _ = corpus.clean_stories(fixture_raw()[0])
    convs, _ = corpus.clean_conversations(fixture_chat_raw())
    for items, files in ((stories, corpus.STORY_FILES), (convs, corpus.CHAT_FILES)):
        train, val = corpus.train_val_split(items, 0.2)
        for split, part in (("train", train), ("val", val)):
            records = [{"text": x} for x in part] if files is corpus.STORY_FILES else part
            corpus.write_jsonl_gz(tmp_path / files[split], records)
    return tmp_path


def test_api_shapes_and_types(data_dir):
    for split in ("train", "val"):
        stories = corpus.stories(split, data_dir)
        assert stories and all(isinstance(s, str) and s for s in stories)
        convs = corpus.conversations(split, data_dir)
        assert convs and all(set(c) == {"messages"} and isinstance(c["messages"], list) for c in convs)
        for c in convs:
            assert all(set(m) == {"role", "content"} and m["role"] in ("user", "assistant")
                       and isinstance(m["content"], str) for m in c["messages"])
    assert not set(corpus.stories("val", data_dir)) & set(corpus.stories("train", data_dir))
    assert not lines(corpus.conversations("val", data_dir)) & lines(corpus.conversations("train", data_dir))


def test_the_chat_api_feeds_the_chat_template(data_dir):
    from tinylm.chat import encode_chat
    from tinylm.tokenizer import BPETokenizer

    tok = BPETokenizer.train("\n".join(corpus.stories("train", data_dir)), 300,
                             specials=("<bos>", "<|user|>", "<|assistant|>", "<eos>"))
    ids, labels = encode_chat(tok, corpus.conversations("train", data_dir)[0]["messages"])
    assert len(ids) == len(labels) and any(label != -100 for label in labels)


@pytest.mark.parametrize("call", [corpus.stories, corpus.conversations])
@pytest.mark.parametrize("split", ["test", "Train", "", None, 0])
def test_bad_split_name_raises_value_error(call, split, data_dir):
    with pytest.raises(ValueError, match="split must be 'train' or 'val'"):
        call(split, data_dir)


def test_missing_corpus_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="make_stories.py"):
        corpus.stories("train", tmp_path)
    with pytest.raises(FileNotFoundError, match="make_stories.py"):
        corpus.conversations("val", tmp_path)


def test_files_are_byte_identical_for_the_same_records(tmp_path):
    records = [{"text": "Hello.\n\nBye."}, {"text": "\u00e9t\u00e9"}]
    corpus.write_jsonl_gz(tmp_path / "a.jsonl.gz", records)
    corpus.write_jsonl_gz(tmp_path / "b.jsonl.gz", records)
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()
    assert corpus.read_jsonl_gz(tmp_path / "a.jsonl.gz") == records


def test_shipped_stories_share_no_story_or_line_between_train_and_val():
    train, val = corpus.stories("train"), corpus.stories("val")
    assert len(train) >= 200 and len(val) >= 15
    corpus.check_no_leak(train, val)
    train_lines = {corpus.normalize(line) for story in train for line in story.splitlines()}
    assert not {corpus.normalize(story) for story in val} & {corpus.normalize(story) for story in train}
    assert not {corpus.normalize(line) for story in val for line in story.splitlines()} & train_lines


def test_shipped_conversations_share_no_question_or_answer_between_train_and_val():
    train, val = corpus.conversations("train"), corpus.conversations("val")
    assert len(train) >= 150 and len(val) >= 20
    corpus.check_no_leak(train, val)
    questions = [{corpus.normalize(c["messages"][0]["content"]) for c in part} for part in (train, val)]
    assert not questions[0] & questions[1]
    assert len(questions[0]) == len(train) and len(questions[1]) == len(val)     # one answer per question
    for c in train + val:
        assert [m["role"] for m in c["messages"]] == ["user", "assistant"]


def test_shipped_stories_passed_the_cleaning_rules():
    for story in corpus.stories("train") + corpus.stories("val"):
        assert story == corpus.tidy(story) and corpus.SENTENCE_END.search(story)
        assert not corpus.repetitive(story) and len(story.split()) >= corpus.MIN_STORY_WORDS
    texts = corpus.stories("train") + corpus.stories("val")
    kept, dropped = corpus.dedupe(texts)
    assert kept == list(range(len(texts))), dropped                    # no duplicate or near copy left


def test_story_text_joins_the_stories_with_a_blank_line():
    text = corpus.story_text("val")
    assert text.split(corpus.STORY_SEPARATOR) == corpus.stories("val")


# ---------------------------------------------------------------------------------------------
# the generation tool, on a tiny random model instead of SmolLM2
# ---------------------------------------------------------------------------------------------
def load_tool():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        spec = importlib.util.spec_from_file_location("make_stories", ROOT / "tools" / "make_stories.py")
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return tool


class ByteTok:
    """A stand-in for the SmolLM2 tokenizer: ids 0-1 special (1 = end of turn), bytes 2..61."""
    eos_id = 1

    def encode(self, text):
        return [2 + b % 60 for b in text.encode()]

    def encode_chat(self, messages):
        return [0] + [i for m in messages for i in self.encode(m["content"])]

    def decode(self, ids):
        return "".join(chr(ord("a") + i % 26) for i in ids)


def test_tool_prompts_are_varied_and_a_stable_stream():
    tool = load_tool()
    prompts = tool.story_prompts(200, seed=0)
    assert prompts[:50] == tool.story_prompts(50, seed=0)           # more prompts later: the same first ones
    assert tool.story_prompts(50, seed=1) != prompts[:50]
    assert len(set(prompts)) == 200 and len({" ".join(p.split()[:3]) for p in prompts}) >= 4   # templates
    questions = tool.chat_questions(300, seed=0)
    assert len(set(questions)) == 300 and questions[:40] == tool.chat_questions(40, seed=0)
    assert all(len(getattr(tool.words, n)) >= 100 for n in ("NOUNS", "VERBS", "PLACES", "ADJECTIVES"))


def test_tool_batches_resume_and_do_not_depend_on_workers(tmp_path):
    tool = load_tool()
    model, tok = random_model(tiny(vocab_size=64, max_seq_len=512)), ByteTok()
    prompts = tool.story_prompts(10, seed=0)
    args = tool.build_parser().parse_args(["--out", str(tmp_path / "a"), "--batch-size", "4", "--story-tokens",
                                           "12", "--workers", "1"])
    tool.run_batches(model, tok, "stories", prompts, "Be brief.", args, log=lambda s: None)
    one = tool.read_raw(args.out, "stories")
    assert [r["i"] for r in one] == list(range(10)) and {r["batch"] for r in one} == {0, 1, 2}
    # two workers, the second interrupted before it started: running again completes the same records
    args.out, args.workers = tmp_path / "b", 2
    tool.run_batches(model, tok, "stories", prompts, "Be brief.", args, log=lambda s: None, worker=0)
    assert {r["batch"] for r in tool.read_raw(args.out, "stories")} == {0, 2}
    logged = []
    tool.run_batches(model, tok, "stories", prompts, "Be brief.", args, log=logged.append, worker=0)
    assert logged == []                                             # its batches are done: nothing redone
    tool.run_batches(model, tok, "stories", prompts, "Be brief.", args, log=logged.append, worker=1)
    assert tool.read_raw(args.out, "stories") == one
    assert len(logged) == 1 and "tok/s" in logged[0]


def test_tool_help_names_the_flags_of_the_real_run():
    text = load_tool().build_parser().format_help()
    for flag in ("--out", "--seed", "--stories", "--chats", "--batch-size", "--workers", "--threads",
                 "--temperature", "--top-p", "--clean-only"):
        assert flag in text, flag
