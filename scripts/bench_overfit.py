"""Learning sanity check: can RL push training accuracy up on a handful of questions the policy half-knows?

Before asking whether RL improves held-out accuracy, ask whether it can overfit at all. The check:

1. a warm-up model (`matpo-graph sft`, or `--warmup MODEL_DIR` to reuse one),
2. screening: greedy + `--samples` answers to `--screen` training questions of the embedded web with at most
   `--max-hops` hops (the trainer's own filter, 2); the questions it gets right on some answers but not all are
   kept (at most `--keep`, those nearest half right first),
3. RL on exactly those questions, once per variant (by default today's update and a stronger one), with the
   same seed and question order; training accuracy of every step is read from each run's metrics.

    python scripts/bench_overfit.py --warmup runs/deep_search/sft/model      # reuse a warm-up
    python scripts/bench_overfit.py --steps 8 --variants today strong          # the default comparison
    python scripts/bench_overfit.py --report-only                              # rewrite overfit.md
    python scripts/bench_overfit.py --out runs/overfit-varied --warmup-variety 0.5 --screen 24 --screen-only

The screen also says how much the warm-up left to explore: questions always right, never right and mixed,
and the mean negative log-probability of the sampled answers' generated tokens (an estimate of the policy's
entropy per token at the rollout temperature, from the engine's own log-probabilities).

Every finished piece is found from its files and not redone; the same command continues after an interrupt.
Outputs in OUT (default runs/overfit): screen.json, questions.jsonl, runs/<variant>/, overfit.md.
A training-accuracy point is the mean over its step's trees (questions x G), so with 3 questions x G=4 each
point has a standard error near 0.14: read the curve, not one step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRAPH = ROOT / "graphs" / "deep_search.yaml"

# name -> (what it is, train key=value settings, the graph's credit section changed)
VARIANTS: dict[str, tuple[str, list[str], dict[str, str]]] = {
    "today": ("one AdamW step per RL step at lr 2e-6 (the trainer's defaults)", ["lr=2e-06"], {}),
    "strong": ("lr 2e-5, two mini-batches per RL step, two PPO epochs",
               ["lr=2e-05", "optimizer_steps_per_rl_step=2", "ppo_epochs=2"], {}),
    "strong-meanonly": ("as strong, advantages without the std division (Dr. GRPO)",
                        ["lr=2e-05", "optimizer_steps_per_rl_step=2", "ppo_epochs=2"], {"normalization": "mean_only"}),
}


def _graph(out: Path, credit: dict[str, str]) -> Path:
    """The default graph, or a self-contained copy of it with its credit section changed."""
    if not credit:
        return GRAPH
    from matpo_graph.compilers.local import normalised_graph_yaml
    from matpo_graph.core.loader import load_graph

    graph = load_graph(GRAPH)
    graph = graph.model_copy(update={"credit": graph.credit.model_copy(update=credit)})
    path = out / "graphs" / ("_".join(f"{k}-{v}" for k, v in sorted(credit.items())) + ".yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(normalised_graph_yaml(graph, GRAPH.parent))
    load_graph(path)  # the copy must load on its own
    return path


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "matpo_graph", *args]


def _run(cmd: list[str], log: Path) -> float:
    t0 = time.perf_counter()
    with log.open("a", encoding="utf-8") as sink:
        sink.write("$ " + " ".join(cmd) + "\n")
        sink.flush()
        subprocess.run(cmd, check=True, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT)
    return time.perf_counter() - t0


def _train_questions(path: Path, n: int, max_hops: int) -> None:
    """The first `n` training questions of the embedded web the trainer serves (its default seed and size) with at
    most `max_hops` hops: the trainer's own filter, so the screen sees the questions RL would see."""
    from matpo_graph.env.questions import within_hops
    from matpo_graph.env.world import build_world
    from matpo_graph.rl.config import TrainConfig

    cfg = TrainConfig()
    pool = build_world(cfg.env_seed, n_entities=cfg.env_entities).questions["train"]
    items = within_hops(pool, max_hops)[:n]
    path.write_text("".join(item.model_dump_json() + "\n" for item in items), encoding="utf-8")


def _per_question(trees_file: Path) -> dict[str, list[float]]:
    from matpo_graph.core.rollout import read_trees

    out: dict[str, list[float]] = defaultdict(list)
    for tree in read_trees(trees_file):
        if tree.reward is not None:
            out[str(tree.metadata.get("question_id", tree.group_id))].append(float(tree.reward.accuracy))
    return dict(out)


def screen(args: argparse.Namespace, warmup: Path, log: Path) -> list[str]:
    """Question ids the warm-up model answers right sometimes, not always (cached in screen.json)."""
    cached = args.out / "screen.json"
    if cached.exists():
        return json.loads(cached.read_text())["kept"]
    pool = args.out / "pool.jsonl"
    _train_questions(pool, args.screen, args.max_hops)
    trees = args.out / "screen_trees.jsonl"
    seconds = _run(_cli("eval", str(warmup), "--graph", str(GRAPH), "--data", str(pool), "--n", str(args.screen),
                        "--samples", str(args.samples), "-o", str(trees)), log)
    scores = _per_question(trees)
    mixed = sorted((q for q, s in scores.items() if 0 < sum(s) < len(s)), key=lambda q: abs(statistics.fmean(scores[q]) - 0.5))
    kept = sorted(mixed[: args.keep])
    cached.write_text(json.dumps({"kept": kept, "scores": scores, "seconds": seconds, "max_hops": args.max_hops}, indent=2))
    items = [json.loads(line) for line in pool.read_text().splitlines()]
    (args.out / "questions.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items if i["id"] in kept))
    return kept


def train(args: argparse.Namespace, variant: str, warmup: Path, log: Path) -> Path:
    run = args.out / "runs" / variant
    data = args.out / "questions.jsonl"
    n = sum(1 for _ in data.open())
    if (run / "checkpoints" / f"step_{args.steps:06d}").exists():
        return run
    _, settings, credit = VARIANTS[variant]
    _run(_cli("train", str(_graph(args.out, credit)), "--out", str(run), "--steps", str(args.steps), "--resume", "--seed", str(args.seed),
              "--questions-per-step", str(n), "--eval-questions", "0", "--time-budget", "0", "--warmstart", "none",
              f"model={warmup}", f"data={data}", "keep_checkpoints=1", *settings), log)
    return run


def heldout(args: argparse.Namespace, name: str, target: list[str], log: Path, overrides: tuple[str, ...] = ()) -> Path:
    """Greedy + samples on the first `--heldout` dev questions (the trainer's held-out split, paired seeds)."""
    trees = args.out / "heldout" / f"{name}.jsonl"
    if not trees.exists():
        trees.parent.mkdir(parents=True, exist_ok=True)
        partial = trees.with_suffix(".partial.jsonl")
        _run(_cli("eval", *target, "--n", str(args.heldout), "--samples", str(args.heldout_samples), "-o", str(partial), *overrides), log)
        partial.rename(trees)
    return trees


def _heldout_section(out: Path, variants: list[str]) -> list[str]:
    """Each variant's final policy against the warm-up on the same held-out questions, paired by question."""
    from matpo_graph.bench.learning_bench import summarise_eval
    from matpo_graph.core.rollout import read_trees
    from matpo_graph.tracking.stats import mean_interval, paired_difference

    folder = out / "heldout"
    if not (folder / "warmup.jsonl").exists():
        return []
    points = {}
    for name in ["warmup", *variants]:
        trees = list(read_trees(folder / f"{name}.jsonl")) if (folder / f"{name}.jsonl").exists() else []
        if trees:
            samples = sum(1 for t in trees if not t.tree_id.startswith("eg")) // max(1, sum(1 for t in trees if t.tree_id.startswith("eg")))
            points[name] = summarise_eval(trees, config=name, step=0, samples=samples, seconds=0.0)
    base = points["warmup"]

    def cell(values: dict[str, float]) -> str:
        iv = mean_interval(list(values.values()))
        return f"{iv.estimate:.3f} ± {iv.se:.3f}"

    def diff(after: dict[str, float], before: dict[str, float]) -> str:
        iv = paired_difference(after, before)
        return f"{iv.estimate:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]"

    lines = ["", f"Held-out check: the first {len(base.questions)} dev questions (1-2 hops), greedy + {base.samples} "
             "samples at temperature 0.7, seeded and paired by question; difference = policy minus warm-up, 95% t interval.",
             "", "| policy | greedy | sampled | greedy minus warm-up | sampled minus warm-up | greedy answers won / lost |",
             "|---|---|---|---|---|---|"]
    for name, point in points.items():
        if name == "warmup":
            lines.append(f"| warm-up | {cell(point.greedy)} | {cell(point.sampled)} | | | |")
            continue
        won = sum(1 for q in point.greedy if point.greedy[q] > base.greedy.get(q, 0.0))
        lost = sum(1 for q in point.greedy if point.greedy[q] < base.greedy.get(q, 0.0))
        lines.append(f"| {name}, step {_last_step(out, name)} | {cell(point.greedy)} | {cell(point.sampled)} | "
                     f"{diff(point.greedy, base.greedy)} | {diff(point.sampled, base.sampled)} | {won} / {lost} |")
    return lines


def _last_step(out: Path, variant: str) -> int:
    checkpoints = sorted((out / "runs" / variant / "checkpoints").glob("step_*"))
    return int(checkpoints[-1].name.split("_")[1]) if checkpoints else 0


def _accuracy_by_step(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [float(r["matpo/reward/accuracy"]) for r in rows if "matpo/reward/accuracy" in r and "step" in r]


def screen_summary(out: Path) -> dict[str, float]:
    """Always right / never right / mixed questions of the screen, and the sampled tokens' mean -logprob."""
    scores = json.loads((out / "screen.json").read_text())["scores"]
    nll, tokens = 0.0, 0
    for line in (out / "screen_trees.jsonl").read_text().splitlines():
        tree = json.loads(line)
        if not tree["tree_id"].startswith("es"):  # sampled trees only (eg: greedy)
            continue
        for traj in tree["trajectories"]:
            for lp, m in zip(traj.get("logprobs") or [], traj["loss_mask"]):
                if m:
                    nll, tokens = nll - lp, tokens + 1
    return {"questions": len(scores), "always": sum(1 for s in scores.values() if sum(s) == len(s)),
            "never": sum(1 for s in scores.values() if sum(s) == 0),
            "mixed": sum(1 for s in scores.values() if 0 < sum(s) < len(s)),
            "sampled_nll_per_token": nll / max(tokens, 1), "sampled_tokens": tokens}


def report(args: argparse.Namespace) -> Path:
    screen_data = json.loads((args.out / "screen.json").read_text())
    summary = screen_summary(args.out)
    curves = {v: _accuracy_by_step(args.out / "runs" / v) for v in args.variants if (args.out / "runs" / v / "metrics.jsonl").exists()}
    steps = max((len(c) for c in curves.values()), default=0)
    lines = [f"# Overfit check ({time.strftime('%Y-%m-%d')})", "",
             f"Screened {len(screen_data['scores'])} training questions of at most {screen_data.get('max_hops', 4)} hops "
             f"with greedy + {args.samples} samples; kept "
             f"{len(screen_data['kept'])} answered right sometimes but not always: {', '.join(screen_data['kept'])}.",
             f"Warm-up (variety {args.warmup_variety:g}): {summary['always']} always right, {summary['never']} never right, "
             f"{summary['mixed']} mixed; sampled tokens' mean -logprob {summary['sampled_nll_per_token']:.4f} nats "
             f"over {summary['sampled_tokens']} tokens.", "",
             "| variant | what | " + " | ".join(f"step {i + 1}" for i in range(steps)) + " | mean of the last half |",
             "|---|---|" + "---|" * steps + "---|"]
    for variant, curve in curves.items():
        tail = curve[len(curve) // 2:] or curve
        cells = " | ".join(f"{a:.2f}" for a in curve) + " | " * (steps - len(curve))
        lines.append(f"| {variant} | {VARIANTS[variant][0]} | {cells} | {statistics.fmean(tail):.2f} |" if tail else
                     f"| {variant} | {VARIANTS[variant][0]} | (no step yet) |")
    lines += _per_question_section(args.out, list(curves))
    lines += _heldout_section(args.out, list(curves))
    out = args.out / "overfit.md"
    out.write_text("\n".join(lines) + "\n")
    return out


def _per_question_section(out: Path, variants: list[str]) -> list[str]:
    """Each kept question's trees per step as strings of 1 (right) and 0, so one saturating question shows."""
    per: dict[str, dict[str, list[str]]] = {}
    for variant in variants:
        for step_file in sorted((out / "runs" / variant / "rollouts").glob("step_*.jsonl")):
            for question, scores in _per_question(step_file).items():
                cells = per.setdefault(question, {}).setdefault(variant, [])
                cells.append("".join("1" if s >= 1.0 else "0" for s in scores))
    if not per:
        return []
    lines = ["", "Per question (each string: one step's trees, 1 = right), step 1 onwards:", "",
             "| question | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
    for question in sorted(per):
        lines.append(f"| {question} | " + " | ".join(" ".join(per[question].get(v, [])) for v in variants) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/overfit"))
    p.add_argument("--warmup", type=Path, help="a warm-up model folder to reuse (default: warm up into OUT/warmup)")
    p.add_argument("--screen", type=int, default=16, help="training questions screened (default 16)")
    p.add_argument("--samples", type=int, default=4, help="sampled answers per screened question, besides greedy (default 4)")
    p.add_argument("--max-hops", type=int, default=2,
                   help="screen only questions of at most this many hops (default 2, the trainer's max_hops; 4: all)")
    p.add_argument("--keep", type=int, default=3, help="screened questions RL trains on (default 3)")
    p.add_argument("--steps", type=int, default=8, help="RL steps per variant (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", nargs="+", default=["today", "strong"], choices=sorted(VARIANTS))
    p.add_argument("--warmup-variety", type=float, default=0.0, metavar="P",
                   help="the warm-up expert's variety (matpo-graph sft --variety; default 0)")
    p.add_argument("--heldout", type=int, default=0, metavar="N",
                   help="afterwards, evaluate the warm-up and each variant's last step on the first N dev questions "
                        "(default 0: no held-out check); overfitting a handful of questions can cost held-out accuracy")
    p.add_argument("--heldout-samples", type=int, default=2, help="sampled answers per held-out question (default 2)")
    p.add_argument("--screen-only", action="store_true", help="stop after the screen (warm-up and screen summary)")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        print(report(args).read_text())
        return 0
    log = args.out / "log.txt"
    warmup = args.warmup
    if warmup is None:
        warmup = args.out / "warmup" / "model"
        if not (warmup / "config.json").exists():
            _run(_cli("sft", str(GRAPH), "--out", str(args.out / "warmup"), "--seed", str(args.seed),
                      "--variety", str(args.warmup_variety), "--quiet"), log)
    kept = screen(args, warmup.resolve(), log)
    print(f"screened: kept {len(kept)} questions: {', '.join(kept)}; {json.dumps(screen_summary(args.out))}", flush=True)
    if args.screen_only:
        print(report(args).read_text())
        return 0
    if not kept:
        print("no question is answered right on some samples and wrong on others; screen more (--screen)")
        return 1
    for variant in args.variants:
        t0 = time.perf_counter()
        train(args, variant, warmup.resolve(), log)
        print(f"{variant}: {args.steps} steps in {time.perf_counter() - t0:.0f}s", flush=True)
        report(args)
    if args.heldout:
        heldout(args, "warmup", [str(warmup.resolve()), "--graph", str(GRAPH)], log, (f"seed={args.seed}",))
        for variant in args.variants:
            heldout(args, variant, [str(args.out / "runs" / variant), "--step", str(args.steps)], log)
            report(args)
    print(report(args).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
