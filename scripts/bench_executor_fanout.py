"""Benchmark: concurrent fan-out of delegated calls in the executor.

A group of G root rollouts runs at once; each root delegates K subtasks in its first turn, each worker
calls one tool and then reports, and the root then answers. Every policy call takes a fixed latency L
(scripted policy) and every tool call a fixed latency T, so the critical path of one tree is
``root turn + worker turn + tool + worker turn + root turn = 4L + T``. Printed: the group's wall time
against that critical path (target <= 1.15x), and against the same group with the delegated calls run
one after another (edge max_parallel 1; target >= 3x faster).

Usage: python scripts/bench_executor_fanout.py [--group 8] [--subtasks 4] [--latency 0.1] [--tool-latency 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time
import uuid
from typing import Any

from matpo_graph.core.program import CallableView, Program, RoleProgram, TemplateSource
from matpo_graph.core.templates import DEFAULT_CHILD_USER, DEFAULT_ROOT_USER, DEFAULT_SUMMARY
from matpo_graph.core.toolcalls import format_tool_call
from matpo_graph.runtime.chat import ChatTokenizer
from matpo_graph.runtime.executor import Executor
from matpo_graph.runtime.models import resolve_model
from matpo_graph.runtime.policies.scripted import ScriptedPolicy, ScriptRequest
from matpo_graph.tools.base import ToolResult


def _tpl(source: str) -> TemplateSource:
    return TemplateSource(source=source, origin="inline", sha256=hashlib.sha256(source.encode()).hexdigest())


def build_program(subtasks: int, max_parallel: int) -> Program:
    search = CallableView(
        name="web_search",
        description="Search.",
        kind="tool",
        target="web_search",
        parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        max_parallel=64,
    )
    edge = CallableView(
        name="delegate",
        description="Delegate one lookup.",
        kind="child",
        target="worker",
        parameters={"type": "object", "properties": {"subtask": {"type": "string"}}, "required": ["subtask"]},
        max_parallel=max_parallel,
    )
    system = _tpl("You are the {{ role }}.\n{{ tool_instructions }}\n{{ answer_instructions }}")
    roles = {
        "planner": RoleProgram(
            name="planner",
            system=system,
            user=_tpl(DEFAULT_ROOT_USER),
            summary=_tpl(DEFAULT_SUMMARY),
            callables=[edge],
            max_turns=4,
            max_tokens_per_turn=512,
            final_summary="never",
        ),
        "worker": RoleProgram(
            name="worker",
            system=system,
            user=_tpl(DEFAULT_CHILD_USER),
            summary=_tpl(DEFAULT_SUMMARY),
            callables=[search],
            max_turns=4,
            max_tokens_per_turn=256,
            final_summary="never",
        ),
    }
    return Program(
        graph_name="bench_fanout",
        graph_sha256="0" * 64,
        root="planner",
        tool_call_format="hermes",
        answer_format="boxed",
        roles=roles,
        tools={},
        max_depth=2,
        context_tokens=8192,
        summary_reserve=256,
        max_concurrency=1024,
    )


class SlowTool:
    name = "web_search"

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        await asyncio.sleep(self.latency_s)
        return ToolResult(text=f"A page about {arguments.get('query')}.", seconds=self.latency_s)


def script(subtasks: int, nonce: str):
    def reply(req: ScriptRequest) -> str:
        ctx = req.context
        assert ctx is not None
        if ctx.role == "planner":
            if ctx.turn == 0:
                return "\n".join(
                    format_tool_call("delegate", {"subtask": f"lookup {i} for {ctx.tree_id} ({nonce})"}, "hermes")
                    for i in range(subtasks)
                )
            return "\\boxed{done}"
        if ctx.turn == 0:
            return format_tool_call("web_search", {"query": ctx.task.get("subtask", "")}, "hermes")
        return f"Report on {ctx.task.get('subtask')}: found it."

    return reply


async def run_group(
    chat: ChatTokenizer, group: int, subtasks: int, latency: float, tool_latency: float, max_parallel: int
) -> tuple[float, int]:
    # A fresh nonce per run: subtasks never repeat, so no prompt is served from the tokenizer's cache.
    policy = ScriptedPolicy(script(subtasks, uuid.uuid4().hex[:8]), chat, latency_s=latency)
    ex = Executor(build_program(subtasks, max_parallel), policy, chat, {"web_search": SlowTool(tool_latency)})
    start = time.perf_counter()
    trees = await ex.run_group("What connects these lookups?", group, group_id="bench")
    wall = time.perf_counter() - start
    n = sum(len(t.trajectories) for t in trees)
    assert n == group * (1 + subtasks), n
    return wall, len(policy.requests)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--subtasks", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.1, help="seconds per policy call")
    ap.add_argument("--tool-latency", type=float, default=0.5, help="seconds per tool call")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    chat = ChatTokenizer.from_pretrained(resolve_model())
    asyncio.run(run_group(chat, 1, 1, 0.0, 0.0, 1))  # warm-up: template compilation, tokenizer caches
    zero = min(
        asyncio.run(run_group(chat, args.group, args.subtasks, 0.0, 0.0, args.subtasks))[0] for _ in range(args.repeats)
    )
    critical = 4 * args.latency + args.tool_latency
    sequential_model = 2 * args.latency + args.subtasks * (2 * args.latency + args.tool_latency)
    concurrent = [
        asyncio.run(run_group(chat, args.group, args.subtasks, args.latency, args.tool_latency, args.subtasks))
        for _ in range(args.repeats)
    ]
    one_by_one = [
        asyncio.run(run_group(chat, args.group, args.subtasks, args.latency, args.tool_latency, 1))
        for _ in range(args.repeats)
    ]
    best_c = min(w for w, _ in concurrent)
    best_s = min(w for w, _ in one_by_one)
    print(
        f"group {args.group} x {args.subtasks} subtasks, policy latency {args.latency}s, tool latency {args.tool_latency}s, "
        f"{concurrent[0][1]} policy calls per group"
    )
    print(f"executor CPU time per group (zero latencies): {zero:.3f} s")
    print(f"critical path (4L+T)                 : {critical:.3f} s")
    print(
        f"concurrent fan-out, wall (best of {args.repeats})   : {best_c:.3f} s  -> {best_c / critical:.3f}x critical path (target <= 1.15)"
    )
    print(f"delegated calls one by one, wall       : {best_s:.3f} s  (model {sequential_model:.3f} s)")
    print(f"speed-up over one-by-one               : {best_s / best_c:.2f}x (target >= 3)")
    print(f"all concurrent runs (s): {', '.join(f'{w:.3f}' for w, _ in concurrent)}")


if __name__ == "__main__":
    main()
