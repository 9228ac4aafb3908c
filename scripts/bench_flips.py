"""Why held-out answers changed: compare two evaluations of a learning-benchmark folder tree by tree.

    python scripts/bench_flips.py runs/dev-mid                        # deep_search-clean, step 0 against the last
    python scripts/bench_flips.py runs/dev-mid --steps 0 5 --config single_agent-clean

Reads `runs/<config>/evals/step_N.trees.jsonl.gz` of the folder (written by scripts/bench_learning.py) and prints
a markdown report: how each greedy answer's outcome moved (right / wrong answer / no answer / cut off), the
questions won and lost with what their trees did, behaviour per tree (delegations, root turns, generated tokens,
tool calls and errors) for greedy and sampled trees, and accuracy and delegations by the question's hops. The
report is also written beside the evaluations as `flips_<before>_<after>.md`.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

from matpo_graph.bench.flips import compare_evaluations, render_flips
from matpo_graph.bench.learning_bench import BenchLayout
from matpo_graph.core.rollout import RolloutTree


def _trees(path: Path) -> list[RolloutTree]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [RolloutTree.model_validate_json(line) for line in fh if line.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="a scripts/bench_learning.py output folder")
    p.add_argument("--config", default="deep_search-clean", help="configuration (default deep_search-clean)")
    p.add_argument("--steps", type=int, nargs=2, metavar=("BEFORE", "AFTER"),
                   help="the two evaluations (default: 0 and the last one)")
    args = p.parse_args(argv)
    layout = BenchLayout(args.folder)
    evals = layout.eval_file(args.config, 0).parent
    done = sorted(int(f.name[5:11]) for f in evals.glob("step_*.trees.jsonl.gz")) if evals.is_dir() else []
    if len(done) < 2 and not args.steps:
        print(f"error: {evals} holds {len(done)} evaluation(s) with trees; two are needed", file=sys.stderr)
        return 2
    before, after = args.steps or (done[0], done[-1])
    for step in (before, after):
        if not layout.eval_trees(args.config, step).is_file():
            print(f"error: no evaluation trees for step {step} in {evals} (have steps {done})", file=sys.stderr)
            return 2
    first, last = (_trees(layout.eval_trees(args.config, step)) for step in (before, after))
    report = compare_evaluations(first, last, before_step=before, after_step=after)
    text = render_flips(report)
    (evals / f"flips_{before}_{after}.md").write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
