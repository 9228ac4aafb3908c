"""Which dtype the rollout engine serves in, and the OpenMP preload of its processes."""

from __future__ import annotations

import os

import pytest

from matpo_graph.rl.config import TrainConfig
from matpo_graph.rl.rollouts import engine_dtype

NATIVE = "flags\t: fpu sse avx512f avx512_bf16 amx_tile\n"
EMULATED = "flags\t: fpu sse avx2 avx512f\n"


@pytest.mark.parametrize(("fields", "cpuinfo", "want"), [
    ({}, NATIVE, "bfloat16"),
    ({}, EMULATED, "float32"),
    ({"old_logprobs": "engine"}, NATIVE, "float32"),  # the ratio would compare a bf16 engine with the trainer
    ({"engine_dtype": "float32"}, NATIVE, "float32"),
    ({"engine_dtype": "bfloat16"}, EMULATED, "bfloat16"),
])
def test_engine_dtype(fields: dict, cpuinfo: str, want: str) -> None:
    assert engine_dtype(TrainConfig(**fields), cpuinfo) == want


def test_worker_preload_restores_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from matpo_graph.runtime.policies import vllm as engine

    lib = tmp_path / "libiomp5.so"
    lib.write_bytes(b"")
    monkeypatch.setattr(engine, "_openmp_library", lambda: lib)
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")
    with engine._worker_preload():
        assert os.environ["LD_PRELOAD"] == f"{lib}:/opt/other.so"
    assert os.environ["LD_PRELOAD"] == "/opt/other.so"
    monkeypatch.delenv("LD_PRELOAD")
    with engine._worker_preload():
        assert os.environ["LD_PRELOAD"] == str(lib)
    assert "LD_PRELOAD" not in os.environ
    monkeypatch.setenv("MATPO_VLLM_PRELOAD", "0")
    with engine._worker_preload():
        assert "LD_PRELOAD" not in os.environ
