"""MATPO (deep_search) vs single-agent GRPO (single_agent), same budget, seeds and questions.

Runs four trainings -- each graph on the clean embedded web and on its noisy-tool setting -- then
writes `comparison.md` (final and held-out accuracy, reward, largest context) and `comparison.png`.

    python examples/matpo_vs_single_agent/run.py --steps 6 --out runs/compare

Every run is an ordinary `matpo-graph train` run folder under OUT, so `matpo-graph report` and
`matpo-graph show` work on each of them. A graph's cold start (its supervised warm-up, which never sees
tool noise) is trained once and reused by its noisy run, so both settings start from the same weights.

For held-out learning curves with error bars (equal warm-up token budgets, one fixed held-out set evaluated
every K steps, paired intervals, resumable over several sittings) use `python scripts/bench_learning.py`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRAPHS = {"matpo (deep_search)": "deep_search", "single agent (GRPO)": "single_agent"}
SETTINGS = {"clean": None, "noisy": "paper"}


def _train(graph: str, noise: str | None, out: Path, args: argparse.Namespace) -> None:
    cmd = [
        sys.executable, "-m", "matpo_graph", "train", str(ROOT / "graphs" / f"{graph}.yaml"), "--out", str(out),
        "--steps", str(args.steps), "--seed", str(args.seed), "--questions-per-step", str(args.questions_per_step),
        "--eval-questions", str(args.eval_questions), "--warmstart", args.warmstart,
        "--time-budget", "0",  # a fixed step count, not a wall clock: both graphs get the same number of updates
        "--set", f"sft_demos={args.sft_demos}",
    ]
    if noise:
        cmd += ["--noise", noise]
    if (out / "checkpoints").exists():
        cmd.append("--resume")
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _report(run: Path) -> None:
    subprocess.run([sys.executable, "-m", "matpo_graph", "report", str(run)], check=False)


def _rows(run: Path) -> list[dict]:
    """Every metrics record of a run, in the shared (veRL) vocabulary; runs written before read through aliases."""
    from matpo_graph.tracking.report import read_rows

    return read_rows(run) if (run / "metrics.jsonl").exists() else []


def _summary(run: Path) -> dict[str, float]:
    rows = _rows(run)
    train = [r for r in rows if "matpo/reward/mean" in r]
    evals = [r for r in rows if "matpo/eval/greedy/accuracy" in r]

    def mean(key: str) -> float:
        vals = [float(r[key]) for r in train if key in r]
        return sum(vals) / len(vals) if vals else float("nan")

    nan = float("nan")
    return {
        "mean train reward": mean("matpo/reward/mean"),
        "mean train accuracy": mean("matpo/reward/accuracy"),
        "groups with signal": mean("matpo/group_variance_share"),
        "held-out acc. (greedy)": evals[-1]["matpo/eval/greedy/accuracy"] if evals else nan,
        "held-out acc. (sampled)": evals[-1].get("matpo/eval/sampled/accuracy", nan) if evals else nan,
        "tool error rate": mean("matpo/tool_error_rate"),
        "largest context (tokens)": float(max((v for r in train for k, v in r.items()
                                               if k.startswith("matpo/max_context/")), default=0.0)),
        "RL seconds": sum(float(r.get("timing_s/step", 0.0)) for r in train),
    }


def _plot(out: Path, runs: dict[str, Path]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SETTINGS), figsize=(10, 3.6), dpi=110, sharey=True)
    for ax, setting in zip(axes, SETTINGS, strict=True):
        for label in GRAPHS:
            rows = [r for r in _rows(runs[f"{label}|{setting}"]) if "reward_mean" in r]
            ax.plot([r["step"] for r in rows], [r["reward_mean"] for r in rows], marker="o", ms=3, label=label)
        ax.set_title(f"{setting} tools")
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean reward")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "comparison.png")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--questions-per-step", type=int, default=4)
    p.add_argument("--eval-questions", type=int, default=8)
    p.add_argument("--warmstart", default="auto", choices=["auto", "sft", "none"])
    p.add_argument("--sft-demos", type=int, default=20, help="expert demonstrations of each graph's warm-up")
    p.add_argument("--out", type=Path, default=Path("runs/matpo_vs_single_agent"))
    p.add_argument("--table-only", action="store_true", help="only (re)write the table and plot from the runs under OUT")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Path] = {}
    for label, graph in GRAPHS.items():
        warm: Path | None = None
        for setting, noise in SETTINGS.items():
            run = args.out / f"{graph}-{setting}"
            runs[f"{label}|{setting}"] = run
            if args.table_only:
                continue
            if warm is not None and (warm / "model" / "config.json").exists() and not (run / "sft").exists():
                run.mkdir(parents=True, exist_ok=True)
                shutil.copytree(warm, run / "sft")
            _train(graph, noise, run, args)
            warm = warm or run / "sft"
            _report(run)
    lines = ["# MATPO vs single-agent GRPO", "", f"steps={args.steps} seed={args.seed} "
             f"questions/step={args.questions_per_step} eval questions={args.eval_questions} "
             f"warmstart={args.warmstart} sft_demos={args.sft_demos}", ""]
    keys = list(_summary(next(iter(runs.values()))).keys())
    lines.append("| graph | tools | " + " | ".join(keys) + " |")
    lines.append("|---|---|" + "---|" * len(keys))
    for name, run in runs.items():
        label, setting = name.split("|")
        s = _summary(run)
        lines.append(f"| {label} | {setting} | " + " | ".join(f"{s[k]:.0f}" if s[k] >= 100 else f"{s[k]:.3f}" for k in keys) + " |")
    (args.out / "comparison.md").write_text("\n".join(lines) + "\n")
    _plot(args.out, runs)
    print("\n".join(lines))
    print(f"\nwrote {args.out / 'comparison.md'} and {args.out / 'comparison.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
