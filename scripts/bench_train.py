"""Two training benchmarks.

1. The paper's context argument: on the same questions, the largest context any trajectory reaches
   under `deep_search` (planner -> worker) vs `single_agent` (one context holds every search result
   and page). Measured on expert demonstrations played through the real executor, real tools and the
   embedded web (the same agent behaviour for both graphs, so only the graph differs), in SmolLM2
   tokens.
2. The share of an RL step spent in credit assignment and batch packing, read from a training
   run's metrics.jsonl (target: under 2%).

    python scripts/bench_train.py --questions 24 --run-dir runs/deep_search
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def context_comparison(n: int, seed: int) -> dict[str, dict[str, float]]:
    from matpo_graph.compilers.local import load_program
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.coldstart.demonstrations import make_demos

    model_dir = resolve_model("smollm2-135m-instruct")
    out: dict[str, dict[str, float]] = {}
    for graph in ("deep_search", "single_agent"):
        program, plan = load_program(ROOT / "graphs" / f"{graph}.yaml")
        batch = make_demos(program, plan, n=n, model_dir=model_dir, seed=seed, split="dev", keep_all=True, max_hops=4)
        per_tree = [max(len(t.token_ids) for t in tree.trajectories) for tree in batch.trees]
        out[graph] = {
            "trees": float(len(per_tree)),
            "largest_context": float(max(per_tree)),
            "mean_largest_context": float(statistics.fmean(per_tree)),
            "mean_trajectories": float(statistics.fmean(len(tree.trajectories) for tree in batch.trees)),
        }
    return out


def credit_share(run_dir: Path) -> dict[str, float] | None:
    from matpo_graph.tracking.report import read_rows  # shared metric names; old runs read through aliases

    if not (run_dir / "metrics.jsonl").exists():
        return None
    rows = [r for r in read_rows(run_dir) if "timing_s/gen" in r]
    if not rows:
        return None
    shares = []
    for r in rows:
        total = r["timing_s/gen"] + r["timing_s/adv"] + r["timing_s/update_actor"] + r.get("timing_s/update_weights", 0.0)
        shares.append((r["timing_s/adv"] + r.get("matpo/timing_s/pack", 0.0)) / total)
    return {"steps": float(len(rows)), "mean_share": statistics.fmean(shares), "max_share": max(shares)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", type=int, default=24, help="dev questions (1-4 hops) for the context comparison")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "deep_search", help="a training run to read timings from")
    args = p.parse_args()

    ctx = context_comparison(args.questions, args.seed)
    print("largest context per trajectory (tokens), same questions, expert behaviour:")
    for graph, m in ctx.items():
        print(f"  {graph:13s} trees={m['trees']:.0f} largest={m['largest_context']:.0f} "
              f"mean-per-tree={m['mean_largest_context']:.0f} trajectories/tree={m['mean_trajectories']:.1f}")
    ratio = ctx["single_agent"]["mean_largest_context"] / ctx["deep_search"]["mean_largest_context"]
    print(f"  single_agent / deep_search (mean per tree): {ratio:.2f}x")

    share = credit_share(args.run_dir)
    if share is None:
        print(f"no training metrics under {args.run_dir}; run `bash scripts/train.sh` first for the step-time share")
    else:
        verdict = "OK" if share["max_share"] < 0.02 else "ABOVE TARGET"
        print(f"credit assignment + batch packing share of an RL step over {share['steps']:.0f} steps: "
              f"mean {100 * share['mean_share']:.3f}%, max {100 * share['max_share']:.3f}% (target < 2%: {verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
