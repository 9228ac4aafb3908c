"""The learning benchmark end to end with a scripted rollout policy: a real (tiny) warm-up and real RL steps of
SmolLM2, evaluations through `matpo-graph eval`, then a second sitting that only does what the first left."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from matpo_graph.bench.learning_bench import BenchLayout, read_eval_point, read_log

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.engine  # trains SmolLM2 (warm-up and two RL steps): minutes, not seconds


def _script_module():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "scripts" / "bench_learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_runs_then_resumes_without_redoing_anything(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    bench = _script_module()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [], "default": "I think so. \\boxed{Nobody}"}))
    out = tmp_path / "bench"
    common = ["--out", str(out), "--configs", "single_agent-clean", "--eval-every", "1", "--eval-questions", "2",
              "--samples", "2", "--warmup-tokens", "600", "--warmup-demos", "2", "--warmup-drills", "2",
              "--train-layers", "1", "--policy", f"scripted:{script}", "--lr", "3e-06", "--temperature", "0.9",
              "--credit", "normalization=mean_only"]
    ran: list[list[str]] = []
    real_run = subprocess.run

    def recording_run(cmd, *a, **kw):
        ran.append([c for c in cmd if not c.startswith("/")])
        return real_run(cmd, *a, **kw)

    monkeypatch.setattr(bench.subprocess, "run", recording_run)
    assert bench.main([*common, "--steps", "1"]) == 0
    layout = BenchLayout(out)
    run = layout.run("single_agent-clean")
    assert [r["action"] for r in read_log(layout)] == ["warmup", "eval", "train", "eval"]
    first = {s: layout.eval_file("single_agent-clean", s).stat().st_mtime_ns for s in (0, 1)}
    point = read_eval_point(layout.eval_file("single_agent-clean", 1))
    assert point is not None and len(point.questions) == 2 and point.samples == 2 and point.trees == 6
    assert point.sampled == dict.fromkeys(point.questions, 0.0)  # the scripted answer is always wrong
    assert (run / "sft").is_symlink() and (run / "checkpoints" / "step_000001").is_dir()
    trained = json.loads((run / "train_config.json").read_text())
    assert trained["lr"] == 3e-06 and trained["temperature"] == 0.9  # --lr and --temperature reached the trainer
    assert json.loads((run / "credit_plan.json").read_text())["normalization"] == "mean_only"  # and --credit
    assert layout.eval_trees("single_agent-clean", 1).is_file()
    table = (out / "learning.md").read_text()
    assert "PARTIAL" not in table and "single agent (GRPO), clean" in table
    assert (out / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"

    # a second sitting with more steps: one more training chunk (resumed) and one more evaluation, nothing else
    ran.clear()
    assert bench.main([*common, "--steps", "2"]) == 0
    assert [r["action"] for r in read_log(layout)] == ["warmup", "eval", "train", "eval", "train", "eval"]
    assert read_log(layout)[-2]["from"] == 1 and read_log(layout)[-2]["to"] == 2
    assert [c[2] for c in ran] == ["train", "eval"] and "--resume" in ran[0]
    assert {s: layout.eval_file("single_agent-clean", s).stat().st_mtime_ns for s in (0, 1)} == first
    assert read_eval_point(layout.eval_file("single_agent-clean", 2)).questions == point.questions
