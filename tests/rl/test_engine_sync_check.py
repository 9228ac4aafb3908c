"""The weight-sync check tells a stale engine from a synced one after a change the size of one RL step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "credit"))

from credit_helpers import plan  # noqa: E402

from matpo_graph.rl.config import TrainConfig  # noqa: E402
from matpo_graph.rl.trainer import EngineSyncError, LocalTrainer  # noqa: E402
from matpo_graph.rl.update import PolicyOptimizer  # noqa: E402
from matpo_graph.runtime.policies.vllm import weight_fingerprint  # noqa: E402


def test_one_small_step_moves_the_bf16_fingerprint():
    """lr 2e-6 moves a weight of ~0.05 by far less than bf16's resolution, yet over a matrix some elements cross
    a rounding boundary: the stored values, and so the fingerprint, differ."""
    g = torch.Generator().manual_seed(0)
    before = torch.randn(576, 1536, generator=g) * 0.05
    after = before - 2e-6 * torch.sign(torch.randn(576, 1536, generator=g))
    fp = lambda t: weight_fingerprint({"w": t}, torch.bfloat16)["w"]  # noqa: E731
    assert fp(before) != fp(after)
    assert fp(before) == fp(before.clone())  # and it is exact for equal weights


class _Engine:
    """Stands in for the rollout session's engine: serves a fixed state dict, stored in bf16 as vLLM would."""

    def __init__(self, state):
        self.state = {k: v.detach().clone() for k, v in state.items()}

    def engine_weight_dtype(self) -> str:
        return "bfloat16"

    def engine_fingerprint(self, names):
        return weight_fingerprint({n: self.state[n] for n in names if n in self.state}, torch.bfloat16)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_stale_engine_fails_the_step_loudly_and_a_synced_one_passes(tmp_path: Path) -> None:
    from matpo_graph.verl_target.smoke import build_tiny_model

    opt = PolicyOptimizer(build_tiny_model(tmp_path / "tiny", hidden_size=64, layers=2), plan(),
                          TrainConfig(train_layers=1, lr=2e-6))
    stale = _Engine(opt.state_dict_for_engine())
    with torch.no_grad():  # one small step's change in the trained layer
        for name, p in opt.model.named_parameters():
            if p.requires_grad:
                p -= 2e-6 * torch.sign(torch.randn_like(p))
    with pytest.raises(EngineSyncError, match="does not serve the trained weights"):
        LocalTrainer._check_engine_weights(stale, opt, step=1)
    LocalTrainer._check_engine_weights(_Engine(opt.state_dict_for_engine()), opt, step=1)  # no error
