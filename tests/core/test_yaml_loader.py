"""YAML loading with positions: safe semantics, marks per path, duplicate keys, syntax errors."""

from __future__ import annotations

import yaml

from matpo_graph.core.yaml_loader import load_marked

TEXT = """\
name: g
roles:
  planner:
    tools: [a, b]
    system: |
      line one
edges:
  - {from: planner, to: w}
"""


def test_load_marked_equals_safe_load():
    assert load_marked(TEXT).data == yaml.safe_load(TEXT)


def test_load_marked_positions_of_values_and_keys():
    m = load_marked(TEXT)
    assert m.values[("roles", "planner", "tools", 1)] == (4, 16)
    assert m.keys[("roles", "planner")] == (3, 3)
    assert m.values[("edges", 0, "to")] == (8, 25)
    assert m.position(("roles", "planner", "missing_key")) == (4, 5)


def test_load_marked_reports_duplicate_keys():
    m = load_marked("a: 1\nb: 2\na: 3\n")
    assert [(i.code, i.path, i.line) for i in m.issues] == [("duplicate-key", "a", 3)]


def test_load_marked_syntax_error_has_position():
    m = load_marked("a: [1, 2\nb: 3\n")
    assert m.data is None
    (issue,) = m.issues
    assert issue.code == "yaml-syntax" and issue.line is not None and issue.col is not None


def test_load_marked_refuses_python_tags():
    m = load_marked("a: !!python/object/apply:os.system ['true']\n")
    assert m.data is None and m.issues[0].code == "yaml-syntax"


def test_load_marked_empty_document():
    m = load_marked("# only a comment\n")
    assert m.data is None and m.issues == []


def test_load_marked_aliases_and_merges_are_safe():
    m = load_marked("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n")
    assert m.data["other"] == {"x": 1, "y": 2}
    assert m.values[("other", "y")] == (4, 6)


def test_load_marked_recursive_alias_is_refused():
    # a node containing itself cannot be walked, dumped or compiled: refused at load, with its place
    m = load_marked("base: &b {x: 1}\nloop: &l [*l]\n")
    assert m.data is None
    assert [(i.code, i.line) for i in m.issues] == [("yaml-too-complex", 2)]


def test_load_marked_control_character_is_a_syntax_issue():
    m = load_marked("a: 1\nb: \x1f\n")
    assert [(i.code, i.line, i.col) for i in m.issues] == [("yaml-syntax", 2, 4)]
