"""Fixtures of the viz tests: the known rollout file, a headless browser, a screenshot folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from viz_helpers import KNOWN

from matpo_graph.viz.chromium import CHROMIUM, Chromium


@pytest.fixture()
def known_jsonl() -> Path:
    return KNOWN


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is absent (Debian: apt-get install -y chromium)")
    with Chromium(width=1400, height=1000) as b:
        yield b


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $MATPO_VIZ_SCREENSHOTS when set (to look at them), else a temp folder."""
    wanted = os.environ.get("MATPO_VIZ_SCREENSHOTS")
    if wanted:
        path = Path(wanted)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("screenshots")
