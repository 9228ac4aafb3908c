"""Semantic checks: recursion bounds, depth, schemas, templates in files, examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matpo_graph.core.loader import check_text
from matpo_graph.core.spec import ExampleMessage
from matpo_graph.core.validate import validate_examples

HEAD = "name: g\nroot: a\n"


def _codes(text: str, base: Path) -> list[str]:
    return [i.code for i in check_text(text, base_dir=base).issues]


def _two_roles(extra: str = "", edges: str = "[{from: a, to: b, as: ask_b}]") -> str:
    return HEAD + f"roles:\n  a: {{system: hi}}\n  b: {{system: hi}}\nedges: {edges}\n{extra}"


CYCLE = "[{from: a, to: b, as: ask_b}, {from: b, to: a, as: ask_a}]"


def test_cycle_without_explicit_max_depth_is_an_error(tmp_path: Path):
    assert _codes(_two_roles(edges=CYCLE), tmp_path) == ["unbounded-cycle"]


def test_cycle_with_explicit_max_depth_is_allowed(tmp_path: Path):
    assert check_text(_two_roles("limits: {max_depth: 3}\n", CYCLE), base_dir=tmp_path).ok


def test_self_loop_is_a_cycle(tmp_path: Path):
    text = HEAD + "roles:\n  a: {system: hi}\nedges: [{from: a, to: a, as: again}]\n"
    assert _codes(text, tmp_path) == ["unbounded-cycle"]
    assert check_text(text + "limits: {max_depth: 4}\n", base_dir=tmp_path).ok


def test_chain_deeper_than_max_depth_warns(tmp_path: Path):
    text = HEAD + (
        "roles:\n  a: {system: hi}\n  b: {system: hi}\n  c: {system: hi}\n"
        "edges: [{from: a, to: b, as: x}, {from: b, to: c, as: y}]\nlimits: {max_depth: 1}\n"
    )
    check = check_text(text, base_dir=tmp_path)
    assert check.ok and [(i.code, i.severity) for i in check.issues] == [("depth-exceeded", "warning")]


def test_duplicate_edge_name_from_one_role(tmp_path: Path):
    text = HEAD + "roles:\n  a: {system: hi}\n  b: {system: hi}\n  c: {system: hi}\nedges: [{from: a, to: b, as: x}, {from: a, to: c, as: x}]\n"
    assert _codes(text, tmp_path) == ["name-collision"]


def test_tool_listed_from_another_roles_edge_points_to_edges(tmp_path: Path):
    text = HEAD + "roles:\n  a: {system: hi}\n  b: {system: hi, tools: [x]}\nedges: [{from: a, to: b, as: x}]\n"
    (issue,) = check_text(text, base_dir=tmp_path).issues
    assert issue.code == "unknown-tool" and "edge of role 'a'" in (issue.hint or "")


def test_unused_tool_warns_only(tmp_path: Path):
    text = HEAD + "roles:\n  a: {system: hi}\ntools:\n  t: {backend: search, description: d}\n"
    check = check_text(text, base_dir=tmp_path)
    assert check.ok and [i.code for i in check.issues] == ["unused-tool"]


def test_parameters_must_be_object_schema(tmp_path: Path):
    text = HEAD + "roles:\n  a: {system: hi, tools: [t]}\ntools:\n  t: {backend: search, description: d, parameters: {type: string}}\n"
    assert _codes(text, tmp_path) == ["schema-not-object"]


def test_edge_parameters_checked_as_json_schema(tmp_path: Path):
    edges = "[{from: a, to: b, as: ask_b, parameters: {type: object, properties: {subtask: {type: string}}, required: subtask}}]"
    (issue,) = check_text(_two_roles(edges=edges), base_dir=tmp_path).issues
    assert issue.code == "invalid-json-schema" and issue.path == "edges[0].parameters.required"


def test_edge_without_subtask_to_default_user_warns(tmp_path: Path):
    edges = "[{from: a, to: b, as: ask_b, parameters: {type: object, properties: {q: {type: string}}}}]"
    check = check_text(_two_roles(edges=edges), base_dir=tmp_path)
    assert check.ok and [i.code for i in check.issues] == ["missing-subtask"]


def test_template_file_with_include_checks_variables(tmp_path: Path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.j2").write_text('Hello.\n{% include "prompts/part.j2" %}\n')
    (tmp_path / "prompts" / "part.j2").write_text("{{ tool_instructions }} {{ colour }}\n")
    text = HEAD + "roles:\n  a: {system: prompts/sys.j2}\n"
    (issue,) = check_text(text, base_dir=tmp_path).issues
    assert issue.code == "undefined-template-variable" and "'colour'" in issue.message


def test_template_syntax_error_in_file_names_line(tmp_path: Path):
    (tmp_path / "s.j2").write_text("ok\n{% if %}\n")
    (issue,) = check_text(HEAD + "roles:\n  a: {system: s.j2}\n", base_dir=tmp_path).issues
    assert issue.code == "template-syntax" and "line 2" in issue.message


def test_examples_file_is_loaded_and_checked(tmp_path: Path):
    demo = [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]]
    (tmp_path / "demos.json").write_text(json.dumps(demo))
    assert check_text(HEAD + "roles:\n  a: {system: hi, examples: demos.json}\n", base_dir=tmp_path).ok
    (tmp_path / "demos.json").write_text(json.dumps([[{"role": "robot", "content": "x"}]]))
    (issue,) = check_text(HEAD + "roles:\n  a: {system: hi, examples: demos.json}\n", base_dir=tmp_path).issues
    assert issue.code == "invalid-examples" and "demos.json" in issue.message


@pytest.mark.parametrize("name", ["missing.yaml", "../outside.yaml"])
def test_examples_file_must_exist_inside_folder(tmp_path: Path, name: str):
    base = tmp_path / "g"
    base.mkdir()
    (tmp_path / "outside.yaml").write_text("[]")
    (issue,) = check_text(HEAD + f"roles:\n  a: {{system: hi, examples: '{name}'}}\n", base_dir=base).issues
    assert issue.code == "invalid-examples"


def _msgs(*pairs: tuple[str, str]) -> list[ExampleMessage]:
    return [ExampleMessage(role=r, content=c) for r, c in pairs]  # type: ignore[arg-type]


def test_validate_examples_accepts_a_call_and_its_result():
    call = '<tool_call>{"name": "web_search", "arguments": {"query": "x"}}</tool_call>'
    demo = _msgs(("user", "q"), ("assistant", call), ("tool", "result"), ("assistant", "done"))
    assert validate_examples([demo], fmt="hermes", allowed=["web_search"]) == []


@pytest.mark.parametrize(
    ("demo", "fragment"),
    [
        ([("assistant", "hi")], "starts with a user message"),
        ([("user", "q"), ("user", "q2"), ("assistant", "a")], "two user messages"),
        ([("user", "q"), ("tool", "r"), ("assistant", "a")], "tool message must follow"),
        ([("user", "q"), ("assistant", "no call"), ("tool", "r"), ("assistant", "a")], "tool message must follow"),
        ([("user", "q"), ("assistant", '<tool_call>{"name": "nope", "arguments": {}}</tool_call>'), ("tool", "r"), ("assistant", "a")], "cannot call"),
        ([("user", "q"), ("assistant", "<tool_call>{not json</tool_call>"), ("tool", "r"), ("assistant", "a")], "malformed tool call"),
        ([("user", "q")], "ends with an assistant message"),
    ],
)
def test_validate_examples_rejects_malformed_demos(demo: list[tuple[str, str]], fragment: str):
    problems = validate_examples([_msgs(*demo)], fmt="hermes", allowed=["web_search"])
    assert any(fragment in message for _, message in problems), problems
