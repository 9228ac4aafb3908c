"""The embedded deterministic web: a fictional world, its pages, BM25 search over HTTP, and multi-hop questions.

Everything follows from one seed. Heavy parts (tantivy, uvicorn) load only when used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NoiseConfig", "World", "build_world", "export_world", "serve_in_thread"]

_LAZY = {
    "NoiseConfig": "matpo_graph.env.noise",
    "World": "matpo_graph.env.world",
    "build_world": "matpo_graph.env.world",
    "export_world": "matpo_graph.env.export",
    "serve_in_thread": "matpo_graph.env.server",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'matpo_graph.env' has no attribute {name!r}")
