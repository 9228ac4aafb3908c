"""Graph pictures: SVG, PNG, HTML and mermaid written from one view."""

from __future__ import annotations

import re
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from viz_helpers import rich_graph

from matpo_graph.core.spec import Graph
from matpo_graph.viz.graph_layout import layout_graph
from matpo_graph.viz.graph_model import view_from_graph
from matpo_graph.viz.graph_render import write_graph_picture

SVG_NS = "{http://www.w3.org/2000/svg}"
# Anything that would make a browser fetch: a src/href to a URL, a stylesheet link, a CSS import or url().
NETWORK_REF = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)|<link\b|@import|url\(\s*["']?(?:https?:|//)""", re.I)


def _view(**changes):
    data = rich_graph()
    data.update(changes)
    return view_from_graph(Graph.model_validate(data))


def _svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    return ["".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")]


def test_svg_is_valid_xml_with_every_role_tool_and_edge_label(tmp_path):
    out = write_graph_picture(_view(), tmp_path / "g.svg")
    texts = _svg_texts(out)
    for expected in ("planner [root]", "browser", "verifier", "web_search", "scrape", "calculator",
                     "search_and_browse ×4", "verify ×1", "sub_browse ×2", "replan ×1",
                     "max_turns 10 · 256 tok/turn", "context 6144 tok", "summary: on_overflow", "backend: search"):
        assert expected in texts, expected
    root = ET.parse(out).getroot()
    edges = [p for p in root.iter(f"{SVG_NS}path") if "edge" in (p.get("class") or "")]
    assert len(edges) == 4 + 4  # four delegation edges, four role->tool uses
    assert all(p.get("marker-end") for p in edges)


def test_svg_escapes_text_from_the_graph(tmp_path):
    data = rich_graph()
    data["name"] = "a<b>&c"
    out = write_graph_picture(view_from_graph(Graph.model_validate(data)), tmp_path / "g.svg")
    assert "a<b>&c" in _svg_texts(out)  # parsed back as text, so it was escaped in the file
    assert "<b>" not in out.read_text()


def test_png_has_the_layout_size_at_twice_the_pixels(tmp_path):
    view = _view()
    out = write_graph_picture(view, tmp_path / "g.png")
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    layout = layout_graph(view)
    assert width == pytest.approx(2 * layout.width, abs=2)
    assert height == pytest.approx(2 * layout.height, abs=2)


def test_html_is_self_contained_with_tables_and_inline_svg(tmp_path):
    out = write_graph_picture(_view(), tmp_path / "g.html")
    text = out.read_text()
    assert "<svg" in text and "</svg>" in text
    assert NETWORK_REF.search(text) is None
    assert "<script" not in text
    assert "splits the &lt;question&gt;" in text  # role description escaped
    assert "Planner &lt;b&gt;and&lt;/b&gt; helpers" in text
    for header in ("max_turns", "summary", "backend", "max_parallel"):
        assert f"<th>{header}</th>" in text


def test_mermaid_lists_roles_tools_and_labelled_edges(tmp_path):
    out = write_graph_picture(_view(), tmp_path / "g.mmd")
    text = out.read_text()
    assert "flowchart TD" in text
    assert 'role_planner -->|"search_and_browse ×4"| role_browser' in text
    assert 'role_browser -->|"sub_browse ×2"| role_browser' in text
    assert "role_browser -.-> tool_web_search" in text
    assert 'tool_calculator(["calculator<br/>backend: python"])' in text
    assert "summary: on_overflow" in text


def test_mermaid_label_quotes_cannot_break_out(tmp_path):
    data = rich_graph()
    data["name"] = 'say "hi" <now>'
    out = write_graph_picture(view_from_graph(Graph.model_validate(data)), tmp_path / "g.mmd")
    title = out.read_text().splitlines()[1]
    assert title == "title: say #quot;hi#quot; #lt;now#gt;"


def test_unknown_suffix_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"unknown picture format '\.pdf'"):
        write_graph_picture(_view(), tmp_path / "g.pdf")


def test_mermaid_names_that_sanitise_alike_stay_two_nodes(tmp_path):
    data = {"name": "g", "root": "a-b", "roles": {"a-b": {"system": "s", "tools": ["a_b"]}, "a_b": {"system": "s"}},
            "edges": [{"from": "a-b", "to": "a_b", "as": "a_b"}]}
    out = write_graph_picture(view_from_graph(Graph.model_validate(data)), tmp_path / "g.mmd")
    text = out.read_text()
    assert 'role_a_b -->|"a_b ×' in text and "| role_a_b_2" in text
