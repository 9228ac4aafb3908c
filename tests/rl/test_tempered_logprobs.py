"""The trainer's logprobs are those of the tempered distribution the engine sampled from, per role."""

from __future__ import annotations

import pytest
import torch

from matpo_graph.rl.update import PolicyOptimizer

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class _Head(torch.nn.Module):
    """A tiny backbone + head with the attribute names the optimizer looks for."""

    def __init__(self, vocab: int = 11, dim: int = 5) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = _Backbone(vocab, dim)
        self.lm_head = torch.nn.Linear(dim, vocab, bias=False)


class _Backbone(torch.nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)

    def forward(self, input_ids, attention_mask=None):  # noqa: ANN001, ANN201
        class Out:
            pass

        out = Out()
        out.last_hidden_state = torch.cumsum(self.embed(input_ids), dim=1)
        return out


class _Micro:
    def __init__(self) -> None:
        self.input_ids = torch.tensor([[1, 4, 2, 7, 3], [2, 2, 9, 5, 0]])
        self.attention_mask = torch.ones_like(self.input_ids)
        self.loss_mask = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 0]], dtype=torch.float32)
        self.role_index = torch.tensor([1, 0])
        self.role_names = ("browser", "planner")


def _expected(model: _Head, micro: _Micro, temps: list[float]) -> torch.Tensor:
    logits = model.lm_head(model.model(micro.input_ids).last_hidden_state).float()
    out = torch.zeros(micro.input_ids.shape)
    for r, t in enumerate(temps):
        lp = torch.log_softmax(logits[r] / t, dim=-1)
        for c in range(1, micro.input_ids.shape[1]):
            if micro.loss_mask[r, c] > 0:
                out[r, c] = lp[c - 1, micro.input_ids[r, c]]
    return out


@pytest.mark.parametrize("temps", [(1.0, 1.0), (0.7, 0.7), (0.5, 1.3)])
def test_masked_logprobs_divide_each_row_by_its_temperature(monkeypatch, temps):
    import matpo_graph.rl.update as opt

    model = _Head()
    monkeypatch.setattr(opt, "backbone_and_head", lambda m: (m.model, m.lm_head))
    micro = _Micro()
    got, entropy = PolicyOptimizer._masked_logprobs(model, micro, temperature=torch.tensor(temps))
    assert torch.allclose(got, _expected(model, micro, list(temps)), atol=1e-6)
    assert entropy is not None and entropy > 0
    if temps[0] != 1.0:  # a test that can fail: untempered logprobs differ
        plain, _ = PolicyOptimizer._masked_logprobs(model, micro, temperature=1.0)
        assert not torch.allclose(plain, got)


def test_row_temperatures_follow_role_overrides():
    from types import SimpleNamespace

    opt = PolicyOptimizer.__new__(PolicyOptimizer)
    opt.temperature = 0.7
    opt.role_temperatures = {"planner": 0.7, "browser": 1.2}
    micro = SimpleNamespace(role_names=("browser", "planner", "judge"), role_index=torch.tensor([2, 0, 1, 0]))
    assert opt.row_temperatures(micro).tolist() == pytest.approx([0.7, 1.2, 0.7, 1.2])
