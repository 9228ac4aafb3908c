"""One shared model vs a LoRA adapter per role, on the default graph, with the same budget.

Both runs start from one supervised warm-up of the shared model (made once, reused), then train the same
number of RL steps on the same questions and seeds:

- shared:   graphs/deep_search.yaml -- one set of weights plays planner and browser (its top layers train);
- adapters: graphs/deep_search_adapters.yaml -- the same graph with `policy: planner_adapter` and
            `policy: browser_adapter` (rank 8 on every linear layer); the base stays frozen.

LoRA adapters start at zero and conventionally train at 10-100x the learning rate of full fine-tuning, so the
adapters run uses --adapter-lr (default 1e-4) and the shared run the trainer's default; both are printed in
the table. Writes OUT/comparison.md (accuracy, reward, groups with signal, held-out accuracy, seconds per
RL step and per update).

    python examples/per_role_policies/run.py --steps 2 --out runs/per_role       # about 20 min on 2 cores

Interrupted? Run the same command again: the warm-up and finished runs are reused, a started run resumes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {"shared": "deep_search", "adapters": "deep_search_adapters"}


def _cli(*args: str) -> None:
    cmd = [sys.executable, "-m", "matpo_graph", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _warmup(args: argparse.Namespace) -> Path:
    model = args.out / "warmup" / "model"
    if not (model / "config.json").exists():
        _cli("sft", str(ROOT / "graphs" / "deep_search.yaml"), "--out", str(args.out / "warmup"),
             "--demos", str(args.sft_demos), "--drills", str(args.sft_drills), "--seed", str(args.seed), "--quiet")
    return model


def _finished(run: Path, steps: int) -> bool:
    state = sorted((run / "checkpoints").glob("step_*/state.json"))
    return bool(state) and json.loads(state[-1].read_text()).get("step", 0) >= steps


def _train(variant: str, model: Path, args: argparse.Namespace) -> Path:
    run = args.out / variant
    if _finished(run, args.steps):
        return run
    cmd = ["train", str(ROOT / "graphs" / f"{VARIANTS[variant]}.yaml"), "--out", str(run), "--model", str(model),
           "--warmstart", "none", "--steps", str(args.steps), "--seed", str(args.seed),
           "--questions-per-step", str(args.questions_per_step), "--eval-questions", str(args.eval_questions),
           "--time-budget", "0"]
    if variant == "adapters":
        cmd += ["--lr", str(args.adapter_lr)]
    if (run / "checkpoints").exists():
        cmd.append("--resume")
    _cli(*cmd)
    return run


def summarise(run: Path) -> dict[str, float]:
    """Means over the run's RL steps and its final held-out evaluation, from metrics.jsonl."""
    from matpo_graph.tracking.report import read_rows

    rows = read_rows(run)
    train = [r for r in rows if "matpo/reward/mean" in r]
    evals = [r for r in rows if "matpo/eval/greedy/accuracy" in r]
    nan = float("nan")

    def mean(key: str) -> float:
        vals = [float(r[key]) for r in train if key in r]
        return sum(vals) / len(vals) if vals else nan

    config = json.loads((run / "train_config.json").read_text()) if (run / "train_config.json").exists() else {}
    return {
        "learning rate": float(config.get("lr", nan)),
        "train accuracy": mean("matpo/reward/accuracy"),
        "train reward": mean("matpo/reward/mean"),
        "groups with signal": mean("matpo/group_variance_share"),
        "held-out greedy accuracy": float(evals[-1]["matpo/eval/greedy/accuracy"]) if evals else nan,
        "held-out sampled accuracy": float(evals[-1].get("matpo/eval/sampled/accuracy", nan)) if evals else nan,
        "seconds per RL step": mean("timing_s/step"),
        "seconds per update": mean("timing_s/update_actor"),
        "RL steps": float(len(train)),
    }


def table(summaries: dict[str, dict[str, float]]) -> str:
    names = list(summaries)
    keys = list(next(iter(summaries.values())))
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key in keys:
        cells = []
        for name in names:
            v = summaries[name][key]
            cells.append("-" if v != v else (f"{v:.0f}" if key in ("RL steps",) or "seconds" in key
                                             else f"{v:g}" if key == "learning rate" else f"{v:.3f}"))
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/per_role"))
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--questions-per-step", type=int, default=2)
    p.add_argument("--eval-questions", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sft-demos", type=int, default=40)
    p.add_argument("--sft-drills", type=int, default=80)
    p.add_argument("--adapter-lr", type=float, default=1e-4)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    model = _warmup(args)
    runs = {variant: _train(variant, model, args) for variant in VARIANTS}
    text = table({v: summarise(r) for v, r in runs.items()})
    (args.out / "comparison.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
