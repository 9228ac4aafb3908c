"""`matpo-graph data to-parquet` (QA file -> veRL parquet) and `matpo-graph data show`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["load_questions", "register"]

EMBEDDED_PREFIX = "embedded:"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("data", help="convert QA data for veRL and look at it")
    verbs = p.add_subparsers(dest="data_verb", metavar="DATA_VERB")
    verbs.required = True

    t = verbs.add_parser(
        "to-parquet",
        help="write a QA file as veRL's RL parquet (prompt, data_source, reward_model, extra_info, agent_name)",
        description=(
            "Convert a QA file (JSONL or parquet with question/answers) into the parquet veRL's RLHFDataset reads, "
            "with every row routed to the MATPO agent loop. FILE may also be embedded:train, embedded:dev or "
            "embedded:test for a split of the embedded web's questions."
        ),
    )
    t.add_argument("file", help="QA file, or embedded:SPLIT")
    t.add_argument("--graph", required=True, help="graph YAML or compiled folder (names the data source)")
    t.add_argument("-o", "--out", "--output", dest="output", required=True, type=Path, help="parquet file to write")
    t.add_argument("--limit", type=int, help="keep only the first N questions")
    t.add_argument("--env-seed", type=int, default=0, help="seed of the embedded web world (embedded:SPLIT only)")
    t.set_defaults(func=_to_parquet)

    s = verbs.add_parser("show", help="print the first rows of a QA file or veRL parquet")
    s.add_argument("file", type=Path)
    s.add_argument("-n", type=int, default=3, help="rows to print")
    s.set_defaults(func=_show)


def load_questions(spec: str, *, env_seed: int = 0) -> list[Any]:
    """QA items from a file, or from a split of the embedded web (``embedded:train``).

    Raises:
        ValueError: unknown split or unreadable file.
    """
    if not spec.startswith(EMBEDDED_PREFIX):
        from matpo_graph.verl_target.dataset import load_qa_records

        return load_qa_records(spec)
    split = spec[len(EMBEDDED_PREFIX):]
    if split not in ("train", "dev", "test"):
        raise ValueError(f"unknown embedded split {split!r}: expected embedded:train, embedded:dev or embedded:test")
    from matpo_graph.env.world import build_world

    return list(build_world(env_seed).questions[split])


def _to_parquet(args: argparse.Namespace) -> int:
    from matpo_graph.compilers.local import load_program
    from matpo_graph.core.errors import GraphError
    from matpo_graph.verl_target.dataset import write_parquet

    try:
        program, _ = load_program(args.graph)
    except GraphError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    try:
        items = load_questions(args.file, env_seed=args.env_seed)
        if args.limit is not None:
            items = items[: args.limit]
        n = write_parquet(items, args.output, graph_name=program.graph_name)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} rows to {args.output}")
    return 0


def _show(args: argparse.Namespace) -> int:
    import json

    path: Path = args.file
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).slice(0, args.n).to_pylist()
        else:
            from matpo_graph.verl_target.dataset import load_qa_records

            rows = load_qa_records(path)[: args.n]
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for row in rows:
        print(json.dumps(row, ensure_ascii=False, indent=2, default=str))
    return 0
