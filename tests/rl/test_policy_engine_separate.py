"""Per-role policies through the local trainer on the real engine: a separate root policy trains and syncs its
own engine.

Slow: ``pytest -m engine tests/rl/test_policy_engine_separate.py``. Each run is a module of its own, so that
pytest-xdist (--dist loadfile) can give the three runs to different workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("peft")
pytestmark = pytest.mark.engine

from .policy_engine_helpers import _cfg, _compiled, _graph  # noqa: E402


def test_policy_engine_separate_root_policy_trains_and_syncs_its_own_engine(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.rl.trainer import LocalTrainer

    model = str(resolve_model("smollm2-135m-instruct"))
    path = _graph(tmp_path, {"planner_model": {"kind": "separate", "model": model}}, {"planner": "planner_model"})
    program, plan = _compiled(path, monkeypatch)
    run = tmp_path / "run"
    result = LocalTrainer(program, plan, _cfg(1), run).run()
    row = result.metrics[0]
    assert row["policy/planner_model/trained_rows"] >= 2.0
    assert row["sync_max_abs_logprob_diff"] < 2e-3  # the planner's own engine serves its trained weights
    ckpt = load_file(str(run / "checkpoints" / "step_000001" / "model.safetensors"))
    assert any(k.startswith("planner_model::") for k in ckpt) and any(k.startswith("base::") for k in ckpt)
    base = load_file(str(Path(model) / "model.safetensors"))
    key = "model.layers.29.mlp.down_proj.weight"  # a trained layer of the separate model; the base's is untouched
    assert not (ckpt[f"planner_model::{key}"] == base[key]).all()
    assert (ckpt[f"base::{key}"] == base[key]).all() or row.get("policy/shared/trained_rows", 0.0) > 0
