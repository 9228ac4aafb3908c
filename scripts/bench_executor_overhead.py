"""Benchmark: the executor's cost on top of the vLLM engine.

64 single-turn rollouts (no tool calls, a fixed generation length with ``ignore_eos``) go through the
executor, and the same 64 prompts go straight to the engine (``AsyncLLM.generate``) with the same
sampling settings. Printed: generated tokens per second of both, alternating the two to share the
machine's noise fairly; target: executor >= 0.85x direct.

Usage: python scripts/bench_executor_overhead.py [--n 64] [--tokens 64] [--rounds 2] [--kv-cache-gib 2]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import time
import uuid


def _program(tokens: int):
    from matpo_graph.core.program import Program, RoleProgram, TemplateSource
    from matpo_graph.core.templates import DEFAULT_ROOT_USER, DEFAULT_SUMMARY

    def tpl(source: str) -> TemplateSource:
        return TemplateSource(source=source, origin="inline", sha256=hashlib.sha256(source.encode()).hexdigest())

    solo = RoleProgram(
        name="solo",
        system=tpl("You are a helpful assistant. {{ answer_instructions }}"),
        user=tpl(DEFAULT_ROOT_USER),
        summary=tpl(DEFAULT_SUMMARY),
        max_turns=1,
        max_tokens_per_turn=tokens,
        final_summary="never",
    )
    return Program(
        graph_name="bench_overhead",
        graph_sha256="0" * 64,
        root="solo",
        tool_call_format="hermes",
        answer_format="boxed",
        roles={"solo": solo},
        tools={},
        max_depth=1,
        context_tokens=2048,
        summary_reserve=0,
        max_concurrency=64,
    )


async def bench(args: argparse.Namespace) -> None:
    from vllm import SamplingParams as VSampling
    from vllm.sampling_params import RequestOutputKind

    from matpo_graph.runtime.chat import ChatTokenizer
    from matpo_graph.runtime.executor import Executor
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.runtime.policies.vllm import VLLMPolicy
    from matpo_graph.runtime.policy import SamplingParams

    model_dir = resolve_model(args.model)
    chat = ChatTokenizer.from_pretrained(model_dir)
    t0 = time.perf_counter()
    policy = VLLMPolicy(model_dir, kv_cache_gib=args.kv_cache_gib, max_model_len=2048, max_num_seqs=args.n, seed=0)
    print(f"engine start: {time.perf_counter() - t0:.1f} s")
    program = _program(args.tokens)
    sampling = SamplingParams(temperature=1.0, max_tokens=args.tokens, ignore_eos=True)
    executor = Executor(program, policy, chat, {}, sampling=sampling)
    questions = [f"Question {i}: describe a river in one paragraph." for i in range(args.n)]

    async def through_executor() -> tuple[float, int]:
        start = time.perf_counter()
        trees = await asyncio.gather(*(executor.run(q, tree_id=str(i), seed=i) for i, q in enumerate(questions)))
        wall = time.perf_counter() - start
        return wall, sum(sum(t.root.loss_mask) for t in trees)

    # The direct path gets exactly the prompts the executor builds (taken from a warm-up run).
    warm = await asyncio.gather(*(executor.run(q, tree_id=str(i)) for i, q in enumerate(questions)))
    prompts = [t.root.token_ids[: t.root.prompt_length] for t in warm]

    async def one_direct(ids: list[int], seed: int) -> int:
        params = VSampling(
            temperature=1.0,
            max_tokens=args.tokens,
            ignore_eos=True,
            logprobs=0,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        final = None
        async for out in policy.engine.generate({"prompt_token_ids": ids}, params, request_id=uuid.uuid4().hex):
            final = out
        return len(final.outputs[0].token_ids)

    async def direct() -> tuple[float, int]:
        start = time.perf_counter()
        counts = await asyncio.gather(*(one_direct(p, i) for i, p in enumerate(prompts)))
        return time.perf_counter() - start, sum(counts)

    await direct()
    results: dict[str, list[float]] = {"direct": [], "executor": []}
    for r in range(args.rounds):
        for name, fn in (
            (("direct", direct), ("executor", through_executor))
            if r % 2 == 0
            else (("executor", through_executor), ("direct", direct))
        ):
            wall, tokens = await fn()
            results[name].append(tokens / wall)
            print(f"round {r} {name:8s}: {tokens} tokens in {wall:.2f} s = {tokens / wall:.1f} tok/s")
    d = sum(results["direct"]) / len(results["direct"])
    e = sum(results["executor"]) / len(results["executor"])
    print(f"mean direct {d:.1f} tok/s, executor {e:.1f} tok/s: ratio {e / d:.3f} (target >= 0.85)")
    policy.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kv-cache-gib", type=float, default=2.0)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{args.kv_cache_gib:g}")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
