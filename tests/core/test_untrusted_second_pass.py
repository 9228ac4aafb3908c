"""Graphs from strangers, second pass: each class of input gets the runtime's verdict at validate, quickly.

Schemas that name other resources, templates whose work hides in shared references or in format
arguments, strings multiplied by aliases or files, values the runtime cannot use (non-identifier code
references, numeric address spellings, configs of the wrong type), and paths that are not regular
files. Risky inputs run in a child process under a time and memory limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from matpo_graph.compilers.local import compile_graph, load_program, write_compiled
from matpo_graph.core.errors import GraphError
from matpo_graph.core.loader import check_graph, check_text
from matpo_graph.core.trust import TrustPolicy

REPO = Path(__file__).resolve().parents[2]
NO_TRUST = TrustPolicy()

BASE = {
    "name": "g",
    "root": "a",
    "roles": {"a": {"system": "Answer {{ question }}", "tools": ["t"]}},
    "tools": {"t": {"backend": "python", "description": "calc", "config": {"function": "matpo_graph.tools.builtin:calculate"},
                    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}},
}


def graph(**changes) -> dict:
    data = json.loads(json.dumps(BASE))
    for path, value in changes.items():
        node = data
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return data


def check(data: dict | str, base_dir: Path, seconds: float = 10.0):
    text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
    started = time.monotonic()
    result = check_text(text, base_dir=base_dir, file="g.yaml", trust=NO_TRUST)
    assert time.monotonic() - started < seconds
    assert all(i.line is not None for i in result.issues), result.issues
    return result


def errors(result) -> dict[str, str]:
    return {i.path: i.code for i in result.issues if i.severity == "error"}


def bounded_python(code: str, *, seconds: float = 60.0, memory_mb: int = 1500) -> subprocess.CompletedProcess[str]:
    """Run `code` in a child process with an address-space limit and a wall-clock timeout."""
    prelude = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({memory_mb << 20}, {memory_mb << 20}))\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=REPO, timeout=seconds)


# --------------------------------------------------------------------------- 1. schema references


@pytest.mark.parametrize("ref", ["http://127.0.0.1:18080/secret.json", "file:///etc/hostname", "other.json#/a",
                                 "https://json-schema.org/draft/2020-12/schema", "#anchor"])
@pytest.mark.parametrize("owner", ["tool", "edge"])
def test_schema_references_outside_the_schema_are_located_errors(tmp_path, ref, owner):
    schema = {"type": "object", "properties": {"x": {"$ref": ref}}}
    if owner == "tool":
        data = graph(tools__t__parameters=schema)
        where = "tools.t.parameters.properties.x.$ref"
    else:
        data = graph(roles__b={"system": "hi"}, edges=[{"from": "a", "to": "b", "as": "ask", "parameters": schema}])
        where = "edges[0].parameters.properties.x.$ref"
    assert errors(check(data, tmp_path)) .get(where) == "invalid-json-schema"


@pytest.mark.parametrize("schema, fragment", [
    ({"type": "object", "$id": "http://127.0.0.1/x"}, "$id"),
    ({"type": "object", "properties": {"x": {"$dynamicRef": "#a"}}}, "$dynamicRef"),
    ({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}, "names nothing"),
    ({"type": "object", "$defs": {"n": {"properties": {"c": {"$ref": "#/$defs/n"}}}}, "properties": {"x": {"$ref": "#/$defs/n"}}}, "leads back"),
    ({"type": "object", "$defs": {**{f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(30)}, "d30": {}},
      "properties": {"x": {"$ref": "#/$defs/d0"}}}, "too large"),
])
def test_schemas_that_name_other_resources_or_blow_up_are_refused(tmp_path, schema, fragment):
    result = check(graph(tools__t__parameters=schema), tmp_path)
    assert [i.message for i in result.issues if i.code == "invalid-json-schema" and fragment in i.message]


def test_local_references_validate_compile_and_check_arguments(tmp_path):
    schema = {"type": "object", "$defs": {"e": {"type": "string"}}, "properties": {"expression": {"$ref": "#/$defs/e"}}}
    result = check(graph(tools__t__parameters=schema), tmp_path)
    assert result.ok, result.issues
    compile_graph(result.graph, tmp_path, trust=NO_TRUST)


# --------------------------------------------------------------------------- 2 and 3. template work


DOUBLING = {
    "list literal": "{% set ns = namespace(a=[1]) %}{% for i in range(64) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a == ns.a }}",
    "tuple as dict key": "{% set ns = namespace(a=(1,)) %}{% for i in range(64) %}{% set ns.a = (ns.a, ns.a) %}{% endfor %}{{ {ns.a: 1} }}",
    "dict to json": '{% set ns = namespace(a={}) %}{% for i in range(64) %}{% set ns.a = {"x": ns.a, "y": ns.a} %}{% endfor %}{{ ns.a | tojson }}',
    "sorted": "{% set ns = namespace(a=[1]) %}{% for i in range(64) %}{% set ns.a = [ns.a] + [ns.a] %}{% endfor %}{{ [ns.a, ns.a] | sort }}",
    "printed": "{% set ns = namespace(a=[1]) %}{% for i in range(64) %}{% set ns.a = [ns.a] * 2 %}{% endfor %}{{ ns.a }}",
    "macro varargs": "{% macro d(ns) %}{% set ns.a = varargs %}{% endmacro %}{% set ns = namespace(a=1) %}"
                     "{% for i in range(64) %}{{ d(ns, ns.a, ns.a) }}{% endfor %}{{ ns.a | string }}",
    "nested namespaces": "{% set ns = namespace(a=1) %}{% for i in range(64) %}{% set ns = namespace(x=ns, y=ns) %}{% endfor %}{{ ns }}",
    "batch fill": '{% set big = "x" * 999999 %}{{ [1] | batch(9999, big) | list | string | length }}',
}

FORMATS = {
    "format width from an argument": '{{ "{0:{1}}".format("x", 900000) }}',
    "format width, huge": '{{ "{0:{1}}".format("x", 1500000000) }}',
    "format precision from an argument": '{{ "{:.{}f}".format(1.0, 900000000) }}',
    "format_map": '{{ "{x:{w}}".format_map({"x": 1, "w": 900000}) }}',
    "percent key with parentheses": '{{ "%(a(b)c)900000s" % {"a(b)c": 1} }}',
    "percent precision": '{{ "%.900000f" % 1.0 }}',
    "expandtabs": '{{ ("\\t" * 100000).expandtabs(1000) }}',
    "string of large strings": '{% set s = "x" * 999999 %}{{ ([s] * 900) | string }}',
    "join of large strings": '{% set s = "x" * 999999 %}{{ [s, s, s] | join }}',
    "translate": '{{ ("x" * 100000).translate({120: "y" * 10000}) }}',
    "to_bytes": '{{ (1).to_bytes(1000000000, "big") }}',
    "tojson indent by depth": "{% set ns = namespace(a=[1]) %}{% for i in range(300) %}{% set ns.a = [ns.a, 1] %}{% endfor %}"
                              "{{ ns.a | tojson(indent=9999) }}",
}


@pytest.mark.parametrize("cases", [DOUBLING, FORMATS], ids=["reference-doubling", "format-widths"])
def test_template_work_is_refused_before_it_runs_at_validate_and_render(cases):
    # one child process for the whole table: 1.5 GB of address space and 90 s in all; before the bounds
    # each of these ran past 60 s or allocated 1.5-3 GB
    code = f"""
        import json, time
        from pathlib import Path
        from matpo_graph.core.loader import check_text
        from matpo_graph.core.templates import render
        from matpo_graph.core.template_limits import TemplateLimitError
        from matpo_graph.core.trust import TrustPolicy
        out = {{}}
        for name, source in {json.dumps(cases)}.items():
            text = "name: g\\nroot: a\\nroles:\\n  a:\\n    system: " + json.dumps(source) + "\\n"
            t = time.monotonic()
            result = check_text(text, base_dir=Path("."), file="g.yaml", trust=TrustPolicy())
            codes = sorted({{i.code for i in result.issues if i.severity == "error"}})
            lines = [i.line for i in result.issues]
            try:
                render(source, {{}})
                rendered = "rendered"
            except TemplateLimitError:
                rendered = "refused"
            except Exception as exc:
                rendered = type(exc).__name__
            out[name] = [codes, lines, rendered, round(time.monotonic() - t, 2)]
        print(json.dumps(out))
    """
    run = bounded_python(code, seconds=90)
    assert run.returncode == 0, run.stderr[-3000:]
    verdicts = json.loads(run.stdout.strip().splitlines()[-1])
    for name, (codes, lines, rendered, seconds) in verdicts.items():
        assert codes == ["template-limit"] and all(lines), (name, codes)
        assert rendered == "refused" and seconds < 10, (name, rendered, seconds)


def test_ordinary_structures_still_render():
    from matpo_graph.core.templates import render

    source = ('{% set ns = namespace(items=[]) %}{% for t in tools %}{% set ns.items = ns.items + [(t.name, loop.index)] %}{% endfor %}'
              '{{ ns.items }} {{ {"a": [1, 2]} | tojson }} {{ "{0:>{1}}".format("x", 3) }} {% for k, v in {"p": 1}.items() %}{{ k }}={{ v }}{% endfor %}')
    assert render(source, {"tools": [{"name": "s"}, {"name": "f"}]}) == "[('s', 1), ('f', 2)] {\"a\": [1, 2]}   x p=1"


@pytest.mark.parametrize("source", ["{{ 1/0 }}", "{{ 2.0 ** 100000 }}", "{{ question + 1 }}", "{{ none + 1 }}"])
def test_a_template_that_cannot_render_is_a_located_error(tmp_path, source):
    result = check(graph(roles__a__system=source), tmp_path)
    assert errors(result) == {"roles.a.system": "template-render"}


# --------------------------------------------------------------------------- 4. alias- and file-multiplied text


@pytest.mark.parametrize("where", ["description", "examples"])
def test_alias_multiplied_strings_are_refused_at_the_anchor(tmp_path, where):
    big = "y" * 880_000
    if where == "description":
        roles = "".join(f"  r{i}: {{system: hi, description: *big}}\n" for i in range(900))
    else:
        roles = "".join(f"  r{i}: {{system: hi, examples: [[{{role: user, content: *big}}, {{role: assistant, content: ok}}]]}}\n"
                        for i in range(900))
    text = f"name: g\nroot: r0\nx: &big {big}\nroles:\n{roles}"
    result = check(text, tmp_path, seconds=10.0)
    [issue] = result.issues
    assert issue.code == "yaml-too-complex" and "characters" in issue.message and issue.line == 3


def test_within_the_character_bound_a_graph_compiles_quickly(tmp_path):
    big = "y" * 400_000
    roles = "".join(f"  r{i}: {{system: hi, description: *big}}\n" for i in range(8))
    edges = "".join(f"  - {{from: r0, to: r{i}, as: c{i}}}\n" for i in range(1, 8))
    result = check(f"name: g\nroot: r0\ndescription: &big {big}\nroles:\n{roles}edges:\n{edges}", tmp_path)
    assert result.ok, result.issues
    started = time.monotonic()
    write_compiled(result.graph, tmp_path, tmp_path / "out", trust=NO_TRUST)
    assert time.monotonic() - started < 30


def test_one_large_template_file_named_by_many_roles_is_refused(tmp_path):
    (tmp_path / "big.j2").write_text("{{ question }}" + "z" * 190_000)
    roles = {f"r{i}": {"system": {"file": "big.j2"}} for i in range(40)}
    data = {"name": "g", "root": "r0", "roles": roles, "edges": [{"from": "r0", "to": f"r{i}", "as": f"c{i}"} for i in range(1, 40)]}
    result = check(data, tmp_path, seconds=30)
    assert "template-limit" in errors(result).values()
    assert any("inlined" in i.message for i in result.issues)


# --------------------------------------------------------------------------- 5. the runtime's verdict at validate


def test_lone_surrogate_and_long_integer_are_located(tmp_path):
    surrogate = check('name: g\nroot: a\nroles:\n  a:\n    system: "hi \\ud800 there"\n', tmp_path)
    assert [(i.code, i.line) for i in surrogate.issues] == [("invalid-encoding", 5)]
    digits = check("name: g\nroot: a\nroles:\n  a:\n    max_turns: " + "1" * 5000 + "\n", tmp_path)
    assert [(i.code, i.line) for i in digits.issues] == [("yaml-syntax", 5)]
    (tmp_path / "ex.json").write_text('[[{"role": "user", "content": "a\\ud800"}, {"role": "assistant", "content": "b"}]]')
    examples = check(graph(roles__a__examples="ex.json"), tmp_path)
    assert errors(examples) == {"roles.a.examples": "invalid-examples"}


BAD_REFS = ["os..path:join", "os.:system", "pkg.1sub:run", ".os:system", "os:sys tem"]


@pytest.mark.parametrize("ref", BAD_REFS)
@pytest.mark.parametrize("field", ["tools__t__config__function", "credit__strategy", "reward__accuracy__scorer"])
def test_code_references_that_are_not_identifiers_are_invalid(tmp_path, ref, field):
    trusted = check_text(yaml.safe_dump(graph(**{field: ref})), base_dir=tmp_path, file="g.yaml",
                         trust=TrustPolicy(trust_all_code=True))
    assert not trusted.ok
    assert {i.code for i in trusted.issues if i.severity == "error"} <= {"invalid-value"}


@pytest.mark.parametrize("ref", BAD_REFS[:3])
def test_non_identifier_references_in_a_compiled_folder_are_refused(tmp_path, ref):
    result = check(graph(), tmp_path)
    out = tmp_path / "out"
    write_compiled(result.graph, tmp_path, out, trust=NO_TRUST)
    plan = json.loads((out / "credit_plan.json").read_text())
    plan["strategy"] = ref
    (out / "credit_plan.json").write_text(json.dumps(plan))
    with pytest.raises(GraphError) as info:
        load_program(out, trust=TrustPolicy(trust_all_code=True))
    assert "invalid-value" in info.value.codes()


SPELLINGS = ["http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://127.1/", "http://[64:ff9b::7f00:1]/",
             "http://0x7f.1:8080/v1", "http://[::ffff:127.0.0.1]/", "http://10.1/", "http://0251.0376.0251.0376/"]


@pytest.mark.parametrize("endpoint", SPELLINGS)
def test_numeric_address_spellings_are_refused_at_validate(tmp_path, endpoint):
    search = graph(tools__t={"backend": "search", "description": "s", "config": {"endpoint": endpoint, "api_key_env": None}})
    assert errors(check(search, tmp_path)).get("tools.t.config.endpoint") == "unsafe-endpoint"
    judge = graph(reward={"accuracy": {"scorer": "judge", "judge": {"endpoint": endpoint, "model": "m"}}})
    assert errors(check(judge, tmp_path)).get("reward.accuracy.judge.endpoint") == "unsafe-endpoint"


@pytest.mark.parametrize("config, key", [
    ({"endpoint": "file:///etc/passwd"}, "endpoint"), ({"endpoint": "gopher://x/"}, "endpoint"),
    ({"endpoint": "data:text/plain,hi"}, "endpoint"), ({"endpoint": ["https://a.example"]}, "endpoint"),
    ({"endpoint": "embedded", "api_key_env": 123}, "api_key_env"), ({"endpoint": "embedded", "max_bytes": "big"}, "max_bytes"),
    ({"endpoint": "embedded", "num_results": True}, "num_results"), ({"endpoint": "embedded", "params": [1]}, "params"),
])
def test_search_config_is_read_by_the_runtimes_parser_at_validate(tmp_path, config, key):
    from matpo_graph.tools import build_tools
    from matpo_graph.tools.common import ToolConfigError

    data = graph(tools__t={"backend": "search", "description": "s", "config": config})
    assert errors(check(data, tmp_path)).get(f"tools.t.config.{key}") == "invalid-value"
    with pytest.raises(ToolConfigError, match=f"config.{key}"):
        build_tools({"t": data["tools"]["t"]}, embedded_url="http://127.0.0.1:9", trust=NO_TRUST)


@pytest.mark.parametrize("hosts, loc", [({"a": 1}, "tools.t.config.allow_hosts"), ([8080], "tools.t.config.allow_hosts[0]"),
                                        ("", "tools.t.config.allow_hosts")])
def test_scrape_allow_hosts_of_the_wrong_shape_are_invalid_at_validate(tmp_path, hosts, loc):
    data = graph(tools__t={"backend": "scrape", "description": "s", "config": {"allow_hosts": hosts}})
    assert errors(check(data, tmp_path)).get(loc) == "invalid-value"


def test_upper_case_scheme_is_read_like_the_runtime_reads_it(tmp_path):
    data = graph(tools__t={"backend": "search", "description": "s", "config": {"endpoint": "HTTP://127.0.0.1:9/", "api_key_env": None}})
    assert errors(check(data, tmp_path)).get("tools.t.config.endpoint") == "unsafe-endpoint"


# --------------------------------------------------------------------------- 6. inputs that are not files


def test_a_directory_is_refused_with_a_location(tmp_path):
    [issue] = check_graph(tmp_path).issues
    assert issue.line == 1 and "directory" in issue.message


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "g.yaml"
    os.mkfifo(fifo)
    run = bounded_python(f"""
        from matpo_graph.core.loader import check_graph
        print([i.render('g') for i in check_graph({str(fifo)!r}).issues])
    """, seconds=20)
    assert run.returncode == 0 and "FIFO" in run.stdout, run.stderr
    (tmp_path / "prompts").mkdir()
    os.mkfifo(tmp_path / "prompts" / "p.j2")
    result = check(graph(roles__a__system={"file": "prompts/p.j2"}), tmp_path)
    assert errors(result) == {"roles.a.system": "template-not-found"}
