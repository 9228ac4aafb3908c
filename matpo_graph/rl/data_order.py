"""Deterministic data order: which questions an RL step sees depends only on (seed, step)."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = [
    "contrast_questions_for_step",
    "extra_draw_tag",
    "is_extra_draw",
    "questions_for_step",
    "stratified_questions_for_step",
]

T = TypeVar("T")

_EXTRA_DRAW = re.compile(r"^d[0-9]+-[0-9]+-")


def extra_draw_tag(draw: int) -> str:
    """Rollout tag of dynamic sampling's `draw`-th extra draw (1-based): its groups are ``d<draw>-<step>-<question>``,
    apart from the step's regular ``s<step>-<question>`` ones, so readers of the saved trees can tell them apart."""
    if draw < 1:
        raise ValueError(f"extra draws count from 1, got {draw}")
    return f"d{draw}-"


def is_extra_draw(group_id: str) -> bool:
    """Whether a training group came from a dynamic-sampling extra draw rather than the step's regular questions."""
    return _EXTRA_DRAW.match(group_id) is not None


def _epoch_order(n: int, seed: int | str, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def questions_for_step(items: Sequence[T], *, step: int, per_step: int, seed: int) -> tuple[list[T], int]:
    """The questions of RL step `step` (0-based) and the data position after it.

    Each epoch is a fresh seeded permutation, so a resumed run sees exactly the questions an
    uninterrupted run would, without storing the order.
    """
    n = len(items)
    if n == 0:
        raise ValueError("no training questions")
    start = step * per_step
    out: list[T] = []
    for pos in range(start, start + per_step):
        epoch, idx = divmod(pos, n)
        out.append(items[_epoch_order(n, seed, epoch)[idx]])
    return out, start + per_step


def contrast_questions_for_step(
    items: Sequence[T], *, step: int, per_step: int, seed: int,
    family: Callable[[T], str], member: Callable[[T], str],
) -> tuple[list[T], int]:
    """The questions of RL step `step` drawn from ONE family, spread over as many of its members as it has.

    A batch that holds contrasting members together (on the embedded web: questions about the same kind of
    page that ask for different rows, say birthplace and birth year) gives the update a reason to tell them
    apart; a shuffled batch may reward one row on two questions and hurt the neighbouring relation on
    questions it never saw. Families come up in a seeded order, each as often as its size asks, members
    round-robin in a seeded order per visit, and each member walks through its own seeded permutations, so the order depends only
    on (seed, step) and a resumed run sees what an uninterrupted one would. Returns the questions and the
    data position after them (step * per_step + per_step, as `questions_for_step` counts).
    """
    if not items:
        raise ValueError("no training questions")
    groups: dict[str, dict[str, list[T]]] = {}
    for item in items:
        groups.setdefault(family(item), {}).setdefault(member(item), []).append(item)
    # Each family holds one ticket per batch of its questions (at least one), so families come up in proportion
    # to their size, as in a shuffled order; a pass over all tickets is a round.
    tickets = [f for f in sorted(groups) for _ in range(max(1, round(sum(map(len, groups[f].values())) / per_step)))]
    rnd, turn = divmod(step, len(tickets))
    order = _epoch_order(len(tickets), f"{seed}:families", rnd)
    chosen = tickets[order[turn]]
    visit = rnd * tickets.count(chosen) + sum(tickets[t] == chosen for t in order[:turn])
    members = sorted(groups[chosen])
    member_order = [members[i] for i in _epoch_order(len(members), f"{seed}:{chosen}:members", visit)]
    slots = math.ceil(per_step / len(member_order))  # picks any one member may give in a visit
    out: list[T] = []
    seen: set[int] = set()
    for i in range(per_step):
        name = member_order[i % len(member_order)]
        pool = groups[chosen][name]
        pos = visit * slots + i // len(member_order)
        epoch, idx = divmod(pos, len(pool))
        pick = pool[_epoch_order(len(pool), f"{seed}:{chosen}:{name}", epoch)[idx]]
        if id(pick) in seen:  # a member with fewer questions than its slots: no repeats within a step
            continue
        seen.add(id(pick))
        out.append(pick)
    return out, step * per_step + per_step


def stratified_questions_for_step(
    items: Sequence[T], *, step: int, per_step: int, seed: int, stratum: Callable[[T], int | str],
) -> tuple[list[T], int]:
    """The questions of RL step `step`, taken in turn from each stratum (on the embedded web: hop counts).

    Why: the planner's choice of how many lookups to plan is one habit shared by all questions. A batch of
    two-hop questions mostly rewards planning more lookups, a batch of one-hop questions mostly punishes it, so
    which way a shuffled run's plans drift depends on the luck of its batches. Taking the strata in turn puts
    both sides of that choice into every step (with at least as many questions a step as strata) and into
    every run equally. (On dev it did no better than shuffled batches: docs/benchmarks/learning.md.) Slot k of the whole run (step * per_step + i) goes to stratum k mod S; each stratum
    walks its own seeded permutations, so the order depends only on (seed, step), a resumed run sees what an
    uninterrupted one would, and a stratum repeats a question only after it has given all of its own. Small
    strata come up as often as large ones (that is the point). Returns the questions and the data position
    after them (step * per_step + per_step, as `questions_for_step` counts).
    """
    if not items:
        raise ValueError("no training questions")
    strata: dict[int | str, list[T]] = {}
    for item in items:
        strata.setdefault(stratum(item), []).append(item)
    keys = sorted(strata, key=lambda k: (isinstance(k, str), k))  # numbers before names, each in order
    out: list[T] = []
    for slot in range(step * per_step, step * per_step + per_step):
        visit, which = divmod(slot, len(keys))
        pool = strata[keys[which]]
        epoch, idx = divmod(visit, len(pool))
        out.append(pool[_epoch_order(len(pool), f"{seed}:stratum:{keys[which]}", epoch)[idx]])
    return out, step * per_step + per_step
