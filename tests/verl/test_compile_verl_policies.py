"""The veRL target and per-role policies: shared compiles as before, lora and separate are compile errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")

from matpo_graph.compilers.local import compile_graph  # noqa: E402
from matpo_graph.compilers.verl import VerlCompileError, compile_verl_bundle  # noqa: E402
from matpo_graph.core.loader import load_graph  # noqa: E402

from verl_helpers import TINY_GRAPH  # noqa: E402

pytestmark = pytest.mark.verl


def _variant(tmp_path: Path, policies: dict, bindings: dict[str, str]) -> Path:
    data = yaml.safe_load(TINY_GRAPH.read_text())
    data["policies"] = policies
    for role, policy in bindings.items():
        data["roles"][role]["policy"] = policy
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _bundle(path: Path, out: Path):  # type: ignore[no-untyped-def]
    graph = load_graph(path)
    program, plan = compile_graph(graph, path.parent)
    return compile_verl_bundle(graph, program, plan, out, graph_path=path)


def _roles() -> list[str]:
    return list(yaml.safe_load(TINY_GRAPH.read_text())["roles"])


def test_compile_verl_declared_shared_policy_compiles_as_before(tmp_path: Path) -> None:
    plain = _bundle(TINY_GRAPH, tmp_path / "plain")
    path = _variant(tmp_path, {"base": {"kind": "shared"}}, {r: "base" for r in _roles()})
    named = _bundle(path, tmp_path / "named")
    assert named.overrides == plain.overrides
    assert named.launch.read_text().replace("variant.yaml", TINY_GRAPH.name) == plain.launch.read_text()


@pytest.mark.parametrize(
    ("spec", "kind"),
    [({"kind": "lora", "rank": 4}, "lora"), ({"kind": "separate", "model": "smollm2-135m-instruct"}, "separate")],
)
def test_compile_verl_lora_and_separate_policies_are_errors_naming_the_option(tmp_path: Path, spec: dict, kind: str) -> None:
    child = _roles()[-1]
    path = _variant(tmp_path, {"mine": spec}, {child: "mine"})
    with pytest.raises(VerlCompileError) as info:
        _bundle(path, tmp_path / "b")
    (issue,) = [i for i in info.value.issues if i.path.startswith("policies.")]
    assert issue.path == "policies.mine.kind" and issue.line is not None
    assert f"is {kind}" in issue.message and "veRL 0.9.1 trains one actor" in issue.message and child in issue.message
    assert "local trainer" in (issue.hint or "")
    assert not (tmp_path / "b" / "launch.sh").exists()
