"""tree_token_mean on veRL: its own policy loss, given MATPO's per-token weights, equals the paper's loss."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402

from matpo_graph.verl_target.weights import session_of, tree_token_weights  # noqa: E402

from verl_helpers import compile_tiny, compose_verl  # noqa: E402

pytestmark = pytest.mark.verl


def _batch(seed: int):  # type: ignore[no-untyped-def]
    """Rows of 2 questions x 3 sessions with a random number of descendants and lengths, padded to L."""
    rng = random.Random(seed)
    keys, lengths = [], []
    for q in range(2):
        for s in range(3):
            rows = 1 + rng.randrange(4)
            for i in range(rows):
                keys.append(f"uid_{q}_x_{s}_{i}")  # uids with underscores are fine
                lengths.append(0 if (i < rows - 1 and rng.random() < 0.15) else 1 + rng.randrange(12))
    width = max(lengths) + 2
    mask = torch.zeros(len(keys), width)
    for r, n in enumerate(lengths):
        start = rng.randrange(width - n + 1)
        mask[r, start : start + n] = 1
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(len(keys), width, generator=gen) * 3
    new = old + torch.randn(len(keys), width, generator=gen) * 0.3
    adv = torch.randn(len(keys), 1, generator=gen).expand(-1, width) * mask
    return keys, mask, old, new, adv


def _paper_tree_token_mean(keys, mask, loss):  # type: ignore[no-untyped-def]
    per_tree: dict[str, list[float]] = {}
    for r, key in enumerate(keys):
        sums = per_tree.setdefault(session_of(key), [0.0, 0.0])
        sums[0] += float((loss[r] * mask[r]).sum())
        sums[1] += float(mask[r].sum())
    means = [s / n for s, n in per_tree.values() if n > 0]
    return sum(means) / len(means)


@pytest.mark.parametrize("seed", range(5))
def test_tree_token_weights_make_verl_token_mean_the_paper_loss(seed: int, tmp_path: Path) -> None:
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.utils.config import omega_conf_to_dataclass

    from matpo_graph.compilers.verl import graph_overrides
    from matpo_graph.rl.loss import ppo_token_loss

    program, plan, bundle = compile_tiny(tmp_path / "b")
    cfg = compose_verl(graph_overrides(program, plan, bundle_dir=str(bundle.root)) + ["actor_rollout_ref.actor.use_dynamic_bsz=true"])
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)  # the ActorConfig veRL's loss reads
    keys, mask, old, new, adv = _batch(seed)
    weights = tree_token_weights(keys, [int(m) for m in mask.sum(dim=1).tolist()])
    w = torch.tensor(weights).unsqueeze(1).expand_as(mask)
    verl_loss, _ = compute_policy_loss_vanilla(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask.bool(),
        loss_agg_mode=cfg.actor_rollout_ref.actor.loss_agg_mode, config=actor, rollout_is_weights=w,
    )
    token_loss, _, _ = ppo_token_loss(new, old, adv, clip_ratio_low=plan.clip_ratio_low, clip_ratio_high=plan.clip_ratio_high)
    assert float(verl_loss) == pytest.approx(_paper_tree_token_mean(keys, mask, token_loss), rel=1e-5, abs=1e-7)


def test_tree_token_weights_ignore_trees_without_trained_tokens() -> None:
    keys = ["u_0_0", "u_0_1", "u_1_0", "pad1_0_0"]
    weights = tree_token_weights(keys, [2, 6, 4, 0])
    total = 12
    assert weights == pytest.approx([total / (2 * 8), total / (2 * 8), total / (2 * 4), 0.0])


def test_session_of_rejects_keys_without_session_and_index() -> None:
    assert session_of("a_b_3_0") == "a_b_3"
    for bad in ("nokey", "u_0", "u_0_x"):
        with pytest.raises(ValueError, match="uid"):
            session_of(bad)


def test_tree_weight_field_multiplies_existing_importance_weights() -> None:
    from tensordict import TensorDict

    from matpo_graph.verl_target.trainer import tree_weight_field

    mask = torch.nested.as_nested_tensor([torch.tensor([1, 1, 0]), torch.tensor([0, 1])], layout=torch.jagged)
    is_w = torch.nested.as_nested_tensor([torch.tensor([0.5, 1.0, 1.0]), torch.tensor([2.0, 2.0])], layout=torch.jagged)
    data = TensorDict({"response_mask": mask, "rollout_is_weights": is_w}, batch_size=2)
    out = tree_weight_field(["u_0_0", "u_1_0"], data)
    # two trees of 2 and 1 tokens, 3 in all: weights 3/(2*2) and 3/(2*1)
    assert out[0].tolist() == pytest.approx([0.75 * 0.5, 0.75, 0.75])
    assert out[1].tolist() == pytest.approx([3.0, 3.0])


def test_optimizer_steps_is_fixed_and_checked() -> None:
    from omegaconf import OmegaConf

    from matpo_graph.verl_target.trainer import optimizer_steps

    def cfg(train: int, mini: int):  # type: ignore[no-untyped-def]
        return OmegaConf.create({"data": {"train_batch_size": train}, "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": mini}}})

    assert optimizer_steps(cfg(8, 8), "tree_token_mean") == 1
    assert optimizer_steps(cfg(8, 2), "token_mean") == 4
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):
        optimizer_steps(cfg(8, 2), "tree_token_mean")
    with pytest.raises(ValueError, match="multiple"):
        optimizer_steps(cfg(8, 3), "token_mean")


def test_setup_hook_registers_the_matpo_trainer_mode() -> None:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import get_trainer_cls

    from matpo_graph.verl_target.setup import setup_worker
    from matpo_graph.verl_target.trainer import MatpoTrainer, matpo_settings

    setup_worker()
    setup_worker()  # idempotent
    assert get_trainer_cls("matpo") is MatpoTrainer
    with pytest.raises(ValueError, match="matpo.loss_agg"):
        matpo_settings(OmegaConf.create({"trainer": {}}))
