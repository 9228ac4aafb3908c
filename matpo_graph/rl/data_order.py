"""Deterministic data order: which questions an RL step sees depends only on (seed, step)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["questions_for_step"]

T = TypeVar("T")


def _epoch_order(n: int, seed: int, epoch: int) -> list[int]:
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
