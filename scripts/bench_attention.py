"""The kernels under the RL update, one decoder layer's worth at a time, float32 against bfloat16.

    python scripts/bench_attention.py               # a 2,000-token row, SmolLM2-135M's shapes
    python scripts/bench_attention.py --tokens 600

Prints milliseconds for sdpa's causal kernel (forward, forward + backward), for a compiled flex attention
with a causal block mask (where this torch can run it), and for the layer's four matmul shapes with their
GF/s. It is the quick check of whether a machine's CPU (or a newer torch) would move the update's ceiling:
on a CPU without AMX, bf16 speeds the matmuls up about 2.5x and attention not at all.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable


def _ms(fn: Callable[[], object], repeat: int) -> float:
    for _ in range(2):
        fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat * 1e3


def attention(tokens: int, heads: int, kv_heads: int, head_dim: int, repeat: int) -> None:
    import torch
    import torch.nn.functional as F

    def qkv(dtype: torch.dtype, grad: bool) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(0)
        return tuple(torch.randn(1, h, tokens, head_dim, generator=g).to(dtype).requires_grad_(grad)
                     for h in (heads, kv_heads, kv_heads))

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=heads != kv_heads)

    flex = None
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        mask = create_block_mask(lambda b, h, q, k: q >= k, 1, None, tokens, tokens, device="cpu")
        compiled = torch.compile(flex_attention, dynamic=False)

        def flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return compiled(q, k, v, block_mask=mask, enable_gqa=heads != kv_heads)
    except Exception as exc:  # an older torch, or no compiler on this machine
        print(f"flex attention unavailable: {type(exc).__name__}: {str(exc)[:120]}")

    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        q, k, v = qkv(dtype, False)
        with torch.no_grad():
            fwd = _ms(lambda: sdpa(q, k, v), repeat)
        q, k, v = qkv(dtype, True)
        both = _ms(lambda: sdpa(q, k, v).float().sum().backward(), repeat)
        line = f"attention {name:8s} sdpa forward {fwd:6.1f} ms, forward + backward {both:6.1f} ms"
        if flex is not None:
            q, k, v = qkv(dtype, False)
            try:
                line += f"; flex forward {_ms(lambda: flex(q, k, v), repeat):6.1f} ms"
            except Exception as exc:
                line += f"; flex failed ({type(exc).__name__})"
            q, k, v = qkv(dtype, True)
            try:
                flex(q, k, v).float().sum().backward()
                line += ", flex backward runs"
            except Exception as exc:
                line += f", flex backward: {type(exc).__name__}: {str(exc)[:70]}"
        print(line, flush=True)


def matmuls(tokens: int, hidden: int, intermediate: int, kv_dim: int, repeat: int) -> None:
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    for fan_in, fan_out, what in ((hidden, intermediate, "gate/up"), (intermediate, hidden, "down"),
                                  (hidden, hidden, "q/o"), (hidden, kv_dim, "k/v")):
        x = torch.randn(tokens, fan_in, generator=g)
        w = torch.randn(fan_out, fan_in, generator=g)
        flops = 2 * tokens * fan_in * fan_out / 1e9
        with torch.no_grad():
            t32 = _ms(lambda: F.linear(x, w), repeat)
            xb, wb = x.bfloat16(), w.bfloat16()
            t16 = _ms(lambda: F.linear(xb, wb), repeat)
        print(f"matmul {what:8s} {tokens} x {fan_in} x {fan_out}: float32 {t32:6.2f} ms ({flops / t32 * 1e3:4.0f} GF/s), "
              f"bf16 {t16:6.2f} ms ({flops / t16 * 1e3:4.0f} GF/s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=2000, help="row length (default 2000, a long row of a real step)")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, load average {os.getloadavg()[0]:.2f}")
    # SmolLM2-135M: 9 query heads over 3 key/value heads of 64, hidden 576, MLP 1,536
    attention(args.tokens, heads=9, kv_heads=3, head_dim=64, repeat=args.repeat)
    matmuls(args.tokens, hidden=576, intermediate=1536, kv_dim=192, repeat=max(10, 4 * args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
