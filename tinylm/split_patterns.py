"""The split patterns a tokenizer may use: text -> pieces (merges happen inside a piece only), by name.

A tokenizer file is data, never code: its split pattern is one of SPLIT_PATTERNS, named (a file cannot
bring its own regular expression, which could drop text or never finish).
"""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------------------------
# Split patterns: text -> pieces. Merges happen inside a piece only, so tokens never cross a piece.
# Every character falls into exactly one branch of each, so the pieces always join back to the text.
# ---------------------------------------------------------------------------------------------
# The course's: GPT-2's split written for Python's `re` (no \p{L}): an optional space followed by letters,
# or digits, or other symbols; English contractions; runs of whitespace. [^\W\d_] is "a letter": word
# characters minus digits and underscore (it also counts ² and ½ as letters, where \p{L} would not).
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
# GPT-2's own (Unicode classes, for the `regex` package).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# SmolLM/SmolLM2: every digit is a piece of its own, then GPT-2's split (llama.cpp's "smollm"; the
# tokenizer.json's Sequence[Digits(individual_digits=True), ByteLevel]), folded into one expression: a digit
# ends a whitespace run as the end of the text would, since GPT-2's split only ever saw the text between digits.
SMOLLM_PATTERN = r"""\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"""
# Qwen2/Qwen3 and Llama 3 (llama.cpp's "qwen2" and "llama-bpe"): numbers one digit, or up to three.
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPLIT_PATTERNS = {"tinylm": PATTERN, "gpt2": GPT2_PATTERN, "smollm": SMOLLM_PATTERN, "qwen2": QWEN2_PATTERN,
                  "llama-bpe": LLAMA3_PATTERN}


def split_pattern(name_or_pattern: str) -> tuple[str, str]:
    """(name, pattern) of a known split pattern, given its name or its exact text; ValueError otherwise."""
    for name, pattern in SPLIT_PATTERNS.items():
        if name_or_pattern in (name, pattern):
            return name, pattern
    raise ValueError(f"unknown split pattern {str(name_or_pattern)[:80]!r}: choose one of {sorted(SPLIT_PATTERNS)} "
                     "(a tokenizer never runs a regular expression that a file brings)")


def compile_pattern(pattern: str):
    """\\p{L}-style classes need the `regex` package; the course's pattern runs on Python's `re`."""
    if r"\p{" not in pattern:
        return re.compile(pattern)
    try:
        import regex
    except ImportError:
        raise ImportError("this split pattern needs the `regex` package: pip install regex") from None
    return regex.compile(pattern)

