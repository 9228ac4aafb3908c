"""The graph view and its layered layout."""

from __future__ import annotations

import itertools

import pytest
from viz_helpers import rich_graph

from matpo_graph.core.program import CallableView, Program, RoleProgram, TemplateSource
from matpo_graph.core.spec import Graph
from matpo_graph.viz.graph_layout import layout_graph
from matpo_graph.viz.graph_model import view_from_graph, view_from_program


def _rich_view():
    return view_from_graph(Graph.model_validate(rich_graph()))


def test_view_keeps_role_limits_and_edges():
    view = _rich_view()
    planner = view.role("planner")
    assert planner is not None and planner.max_turns == 8 and planner.final_summary == "on_overflow"
    assert view.role("verifier").trainable is False
    assert view.context_tokens == 6144
    assert {(e.parent, e.child, e.name, e.max_parallel) for e in view.edges} == {
        ("planner", "browser", "search_and_browse", 4),
        ("planner", "verifier", "verify", 1),
        ("browser", "browser", "sub_browse", 2),
        ("verifier", "planner", "replan", 1),
    }
    assert {t.name: t.backend for t in view.tools} == {"web_search": "search", "scrape": "scrape", "calculator": "python"}


def test_view_role_tool_naming_an_edge_is_drawn_as_the_edge_only():
    data = rich_graph()
    data["roles"]["planner"]["tools"] = ["search_and_browse", "calculator"]
    view = view_from_graph(Graph.model_validate(data))
    assert view.role("planner").tools == ("calculator",)
    assert "search_and_browse" not in {t.name for t in view.tools}


def test_view_undefined_tool_is_marked_missing():
    data = rich_graph()
    data["roles"]["browser"]["tools"] = ["web_search", "serch"]
    view = view_from_graph(Graph.model_validate(data))
    missing = [t for t in view.tools if t.missing]
    assert [t.name for t in missing] == ["serch"]


def test_layout_layers_roles_by_depth_and_tools_below_their_users():
    layout = layout_graph(_rich_view())
    layer = {n.id: n.layer for n in layout.nodes}
    assert layer["role:planner"] == 0
    assert layer["role:browser"] == 1 and layer["role:verifier"] == 1
    assert layer["tool:calculator"] == 1  # used by the planner only
    assert layer["tool:web_search"] == 2 and layer["tool:scrape"] == 2
    ys = {n.id: n.y for n in layout.nodes}
    assert ys["role:planner"] < ys["role:browser"] < ys["tool:scrape"]


def test_layout_unreachable_role_goes_below_reachable_roles():
    data = rich_graph()
    data["roles"]["orphan"] = {"system": "alone"}
    layout = layout_graph(view_from_graph(Graph.model_validate(data)))
    layer = {n.id: n.layer for n in layout.nodes}
    assert layer["role:orphan"] == 2


def test_layout_boxes_do_not_overlap_and_fit_the_canvas():
    layout = layout_graph(_rich_view())
    for a, b in itertools.combinations(layout.nodes, 2):
        apart = a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y
        assert apart, (a.id, b.id)
    for n in layout.nodes:
        assert 0 <= n.x and n.x + n.w <= layout.width and 0 <= n.y and n.y + n.h <= layout.height
    for e in layout.edges:
        for x, y in e.points:
            assert 0 <= x <= layout.width and 0 <= y <= layout.height


def test_layout_edge_labels_name_the_tool_and_max_parallel():
    layout = layout_graph(_rich_view())
    labels = {(e.source, e.target): e.label for e in layout.edges if e.kind == "child"}
    assert labels[("role:planner", "role:browser")] == "search_and_browse ×4"
    assert labels[("role:browser", "role:browser")] == "sub_browse ×2"
    assert all(e.label == "" and e.label_xy is None for e in layout.edges if e.kind == "tool")


def test_layout_self_and_back_edges_leave_on_the_right():
    layout = layout_graph(_rich_view())
    by_pair = {(e.source, e.target): e for e in layout.edges}
    browser = layout.node("role:browser")
    loop = by_pair[("role:browser", "role:browser")]
    assert all(x >= browser.x + browser.w for x, _ in loop.points)
    back = by_pair[("role:verifier", "role:planner")]
    verifier, planner = layout.node("role:verifier"), layout.node("role:planner")
    assert back.points[0][0] == pytest.approx(verifier.x + verifier.w)
    assert back.points[-1][0] == pytest.approx(planner.x + planner.w)
    assert back.points[-1][1] < back.points[0][1]  # goes up


def test_layout_box_text_shows_turns_context_and_summary_policy():
    layout = layout_graph(_rich_view())
    browser = layout.node("role:browser")
    assert "max_turns 10 · 256 tok/turn" in browser.lines
    assert "context 6144 tok" in browser.lines
    assert "summary: always" in browser.lines
    assert "frozen" in layout.node("role:verifier").lines
    assert layout.node("role:planner").title.endswith("[root]")
    assert "backend: python" in layout.node("tool:calculator").lines


def _template(text: str) -> TemplateSource:
    return TemplateSource(source=text, origin="inline", sha256="0" * 64)


def test_view_from_program_recovers_edges_from_child_callables():
    t = _template("x")
    program = Program(
        graph_name="compiled",
        graph_sha256="",
        root="boss",
        tool_call_format="hermes",
        answer_format="tag",
        roles={
            "boss": RoleProgram(name="boss", system=t, user=t, summary=t, max_turns=3, max_tokens_per_turn=100,
                                final_summary="never",
                                callables=[CallableView(name="ask", description="d", parameters={}, kind="child", target="helper",
                                                        max_parallel=3)]),
            "helper": RoleProgram(name="helper", system=t, user=t, summary=t, max_turns=2, max_tokens_per_turn=50,
                                  final_summary="always",
                                  callables=[CallableView(name="web_search", description="d", parameters={}, kind="tool",
                                                          target="web_search")]),
        },
        tools={"web_search": {"backend": "search", "description": "d", "timeout_s": 5.0, "retries": 1}},
        max_depth=2,
        context_tokens=2048,
        summary_reserve=128,
        max_concurrency=8,
    )
    view = view_from_program(program)
    assert [(e.parent, e.child, e.name, e.max_parallel) for e in view.edges] == [("boss", "helper", "ask", 3)]
    assert view.role("helper").tools == ("web_search",)
    layout = layout_graph(view)
    assert {n.id for n in layout.nodes} == {"role:boss", "role:helper", "tool:web_search"}
