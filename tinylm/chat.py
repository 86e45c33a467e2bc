"""Chat: the template that turns a conversation into one token sequence, the loss mask, a chat session, and
`python -m tinylm.chat`, a terminal chat with SmolLM2 (or any tinylm model) that streams its replies.

The course's template (`tinylm.chat_template.COURSE`; the specials are single tokens, never produced by
ordinary text):

    <bos><|user|>Hi!<|assistant|>Hello! How can I help?<eos><|user|>What is two plus two?<|assistant|>Four.<eos>
                                 └────── supervised ───────┘                                          └────────┘

Fine-tuning supervises only what the assistant says (its text and the <eos> that closes its turn): every
other position gets the label -100, which `F.cross_entropy(..., ignore_index=-100)` skips. The model still
reads the user's words; it just isn't trained to produce them (as in Llama 2's fine-tuning, which "zero[es]
out the loss on tokens from the user prompt": Touvron et al., 2023).
A real model's tokenizer brings its own template (ChatML for SmolLM2); `encode_chat` and `ChatSession` use
whichever template the tokenizer carries.

    python -m tinylm.chat                                  # SmolLM2-135M-Instruct, 4-bit weights (q4a8), compiled
    python -m tinylm.chat --adapter runs/lora/adapter.safetensors --format fp32

In the terminal: /reset forgets the conversation, /quit (or Ctrl-D) leaves, Ctrl-C stops a reply (not the
program); the arrow keys edit the line and recall earlier ones where Python has readline. The history is kept
while it fits the context (--context); the oldest turns are dropped first. Every flag is checked before the
model loads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Iterator

import torch

from . import a8
# IGNORE_INDEX: the label of a position the loss skips
from ._checks import IGNORE_INDEX, check_bool, check_int, check_number, check_threads
from .chat_template import COURSE, ChatTemplate, check_messages
from .config import MAX_SEQ_LEN, Config
from .fast import cxx_compiler, decoder
from .generate import _check_temperature, _check_top_k, _check_top_p, generate, stream
from .lora import adapter_chain, load_adapter, remove_lora
from .model import TinyLM
from .pretrained import load_gguf, smollm2_gguf_path
from .quantize import FORMATS as QUANTIZED, quantize
from .tokenizer import BPETokenizer

ROLES = COURSE.roles  # ("user", "assistant")
Turn = dict  # {"role": "user" | "assistant", "content": str}
MAX_SEED = 2**64 - 1          # torch.Generator.manual_seed takes seeds below 2**64
SMOLLM2_CONTEXT = 2048        # `python -m tinylm.chat`'s default --context for SmolLM2 (trained on 8192)


def render_chat(turns: list[Turn]) -> str:
    """The course's template as text, e.g. '<bos><|user|>Hi<|assistant|>Hello<eos>' (for display)."""
    return COURSE.render(turns)


def encode_chat(tokenizer: BPETokenizer, turns: list[Turn]) -> tuple[list[int], list[int]]:
    """Token ids of the conversation in the tokenizer's chat template, and labels of the same length.

    labels[i] = ids[i] where ids[i] is assistant text or the <eos> ending an assistant turn, else -100.
    Labels are aligned with ids (not shifted): the training code predicts labels[i + 1] from ids[: i + 1].
    Message text is encoded as ordinary text, so a user typing "<eos>" cannot end the turn.
    (`tokenizer.encode_chat(messages)` gives the ids alone, ending where the assistant's reply starts.)
    """
    return _template(tokenizer).encode(tokenizer, turns)


def _template(tokenizer: BPETokenizer) -> ChatTemplate:
    if not isinstance(tokenizer, BPETokenizer):
        raise ValueError(f"tokenizer must be a tinylm BPETokenizer, got {type(tokenizer).__name__}")
    return tokenizer._template()


def load_conversations(path: str | Path) -> list[list[Turn]]:
    """Read a .jsonl file with one {"messages": [{"role": ..., "content": ...}, ...]} object per line."""
    if not Path(path).is_file():
        raise ValueError(f"{path} is not a file of conversations ({'a folder' if Path(path).exists() else 'missing'})")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    conversations = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}, line {n}: not valid JSON ({e})") from None
        if not isinstance(obj, dict) or "messages" not in obj:
            raise ValueError(f"{path}, line {n}: expected an object with a 'messages' list")
        try:
            check_messages(obj["messages"], ROLES)
        except ValueError as e:
            raise ValueError(f"{path}, line {n}: {e}") from None
        conversations.append(obj["messages"])
    if not conversations:
        raise ValueError(f"{path} holds no conversations")
    return conversations


def encode_conversations(tokenizer: BPETokenizer, conversations: list[list[Turn]]) -> tuple[torch.Tensor, torch.Tensor]:
    """All conversations encoded and packed end to end: ids (N,) and labels (N,), both torch.long."""
    ids: list[int] = []
    labels: list[int] = []
    for turns in conversations:
        i, l = encode_chat(tokenizer, turns)
        ids += i
        labels += l
    return torch.tensor(ids, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


class ChatSession:
    """Keeps the turns of one conversation and answers with the model until its template's end token.

    >>> chat = ChatSession(model, tokenizer, temperature=0)   # greedy
    >>> chat.ask("What color is the sky?")
    'The sky is blue.'

    context: the tokens of history + reply the model sees (default: all of model.cfg.max_seq_len); the oldest
    turns are dropped to fit it. compiled: decode through `tinylm.fast.decoder` (a q4a8 model: all layers in
    one C++ call; others: one transformer block compiled by torch.compile, after seconds of compiling, which
    `warm_up` does before the first question). Every
    setting is checked here, before the first question.
    """

    def __init__(self, model: TinyLM, tokenizer: BPETokenizer, max_new_tokens: int = 64,
                 temperature: float = 0.7, top_k: int | None = 50, top_p: float | None = None,
                 seed: int | None = 0, use_cache: bool = True, context: int | None = None,
                 compiled: bool = False):
        if not isinstance(model, TinyLM):
            raise ValueError(f"model must be a tinylm.TinyLM, got {type(model).__name__}")
        if tokenizer.vocab_size > model.cfg.vocab_size:
            raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids but the model only {model.cfg.vocab_size}; "
                             "use the tokenizer the model was trained with")
        limit = model.cfg.max_seq_len
        if context is None:
            context, words = limit, "max_seq_len"
        else:
            context, words = check_int("context", context, 2, limit, span=f"in [2, max_seq_len={limit}]"), "context"
        check_int("max_new_tokens", max_new_tokens, 1, context - 1, span=f"in [1, {words}={context})")
        _check_temperature(temperature)
        _check_top_k(top_k)
        _check_top_p(top_p)
        self.template = _template(tokenizer)
        self.template.encode(tokenizer, [])         # the tokenizer has the template's specials
        self.model, self.tokenizer, self.context = model, tokenizer, context
        self.max_new_tokens, self.temperature, self.top_k, self.top_p = max_new_tokens, temperature, top_k, top_p
        self.use_cache, self.compiled = use_cache, check_bool("compiled", compiled)
        if compiled:
            if not use_cache:
                raise ValueError("compiled=True compiles the one-token step against the KV cache; "
                                 "pass use_cache=True, or compiled=False")
            decoder(model)                         # refuses a model it cannot compile (w8a8), before any question
        self.generator = torch.Generator(device=model.embed_tokens.weight.device)
        if seed is not None:
            self.generator.manual_seed(check_int("seed", seed, 0, MAX_SEED, hint=" or None"))
        self.stop_ids = {tokenizer.special_ids[s] for s in self.template.stop}
        self.eos_id = tokenizer.special_ids[self.template.stop[0]]
        self.turns: list[Turn] = []

    def prompt_ids(self, turns: list[Turn] | None = None) -> list[int]:
        """The template of the turns (default: those so far), up to where the reply starts, trimmed to
        leave room for it."""
        budget = self.context - self.max_new_tokens
        turns = list(self.turns if turns is None else turns)
        while True:
            ids = self.template.encode(self.tokenizer, turns, add_generation_prompt=True)[0]
            if len(ids) <= budget or len(turns) <= 1:
                break
            turns = turns[1:]                       # forget the oldest turn
        return ids[-budget:]                        # a single very long message: keep its end

    def ask(self, text: str) -> str:
        """Add a user turn, generate the assistant's reply, remember both and return the reply.

        Nothing is remembered if anything fails (bad text, or an error while generating).
        """
        turns, ids = self._ask(text)
        device = self.model.embed_tokens.weight.device
        out = generate(self.model, torch.tensor([ids], device=device), self.max_new_tokens,
                       temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                       use_cache=self.use_cache, generator=self.generator, eos_id=self.eos_id,
                       compiled=self.compiled)
        new = out[0, len(ids):].tolist()
        for i, t in enumerate(new):                 # stop at the end token (or any other control token)
            if t in self.stop_ids:
                new = new[:i]
                break
        reply = self.tokenizer.decode(new).strip()
        self.turns = [*turns, {"role": "assistant", "content": reply}]
        return reply

    def _ask(self, text: str) -> tuple[list[Turn], list[int]]:
        """The turns with text added as the user's, and their prompt ids (nothing is remembered yet)."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        turns = [*self.turns, {"role": "user", "content": text}]
        return turns, self.prompt_ids(turns)      # encodes text: a ValueError here leaves the turns as they were

    def stream(self, text: str) -> Iterator[str]:
        """`ask`, streamed: yields the reply's text piece by piece as its tokens are generated.

        The exchange is remembered when the stream ends, or, when it is stopped early (Ctrl-C inside it, or
        the caller's close()), with the reply as far as it got. Nothing is remembered if generation fails.
        A character whose UTF-8 bytes span two tokens is yielded once it is whole.
        """
        turns, ids = self._ask(text)
        device = self.model.embed_tokens.weight.device
        new: list[int] = []
        shown = ""

        def remember() -> None:
            self.turns = [*turns, {"role": "assistant", "content": self.tokenizer.decode(new).strip()}]

        try:
            for token in stream(self.model, torch.tensor([ids], device=device), self.max_new_tokens,
                                self.temperature, self.top_k, self.top_p, self.generator, self.stop_ids,
                                compiled=self.compiled):
                new.append(token)
                text_so_far = self.tokenizer.decode(new).lstrip()
                if not text_so_far.endswith("\ufffd"):       # else a character is cut: wait for its next byte
                    yield text_so_far[len(shown):]
                    shown = text_so_far
        except (KeyboardInterrupt, GeneratorExit):
            remember()
            raise
        remember()
        rest = self.tokenizer.decode(new).lstrip()[len(shown):]
        if rest:
            yield rest

    def warm_up(self) -> None:
        """Compile the decoding step now instead of during the first reply: one compiled step with the cache
        length a short first question gets (a longer conversation's next bucket of CACHE_BUCKET positions
        compiles once more when it is reached). Remembers nothing and draws nothing from the generator."""
        if not self.compiled:
            return
        ids = self.prompt_ids([{"role": "user", "content": "Hi"}])
        fast, device, was_training = decoder(self.model), self.model.embed_tokens.weight.device, \
            self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                cache = fast.new_cache(1, len(ids) + self.max_new_tokens)
                fast(torch.tensor([ids], device=device), cache=cache)          # the prefill, eager
                fast(torch.tensor([ids[-1:]], device=device), cache=cache)     # one step: compiles
        finally:
            self.model.train(was_training)

    def reset(self) -> None:
        """Forget the conversation."""
        self.turns = []


# ---------------------------------------------------------------------------------------------
# python -m tinylm.chat
# ---------------------------------------------------------------------------------------------
def load_chat_model(model_dir: str | Path | None = None, max_seq_len: int | None = None
                    ) -> tuple[TinyLM, BPETokenizer, str]:
    """(model, tokenizer, name): SmolLM2-135M-Instruct in fp32 (RoPE tables for max_seq_len positions), or the
    model and tokenizer of a tinylm checkpoint folder (`tinylm.train`'s, with tokenizer.json; the checkpoint
    fixes its max_seq_len: ChatSession's context shortens what the model sees)."""
    if model_dir is None:
        model, tok = load_gguf(smollm2_gguf_path(), progress=False, max_seq_len=max_seq_len)
        return model, tok, "SmolLM2-135M-Instruct"
    # here, not at the top: tinylm.train's __init__ imports its command line, which imports this module
    from .train.checkpoint import TOKENIZER, load_weights

    model_dir = Path(model_dir)
    checkpoint_model_config(model_dir)
    return load_weights(model_dir), BPETokenizer.load(model_dir / TOKENIZER), str(model_dir)


def checkpoint_model_config(model_dir: str | Path) -> Config:
    """The model Config of a tinylm checkpoint folder that holds a tokenizer, from its config.json alone (no
    weights read); ValueError if it is not one."""
    from .train.checkpoint import CHECKPOINT_VERSION, TOKENIZER, read_checkpoint_config

    model_dir = Path(model_dir)
    meta = read_checkpoint_config(model_dir, versions=(1, CHECKPOINT_VERSION))
    if not (model_dir / TOKENIZER).is_file():
        raise ValueError(f"{model_dir} has no {TOKENIZER}; pass a checkpoint folder written by tinylm.train")
    return Config.from_dict(meta["model"])


def line_editing(stdin=None) -> bool:
    """Line editing for input() when standard input (default sys.stdin) is a terminal: the arrow keys move in
    the line and recall earlier ones. Importing readline is what turns it on (GNU readline or libedit); it may
    be missing (Windows, where the console edits lines itself). True if readline was imported."""
    stdin = sys.stdin if stdin is None else stdin
    try:
        if stdin is None or not stdin.isatty():     # piped input: nothing to edit
            return False
    except (AttributeError, ValueError):            # no isatty, or a closed stream
        return False
    try:
        import readline  # noqa: F401
    except ImportError:
        return False
    return True


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tinylm.chat", description="Chat with SmolLM2-135M-Instruct in the "
                                "terminal: /reset forgets the conversation, /quit or Ctrl-D leaves, Ctrl-C stops "
                                "a reply.")
    p.add_argument("--adapter", type=Path, help="a LoRA adapter (python -m tinylm.finetune's adapter.safetensors), "
                   "merged into the weights before they are converted to --format")
    p.add_argument("--format", default="auto", choices=("auto", *FORMATS),
                   help="weight format (default auto: q4a8 where the model's widths allow it and its kernels "
                        "build, else q4, else int8; q4a8 decoded fastest in docs/benchmarks.md)")
    p.add_argument("--compiled", default="auto", choices=("auto", "on", "off"),
                   help="decode without Python per layer: q4a8 runs all layers in one C++ call, other formats "
                        "one transformer block compiled by torch.compile (needs a C++ compiler; default auto: on "
                        "for int8, q4 and q4a8 where g++ is found, off for fp32 and bf16, which the compiled block "
                        "made slower in docs/benchmarks.md)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="longest reply in tokens (default 256)")
    p.add_argument("--temperature", type=float, default=0.7, help="0 is greedy (default 0.7)")
    p.add_argument("--top-k", type=int, default=50, help="keep the k most likely tokens (default 50)")
    p.add_argument("--top-p", type=float, help="nucleus sampling (default: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    p.add_argument("--context", type=int, help=f"tokens of history + reply the model sees; older turns are "
                   f"dropped (default {SMOLLM2_CONTEXT} for SmolLM2, which was trained on 8192; with --model-dir, "
                   "the checkpoint's max_seq_len, also the most it takes)")
    p.add_argument("--threads", type=int, help="CPU threads for PyTorch (default: PyTorch's choice)")
    p.add_argument("--model-dir", type=Path, help="chat with a tinylm checkpoint folder instead of SmolLM2")
    return p


def check_flags(args: argparse.Namespace) -> int:
    """Every flag of `python -m tinylm.chat`, before the model loads (a bad one fails at once, not after the
    weights are read); returns the context: --context, else SmolLM2's default or the checkpoint's max_seq_len.
    Whether an adapter fits the model is checked when it is loaded into it."""
    if args.threads is not None:
        check_threads("--threads", args.threads)
    check_number("--temperature", args.temperature, 0, hint=" (0 means greedy)")
    check_int("--top-k", args.top_k, low=1)
    if args.top_p is not None:
        check_number("--top-p", args.top_p, 0, 1, low_open=True, hint=" (leave it out for no nucleus filter)")
    check_int("--seed", args.seed, 0, MAX_SEED)
    if args.context is not None:
        check_int("--context", args.context, 2, MAX_SEQ_LEN)
    if args.model_dir is None:
        context = args.context or SMOLLM2_CONTEXT
    else:
        longest = checkpoint_model_config(args.model_dir).max_seq_len
        if args.context is not None and args.context > longest:
            raise ValueError(f"--context {args.context} exceeds the checkpoint's max_seq_len {longest} (its RoPE "
                             f"tables and the longest sequence it was built for); pass --context {longest} or less")
        context = args.context or longest
    check_int("--max-new-tokens", args.max_new_tokens, 1, context - 1, span=f"in [1, --context={context})",
              hint=" (the reply needs room for the question)")
    if args.compiled == "on":
        if args.format == "w8a8":
            raise ValueError("--compiled on cannot compile --format w8a8 (fbgemm's packed weights split the graph "
                             "at every linear); pass --format int8 or q4, or --compiled off")
        if cxx_compiler() is None:
            raise ValueError("--compiled on needs a C++ compiler for torch.compile (g++, or the one $CXX names), "
                             "and none was found; install g++, or pass --compiled off")
    if args.format == "q4a8":
        a8.require()                                 # its kernels build with the C++ compiler, or say so
    if args.adapter is not None:
        adapter_chain(args.adapter)                  # tinylm adapter files (and a DPO run's start), metadata alone
    return context


FORMATS = ("fp32", *QUANTIZED)                   # the model as loaded, and what `quantize` makes


def pick_format(model: TinyLM, asked: str) -> str:
    """The weight format to chat in: the one asked for, or for "auto" q4a8 where every linear layer's input
    width is a multiple of 32 (Q4_1's block; SmolLM2's are) and its kernels build here (a C++ compiler), q4
    where only the widths fit, else int8. Measured on an AMD EPYC with AVX2 (docs/benchmarks.md, 2026-12-07,
    compiled, tokens/s at 1 and 2 threads): q4a8 97.0 and 177.3 (its layer loop) against q4's 33.0 and 46.7,
    fastest of the six; perplexity +0.14% to +0.53% against fp32 (q4 +0.42%)."""
    if asked != "auto":
        return asked
    widths = [m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not all(w % 32 == 0 for w in widths):
        return "int8"
    return "q4a8" if a8.available() else "q4"


COMPILED_HELPS = ("int8", "q4", "q4a8")   # the formats compiled=True made faster at 1 and 2 threads


def pick_compiled(fmt: str, asked: str) -> bool:
    """Whether to decode through the compiled block: as asked ("on", "off"), or for "auto" where it was measured
    to help and can run. On an AMD EPYC (docs/benchmarks.md, 2026-12-03, tokens/s eager -> compiled, 1 and 2
    threads): q4 37.0 -> 44.8 and 48.1 -> 49.6, int8 25.3 -> 29.9 and 37.0 -> 44.8, but fp32 14.7 -> 14.0 and
    16.4 -> 14.7, bf16 25.1 -> 18.4 at 2 threads; w8a8 cannot be compiled. On an AVX2 EPYC (2026-12-07): q4a8
    43.9 -> 97.0 and 52.4 -> 177.3 (the layer loop; the compiled block 54.1 and 70.7). "auto" without a C++
    compiler is off."""
    if asked != "auto":
        return asked == "on"
    return fmt in COMPILED_HELPS and cxx_compiler() is not None


def main(argv: list[str] | None = None) -> int:
    """Run the terminal chat. Exit status 0; 2 for a usage error (bad flags, a missing or misfit adapter)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        context = check_flags(args)
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        model, tok, name = load_chat_model(args.model_dir, context)
        for adapter in adapter_chain(args.adapter) if args.adapter is not None else []:   # a DPO run's start first
            remove_lora(load_adapter(model, adapter), merge=True)   # W + (alpha/r) B A, then a plain model
        fmt = pick_format(model, args.format)
        if fmt != "fp32":
            quantize(model, fmt)
        compiled = pick_compiled(fmt, args.compiled)
        session = ChatSession(model, tok, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed,
                              context=context, compiled=compiled)
    except (ValueError, ImportError) as e:           # ImportError: SmolLM2's weights are not installed
        parser.error(str(e))
    if compiled:
        print("compiling the decoding step (once; seconds) ...", file=sys.stderr, flush=True)
        session.warm_up()
    line_editing(sys.stdin)                          # arrow keys and history, in a terminal
    adapter = f" + {args.adapter}" if args.adapter else ""
    how = f"{fmt}, compiled" if compiled else fmt
    print(f"{name}{adapter} ({how}). /reset forgets the conversation, /quit leaves, Ctrl-C stops a "
          "reply.", file=sys.stderr)
    while True:
        try:
            line = input("you> ")
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print("\n(/quit or Ctrl-D leaves)", file=sys.stderr)
            continue
        if line.strip() == "/quit":
            return 0
        if line.strip() == "/reset":
            session.reset()
            print("(the conversation is forgotten)", file=sys.stderr)
            continue
        if not line.strip():
            continue
        print("bot> ", end="", flush=True)
        reply = session.stream(line)
        try:
            for piece in reply:
                print(piece, end="", flush=True)
        except KeyboardInterrupt:
            reply.close()
            print(" [stopped]", end="")
        except ValueError as e:
            print(f"(error: {e})", end="")
        print(flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
