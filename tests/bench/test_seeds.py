"""Seeds from one start: each paired with the start, pooled per question, and set against a control."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matpo_graph.bench.learning_bench import BenchLayout, EvalPoint
from matpo_graph.bench.seeds import compare_seeds, render_seeds

ROOT = Path(__file__).resolve().parents[2]
QS = ["a", "b", "c", "d"]


def point(step: int, greedy: list[float], sampled: list[float]) -> EvalPoint:
    return EvalPoint(config="deep_search-clean", step=step, questions=list(QS), greedy=dict(zip(QS, greedy)),
                     sampled=dict(zip(QS, sampled)), samples=2)


START = point(0, [1, 0, 1, 0], [0.5, 0, 1, 0.5])


def test_pooled_seeds_by_hand():
    seed0 = point(10, [1, 1, 0, 0], [0.5, 0.5, 1, 0.5])  # greedy: b won, c lost
    seed1 = point(10, [1, 1, 1, 1], [1, 0, 1, 0.5])
    report = compare_seeds(START, {"s0": seed0, "s1": seed1}, control={"c0": START})
    r0, r1 = report.runs
    assert (r0.lost, r0.won, r1.lost, r1.won) == (1, 1, 0, 2)
    assert r0.difference["greedy"].estimate == pytest.approx(0.0)
    assert r1.difference["greedy"].estimate == pytest.approx(0.5)
    # per question: seed means (1, 1, 0.5, 0.5) minus the start (1, 0, 1, 0) = (0, 1, -0.5, 0.5)
    pooled = report.pooled["greedy"]
    assert pooled.estimate == pytest.approx(0.25)
    sd = statistics.stdev([0, 1, -0.5, 0.5])
    assert pooled.se == pytest.approx(sd / 2)
    assert pooled.high - pooled.estimate == pytest.approx(3.182446 * sd / 2, rel=1e-4)  # t(0.975, 3 df)
    assert report.pooled["sampled"].estimate == pytest.approx(statistics.fmean([0.25, 0.25, 0, 0]))
    assert report.seed_spread["greedy"] == pytest.approx(statistics.stdev([0.0, 0.5]))
    # a control that did not move: the setting minus the control is the setting's pooled difference
    assert report.control_pooled is not None and report.control_pooled["greedy"].estimate == 0.0
    assert report.versus_control is not None
    assert report.versus_control["greedy"].estimate == pytest.approx(0.25)
    text = render_seeds(report)
    assert "+0.250 [" in text and "(1 lost, 1 won)" in text and "Setting minus control" in text


def test_one_seed_has_no_spread_and_pools_to_itself():
    seed = point(10, [0, 0, 1, 0], [0.5, 0, 0.5, 0.5])
    report = compare_seeds(START, {"s0": seed})
    assert report.pooled["greedy"] == report.runs[0].difference["greedy"]
    assert math.isnan(report.seed_spread["sampled"]) and report.versus_control is None
    assert "n/a (one seed)" in render_seeds(report)


def test_other_questions_are_refused():
    other = dataclasses.replace(START, step=10, greedy={"a": 1.0, "b": 0.0, "c": 1.0, "e": 1.0})
    with pytest.raises(ValueError, match="s0: its greedy evaluation holds other questions"):
        compare_seeds(START, {"s0": other})
    with pytest.raises(ValueError, match="no final evaluation"):
        compare_seeds(START, {})


accuracies = st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=len(QS), max_size=len(QS))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(accuracies, accuracies), min_size=1, max_size=4), accuracies, accuracies)
def test_pooled_estimate_is_the_mean_of_the_seeds(finals, start_greedy, start_sampled):
    """Pooling per question then averaging equals averaging the seeds' own differences (same questions)."""
    start = point(0, start_greedy, start_sampled)
    report = compare_seeds(start, {f"s{i}": point(5, g, s) for i, (g, s) in enumerate(finals)})
    for kind in ("greedy", "sampled"):
        seeds = statistics.fmean(r.difference[kind].estimate for r in report.runs)
        assert report.pooled[kind].estimate == pytest.approx(seeds)


def _write(folder: Path, p: EvalPoint) -> None:
    path = BenchLayout(folder).eval_file(p.config, p.step)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(p)), encoding="utf-8")


def _script(*args: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_seeds.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_script_pools_folders_that_share_a_start_and_refuses_one_that_does_not(tmp_path: Path):
    a, b, own = tmp_path / "a", tmp_path / "b", tmp_path / "own"
    for folder in (a, b):
        _write(folder, START)
    _write(a, point(10, [1, 1, 1, 0], [0.5, 0, 1, 0.5]))
    _write(b, point(10, [1, 0, 1, 0], [0.5, 0, 1, 0.5]))
    run = _script(a, b)
    assert run.returncode == 0, run.stderr
    assert "2 seed(s) pooled** | | **+0.125 [" in run.stdout
    _write(own, point(0, [0, 0, 0, 0], [0, 0, 0, 0]))
    _write(own, point(10, [1, 1, 1, 1], [1, 1, 1, 1]))
    refused = _script(a, own)
    assert refused.returncode == 2 and "has a step-0 evaluation of its own" in refused.stderr
    unfinished = tmp_path / "unfinished"
    _write(unfinished, START)
    assert "no evaluation after step 0" in _script(a, unfinished).stderr


def test_a_control_from_its_own_start_is_compared_by_gains():
    """A lever that changes the warm-up has another start: each side's gain over its own start, per question."""
    other_start = point(0, [0, 0, 1, 1], [0, 0.5, 0.5, 0.5])
    control = point(10, [1, 0, 1, 1], [0.5, 0.5, 0.5, 1])  # gains: greedy (1, 0, 0, 0), sampled (.5, 0, 0, .5)
    seed = point(10, [1, 1, 1, 0], [0.5, 0.5, 1, 0.5])  # gains over START: greedy (0, 1, 0, 0), sampled (0, .5, 0, 0)
    report = compare_seeds(START, {"s0": seed}, control={"c0": control}, control_start=other_start)
    assert report.control_runs[0].difference["greedy"].estimate == pytest.approx(0.25)
    assert (report.control_runs[0].lost, report.control_runs[0].won) == (0, 1)
    assert report.versus_control is not None
    assert report.versus_control["greedy"].estimate == pytest.approx(0.0)  # (0-1, 1-0, 0, 0) / 4
    assert report.versus_control["sampled"].estimate == pytest.approx((-0.5 + 0.5 + 0 - 0.5) / 4)
    # the final accuracies alone tie (0.625 sampled each side): only the gains tell the two apart
    text = render_seeds(report)
    assert "its own start: greedy 0.500" in text and "gains over each one's own start" in text
    with pytest.raises(ValueError, match="control start: its greedy evaluation holds other questions"):
        compare_seeds(START, {"s0": seed}, control={"c0": control},
                      control_start=dataclasses.replace(other_start, greedy={"a": 0.0}))


@settings(max_examples=60, deadline=None)
@given(accuracies, accuracies, accuracies, accuracies)
def test_a_control_start_equal_to_the_start_changes_nothing(g0, s0, g1, s1):
    start, final, ctl = point(0, g0, s0), point(5, g1, s1), point(5, s1, g1)
    shared = compare_seeds(start, {"s": final}, control={"c": ctl})
    explicit = compare_seeds(start, {"s": final}, control={"c": ctl}, control_start=start)
    assert shared.versus_control is not None and explicit.versus_control is not None
    for kind in ("greedy", "sampled"):
        assert explicit.versus_control[kind].estimate == pytest.approx(shared.versus_control[kind].estimate)


def test_script_compares_a_control_with_a_start_of_its_own(tmp_path: Path):
    a, c1, c2, stray = tmp_path / "a", tmp_path / "c1", tmp_path / "c2", tmp_path / "stray"
    _write(a, START)
    _write(a, point(10, [1, 1, 1, 0], [0.5, 0, 1, 0.5]))
    other = point(0, [0, 0, 0, 0], [0, 0, 0, 0])
    for folder in (c1, c2):
        _write(folder, other)
        _write(folder, point(10, [1, 0, 0, 0], [0.5, 0, 0, 0]))
    run = _script(a, "--control", c1, c2)
    assert run.returncode == 0, run.stderr
    assert "its own start: greedy 0.000" in run.stdout and "gains over each one's own start" in run.stdout
    _write(stray, START)
    _write(stray, point(10, [1, 1, 1, 1], [1, 1, 1, 1]))
    refused = _script(a, "--control", c1, stray)
    assert refused.returncode == 2 and f"{stray} has a step-0 evaluation of its own, not {c1}'s" in refused.stderr
