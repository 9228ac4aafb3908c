"""Export and evaluation of a run whose graph declares several policies, on a tiny random Llama (no engine):
each exported policy computes what the trainer's policy computed, and evaluation serves every trained one.

The real model and engine: test_policy_engine_*.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

from .test_update_per_role import _cfg, _compile, _trees, tiny_model_dir  # noqa: E402,F401

IDS = [1, 504, 3622, 314, 260, 2369, 282, 4649, 47, 2]


def _run(tmp_path: Path, model_dir: Path, policies: str, planner: str, worker: str):  # type: ignore[no-untyped-def]
    """A run folder as the trainer leaves it after one step (graph, settings, a checkpoint); returns (run, set)."""
    from matpo_graph.rl.checkpoint import save_checkpoint
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _compile(tmp_path, planner, worker, policies)
    cfg = _cfg(train_layers=1).model_copy(update={"model": str(model_dir)})
    ps = PolicySet(program, plan, cfg, model_dir)
    ps.train_step(_trees(plan))
    run = tmp_path / "run"
    run.mkdir()
    (run / "program.json").write_text(program.model_dump_json())
    (run / "credit_plan.json").write_text(plan.model_dump_json())
    (run / "train_config.json").write_text(cfg.model_dump_json())
    save_checkpoint(run, step=1, model=ps.model, optimizer=ps.optimizer, state={})
    return run, ps


def _logprobs(model_dir: Path) -> list[float]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([IDS])).logits[0], dim=-1)
    return [float(logp[i, IDS[i + 1]]) for i in range(len(IDS) - 1)]


def _close(a: list[float], b: list[float], tol: float = 1e-4) -> bool:
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) < tol


def test_each_lora_policy_and_the_shared_base_export_as_the_trainer_computes_them(tmp_path: Path,
                                                                                  tiny_model_dir: Path) -> None:
    from matpo_graph.cli import main

    run, ps = _run(tmp_path, tiny_model_dir, "  p: {kind: lora, rank: 4}\n  w: {kind: lora, rank: 2}\n", "p", "w")
    expected = {name: ps.sequence_logprobs(name, IDS) for name in ("p", "w", "shared")}
    # two different trained adapters, both away from the base: a wrong merge cannot pass for a right one
    assert not _close(expected["p"], expected["w"]) and not _close(expected["p"], expected["shared"])
    assert not _close(expected["w"], expected["shared"])
    for name in ("p", "w"):
        out = tmp_path / f"export_{name}"
        assert main(["export", str(run), "-o", str(out), "--policy", name]) == 0
        assert _close(_logprobs(out), expected[name]), name
        info = json.loads((out / "matpo_graph_export.json").read_text())
        assert info["policy"] == name and info["step"] == 1 and info["lora_merged"] is True
        assert (out / "tokenizer.json").is_file()


def test_a_separate_policy_and_the_shared_one_export_their_own_models(tmp_path: Path, tiny_model_dir: Path) -> None:
    from matpo_graph.rl.export import export_model

    other = tmp_path / "judge_model"
    shutil.copytree(tiny_model_dir, other)
    run, ps = _run(tmp_path, tiny_model_dir, f"  judge: {{kind: separate, model: '{other}'}}\n", "shared", "judge")
    for name in ("judge", "shared"):
        out = export_model(run, tmp_path / f"export_{name}", policy=name)
        assert _close(_logprobs(out), ps.sequence_logprobs(name, IDS)), name
    assert not _close(_logprobs(tmp_path / "export_judge"), _logprobs(other))  # the trained judge, not its start


def test_a_per_role_export_needs_a_policy_and_loses_nothing_without_one(tmp_path: Path, tiny_model_dir: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from matpo_graph.cli import main
    from matpo_graph.rl.export import ExportError, export_model

    run, _ = _run(tmp_path, tiny_model_dir, "  p: {kind: lora, rank: 4}\n", "p", "shared")
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    assert main(["export", str(run), "-o", str(keep), "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "several policies (shared, p)" in err and "--policy NAME" in err
    assert (keep / "notes.txt").read_text() == "mine"  # refused before anything was replaced
    with pytest.raises(ExportError, match="no policy 'q'"):
        export_model(run, tmp_path / "o", policy="q")
    plain = tmp_path / "plain"
    shutil.copytree(run, plain)
    (plain / "program.json").unlink()  # a run folder of one policy (no graph of several)
    with pytest.raises(ExportError, match="trains one policy"):
        export_model(plain, tmp_path / "o2", policy="p")


class _RecordingSession:
    """Stands in for the rollout session's engines: records what evaluation serves them."""

    def __init__(self, root: Path) -> None:
        self.root, self.weights, self.adapters = root, {}, {}

    def load_policy_weights(self, policy: str, state_dict: dict) -> float:
        self.weights[policy] = {k: v.clone() for k, v in state_dict.items()}
        return 0.0

    def adapter_folder(self, policy: str, step: int) -> Path:
        return self.root / policy / f"step_{step}"

    def load_adapter(self, policy: str, folder: Path) -> float:
        self.adapters[policy] = folder
        return 0.0


def test_evaluation_of_a_per_role_run_serves_every_trained_policy_of_the_checkpoint(tmp_path: Path,
                                                                                   tiny_model_dir: Path) -> None:
    from matpo_graph.evaluation.evaluate import run_folder_model

    run, ps = _run(tmp_path, tiny_model_dir, "  p: {kind: lora, rank: 4}\n", "p", "shared")
    base_dir, policies = run_folder_model(run, _cfg())
    assert base_dir == tiny_model_dir and policies.step == 1
    session = _RecordingSession(tmp_path / "served")
    policies.serve(session)
    assert set(session.adapters) == {"p"} and (session.adapters["p"] / "adapter_config.json").is_file()
    assert set(session.weights) == {"shared"}  # the worker's rows trained the shared base too
    trained = ps.base_state_dict()
    assert all(torch.equal(session.weights["shared"][k], trained[k]) for k in trained)
    _, at_start = run_folder_model(run, _cfg(), step=0)
    fresh = _RecordingSession(tmp_path / "fresh")
    at_start.serve(fresh)  # step 0: the models RL started from, which the engines already serve
    assert not fresh.weights and not fresh.adapters
