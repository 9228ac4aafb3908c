"""Which held-out greedy answers change across many runs from one start, and how concentrated those changes are.

One run's paired greedy difference counts a handful of won and lost answers; read alone, it cannot say whether
the update moved something general or nudged a few questions that sit on a knife's edge for the starting policy.
Counting, over every run from the same warm-up, how often each question was won or lost answers that: when a few
questions carry most of the flips in both directions, a run's greedy difference is mostly which way those few
fell. Pure: it takes :class:`~matpo_graph.bench.flips.FlipReport` objects, does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from matpo_graph.bench.flips import FlipReport

__all__ = ["CensusRow", "FlipCensus", "flip_census", "render_flip_census"]


@dataclass(frozen=True)
class CensusRow:
    """One question's greedy answer over the runs: in how many it was lost, and in how many won."""

    question: str
    hops: int | None
    lost: int
    won: int

    @property
    def flips(self) -> int:
        return self.lost + self.won


@dataclass(frozen=True)
class FlipCensus:
    runs: int
    questions: int
    """Questions every report holds a greedy answer for (the smallest count over the reports)."""
    rows: list[CensusRow]
    """Questions that flipped in at least one run, most flips first."""

    @property
    def flips(self) -> int:
        return sum(r.flips for r in self.rows)

    def share_of_top(self, k: int) -> float:
        """Fraction of all flips that the `k` most-flipped questions carry (0 when nothing flipped)."""
        total = self.flips
        return sum(r.flips for r in self.rows[:k]) / total if total else 0.0


def flip_census(reports: Mapping[str, FlipReport]) -> FlipCensus:
    """Count each question's lost and won greedy answers over `reports` (run label -> its step-0-vs-last report).

    Raises:
        ValueError: no reports.
    """
    if not reports:
        raise ValueError("a census needs at least one run")
    lost: dict[str, int] = {}
    won: dict[str, int] = {}
    hops: dict[str, int | None] = {}
    for report in reports.values():
        for into, rows in ((lost, report.lost), (won, report.won)):
            for question, before, _ in rows:
                into[question] = into.get(question, 0) + 1
                hops[question] = before.hops
    rows = [CensusRow(q, hops[q], lost.get(q, 0), won.get(q, 0)) for q in hops]
    rows.sort(key=lambda r: (-r.flips, r.question))
    held = min(sum(report.greedy_transitions.values()) for report in reports.values())
    return FlipCensus(runs=len(reports), questions=held, rows=rows)


def render_flip_census(census: FlipCensus, *, top: int = 4) -> str:
    """Markdown: a one-line summary, then the flipped questions with their lost and won counts."""
    lines = [f"{census.runs} runs, {census.questions} questions each: {census.flips} greedy answers changed "
             f"({census.flips / census.runs:.1f} a run), on {len(census.rows)} distinct questions; the {top} most "
             f"changed carry {census.share_of_top(top):.0%} of the changes.", "",
             "| question | hops | runs lost | runs won |", "|---|---|---|---|"]
    lines += [f"| {r.question} | {'?' if r.hops is None else r.hops} | {r.lost} | {r.won} |" for r in census.rows]
    return "\n".join(lines) + "\n"
