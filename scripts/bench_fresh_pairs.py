"""Two runs on the same batches, compared on each step's training questions before they were trained on.

    python scripts/bench_fresh_pairs.py --pair runs/dev-lr1e5-ctl-to30 runs/dev-shuffled-to30 \
        --pair runs/dev-lr1e5-ctl-s1-to30 runs/dev-shuffled-s1-to30 --block 10

Each --pair names two scripts/bench_learning.py folders of one RL seed and start (so they drew the same questions
at every step): A first, B second. For every step both ran, each question met there for the first time is scored
by the mean accuracy of its training trees (`runs/<config>/rollouts/step_*.jsonl`) in A and in B; units
(pair, step, question) are pooled over the pairs in blocks of --block steps and A - B is given with a paired 95% t
interval (matpo_graph/bench/fresh_pairs.py says why these are fresh questions). Rollouts at the training
temperature, G trees per question, so a unit is a share of G samples. A run with dynamic sampling
(`--set min_signal_groups=N`) pairs on each step's regular questions; the extra ones it drew count as met.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from matpo_graph.bench.fresh_pairs import first_met_accuracy, paired_blocks, render_fresh_pairs
from matpo_graph.bench.learning_bench import BenchLayout
from matpo_graph.core.rollout import iter_trees


def _steps(folder: Path, config: str) -> dict[int, dict[str, float]]:
    rollouts = sorted((BenchLayout(folder).run(config) / "rollouts").glob("step_*.jsonl"))
    if not rollouts:
        raise SystemExit(f"error: {folder}: no training rollouts under {BenchLayout(folder).run(config) / 'rollouts'}")
    return first_met_accuracy({int(p.stem.removeprefix("step_")): list(iter_trees(p)) for p in rollouts})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pair", nargs=2, type=Path, action="append", required=True, metavar=("A", "B"),
                   help="two bench_learning folders of one RL seed and start (repeatable: pooled)")
    p.add_argument("--block", type=int, default=10, help="steps per row (default 10)")
    p.add_argument("--config", default="deep_search-clean", help="configuration (default deep_search-clean)")
    args = p.parse_args(argv)
    try:
        rows = paired_blocks([(_steps(a, args.config), _steps(b, args.config)) for a, b in args.pair], args.block)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from exc
    print(render_fresh_pairs(rows, "A (" + ", ".join(str(a) for a, _ in args.pair) + ")",
                             "B (" + ", ".join(str(b) for _, b in args.pair) + ")"), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
