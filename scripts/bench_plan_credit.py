"""Which way each run's training batches pushed the root's delegations, beside how its one-hop plans moved.

    python scripts/bench_plan_credit.py runs/dev-lr1e5-ctl runs/dev-lr1e5-ctl-s1 runs/dev-lr1e5-ctl-s2
    python scripts/bench_plan_credit.py runs/dev-hops* --config deep_search-clean

For every scripts/bench_learning.py folder: the sum of root advantage x root delegations over its training trees
(`runs/<config>/rollouts/step_*.jsonl`), by the questions' hop counts (above zero: the batches rewarded delegating
more), and, from its step-0 and last evaluations, the share of held-out one-hop trees whose root delegated more
than once and their accuracy. One markdown row per run, sorted by the push (matpo_graph/bench/plan_credit.py
says why the statistic is a covariance and what the reading is). A folder stopped after its step-0 evaluation
(a warm-up compared with another) gets its step-0 plans only.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from collections.abc import Iterator
from pathlib import Path

from matpo_graph.bench.learning_bench import BenchLayout
from matpo_graph.bench.plan_credit import RunPlanCredit, delegation_push, one_hop_plans, render_plan_credit
from matpo_graph.core.rollout import RolloutTree, iter_trees


def _eval_trees(path: Path) -> Iterator[RolloutTree]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield RolloutTree.model_validate_json(line)


def _run(folder: Path, config: str) -> RunPlanCredit:
    layout = BenchLayout(folder)
    rollouts = sorted((layout.run(config) / "rollouts").glob("step_*.jsonl"))
    evals = sorted(layout.eval_trees(config, 0).parent.glob("step_??????.trees.jsonl.gz"))
    if not evals or not evals[0].name.startswith("step_000000"):
        raise SystemExit(f"error: {layout.eval_trees(config, 0)} is missing: no step-0 evaluation to start from")
    push = delegation_push(t for path in rollouts for t in iter_trees(path)) if rollouts else None
    return RunPlanCredit(label=str(folder), push=push, before=one_hop_plans(_eval_trees(evals[0])),
                         after=one_hop_plans(_eval_trees(evals[-1])) if len(evals) > 1 else None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", type=Path, nargs="+", help="scripts/bench_learning.py output folders")
    p.add_argument("--config", default="deep_search-clean", help="configuration (default deep_search-clean)")
    args = p.parse_args(argv)
    print(render_plan_credit([_run(f, args.config) for f in args.folders]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
