"""Shared data of the viz tests: the known rollout file, a graph with every kind of edge, a run folder."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from matpo_graph.viz.chromium import CHROMIUM

REPO = Path(__file__).resolve().parents[2]
KNOWN = REPO / "tests" / "fixtures" / "rollouts" / "known_step.jsonl"
GRAPHS = REPO / "graphs"

requires_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"{CHROMIUM} is absent (Debian: apt-get install -y chromium)",
)


def rich_graph() -> dict[str, Any]:
    """A graph with delegation, a self-call, a back edge, a frozen role and a shared tool."""
    return {
        "name": "rich",
        "description": "Planner <b>and</b> helpers",
        "root": "planner",
        "tool_call_format": "xml",
        "roles": {
            "planner": {"system": "Plan. {{ question }}", "tools": ["calculator"], "max_turns": 8,
                        "final_summary": "on_overflow", "description": "splits the <question>"},
            "browser": {"system": "Browse.", "tools": ["web_search", "scrape"], "max_turns": 10, "max_tokens_per_turn": 256,
                        "final_summary": "always"},
            "verifier": {"system": "Check.", "tools": ["web_search"], "max_turns": 4, "final_summary": "always", "trainable": False},
        },
        "tools": {
            "web_search": {"backend": "search", "description": "Search the web"},
            "scrape": {"backend": "scrape", "description": "Read a page"},
            "calculator": {"backend": "python", "description": "Arithmetic", "config": {"function": "matpo_graph.tools.builtin:calculate"}},
        },
        "edges": [
            {"from": "planner", "to": "browser", "as": "search_and_browse", "max_parallel": 4},
            {"from": "planner", "to": "verifier", "as": "verify", "max_parallel": 1},
            {"from": "browser", "to": "browser", "as": "sub_browse", "max_parallel": 2},
            {"from": "verifier", "to": "planner", "as": "replan", "max_parallel": 1},
        ],
        "limits": {"max_depth": 3, "context_tokens": 6144, "summary_reserve": 256},
    }


def make_run_dir(root: Path, known: Path) -> Path:
    """A run folder with two steps of rollouts, metrics for both steps (step 2 twice) and one plot."""
    run = root / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "plots").mkdir()
    shutil.copy(known, run / "rollouts" / "step_000001.jsonl")
    shutil.copy(known, run / "rollouts" / "step_000002.jsonl")
    (run / "metrics.jsonl").write_text(
        '{"step": 1, "reward_mean": 0.1}\n{"step": 2, "reward_mean": 0.2, "loss": 1.5}\n'
        '{"step": 2, "reward_mean": 0.65, "loss": 0.5}\n',
        encoding="utf-8",
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2), dpi=60)
    ax.plot([1, 2], [0.1, 0.65])
    fig.savefig(run / "plots" / "reward.png")
    plt.close(fig)
    return run
