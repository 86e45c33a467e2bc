# The unpinned timing process of chapter 15 (tinylm.speed), on small models.
# Run: .venv/bin/python -m pytest tests/test_speed.py
"""The timing process starts without the numerics pins and returns its jobs' results; the timers measure what
they say; bad jobs are refused."""

from __future__ import annotations

import time

import pytest
import torch

from helpers import random_model, tiny
from tinylm import speed
from tools import numerics


def test_the_pins_removed_are_the_pins_applied():
    assert set(speed.PINNED) == set(numerics.PINS)


def test_the_timing_process_runs_without_the_pins_and_reports_the_cpu():
    assert "ATEN_CPU_CAPABILITY" in __import__("os").environ          # conftest pinned this process
    runs = speed.unpinned(machine={"threads": 1})
    out = runs["machine"]
    assert set(runs["cpu_seconds"]) == {"load", "machine"} and runs["cpu_seconds"]["machine"] > 0
    assert out["pinned"] == []
    assert sorted(out["has"] + out["lacks"]) == sorted(speed.CPU_FLAGS)
    assert out["bandwidth"] > 1e8 and out["flops"] > 1e8 and out["threads"] == 1
    for rate in (out["bandwidth"], out["flops"]):                   # Spreads, through JSON: 5 runs, the load
        assert isinstance(rate, speed.Spread) and rate.n == 5 and rate.low <= rate <= rate.high
        assert rate.load_before >= 0 and rate.load_after >= 0
    assert set(runs["load_average"]) == {"before", "after"}
    assert all(isinstance(v, float) and v >= 0 for v in runs["load_average"].values())


def test_the_timing_process_loads_what_its_jobs_use_and_times_nothing_once_its_caller_has_gone():
    assert speed.formats_needed({"formats": {}}) == list(speed.FORMATS)               # the default: all six
    assert speed.formats_needed({"threads": {"formats": ["q4"]}, "batch": {}, "machine": {}}) == ["fp32", "q4"]
    assert speed.formats_needed({"overhead": {}}) == []
    assert speed.formats_needed({"compiled": {}}) == ["fp32", "q4"]
    timing = speed.TimingProcess(machine={"threads": 1})
    out, err = timing._process.communicate("", timeout=120)    # no "go": the caller stopped before results()
    assert timing._process.returncode == 0 and out == "", err


@pytest.mark.slow   # SmolLM2 in q4, and one block compiled twice: unpinned, then here under the pins
def test_the_compiled_job_times_both_paths_and_compares_their_tokens_pinned_or_not():
    job = {"formats": ["q4"], "counts": [1], "new": 2, "repeats": 1, "check": 4}
    for out in (speed.unpinned(compiled=job)["compiled"], speed.compiled(**job)):
        row = out["q4 @ 1"]
        assert set(out) == {"q4 @ 1"} and row["same"] is True
        assert row["first"] > row["compiled"] > 0 and row["eager"] > 0      # the first run compiled
        assert row["first"].n == 1 and row["eager"].n == row["compiled"].n == 1
    # the unpinned process left its AVX-512 code in Inductor's cache: a pinned process that runs it segfaults
    # (tinylm.fast compiles pinned processes without that cache)


def test_unknown_or_missing_jobs_are_refused():
    with pytest.raises(ValueError, match="jobs must be among machine"):
        speed.unpinned(nonsense={})
    with pytest.raises(ValueError, match="got none"):
        speed.unpinned()
    with pytest.raises(ValueError, match="fmt must be one of"):
        speed.smollm2("int4")


def test_median_time_is_the_median_after_a_warm_up():
    calls = []
    delays = iter([0.0, 0.03, 0.0, 0.01])       # warm-up, then three timed calls: median 0.01

    def fn():
        calls.append(1)
        time.sleep(next(delays))
    assert 0.009 < speed.median_time(fn, 3) < 0.025
    assert len(calls) == 4
    delays = iter([0.02])
    assert speed.median_time(fn, 1, warm_up=False) >= 0.02 and len(calls) == 5


def test_timed_times_every_call_and_returns_the_first_result():
    delays, results = iter([0.03, 0.0, 0.0]), iter(["first", "second", "third"])

    def fn():
        time.sleep(next(delays))
        return next(results)
    seconds, first = speed.timed(fn, 3)              # no warm-up: the slow first call is one of the three
    assert first == "first" and seconds < 0.02       # the median of 0.03, 0, 0
    with pytest.raises(StopIteration):               # all three values were used
        next(results)


def test_decode_seconds_times_one_step_of_a_batch():
    model = random_model(tiny(max_seq_len=64))
    one = speed.decode_seconds(model, torch.zeros(1, 4, dtype=torch.long), 4, repeats=1)
    four = speed.decode_seconds(model, torch.zeros(4, 4, dtype=torch.long), 4, repeats=1)
    assert 0 < one < 1 and 0 < four < 1


def test_timed_glue_reads_back_as_a_number_and_only_it_is_masked_for_nbval():
    import ast
    import configparser
    import re
    from pathlib import Path

    from tinylm.book import Timed

    text = repr(Timed(15.625))
    assert ast.literal_eval(text) == 15.625 and float(Timed(2.5)) == 2.5
    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).parents[1] / "nbval_sanitize.cfg")

    def sanitize(s: str) -> str:
        for section in cfg.sections():
            s = re.sub(cfg[section]["regex"], cfg[section]["replace"], s)
        return s
    assert sanitize(text) == sanitize(repr(Timed(3.0)))                     # timings: masked
    assert sanitize("15.6 tok/s") == sanitize("  9.1 tok/s")
    assert sanitize("1.73×") == sanitize("0.9×")
    assert sanitize("CPU has: avx2 fma") == sanitize("CPU has: avx2 avx512f")
    for plain in ("15.625", "0.27%", "96.9%", "538.1", "12 tokens"):        # everything else: compared
        assert sanitize(plain) == plain
