"""Supervised examples from rollout trees: one token sequence per trajectory, grouped into micro-batches.

Every trajectory of every demonstration becomes one example, whatever its role ("all roles at once"):
the trajectory's own token ids with its own loss mask, so prompts, few-shot examples, tool results and
child reports (mask 0) are context only and exactly the generated tokens (mask 1) are learned. Tokens
after the last generated one teach nothing and are cut off.

Opening drills are cheaper extra examples: only the root's first turn of further demonstrations. That
turn carries the question's decomposition (how many lookups, and the first one), a choice a full
demonstration teaches once among thousands of formatting tokens; a drill costs a sixth of one.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from matpo_graph.core.rollout import RolloutTree

__all__ = ["SFTExample", "examples_from_trees", "micro_batches", "opening_examples", "optimizer_batches"]


@dataclass(frozen=True)
class SFTExample:
    """One trajectory as a training sequence."""

    key: str  # '<tree_id>/<traj_id>', unique within a data set
    role: str
    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.loss_mask):
            raise ValueError(f"example {self.key!r}: {len(self.token_ids)} token ids but {len(self.loss_mask)} mask values")

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


def examples_from_trees(trees: Iterable[RolloutTree], *, max_tokens: int | None = None) -> list[SFTExample]:
    """One example per trajectory that generated anything, in tree order.

    Args:
        trees: demonstrations.
        max_tokens: drop trajectories longer than this (after cutting the untrained tail); None keeps all.
    """
    out: list[SFTExample] = []
    for tree in trees:
        for traj in tree.trajectories:
            last = max((i for i, m in enumerate(traj.loss_mask) if m), default=-1)
            if last < 0:
                continue
            n = last + 1
            if max_tokens is not None and n > max_tokens:
                continue
            out.append(SFTExample(f"{tree.tree_id}/{traj.traj_id}", traj.role, tuple(traj.token_ids[:n]), tuple(traj.loss_mask[:n])))
    return out


def opening_examples(trees: Iterable[RolloutTree]) -> list[SFTExample]:
    """One example per tree: its root trajectory cut right after the first generated turn."""
    out: list[SFTExample] = []
    for tree in trees:
        root = tree.root
        start = next((i for i, m in enumerate(root.loss_mask) if m), None)
        if start is None:
            continue
        end = start
        while end < len(root.loss_mask) and root.loss_mask[end]:
            end += 1
        out.append(SFTExample(f"{tree.tree_id}/{root.traj_id}:opening", root.role, tuple(root.token_ids[:end]),
                              tuple(root.loss_mask[:end])))
    return out


def optimizer_batches(examples: Sequence[SFTExample], *, batch_size: int, seed: int, epoch: int) -> list[list[SFTExample]]:
    """A seeded shuffle of the examples cut into optimizer batches of `batch_size` (the last may be smaller)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = list(examples)
    random.Random(f"sft:{seed}:{epoch}").shuffle(order)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def micro_batches(batch: Sequence[SFTExample], *, max_tokens: int) -> list[list[SFTExample]]:
    """Split one optimizer batch into micro-batches whose padded size (rows x longest) fits `max_tokens`.

    Examples are sorted by length first so that padding stays small; an example longer than
    `max_tokens` gets a micro-batch of its own.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    out: list[list[SFTExample]] = []
    current: list[SFTExample] = []
    for ex in sorted(batch, key=len):
        if current and (len(current) + 1) * len(ex) > max_tokens:
            out.append(current)
            current = []
        current.append(ex)
    if current:
        out.append(current)
    return out
