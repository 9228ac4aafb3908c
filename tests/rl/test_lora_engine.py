"""LoRA end to end on the real engine: train a step, resume for a second, evaluate the run, export it, and
serve the export with vLLM: the engine's logprobs equal transformers' on the merged weights."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("peft")
pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]


def _program_and_plan(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import load_program

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.setenv("MATPO_GRAPH_TRUST_CODE", "credit_fixture")  # the test's own credit strategy
    program, plan = load_program(ROOT / "graphs" / "deep_search.yaml")
    roles = {n: r.model_copy(update={"max_turns": 2, "max_tokens_per_turn": 40}) for n, r in program.roles.items()}
    program = program.model_copy(update={"roles": roles, "context_tokens": 2048})
    # Fixed non-zero advantages, so the adapter moves even though the untrained model earns no reward.
    plan = plan.model_copy(update={"strategy": "credit_fixture:alternating"})
    return program, plan


def _cfg(steps: int):  # type: ignore[no-untyped-def]
    from matpo_graph.rl.config import TrainConfig

    return TrainConfig(steps=steps, questions_per_step=1, group_size=2, warmstart="none", eval_questions=0,
                       env_entities=200, kv_cache_gib=1, lr=1e-3, lora_rank=4, logger=["jsonl"],
                       time_budget_minutes=0, engine_dtype="float32")  # exact sync check


def test_lora_train_resume_evaluate_export_and_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from matpo_graph.evaluation.evaluate import run_folder_model
    from matpo_graph.rl.export import export_model
    from matpo_graph.rl.rollouts import RolloutSession
    from matpo_graph.rl.trainer import LocalTrainer

    program, plan = _program_and_plan(monkeypatch)
    run = tmp_path / "run"

    first = LocalTrainer(program, plan, _cfg(1), run).run()
    assert first.last_step == 1
    ckpt1 = load_file(str(run / "checkpoints" / "step_000001" / "model.safetensors"))
    lora_b = [k for k in ckpt1 if "lora_B" in k]
    assert lora_b and any(ckpt1[k].abs().max() > 0 for k in lora_b), "the adapter did not move"
    assert first.metrics[0]["sync_max_abs_logprob_diff"] < 2e-3  # the engine serves base + merged adapter

    second = LocalTrainer(program, plan, _cfg(2), run).run(resume=True)
    assert second.last_step == 2 and [m["step"] for m in second.metrics] == [2]
    assert second.metrics[0]["sync_max_abs_logprob_diff"] < 2e-3
    ckpt2 = load_file(str(run / "checkpoints" / "step_000002" / "model.safetensors"))
    assert any(not torch.equal(ckpt1[k], ckpt2[k]) for k in lora_b), "the resumed step did not train the adapter"

    # Evaluation of the run folder loads the merged weights (base names, no adapter keys).
    base_dir, merged = run_folder_model(run, _cfg(2))
    assert merged is not None and not any("lora_" in k for k in merged)

    out = export_model(run, tmp_path / "export")
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    ids = [1, 504, 3622, 314, 260, 2369, 282, 4649, 47, 2]
    with torch.no_grad():
        logp = torch.log_softmax(hf(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
    expected = [float(logp[i, ids[i + 1]]) for i in range(len(ids) - 1)]

    cfg = _cfg(2).model_copy(update={"steps": 0})
    with RolloutSession(program, cfg, model_dir=out, plan=plan) as session:  # vLLM serves the exported folder
        served = session.engine_logprobs(ids)
        assert served is not None
        assert max(abs(a - b) for a, b in zip(served, expected, strict=True)) < 2e-3
        session.load_weights(merged)  # what `matpo-graph eval RUN_DIR` loads: the same weights
        again = session.engine_logprobs(ids)
        assert max(abs(a - b) for a, b in zip(again, expected, strict=True)) < 2e-3
        items = session.eval_questions()[:1]
        trees = session.rollout_groups(items, group_size=1, step=0, temperature=0.0, tag="eg", label="eval greedy")
        assert len(trees) == 1 and trees[0].trajectories
