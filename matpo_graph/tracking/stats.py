"""Small-sample statistics for held-out accuracy: mean, standard error, Student-t intervals, paired differences.

Pure stdlib (no numpy, scipy or I/O), so the benchmark's tables can be computed and tested anywhere.
Accuracies are per question (0/1 for a greedy answer, the share of correct samples for G samples), and
questions are the unit: the standard error is taken over questions, and a difference between two
evaluation points is paired by question, which removes the questions' own difficulty from its noise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Interval", "mean", "mean_interval", "paired_difference", "standard_error", "t_quantile"]


@dataclass(frozen=True)
class Interval:
    """An estimate with its standard error and a two-sided confidence interval over `n` units."""

    estimate: float
    se: float
    low: float
    high: float
    n: int


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; NaN for no values (a missing point stays visible instead of reading as 0)."""
    return float(statistics.fmean(values)) if values else math.nan


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean: sample standard deviation (n - 1) / sqrt(n); NaN below two values."""
    if len(values) < 2:
        return math.nan
    return statistics.stdev(values) / math.sqrt(len(values))


def _t_density(x: float, df: float) -> float:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf_upper_half(x: float, df: float, steps: int = 2000) -> float:
    """P(0 <= T <= x) by Simpson's rule (the density is smooth and x is moderate)."""
    h = x / steps
    total = _t_density(0.0, df) + _t_density(x, df)
    for i in range(1, steps):
        total += (4 if i % 2 else 2) * _t_density(i * h, df)
    return total * h / 3


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (p in (0.5, 1), df >= 1).

    Bisection on a numerically integrated CDF: accurate to about 1e-6 for the quantiles intervals use.
    """
    if not 0.5 < p < 1.0:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    target = p - 0.5
    lo, hi = 0.0, 1.0
    while _t_cdf_upper_half(hi, df) < target:
        hi *= 2.0
        if hi > 1e6:
            raise ValueError(f"quantile {p} of t({df}) is out of range")
    for _ in range(60):
        mid = (lo + hi) / 2
        if _t_cdf_upper_half(mid, df) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_interval(values: Sequence[float], *, level: float = 0.95) -> Interval:
    """Mean with its standard error and a Student-t interval (NaN bounds below two values)."""
    m, se, n = mean(values), standard_error(values), len(values)
    if n < 2:
        return Interval(m, se, math.nan, math.nan, n)
    half = t_quantile(0.5 + level / 2, n - 1) * se
    return Interval(m, se, m - half, m + half, n)


def paired_difference(after: Mapping[str, float], before: Mapping[str, float], *, level: float = 0.95) -> Interval:
    """Mean of `after[q] - before[q]` over the questions both evaluated, with a paired t interval.

    Raises:
        ValueError: the two evaluations share no question (they are not of the same held-out set).
    """
    common = [q for q in after if q in before]
    if not common:
        raise ValueError("the two evaluations share no question; a paired difference needs the same held-out set")
    return mean_interval([after[q] - before[q] for q in common], level=level)
