"""The attention stand-in of `scripts/bench_step.py --attention-floor`: it must keep every other operation of
the update running (right shape, gradients to query and values) and give sdpa back afterwards, or the ceiling
it measures would be too optimistic or leak into the timed engine."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_step.py"


def _bench_step():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_step", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_free_attention_keeps_shapes_and_gradients_and_restores_sdpa() -> None:
    free = _bench_step()._FreeAttention
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q = torch.randn(1, 6, 5, 4, requires_grad=True)
    k = torch.randn(1, 2, 8, 4, requires_grad=True)  # 3 past positions, 2 key/value heads for 6 query heads
    v = torch.randn(1, 2, 8, 4, requires_grad=True)
    with free():
        assert torch.nn.functional.scaled_dot_product_attention is not sdpa
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert torch.nn.functional.scaled_dot_product_attention is sdpa
    assert out.shape == q.shape
    # query head h reads its group's value at the same position (the last 5 of 8)
    assert torch.equal(out[0, 4].detach(), v[0, 1, 3:].detach())
    out.sum().backward()
    assert q.grad is not None and v.grad is not None
    assert float(v.grad[0, :, :3].abs().sum()) == 0.0 and float(v.grad[0, :, 3:].abs().min()) > 0.0
