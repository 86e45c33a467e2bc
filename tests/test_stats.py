# tinylm.stats: the t tests and McNemar's, against closed forms and hand counts.
import math
import random

import pytest

from tinylm import stats


def test_t_tail_against_its_closed_forms_at_one_and_two_degrees_of_freedom_and_the_normal_far_out():
    for t in (-3.0, -0.5, 0.0, 0.7, 2.0, 4.303, 30.0):
        assert stats.t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)      # Cauchy
        assert stats.t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
        normal = 0.5 * math.erfc(t / math.sqrt(2))
        assert stats.t_sf(t, 1e7) == pytest.approx(normal, abs=1e-6)
    assert 2 * stats.t_sf(4.303, 2) == pytest.approx(0.05, abs=1e-4)       # the 95% critical value at df 2
    assert 2 * stats.t_sf(2.776, 4) == pytest.approx(0.05, abs=1e-4)       # and at df 4
    assert stats.t_critical(2) == pytest.approx(4.303, abs=1e-3) and stats.t_critical(4) == pytest.approx(2.776, abs=1e-3)
    assert stats.t_sf(math.inf, 3) == 0.0 and stats.t_sf(-math.inf, 3) == 1.0
    with pytest.raises(ValueError, match="df must be positive"):
        stats.t_sf(1.0, 0)


def test_paired_and_welch_by_hand():
    a, b = [2.05, 2.36, 2.14, 2.20], [2.00, 2.30, 2.10, 2.12]
    d = [x - y for x, y in zip(a, b)]
    mean = sum(d) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 3)
    p = stats.paired_t(a, b)
    assert (p.mean, p.se, p.df) == (pytest.approx(mean), pytest.approx(sd / 2), 3)
    assert p.p == pytest.approx(2 * stats.t_sf(mean / (sd / 2), 3))
    w = stats.welch_t(a, b)
    va = sum((x - sum(a) / 4) ** 2 for x in a) / 3 / 4
    vb = sum((x - sum(b) / 4) ** 2 for x in b) / 3 / 4
    assert w.se == pytest.approx(math.sqrt(va + vb))
    assert w.df == pytest.approx((va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 3))
    assert p.p < 0.01 < 0.5 < w.p           # the same numbers: paired sees it, unpaired does not
    same = stats.paired_t([1.0, 2.0], [0.5, 1.5])      # the same difference twice: no spread
    assert (same.se, same.p) == (0.0, 0.0) and stats.paired_t([1.0, 2.0], [1.0, 2.0]).p == 1.0


def test_a_t_test_under_the_null_rejects_about_five_percent():
    rng = random.Random(0)
    hits = sum(stats.paired_t([rng.gauss(0, 1) for _ in range(5)], [0.0] * 5).p < 0.05 for _ in range(4000))
    assert 0.04 < hits / 4000 < 0.06


def test_bad_samples_are_refused_with_what_to_change():
    with pytest.raises(ValueError, match="at least 2"):
        stats.paired_t([1.0], [2.0])
    with pytest.raises(ValueError, match="as many values"):
        stats.paired_t([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="not finite"):
        stats.welch_t([1.0, math.nan], [1.0, 2.0])


def test_mcnemar_counts_only_the_problems_that_differ():
    a = [True] * 90 + [False] * 10            # a right on 90
    b = [True] * 85 + [False] * 5 + [True] * 5 + [False] * 5
    m = stats.mcnemar(a, b)                   # a alone right on 5, b alone on 5
    assert (m.only_a, m.only_b, m.p) == (5, 5, 1.0)
    m = stats.mcnemar([True] * 6 + [False] * 4, [False] * 10)
    assert (m.only_a, m.only_b) == (6, 0) and m.p == pytest.approx(2 / 2 ** 6)
    m = stats.mcnemar([True] * 8 + [False] * 2, [True, False] * 5)    # 4 against 0... and 1 against 1
    assert (m.only_a, m.only_b) == (4, 1)
    assert m.p == pytest.approx(2 * (math.comb(5, 0) + math.comb(5, 1)) / 2 ** 5)
    assert stats.mcnemar([True, False], [True, False]).p == 1.0
    with pytest.raises(ValueError, match="same problems twice"):
        stats.mcnemar([True], [True, False])
    with pytest.raises(TypeError, match="bool"):
        stats.mcnemar([1, 0], [0, 1])
