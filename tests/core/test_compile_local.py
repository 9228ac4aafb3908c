"""Compiling graphs to Program + CreditPlan: content, determinism, self-contained output, drawings."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from matpo_graph.compilers.local import (
    GRAPH_COPY_FILE,
    compile_graph,
    load_program,
    write_compiled,
)
from matpo_graph.compilers.mermaid import to_mermaid
from matpo_graph.core.errors import GraphError
from matpo_graph.core.loader import check_text, load_graph
from matpo_graph.core.spec import Graph
from matpo_graph.core.templates import BUILTIN_TEMPLATES

REPO = Path(__file__).resolve().parents[2]
GRAPHS = REPO / "graphs"
DEEP = GRAPHS / "deep_search.yaml"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("path", sorted(GRAPHS.glob("*.yaml")), ids=lambda p: p.stem)
def test_compile_twice_gives_identical_bytes(path: Path, tmp_path: Path):
    graph = load_graph(path)
    write_compiled(graph, path.parent, tmp_path / "one")
    write_compiled(load_graph(path), path.parent, tmp_path / "two")
    one, two = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert set(one) == {"program.json", "credit_plan.json", "graph.mmd", "graph.yaml"}
    assert one == two
    assert str(REPO).encode() not in b"".join(one.values())  # no absolute paths


def test_compile_deep_search_callables_and_templates():
    program, _ = compile_graph(load_graph(DEEP), GRAPHS)
    planner, browser = program.roles["planner"], program.roles["browser"]
    assert [(c.name, c.kind, c.target) for c in planner.callables] == [("search_and_browse", "child", "browser")]
    assert planner.callables[0].parameters["required"] == ["subtask"]
    assert planner.callables[0].max_parallel == 4 and planner.callables[0].max_result_chars == 1200
    assert [(c.name, c.kind) for c in browser.callables] == [("web_search", "tool"), ("scrape", "tool")]
    assert planner.system.origin == "prompts/planner.j2"
    assert planner.user.origin == "builtin:root_user" and planner.user.source == BUILTIN_TEMPLATES["root_user"]
    assert planner.summary.origin == "builtin:summary"
    assert browser.user.origin == "prompts/browser_task.j2"
    for role in program.roles.values():
        for t in (role.system, role.user, role.summary):
            assert t.sha256 == hashlib.sha256(t.source.encode()).hexdigest()
    assert set(program.tools) == {"web_search", "scrape"}
    assert (program.max_depth, program.context_tokens, program.tool_call_format) == (2, 4096, "hermes")


def test_compile_child_without_user_gets_builtin_recap(tmp_path: Path):
    text = "name: g\nroot: a\nroles:\n  a: {system: hi}\n  b: {system: hi}\nedges: [{from: a, to: b, as: ask}]\n"
    graph = check_text(text, base_dir=tmp_path).graph
    assert graph is not None
    program, _ = compile_graph(graph, tmp_path)
    assert program.roles["b"].user.origin == "builtin:child_user"
    assert "root_query" in program.roles["b"].user.source


def test_compile_credit_plan_fields():
    _, plan = compile_graph(load_graph(DEEP), GRAPHS)
    assert plan.root == "planner" and plan.strategy == "broadcast" and plan.loss_agg == "tree_token_mean"
    assert (plan.group_size, plan.accuracy_weight, plan.format_weight) == (4, 0.9, 0.1)
    assert plan.answer_format == "boxed" and plan.accuracy_scorer == "exact_match" and plan.judge is None
    assert plan.trained_roles == ["browser", "planner"]
    assert plan.calling_roles == ["browser", "planner"]


def test_load_program_from_folder_equals_from_yaml(tmp_path: Path):
    write_compiled(load_graph(DEEP), GRAPHS, tmp_path)
    assert load_program(tmp_path) == load_program(DEEP)


def test_load_program_rejects_incomplete_folder(tmp_path: Path):
    with pytest.raises(GraphError, match="program.json"):
        load_program(tmp_path)


def test_graph_hash_follows_template_files(tmp_path: Path):
    shutil.copytree(GRAPHS, tmp_path / "g")
    before, _ = load_program(tmp_path / "g" / "deep_search.yaml")
    prompt = tmp_path / "g" / "prompts" / "browser.j2"
    prompt.write_text(prompt.read_text() + "Be brief.\n")
    after, _ = load_program(tmp_path / "g" / "deep_search.yaml")
    assert before.graph_sha256 != after.graph_sha256
    assert before.roles["browser"].system.sha256 != after.roles["browser"].system.sha256
    assert before.roles["planner"].system == after.roles["planner"].system


def test_normalised_copy_is_a_standalone_equivalent_graph(tmp_path: Path):
    graph = load_graph(DEEP)
    write_compiled(graph, GRAPHS, tmp_path)
    copy = load_graph(tmp_path / GRAPH_COPY_FILE)  # templates inlined: no prompt files needed
    original, _ = compile_graph(graph, GRAPHS)
    again, _ = compile_graph(copy, tmp_path)
    for name, role in original.roles.items():
        assert again.roles[name].system.source == role.system.source
        assert again.roles[name].callables == role.callables
    assert again.tools == original.tools


def test_compile_graph_refuses_semantically_invalid_graph(tmp_path: Path):
    graph = Graph.model_validate({"name": "g", "root": "a", "roles": {"a": {"system": "hi", "tools": ["ghost"]}}})
    with pytest.raises(GraphError) as info:
        compile_graph(graph, tmp_path)
    assert info.value.codes() == ["unknown-tool"]


def test_mermaid_draws_roles_tools_and_edges():
    text = to_mermaid(load_graph(GRAPHS / "two_workers.yaml"))
    assert "flowchart TD\n" in text
    assert '"planner (root)' in text and '"calculate<br/>backend: python"' in text
    assert text.count("-->|") == 2 and text.count("-.->") == 3


def test_compile_resolves_examples_file(tmp_path: Path):
    (tmp_path / "demos.yaml").write_text("- - {role: user, content: 'Who?'}\n  - {role: assistant, content: 'Ada.'}\n")
    text = "name: g\nroot: a\nroles:\n  a: {system: hi, examples: demos.yaml}\n"
    graph = check_text(text, base_dir=tmp_path).graph
    assert graph is not None
    program, _ = compile_graph(graph, tmp_path)
    assert program.roles["a"].examples == [[{"role": "user", "content": "Who?"}, {"role": "assistant", "content": "Ada."}]]
