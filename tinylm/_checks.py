"""The package's validation vocabulary: small checks whose ValueErrors name the value and the rule.

    check_int("batch_size", 0, low=1)          batch_size must be a positive int, got 0
    check_number("top_p", 2.0, 0, 1, low_open=True)   top_p must be a number in (0, 1], got 2.0
    check_bool("qk_norm", 1)                   qk_norm must be True or False, got 1
    check_one_of("experts_per_token", 3, (1, 2))      experts_per_token must be 1 or 2, got 3
    check_header(d, "tinylm-bpe", 1, path, "tokenizer file")   the format and version of a JSON file
    check_fields(d, "config.json: field 'train'", ("steps", ...))   exactly these keys, no others

Ints may be any `numbers.Integral` (numpy ints too) but never a bool, nor a float equal to an int (2.0);
numbers must be finite (no inf, no NaN). Each check returns the value as a plain Python int / float,
ready to store or serialise.
`hint` adds a few words after the rule, e.g. " (0 means dense SwiGLU)". Nothing here imports torch.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

IGNORE_INDEX = -100  # label of a position the loss skips (torch's cross_entropy default ignore_index)


def is_int(value: Any) -> bool:
    """True for an int, a numpy int or any other numbers.Integral, False for a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _span(low, high, low_open: bool = False, high_open: bool = False) -> str:
    """The words of an interval: '> 1', '>= 0', 'in (0, 1]'."""
    if high is None:
        return f"{'>' if low_open else '>='} {low}"
    if low is None:
        return f"{'<' if high_open else '<='} {high}"
    return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None, *,
              span: str | None = None, hint: str = "") -> int:
    """value as an int in [low, high] (None: no bound); `span` rewords the interval in the message.

    low=1 alone reads "a positive int", low=0 alone "an int >= 0".
    """
    if is_int(value) and (low is None or value >= low) and (high is None or value <= high):
        return int(value)
    if span is None and (low, high) == (1, None):
        rule = "a positive int"
    elif span is None and low is None and high is None:
        rule = "an int"
    else:
        rule = f"an int {span or _span(low, high)}"
    raise ValueError(f"{name} must be {rule}{hint}, got {value!r}")


def check_threads(name: str, value: Any) -> int:
    """A --threads flag: an int in [1, this machine's cores] (more threads than cores only wait for each other,
    and a huge number crashes PyTorch)."""
    import os

    return check_int(name, value, 1, os.cpu_count() or 1, hint=" (this machine's cores: os.cpu_count())")


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False, span: str | None = None,
                 hint: str = "") -> float:
    """value as a finite number from low to high (open ends: low_open, high_open); None: no bound.

    Ints count as numbers; bools, inf and NaN do not. `span` rewords the interval in the message.
    """
    if (_is_number(value) and (low is None or (value > low if low_open else value >= low))
            and (high is None or (value < high if high_open else value <= high))):
        return value if isinstance(value, (int, float)) else float(value)
    if span is None:
        span = "" if low is None and high is None else _span(low, high, low_open, high_open)
    raise ValueError(f"{name} must be {f'a number {span}'.rstrip()}{hint}, got {value!r}")


def check_bool(name: str, value: Any) -> bool:
    """value must be exactly True or False (not 0, 1 or "yes")."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def _kind(value: Any) -> type:
    """bool, int (any Integral), float (any other Real) or the value's own type: what a choice must share."""
    if isinstance(value, bool):
        return bool
    if is_int(value):
        return int
    return float if isinstance(value, numbers.Real) else type(value)


def check_one_of(name: str, value: Any, choices: Sequence, hint: str = "") -> Any:
    """value must be one of choices, and of the same kind: a bool never passes for an int choice, nor a
    float for an int (2.0 is not 2). Returns the matching choice itself (a plain int for a numpy int)."""
    for choice in choices:
        if _kind(choice) is _kind(value) and choice == value:
            return choice
    words = " or ".join(map(repr, choices)) if len(choices) <= 2 else f"one of {tuple(choices)}"
    raise ValueError(f"{name} must be {words}{hint}, got {value!r}")


def check_header(d: Any, fmt: str, version: int | tuple[int, ...], source: str, kind: str,
                 required: Iterable[str] = ()) -> dict:
    """The parsed JSON object of a tinylm file, checked: a dict whose 'format' and 'version' are ours.

    `version` is the one version this tinylm reads, or a tuple of them; `source` (the path) starts every
    message, `kind` names the file for a human ("tokenizer file"); `required` lists fields that must be present.
    """
    versions = version if isinstance(version, tuple) else (version,)
    if not isinstance(d, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(d).__name__}")
    if d.get("format") != fmt:
        raise ValueError(f"{source}: field 'format' must be {fmt!r}, got {d.get('format')!r}; "
                         f"is this a tinylm {kind}?")
    if not is_int(d.get("version")) or d.get("version") not in versions:
        raise ValueError(f"{source}: unsupported version {d.get('version')!r}; "
                         f"this tinylm reads version {' and '.join(map(str, versions))}")
    for field in required:
        if field not in d:
            raise ValueError(f"{source}: missing field {field!r}")
    return d


def check_fields(d: Any, source: str, required: Iterable[str], optional: Iterable[str] = ()) -> dict:
    """d must be a dict (a JSON object) with every required key and no key outside required + optional.

    `source` names the object in every message, e.g. "run/config.json: field 'train'".
    """
    if not isinstance(d, dict):
        raise ValueError(f"{source} must be a JSON object, got {type(d).__name__}")
    required = list(required)
    missing = [k for k in required if k not in d]
    if missing:
        raise ValueError(f"{source} misses {', '.join(map(repr, missing))}")
    unknown = sorted(set(d) - set(required) - set(optional), key=str)
    if unknown:
        raise ValueError(f"{source} has unknown {', '.join(map(repr, unknown))}; "
                         f"expected {', '.join(map(repr, [*required, *optional]))}")
    return d
