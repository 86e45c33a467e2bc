"""Chat: the template that turns a conversation into one token sequence, the loss mask, and a chat session.

Template (the specials are single tokens, never produced by ordinary text):

    <bos><|user|>Hi!<|assistant|>Hello! How can I help?<eos><|user|>What is two plus two?<|assistant|>Four.<eos>
                                 └────── supervised ───────┘                                          └────────┘

Fine-tuning supervises only what the assistant says (its text and the <eos> that closes its turn): every
other position gets the label -100, which `F.cross_entropy(..., ignore_index=-100)` skips. The model still
reads the user's words; it just isn't trained to produce them (as in Llama 2's fine-tuning, which "zero[es]
out the loss on tokens from the user prompt": Touvron et al., 2023).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ._checks import IGNORE_INDEX, check_int  # IGNORE_INDEX: the label of a position the loss skips
from .generate import generate
from .model import TinyLM
from .tokenizer import BPETokenizer

ROLES = ("user", "assistant")
Turn = dict  # {"role": "user" | "assistant", "content": str}


def _check_turns(turns: list[Turn]) -> None:
    if not isinstance(turns, (list, tuple)):
        raise ValueError(f"turns must be a list of {{'role': ..., 'content': ...}} dicts, got {type(turns).__name__}")
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or set(t) != {"role", "content"}:
            raise ValueError(f"turn {i} must be a dict with exactly the keys 'role' and 'content', got {t!r}")
        if t["role"] not in ROLES:
            raise ValueError(f"turn {i}: role must be 'user' or 'assistant', got {t['role']!r}")
        if not isinstance(t["content"], str):
            raise ValueError(f"turn {i}: content must be a str, got {type(t['content']).__name__}")


def _special(tokenizer: BPETokenizer, name: str) -> int:
    if name not in tokenizer.special_ids:
        raise ValueError(f"the tokenizer has no special token {name!r} (it has {list(tokenizer.special_ids)}); "
                         "train it with specials=('<bos>', '<|user|>', '<|assistant|>', '<eos>')")
    return tokenizer.special_ids[name]


def render_chat(turns: list[Turn]) -> str:
    """The template as text, e.g. '<bos><|user|>Hi<|assistant|>Hello<eos>' (for display)."""
    _check_turns(turns)
    parts = ["<bos>"]
    for t in turns:
        parts += ["<|user|>", t["content"]] if t["role"] == "user" else ["<|assistant|>", t["content"], "<eos>"]
    return "".join(parts)


def encode_chat(tokenizer: BPETokenizer, turns: list[Turn]) -> tuple[list[int], list[int]]:
    """Token ids of the chat template and labels of the same length.

    labels[i] = ids[i] where ids[i] is assistant text or the <eos> ending an assistant turn, else -100.
    Labels are aligned with ids (not shifted): the training code predicts labels[i + 1] from ids[: i + 1].
    Message text is encoded as ordinary text, so a user typing "<eos>" cannot end the turn.
    """
    _check_turns(turns)
    bos, user, assistant, eos = (_special(tokenizer, s) for s in ("<bos>", "<|user|>", "<|assistant|>", "<eos>"))
    ids, labels = [bos], [IGNORE_INDEX]
    for t in turns:
        text = tokenizer.encode(t["content"])
        if t["role"] == "user":
            ids += [user] + text
            labels += [IGNORE_INDEX] * (1 + len(text))
        else:
            ids += [assistant] + text + [eos]
            labels += [IGNORE_INDEX] + text + [eos]
    return ids, labels


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
            _check_turns(obj["messages"])
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
    """Keeps the turns of one conversation and answers with the model until it emits <eos>.

    >>> chat = ChatSession(model, tokenizer, temperature=0)   # greedy
    >>> chat.ask("What color is the sky?")
    'The sky is blue.'
    """

    def __init__(self, model: TinyLM, tokenizer: BPETokenizer, max_new_tokens: int = 64,
                 temperature: float = 0.7, top_k: int | None = 50, top_p: float | None = None,
                 seed: int | None = 0, use_cache: bool = True):
        if not isinstance(model, TinyLM):
            raise ValueError(f"model must be a tinylm.TinyLM, got {type(model).__name__}")
        if tokenizer.vocab_size > model.cfg.vocab_size:
            raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids but the model only {model.cfg.vocab_size}; "
                             "use the tokenizer the model was trained with")
        limit = model.cfg.max_seq_len
        check_int("max_new_tokens", max_new_tokens, 1, limit - 1, span=f"in [1, max_seq_len={limit})")
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_k, self.top_p = max_new_tokens, temperature, top_k, top_p
        self.use_cache = use_cache
        self.generator = torch.Generator(device=model.embed_tokens.weight.device)
        if seed is not None:
            self.generator.manual_seed(check_int("seed", seed, low=0, hint=" or None"))
        self.stop_ids = {_special(tokenizer, s) for s in ("<eos>", "<|user|>", "<bos>")}
        self.eos_id = _special(tokenizer, "<eos>")
        self.turns: list[Turn] = []

    def prompt_ids(self, turns: list[Turn] | None = None) -> list[int]:
        """The template of the turns (default: those so far) plus <|assistant|>, trimmed to leave room
        for the answer."""
        budget = self.model.cfg.max_seq_len - self.max_new_tokens
        assistant = _special(self.tokenizer, "<|assistant|>")
        turns = list(self.turns if turns is None else turns)
        while True:
            ids = encode_chat(self.tokenizer, turns)[0] + [assistant]
            if len(ids) <= budget or len(turns) <= 1:
                break
            turns = turns[1:]                       # forget the oldest turn
        return ids[-budget:]                        # a single very long message: keep its end

    def ask(self, text: str) -> str:
        """Add a user turn, generate the assistant's reply, remember both and return the reply.

        Nothing is remembered if anything fails (bad text, or an error while generating).
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        turns = [*self.turns, {"role": "user", "content": text}]
        ids = self.prompt_ids(turns)              # encodes text: a ValueError here leaves the turns as they were
        device = self.model.embed_tokens.weight.device
        out = generate(self.model, torch.tensor([ids], device=device), self.max_new_tokens,
                       temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                       use_cache=self.use_cache, generator=self.generator, eos_id=self.eos_id)
        new = out[0, len(ids):].tolist()
        for i, t in enumerate(new):                 # stop at <eos> (or any other control token)
            if t in self.stop_ids:
                new = new[:i]
                break
        reply = self.tokenizer.decode(new).strip()
        self.turns = [*turns, {"role": "assistant", "content": reply}]
        return reply

    def reset(self) -> None:
        """Forget the conversation."""
        self.turns = []
