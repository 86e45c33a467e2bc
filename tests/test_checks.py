# The validation vocabulary every module uses (tinylm/_checks.py). Run: .venv/bin/python -m pytest tests/test_checks.py
import json

import numpy as np
import pytest

from tinylm import Config
from tinylm._checks import check_bool, check_header, check_int, check_number, check_one_of


def test_ints_accept_numpy_ints_and_return_plain_ints():
    got = check_int("n", np.int64(3), low=1)
    assert got == 3 and type(got) is int
    assert check_int("n", 0, low=0) == 0


@pytest.mark.parametrize("value", [True, 2.0, "2", None, np.float64(2.0)])
def test_ints_reject_bools_floats_and_strings(value):
    with pytest.raises(ValueError, match="n must be a positive int"):
        check_int("n", value, low=1)


@pytest.mark.parametrize("kwargs, words", [
    (dict(low=1), "n must be a positive int, got 0"),
    (dict(low=2), "n must be an int >= 2, got 0"),
    (dict(low=1, high=3), r"n must be an int in \[1, 3\], got 0"),
    (dict(low=1, high=3, span="in [1, max_seq_len=4)", hint=" or None"),
     r"n must be an int in \[1, max_seq_len=4\) or None, got 0"),
])
def test_int_messages_name_the_value_and_the_rule(kwargs, words):
    with pytest.raises(ValueError, match=words):
        check_int("n", 0, **kwargs)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), True, "1", None])
def test_numbers_are_finite_and_not_bools(value):
    with pytest.raises(ValueError, match="x must be a number >= 0"):
        check_number("x", value, 0)


def test_number_intervals():
    assert check_number("p", 1, 0, 1, low_open=True) == 1
    assert type(check_number("p", np.float32(0.5), 0, 1)) is float
    for bad, words in [(0.0, r"in \(0, 1\]"), (1.5, r"in \(0, 1\]")]:
        with pytest.raises(ValueError, match=words):
            check_number("p", bad, 0, 1, low_open=True)
    with pytest.raises(ValueError, match="base must be a number > 1, got 1"):
        check_number("base", 1, 1, low_open=True)


def test_bools_and_choices():
    assert check_bool("flag", False) is False
    with pytest.raises(ValueError, match="flag must be True or False, got 1"):
        check_bool("flag", 1)
    assert check_one_of("k", 2, (1, 2)) == 2
    with pytest.raises(ValueError, match="k must be 1 or 2, got True"):
        check_one_of("k", True, (1, 2))
    with pytest.raises(ValueError, match=r"s must be one of \(None, 'a', 'b'\), got 'c'"):
        check_one_of("s", "c", (None, "a", "b"))


def test_json_header():
    d = {"format": "tinylm-x", "version": 1, "a": 0}
    assert check_header(d, "tinylm-x", 1, "f.json", "x file", required=("a",)) is d
    for bad, words in [([], "expected a JSON object"), ({**d, "format": "y"}, "is this a tinylm x file"),
                       ({**d, "version": 2}, "unsupported version 2; this tinylm reads version 1"),
                       ({"format": "tinylm-x", "version": 1}, "missing field 'a'")]:
        with pytest.raises(ValueError, match=f"f.json: .*{words}"):
            check_header(bad, "tinylm-x", 1, "f.json", "x file", required=("a",))


def test_config_stores_numpy_ints_as_ints():
    cfg = Config(vocab_size=np.int64(64), dim=np.int32(32), n_heads=4, n_kv_heads=2, n_experts=np.int64(0))
    assert type(cfg.vocab_size) is int and type(cfg.dim) is int and type(cfg.n_experts) is int
    json.dumps(cfg.to_dict())                                 # a checkpoint can save it
    with pytest.raises(ValueError, match="rope_base"):
        Config(rope_base=float("inf"))
