"""Per-role policies in the DSL: validation with file:line, defaults, compiled bindings, old files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matpo_graph.compilers.local import compile_graph, load_program, write_compiled
from matpo_graph.core.loader import check_text, load_graph
from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.rollout import RolloutTree, Trajectory, read_trees

REPO = Path(__file__).resolve().parents[2]
HEAD = "name: g\nroot: a\nroles:\n  a: {system: hi%s}\n  b: {system: hi%s}\n  c: {system: hi%s}\nedges: [{from: a, to: b, as: x}, {from: a, to: c, as: y}]\n"


def _graph(a: str = "", b: str = "", c: str = "", policies: str = "") -> str:
    return HEAD % (a, b, c) + (f"policies:\n{policies}" if policies else "")


def _issues(text: str, base: Path) -> list[tuple[str, str, int | None, str]]:
    return [(i.code, i.path, i.line, i.severity) for i in check_text(text, base_dir=base).issues]


def test_policies_graph_without_section_binds_every_role_to_shared(tmp_path: Path) -> None:
    check = check_text(_graph(), base_dir=tmp_path)
    assert check.ok and check.graph is not None
    program, plan = compile_graph(check.graph, tmp_path)
    assert program.role_policies() == {"a": "shared", "b": "shared", "c": "shared"}
    assert list(program.policies) == ["shared"] and program.policies["shared"].kind == "shared"
    assert plan.role_policies == {"a": "shared", "b": "shared", "c": "shared"}


def test_policies_named_lora_group_and_defaults_filled_in(tmp_path: Path) -> None:
    text = _graph(", policy: planner", ", policy: workers", ", policy: workers",
                  "  planner: {kind: lora, rank: 4, target_modules: [q_proj, v_proj]}\n  workers: {kind: lora}\n")
    check = check_text(text, base_dir=tmp_path)
    assert check.ok and check.graph is not None, check.issues
    program, plan = compile_graph(check.graph, tmp_path)
    assert plan.role_policies == {"a": "planner", "b": "workers", "c": "workers"}
    workers = program.policies["workers"]
    assert (workers.rank, workers.alpha, workers.dropout, workers.target_modules) == (8, 16.0, 0.0, "all-linear")
    planner = program.policies["planner"]
    assert (planner.rank, planner.alpha, planner.target_modules) == (4, 8.0, ["q_proj", "v_proj"])
    assert "shared" in program.policies  # the base model is always there


def test_policies_declared_shared_policy_is_the_default(tmp_path: Path) -> None:
    text = _graph(c=", policy: judge", policies="  base: {kind: shared}\n  judge: {kind: separate, model: smollm2-135m-instruct}\n")
    check = check_text(text, base_dir=tmp_path)
    assert check.ok and check.graph is not None, check.issues
    program, plan = compile_graph(check.graph, tmp_path)
    assert plan.role_policies == {"a": "base", "b": "base", "c": "judge"}
    assert sorted(program.policies) == ["base", "judge"]
    assert program.policies["judge"].requires_base_tokenizer and program.policies["judge"].model == "smollm2-135m-instruct"


def test_policies_unknown_reference_points_at_the_role_line(tmp_path: Path) -> None:
    text = _graph(b=", policy: wrokers", policies="  workers: {kind: lora}\n")
    issues = _issues(text, tmp_path)
    assert ("unknown-policy", "roles.b.policy", 5, "error") in issues
    (unknown,) = [i for i in check_text(text, base_dir=tmp_path).issues if i.code == "unknown-policy"]
    assert unknown.hint == "did you mean 'workers'?"


def test_policies_unused_policy_is_a_warning_at_its_key(tmp_path: Path) -> None:
    check = check_text(_graph(policies="  spare: {kind: lora}\n"), base_dir=tmp_path)
    assert check.ok
    assert [(i.code, i.path, i.line, i.col, i.severity) for i in check.issues] == [("unused-policy", "policies.spare", 9, 3, "warning")]


def test_policies_fields_of_another_kind_are_errors_at_their_line(tmp_path: Path) -> None:
    text = _graph(a=", policy: p", b=", policy: q",
                  policies="  p: {kind: lora, model: x}\n  q: {kind: separate, model: m, rank: 4, alpha: 2}\n")
    got = {(code, path, line) for code, path, line, _ in _issues(text, tmp_path)}
    assert got == {("invalid-value", "policies.p.model", 9), ("invalid-value", "policies.q.rank", 10), ("invalid-value", "policies.q.alpha", 10)}


def test_policies_lr_is_a_lora_or_separate_field_and_compiles(tmp_path: Path) -> None:
    text = _graph(a=", policy: p", b=", policy: q", c=", policy: r",
                  policies="  p: {kind: lora, lr: 1.0e-4}\n  q: {kind: separate, model: m, lr: 3.0e-6}\n  r: {kind: lora}\n")
    check = check_text(text, base_dir=tmp_path)
    assert check.ok and check.graph is not None, check.issues
    program, _ = compile_graph(check.graph, tmp_path)
    assert (program.policies["p"].lr, program.policies["q"].lr, program.policies["r"].lr) == (1e-4, 3e-6, None)
    assert program.policies["shared"].lr is None  # the shared model trains at the run's lr
    shared = _graph(policies="  base: {kind: shared, lr: 1.0e-4}\n")
    (issue,) = [i for i in check_text(shared, base_dir=tmp_path).issues if i.severity == "error"]
    assert (issue.code, issue.path, issue.line) == ("invalid-value", "policies.base.lr", 9)
    assert "run's lr" in issue.message and "--lr" in (issue.hint or "")


@pytest.mark.parametrize(
    ("policies", "code", "path"),
    [
        ("  p: {kind: separate}\n", "missing-key", "policies.p"),
        ("  p: {kind: separate, model: '  '}\n", "missing-key", "policies.p.model"),
        ("  p: {kind: lora, target_modules: []}\n", "invalid-value", "policies.p.target_modules"),
        ("  p: {kind: lora, rank: 0}\n", "out-of-range", "policies.p.rank"),
        ("  p: {kind: lora, dropout: 1.0}\n", "out-of-range", "policies.p.dropout"),
        ("  p: {kind: lora, lr: 0}\n", "out-of-range", "policies.p.lr"),
        ("  p: {kind: lorra}\n", "invalid-value", "policies.p.kind"),
        ("  p: {kind: lora, ranks: 4}\n", "unknown-key", "policies.p.ranks"),
        ("  p: {rank: 4}\n", "missing-key", "policies.p.kind"),
        ("  '9p': {kind: lora}\n", "invalid-name", "policies"),
    ],
)
def test_policies_invalid_fields(tmp_path: Path, policies: str, code: str, path: str) -> None:
    text = _graph(a=", policy: p" if "'9p'" not in policies else "", policies=policies)
    issues = check_text(text, base_dir=tmp_path).issues
    assert (code, path) in {(i.code, i.path) for i in issues}, [i.render() for i in issues]
    assert all(i.line is not None for i in issues)


def test_policies_second_shared_and_reserved_name_collide(tmp_path: Path) -> None:
    text = _graph(a=", policy: base", b=", policy: other", c=", policy: shared",
                  policies="  base: {kind: shared}\n  other: {kind: shared}\n  shared: {kind: lora}\n")
    got = {(code, path) for code, path, _, _ in _issues(text, tmp_path)}
    assert ("name-collision", "policies.other.kind") in got and ("name-collision", "policies.shared") in got


def test_policies_every_issue_of_the_bad_fixture_has_a_line() -> None:
    path = REPO / "tests" / "fixtures" / "bad" / "bad_policies.yaml"
    issues = check_text(path.read_text(), base_dir=path.parent, file=str(path)).issues
    assert {i.code for i in issues} >= {"unknown-policy", "unused-policy", "missing-key", "name-collision"}
    assert all(i.line is not None and i.col is not None for i in issues)


def test_policies_compiled_folder_round_trips(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text(_graph(b=", policy: w", c=", policy: w", policies="  w: {kind: lora, rank: 2}\n"))
    program, plan = write_compiled(load_graph(tmp_path / "g.yaml"), tmp_path, tmp_path / "out")
    again, plan2 = load_program(tmp_path / "out")
    assert again == program and plan2 == plan


def test_policies_program_and_plan_written_before_policies_still_load() -> None:
    program, plan = load_program(REPO / "graphs" / "deep_search.yaml")
    old_program = json.loads(program.model_dump_json())
    old_program.pop("policies")
    for role in old_program["roles"].values():
        role.pop("policy")
    old_plan = json.loads(plan.model_dump_json())
    old_plan.pop("role_policies")
    p, c = Program.model_validate(old_program), CreditPlan.model_validate(old_plan)
    assert set(p.role_policies().values()) == {"shared"} and list(p.policies) == ["shared"]
    assert c.role_policies == {}


def test_policies_old_rollout_files_read_as_shared() -> None:
    trees = read_trees(REPO / "tests" / "fixtures" / "rollouts" / "known_step.jsonl")
    assert trees and all(t.policy == "shared" and t.adapter is None for tree in trees for t in tree.trajectories)
    t = Trajectory(traj_id="0", role="a", depth=0, policy="w", adapter="w@3")
    back = RolloutTree.model_validate_json(RolloutTree(tree_id="t", group_id="g", question="q", trajectories=[t]).model_dump_json())
    assert (back.root.policy, back.root.adapter) == ("w", "w@3")


def test_policies_shipped_graphs_are_unchanged_bindings() -> None:
    for path in sorted((REPO / "graphs").glob("*.yaml")):
        program, plan = load_program(path)
        if path.stem == "deep_search_adapters":  # the per-role example: one adapter per role
            assert plan.role_policies == {"planner": "planner_adapter", "browser": "browser_adapter"}
            assert program.policies["planner_adapter"].kind == "lora"
            continue
        assert set(plan.role_policies.values()) == {"shared"}, path
        assert {p.kind for p in program.policies.values()} == {"shared"}
