"""Per-role policies through the local trainer on the real engine: lora policies train, sync and resume.

Slow: ``pytest -m engine tests/rl/test_policy_engine_lora.py``. Each run is a module of its own, so that
pytest-xdist (--dist loadfile) can give the three runs to different workers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("peft")
pytestmark = pytest.mark.engine

from .policy_engine_helpers import _cfg, _compiled, _graph  # noqa: E402


def test_policy_engine_lora_policies_train_sync_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from safetensors.torch import load_file

    from matpo_graph.core.rollout import read_trees
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.rl.trainer import LocalTrainer

    path = _graph(tmp_path, {"plan_lora": {"kind": "lora", "rank": 4}, "work_lora": {"kind": "lora", "rank": 4}},
                  {"planner": "plan_lora", "browser": "work_lora"})
    program, plan = _compiled(path, monkeypatch)
    run = tmp_path / "run"
    first = LocalTrainer(program, plan, _cfg(1), run).run()
    assert first.last_step == 1
    row = first.metrics[0]
    assert row["sync_max_abs_logprob_diff"] < 2e-3  # the engine serves each trained adapter exactly
    assert row["policy/plan_lora/sync_max_abs_logprob_diff"] < 2e-3
    assert row["policy/plan_lora/trained_rows"] >= 2.0 and "policy/plan_lora/loss" in row
    logged = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert "policy/plan_lora/grad_norm" in logged

    ckpt1 = load_file(str(run / "checkpoints" / "step_000001" / "model.safetensors"))
    plan_b = [k for k in ckpt1 if ".lora_B.plan_lora." in k]
    work_b = [k for k in ckpt1 if ".lora_B.work_lora." in k]
    assert plan_b and any(ckpt1[k].abs().max() > 0 for k in plan_b), "the planner's adapter did not move"
    trees = read_trees(run / "rollouts" / "step_000001.jsonl")
    workers_trained = any(t.role == "browser" and t.num_trained_tokens for tr in trees for t in tr.trajectories)
    assert any(ckpt1[k].abs().max() > 0 for k in work_b) == workers_trained  # the worker's moves only on its own rows
    # the base model is frozen: only adapters train
    base = load_file(str(resolve_model("smollm2-135m-instruct") / "model.safetensors"))
    key = "model.layers.0.mlp.down_proj.weight"
    assert torch.equal(ckpt1[f"base::base_model.model.{key.replace('.weight', '.base_layer.weight')}"], base[key])
    # every trajectory records its policy and the adapter version that sampled it
    for tr in trees:
        for t in tr.trajectories:
            want = "plan_lora" if t.role == "planner" else "work_lora"
            assert t.policy == want, (t.role, t.policy)
            if t.turns:  # it sampled: through its own adapter, loaded before the first rollout
                assert (t.adapter or "").startswith(f"{want}@"), (t.role, t.adapter)
    assert sorted(p.name for p in (run / "adapters").iterdir()) == ["plan_lora", "work_lora"]

    second = LocalTrainer(program, plan, _cfg(2), run).run(resume=True)
    assert second.last_step == 2 and [m["step"] for m in second.metrics] == [2]
    assert second.metrics[0]["sync_max_abs_logprob_diff"] < 2e-3
    ckpt2 = load_file(str(run / "checkpoints" / "step_000002" / "model.safetensors"))
    assert any(not torch.equal(ckpt1[k], ckpt2[k]) for k in plan_b), "the resumed step did not train the adapter"

    # the run folder evaluates and exports per policy: a fresh engine serves the checkpoint's adapters as the
    # trainer computes them, and the exported planner policy (base + its adapter merged) computes the same
    from matpo_graph.evaluation.evaluate import run_folder_model
    from matpo_graph.rl.export import export_model
    from matpo_graph.rl.rollouts import RolloutSession
    from transformers import AutoModelForCausalLM

    ids = [1, 504, 3622, 314, 260, 2369, 282, 4649, 47, 2]
    base_dir, policies = run_folder_model(run, _cfg(2))
    expected = policies.policies.sequence_logprobs("plan_lora", ids)
    with RolloutSession(program, _cfg(0), model_dir=base_dir, plan=plan) as session:
        policies.serve(session)
        served = session.policy_logprobs("plan_lora", ids)
    assert served is not None and max(abs(a - b) for a, b in zip(served, expected, strict=True)) < 2e-3
    out = export_model(run, tmp_path / "plan_export", policy="plan_lora")
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    with torch.no_grad():
        logp = torch.log_softmax(hf(input_ids=torch.tensor([ids])).logits[0], dim=-1)
    assert max(abs(float(logp[i, ids[i + 1]]) - expected[i]) for i in range(len(ids) - 1)) < 1e-4
