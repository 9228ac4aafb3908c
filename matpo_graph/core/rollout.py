"""Rollout data: the single source of truth for what the executor produces and the trainer consumes.

Types, outermost first:

- :class:`RolloutTree`: one root rollout for one question (a member of a GRPO group) and all its
  descendant trajectories, plus its reward and (after credit) advantages.
- :class:`Trajectory`: one agent's isolated context, token in and token out: ``token_ids``,
  ``loss_mask`` (1 exactly on tokens this policy sampled in this trajectory) and ``logprobs``
  (the sampling logprob on those tokens, 0.0 elsewhere), plus the readable ``messages`` and ``turns``.
- :class:`Turn`: one model generation and the calls it made.
- :class:`CallRecord`: one tool or child call, valid or not.

Everything is plain pydantic data and serialises to JSON lines and back without loss.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "CallRecord",
    "ChatMessage",
    "RewardBreakdown",
    "RolloutTree",
    "Termination",
    "Trajectory",
    "TrajectoryInvariantError",
    "Turn",
    "read_trees",
    "write_trees",
]

Termination = Literal[
    "answer",  # the root wrote a final answer / a child finished without further calls
    "summary",  # closed by the final-summary turn
    "max_turns",  # ran out of turns (a forced answer/summary may follow)
    "context_overflow",  # the context budget ran out
    "policy_error",  # the policy failed; recorded, not raised
    "truncated",  # the tree ran past limits.tree_seconds or limits.tree_tokens and was cut while this one was open
]


class TrajectoryInvariantError(ValueError):
    """A trajectory's token arrays disagree with each other."""


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatMessage(_Data):
    """One message of a trajectory's context, as text (for people and for re-rendering checks)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    trained: bool = Field(default=False, description="True for assistant messages the policy generated here.")
    kind: Literal["prompt", "example", "generated", "tool_result", "child_result", "instruction", "error"] = "prompt"


class CallRecord(_Data):
    """A tool or delegation call parsed from one model turn."""

    name: str = Field(description="Tool or edge name as written by the model (may be unknown).")
    arguments: dict[str, Any] | None = Field(default=None, description="Parsed arguments; None when they did not parse.")
    raw: str = Field(default="", description="The raw call text as generated.")
    kind: Literal["tool", "child", "invalid"] = "tool"
    valid: bool = Field(default=True, description="Well-formed: known name for this role and arguments matching the schema.")
    error: str | None = Field(default=None, description="Why the call was malformed or failed.")
    result: str = Field(default="", description="Text injected back into the context.")
    child_id: str | None = Field(default=None, description="Trajectory id of the child rollout, for delegation calls.")
    started_s: float = Field(default=0.0, description="Start time relative to the tree's start.")
    seconds: float = Field(default=0.0, description="Wall time of the call.")


class Turn(_Data):
    """One model generation within a trajectory."""

    index: int
    text: str = Field(description="Decoded text of the generated tokens.")
    num_tokens: int
    finish_reason: str = "stop"
    calls: list[CallRecord] = Field(default_factory=list)
    purpose: Literal["act", "summary", "forced_answer"] = "act"


class Trajectory(_Data):
    """One agent's context within a rollout tree."""

    traj_id: str = Field(description="Unique within the tree; the root's is '0', a child's is '<parent>.<n>'.")
    parent_id: str | None = None
    role: str
    depth: int = Field(ge=0)
    token_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    prompt_length: int = Field(default=0, description="Tokens of the initial prompt (system, examples, task) before the first generation.")
    messages: list[ChatMessage] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    termination: Termination = "answer"
    final_text: str = Field(default="", description="The answer (root) or cleaned summary returned to the parent (child).")
    task: dict[str, Any] = Field(default_factory=dict, description="Call arguments this child was started with.")
    advantage: float | None = Field(default=None, description="Scalar advantage, set by credit assignment.")
    format_score: float | None = None
    seconds: float = 0.0
    error: str | None = Field(default=None, description="Why the policy or the trajectory's setup failed (termination policy_error).")
    policy: str = Field(
        default="shared",
        description="The policy that generated this trajectory's tokens and is trained on them (files written before "
        "policies existed read as 'shared').",
    )
    adapter: str | None = Field(
        default=None,
        description="The LoRA adapter (and its version) the engine served, for lora policies; None otherwise.",
    )

    @model_validator(mode="after")
    def _aligned(self) -> "Trajectory":
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise TrajectoryInvariantError(
                f"trajectory {self.traj_id!r}: token_ids, loss_mask and logprobs must have equal lengths, "
                f"got {n}, {len(self.loss_mask)}, {len(self.logprobs)}"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise TrajectoryInvariantError(f"trajectory {self.traj_id!r}: loss_mask holds values other than 0/1")
        if any(m == 1 for m in self.loss_mask[: self.prompt_length]):
            raise TrajectoryInvariantError(f"trajectory {self.traj_id!r}: prompt tokens are marked as trained")
        return self

    @property
    def num_trained_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def calls(self) -> list[CallRecord]:
        return [c for t in self.turns for c in t.calls]


class RewardBreakdown(_Data):
    total: float
    accuracy: float
    format: float
    answer: str | None = Field(default=None, description="Extracted final answer, if any.")
    judge_fallback: bool = False
    details: dict[str, Any] = Field(default_factory=dict)


class RolloutTree(_Data):
    """One root rollout and its descendants; a GRPO group is all trees sharing `group_id`."""

    tree_id: str
    group_id: str = Field(description="Identifies the question; GRPO statistics are taken over trees of one group.")
    question: str
    answers: list[str] = Field(default_factory=list, description="Gold answer aliases.")
    graph: str = ""
    trajectories: list[Trajectory] = Field(default_factory=list, description="Root first, then descendants in creation order.")
    reward: RewardBreakdown | None = None
    seconds: float = 0.0
    truncated: Literal["tree_seconds", "tree_tokens"] | None = Field(
        default=None,
        description="Which per-tree budget (limits.tree_seconds or tree_tokens) cut this tree; None when it ran to its end. "
        "Its open trajectories end with termination 'truncated'.",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _tree_shape(self) -> "RolloutTree":
        if not self.trajectories:
            return self
        ids = [t.traj_id for t in self.trajectories]
        if len(set(ids)) != len(ids):
            raise TrajectoryInvariantError(f"tree {self.tree_id!r}: duplicate trajectory ids")
        roots = [t for t in self.trajectories if t.parent_id is None]
        if len(roots) != 1 or self.trajectories[0].parent_id is not None:
            raise TrajectoryInvariantError(f"tree {self.tree_id!r}: exactly one root, listed first, is required")
        by_id = {t.traj_id: t for t in self.trajectories}
        for t in self.trajectories[1:]:
            parent = by_id.get(t.parent_id or "")
            if parent is None:
                raise TrajectoryInvariantError(f"tree {self.tree_id!r}: {t.traj_id!r} has unknown parent {t.parent_id!r}")
            if t.depth != parent.depth + 1:
                raise TrajectoryInvariantError(f"tree {self.tree_id!r}: {t.traj_id!r} depth {t.depth} is not parent depth + 1")
        return self

    @property
    def root(self) -> Trajectory:
        return self.trajectories[0]

    @property
    def descendants(self) -> list[Trajectory]:
        return self.trajectories[1:]

    def children_of(self, traj_id: str) -> list[Trajectory]:
        return [t for t in self.trajectories if t.parent_id == traj_id]


def write_trees(path: str | Path, trees: Iterable[RolloutTree], *, append: bool = False) -> int:
    """Write trees as JSON lines; returns how many were written."""
    n = 0
    with open(path, "a" if append else "w", encoding="utf-8") as fh:
        for tree in trees:
            fh.write(tree.model_dump_json())
            fh.write("\n")
            n += 1
    return n


def iter_trees(path: str | Path) -> Iterator[RolloutTree]:
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield RolloutTree.model_validate_json(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{line_no}: not a rollout tree: {exc}") from exc


def read_trees(path: str | Path) -> list[RolloutTree]:
    """Read a JSON-lines file of trees (a single JSON object or a JSON list works too)."""
    text = Path(path).read_text(encoding="utf-8").strip()
    if text.startswith("["):
        return [RolloutTree.model_validate(obj) for obj in json.loads(text)]
    return list(iter_trees(path))
