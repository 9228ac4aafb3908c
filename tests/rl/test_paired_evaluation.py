"""Evaluations draw the same seeds at every step (paired), training rollouts fresh ones; both through a scripted
policy that records the seed of every request it gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def session(tmp_path: Path):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import load_program
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.rollouts import RolloutSession
    from matpo_graph.runtime.models import resolve_model

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [], "default": "I know this one. \\boxed{Paris}"}))
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Capital number {i}?", "answer": "Paris"}) + "\n"
                            for i in range(2)))
    program, plan = load_program(ROOT / "graphs" / "single_agent.yaml")
    cfg = TrainConfig(policy=f"scripted:{script}", data=str(data), eval_data=str(data), warmstart="none",
                      time_budget_minutes=0, verify_sync=False)
    with RolloutSession(program, cfg, model_dir=resolve_model("smollm2-135m-instruct"), plan=plan) as s:
        seen: list[int | None] = []
        inner = s.policy.generate

        async def recording(prompt_ids, sampling, **kw):  # type: ignore[no-untyped-def]
            seen.append(sampling.seed)
            return await inner(prompt_ids, sampling, **kw)

        s.policy.generate = recording  # type: ignore[method-assign]
        yield s, seen


def _draw(s, seen, *, step: int, paired: bool):  # type: ignore[no-untyped-def]
    seen.clear()
    trees = s.rollout_groups(s.eval_questions(), group_size=2, step=step, tag="es", paired=paired)
    return sorted(t.tree_id for t in trees), sorted(seen)


def test_paired_rollouts_repeat_their_tree_ids_and_request_seeds_across_steps(session):
    s, seen = session
    ids1, seeds1 = _draw(s, seen, step=1, paired=True)
    ids7, seeds7 = _draw(s, seen, step=7, paired=True)
    assert ids1 == ids7 and seeds1 == seeds7
    assert len(set(seeds1)) == len(seeds1) == 4 and None not in seeds1  # one seed per sample, all different


def test_training_rollouts_draw_fresh_seeds_every_step(session):
    s, seen = session
    ids1, seeds1 = _draw(s, seen, step=1, paired=False)
    ids2, seeds2 = _draw(s, seen, step=2, paired=False)
    assert ids1 != ids2 and not set(seeds1) & set(seeds2)


def test_evaluate_asks_for_paired_rollouts(session, monkeypatch):
    s, _ = session
    asked: list[bool] = []
    real = s.rollout_groups

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(kwargs.get("paired", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(s, "rollout_groups", spy)
    s.evaluate(n=2, step=3, samples=2)
    assert asked == [True, True]  # greedy and sampled
