"""Loading graph files: shipped graphs are valid; broken ones give every issue with file, line and path."""

from __future__ import annotations

from pathlib import Path

import pytest

from matpo_graph.core.errors import GraphError, SpecIssue
from matpo_graph.core.loader import check_graph, check_text, load_graph
from matpo_graph.core.spec import Graph

REPO = Path(__file__).resolve().parents[2]
GRAPHS = sorted((REPO / "graphs").glob("*.yaml"))
BAD = REPO / "tests" / "fixtures" / "bad"
BAD_FILES = sorted(BAD.glob("*.yaml"))

# The code each broken fixture must produce (one case per failure mode).
EXPECTED_CODES = {
    "unknown_role_edge": {"unknown-role"},
    "unknown_tool": {"unknown-tool"},
    "unbounded_cycle": {"unbounded-cycle"},
    "undefined_variable": {"undefined-template-variable"},
    "misspelled_key": {"unknown-key"},
    "invalid_json_schema": {"invalid-json-schema"},
    "unreachable_role": {"unreachable-role"},
    "malformed_yaml": {"yaml-syntax"},
    "template_escape": {"template-path-escape", "template-not-found"},
    "bad_examples": {"example-tool-call", "invalid-examples"},
    "name_collision": {"name-collision"},
    "bad_policies": {"unknown-policy", "unused-policy", "out-of-range", "invalid-value", "missing-key", "name-collision"},
    "many_errors": {"unknown-role", "invalid-value", "out-of-range", "duplicate-tool", "undefined-template-variable"},
}


def test_shipped_graphs_exist():
    assert {p.stem for p in GRAPHS} >= {"deep_search", "single_agent", "three_level", "two_workers"}


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: p.stem)
def test_load_graph_shipped_graph_is_valid_without_warnings(path: Path):
    check = check_graph(path)
    assert check.ok, check.error().render()
    assert check.issues == []
    assert path.read_text().startswith("# yaml-language-server: $schema=../schema/graph.schema.json\n")


def test_load_graph_deep_search_matches_the_paper_setup():
    g = load_graph(REPO / "graphs" / "deep_search.yaml")
    assert g.root == "planner" and g.tool_call_format == "hermes"
    assert [(e.from_, e.to, e.as_) for e in g.edges] == [("planner", "browser", "search_and_browse")]
    assert g.roles["planner"].final_summary == "on_overflow" and g.roles["browser"].final_summary == "always"
    assert g.roles["browser"].tools == ["web_search", "scrape"]
    assert {t.config["endpoint"] for t in g.tools.values()} == {"embedded"}
    assert (g.reward.accuracy.weight, g.reward.format.weight, g.reward.answer_format) == (0.9, 0.1, "boxed")
    assert (g.credit.strategy, g.credit.loss_agg, g.credit.group_size) == ("broadcast", "tree_token_mean", 4)
    assert (g.limits.max_depth, g.limits.context_tokens) == (2, 4096)


def test_bad_fixtures_are_all_covered():
    assert {p.stem for p in BAD_FILES} == set(EXPECTED_CODES)


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_load_graph_bad_fixture_raises_expected_codes(path: Path):
    with pytest.raises(GraphError) as info:
        load_graph(path)
    assert EXPECTED_CODES[path.stem] <= set(info.value.codes())
    for issue in info.value.errors:
        assert issue.line is not None and issue.col is not None, issue


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_check_graph_bad_fixture_matches_golden_text(path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(REPO)
    rel = path.relative_to(REPO)
    check = check_graph(rel)
    expected = path.with_suffix(".txt").read_text(encoding="utf-8")
    assert check.error().render() + "\n" == expected


def test_check_graph_missing_file():
    check = check_graph("no/such/graph.yaml")
    assert not check.ok and [i.code for i in check.issues] == ["file-not-found"]


def test_check_text_collects_shape_and_semantic_errors_together():
    text = "name: g\nroot: a\nroles:\n  a:\n    system: '{{ nope }}'\n    max_turns: -1\n    tools: [ghost]\n"
    codes = [i.code for i in check_text(text, base_dir=REPO).issues]
    assert codes == ["undefined-template-variable", "out-of-range", "unknown-tool"]  # sorted by line


def test_check_text_unknown_key_suggests_closest():
    check = check_text("name: g\nroot: a\nroles:\n  a: {system: hi, tols: []}\n", base_dir=REPO)
    (issue,) = check.issues
    assert (issue.code, issue.path, issue.hint) == ("unknown-key", "roles.a.tols", "did you mean 'tools'?")
    assert (issue.line, issue.col) == (4, 19)


def test_check_text_union_type_errors_merge_into_one():
    check = check_text("name: g\nroot: a\nroles:\n  a: {system: hi, examples: 7}\n", base_dir=REPO)
    (issue,) = check.issues
    assert issue.code == "wrong-type" and "a list or a string" in issue.message


def test_check_text_not_a_mapping():
    check = check_text("- a\n- b\n", base_dir=REPO)
    assert [i.code for i in check.issues] == ["not-a-mapping"]


def test_spec_issue_render_format():
    issue = SpecIssue.at("unknown-tool", ("roles", "planner", "tools", 1), "unknown tool 'serch'", "did you mean 'search'?")
    issue = issue.located(14, 7)
    expected = "graphs/x.yaml:14:7 roles.planner.tools[1]: unknown tool 'serch'; did you mean 'search'? [unknown-tool]"
    assert issue.render("graphs/x.yaml") == expected


def test_graph_error_holds_every_issue():
    issues = [SpecIssue.at("unknown-role", ("root",), "a"), SpecIssue.at("unused-tool", ("tools", "t"), "b", severity="warning")]
    err = GraphError("g.yaml", issues)
    assert err.codes() == ["unknown-role", "unused-tool"] and len(err.errors) == 1
    assert str(err).splitlines()[1] == "g.yaml tools.t: warning: b [unused-tool]"


def test_to_yaml_dict_keeps_explicit_max_depth():
    text = "name: g\nroot: a\nroles:\n  a: {system: hi}\nedges: [{from: a, to: a, as: again}]\nlimits: {max_depth: 2}\n"
    g = check_text(text, base_dir=REPO).graph
    assert isinstance(g, Graph)
    assert g.to_yaml_dict()["limits"] == {"max_depth": 2}
