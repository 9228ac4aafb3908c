"""Supervised examples from rollout trees: one token sequence per trajectory, grouped into micro-batches.

Every trajectory of every demonstration becomes one example, whatever its role ("all roles at once"):
the trajectory's own token ids with its own loss mask, so prompts, few-shot examples, tool results and
child reports (mask 0) are context only and exactly the generated tokens (mask 1) are learned. Tokens
after the last generated one teach nothing and are cut off.

Opening drills are cheaper extra examples: only the first turn of each trajectory of further
demonstrations (all of it for roles whose context stays short, such as a planner that reads reports). The root's first turn carries the question's decomposition (the row labels it needs,
how many lookups, the first one); a helper's first turn names what its lookup asks for (the label a
page will state it under, when the data knows it), which its later reading turn then only has to copy.
A full demonstration teaches each such choice once among thousands of formatting tokens; a drill costs
a fraction of one.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from matpo_graph.core.rollout import RolloutTree

__all__ = [
    "SFTExample", "examples_from_trees", "micro_batches", "opening_examples", "optimizer_batches", "within_token_budget",
]


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


def opening_examples(trees: Iterable[RolloutTree], *, whole_roles: Collection[str] = ()) -> list[SFTExample]:
    """One example per trajectory that generated anything: cut right after its first generated turn, or
    whole (up to its last generated token) when its role is in `whole_roles`.

    Each is an exact prefix of the trajectory, so it is the very context the policy saw, masks included.
    Whole trajectories suit roles whose context stays short (a planner reads compact reports, not pages):
    their later turns decide whether to go on, for a few more tokens.
    """
    out: list[SFTExample] = []
    for tree in trees:
        for traj in tree.trajectories:
            start = next((i for i, m in enumerate(traj.loss_mask) if m), None)
            if start is None:
                continue
            if traj.role in whole_roles:
                end = max(i for i, m in enumerate(traj.loss_mask) if m) + 1
            else:
                end = start
                while end < len(traj.loss_mask) and traj.loss_mask[end]:
                    end += 1
            out.append(SFTExample(f"{tree.tree_id}/{traj.traj_id}:opening", traj.role, tuple(traj.token_ids[:end]),
                                  tuple(traj.loss_mask[:end])))
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

    Examples are sorted by length first so that padding stays small (and examples of one role, alike in
    length, tend to share a micro-batch and so their prompt; see ``SFTModel``); an example longer than
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


def within_token_budget(demos: Sequence[RolloutTree], drills: Sequence[RolloutTree], *, max_trained_tokens: int,
                        whole_roles: Collection[str] = ()) -> tuple[list[RolloutTree], list[RolloutTree]]:
    """The longest prefix of demonstrations and drill trees, interleaved in their given proportion, whose
    trained (loss-mask) tokens fit `max_trained_tokens`.

    Graphs spend very different numbers of trained tokens per demonstration (a planner and its helpers write
    more than one agent does), so equal demonstration counts are not equal warm-ups; an equal token budget
    is. Tree i of n is placed at (i + 0.5) / n in each list and trees are taken in that order, so any prefix
    keeps the demonstrations-to-drills ratio; taking stops at the first tree that would pass the budget.

    Returns:
        (demonstrations, drill trees) kept, each in its original order.
    """
    if max_trained_tokens < 1:
        raise ValueError(f"max_trained_tokens must be >= 1, got {max_trained_tokens}")
    order = sorted(
        [((i + 0.5) / len(demos), 0, i) for i in range(len(demos))]
        + [((j + 0.5) / len(drills), 1, j) for j in range(len(drills))]
    )
    kept: tuple[list[RolloutTree], list[RolloutTree]] = ([], [])
    spent = 0
    for _, kind, i in order:
        tree = (demos, drills)[kind][i]
        made = examples_from_trees([tree]) if kind == 0 else opening_examples([tree], whole_roles=whole_roles)
        cost = sum(ex.trained_tokens for ex in made)
        if spent + cost > max_trained_tokens:
            break
        spent += cost
        kept[kind].append(tree)
    return kept
