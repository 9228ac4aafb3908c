"""Which held-out greedy answers changed over many learning-benchmark runs, and how few questions carry the changes.

    python scripts/bench_flip_census.py runs/dev-lr1e5-ctl runs/dev-lr1e5-ctl-s1 runs/dev-lr1e5-ctl-s2 runs/dev-g8*

For each scripts/bench_learning.py folder, compares the configuration's step-0 evaluation with its last one
(as scripts/bench_flips.py does for one run) and counts, per question, the runs in which its greedy answer was
lost and those in which it was won. Runs should share one start (`--share-start`), so that step 0 is the same
policy on the same questions. Prints markdown (matpo_graph/bench/flip_census.py says what it is for).
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

from matpo_graph.bench.flip_census import flip_census, render_flip_census
from matpo_graph.bench.flips import FlipReport, compare_evaluations
from matpo_graph.bench.learning_bench import BenchLayout
from matpo_graph.core.rollout import RolloutTree


def _trees(path: Path) -> list[RolloutTree]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [RolloutTree.model_validate_json(line) for line in fh if line.strip()]


def _report(folder: Path, config: str) -> FlipReport:
    layout = BenchLayout(folder)
    evals = layout.eval_file(config, 0).parent
    done = sorted(int(f.name[5:11]) for f in evals.glob("step_*.trees.jsonl.gz")) if evals.is_dir() else []
    if len(done) < 2 or done[0] != 0:
        raise ValueError(f"{evals} holds evaluations with trees at steps {done}; step 0 and a later one are needed")
    return compare_evaluations(_trees(layout.eval_trees(config, 0)), _trees(layout.eval_trees(config, done[-1])),
                               before_step=0, after_step=done[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", type=Path, nargs="+", help="scripts/bench_learning.py output folders")
    p.add_argument("--config", default="deep_search-clean", help="configuration (default deep_search-clean)")
    p.add_argument("--top", type=int, default=4, help="how many of the most-changed questions the summary sums (default 4)")
    args = p.parse_args(argv)
    try:
        reports = {str(f): _report(f, args.config) for f in args.folders}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render_flip_census(flip_census(reports), top=args.top), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
