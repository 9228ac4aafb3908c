"""Property tests: valid graphs survive YAML round trips; mutated files give a GraphError, never a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from matpo_graph.core.errors import GraphError
from matpo_graph.core.loader import check_text
from matpo_graph.core.trust import TrustPolicy

REPO = Path(__file__).resolve().parents[2]
GRAPHS = REPO / "graphs"
GRAPH_TEXTS = {p.name: p.read_text(encoding="utf-8") for p in sorted(GRAPHS.glob("*.yaml"))}

NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
PLAIN_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="{}%#"), max_size=40)
TEMPLATES = st.sampled_from(
    [
        "Answer: {{ question }}",
        "{{ tool_instructions }}\n{{ answer_instructions }}",
        "{% for t in tools %}{{ t.name }}: {{ t.description }}\n{% endfor %}",
        "{% if depth > 0 %}Task: {{ subtask }} (for {{ parent_role }}){% else %}{{ root_query }}{% endif %}",
    ]
) | PLAIN_TEXT.filter(lambda s: s.strip() != "")
PARAMS = st.sampled_from(
    [
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        {"type": "object", "properties": {}},
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "additionalProperties": False},
    ]
)
SMALL_FLOAT = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def _tool() -> st.SearchStrategy[dict[str, Any]]:
    backend = st.sampled_from(["search", "scrape", "python"])
    return backend.flatmap(
        lambda b: st.fixed_dictionaries(
            {"backend": st.just(b), "description": PLAIN_TEXT, "config": st.just({"function": "pkg.mod:fn"} if b == "python" else {"endpoint": "embedded"})},
            optional={
                "parameters": PARAMS,
                "timeout_s": st.floats(min_value=0.5, max_value=600, allow_nan=False),
                "retries": st.integers(0, 10),
                "max_output_chars": st.integers(64, 100_000),
            },
        )
    )


@st.composite
def valid_graphs(draw: st.DrawFn) -> dict[str, Any]:
    roles = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    tools = draw(st.lists(NAMES.map(lambda n: "t_" + n), max_size=3, unique=True))
    edges = []
    for i, child in enumerate(roles[1:], start=1):  # a tree: every role reachable, no cycle
        parent = draw(st.sampled_from(roles[:i]))
        edge: dict[str, Any] = {"from": parent, "to": child, "as": f"call_{child}"}
        edge.update(draw(st.fixed_dictionaries({}, optional={"description": PLAIN_TEXT, "max_parallel": st.integers(1, 256)})))
        edges.append(edge)
    role_specs = {}
    for name in roles:
        spec: dict[str, Any] = {"system": {"text": draw(TEMPLATES)}}
        spec.update(
            draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "description": PLAIN_TEXT,
                        "user": st.builds(lambda t: {"text": t}, TEMPLATES),
                        "tools": st.lists(st.sampled_from(tools), unique=True) if tools else st.just([]),
                        "max_turns": st.integers(1, 256),
                        "final_summary": st.sampled_from(["never", "always", "on_overflow"]),
                        "trainable": st.booleans(),
                        "temperature": st.none() | st.floats(min_value=0.0, max_value=5.0, allow_nan=False),
                        "examples": st.just([[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]]),
                    },
                )
            )
        )
        role_specs[name] = spec
    used = {t for s in role_specs.values() for t in s.get("tools", [])}
    graph: dict[str, Any] = {
        "name": draw(NAMES),
        "root": roles[0],
        "roles": role_specs,
        "tools": {t: draw(_tool()) for t in tools if t in used},
        "edges": edges,
    }
    graph.update(
        draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "description": PLAIN_TEXT,
                    "tool_call_format": st.sampled_from(["xml", "hermes"]),
                    "reward": st.fixed_dictionaries(
                        {},
                        optional={
                            "answer_format": st.sampled_from(["boxed", "tag"]),
                            "accuracy": st.fixed_dictionaries({}, optional={"weight": SMALL_FLOAT, "scorer": st.sampled_from(["exact_match", "f1", "numeric"])}),
                            "format": st.fixed_dictionaries({}, optional={"weight": SMALL_FLOAT, "no_call_score": SMALL_FLOAT}),
                        },
                    ),
                    "credit": st.fixed_dictionaries(
                        {},
                        optional={
                            "strategy": st.sampled_from(["broadcast", "root_only", "pkg.mod:fn"]),
                            "group_size": st.integers(1, 64),
                            "loss_agg": st.sampled_from(["tree_token_mean", "token_mean", "seq_mean_token_mean"]),
                        },
                    ),
                    "limits": st.fixed_dictionaries({}, optional={"max_depth": st.integers(1, 16), "context_tokens": st.integers(256, 32768)}),
                },
            )
        )
    )
    return graph


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_graphs())
def test_valid_graph_survives_yaml_model_yaml_model(data: dict[str, Any]):
    trust = TrustPolicy(trusted_code=("pkg.mod",))  # the generated graphs name pkg.mod:fn as their own code
    first = check_text(_dump(data), base_dir=GRAPHS, trust=trust)
    assert first.ok, first.error().render()
    assert first.graph is not None
    dumped = first.graph.to_yaml_dict()
    second = check_text(_dump(dumped), base_dir=GRAPHS, trust=trust)
    assert second.ok, second.error().render()
    assert second.graph == first.graph
    assert second.graph is not None and second.graph.to_yaml_dict() == dumped


def _mutate_text(text: str, data: st.DataObject) -> str:
    lines = text.splitlines(keepends=True)
    for _ in range(data.draw(st.integers(1, 3), label="n_mutations")):
        op = data.draw(st.sampled_from(["delete", "duplicate", "swap", "char", "insert", "indent"]), label="op")
        i = data.draw(st.integers(0, max(len(lines) - 1, 0)), label="line")
        if not lines:
            lines = ["\n"]
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = data.draw(st.integers(0, len(lines) - 1), label="other")
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "char":
            line = lines[i]
            k = data.draw(st.integers(0, max(len(line) - 1, 0)), label="pos")
            ch = data.draw(st.sampled_from(list(":-[]{}'\"#&*!|>%@` \tx0\\")), label="char")
            lines[i] = line[:k] + ch + line[k + 1 :]
        elif op == "insert":
            lines.insert(i, data.draw(st.text(max_size=30), label="text") + "\n")
        else:
            lines[i] = data.draw(st.sampled_from(["", " ", "    ", "\t"]), label="indent") + lines[i].lstrip(" ")
    return "".join(lines)


def _assert_checks_cleanly(text: str) -> None:
    check = check_text(text, base_dir=GRAPHS, file="mutated.yaml")  # must not raise
    if not check.ok:
        err = check.error()
        assert isinstance(err, GraphError) and err.errors
        assert all(isinstance(line, str) for line in err.render().splitlines())


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(GRAPH_TEXTS)), st.data())
def test_mutated_graph_text_is_valid_or_graph_error(name: str, data: st.DataObject):
    _assert_checks_cleanly(_mutate_text(GRAPH_TEXTS[name], data))


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(GRAPH_TEXTS)), st.data())
def test_mutated_graph_structure_is_valid_or_graph_error(name: str, data: st.DataObject):
    tree = yaml.safe_load(GRAPH_TEXTS[name])
    for _ in range(data.draw(st.integers(1, 3), label="n_mutations")):
        path = data.draw(st.sampled_from(_paths(tree)[1:]), label="path")
        parent = tree
        for part in path[:-1]:
            parent = parent[part]
        op = data.draw(st.sampled_from(["replace", "delete", "add_key"]), label="op")
        if op == "replace":
            parent[path[-1]] = data.draw(JSONISH, label="value")
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], dict):
            parent[path[-1]][data.draw(st.text(max_size=10), label="key")] = data.draw(JSONISH, label="value")
    _assert_checks_cleanly(_dump(tree))
