"""Several RL seeds from one start: each paired with the start, pooled, and against a control setting.

    python scripts/bench_seeds.py runs/dev-q2-lr1e5-s0 runs/dev-q2-lr1e5-s1 runs/dev-q2-lr1e5-s2
    python scripts/bench_seeds.py runs/lever-s0 runs/lever-s1 --control runs/default-s0 runs/default-s1

Every folder must come from scripts/bench_learning.py and share one step-0 evaluation (the first folder's own,
the others made with `--share-start FIRST --rl-seed S`); a folder with its own warm-up or start is refused,
since its seeds would not be paired with the same model and samples. The control's folders share one start
too: the setting's, or one of their own when the setting changes the warm-up (then the two are compared by
their gains, each over its own start, on the same questions). Each folder's last evaluation is its final one
(`--step N` picks another). Prints a markdown table: per seed, final minus start paired by question; the seeds
pooled (per question, their mean minus the start); the spread between seeds; and with `--control`, the
setting's seed mean minus the control's (or gain minus gain), paired by question.
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


def _same(a: EvalPoint, b: EvalPoint) -> bool:
    """One step-0 evaluation (the same answers, question by question), whichever folder holds it."""
    return (a.greedy, a.sampled) == (b.greedy, b.sampled)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", type=Path, nargs="+", help="bench_learning.py folders of one setting, one per seed")
    p.add_argument("--control", type=Path, nargs="+", default=[], metavar="FOLDER",
                   help="folders of the control setting, from the setting's start or one shared start of their own")
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
    control_start = None
    for group in (args.folders, args.control):
        if not group:
            continue
        first = group[0]
        own = starts[first]
        assert own is not None
        if group is args.control and not _same(own, start):
            control_start = own
        for f in group:
            s = starts[f]
            if s is None or not _same(s, own):
                print(f"error: {f} has a step-0 evaluation of its own, not {first}'s; make it with "
                      f"--share-start {first} so its seed pairs with the same start", file=sys.stderr)
                return 2
    try:
        report = compare_seeds(start, {str(f): _final(BenchLayout(f), args.config, args.step) for f in args.folders},
                               {str(f): _final(BenchLayout(f), args.config, args.step) for f in args.control},
                               control_start=control_start)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render_seeds(report), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
