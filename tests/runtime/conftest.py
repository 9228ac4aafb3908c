"""Shared fixtures for runtime tests: the real SmolLM2 tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def chat():
    from matpo_graph.runtime.chat import ChatTokenizer
    from matpo_graph.runtime.models import resolve_model

    return ChatTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
