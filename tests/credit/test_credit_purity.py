"""The reward and credit core imports no torch, vllm, verl or httpx (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "vllm", "verl", "httpx", "numpy")


@pytest.mark.parametrize(
    "module",
    [
        "matpo_graph.core.answer",
        "matpo_graph.core.reward",
        "matpo_graph.core.format_score",
        "matpo_graph.core.credit",
        "matpo_graph.testing.checks",
        "matpo_graph.cli.credit_verbs",
    ],
)
def test_credit_core_imports_nothing_heavy(module: str) -> None:
    code = f"import sys, json, {module}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
