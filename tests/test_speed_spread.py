# Repeated timings and their spread (tinylm.speed.Spread, interleaved): fake clocks and fake measures, exact.
# Run: .venv/bin/python -m pytest tests/test_speed_spread.py
"""A timing is repeated and comes back with its median, lowest and highest run, the run count and the load
average; the jobs that time several things run them round by round; repeats < 1 is refused."""

from __future__ import annotations

import copy
import json
import math
import pickle

import pytest
import torch

from helpers import random_model, tiny
from tinylm import speed


def fake_clock(*readings):
    """A clock that returns the given readings, one per call."""
    return iter(readings).__next__


def test_a_spread_is_the_median_of_its_runs_with_the_lowest_the_highest_and_their_number():
    s = speed.Spread([0.3, 0.1, 0.2], load_before=0.5, load_after=0.75)
    assert float(s) == s.median == 0.2 and (s.low, s.high, s.n) == (0.1, 0.3, 3)
    assert s.runs == (0.3, 0.1, 0.2) and (s.load_before, s.load_after) == (0.5, 0.75)
    assert speed.Spread([1.0, 2.0, 3.0, 10.0]).median == 2.5           # an even count: the middle two's mean
    assert s * 1000 == 200.0 and type(s * 1000) is float               # arithmetic: on the median, a float
    assert math.isnan(speed.Spread([1.0]).load_before)                 # no load given: not known
    with pytest.raises(ValueError, match="at least one run"):
        speed.Spread([])


def test_median_time_on_a_fake_clock_reports_each_calls_duration_exactly():
    calls = []
    clock = fake_clock(0.0, 1.0, 1.0, 4.0, 4.0, 6.0)                   # three calls of 1, 3 and 2 seconds
    s = speed.median_time(lambda: calls.append(1), 3, warm_up=True, clock=clock)
    assert len(calls) == 4                                             # the warm-up, untimed, then three
    assert (s.median, s.low, s.high, s.n, s.runs) == (2.0, 1.0, 3.0, 3, (1.0, 3.0, 2.0))
    seconds, first = speed.timed(iter(["first", "second"]).__next__, 2, clock=fake_clock(0, 5, 10, 12))
    assert first == "first" and (seconds.low, seconds.high, seconds.median) == (2, 5, 3.5)


def test_rates_and_ratios_are_taken_run_by_run():
    fast = speed.Spread([0.02, 0.025, 0.04], 1.0, 2.0)       # seconds per token, three rounds
    slow = speed.Spread([0.04, 0.1, 0.06], 3.0, 1.0)
    rate = fast.map(lambda t: 1 / t)
    assert (rate.low, rate.median, rate.high) == (25.0, 40.0, 50.0)    # the slowest run is the lowest rate
    assert (rate.load_before, rate.load_after) == (1.0, 2.0)
    gain = slow.ratio(fast)                                            # round by round: 2, 4, 1.5
    assert (gain.low, gain.median, gain.high) == (1.5, 2.0, 4.0)
    assert (gain.load_before, gain.load_after) == (3.0, 2.0)           # the higher load of the two
    with pytest.raises(ValueError, match="same number of runs"):
        fast.ratio(speed.Spread([0.1]))


def test_interleaved_runs_the_measures_round_by_round_and_records_the_load():
    order = []

    def measure(name, values):
        values = iter(values)
        return lambda: order.append(name) or next(values)
    out = speed.interleaved({"a": measure("a", [3, 1, 2]), "b": measure("b", [5, 4, 6]),
                             "c": measure("c", [(1, 10), (2, 20), (3, 30)])}, repeats=3)
    assert order == ["a", "b", "c"] * 3                                # a, b, c, a, b, c: not a, a, a, b, ...
    assert (out["a"].median, out["a"].low, out["a"].high, out["a"].n) == (2, 1, 3, 3)
    assert (out["b"].median, out["b"].low, out["b"].high) == (5, 4, 6)
    first, second = out["c"]                                           # a tuple: a Spread per element
    assert (first.runs, second.runs) == ((1, 2, 3), (10, 20, 30))
    for s in (out["a"], out["b"], first, second):
        assert isinstance(s.load_before, float) and isinstance(s.load_after, float)
        assert s.load_before >= 0 and s.load_after >= 0                # Linux keeps a load average
    assert speed.load_average() >= 0


@pytest.mark.parametrize("call", [
    lambda fn: speed.median_time(fn, 0),
    lambda fn: speed.timed(fn, 0),
    lambda fn: speed.interleaved({"a": fn}, 0),
    lambda fn: speed.decode_seconds(random_model(tiny()), torch.zeros(1, 2, dtype=torch.long), 2, repeats=0),
    lambda fn: speed.threads(repeats=0),
    lambda fn: speed.batch(repeats=-1),
    lambda fn: speed.formats(repeats=0),
    lambda fn: speed.speculative(repeats=0),
    lambda fn: speed.compiled(repeats=0),
], ids=["median_time", "timed", "interleaved", "decode_seconds", "threads", "batch", "formats", "speculative",
        "compiled"])
def test_fewer_than_one_repeat_is_refused_with_what_to_pass_and_nothing_runs(call, monkeypatch):
    calls = []
    monkeypatch.setattr(speed, "smollm2", lambda fmt: calls.append(fmt))
    with pytest.raises(ValueError, match=r"repeats must be a positive int \(how many times to run each timing; "
                                         r"3 or more give a median and a range\), got -?[0-9]"):
        call(lambda: calls.append(1))
    assert calls == []                                                 # no warm-up, no SmolLM2 loaded


def test_spreads_survive_json_pickle_and_copy():
    s = speed.Spread([0.5, 0.25, 1.0], 0.5, math.nan)
    for back in (speed.from_json(json.dumps(speed.to_json({"x": [s, {"y": s}], "n": 3})))["x"][1]["y"],
                 pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert isinstance(back, speed.Spread) and back.runs == s.runs and back == 0.5
        assert back.load_before == 0.5 and math.isnan(back.load_after)
    assert json.loads(json.dumps(s)) == 0.5                            # plain json: the median alone


@pytest.fixture
def fake_models(monkeypatch):
    """smollm2(fmt) returns the name; the thread count is recorded, not set; calls are recorded in order."""
    state = {"threads": None, "calls": []}
    monkeypatch.setattr(speed, "smollm2", lambda fmt: fmt)
    monkeypatch.setattr(speed, "_threads", lambda n: state.update(threads=n) or n)
    return state


def test_the_threads_job_runs_every_count_and_format_in_turn(fake_models, monkeypatch):
    def decode(model, prompt, new, repeats=1):
        fake_models["calls"].append((fake_models["threads"], model))
        return speed.Spread([0.01 * fake_models["threads"]])
    monkeypatch.setattr(speed, "decode_seconds", decode)
    out = speed.threads(["fp32", "q4"], counts=[1, 2], new=2, repeats=3)
    assert fake_models["calls"] == [(1, "fp32"), (1, "q4"), (2, "fp32"), (2, "q4")] * 3
    assert set(out) == {"fp32", "q4"} and set(out["q4"]) == {"1", "2"}
    assert out["q4"]["2"].n == 3 and out["q4"]["2"].median == 0.02


def test_the_batch_job_runs_the_sizes_in_turn(fake_models, monkeypatch):
    def decode(model, prompt, new, repeats=1):
        fake_models["calls"].append(tuple(prompt.shape))
        return speed.Spread([0.001 * prompt.shape[0]])
    monkeypatch.setattr(speed, "decode_seconds", decode)
    out = speed.batch("fp32", sizes=[1, 4, 16], new=2, repeats=3, prompt=1)
    assert fake_models["calls"] == [(1, 1), (4, 1), (16, 1)] * 3
    assert list(out) == ["1", "4", "16"] and out["16"].n == 3 and out["16"].median == 0.016


def test_the_formats_job_warms_each_format_up_then_runs_them_in_turn(fake_models, monkeypatch):
    import tinylm.quantize

    def run(model, prompt, new):
        fake_models["calls"].append((model, new))
        return 0.3, 0.03
    monkeypatch.setattr(speed, "prefill_then_decode", run)
    monkeypatch.setattr(tinylm.quantize, "weight_bytes_per_token", lambda model: len(model))
    out = speed.formats(["fp32", "q4"], new=3, repeats=3, prefill=64)
    assert fake_models["calls"] == [("fp32", 1), ("q4", 1)] + [("fp32", 3), ("q4", 3)] * 3   # warm-ups first
    assert out["q4"]["bytes"] == 2 and out["q4"]["seconds"].n == out["q4"]["prefill"].n == 3
    assert (out["fp32"]["prefill"].median, out["fp32"]["seconds"].median) == (0.3, 0.03)


def test_the_speculative_job_runs_both_decoders_on_every_prompt_in_turn(fake_models, monkeypatch):
    import tinylm.speculative

    class Tokenizer:
        def encode_chat(self, messages):
            return [1, 2, 3, len(messages[0]["content"])]

    def plain(model, ids, new, temperature):
        fake_models["calls"].append(("plain", int(ids[0, -1])))
        return torch.cat([ids, torch.zeros(1, new, dtype=torch.long)], 1)

    def spec(model, ids, new, k):
        fake_models["calls"].append(("speculative", int(ids[0, -1])))
        tokens = torch.cat([ids, torch.zeros(1, new, dtype=torch.long)], 1)
        return tokens, {"drafted": k, "accepted": 1, "forwards": new - 1, "new": new}
    monkeypatch.setitem(speed._LOADED, "tokenizer", Tokenizer())
    monkeypatch.setattr(speed, "generate", plain)
    monkeypatch.setattr(tinylm.speculative, "speculative_generate", spec)
    out = speed.speculative("q4", {"one": "a", "two": "bb"}, new=4, k=2, repeats=3)
    assert fake_models["calls"] == [("plain", 1), ("speculative", 1), ("plain", 2), ("speculative", 2)] * 3
    for name in ("one", "two"):
        assert out[name]["same"] is True and out[name]["drafted"] == 2
        assert out[name]["plain_seconds"].n == out[name]["speculative_seconds"].n == 3


def test_decode_seconds_returns_a_spread_of_its_runs_and_one_run_times_the_prefill_too():
    model = random_model(tiny(max_seq_len=64))
    s = speed.decode_seconds(model, torch.zeros(2, 4, dtype=torch.long), 3, repeats=3)
    assert isinstance(s, speed.Spread) and s.n == 3 and 0 < s.low <= s.median <= s.high < 1
    prefill, step = speed.prefill_then_decode(model, torch.zeros(1, 4, dtype=torch.long), 2)
    assert 0 < prefill < 1 and 0 < step < 1
    with pytest.raises(ValueError, match="new must be a positive int"):
        speed.prefill_then_decode(model, torch.zeros(1, 4, dtype=torch.long), 0)


def test_the_compiled_job_alternates_eager_and_compiled_steps(fake_models, monkeypatch):
    class Fast:                                                        # stands in for decoder(model)
        def __init__(self, model):
            self.name = f"{model} compiled"

    def decode(model, prompt, new, repeats=1):
        fake_models["calls"].append(getattr(model, "name", model))
        return speed.Spread([0.5 if new == 1 else 0.01])
    monkeypatch.setattr(speed, "decoder", Fast)
    monkeypatch.setattr(speed, "decode_seconds", decode)
    monkeypatch.setattr(speed, "generate", lambda model, ids, new, temperature, compiled=False: ids)
    out = speed.compiled(["q4"], counts=[1], new=4, repeats=3, check=2)
    assert fake_models["calls"] == ["q4 compiled"] + ["q4", "q4 compiled"] * 3   # the first (compile), then turns
    row = out["q4 @ 1"]
    assert row["first"].n == 1 and row["eager"].n == row["compiled"].n == 3 and row["same"] is True
    assert row["eager"] == row["compiled"] == 0.01
