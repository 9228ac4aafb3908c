"""`matpo-graph sft` (supervised warm-up on expert demonstrations) and `matpo-graph demos` (write them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from matpo_graph.coldstart.defaults import WARMUP_DEMOS, WARMUP_DRILLS, WARMUP_EPOCHS, WARMUP_LR

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser(
        "sft",
        help="cold start: supervised warm-up on expert demonstrations",
        description=(
            "Make full-reward expert demonstrations of GRAPH on the embedded web's train split (through the real "
            "executor and tools) and train the model on the generated tokens of every role. Writes "
            "RUN_DIR/demos.jsonl, RUN_DIR/metrics_sft.jsonl and RUN_DIR/model (a HF model folder that "
            "`matpo-graph train --model RUN_DIR/model` or the RL warm start uses)."
        ),
    )
    s.add_argument("graph", help="graph YAML or compiled folder")
    s.add_argument("-o", "--out", "--output", dest="out", type=Path, required=True, help="run folder for demos, metrics and the checkpoint")
    s.add_argument("--demos", type=int, default=WARMUP_DEMOS, help=f"demonstrations to train on (default {WARMUP_DEMOS})")
    s.add_argument("--drills", type=int, default=WARMUP_DRILLS,
                   help=f"further demonstrations of which only each trajectory's first turn is trained (default {WARMUP_DRILLS})")
    s.add_argument("--max-trained-tokens", type=int, default=None, metavar="N",
                   help="cap the warm-up at N trained tokens, demonstrations and drills taken in their requested proportion "
                        "(equal budgets for graphs whose demonstrations differ in length; ask for enough of both)")
    s.add_argument("--epochs", type=int, default=WARMUP_EPOCHS, help=f"passes over the demonstrations (default {WARMUP_EPOCHS})")
    s.add_argument("--lr", type=float, default=WARMUP_LR, help=f"peak AdamW learning rate (default {WARMUP_LR:g})")
    s.add_argument("--model", default="smollm2-135m-instruct", help="embedded model name, HF model folder or cached Hub id org/name")
    s.add_argument("--train-layers", type=int, default=None,
                   help="decoder layers trained, counted from the top; 0 trains all (default 10)")
    s.add_argument("--batch-size", type=int, default=None, help="trajectories per optimizer step (default 4)")
    s.add_argument("--precision", choices=("auto", "bf16", "fp32"), default=None,
                   help="matmul precision of the training passes (default auto: bf16 where the CPU has native bf16)")
    s.add_argument("--max-seconds", type=float, default=None, help="stop training after this long (checkpoint still written)")
    s.add_argument("--from-demos", type=Path, help="train on these demonstrations (JSONL) instead of making new ones")
    s.add_argument("--variety", type=float, default=0.0, metavar="P",
                   help="how often the expert departs from its canonical wording, first query, page read and lookup "
                        "order, 0-1 (default 0: one fixed way per question)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--env-seed", type=int, default=0, help="seed of the embedded web world")
    s.add_argument("--env-entities", type=int, default=400, help="entities of the embedded web world")
    s.add_argument("--max-hops", type=int, default=2, help="longest question chain to demonstrate")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=_sft)

    d = sub.add_parser(
        "demos",
        help="write expert demonstrations (rollout trees) of a graph",
        description="Run the expert demonstrator on embedded-web questions and write the full-reward trees as JSONL.",
    )
    d.add_argument("graph", help="graph YAML or compiled folder")
    d.add_argument("-n", type=int, default=16, help="demonstrations to write (default 16)")
    d.add_argument("-o", "--out", "--output", dest="output", type=Path, required=True, help="JSONL file for the trees")
    d.add_argument("--split", choices=["train", "dev", "test"], default="train")
    d.add_argument("--all", action="store_true", help="also write trees that did not earn the full reward")
    d.add_argument("--model", default="smollm2-135m-instruct", help="model whose tokenizer the trees use")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--env-seed", type=int, default=0)
    d.add_argument("--env-entities", type=int, default=400)
    d.add_argument("--max-hops", type=int, default=None, help="longest question chain (default: all)")
    d.set_defaults(func=_demos)


def _load(graph: str) -> tuple[Any, Any] | None:
    from matpo_graph.compilers.local import load_program
    from matpo_graph.core.errors import GraphError

    try:
        return load_program(graph)
    except (GraphError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _sft(args: argparse.Namespace) -> int:
    from matpo_graph.coldstart.expert_plan import ExpertUnsupported
    from matpo_graph.coldstart.sft import run_sft
    from matpo_graph.core.rollout import read_trees
    from matpo_graph.runtime.models import ModelError, resolve_model

    loaded = _load(args.graph)
    if loaded is None:
        return 2
    program, plan = loaded
    try:
        model_dir = resolve_model(args.model)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    extra = {k: v for k, v in {"train_layers": args.train_layers, "batch_size": args.batch_size,
                                 "max_seconds": args.max_seconds, "precision": args.precision}.items() if v is not None}
    try:
        trees = read_trees(args.from_demos) if args.from_demos else None
        path = run_sft(program, plan, model_dir=model_dir, out_dir=args.out, demos=args.demos, drills=args.drills, epochs=args.epochs,
                       lr=args.lr, seed=args.seed, env_seed=args.env_seed, env_entities=args.env_entities,
                       max_hops=args.max_hops, trees=trees, progress=not args.quiet,
                       max_trained_tokens=args.max_trained_tokens, variety=args.variety, **extra)
    except ExpertUnsupported as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"checkpoint: {path}")
    print(f"metrics: {Path(args.out) / 'metrics_sft.jsonl'}")
    return 0


def _demos(args: argparse.Namespace) -> int:
    from matpo_graph.coldstart.demonstrations import make_demos
    from matpo_graph.coldstart.expert_plan import ExpertUnsupported
    from matpo_graph.core.rollout import write_trees
    from matpo_graph.runtime.models import ModelError, resolve_model

    loaded = _load(args.graph)
    if loaded is None:
        return 2
    program, plan = loaded
    try:
        batch = make_demos(program, plan, n=args.n, model_dir=resolve_model(args.model), seed=args.seed,
                           env_seed=args.env_seed, env_entities=args.env_entities, max_hops=args.max_hops,
                           split=args.split, keep_all=args.all)
    except (ExpertUnsupported, ModelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    n = write_trees(args.output, batch.trees)
    print(f"wrote {n} trees to {args.output}: {batch.describe()}")
    return 0 if n else 1
