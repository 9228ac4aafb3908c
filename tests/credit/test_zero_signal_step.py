"""An RL step whose advantages are all zero skips the model but must leave exactly the same weights."""

from __future__ import annotations

import pytest
import torch

from matpo_graph.core.credit import assign_credit
from matpo_graph.rl.config import TrainConfig
from matpo_graph.rl.update import PolicyOptimizer

from credit_helpers import one_torch_thread, plan, planner_tree

_threads = pytest.fixture(autouse=True, scope="module")(one_torch_thread)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from matpo_graph.verl_target.smoke import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=64, layers=2)


def _weights(opt: PolicyOptimizer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in opt.model.parameters()]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_zero_signal_step_equals_a_full_backward_pass(tiny_model) -> None:
    p = plan()
    cfg = TrainConfig(train_layers=0, lr=1e-2, temperature=1.0)
    signal, _ = assign_credit([planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)], p)
    flat, _ = assign_credit([planner_tree("c", "r", 1.0), planner_tree("d", "r", 1.0)], p)
    assert all(t.advantage == 0 for tree in flat for t in tree.trajectories)

    fast, full = PolicyOptimizer(tiny_model, p, cfg), PolicyOptimizer(tiny_model, p, cfg)
    full.skip_zero_signal = False
    for opt in (fast, full):
        opt.train_step(signal)  # builds AdamW momentum, so a zero-gradient step still moves the weights
    before = _weights(fast)
    m_fast, m_full = fast.train_step(flat), full.train_step(flat)

    assert m_fast.get("zero_signal_step") == 1.0 and "zero_signal_step" not in m_full
    assert m_full["grad_norm"] == 0.0 and m_fast["optimizer_steps"] == m_full["optimizer_steps"]
    for a, b in zip(fast.model.parameters(), full.model.parameters(), strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), atol=1e-7, rtol=0)
    moved = max(float((a - b).abs().max()) for a, b in zip(_weights(fast), before, strict=True))
    assert moved > 0  # skipping the optimizer step as well would fail the comparison above
