"""Latency of the embedded web's search over real HTTP (target: well under 50 ms on 10,000 pages).

Usage: python scripts/bench_search.py [--entities 10000] [--queries 200] [--concurrency 16] [--in-process]
Prints build/index times and p50/p95/max search latency, sequential and concurrent. By default the server
runs as `matpo-graph env serve` in its own process, so client and server do not share one interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from matpo_graph.env.search_index import SearchIndex
from matpo_graph.env.server import serve_in_thread
from matpo_graph.env.world import build_world


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _report(name: str, ms: list[float]) -> None:
    print(f"{name:<28} n={len(ms):<4} p50={_pct(ms, 0.5):6.2f} ms  p95={_pct(ms, 0.95):6.2f} ms  "
          f"max={max(ms):6.2f} ms  mean={statistics.fmean(ms):6.2f} ms")


async def _concurrent(url: str, queries: list[str], concurrency: int, num: int) -> tuple[list[float], float]:
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency)) as client:
        async def one(q: str) -> None:
            async with sem:
                t = time.perf_counter()
                r = await client.post(f"{url}/search", json={"q": q, "num": num})
                r.raise_for_status()
                latencies.append((time.perf_counter() - t) * 1000)
        start = time.perf_counter()
        await asyncio.gather(*(one(q) for q in queries))
        return latencies, time.perf_counter() - start


@contextmanager
def _server(args: argparse.Namespace, world: Any) -> Iterator[str]:
    if args.in_process:
        handle = serve_in_thread(world=world)
        try:
            yield handle.url
        finally:
            handle.stop()
        return
    cmd = [sys.executable, "-m", "matpo_graph", "env", "serve", "--port", "0", "--seed", str(args.seed),
           "--entities", str(args.entities), "--questions", str(max(200, args.queries))]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if " at " not in line:
            raise SystemExit(f"server did not start: {line!r}")
        yield line.split(" at ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num", type=int, default=10, help="results per search")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--in-process", action="store_true", help="serve from a thread of this process")
    args = parser.parse_args()

    t = time.perf_counter()
    world = build_world(args.seed, n_entities=args.entities, n_questions=max(200, args.queries))
    build_s = time.perf_counter() - t
    print(f"world: {len(world.pages)} pages built in {build_s:.2f} s")
    items = [q for split in world.questions.values() for q in split]
    queries = []
    for item in items:
        queries.append(item.question)
        queries.extend(step["question_resolved"] for step in item.decomposition or [])
    queries = queries[: args.queries]
    with _server(args, world) as url, httpx.Client() as client:
        client.get(f"{url}/health", timeout=60).raise_for_status()
        print(f"server up at {url} ({'thread' if args.in_process else 'subprocess'})")
        for q in queries[:20]:  # warm-up
            client.post(f"{url}/search", json={"q": q, "num": args.num})
        ms = []
        for q in queries:
            t = time.perf_counter()
            r = client.post(f"{url}/search", json={"q": q, "num": args.num})
            r.raise_for_status()
            ms.append((time.perf_counter() - t) * 1000)
        _report("HTTP search, sequential", ms)
        conc, wall = asyncio.run(_concurrent(url, queries, args.concurrency, args.num))
        _report(f"HTTP search, {args.concurrency} concurrent", conc)
        print(f"{'throughput':<28} {len(queries) / wall:.0f} searches/s")
    index = SearchIndex(world.pages)
    idx = []
    for q in queries:
        t = time.perf_counter()
        index.search(q, args.num)
        idx.append((time.perf_counter() - t) * 1000)
    _report("index only (in-process)", idx)
    ok = _pct(ms, 0.95) < 50.0
    print(f"target p95 < 50 ms over HTTP on {len(world.pages)} pages: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
