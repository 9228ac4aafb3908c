"""The MATPO trainer for veRL's V1 loop: veRL's sync trainer plus two MATPO rules.

1. A fixed number of optimizer steps per RL step. veRL cuts a batch into mini-batches of
   ``ppo_mini_batch_size * rollout.n`` ROWS, so every spawned worker trajectory would add steps.
   Here an RL step is always ``K = data.train_batch_size / actor.ppo_mini_batch_size`` mini-batches
   (veRL's nominal count), however many rows the rollout trees produced.
2. ``credit.loss_agg: tree_token_mean`` (the paper's aggregation), as per-token weights under
   veRL's token-mean (see :mod:`matpo_graph.verl_target.weights`). Exact for one optimizer step per RL
   step, which is therefore required with this aggregation.

Selected with ``trainer.v1.trainer_mode=matpo``; the compiled bundle's Ray setup hook imports this
module in every veRL process so that the name resolves. Needs veRL and Ray at run time (a GPU, or
the CPU support of :mod:`matpo_graph.verl_target.cpu`).

Besides veRL's metrics it logs ``matpo/*``: optimizer steps and rows per RL step, and an audit of
the credit broadcast (descendant rows, how many carry a non-zero advantage, and the largest
difference between a descendant's advantage and its root's, which MATPO requires to be 0).
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, open_dict
from tensordict import TensorDict

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from matpo_graph.compilers.verl import CONFIG_KEY, TRAINER_MODE
from matpo_graph.verl_target.weights import tree_token_weights

__all__ = ["MatpoTrainer", "advantage_audit", "check_sync_step", "matpo_settings", "optimizer_steps", "tree_weight_field"]


def matpo_settings(config: DictConfig) -> dict[str, Any]:
    """The ``matpo`` block of the veRL config (bundle_dir, loss_agg), with a clear error when absent."""
    block = config.get(CONFIG_KEY)
    if block is None or "loss_agg" not in block:
        raise ValueError(
            f"trainer.v1.trainer_mode={TRAINER_MODE} needs the `{CONFIG_KEY}` block that "
            "`matpo-graph compile --target verl` puts into launch.sh (+matpo.bundle_dir, +matpo.loss_agg)"
        )
    return {"bundle_dir": block.get("bundle_dir"), "loss_agg": str(block.loss_agg)}


def optimizer_steps(config: DictConfig, loss_agg: str) -> int:
    """K = train_batch_size / ppo_mini_batch_size optimizer steps per RL step (per PPO epoch).

    Raises:
        ValueError: K is not a whole number, or K > 1 with ``tree_token_mean``.
    """
    train_bs = int(config.data.train_batch_size)
    mini_bs = int(config.actor_rollout_ref.actor.ppo_mini_batch_size)
    if mini_bs <= 0 or train_bs % mini_bs:
        raise ValueError(
            f"data.train_batch_size ({train_bs}) must be a multiple of actor_rollout_ref.actor.ppo_mini_batch_size "
            f"({mini_bs}): their ratio is the number of optimizer steps per RL step"
        )
    steps = train_bs // mini_bs
    if loss_agg == "tree_token_mean" and steps != 1:
        raise ValueError(
            f"credit.loss_agg tree_token_mean runs on veRL with one optimizer step per RL step, but "
            f"data.train_batch_size / actor.ppo_mini_batch_size = {steps}; set "
            "actor_rollout_ref.actor.ppo_mini_batch_size to data.train_batch_size, or compile the graph with "
            "`credit.loss_agg: token_mean`"
        )
    return steps


def check_sync_step(config: DictConfig) -> None:
    """Refuse ``parameter_sync_step > 1``: veRL would then split an RL step into several updates.

    Raises:
        ValueError: any ``trainer.v1.<mode>.parameter_sync_step`` above 1.
    """
    v1 = config.trainer.get("v1", None) or {}
    for mode in ("sync", TRAINER_MODE):
        block = v1.get(mode, None) or {}
        value = int(block.get("parameter_sync_step", 1) or 1)
        if value > 1:
            raise ValueError(
                f"trainer.v1.{mode}.parameter_sync_step={value} splits every RL step into {value} weight updates, "
                "which breaks MATPO's fixed number of optimizer steps per RL step; use 1"
            )


def advantage_audit(keys: list[str], advantages: list[torch.Tensor], masks: list[torch.Tensor]) -> dict[str, float]:
    """Check the broadcast on a step's rows: each descendant's advantage equals its root's.

    Rows are grouped by veRL's ``{uid}_{session}_{index}`` keys; the root is a session's last row.
    A row's advantage is read at its trained tokens (all equal under GRPO's broadcast). The count of all
    rows with a nonzero advantage says whether the step could move the weights at all: a step whose
    groups were all degenerate (equal rewards) has none, and its gradient is zero by design.
    """
    signal_rows = sum(int(bool((adv[m.bool()] != 0).any())) for adv, m in zip(advantages, masks, strict=True))
    sessions: dict[str, list[tuple[int, int]]] = {}
    for i, key in enumerate(keys):
        session, _, index = key.rpartition("_")
        sessions.setdefault(session, []).append((int(index), i))
    descendants = nonzero = 0
    worst = 0.0
    for rows in sessions.values():
        rows.sort()
        root = rows[-1][1]
        root_mask = masks[root].bool()
        root_adv = float(advantages[root][root_mask][0]) if root_mask.any() else 0.0
        for _, i in rows[:-1]:
            mask = masks[i].bool()
            if not mask.any():
                continue
            values = advantages[i][mask]
            descendants += 1
            nonzero += int(bool((values != 0).any()))
            worst = max(worst, float((values - root_adv).abs().max()))
    return {
        "matpo/descendant_rows": float(descendants),
        "matpo/descendant_rows_nonzero_adv": float(nonzero),
        "matpo/descendant_root_adv_max_abs_diff": worst,
        "matpo/rows_nonzero_adv": float(signal_rows),
    }


def tree_weight_field(keys: list[str], data: TensorDict) -> torch.Tensor:
    """New nested ``rollout_is_weights``: the tree_token_mean weight times any existing IS weight.

    Args:
        keys: transfer-queue keys of the rows.
        data: a TensorDict with a nested ``response_mask`` and optionally a nested ``rollout_is_weights``.
    """
    mask = data["response_mask"]
    rows = [mask[i].to(torch.float32) for i in range(len(keys))]
    weights = tree_token_weights(keys, [int(r.sum().item()) for r in rows])
    existing = data.get("rollout_is_weights", None)
    out = []
    for i, (row, w) in enumerate(zip(rows, weights, strict=True)):
        values = torch.full_like(row, w)
        if existing is not None:
            values = values * existing[i].to(torch.float32)
        out.append(values)
    return torch.nested.as_nested_tensor(out, layout=torch.jagged)


@register_trainer(TRAINER_MODE)
class MatpoTrainer(PPOTrainerSync):
    """veRL's synchronous trainer with MATPO's fixed step count and tree_token_mean weights."""

    def __init__(self, config: DictConfig):
        settings = matpo_settings(config)
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"  # veRL's own sync semantics everywhere else
        super().__init__(config)
        if self.use_critic:
            raise ValueError(f"trainer.v1.trainer_mode={TRAINER_MODE} runs GRPO without a critic")
        self.matpo_loss_agg = settings["loss_agg"]
        self.matpo_steps = optimizer_steps(config, self.matpo_loss_agg)
        check_sync_step(config)

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        return dp_size * self.matpo_steps

    def _compute_advantage(self, batch, metrics: dict):  # type: ignore[no-untyped-def]
        import transfer_queue as tq

        batch = super()._compute_advantage(batch, metrics)
        audit = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages", "response_mask"])
        n = len(batch.keys)
        metrics.update(advantage_audit(
            list(batch.keys), [audit["advantages"][i] for i in range(n)], [audit["response_mask"][i] for i in range(n)]
        ))
        if self.matpo_loss_agg != "tree_token_mean":
            return batch
        fields = ["response_mask"]
        algo = self.config.algorithm.get("rollout_correction", None)
        if algo is not None and algo.get("rollout_is", None) is not None:
            fields.append("rollout_is_weights")
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        weights = tree_weight_field(list(batch.keys), data)
        metrics["matpo/tree_weight/max"] = float(weights.values().max().item()) if weights.numel() else 0.0
        out = TensorDict({"rollout_is_weights": weights}, batch_size=len(batch))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)

    def _update_actor(self, batch, metrics: dict):  # type: ignore[no-untyped-def]
        """veRL's update with mini-batches of rows/K rows: K optimizer steps however many workers ran.

        veRL sizes a mini-batch as ``ppo_mini_batch_size * rollout.n`` rows; for the duration of the
        call the config says ``rows/K`` and ``n = 1``, so veRL's own method does the rest unchanged.
        """
        rows = len(batch)
        ref = self.config.actor_rollout_ref
        saved = (ref.actor.ppo_mini_batch_size, ref.rollout.n)
        with open_dict(self.config):
            ref.actor.ppo_mini_batch_size, ref.rollout.n = rows // self.matpo_steps, 1
        try:
            batch = super()._update_actor(batch, metrics)
        finally:
            with open_dict(self.config):
                ref.actor.ppo_mini_batch_size, ref.rollout.n = saved
        metrics["matpo/optimizer_steps"] = self.matpo_steps * int(ref.actor.ppo_epochs)
        metrics["matpo/rows"] = rows
        return batch
