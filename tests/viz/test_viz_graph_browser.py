"""Graph pictures in headless chromium: the HTML page and the bare SVG render without errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from viz_helpers import GRAPHS, requires_chromium, rich_graph

from matpo_graph.cli import main

pytestmark = [pytest.mark.browser, requires_chromium]


def _graph_files(tmp_path: Path) -> list[Path]:
    rich = tmp_path / "rich.yaml"
    rich.write_text(yaml.safe_dump(rich_graph()))
    return sorted(GRAPHS.glob("*.yaml")) + [rich]


def test_graph_pages_render_every_box_without_errors(browser, tmp_path, screenshots):
    for graph in _graph_files(tmp_path):
        data = yaml.safe_load(graph.read_text())
        page = tmp_path / f"{graph.stem}.html"
        assert main(["viz", str(graph), "-o", str(page)]) == 0
        browser.open(page)
        nodes = browser.eval("Array.from(document.querySelectorAll('svg g.node')).map(g => g.dataset.id)")
        want = {f"role:{r}" for r in data["roles"]}
        want |= {f"tool:{t}" for r in data["roles"].values() for t in r.get("tools", []) if t in data.get("tools", {})}
        assert want <= set(nodes), graph.name
        # every box is laid out inside the drawing and has a real size
        boxes = browser.eval("""Array.from(document.querySelectorAll('svg g.node rect')).map(r => {
            const b = r.getBBox(); return [b.width, b.height]; })""")
        assert all(w > 40 and h > 30 for w, h in boxes)
        rows = browser.eval("document.querySelectorAll('table.roles tbody tr').length")
        assert rows == len(data["roles"])
        assert browser.console_errors == []
        assert all(u.startswith("file:") for u in browser.requests)
        browser.screenshot(screenshots / f"graph_{graph.stem}.png")


def test_graph_svg_file_opens_as_an_image(browser, tmp_path, screenshots):
    graph = tmp_path / "rich.yaml"
    graph.write_text(yaml.safe_dump(rich_graph()))
    svg = tmp_path / "rich.svg"
    assert main(["viz", str(graph), "-o", str(svg)]) == 0
    browser.open(svg)
    labels = browser.eval("Array.from(document.querySelectorAll('g.edge-label text')).map(t => t.textContent)")
    assert sorted(labels) == sorted(["search_and_browse ×4", "verify ×1", "sub_browse ×2", "replan ×1"])
    assert browser.console_errors == []
    browser.screenshot(screenshots / "graph_rich_svg.png")
