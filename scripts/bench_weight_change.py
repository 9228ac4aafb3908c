"""How far each learning-benchmark run moved the weights from its warm-up: the root of the summed squared change.

    python scripts/bench_weight_change.py runs/dev-lr1e5-ctl runs/dev-shuffled

A null control (rewards shuffled within groups) is only a control if it moves the weights about as far as the
update it is set against; with Adam the step's size barely depends on the gradient, and this checks it. For each
scripts/bench_learning.py folder: the configuration's last checkpoint against the warm-up model it started from
(`runs/<config>/sft`), over the tensors both hold; prints one markdown row per run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from matpo_graph.bench.learning_bench import BenchLayout


def weight_change(start: Path, end: Path) -> tuple[float, int]:
    """(L2 norm of end - start over the tensors both files hold, number of tensors that changed)."""
    from safetensors.torch import load_file

    before, after = load_file(str(start)), load_file(str(end))
    total, changed = 0.0, 0
    for name, value in after.items():
        if name in before:
            squared = float((value.float() - before[name].float()).pow(2).sum())
            total += squared
            changed += squared > 0
    return total**0.5, changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", type=Path, nargs="+", help="scripts/bench_learning.py output folders")
    p.add_argument("--config", default="deep_search-clean", help="configuration (default deep_search-clean)")
    args = p.parse_args(argv)
    lines = ["| run | checkpoint | weight change (L2) | tensors changed |", "|---|---|---|---|"]
    for folder in args.folders:
        run = BenchLayout(folder).run(args.config)
        checkpoints = sorted(run.glob("checkpoints/step_*/model.safetensors"))
        start = run / "sft" / "model" / "model.safetensors"
        if not checkpoints or not start.is_file():
            print(f"error: {run} needs a checkpoint and its warm-up model ({start})", file=sys.stderr)
            return 2
        norm, changed = weight_change(start, checkpoints[-1])
        lines.append(f"| {folder} | {checkpoints[-1].parent.name} | {norm:.4f} | {changed} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
