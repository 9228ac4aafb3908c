"""The per-role comparison example summarises run folders into one table (fabricated runs, no model)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "per_role_policies" / "run.py"


def _example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("per_role_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _run(folder: Path, lr: float, steps: list[dict], evaluation: dict | None) -> Path:
    folder.mkdir(parents=True)
    (folder / "train_config.json").write_text(json.dumps({"lr": lr}))
    rows = [{"step": i + 1, **row} for i, row in enumerate(steps)]
    if evaluation is not None:
        rows.append({"step": len(steps), **evaluation})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_summary_and_table(tmp_path: Path) -> None:
    example = _example()
    shared = _run(tmp_path / "shared", 2e-6, [
        {"matpo/reward/mean": 0.2, "matpo/reward/accuracy": 0.0, "matpo/group_variance_share": 0.5,
         "timing_s/step": 100.0, "timing_s/update_actor": 40.0},
        {"matpo/reward/mean": 0.6, "matpo/reward/accuracy": 0.5, "matpo/group_variance_share": 1.0,
         "timing_s/step": 140.0, "timing_s/update_actor": 60.0},
    ], {"matpo/eval/greedy/accuracy": 0.75, "matpo/eval/sampled/accuracy": 0.5})
    adapters = _run(tmp_path / "adapters", 1e-4, [
        {"matpo/reward/mean": 0.1, "matpo/reward/accuracy": 0.0, "matpo/group_variance_share": 0.0,
         "timing_s/step": 200.0, "timing_s/update_actor": 90.0},
    ], None)
    a, b = example.summarise(shared), example.summarise(adapters)
    assert a["train reward"] == 0.4 and a["groups with signal"] == 0.75 and a["seconds per RL step"] == 120.0
    assert a["held-out greedy accuracy"] == 0.75 and a["learning rate"] == 2e-6 and a["RL steps"] == 2
    assert math.isnan(b["held-out greedy accuracy"]) and b["seconds per update"] == 90.0
    text = example.table({"shared": a, "adapters": b})
    assert "| seconds per RL step | 120 | 200 |" in text
    assert "| held-out greedy accuracy | 0.750 | - |" in text
    assert "| learning rate | 2e-06 | 0.0001 |" in text
