"""`matpo-graph` command line: each verb group lives in its own module with a `register(subparsers)`.

Verb modules are imported only to register their arguments; heavy engines are imported inside the
command functions, so `matpo-graph --help` and `validate` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]

# Module names under matpo_graph.cli, in the order their verbs appear in --help.
VERB_MODULES: tuple[str, ...] = (
    "graph_verbs",  # validate, schema, render, compile
    "rollout_verbs",  # rollout
    "env_verbs",  # env serve / env build
    "credit_verbs",  # credit
    "train_verbs",  # train, eval, report
    "export_verbs",  # export
    "sft_verbs",  # sft, demos
    "data_verbs",  # data to-parquet, data show
    "viz_verbs",  # viz, show
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="matpo-graph",
        description="Declarative multi-agent graphs compiled to MATPO reinforcement learning.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for name in VERB_MODULES:
        try:
            module = importlib.import_module(f"matpo_graph.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"matpo_graph.cli.{name}":
                continue
            raise
        module.register(sub)
    from matpo_graph.cli.trust_options import add_trust_options  # noqa: PLC0415

    add_trust_options(parser)  # every verb that reads a graph takes the same trust options
    return parser


class _StdoutLines(logging.StreamHandler):  # type: ignore[type-arg]
    """Message-only lines on whatever sys.stdout is when a record arrives (callers and tests swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)


def _show_library_messages() -> None:
    """The library reports progress through `logging` (it never prints); the CLI shows those lines as they are."""
    logger = logging.getLogger("matpo_graph")
    if not any(isinstance(h, _StdoutLines) for h in logger.handlers):
        handler = _StdoutLines()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    from matpo_graph.cli.overrides import parse_command_line

    _show_library_messages()
    parser = build_parser()
    args = parse_command_line(parser, argv)  # key=value items may stand anywhere on the line
    from matpo_graph.cli.trust_options import apply_trust_options  # noqa: PLC0415

    trust = apply_trust_options(args)  # what the graph may do: the user's trust options, never the graph's
    try:
        trust.__enter__()
    except ValueError as exc:
        parser.error(str(exc))
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        trust.__exit__(None, None, None)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
