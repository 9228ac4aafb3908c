"""The weights a LoRA run hands the engine: base + every adapter's delta, the same as peft's merge, and the trained
model left bit for bit as it was (merging in place and unmerging again rounds the frozen base at every sync)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from pathlib import Path  # noqa: E402

GRAPH = Path(__file__).resolve().parents[2] / "graphs" / "single_agent.yaml"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):  # type: ignore[no-untyped-def]
    from matpo_graph.verl_target.smoke import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=64, layers=2)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_lora_weights_for_the_engine_equal_peft_merge_and_leave_the_model_untouched(tiny_model) -> None:
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.update import PolicyOptimizer

    from matpo_graph.compilers.local import load_program

    _, plan = load_program(GRAPH)
    opt = PolicyOptimizer(tiny_model, plan, TrainConfig(lora_rank=4, lr=1e-2, temperature=1.0))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in opt.model.named_parameters():
            if "lora_B" in name:  # a trained adapter (B starts at zero)
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    base = opt.model.get_base_model()
    before = {k: v.clone() for k, v in base.state_dict().items()}

    served = opt.state_dict_for_engine()

    want = copy.deepcopy(opt.model).merge_and_unload().state_dict()
    adapted = [k for k in want if k.endswith("proj.weight")]
    assert adapted and any(not torch.equal(served[k], before[k.replace(".weight", ".base_layer.weight")]) for k in adapted)
    for key, value in want.items():
        assert torch.allclose(served[key], value, atol=1e-6), key
    for key, value in base.state_dict().items():
        assert torch.equal(value, before[key]), key  # the base and the adapters, bit for bit
