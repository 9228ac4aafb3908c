"""Run-to-run variation: several RL seeds from one shared start, each paired with it, and pooled.

One benchmark folder's interval covers which questions were asked, not which rollouts the RL run happened to
draw; a single run's "+0.10 [+0.01, +0.20]" can be the luck of its seed. Folders made with
``bench_learning.py --share-start A --rl-seed S`` share A's warm-up and step-0 evaluation, so each seed's final
evaluation pairs question by question with the very same start, and the seeds can be pooled: per question,
the seeds' mean accuracy minus the start's. A control setting run from the same start (for example today's
defaults) pools the same way, and the two pool into one paired difference, "lever minus control". A control
from another start (a lever that changes the warm-up itself) compares gains instead: per question, the setting's
seed mean minus its start against the control's seed mean minus the control's start.
Pure: takes evaluation points, returns numbers and markdown; the script reads the folders.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matpo_graph.bench.learning_bench import EvalPoint
from matpo_graph.tracking.stats import Interval, paired_difference

__all__ = ["SeedRun", "SeedReport", "compare_seeds", "render_seeds"]

_KINDS = ("greedy", "sampled")


@dataclass(frozen=True)
class SeedRun:
    """One RL seed's final evaluation against the shared start."""

    label: str
    step: int
    accuracy: dict[str, float]
    """'greedy' / 'sampled' -> mean accuracy at the final step."""
    difference: dict[str, Interval]
    """'greedy' / 'sampled' -> final minus start, paired by question."""
    lost: int
    """Questions whose greedy answer was right at the start and is not now."""
    won: int


@dataclass(frozen=True)
class SeedReport:
    """A setting's seeds, pooled; with a control, the setting minus the control."""

    start: dict[str, float]
    """'greedy' / 'sampled' -> mean accuracy of the shared start."""
    questions: int
    runs: list[SeedRun]
    pooled: dict[str, Interval]
    """Per question: the seeds' mean final accuracy minus the start's; t interval over questions."""
    seed_spread: dict[str, float]
    """Standard deviation of the seeds' mean differences (NaN below two seeds): the run-to-run noise."""
    control_runs: list[SeedRun]
    control_pooled: dict[str, Interval] | None
    versus_control: dict[str, Interval] | None
    """Per question: the setting's gain (seed mean minus start) minus the control's gain; with one shared start
    this is the setting's seed mean minus the control's."""
    control_start: dict[str, float] | None = None
    """'greedy' / 'sampled' -> mean accuracy of the control's own start; None when it shares the setting's."""


def _seed_mean(points: Sequence[EvalPoint], kind: str, questions: Sequence[str]) -> dict[str, float]:
    return {q: statistics.fmean(getattr(p, kind)[q] for p in points) for q in questions}


def _run(label: str, start: EvalPoint, point: EvalPoint) -> SeedRun:
    lost = sum(1 for q, v in start.greedy.items() if v >= 1.0 and point.greedy[q] < 1.0)
    won = sum(1 for q, v in start.greedy.items() if v < 1.0 and point.greedy[q] >= 1.0)
    return SeedRun(label=label, step=point.step,
                   accuracy={k: statistics.fmean(getattr(point, k)[q] for q in start.questions) for k in _KINDS},
                   difference={k: paired_difference(getattr(point, k), getattr(start, k)) for k in _KINDS},
                   lost=lost, won=won)


def _check_same_questions(start: EvalPoint, finals: Mapping[str, EvalPoint]) -> None:
    want = set(start.questions)
    for label, point in finals.items():
        for kind in _KINDS:
            have = set(getattr(point, kind))
            if have != want:
                missing, extra = sorted(want - have), sorted(have - want)
                raise ValueError(f"{label}: its {kind} evaluation holds other questions than the start's "
                                 f"(missing {missing[:3]}, extra {extra[:3]}); seeds pool only on one held-out set")


def compare_seeds(start: EvalPoint, finals: Mapping[str, EvalPoint],
                  control: Mapping[str, EvalPoint] | None = None,
                  control_start: EvalPoint | None = None) -> SeedReport:
    """Pair every final evaluation with its start, pool the seeds, and compare with a control.

    Args:
        start: the step-0 evaluation every run of the setting shares.
        finals: label -> final evaluation of one seed of the setting.
        control: label -> final evaluation of one seed of the control setting.
        control_start: the control's own step-0 evaluation, on the same questions, when it is not `start`
            (e.g. the setting changes the warm-up); then the comparison is of gains, each over its own start.

    Raises:
        ValueError: no final evaluation, or one that holds other questions than the start.
    """
    if not finals:
        raise ValueError("no final evaluation to compare with the start")
    control = dict(control or {})
    base = control_start or start
    _check_same_questions(start, {**finals, **control, **({"control start": control_start} if control_start else {})})
    qs = list(start.questions)

    def gains(points: Sequence[EvalPoint], origin: EvalPoint, kind: str) -> dict[str, float]:
        mean = _seed_mean(points, kind, qs)
        return {q: mean[q] - getattr(origin, kind)[q] for q in qs}

    def pool(points: Sequence[EvalPoint], origin: EvalPoint) -> dict[str, Interval]:
        return {k: paired_difference(_seed_mean(points, k, qs), getattr(origin, k)) for k in _KINDS}

    runs = [_run(label, start, p) for label, p in finals.items()]
    control_runs = [_run(label, base, p) for label, p in control.items()]
    spread = {k: statistics.stdev(r.difference[k].estimate for r in runs) if len(runs) > 1 else math.nan
              for k in _KINDS}
    versus = None
    if control:
        versus = {k: paired_difference(gains(list(finals.values()), start, k), gains(list(control.values()), base, k))
                  for k in _KINDS}
    return SeedReport(start={k: statistics.fmean(getattr(start, k)[q] for q in qs) for k in _KINDS},
                      questions=len(qs), runs=runs, pooled=pool(list(finals.values()), start), seed_spread=spread,
                      control_runs=control_runs,
                      control_pooled=pool(list(control.values()), base) if control else None,
                      versus_control=versus,
                      control_start=({k: statistics.fmean(getattr(control_start, k)[q] for q in qs) for k in _KINDS}
                                     if control_start is not None else None))


def _iv(iv: Interval) -> str:
    if math.isnan(iv.low):
        return f"{iv.estimate:+.3f}"
    return f"{iv.estimate:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]"


def _rows(title: str, runs: Sequence[SeedRun], pooled: Mapping[str, Interval]) -> list[str]:
    lines = [f"| {title}: {r.label} (step {r.step}) | {r.accuracy['greedy']:.3f} | {_iv(r.difference['greedy'])} "
             f"({r.lost} lost, {r.won} won) | {r.accuracy['sampled']:.3f} | {_iv(r.difference['sampled'])} |"
             for r in runs]
    lines.append(f"| **{title}, {len(runs)} seed(s) pooled** | | **{_iv(pooled['greedy'])}** | | "
                 f"**{_iv(pooled['sampled'])}** |")
    return lines


def render_seeds(report: SeedReport) -> str:
    """Markdown: one row per seed, the pooled row, the seed spread and, with a control, the paired difference."""
    s = report.start
    lines = [f"### Seeds from one start ({report.questions} questions; start: greedy {s['greedy']:.3f}, "
             f"sampled {s['sampled']:.3f})", "",
             "| run | greedy | greedy minus start | sampled | sampled minus start |", "|---|---|---|---|---|"]
    lines += _rows("setting", report.runs, report.pooled)
    if report.control_pooled is not None:
        cs = report.control_start
        title = "control" if cs is None else f"control (its own start: greedy {cs['greedy']:.3f}, sampled {cs['sampled']:.3f})"
        lines += _rows(title, report.control_runs, report.control_pooled)
    spread = report.seed_spread
    lines += ["", "Spread between the setting's seeds (standard deviation of their mean differences): greedy "
              + ("n/a (one seed)" if math.isnan(spread["greedy"]) else f"{spread['greedy']:.3f}") + ", sampled "
              + ("n/a (one seed)" if math.isnan(spread["sampled"]) else f"{spread['sampled']:.3f}") + "."]
    if report.versus_control is not None:
        v = report.versus_control
        how = ("seed means paired by question" if report.control_start is None
               else "gains over each one's own start (seed mean minus start), paired by question")
        lines += ["", f"Setting minus control, {how}: greedy {_iv(v['greedy'])}, sampled {_iv(v['sampled'])}."]
    return "\n".join(lines) + "\n"

