"""Fixtures of the veRL target tests: the embedded SmolLM2 model folder and its tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def model_dir() -> Path:
    from matpo_graph.runtime.models import resolve_model

    return resolve_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def hf_tokenizer(model_dir):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))
