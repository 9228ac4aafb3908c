"""scripts/bench_weight_change.py: the distance of a run's last checkpoint from its warm-up."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("bench_weight_change", ROOT / "scripts" / "bench_weight_change.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_last_checkpoint_is_measured_against_the_warm_up(tmp_path, capsys):
    run = tmp_path / "bench" / "runs" / "deep_search-clean"
    (run / "sft" / "model").mkdir(parents=True)
    save_file({"a": torch.zeros(2, 2), "b": torch.ones(3)}, str(run / "sft" / "model" / "model.safetensors"))
    for step, a in ((5, 9.0), (10, 1.0)):  # the later checkpoint counts
        (run / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
        save_file({"a": torch.tensor([[a, 0.0], [0.0, 0.0]]), "b": torch.ones(3), "extra": torch.ones(1)},
                  str(run / "checkpoints" / f"step_{step:06d}" / "model.safetensors"))
    module = _script()
    assert module.weight_change(run / "sft" / "model" / "model.safetensors",
                                run / "checkpoints" / "step_000010" / "model.safetensors") == (pytest.approx(1.0), 1)
    assert module.main([str(tmp_path / "bench")]) == 0
    assert "| step_000010 | 1.0000 | 1 |" in capsys.readouterr().out
    assert module.main([str(tmp_path / "nothing")]) == 2
