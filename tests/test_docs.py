"""The docs keep their promises: a short README, one fixed shape per feature page, links that resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHAPE = ["Overview", "Quick start", "Details", "Logged metrics", "Results"]
GENERATED = {"dsl-reference.md"}  # written by `matpo-graph schema --markdown`
PAGES = sorted(p for p in (REPO / "docs").rglob("*.md") if p.name not in GENERATED)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_a_storefront():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_page_has_the_fixed_shape(page: Path):
    headings = [line[3:].strip() for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]
    assert headings == SHAPE


@pytest.mark.parametrize("page", [REPO / "README.md", *PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path):
    text = page.read_text(encoding="utf-8")
    broken = [target for target in LINK.findall(text)
              if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists()]
    assert broken == []


def test_every_feature_page_is_indexed_in_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [p.relative_to(REPO).as_posix() for p in PAGES if p.parent == REPO / "docs"
               and p.relative_to(REPO).as_posix() not in readme]
    assert missing == []
