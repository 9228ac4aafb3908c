"""Shared parts of the per-role policy engine tests (tests/rl/test_policy_engine_*.py): a copy of the default
graph with policies bound, compiled with short turns and the test's own credit strategy, and a small config."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
