"""The time budget stops starting RL steps whose estimated end (plus the final evaluation) lies past it."""

from __future__ import annotations

import pytest

import matpo_graph.rl.trainer as trainer_mod
from matpo_graph.rl.config import TrainConfig
from matpo_graph.rl.trainer import LocalTrainer


def _trainer(**cfg) -> LocalTrainer:
    t = LocalTrainer.__new__(LocalTrainer)
    t.cfg = TrainConfig(**cfg)
    return t


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [(100.0, False), (1200 - 300 - 120 - 1, False), (1200 - 300 - 120 + 1, True)],
)
def test_a_step_starts_only_if_it_and_the_evaluation_fit(monkeypatch, elapsed, expected):
    monkeypatch.setattr(trainer_mod.time, "monotonic", lambda: 1000.0 + elapsed)
    t = _trainer(time_budget_minutes=20, eval_questions=4)
    history = [{"step_seconds": 250.0, "rollout_seconds": 120.0}, {"step_seconds": 300.0, "rollout_seconds": 90.0}]
    assert t._over_budget(1000.0, history) is expected


def test_first_step_always_runs_and_zero_means_no_budget(monkeypatch):
    monkeypatch.setattr(trainer_mod.time, "monotonic", lambda: 1e9)
    assert _trainer(time_budget_minutes=1)._over_budget(0.0, []) is False
    assert _trainer(time_budget_minutes=0)._over_budget(0.0, [{"step_seconds": 1e6}]) is False


def test_without_evaluation_only_the_step_is_reserved(monkeypatch):
    monkeypatch.setattr(trainer_mod.time, "monotonic", lambda: 1200.0 - 300.0 - 1.0)
    history = [{"step_seconds": 300.0, "rollout_seconds": 200.0}]
    assert _trainer(time_budget_minutes=20, eval_questions=0)._over_budget(0.0, history) is False
    assert _trainer(time_budget_minutes=20, eval_questions=4)._over_budget(0.0, history) is True
    assert _trainer(time_budget_minutes=20, eval_questions=4)._over_budget(0.0, history, eval_only=True) is False


def test_a_measured_evaluation_replaces_the_rollout_guess(monkeypatch):
    monkeypatch.setattr(trainer_mod.time, "monotonic", lambda: 1200.0 - 300.0 - 60.0)
    history = [{"step_seconds": 300.0, "rollout_seconds": 200.0, "eval_seconds": 50.0}]
    assert _trainer(time_budget_minutes=20, eval_questions=4)._over_budget(0.0, history) is False
