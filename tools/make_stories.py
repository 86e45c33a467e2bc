"""Write the course's corpus with a real model: SmolLM2-135M-Instruct tells short stories and answers questions.

The TinyStories recipe (Eldan & Li, 2023): a larger model writes simple stories from prompts that combine
random words (tools/story_words.py), and a model of a few million parameters trained on them learns fluent
English. Generation is tinylm's own batched `generate` (left padding, a padding mask, a KV cache), with the
SmolLM2 chat template, temperature 0.8 and top-p 0.95, on the CPU.

    python tools/make_stories.py --out runs/corpus --seed 0 --stories 1400 --chats 1200 --batch-size 32 --threads 2
    python tools/make_stories.py --out runs/corpus --clean-only      # clean and split the raw files again

Writes into --out: stories.raw.jsonl and chat.raw.jsonl (every generation with its prompt), settings.json
and make_stories.log (the command, the settings, tokens/s per batch, the cleaning counts); into --data
(default tinylm/data): stories_{train,val}.jsonl.gz and chat_{train,val}.jsonl.gz (`tinylm.corpus`) and a
copy of the log. Interrupted? Run the same command again: finished batches are kept, the next one starts
(every batch has its own seed, so the files are the same as in one uninterrupted run). Asking for more
stories later appends: the first prompts do not depend on how many are asked for.

Reproducible: the same seed, batch size, thread count and machine give the same files. Batches are
consecutive prompts, so the seed fixes their composition. The CPU kernels are pinned to AVX2
(tools/numerics.py), so another x86-64 machine with AVX2 should give the same files too.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import shlex
import shutil
import sys
import time
from pathlib import Path

import numerics  # tools/numerics.py: the pinned CPU code paths, set before torch is imported

numerics.apply()

import torch  # noqa: E402

import story_words as words  # noqa: E402
from tinylm import corpus  # noqa: E402
from tinylm.generate import generate, left_pad  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STORY_SYSTEM = "You are a storyteller for small children. You write short, simple stories with easy words."
# Asked for a whole story, SmolLM2-135M rarely ends its turn: measured on 32 prompts, 2 ended within 200 new
# tokens ("Keep it under 100 words."). Asked for one paragraph, 25 of 32 closed it (a blank line, or the end
# of the turn) within 160 tokens, at 9-117 words. So a story is one paragraph, and it is finished where the
# model ends that paragraph or its turn.
STORY_HINT = " Tell it in one short paragraph."
PARAGRAPH_END = corpus.STORY_SEPARATOR            # a blank line: where a paragraph, so a story, ends
CHAT_SYSTEM = "You are a friendly helper for children. Answer in one or two short, simple sentences."


# ---------------------------------------------------------------------------------------------
# Prompts: a seeded stream, so that the first n prompts are the same whatever n is
# ---------------------------------------------------------------------------------------------
def article(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def story_prompts(n: int, seed: int) -> list[str]:
    """n story requests: a random template filled with random words, sometimes with a feature added."""
    rng = random.Random(f"stories-{seed}")
    out = []
    for _ in range(n):
        noun, noun2 = rng.sample(words.NOUNS, 2)
        adjective = rng.choice(words.ADJECTIVES)
        fill = dict(noun=noun, a_noun=article(noun), a_noun2=article(noun2), verb=rng.choice(words.VERBS),
                    adjective=adjective, place=rng.choice(words.PLACES), name=rng.choice(words.NAMES),
                    a_animal=article(rng.choice(words.ANIMALS)),
                    a_adj_animal=article(f"{adjective} {rng.choice(words.ANIMALS)}"),
                    a_adj_noun=article(f"{adjective} {noun}"))
        text = rng.choice(words.STORY_TEMPLATES).format(**fill)
        if rng.random() < 0.5:
            text += " " + rng.choice(words.FEATURES)
        out.append(text + STORY_HINT)
    return out


def chat_questions(n: int, seed: int) -> list[str]:
    """n distinct questions: every template over every topic, and the nature questions, shuffled."""
    topics = {"animal": words.ANIMALS, "food": words.FOODS, "object": words.OBJECTS, "job": words.JOBS,
              "activity": words.ACTIVITIES, "feeling": words.FEELINGS}
    pool = [t.format(x=x) for kind, templates in words.CHAT_TEMPLATES.items() for t in templates
            for x in topics[kind]] + list(words.NATURE_QUESTIONS)
    pool = list(dict.fromkeys(pool))
    random.Random(f"chat-{seed}").shuffle(pool)
    if n > len(pool):
        raise SystemExit(f"--chats {n}: there are only {len(pool)} distinct questions; ask for fewer")
    return pool[:n]


# ---------------------------------------------------------------------------------------------
# Generation in batches: one JSON-lines file per batch (so a run can resume, and workers can share it)
# ---------------------------------------------------------------------------------------------
def batch_seed(seed: int, kind: str, b: int) -> int:
    return (seed * 1_000_003 + b) * 2 + (kind == "chat")


def batch_path(out: Path, kind: str, b: int) -> Path:
    return out / f"{kind}.raw" / f"{b:05d}.jsonl"


def run_batches(model, tok, kind: str, prompts: list[str], system: str, args, log, worker: int = 0) -> None:
    """Answer every prompt of this worker's batches (b % workers == worker) that is not written yet.

    A batch is written to a temporary file and renamed, so a batch file is always complete. Its sampling
    generator is seeded from (seed, kind, b) alone: the result does not depend on the workers or restarts.
    """
    bs, n = args.batch_size, len(prompts)
    n_batches = -(-n // bs)
    max_new = args.story_tokens if kind == "stories" else args.chat_tokens
    eos = tok.eos_id
    # stories stop at the end of their paragraph (generate stops a row at this token; the turn's end counts too)
    stop = tok.encode(PARAGRAPH_END)[0] if kind == "stories" else eos
    stops = {eos, stop}
    for b in range(worker, n_batches, args.workers):
        path = batch_path(args.out, kind, b)
        rows = prompts[b * bs : (b + 1) * bs]
        if path.is_file() and len(corpus.read_jsonl_gz(path)) == len(rows):
            continue                                                   # done (a grown last batch is redone)
        ids = [tok.encode_chat([{"role": "system", "content": system}, {"role": "user", "content": p}]) for p in rows]
        idx, mask = left_pad(ids, pad_id=eos)                                  # (B, T) each
        g = torch.Generator().manual_seed(batch_seed(args.seed, kind, b))
        t0, cpu0, load = time.perf_counter(), time.process_time(), os.getloadavg()[0]
        out = generate(model, idx, max_new, temperature=args.temperature, top_p=args.top_p, generator=g,
                       eos_id=stop, attention_mask=mask)                       # (B, T + steps)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        T, steps = idx.shape[1], out.shape[1] - idx.shape[1]
        records, useful = [], 0
        for r, prompt in enumerate(rows):
            new = out[r, T:].tolist()
            end = next((i for i, t in enumerate(new) if t in stops), None)
            finished = end is not None
            new = new[:end] if finished else new
            text = tok.decode(new)
            if kind == "stories" and PARAGRAPH_END in text:   # the paragraph ended as two "\n" tokens
                text, finished = text[: text.index(PARAGRAPH_END)], True
                new = tok.encode(text)
            useful += len(new) + finished
            record = {"i": b * bs + r, "batch": b, "finished": finished, "tokens": len(new)}
            record |= {"prompt": prompt, "text": text} if kind == "stories" else {"question": prompt, "answer": text}
            records.append(record)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{worker}")
        tmp.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in records), encoding="utf-8")
        tmp.replace(path)
        log(f"[worker {worker}] {kind} batch {b + 1}/{n_batches}: {len(rows)} rows, prompts {T} tokens, "
            f"{steps} steps, {useful:,} tokens up to eos ({len(rows) * steps:,} computed, "
            f"{len(rows) * T:,} prompt) in {wall:.1f} s = {useful / wall:.1f} tok/s "
            f"({len(rows) * steps / wall:.1f} computed); CPU {cpu:.1f} s = {useful / cpu:.1f} tok per CPU-s; "
            f"{sum(x['finished'] for x in records)}/{len(rows)} finished; load {load:.2f}")


def read_raw(out: Path, kind: str) -> list[dict]:
    """Every record of the finished batches of kind, in prompt order."""
    records = [r for path in sorted((out / f"{kind}.raw").glob("*.jsonl")) for r in corpus.read_jsonl_gz(path)]
    return sorted(records, key=lambda r: r["i"])


def worker_main(worker: int, args, log) -> None:
    """One process: its own threads, its own copy of the model, every workers-th batch."""
    torch.set_num_threads(args.threads)
    from tinylm.pretrained import load_gguf, smollm2_gguf_path

    t0 = time.perf_counter()
    model, tok = load_gguf(smollm2_gguf_path())
    model = model.float().eval()
    log(f"[worker {worker}] torch {torch.__version__}, {torch.get_num_threads()} threads, model loaded in "
        f"{time.perf_counter() - t0:.1f} s")
    run_batches(model, tok, "stories", story_prompts(args.stories, args.seed), STORY_SYSTEM, args, log, worker)
    run_batches(model, tok, "chat", chat_questions(args.chats, args.seed), CHAT_SYSTEM, args, log, worker)


# ---------------------------------------------------------------------------------------------
# Cleaning and splitting (tinylm.corpus holds the rules)
# ---------------------------------------------------------------------------------------------
def clean_and_split(args, log) -> None:
    args.data.mkdir(parents=True, exist_ok=True)
    for kind, files in (("stories", corpus.STORY_FILES), ("chat", corpus.CHAT_FILES)):
        if not (args.out / f"{kind}.raw").is_dir():
            log(f"{kind}: no {args.out / f'{kind}.raw'}, nothing to clean")
            continue
        raw = read_raw(args.out, kind)
        corpus.write_jsonl_gz(args.out / f"{kind}.raw.jsonl.gz", raw)          # all batches in one file
        if kind == "stories":
            items, stats = corpus.clean_stories(raw)
        else:
            items, stats = corpus.clean_conversations(raw)
        train, val = corpus.train_val_split(items, args.val_fraction)
        corpus.check_no_leak(train, val)
        for split, part in (("train", train), ("val", val)):
            records = [{"text": x} for x in part] if kind == "stories" else part
            corpus.write_jsonl_gz(args.data / files[split], records)
        text = [x if kind == "stories" else "\n".join(m["content"] for m in x["messages"]) for x in items]
        n_bytes = sum(len(t.encode("utf-8")) for t in text)
        log(f"{kind}: kept {stats['kept']:,} of {stats['raw']:,} ({stats['kept'] / max(stats['raw'], 1):.1%}); "
            f"dropped " + ", ".join(f"{k} {v}" for k, v in stats.items() if k not in ("raw", "kept")))
        log(f"{kind}: {len(train):,} train / {len(val):,} val ({len(val) / max(len(items), 1):.1%}), "
            f"{n_bytes:,} bytes of text, {len({w for t in text for w in t.lower().split()}):,} distinct "
            f"words (lower-cased, split on spaces); no validation item or line occurs in training")


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
SETTINGS = ("seed", "batch_size", "threads", "temperature", "top_p", "story_tokens", "chat_tokens")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "corpus",
                   help="folder for the raw generations, settings and log (default runs/corpus)")
    p.add_argument("--data", type=Path, default=ROOT / "tinylm" / "data",
                   help="folder for the cleaned splits and a copy of the log (default tinylm/data)")
    p.add_argument("--seed", type=int, default=0, help="seeds the prompts and every batch's sampling (default 0)")
    p.add_argument("--stories", type=int, default=1400, help="stories to generate (default 1400)")
    p.add_argument("--chats", type=int, default=800, help="questions to answer (default 800)")
    p.add_argument("--batch-size", type=int, default=32, help="prompts per batch (default 32)")
    p.add_argument("--workers", type=int, default=2,
                   help="processes, each with its own model, taking every workers-th batch (default 2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1: on a shared "
                   "machine two one-thread workers beat one two-thread process by far)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling threshold (default 0.95)")
    p.add_argument("--story-tokens", type=int, default=400,
                   help="most new tokens per story; a story not finished by then is dropped (default 400)")
    p.add_argument("--chat-tokens", type=int, default=96, help="most new tokens per answer (default 96)")
    p.add_argument("--val-fraction", type=float, default=0.1, help="share of stories/questions held out (default 0.1)")
    p.add_argument("--clean-only", action="store_true", help="only clean and split the raw files in --out")
    return p


class Log:
    """Each line with a timestamp to stderr and appended to the log file (workers append to the same one)."""

    def __init__(self, path: Path):
        self.path = path

    def __call__(self, line: str) -> None:
        stamped = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}"
        print(stamped, file=sys.stderr, flush=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(stamped + "\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log = Log(args.out / "make_stories.log")
    log("command: " + " ".join(shlex.quote(a) for a in ["python", "tools/make_stories.py", *sys.argv[1:]]))
    if not args.clean_only:
        settings = {k: getattr(args, k) for k in SETTINGS}
        settings_path = args.out / "settings.json"
        if settings_path.is_file() and json.loads(settings_path.read_text()) != settings:
            raise SystemExit(f"{args.out} holds a run with other settings ({settings_path}); resume it with the "
                             f"same ones or choose another --out")
        settings_path.write_text(json.dumps(settings, indent=1) + "\n")
        log(f"settings {settings}; {args.workers} worker(s); {platform.machine()} {platform.processor() or ''} "
            f"({os.cpu_count()} CPUs); {dict((k, os.environ.get(k)) for k in numerics.PINS)}")
        t0 = time.perf_counter()
        if args.workers == 1:
            worker_main(0, args, log)
        else:                           # fork: the workers share nothing but the output folder
            ctx = multiprocessing.get_context("fork")
            procs = [ctx.Process(target=worker_main, args=(w, args, log)) for w in range(args.workers)]
            for proc in procs:
                proc.start()
            for proc in procs:
                proc.join()
            if any(proc.exitcode for proc in procs):
                raise SystemExit("a worker failed (see the log); run the same command again to resume")
        log(f"generation this session: {time.perf_counter() - t0:.0f} s")
    clean_and_split(args, log)
    if args.data.resolve() != args.out.resolve():
        shutil.copy(args.out / "make_stories.log", args.data / "make_stories.log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
