"""The few tests the course's verdicts use, written out (no SciPy): Student's t, paired and Welch, and McNemar's.

    paired_t(a, b)        a[i] - b[i] over matched pairs (the same seed, the same problem): is the mean 0?
    welch_t(a, b)         two independent samples with their own variances: are the means equal?
    mcnemar(a_right, b_right)  two scorings of the same problems, right/wrong: does one get more right?
    t_sf(t, df)           P(T > t) for Student's t with df degrees of freedom
    t_critical(df, alpha) the |t| at which a two-sided test has p = alpha

Each returns a two-sided p-value. With 3 seeds a paired test has 2 degrees of freedom: a verdict at p < 0.05
needs |t| > 4.30, so only a difference several times its seed-to-seed wobble passes.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), x in [0, 1]."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df > 0 degrees of freedom."""
    if not df > 0:
        raise ValueError(f"df must be positive, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_critical(df: float, alpha: float = 0.05) -> float:
    """|t| at which a two-sided test of df degrees of freedom has p = alpha (bisection on `t_sf`)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    low, high = 0.0, 100.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if 2 * t_sf(mid, df) > alpha else (low, mid)
    return mid


@dataclass(frozen=True)
class TTest:
    mean: float        # the difference of the means (paired: the mean difference)
    se: float          # its standard error
    t: float
    df: float
    p: float           # two-sided


def _numbers(xs: Sequence[float], what: str, least: int) -> list[float]:
    out = [float(x) for x in xs]
    if len(out) < least:
        raise ValueError(f"{what} has {len(out)} value(s); the test needs at least {least}")
    if not all(math.isfinite(x) for x in out):
        raise ValueError(f"{what} holds a value that is not finite (a diverged run?): {out}")
    return out


def _two_sided(mean: float, se: float, df: float) -> TTest:
    if se == 0.0:
        return TTest(mean, 0.0, math.copysign(math.inf, mean) if mean else 0.0, df, 0.0 if mean else 1.0)
    t = mean / se
    return TTest(mean, se, t, df, min(1.0, 2.0 * t_sf(abs(t), df)))


def paired_t(a: Sequence[float], b: Sequence[float]) -> TTest:
    """Paired t-test of mean(a - b) = 0: a[i] and b[i] share what pairs them (a seed, a problem)."""
    a, b = _numbers(a, "a", 2), _numbers(b, "b", 2)
    if len(a) != len(b):
        raise ValueError(f"a paired test needs as many values in a as in b, got {len(a)} and {len(b)}")
    d = [x - y for x, y in zip(a, b)]
    return _two_sided(statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d)), len(d) - 1)


def welch_t(a: Sequence[float], b: Sequence[float]) -> TTest:
    """Welch's t-test of mean(a) = mean(b) for independent samples, each with its own variance."""
    a, b = _numbers(a, "a", 2), _numbers(b, "b", 2)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se else len(a) + len(b) - 2
    return _two_sided(statistics.fmean(a) - statistics.fmean(b), se, df)


@dataclass(frozen=True)
class McNemar:
    only_a: int        # problems a gets right and b wrong
    only_b: int        # problems b gets right and a wrong
    p: float           # exact two-sided binomial p-value of only_a against only_b


def mcnemar(a_right: Sequence[bool], b_right: Sequence[bool]) -> McNemar:
    """McNemar's exact test on the same problems scored twice: only the problems where the two differ count,
    and under 'neither is better' each of them is a fair coin."""
    a_right, b_right = list(a_right), list(b_right)
    if len(a_right) != len(b_right) or not a_right:
        raise ValueError(f"score the same problems twice: got {len(a_right)} and {len(b_right)} results")
    if not all(isinstance(x, bool) for x in a_right + b_right):
        raise TypeError("each result must be a bool (True: right)")
    only_a = sum(x and not y for x, y in zip(a_right, b_right))
    only_b = sum(y and not x for x, y in zip(a_right, b_right))
    n, k = only_a + only_b, min(only_a, only_b)
    p = 1.0 if n == 0 else min(1.0, 2.0 * sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n)
    return McNemar(only_a, only_b, p)
