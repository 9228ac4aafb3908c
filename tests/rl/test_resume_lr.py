"""A resumed run trains at the learning rate it is given, not the one its checkpoint's optimizer saved."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "credit"))

from credit_helpers import plan  # noqa: E402

from matpo_graph.rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint  # noqa: E402
from matpo_graph.rl.config import TrainConfig  # noqa: E402
from matpo_graph.rl.update import PolicyOptimizer  # noqa: E402


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_resume_takes_the_given_lr_and_says_what_it_replaced(tmp_path: Path) -> None:
    from matpo_graph.verl_target.smoke import build_tiny_model

    model_dir = build_tiny_model(tmp_path / "tiny", hidden_size=32, layers=2)
    first = PolicyOptimizer(model_dir, plan(), TrainConfig(train_layers=0, lr=1e-3))
    save_checkpoint(tmp_path / "run", step=1, model=first.model, optimizer=first.optimizer, state={"step": 1}, keep=1)

    resumed = PolicyOptimizer(model_dir, plan(), TrainConfig(train_layers=0, lr=5e-4))
    load_checkpoint(latest_checkpoint(tmp_path / "run"), model=resumed.model, optimizer=resumed.optimizer)
    assert resumed.optimizer.param_groups[0]["lr"] == 1e-3  # what AdamW's saved state brings back
    assert resumed.use_configured_lr() == {"": (1e-3, 5e-4)}
    assert all(g["lr"] == 5e-4 for g in resumed.optimizer.param_groups)
    assert resumed.use_configured_lr() == {}  # nothing left to replace
