# How glued numbers are stored, and what nbval compares of them. Run: .venv/bin/python -m pytest tests/test_glue.py
"""The rule (docs/testing.md): nbval compares what no CPU changes. A glued float keeps two significant digits in
view (`Approx`), a run's value none (`Varies`), a timing none (`Timed`); myst-nb reads each back as the value."""

import ast
import configparser
import re
from pathlib import Path

import numpy as np
import pytest
from IPython.core.formatters import format_display_data

from tinylm.book import Approx, Timed, Varies, glue

CFG = configparser.ConfigParser()
CFG.read(Path(__file__).parents[1] / "nbval_sanitize.cfg")


def sanitize(text: str) -> str:
    for section in CFG.sections():
        text = re.sub(CFG[section]["regex"], CFG[section]["replace"], text)
    return text


def plain(value) -> str:
    """The text/plain that IPython (and so myst-nb's glue) stores for a value."""
    return format_display_data(value)[0]["text/plain"]


def test_a_float_reads_back_whole_and_nbval_compares_two_significant_digits():
    text = plain(Approx(7.123785983771086))
    assert ast.literal_eval(text) == 7.123785983771086                    # the prose gets every digit
    assert sanitize(text) == sanitize(plain(Approx(7.123765338212252)))   # the last digits: another CPU
    assert sanitize(text) != sanitize(plain(Approx(7.3)))                 # a real change: caught
    assert sanitize(plain(Approx(0.000123))) != sanitize(plain(Approx(0.000124 * 2)))


def test_a_runs_value_is_masked_whole_and_reads_back():
    for a, b in ((2.63, 2.78), (78, 75), ([684, 1295], [664, 1316])):
        assert ast.literal_eval(plain(Varies(a))) == a
        assert sanitize(plain(Varies(a))) == sanitize(plain(Varies(b)))
    assert sanitize("loss 2.63\n" + plain(Varies(1))) == "loss 2.63\n<VARIES>  # varies"   # only its own line


def test_timings_and_plain_text_are_as_before():
    assert ast.literal_eval(plain(Timed(15.625))) == 15.625
    assert sanitize(plain(Timed(15.625))) == sanitize(plain(Timed(3.0)))
    for text in ("15.625", "0.27%", "96.9%", "538.1", "12 tokens", "148"):   # printed numbers: compared
        assert sanitize(text) == text


def test_glue_wraps_floats_and_refuses_two_kinds(monkeypatch):
    stored = {}
    import myst_nb

    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: stored.__setitem__(name, value))
    glue("f", 0.5)
    glue("f32", np.float32(0.25))
    glue("n", 12)
    glue("run", 2.5, varies=True)
    glue("t", 0.1, timed=True)
    assert type(stored["f"]) is Approx and type(stored["f32"]) is Approx and stored["n"] == 12
    assert isinstance(stored["run"], Varies) and type(stored["t"]) is Timed
    glue("again", stored["t"])
    assert type(stored["again"]) is Timed                                 # a wrapped value keeps its kind
    with pytest.raises(ValueError, match="not both"):
        glue("x", 1.0, timed=True, varies=True)


def test_a_runs_markdown_keeps_its_markdown_and_is_masked():
    from IPython.display import Markdown

    data = format_display_data(Varies(Markdown("worse beyond twice the standard error")))[0]
    assert data["text/markdown"].startswith("worse beyond twice the standard error")
    other = format_display_data(Varies(Markdown("within the seeds' spread")))[0]
    assert sanitize(data["text/markdown"]) == sanitize(other["text/markdown"])
    assert "text/markdown" not in format_display_data(Varies(2.5))[0]
