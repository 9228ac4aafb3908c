"""Adversarial fuzzing of graph files: aliases, depth, size, unicode, wrong types and template operators.

Whatever a stranger writes, validation gives a verdict (valid, or errors with positions) within a time
bound and never raises; a graph that validates also compiles, and its templates render with the
runtime's variables under the runtime's limits.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from matpo_graph.compilers.local import compile_graph
from matpo_graph.core.errors import GraphError
from matpo_graph.core.loader import check_text
from matpo_graph.core.templates import render
from matpo_graph.core.trust import TrustPolicy
from matpo_graph.core.validate import Partial, sample_variables

REPO = Path(__file__).resolve().parents[2]
GRAPHS = REPO / "graphs"
BASES = {p.name: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(GRAPHS.glob("*.yaml"))}
NO_TRUST = TrustPolicy()
CHECK_SECONDS = 30.0  # validation's own render budget is 10 s; the rest is a generous margin for a busy machine

# --------------------------------------------------------------------------- template fragments

NUMBERS = st.sampled_from([0, 1, 2, 7, 64, 999, 10**5, 10**6, 10**9, 10**12, -1, -(10**9)])
SHORT = st.sampled_from(['"x"', '"ab"', "question", "role", "tool_names", "tools", "args", "subtask", "[1, 2]", "range(3)"])


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 2 or draw(st.booleans()):
        return draw(SHORT) if draw(st.booleans()) else str(draw(NUMBERS))
    left, right = draw(expressions(depth + 1)), draw(expressions(depth + 1))
    form = draw(st.sampled_from([
        "({a} ** {b})", "({a} * {b})", "({a} ~ {b})", "({a} + {b})", '("%{n}d" % {a})', '"{{:>{n}}}".format({a})',
        "({a} | center({n}))", "({a} | join({b}))", "({a} | wordwrap({n}, wrapstring={b}))", "({a} | indent({n}))",
        "({a} | replace(\"\", {b}))", "({a} | batch({n}, {b}) | list)", "range({n}) | list", "({a}[{n}:])",
        "({a} | string | length)", "({a}).ljust({n})", "({a} | tojson(indent={n}))", "lipsum({n})",
        # format widths taken from arguments, %-format keys with parentheses, tabs and translations
        '"{{0:{{1}}}}".format({a}, {n})', '"{{:.{{}}f}}".format(1.0, {n})', '("%(k(1))" ~ "{n}s") % {{"k(1)": {a}}}',
        '("\\t" * {n}).expandtabs({n})', '({a} | string).translate({{120: "y" * {n}}})', "[{a}, {a}] | string",
    ]))
    return form.format(a=left, b=right, n=draw(NUMBERS))


@st.composite
def templates(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["expr", "loop", "macro", "set", "double", "text", "tag", "unicode"]))
        if kind == "expr":
            parts.append("{{ " + draw(expressions()) + " }}")
        elif kind == "loop":
            n, m = draw(NUMBERS), draw(NUMBERS)
            parts.append(f"{{% for i in range({n}) %}}{{% for j in range({m}) %}}{{{{ {draw(expressions())} }}}}{{% endfor %}}{{% endfor %}}")
        elif kind == "macro":
            parts.append("{% macro f(s, n) %}{% if n > 0 %}{{ f(s ~ s, n - 1) }}{% else %}{{ s | length }}{% endif %}{% endmacro %}"
                         f"{{{{ f({draw(SHORT)}, {draw(NUMBERS)}) }}}}")
        elif kind == "set":
            parts.append("{% set ns = namespace(v=" + draw(SHORT) + ") %}{% for i in range(" + str(draw(NUMBERS)) + ") %}"
                         "{% set ns.v = ns.v ~ ns.v %}{% endfor %}{{ ns.v | length }}")
        elif kind == "double":  # a structure doubled by reference: tiny in memory, 2^n nodes for C code to walk
            wrap = draw(st.sampled_from(["[ns.a, ns.a]", "(ns.a, ns.a)", '{"x": ns.a, "y": ns.a}', "[ns.a] * 2", "[ns.a] + [ns.a]"]))
            use = draw(st.sampled_from(["ns.a == ns.a", "ns.a | tojson | length", "ns.a | string | length", "[ns.a, ns.a] | sort",
                                        "{ns.a | string: 1} | length", "ns.a"]))
            parts.append("{% set ns = namespace(a=(1,)) %}{% for i in range(" + str(draw(st.sampled_from([3, 20, 64])))
                         + ") %}{% set ns.a = " + wrap + " %}{% endfor %}{{ " + use + " }}")
        elif kind == "tag":
            parts.append(draw(st.sampled_from([
                '{% include "prompts/task.j2" %}', '{% import "prompts/task.j2" as t %}', '{% extends "prompts/task.j2" %}',
                '{% from "prompts/task.j2" import x %}', '{% include "../../etc/passwd" %}', "{% raw %}{{ x }}{% endraw %}",
                "{{ question.__class__ }}", "{{ tools.append(1) }}", "{{ undefined_thing }}", "{% if %}", "{{ 1/0 }}",
            ])))
        elif kind == "unicode":
            parts.append(draw(st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)))
        else:
            parts.append("{{ question }} plain text")
    return "".join(parts)


# --------------------------------------------------------------------------- data mutations

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=True) | st.text(max_size=20),
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


def _set(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


@st.composite
def mutated_data(draw: st.DrawFn) -> Any:
    data: Any = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)), label="base")])
    for _ in range(draw(st.integers(1, 3), label="n")):
        op = draw(st.sampled_from(["template", "template", "wrong_type", "deep", "size", "unicode", "code", "address"]), label="op")
        roles = list(data["roles"]) if isinstance(data, dict) and isinstance(data.get("roles"), dict) else []
        if op == "template" and roles:
            role = draw(st.sampled_from(roles))
            part = draw(st.sampled_from(["system", "user", "summary_prompt"]))
            if isinstance(data["roles"][role], dict):
                data["roles"][role][part] = {"text": draw(templates())}
            continue
        path = draw(st.sampled_from(_paths(data)), label="path")
        if op == "wrong_type":
            data = _set(data, path, draw(JSONISH))
        elif op == "deep":
            value: Any = _get(data, path)
            for _ in range(draw(st.integers(1, 120))):
                value = [value] if draw(st.booleans()) else {"k": value}
            data = _set(data, path, value)
        elif op == "size":
            data = _set(data, path, "x" * draw(st.sampled_from([10, 10_000, 300_000, 1_200_000])))
        elif op == "unicode":
            text = draw(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40))
            data = _set(data, path, text)
        elif op == "address":  # loopback and private addresses in the spellings a resolver accepts, other schemes
            endpoint = draw(st.sampled_from(["http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://127.1/",
                                             "http://[64:ff9b::7f00:1]/", "HTTP://10.1/", "file:///etc/passwd", "gopher://x/",
                                             "data:,x", ["https://a.example"], 123]))
            where = draw(st.sampled_from(["search", "judge", "scrape"]))
            if where == "search":
                value: Any = {"backend": "search", "description": "d", "config": {"endpoint": endpoint, "api_key_env": None}}
            elif where == "scrape":
                value = {"backend": "scrape", "description": "d", "config": {"allow_hosts": draw(st.sampled_from([{"a": 1}, [8080], endpoint]))}}
            else:
                value = {"accuracy": {"scorer": "judge", "judge": {"endpoint": endpoint, "model": "m"}}}
            data = _set(data, path, value)
        else:  # code, secrets and endpoints a stranger might name, and code references that are not identifiers
            data = _set(data, path, draw(st.sampled_from([
                {"backend": "python", "description": "d", "config": {"function": "os:system"}},
                {"backend": "python", "description": "d", "config": {"function": "os..path:join"}},
                {"backend": "search", "description": "d", "config": {"endpoint": "http://169.254.169.254/", "api_key_env": "HOME"}},
                {"backend": "search", "description": "d", "parameters": {"type": "object", "properties": {"q": {"$ref": "http://127.0.0.1:9/s.json"}}},
                 "config": {"endpoint": "embedded"}},
                "subprocess:run", "builtins:eval", "os.:system", "pkg.1sub:run",
            ])))
    return data


@st.composite
def mutated_text(draw: st.DrawFn) -> str:
    data = draw(mutated_data())
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    op = draw(st.sampled_from(["none", "aliases", "alias_bomb", "alias_bytes", "tags", "bytes"]), label="text_op")
    if op == "aliases":  # anchor the first mapping value and reuse it everywhere
        text = "x-anchor: &a {k: [1, 2, 3]}\n" + text + "x-uses: [" + ", ".join(["*a"] * draw(st.integers(1, 50))) + "]\n"
    elif op == "alias_bomb":
        levels = draw(st.integers(2, 10))
        bomb = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
        bomb += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
        text = "\n".join(bomb) + "\n" + text
    elif op == "alias_bytes":  # one long string anchored once, repeated by many aliases: few nodes, many bytes
        size, uses = draw(st.sampled_from([(1000, 50), (100_000, 30), (400_000, 12), (880_000, 900)]))
        text = "x-big: &big " + "y" * size + "\nx-uses: [" + ", ".join(["*big"] * uses) + "]\n" + text
    elif op == "tags":
        text = text.replace("name:", "name: !!python/object/apply:os.system ['true']\nx-name:", 1)
    elif op == "bytes":
        cut = draw(st.integers(0, max(len(text) - 1, 0)))
        text = text[:cut] + draw(st.sampled_from(["\x00", "\x1b[2J", "\ufeff", "\u202e", "\t", "&", "*", "!!", "{{", "%"])) + text[cut:]
    return text


# --------------------------------------------------------------------------- the properties


def _verdict(text: str):
    started = time.monotonic()
    result = check_text(text, base_dir=GRAPHS, file="fuzz.yaml", trust=NO_TRUST)  # never raises
    elapsed = time.monotonic() - started
    assert elapsed < CHECK_SECONDS, f"validation took {elapsed:.1f}s"
    for issue in result.issues:
        assert issue.line is not None and issue.code, issue
        assert isinstance(issue.render("fuzz.yaml"), str)
    return result


def _compiles_and_renders(result) -> None:
    if not result.ok:
        assert any(i.severity == "error" for i in result.issues)
        return
    program, _ = compile_graph(result.graph, GRAPHS, trust=NO_TRUST)  # raises only GraphError, which fails the test
    warned = {i.path for i in result.issues if i.code == "template-render"}
    partial = Partial.from_graph(result.graph)
    for name, role in program.roles.items():
        variables = sample_variables(partial, name)
        for part, template in (("system", role.system), ("user", role.user), ("summary_prompt", role.summary)):
            if f"roles.{name}.{part}" not in warned:
                assert isinstance(render(template.source, variables), str)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated_text())
def test_fuzzed_graph_gets_a_verdict_and_valid_means_it_compiles_and_renders(text: str):
    _compiles_and_renders(_verdict(text))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(BASES)), templates())
def test_fuzzed_template_in_a_valid_graph(base: str, template: str):
    data = copy.deepcopy(BASES[base])
    role = data["root"]
    data["roles"][role]["system"] = {"text": template}
    _compiles_and_renders(_verdict(yaml.safe_dump(data, sort_keys=False, allow_unicode=True)))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutated_text())
def test_fuzzed_graph_through_the_cli_exits_0_or_1_without_a_traceback(tmp_path_factory, text: str):
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    (folder / "prompts").mkdir()
    for prompt in (GRAPHS / "prompts").iterdir():
        (folder / "prompts" / prompt.name).write_text(prompt.read_text(encoding="utf-8"), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "matpo_graph", "validate", str(path)], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout


def test_graph_error_is_the_only_exception_of_compile():
    # a graph object built in code (not loaded) with a hostile template: compile gives a GraphError
    data = copy.deepcopy(BASES["deep_search.yaml"])
    data["roles"]["planner"]["system"] = {"text": '{{ "x" * 10 ** 10 }}'}
    from matpo_graph.core.spec import Graph

    graph = Graph.model_validate(data)
    try:
        compile_graph(graph, GRAPHS, trust=NO_TRUST)
    except GraphError as exc:
        assert "template-limit" in exc.codes()
    else:  # pragma: no cover
        raise AssertionError("compile accepted a template that exceeds the limits")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["fifo", "directory", "device", "fifo include"]))
def test_paths_that_are_not_regular_files_get_a_verdict_at_once(tmp_path_factory, kind: str):
    import os

    folder = tmp_path_factory.mktemp("special")
    path = folder / "g.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        os.mkfifo(folder / "p.j2")
        path.write_text("name: g\nroot: a\nroles:\n  a:\n    system: {file: p.j2}\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "matpo_graph", "validate", str(path)], capture_output=True, text=True,
                         cwd=REPO, timeout=30)
    assert out.returncode == 1 and (":1:1 " in out.stderr or ":5:" in out.stderr), out.stderr
    assert "Traceback" not in out.stderr
