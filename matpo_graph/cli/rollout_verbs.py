"""`matpo-graph rollout`: one multi-agent rollout of a graph for one question, drawn as a tree."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from matpo_graph.runtime.policy import DEFAULT_TEMPERATURE

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "rollout",
        help="run one multi-agent rollout of a graph and draw its tree",
        description=(
            "Run GRAPH (a graph YAML or a compiled folder) once on QUESTION with one shared policy and print "
            "the rollout tree: roles, calls, termination reasons and token counts. Tools that point at "
            "`endpoint: embedded` get the embedded web, started automatically."
        ),
    )
    p.add_argument("graph", help="graph YAML file or compiled folder")
    p.add_argument("--question", "-q", required=True, help="the question for the root role")
    p.add_argument(
        "--answer", action="append", default=[], help="a gold answer (repeatable); adds the reward to the output"
    )
    p.add_argument("--policy", default="vllm", help="vllm | hf | openai:URL | scripted:FILE (default vllm)")
    p.add_argument(
        "--model", default=None, help="embedded model name, local HF folder or Hub id org/name from the local cache (default smollm2-135m-instruct)"
    )
    p.add_argument("--seed", type=int, default=None, help="sampling seed (and the embedded web's seed)")
    p.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                   help=f"sampling temperature (default {DEFAULT_TEMPERATURE}, as in train and eval; roles may override)")
    p.add_argument("--kv-cache-gib", type=float, default=2.0, help="vLLM CPU KV cache size in GiB")
    p.add_argument("-o", "--out", "--output", dest="output", type=Path,
                   help="write the tree here (one JSON line, readable by read_trees)")
    p.set_defaults(func=_rollout)


def _rollout(args: argparse.Namespace) -> int:
    from rich.console import Console

    from matpo_graph.compilers.local import load_program
    from matpo_graph.core.errors import GraphError

    console = Console(stderr=False)
    try:
        program, plan = load_program(args.graph)
    except GraphError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    from matpo_graph.runtime.models import ModelError, resolve_model

    try:
        model_dir = resolve_model(args.model)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        tree = asyncio.run(_run(args, program, model_dir))
    except (ValueError, OSError) as exc:  # bad policy spec, unreadable script, setup errors
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.answer:
        from matpo_graph.core.reward import score_tree, with_reward

        tree = with_reward(tree, score_tree(tree, plan))
    from matpo_graph.runtime.tree_view import rollout_tree_view

    console.print(rollout_tree_view(tree))
    if args.output:
        from matpo_graph.core.rollout import write_trees

        args.output.parent.mkdir(parents=True, exist_ok=True)
        write_trees(args.output, [tree])
        console.print(f"wrote {args.output}")
    return 0


async def _run(args: argparse.Namespace, program: Any, model_dir: Path) -> Any:
    from matpo_graph.core.policies import uses_per_role_policies
    from matpo_graph.runtime.chat import ChatTokenizer
    from matpo_graph.runtime.executor import Executor
    from matpo_graph.runtime.policies import make_policy
    from matpo_graph.runtime.policy import SamplingParams
    from matpo_graph.tools.registry import build_tools

    web = None
    if program.uses_embedded_web():
        from matpo_graph.env.server import serve_in_thread

        web = serve_in_thread(seed=args.seed or 0)
    policy = None
    engines = None
    tools = None
    try:
        tools = build_tools(program.tools, embedded_url=web.url if web else None)
        chat = ChatTokenizer.from_pretrained(model_dir)
        kwargs: dict[str, Any] = {}
        if args.policy == "vllm":
            kwargs = {
                "kv_cache_gib": args.kv_cache_gib,
                "max_model_len": program.context_tokens + 512,
                "seed": args.seed or 0,
            }
        elif args.policy.startswith("scripted:"):
            kwargs = {"tokenizer": chat}
        if uses_per_role_policies(program):  # lora or separate policies: each role on its own
            if args.policy != "vllm":
                raise ValueError(f"the graph binds roles to lora or separate policies, which vLLM serves; --policy "
                                 f"{args.policy} would play every role with one model")
            from matpo_graph.runtime.policies.per_role import PerRoleEngines

            engines = PerRoleEngines(program, model_dir, **kwargs)
            policy = engines.router
        else:
            policy = make_policy(args.policy, model_dir, **kwargs)
        executor = Executor(program, policy, chat, tools, sampling=SamplingParams(temperature=args.temperature))
        return await executor.run(args.question, tree_id="rollout", answers=args.answer, seed=args.seed)
    finally:
        if tools is not None and hasattr(tools, "aclose"):
            await tools.aclose()
        if engines is not None:
            engines.shutdown()
        for closer in ("aclose", "shutdown"):
            fn = getattr(policy, closer, None)
            if fn is not None:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
        if web is not None:
            web.stop()
