"""Seconds per RL step of veRL's trainer on this CPU against the local trainer, same graph and budget.

Both engines start from one warm-up of the embedded model (made once, cached in OUT/verl/warmup),
train the same graph with the same questions per step and group size for the same number of steps,
and read their step times from their own logs (veRL's ``timing_s/step``, the local trainer's
metrics). The ratio is the point; both run in this one invocation, one after the other, so run it on
an otherwise idle machine.

    python scripts/bench_verl_cpu.py [--steps 2] [--questions-per-step 2] [--out runs/bench_verl_cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from matpo_graph.tracking.report import read_metrics  # noqa: E402


def _run(cmd: list[str], log: Path) -> float:
    print("$", " ".join(cmd), flush=True)
    started = time.perf_counter()
    with open(log, "w") as sink:
        code = subprocess.call(cmd, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    if code != 0:
        sys.exit(f"failed with exit status {code}; see {log}")
    return time.perf_counter() - started


def _step_seconds(run: Path) -> list[float]:
    rows = [r for r in read_metrics(run) if "timing_s/step" in r]
    return [float(r["timing_s/step"]) for r in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", default=str(REPO / "graphs" / "deep_search.yaml"))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--questions-per-step", type=int, default=2)
    ap.add_argument("--sft-demos", type=int, default=8)
    ap.add_argument("--sft-drills", type=int, default=16)
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "bench_verl_cpu")
    args = ap.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    q = args.questions_per_step
    cli = [sys.executable, "-m", "matpo_graph", "train", args.graph]

    verl_wall = _run(
        [*cli, "--engine", "verl", "--device", "cpu", "-o", str(out / "verl"), "--sft-demos", str(args.sft_demos),
         "--sft-drills", str(args.sft_drills), f"trainer.total_training_steps={args.steps}", f"data.train_batch_size={q}",
         f"actor_rollout_ref.actor.ppo_mini_batch_size={q}", "trainer.save_freq=-1", "trainer.val_before_train=false"],
        out / "verl_stdout.log",
    )
    warm = out / "verl" / "warmup" / "model"
    local_wall = _run(
        [*cli, "-o", str(out / "local"), "--model", str(warm), "--warmstart", "none", "--steps", str(args.steps),
         "--questions-per-step", str(q), "--time-budget", "0", "--eval-questions", "0"],
        out / "local_stdout.log",
    )
    verl_steps, local_steps = _step_seconds(out / "verl" / "verl.log"), _step_seconds(out / "local")
    result = {
        "graph": Path(args.graph).name,
        "steps": args.steps,
        "questions_per_step": q,
        "verl_step_seconds": verl_steps,
        "local_step_seconds": local_steps,
        "verl_wall_seconds": round(verl_wall, 1),
        "local_wall_seconds": round(local_wall, 1),
        "ratio_verl_over_local": statistics.mean(verl_steps) / statistics.mean(local_steps),
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
