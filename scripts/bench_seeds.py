"""Several RL seeds from one start: each paired with the start, pooled, and against a control setting.

    python scripts/bench_seeds.py runs/dev-q2-lr1e5-s0 runs/dev-q2-lr1e5-s1 runs/dev-q2-lr1e5-s2
    python scripts/bench_seeds.py runs/lever-s0 runs/lever-s1 --control runs/default-s0 runs/default-s1

Every folder must come from scripts/bench_learning.py and share one step-0 evaluation (the first folder's own,
the others made with `--share-start FIRST --rl-seed S`); a folder with its own warm-up or start is refused,
since its seeds would not be paired with the same model and samples. Each folder's last evaluation is its
final one (`--step N` picks another). Prints a markdown table: per seed, final minus start paired by
question; the seeds pooled (per question, their mean minus the start); the spread between seeds; and with
`--control`, the setting's seed mean minus the control's, paired by question.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from matpo_graph.bench.learning_bench import BenchLayout, EvalPoint, read_eval_point
from matpo_graph.bench.seeds import compare_seeds, render_seeds


def _final(layout: BenchLayout, config: str, step: int | None) -> EvalPoint:
    evals = layout.eval_file(config, 0).parent
    done = sorted(int(f.name[5:11]) for f in evals.glob("step_??????.json")) if evals.is_dir() else []
    want = step if step is not None else (done[-1] if done else None)
    if want is None or want == 0 or want not in done:
        what = "after step 0" if want in (None, 0) else f"at step {want}"
        raise SystemExit(f"error: {evals} has no evaluation {what} (have steps {done})")
    point = read_eval_point(layout.eval_file(config, want))
    if point is None:
        raise SystemExit(f"error: {layout.eval_file(config, want)} is unreadable")
    return point


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", type=Path, nargs="+", help="bench_learning.py folders of one setting, one per seed")
    p.add_argument("--control", type=Path, nargs="+", default=[], metavar="FOLDER",
                   help="folders of the control setting, from the same start")
    p.add_argument("--config", default="deep_search-clean", help="configuration (default deep_search-clean)")
    p.add_argument("--step", type=int, help="the final evaluation's step (default: each folder's last)")
    args = p.parse_args(argv)
    folders = [*args.folders, *args.control]
    starts = {f: read_eval_point(BenchLayout(f).eval_file(args.config, 0)) for f in folders}
    missing = [str(f) for f, s in starts.items() if s is None]
    if missing:
        print(f"error: no step-0 evaluation of {args.config} in {', '.join(missing)}", file=sys.stderr)
        return 2
    start = starts[folders[0]]
    assert start is not None
    for f, s in starts.items():
        if s is None or (s.greedy, s.sampled) != (start.greedy, start.sampled):
            print(f"error: {f} has a step-0 evaluation of its own, not {folders[0]}'s; make it with "
                  f"--share-start {folders[0]} so its seed pairs with the same start", file=sys.stderr)
            return 2
    try:
        report = compare_seeds(start, {str(f): _final(BenchLayout(f), args.config, args.step) for f in args.folders},
                               {str(f): _final(BenchLayout(f), args.config, args.step) for f in args.control})
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render_seeds(report), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
