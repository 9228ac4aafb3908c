"""Batch packing: credited rollout trees become padded tensors, split into a FIXED number of updates.

Every trajectory of an RL step (roots and all descendants: MATPO's augmented batch) becomes one
right-padded row. The loss aggregation is folded into a per-token weight computed over the WHOLE
RL step before any split, so the loss is ``sum(weight * token_loss)`` and any partition of the rows
sums to the full-batch loss: gradient accumulation over micro-batches reproduces the full-batch
gradient exactly, however many workers the rollouts spawned.

The number of optimizer steps per RL step is the configured number of mini-batches K
(:func:`split_minibatches` always returns exactly K, balanced by tokens); each mini-batch is then
cut into micro-batches under a token budget for memory (:func:`split_microbatches`), whose
gradients are accumulated before the mini-batch's single optimizer step. A mini-batch carries
``scale = K`` so each step sees a loss of full-batch magnitude (the K losses average to the
full-batch loss).

Several policies (see :mod:`matpo_graph.core.policies`): every row records the policy that generated
it (``policy_index``). The loss weights are computed over the WHOLE step first, exactly as with one
shared policy, and only then are the rows partitioned by policy (:func:`split_by_policy`). So, for
every ``loss_agg``, a tree whose trajectories belong to two policies keeps its per-tree denominator
(all its generated tokens, whichever policy produced them); each policy's loss is the sum of its own
rows' terms; the per-policy losses sum to the shared loss; and, since a row's logprobs depend only on
its own policy's parameters, each policy's gradient is the gradient of that one shared loss with
respect to its parameters. A policy with no rows in a step gets a zero loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch

from matpo_graph.core.credit import TrajKey, token_advantages
from matpo_graph.core.registry import LOSS_AGGREGATIONS
from matpo_graph.core.rollout import RolloutTree

__all__ = [
    "LossAgg",
    "PackError",
    "PackedBatch",
    "pack_trees",
    "plan_updates",
    "row_weights",
    "split_by_policy",
    "split_microbatches",
    "split_minibatches",
]

LossAgg = Literal[LOSS_AGGREGATIONS.names]  # type: ignore[valid-type]


class PackError(ValueError):
    """Trees that cannot be turned into a training batch."""


@dataclass(frozen=True)
class PackedBatch:
    """Right-padded rows, one per trained trajectory; every [N, L] tensor is aligned with input_ids.

    ``loss_mask[r, t] == 1`` means token t of row r was sampled by the policy; its logprob is
    predicted from position t - 1 (see :func:`matpo_graph.rl.loss.token_logprobs`).
    """

    input_ids: torch.Tensor  # [N, L] long, padded with pad_token_id
    attention_mask: torch.Tensor  # [N, L] long
    loss_mask: torch.Tensor  # [N, L] float 0/1
    old_logprobs: torch.Tensor  # [N, L] float, 0 off the mask
    advantages: torch.Tensor  # [N, L] float, scalar * own loss mask
    loss_weights: torch.Tensor  # [N, L] float, aggregation weight (global over the RL step), 0 off the mask
    tree_index: torch.Tensor  # [N] long, index into tree_ids
    role_index: torch.Tensor  # [N] long, index into role_names
    depth: torch.Tensor  # [N] long
    policy_index: torch.Tensor  # [N] long, index into policy_names
    tree_ids: tuple[str, ...]
    traj_keys: tuple[TrajKey, ...]  # per row
    role_names: tuple[str, ...]
    policy_names: tuple[str, ...]
    """The policy of each row is ``policy_names[policy_index[row]]`` (the trajectory's ``policy``)."""
    loss_agg: LossAgg
    scale: float = 1.0
    """Multiplier of this batch's loss: K for one of K mini-batches, so each step's loss has full-batch size."""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum().item())

    @property
    def num_trained_tokens(self) -> int:
        return int(self.loss_mask.sum().item())

    def select(self, rows: Sequence[int], *, scale: float | None = None) -> "PackedBatch":
        """A batch of the given rows (in that order), trimmed to their longest row."""
        idx = torch.as_tensor(list(rows), dtype=torch.long)
        width = int(self.attention_mask[idx].sum(dim=1).max().item()) if len(idx) else 0
        cut = lambda x: x[idx][:, :width]  # noqa: E731
        return replace(
            self,
            input_ids=cut(self.input_ids),
            attention_mask=cut(self.attention_mask),
            loss_mask=cut(self.loss_mask),
            old_logprobs=cut(self.old_logprobs),
            advantages=cut(self.advantages),
            loss_weights=cut(self.loss_weights),
            tree_index=self.tree_index[idx],
            role_index=self.role_index[idx],
            depth=self.depth[idx],
            policy_index=self.policy_index[idx],
            traj_keys=tuple(self.traj_keys[i] for i in rows),
            scale=self.scale if scale is None else scale,
        )

    def to(self, device: torch.device | str) -> "PackedBatch":
        return replace(self, **{k: getattr(self, k).to(device) for k in _TENSOR_FIELDS})


_TENSOR_FIELDS = (
    "input_ids", "attention_mask", "loss_mask", "old_logprobs", "advantages", "loss_weights",
    "tree_index", "role_index", "depth", "policy_index",
)  # fmt: skip


def _token_mean(row_tokens: Sequence[int], row_tree: Sequence[int]) -> list[float]:
    total = sum(row_tokens)
    return [1.0 / total if n else 0.0 for n in row_tokens]


def _seq_mean_token_mean(row_tokens: Sequence[int], row_tree: Sequence[int]) -> list[float]:
    rows = sum(1 for n in row_tokens if n)
    return [1.0 / (rows * n) if n else 0.0 for n in row_tokens]


def _tree_token_mean(row_tokens: Sequence[int], row_tree: Sequence[int]) -> list[float]:
    per_tree: dict[int, int] = {}
    for n, tree in zip(row_tokens, row_tree, strict=True):
        per_tree[tree] = per_tree.get(tree, 0) + n
    trees = sum(1 for n in per_tree.values() if n)
    return [1.0 / (trees * per_tree[tree]) if n else 0.0 for n, tree in zip(row_tokens, row_tree, strict=True)]


_ROW_WEIGHTS = LOSS_AGGREGATIONS.implemented_by({
    "tree_token_mean": _tree_token_mean,
    "token_mean": _token_mean,
    "seq_mean_token_mean": _seq_mean_token_mean,
})


def row_weights(row_tokens: Sequence[int], row_tree: Sequence[int], loss_agg: LossAgg) -> list[float]:
    """Per-row weight of each trained token, so that ``loss = sum(weight * token_loss)``.

    - ``tree_token_mean`` (paper): 1 / (trees * tokens of the row's tree): per tree, the token mean
      over all its trajectories, then the mean over trees;
    - ``token_mean`` (verl default, reference code): 1 / tokens of the whole batch;
    - ``seq_mean_token_mean``: 1 / (rows * tokens of the row).

    Rows, trees and tokens count only trained tokens; rows without any get weight 0.
    """
    if len(row_tokens) != len(row_tree):
        raise PackError(f"row_tokens and row_tree differ in length: {len(row_tokens)} vs {len(row_tree)}")
    weights = _ROW_WEIGHTS.get(loss_agg)
    if weights is None:
        raise PackError(f"unknown loss aggregation {loss_agg!r}: expected {LOSS_AGGREGATIONS.choices()}")
    return weights(row_tokens, row_tree)


def pack_trees(
    trees: Sequence[RolloutTree],
    *,
    loss_agg: LossAgg = "tree_token_mean",
    pad_token_id: int = 0,
    role_names: Sequence[str] | None = None,
    trained_roles: Sequence[str] | None = None,
    dtype: torch.dtype = torch.float32,
) -> PackedBatch:
    """Pack credited trees into one batch covering the whole RL step.

    Args:
        trees: trees after :func:`matpo_graph.core.credit.assign_credit`.
        loss_agg: how token losses are aggregated (see :func:`row_weights`).
        pad_token_id: id written into padding positions (never trained, never attended).
        role_names: role vocabulary for ``role_index``; by default the sorted roles present.
        trained_roles: if given, only these roles become rows.
        dtype: float dtype of the float tensors.

    Rows are the trajectories with an advantage (not None) and at least one trained token,
    tree by tree in input order.

    Raises:
        PackError: a trained first token (it has no context to be predicted from), a role missing
            from `role_names`, or an unknown aggregation.
    """
    rows = [
        (ti, tree, traj)
        for ti, tree in enumerate(trees)
        for traj in tree.trajectories
        if traj.advantage is not None
        and traj.num_trained_tokens > 0
        and (trained_roles is None or traj.role in trained_roles)
    ]
    for _, tree, traj in rows:
        if traj.loss_mask[0]:
            raise PackError(
                f"tree {tree.tree_id!r} trajectory {traj.traj_id!r}: its first token is trained but has no context"
            )
    names = tuple(role_names) if role_names is not None else tuple(sorted({traj.role for _, _, traj in rows}))
    role_pos = {name: i for i, name in enumerate(names)}
    unknown = sorted({traj.role for _, _, traj in rows} - set(role_pos))
    if unknown:
        raise PackError(f"roles {unknown} are not in role_names {list(names)}")
    policies = tuple(sorted({traj.policy for _, _, traj in rows}))
    policy_pos = {name: i for i, name in enumerate(policies)}
    width = max((len(traj.token_ids) for _, _, traj in rows), default=0)
    n = len(rows)

    def padded(values: Sequence[Sequence[float]], fill: float) -> list[list[float]]:
        return [list(v) + [fill] * (width - len(v)) for v in values]

    trajs = [traj for _, _, traj in rows]
    input_ids = torch.tensor(padded([t.token_ids for t in trajs], pad_token_id), dtype=torch.long).reshape(n, width)
    attention = torch.tensor(padded([[1] * len(t.token_ids) for t in trajs], 0), dtype=torch.long).reshape(n, width)
    mask64 = torch.tensor(padded([t.loss_mask for t in trajs], 0), dtype=torch.float64).reshape(n, width)
    old = torch.tensor(padded([t.logprobs for t in trajs], 0.0), dtype=torch.float64).reshape(n, width) * mask64
    adv = torch.tensor(padded([token_advantages(t) for t in trajs], 0.0), dtype=torch.float64).reshape(n, width)
    weights = row_weights([t.num_trained_tokens for t in trajs], [ti for ti, _, _ in rows], loss_agg)
    weight_rows = torch.tensor(weights, dtype=torch.float64).reshape(n, 1)
    return PackedBatch(
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=mask64.to(dtype),
        old_logprobs=old.to(dtype),
        advantages=adv.to(dtype),
        loss_weights=(weight_rows * mask64).to(dtype),
        tree_index=torch.tensor([ti for ti, _, _ in rows], dtype=torch.long),
        role_index=torch.tensor([role_pos[traj.role] for _, _, traj in rows], dtype=torch.long),
        depth=torch.tensor([traj.depth for _, _, traj in rows], dtype=torch.long),
        policy_index=torch.tensor([policy_pos[traj.policy] for _, _, traj in rows], dtype=torch.long),
        tree_ids=tuple(tree.tree_id for tree in trees),
        traj_keys=tuple((tree.tree_id, traj.traj_id) for _, tree, traj in rows),
        role_names=names,
        policy_names=policies,
        loss_agg=loss_agg,
    )


def split_by_policy(batch: PackedBatch) -> dict[str, PackedBatch]:
    """The batch's rows partitioned by the policy that generated them, each part in batch order.

    Weights and ``scale`` are kept as they are (computed over the whole step, see the module docstring),
    so ``sum(policy_loss(part) for part in parts) == policy_loss(batch)`` for every ``loss_agg``, and each
    policy's optimizer trains only on its own roles' tokens. Policies are in ``policy_names`` order; a
    policy without rows is absent.
    """
    index = batch.policy_index.tolist()
    out: dict[str, PackedBatch] = {}
    for p, name in enumerate(batch.policy_names):
        rows = [r for r, q in enumerate(index) if q == p]
        if rows:
            out[name] = batch.select(rows)
    return out


def split_minibatches(batch: PackedBatch, num_minibatches: int) -> list[PackedBatch]:
    """Exactly `num_minibatches` batches (one optimizer step each), balanced by sequence tokens.

    Rows go, longest first, to the mini-batch with the fewest tokens so far; inside a mini-batch
    they keep their batch order. With fewer rows than mini-batches some come back empty (a step
    with zero gradient), so the step count never depends on how many trajectories there were.
    Each mini-batch has ``scale = num_minibatches``.

    Raises:
        PackError: for a count below 1.
    """
    if num_minibatches < 1:
        raise PackError(f"num_minibatches must be >= 1, got {num_minibatches}")
    lengths = batch.attention_mask.sum(dim=1).tolist()
    buckets: list[list[int]] = [[] for _ in range(num_minibatches)]
    loads = [0] * num_minibatches
    for row in sorted(range(len(batch)), key=lambda r: (-lengths[r], r)):
        k = min(range(num_minibatches), key=lambda j: (loads[j], j))
        buckets[k].append(row)
        loads[k] += lengths[row]
    return [batch.select(sorted(rows), scale=batch.scale * num_minibatches) for rows in buckets]


def split_microbatches(batch: PackedBatch, max_tokens: int) -> list[PackedBatch]:
    """Micro-batches whose padded size (rows x longest row) stays within `max_tokens`.

    A row longer than the budget travels alone. Rows are grouped longest first to limit padding.
    The micro-batches partition the rows, so their losses (same ``scale``) sum to the batch's loss.

    Raises:
        PackError: for a budget below 1.
    """
    if max_tokens < 1:
        raise PackError(f"max_tokens must be >= 1, got {max_tokens}")
    lengths = batch.attention_mask.sum(dim=1).tolist()
    groups: list[list[int]] = []
    current: list[int] = []
    for row in sorted(range(len(batch)), key=lambda r: (-lengths[r], r)):
        longest = lengths[current[0]] if current else lengths[row]
        if current and (len(current) + 1) * longest > max_tokens:
            groups.append(current)
            current = []
        current.append(row)
    if current:
        groups.append(current)
    return [batch.select(rows) for rows in groups]


def plan_updates(batch: PackedBatch, *, num_minibatches: int, micro_batch_tokens: int) -> list[list[PackedBatch]]:
    """The RL step's update schedule: `num_minibatches` optimizer steps, each a list of micro-batches."""
    return [split_microbatches(mb, micro_batch_tokens) for mb in split_minibatches(batch, num_minibatches)]
