"""Rows whose every advantage is 0 are left out of the update's forward and backward passes; the update is
unchanged (their PPO terms are exactly 0 and every other row's weight was fixed over the whole step)."""

from __future__ import annotations

import pytest
import torch

from matpo_graph.core.credit import assign_credit
from matpo_graph.rl.batch import pack_trees, split_minibatches
from matpo_graph.rl.config import TrainConfig
from matpo_graph.rl.update import PolicyOptimizer

from credit_helpers import one_torch_thread, plan, planner_tree

_threads = pytest.fixture(autouse=True, scope="module")(one_torch_thread)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from matpo_graph.verl_target.smoke import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=64, layers=2)


def _mixed_step() -> list:
    """Two groups: one with signal (rewards 1 and 0), one degenerate (both 1): half of the 12 rows carry 0."""
    trees, _ = assign_credit([planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0),
                              planner_tree("c", "r", 1.0), planner_tree("d", "r", 1.0)], plan())
    return trees


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("minibatches", [1, 2])
def test_dropping_zero_advantage_rows_leaves_the_update_unchanged(tiny_model, minibatches: int) -> None:
    cfg = TrainConfig(train_layers=0, lr=1e-2, temperature=1.0, optimizer_steps_per_rl_step=minibatches)
    p = plan()
    trees = _mixed_step()
    dropping = PolicyOptimizer(tiny_model, p, cfg)
    keeping = PolicyOptimizer(tiny_model, p, cfg.model_copy(update={"drop_zero_advantage_rows": False}))
    m_drop, m_keep = dropping.train_step(trees), keeping.train_step(trees)
    assert m_drop["matpo/update/rows_forwarded"] == 6 < m_keep["matpo/update/rows_forwarded"] == 12
    assert m_drop["grad_norm"] == pytest.approx(m_keep["grad_norm"], rel=1e-5)
    assert m_drop["loss"] == pytest.approx(m_keep["loss"], rel=1e-5, abs=1e-9)
    for a, b in zip(dropping.model.parameters(), keeping.model.parameters(), strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), atol=1e-6, rtol=1e-5)


def test_rows_are_kept_when_a_kl_term_gives_them_a_gradient(tiny_model) -> None:
    opt = PolicyOptimizer(tiny_model, plan(kl_coef=0.1), TrainConfig(train_layers=0, temperature=1.0))
    batch = pack_trees(_mixed_step(), pad_token_id=0)
    assert len(opt.rows_with_signal(batch)) == len(batch) == 12  # 4 trees x (planner + 2 workers)
    opt_no_kl = PolicyOptimizer(tiny_model, plan(), TrainConfig(train_layers=0, temperature=1.0))
    kept = opt_no_kl.rows_with_signal(split_minibatches(batch, 1)[0])
    assert len(kept) == 6 and bool((kept.advantages != 0).any(dim=1).all())


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_later_ppo_epochs_see_a_ratio_away_from_one(tiny_model) -> None:
    """With two passes, the second compares the moved policy to the old one: the clip has something to do."""
    cfg = TrainConfig(train_layers=0, lr=5e-2, temperature=1.0, ppo_epochs=2)
    opt = PolicyOptimizer(tiny_model, plan(), cfg)
    metrics = opt.train_step(_mixed_step())
    assert metrics["optimizer_steps"] == 2
    assert metrics["ppo_kl"] != 0.0 or metrics["clip_fraction"] > 0.0
