"""Question-answer datasets: the QAItem type and loaders (native, MuSiQue, FanOutQA, GAIA-text-style)."""

from __future__ import annotations

from typing import Any

__all__ = ["QADataError", "QAItem", "load_qa", "write_qa"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from matpo_graph.data import qa

        return getattr(qa, name)
    raise AttributeError(f"module 'matpo_graph.data' has no attribute {name!r}")
