"""Statistics of the learning benchmark: known values, and properties over generated samples."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matpo_graph.tracking.stats import mean, mean_interval, paired_difference, standard_error, t_quantile

accuracies = st.lists(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), min_size=2, max_size=60)


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (2, 4.3027), (5, 2.5706), (10, 2.2281), (30, 2.0423), (47, 2.0117), (1000, 1.9623)],
)
def test_t_quantile_matches_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-4)


def test_t_quantile_other_levels():
    assert t_quantile(0.95, 10) == pytest.approx(1.8125, abs=2e-4)
    assert t_quantile(0.995, 20) == pytest.approx(2.8453, abs=2e-4)


@pytest.mark.parametrize(("p", "df"), [(0.5, 3), (1.0, 3), (0.2, 3), (0.975, 0)])
def test_t_quantile_rejects_bad_arguments(p, df):
    with pytest.raises(ValueError):
        t_quantile(p, df)


def test_mean_and_standard_error_known_values():
    xs = [0.0, 1.0, 1.0, 0.0, 1.0]
    assert mean(xs) == pytest.approx(0.6)
    # sample sd of {0,1,1,0,1} = sqrt(0.3); se = sqrt(0.3 / 5)
    assert standard_error(xs) == pytest.approx(math.sqrt(0.3 / 5))
    assert math.isnan(mean([])) and math.isnan(standard_error([1.0]))


def test_mean_interval_known_value():
    iv = mean_interval([0.0, 1.0, 1.0, 0.0, 1.0])
    half = 2.7764 * math.sqrt(0.3 / 5)  # t(0.975, 4) = 2.7764
    assert (iv.low, iv.high) == pytest.approx((0.6 - half, 0.6 + half), abs=1e-3)
    assert iv.n == 5


def test_paired_difference_known_value_and_pairing():
    before = {"a": 0.0, "b": 0.25, "c": 0.5, "d": 1.0}
    after = {"a": 0.25, "b": 0.5, "c": 0.5, "d": 1.0, "extra": 1.0}
    iv = paired_difference(after, before)
    diffs = [0.25, 0.25, 0.0, 0.0]
    assert iv.n == 4 and iv.estimate == pytest.approx(0.125)
    assert iv.se == pytest.approx(statistics.stdev(diffs) / 2)
    with pytest.raises(ValueError, match="share no question"):
        paired_difference({"x": 1.0}, {"y": 0.0})


@settings(max_examples=60, deadline=None)
@given(accuracies)
def test_interval_brackets_the_mean_and_se_is_nonnegative(xs):
    iv = mean_interval(xs)
    assert iv.se >= 0
    assert iv.low <= iv.estimate + 1e-12 and iv.estimate <= iv.high + 1e-12
    assert iv.high - iv.low == pytest.approx(2 * t_quantile(0.975, len(xs) - 1) * iv.se, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(accuracies, st.floats(min_value=-1.0, max_value=1.0, allow_nan=False))
def test_shift_moves_the_estimate_not_the_error(xs, c):
    shifted = [x + c for x in xs]
    assert mean(shifted) == pytest.approx(mean(xs) + c, abs=1e-9)
    assert standard_error(shifted) == pytest.approx(standard_error(xs), abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(accuracies, st.floats(min_value=-0.5, max_value=0.5, allow_nan=False))
def test_paired_difference_of_a_constant_shift_is_exact(xs, c):
    before = {str(i): x for i, x in enumerate(xs)}
    after = {k: v + c for k, v in before.items()}
    iv = paired_difference(after, before)
    assert iv.estimate == pytest.approx(c, abs=1e-9)
    assert iv.se == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(accuracies)
def test_pairing_never_widens_the_interval_of_a_common_improvement(xs):
    """Adding the same per-question difficulty to both points leaves the paired interval unchanged."""
    before = {str(i): 0.0 for i in range(len(xs))}
    after = {str(i): 0.1 for i in range(len(xs))}
    harder = {k: v + xs[int(k)] for k, v in before.items()}
    harder_after = {k: v + xs[int(k)] for k, v in after.items()}
    assert paired_difference(harder_after, harder).se == pytest.approx(paired_difference(after, before).se, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=1, max_value=200))
def test_t_quantile_is_above_the_normal_and_falls_with_df(df):
    z = statistics.NormalDist().inv_cdf(0.975)
    q = t_quantile(0.975, df)
    assert q > z
    assert t_quantile(0.975, df + 1) < q
