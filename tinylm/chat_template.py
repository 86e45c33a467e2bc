"""Chat templates: how a conversation becomes one token sequence (the course's template, and ChatML).

A template is data, not code: for each role, the parts around the message, some of them special tokens.

    course   <bos><|user|>Hi!<|assistant|>Hello!<eos>                      (chapter 11, `tinylm.chat`)
    ChatML   <|im_start|>system\\nYou are ...<|im_end|>\\n<|im_start|>user\\nHi!<|im_end|>\\n
             <|im_start|>assistant\\n                                         (SmolLM2, Qwen; `tinylm.pretrained`)

Every tokenizer carries one (`BPETokenizer.chat_template`): `tok.encode_chat(messages)` gives the ids a
model continues, `tinylm.chat.encode_chat(tok, turns)` the ids and the loss labels for fine-tuning.
Message contents are always encoded as ordinary text, so a user who types "<|im_end|>" or "<eos>" cannot
close a turn; only the template's own parts become special ids.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ._checks import IGNORE_INDEX

CONTENT = "{content}"  # the place of the message inside a turn's parts
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@dataclass(frozen=True)
class ChatTemplate:
    """One chat format. Parts listed in `specials` become their single special ids; every other part, and
    every message, is text. Adjacent text is encoded as one string (ChatML's "user\\n" + message), exactly
    as a tokenizer reads the rendered conversation."""

    name: str
    turns: dict[str, tuple[str, ...]]        # role -> its parts, CONTENT once among them
    generation_prompt: tuple[str, ...]       # appended by add_generation_prompt=True: the reply starts here
    specials: tuple[str, ...]                # the parts that are special tokens
    begin: tuple[str, ...] = ()              # before the first message, e.g. ("<bos>",)
    default_system: str | None = None        # a system message put first when the conversation has none
    stop: tuple[str, ...] = ()               # specials that end a reply (the first is its end-of-sequence)
    supervised: tuple[str, ...] = ("assistant",)  # roles whose message, and the parts after it, are trained on
    roles: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError(f"a chat template's name must be a str, got {self.name!r}")
        if not isinstance(self.turns, dict) or not self.turns:
            raise ValueError(f"chat template {self.name!r}: turns must be a dict role -> parts")
        for role, parts in self.turns.items():
            _check_parts(f"turn {role!r}", parts)
            if list(parts).count(CONTENT) != 1:
                raise ValueError(f"chat template {self.name!r}: turn {role!r} must hold {CONTENT} exactly once")
        for name in ("generation_prompt", "specials", "begin", "stop", "supervised"):
            _check_parts(name, getattr(self, name))
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "turns", {r: tuple(p) for r, p in self.turns.items()})
        if self.default_system is not None and (not isinstance(self.default_system, str) or "system" not in self.turns):
            raise ValueError(f"chat template {self.name!r}: default_system needs a str and a 'system' turn")
        if not set(self.stop) <= set(self.specials):
            raise ValueError(f"chat template {self.name!r}: every stop token must be one of its specials")
        object.__setattr__(self, "roles", tuple(self.turns))

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        """The conversation as text, e.g. '<bos><|user|>Hi<|assistant|>Hello<eos>' (what a jinja template renders)."""
        return "".join(text for text, _, _ in self._parts(messages, add_generation_prompt))

    def encode(self, tokenizer, messages: list[dict],
               add_generation_prompt: bool = False) -> tuple[list[int], list[int]]:
        """Token ids of the conversation and labels of the same length for fine-tuning.

        labels[i] = ids[i] where the token belongs to a supervised message (the assistant's) or to the parts
        after it in its turn (the <eos> that closes it), else -100. Text that a template glues to a message
        (ChatML's "assistant\\n") is encoded with it, so it is supervised with it. Labels are aligned with ids
        (not shifted): training predicts labels[i + 1] from ids[: i + 1].
        """
        missing = [s for s in self.specials if s not in tokenizer.special_ids]
        if missing:
            raise ValueError(f"the tokenizer has no special token {missing[0]!r} (it has "
                             f"{list(tokenizer.special_ids)}), which the {self.name!r} chat template needs; "
                             f"train it with specials={self.specials}")
        segments: list[list] = []                      # [special id] or [text, supervised]
        for text, is_special, sup in self._parts(messages, add_generation_prompt):
            if is_special:
                segments.append([tokenizer.special_ids[text], sup])
            elif segments and isinstance(segments[-1][0], str):
                segments[-1][0] += text                # glue text to text: read as one string
                segments[-1][1] = segments[-1][1] or sup
            elif text:
                segments.append([text, sup])
        ids: list[int] = []
        labels: list[int] = []
        for value, sup in segments:
            new = tokenizer.encode(value) if isinstance(value, str) else [value]
            ids += new
            labels += new if sup else [IGNORE_INDEX] * len(new)
        return ids, labels

    def _parts(self, messages: list[dict], add_generation_prompt: bool) -> list[tuple[str, bool, bool]]:
        """(text, is_special, supervised) for every part of the rendered conversation, in order."""
        check_messages(messages, self.roles)
        if not isinstance(add_generation_prompt, bool):
            raise ValueError(f"add_generation_prompt must be True or False, got {add_generation_prompt!r}")
        if self.default_system is not None and messages and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": self.default_system}] + list(messages)
        out = [(p, p in self.specials, False) for p in self.begin]
        for m in messages:
            sup = False
            for p in self.turns[m["role"]]:
                if p == CONTENT:
                    sup = m["role"] in self.supervised
                    out.append((m["content"], False, sup))
                else:
                    out.append((p, p in self.specials, sup))
        if add_generation_prompt:
            out += [(p, p in self.specials, False) for p in self.generation_prompt]
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["roles"]
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "ChatTemplate":
        """A template saved by `to_dict` (e.g. in a tokenizer file); ValueError says what is wrong."""
        keys = {f for f in cls.__dataclass_fields__ if f != "roles"}
        if not isinstance(d, dict) or not {"name", "turns", "generation_prompt", "specials"} <= set(d) <= keys:
            raise ValueError(f"a chat template must be an object with the fields {sorted(keys)}")
        if not isinstance(d["turns"], dict):
            raise ValueError("a chat template's 'turns' must map each role to a list of parts")
        return cls(**{k: v for k, v in d.items()})


def check_messages(messages: Any, roles: tuple[str, ...]) -> None:
    """messages: a list of {"role": ..., "content": str} dicts whose roles are among `roles`."""
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"turns must be a list of {{'role': ..., 'content': ...}} dicts, got {type(messages).__name__}")
    for i, t in enumerate(messages):
        if not isinstance(t, dict) or set(t) != {"role", "content"}:
            raise ValueError(f"turn {i} must be a dict with exactly the keys 'role' and 'content', got {t!r}")
        if t["role"] not in roles:
            raise ValueError(f"turn {i}: role must be {' or '.join(map(repr, roles))}, got {t['role']!r}")
        if not isinstance(t["content"], str):
            raise ValueError(f"turn {i}: content must be a str, got {type(t['content']).__name__}")


def _check_parts(name: str, parts: Any) -> None:
    if not isinstance(parts, (tuple, list)) or not all(isinstance(p, str) for p in parts):
        raise ValueError(f"chat template: {name} must be a list of strings, got {parts!r}")


# The course's template (chapter 11): one special token before each message, <eos> after the assistant's.
COURSE = ChatTemplate(
    name="course",
    begin=("<bos>",),
    turns={"user": ("<|user|>", CONTENT), "assistant": ("<|assistant|>", CONTENT, "<eos>")},
    generation_prompt=("<|assistant|>",),
    specials=("<bos>", "<|user|>", "<|assistant|>", "<eos>"),
    stop=("<eos>", "<|user|>", "<bos>"),
)


def chatml(default_system: str | None = None) -> ChatTemplate:
    """ChatML (SmolLM2, Qwen): <|im_start|>role\\ncontent<|im_end|>\\n per message."""
    return ChatTemplate(
        name="chatml",
        turns={r: ("<|im_start|>", f"{r}\n", CONTENT, "<|im_end|>", "\n") for r in ("system", "user", "assistant")},
        generation_prompt=("<|im_start|>", "assistant\n"),
        specials=("<|im_start|>", "<|im_end|>"),
        default_system=default_system,
        stop=("<|im_end|>", "<|im_start|>"),
    )
