"""`matpo-graph env serve|export`: run the embedded deterministic web, or write it to disk."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]


def _add_world_args(p: argparse.ArgumentParser) -> None:
    from matpo_graph.env.world import DEFAULT_ENTITIES, DEFAULT_QUESTIONS

    p.add_argument("--seed", type=int, default=0, help="world seed (same seed, same world)")
    p.add_argument("--entities", type=int, default=DEFAULT_ENTITIES, help="number of entities/pages")
    p.add_argument("--questions", type=int, default=DEFAULT_QUESTIONS, help="questions over train/dev/test")


def register(subparsers: Any) -> None:
    env = subparsers.add_parser("env", help="the embedded deterministic web (search, pages, questions)")
    sub = env.add_subparsers(dest="env_verb", metavar="ENV_VERB")
    sub.required = True

    serve = sub.add_parser("serve", help="serve the embedded web over HTTP until interrupted")
    _add_world_args(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (0 picks a free one)")
    serve.add_argument("--noise", default=None,
                       help="noise: none | light | paper (alias noisy) | heavy | 'key=value,...' (keys: error, rate_limit, "
                            "retry_after_s, slow, slow_s, empty, irrelevant, truncate, truncate_min)")
    serve.set_defaults(func=_serve)

    export = sub.add_parser("export", help="write pages, entities and question splits (JSONL) to a folder")
    _add_world_args(export)
    export.add_argument("-o", "--out", "--output", dest="out", required=True, help="output folder")
    export.add_argument("--no-pages", action="store_true", help="skip the HTML pages (questions and facts only)")
    export.set_defaults(func=_export)


def _serve(args: argparse.Namespace) -> int:
    from matpo_graph.env.noise import NoiseConfig
    from matpo_graph.env.server import serve_forever

    try:
        noise = NoiseConfig.parse(args.noise)
    except ValueError as exc:
        print(f"error: --noise: {exc}", file=sys.stderr)
        return 2

    def ready(url: str) -> None:
        print(f"embedded web (seed {args.seed}, {args.entities} entities) at {url}", flush=True)
        print(f"  search: curl -s -X POST {url}/search -H 'content-type: application/json' -d '{{\"q\": \"...\"}}'",
              flush=True)

    try:
        serve_forever(args.seed, args.port, args.entities, noise, n_questions=args.questions, host=args.host,
                      on_ready=ready)
    except OSError as exc:
        print(f"error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


def _export(args: argparse.Namespace) -> int:
    from matpo_graph.env.export import export_world
    from matpo_graph.env.world import build_world

    try:
        world = build_world(args.seed, n_entities=args.entities, n_questions=args.questions)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    manifest = export_world(world, args.out, pages=not args.no_pages)
    counts = ", ".join(f"{k} {v}" for k, v in manifest["questions"].items())
    print(f"wrote {manifest['pages']} pages, {manifest['entities']} entities, questions: {counts} -> {args.out}")
    return 0
