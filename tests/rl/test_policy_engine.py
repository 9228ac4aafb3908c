"""Per-role policies through the local trainer on the real engine: lora policies train, sync and resume; a graph
whose every role is on the shared policy takes today's path bit for bit.

Slow: ``pytest -m engine tests/rl/test_policy_engine.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("peft")
pytestmark = pytest.mark.engine
XDIST_SPLIT = True  # three independent trainer runs: pytest-xdist may give them to different workers

ROOT = Path(__file__).resolve().parents[2]


def _graph(tmp_path: Path, policies: dict | None, bindings: dict[str, str]) -> Path:
    import yaml

    data = yaml.safe_load((ROOT / "graphs" / "deep_search.yaml").read_text())
    if policies is not None:
        data["policies"] = policies
    for role, policy in bindings.items():
        data["roles"][role]["policy"] = policy
    shutil.copytree(ROOT / "graphs" / "prompts", tmp_path / "prompts", dirs_exist_ok=True)
    path = tmp_path / f"graph_{len(list(tmp_path.glob('graph_*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _compiled(path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import compile_graph
    from matpo_graph.core.loader import load_graph

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.setenv("MATPO_GRAPH_TRUST_CODE", "credit_fixture")  # the test's own credit strategy
    program, plan = compile_graph(load_graph(path), path.parent)
    roles = {n: r.model_copy(update={"max_turns": 2, "max_tokens_per_turn": 40}) for n, r in program.roles.items()}
    program = program.model_copy(update={"roles": roles, "context_tokens": 2048})
    # fixed non-zero advantages, so the weights move even though the untrained model earns no reward
    return program, plan.model_copy(update={"strategy": "credit_fixture:alternating"})


def _cfg(steps: int, **kw):  # type: ignore[no-untyped-def]
    from matpo_graph.rl.config import TrainConfig

    return TrainConfig(steps=steps, questions_per_step=1, group_size=2, warmstart="none", eval_questions=0,
                       env_entities=200, kv_cache_gib=1, lr=1e-3, logger=["jsonl"], time_budget_minutes=0,
                       engine_dtype="float32", **kw)  # float32 serving: the sync checks compare to 2e-3


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


def test_policy_engine_all_shared_graph_is_todays_path_bit_for_bit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default graph, and the same graph with every role bound to a declared shared policy: same trees from
    the engine, same loss, same weights after a step with the same seed, both through PolicyOptimizer."""
    import torch

    from matpo_graph.core.credit import assign_credit
    from matpo_graph.core.policies import uses_per_role_policies
    from matpo_graph.rl.update import PolicyOptimizer
    from matpo_graph.rl.rollouts import RolloutSession

    today, plan_a = _compiled(_graph(tmp_path, None, {}), monkeypatch)
    named, plan_b = _compiled(_graph(tmp_path, {"base": {"kind": "shared"}}, {"planner": "base", "browser": "base"}),
                              monkeypatch)
    assert not uses_per_role_policies(today) and not uses_per_role_policies(named)  # the trainer's dispatch
    cfg = _cfg(1)
    from matpo_graph.runtime.models import resolve_model

    model_dir = resolve_model("smollm2-135m-instruct")
    with RolloutSession(today, cfg, model_dir=model_dir, plan=plan_a) as session:
        items = session.train_questions()[:1]
        a = session.score(session.rollout_groups(items, group_size=2, step=0, temperature=0.0), plan_a)
        session._run(session.policy.engine.reset_prefix_cache())
        session.program = named
        b = session.score(session.rollout_groups(items, group_size=2, step=0, temperature=0.0), plan_b)
    assert {t.policy for tr in a for t in tr.trajectories} == {"shared"}
    assert {t.policy for tr in b for t in tr.trajectories} == {"base"}
    for x, y in zip(a, b, strict=True):  # greedy: the same tokens (logprobs up to batching in the engine)
        assert len(x.trajectories) == len(y.trajectories)
        for s, t in zip(x.trajectories, y.trajectories, strict=True):
            assert (s.token_ids, s.loss_mask) == (t.token_ids, t.loss_mask)
            assert s.logprobs == pytest.approx(t.logprobs, abs=1e-4)
    trees_a = assign_credit(a, plan_a, warn=False)[0]
    trees_b = assign_credit(b, plan_b, warn=False)[0]
    temps = {n: r.temperature for n, r in today.roles.items()}
    opt_a = PolicyOptimizer(model_dir, plan_a, cfg, role_temperatures=temps)
    ma = opt_a.train_step(trees_a)
    weights_a = {k: v.detach().clone() for k, v in opt_a.model.state_dict().items()}
    del opt_a
    opt_b = PolicyOptimizer(model_dir, plan_b, cfg, role_temperatures=temps)
    mb = opt_b.train_step(trees_b)
    assert ma["loss"] == mb["loss"] and ma["grad_norm"] == mb["grad_norm"] and ma["grad_norm"] > 0.0
    for k, v in opt_b.model.state_dict().items():
        assert torch.equal(v, weights_a[k]), k


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
