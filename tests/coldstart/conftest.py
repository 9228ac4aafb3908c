"""Shared fixtures for cold-start tests: the real tokenizer, a real embedded web, expert demonstrations."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def model_dir():
    from matpo_graph.runtime.models import resolve_model

    return resolve_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def chat(model_dir):
    from matpo_graph.runtime.chat import ChatTokenizer

    return ChatTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="session")
def web():
    from matpo_graph.env.server import serve_in_thread

    handle = serve_in_thread(seed=0, n_entities=400)
    yield handle
    handle.stop()
