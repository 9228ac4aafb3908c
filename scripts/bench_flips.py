"""Why held-out answers changed: compare two evaluations of a learning-benchmark folder tree by tree.

    python scripts/bench_flips.py runs/dev-mid                        # deep_search-clean, step 0 against the last
    python scripts/bench_flips.py runs/dev-mid --steps 0 5 --config single_agent-clean
    python scripts/bench_flips.py runs/single --config single_agent-clean --against single_agent-noisy  # at step 0

Reads `runs/<config>/evals/step_N.trees.jsonl.gz` of the folder (written by scripts/bench_learning.py) and prints
a markdown report: how each greedy answer's outcome moved (right / wrong answer / no answer / cut off), the
questions won and lost with what their trees did, behaviour per tree (delegations, root turns, generated tokens,
tool calls and errors) for greedy and sampled trees, and accuracy and delegations by the question's hops. The
report is also written beside the evaluations as `flips_<before>_<after>.md`.

With `--against OTHER`, the second evaluation is configuration OTHER's of the same folder (default: both at step 0,
`--steps` picks them): e.g. what noisy tools do to the same warm-up policy on the same questions. The report then
goes to `flips_<before>_<OTHER>_<after>.md`. When the evaluations' summaries (`step_N.json`) are there, the report
opens with the accuracy difference, second minus first, paired by question with a 95% t interval.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

from matpo_graph.bench.flips import compare_evaluations, render_flips
from matpo_graph.bench.learning_bench import BenchLayout, read_eval_point
from matpo_graph.core.rollout import RolloutTree
from matpo_graph.tracking.stats import mean, paired_difference


def _trees(path: Path) -> list[RolloutTree]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [RolloutTree.model_validate_json(line) for line in fh if line.strip()]


def _paired_accuracy(layout: BenchLayout, first: tuple[str, int], second: tuple[str, int],
                     labels: tuple[str, str]) -> str:
    """Markdown: greedy and sampled accuracy, second minus first paired by question; empty without summaries."""
    points = [read_eval_point(layout.eval_file(config, step)) for config, step in (first, second)]
    if points[0] is None or points[1] is None:
        return ""
    lines = [f"### Accuracy, {labels[0]} -> {labels[1]} (difference paired by question, 95% t interval)", "",
             "| kind | questions | first | second | difference |", "|---|---|---|---|---|"]
    for kind in ("greedy", "sampled"):
        before, after = getattr(points[0], kind), getattr(points[1], kind)
        try:
            d = paired_difference(after, before)
        except ValueError as err:
            return f"(no paired accuracy: {err})\n\n"
        common = [q for q in after if q in before]
        m0, m1 = mean([before[q] for q in common]), mean([after[q] for q in common])
        diff = f"{d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
        lines.append(f"| {kind} | {len(common)} | {m0:.3f} | {m1:.3f} | {diff} |")
    return "\n".join(lines) + "\n\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="a scripts/bench_learning.py output folder")
    p.add_argument("--config", default="deep_search-clean", help="configuration (default deep_search-clean)")
    p.add_argument("--steps", type=int, nargs=2, metavar=("BEFORE", "AFTER"),
                   help="the two evaluations (default: 0 and the last one; with --against, 0 and 0)")
    p.add_argument("--against", metavar="OTHER",
                   help="take the second evaluation from configuration OTHER of the same folder")
    args = p.parse_args(argv)
    layout = BenchLayout(args.folder)
    other = args.against or args.config
    evals = layout.eval_file(args.config, 0).parent
    done = sorted(int(f.name[5:11]) for f in evals.glob("step_*.trees.jsonl.gz")) if evals.is_dir() else []
    if len(done) < 2 and not args.steps and not args.against:
        print(f"error: {evals} holds {len(done)} evaluation(s) with trees; two are needed", file=sys.stderr)
        return 2
    before, after = args.steps or ((0, 0) if args.against else (done[0], done[-1]))
    for config, step in ((args.config, before), (other, after)):
        if not layout.eval_trees(config, step).is_file():
            have = layout.eval_file(config, 0).parent
            steps = sorted(int(f.name[5:11]) for f in have.glob("step_*.trees.jsonl.gz")) if have.is_dir() else []
            print(f"error: no evaluation trees for step {step} in {have} (have steps {steps})", file=sys.stderr)
            return 2
    first, last = _trees(layout.eval_trees(args.config, before)), _trees(layout.eval_trees(other, after))
    labels = (f"{args.config} step {before}", f"{other} step {after}") if args.against else ("", "")
    report = compare_evaluations(first, last, before_step=before, after_step=after, before_label=labels[0],
                                 after_label=labels[1])
    text = _paired_accuracy(layout, (args.config, before), (other, after), report.labels) + render_flips(report)
    name = f"flips_{before}_{other}_{after}.md" if args.against else f"flips_{before}_{after}.md"
    (evals / name).write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
