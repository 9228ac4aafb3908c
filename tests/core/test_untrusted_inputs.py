"""Bounded inputs: hostile YAML, files and templates get a clear verdict quickly, never a hang or a traceback.

Each test names the attack it closes; times are generous upper bounds for a loaded 2-core machine.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from matpo_graph.compilers.local import compile_graph
from matpo_graph.core.loader import MAX_GRAPH_BYTES, check_graph, check_text
from matpo_graph.core.template_limits import TemplateLimitError
from matpo_graph.core.templates import render
from matpo_graph.core.trust import TrustPolicy
from matpo_graph.core.validate import Partial, sample_variables

GOOD = """\
name: g
root: a
roles:
  a:
    system: {system}
tools: {{}}
"""


def graph_with_system(template: str) -> str:
    return GOOD.format(system=_quoted(template))


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def timed_check(text: str, base_dir: Path, seconds: float = 10.0):
    started = time.monotonic()
    result = check_text(text, base_dir=base_dir, file="g.yaml", trust=TrustPolicy())
    elapsed = time.monotonic() - started
    assert elapsed < seconds, f"validation took {elapsed:.1f}s"
    return result


def codes(result) -> list[str]:
    return [i.code for i in result.issues if i.severity == "error"]


# --------------------------------------------------------------------------- YAML


def billion_laughs(levels: int = 9) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_quickly(tmp_path):
    result = timed_check(billion_laughs(), tmp_path, seconds=2.0)
    assert codes(result) == ["yaml-too-complex"] and result.issues[0].line is not None


def test_billion_laughs_hidden_in_a_valid_graph_is_refused_before_compile(tmp_path):
    # without the bound this validated (aliases share objects) and then hung in compile
    text = billion_laughs(7) + graph_with_system("Hi {{ question }}").replace("tools: {}", "tools: {}\ndescription: x")
    text = text.replace("name: g", "name: g")
    bomb = text + "limits: {max_depth: 2}\n"
    result = timed_check(bomb, tmp_path, seconds=2.0)
    assert "yaml-too-complex" in codes(result) or "unknown-key" in codes(result)
    many = "x: &x [" + ",".join(["1"] * 500) + "]\n" + "y: [" + ",".join(["*x"] * 1000) + "]\n"
    assert codes(timed_check(many, tmp_path, seconds=2.0)) == ["yaml-too-complex"]


@pytest.mark.parametrize("depth", [100, 400, 5000])
def test_deep_nesting_is_refused_with_a_position(tmp_path, depth):
    flow = "a: " + "[" * depth + "]" * depth + "\n"
    block = "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, depth)) + "  " * depth + "v: 1\n"
    for text in (flow, block if depth <= 400 else flow):
        result = timed_check(text, tmp_path, seconds=5.0)
        assert codes(result) == ["yaml-too-complex"]
        assert result.issues[0].line is not None and "nested deeper" in result.issues[0].message


def test_deep_tool_config_cannot_validate_and_then_crash_compile(tmp_path):
    nested = "{a: " * 400 + "1" + "}" * 400
    text = graph_with_system("Hi {{ question }}").replace("tools: {}", f"tools:\n  t: {{backend: search, description: d, config: {{endpoint: embedded, x: {nested}}}}}")
    result = timed_check(text, tmp_path)
    assert not result.ok and codes(result) == ["yaml-too-complex"]
    moderate = "{a: " * 40 + "1" + "}" * 40  # within the bound: validates AND compiles
    ok_text = graph_with_system("Hi {{ question }}").replace(
        "tools: {}", f"tools:\n  t: {{backend: search, description: d, config: {{endpoint: embedded, x: {moderate}}}}}"
    ).replace("    system:", "    tools: [t]\n    system:")
    ok = timed_check(ok_text, tmp_path)
    assert ok.ok, [i.render("g.yaml") for i in ok.issues]
    compile_graph(ok.graph, tmp_path, trust=TrustPolicy())


def test_huge_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "big.yaml"
    with path.open("w") as fh:
        fh.write("name: g\ndescription: '")
        fh.write("x" * (50 * 1024 * 1024))
        fh.write("'\n")
    started = time.monotonic()
    result = check_graph(path, trust=TrustPolicy())
    assert time.monotonic() - started < 1.0
    assert codes(result) == ["file-too-large"] and (result.issues[0].line, result.issues[0].col) == (1, 1)
    assert str(MAX_GRAPH_BYTES) in result.issues[0].message


def test_empty_file_gets_line_one(tmp_path):
    for content in ("", "# only a comment\n", "\n\n"):
        path = tmp_path / "empty.yaml"
        path.write_text(content)
        [issue] = check_graph(path).issues
        assert issue.render(str(path)).startswith(f"{path}:1:1 ") and issue.code == "not-a-mapping"


def test_non_utf8_file_gets_the_bytes_line_and_a_proper_code(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: g\nroot: a\ndescription: caf\xe9\n")
    [issue] = check_graph(path).issues
    assert (issue.code, issue.line, issue.col) == ("invalid-encoding", 3, 17)
    assert issue.render(str(path)).startswith(f"{path}:3:17 ")


@pytest.mark.parametrize("value", ["2020-02-31", "1" * 5000, "!!binary 'not base64 ~~'", "!!python/object:os.system {}"])
def test_odd_scalars_are_yaml_errors_not_exceptions(tmp_path, value):
    result = timed_check(f"name: g\nroot: {value}\n", tmp_path)
    assert result.graph is None and codes(result)


# --------------------------------------------------------------------------- templates


BOMBS = {
    "power": "{{ 2 ** 9999999999 }}",
    "power of powers": "{{ (9 ** 9) ** (9 ** 9) }}",
    "int growth": "{{ (10 ** 1000) * (10 ** 1000) * (10 ** 1000) * (10 ** 1000) * (10 ** 1000) }}",
    "repeat": '{{ "x" * 1000000000 }}',
    "repeat list": "{{ [1, 2] * 999999999 }}",
    "join": '{{ range(100000) | join("x" * 100) }}',
    "str join": '{{ ("y" * 1000).join(range(5000) | map("string")) }}',
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
    "loop over a string": '{% for a in "x" * 100000 %}{% for b in "x" * 100000 %}{% endfor %}{% endfor %}',
    "wordwrap": '{{ ("x " * 400000) | wordwrap(1, wrapstring="y" * 1000) }}',
    "center": '{{ "x" | center(999999999) }}',
    "ljust method": '{{ "x".ljust(999999999) }}',
    "indent": '{{ ("a\\n" * 100000) | indent("b" * 1000) }}',
    "batch fill": '{{ [1] | batch(999999999, "x") | list }}',
    "percent width": '{{ "%999999999d" % 1 }}',
    "percent star": '{{ "%*d" % (999999999, 1) }}',
    "format width": '{{ "{:>999999999}".format(1) }}',
    "format filter": '{{ "%999999999s" | format("a") }}',
    "replace": '{{ ("x" * 100000) | replace("", "y" * 100) }}',
    "concat doubling": '{% macro f(s, n) %}{% if n %}{{ f(s ~ s, n - 1) }}{% else %}{{ s | length }}{% endif %}{% endmacro %}{{ f("ab", 64) }}',
    "namespace doubling": '{% set ns = namespace(s="ab") %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}',
    "block capture": '{% set big %}{% for i in range(100000) %}{{ "x" * 1000000 }}{% endfor %}{% endset %}{{ big | length }}',
    "macro capture": '{% macro m() %}{% for i in range(100000) %}{{ "x" * 1000000 }}{% endfor %}{% endmacro %}{{ m() | length }}',
    "call block": '{% macro w() %}{{ caller() }}{% endmacro %}{% call w() %}{% for i in range(100000) %}{{ "x" * 999999 }}{% endfor %}{% endcall %}',
    "filter block": '{% filter upper %}{% for i in range(100000) %}{{ "x" * 999999 }}{% endfor %}{% endfilter %}',
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "tojson indent": "{{ range(1000) | list | tojson(indent=99999999) }}",
    "range": "{{ range(10 ** 9) | list | length }}",
    "lipsum": "{{ lipsum(1000000) }}",
    "kept in a list": '{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + ["x" * 999999] %}{% endfor %}',
    "kept slices": '{% set big = "x" * 999999 %}{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [big[i:]] %}{% endfor %}',
    "output": '{% for i in range(100000) %}{{ "0123456789" * 10 }}{% endfor %}',
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_template_bomb_is_refused_at_validate_and_at_render(tmp_path, name):
    source = BOMBS[name]
    result = timed_check(graph_with_system(source), tmp_path, seconds=8.0)
    assert codes(result) and set(codes(result)) <= {"template-limit", "undefined-template-variable"}, result.issues
    started = time.monotonic()
    with pytest.raises(Exception) as info:  # noqa: PT011 - which exception depends on the bomb; checked below
        render(source, {})
    assert time.monotonic() - started < 5.0
    assert isinstance(info.value, TemplateLimitError) or "undefined" in str(info.value)


def test_ordinary_templates_render_the_same_as_before():
    variables = {"question": "Q?", "tools": [{"name": "a"}, {"name": "b"}], "depth": 1}
    source = (
        "{% for t in tools %}{{ loop.index }}. {{ t.name | upper }}{{ ', ' if not loop.last }}{% endfor %}"
        " | {{ 2 ** 10 }} {{ 'ab' * 3 }} {{ '%5.1f' % 3.14159 }} {{ '{:>6}'.format('x') }} {{ question ~ '!' }}"
        " {{ [1, 2] + [3] }} {{ 'a-b' | replace('-', '+') }} {{ 'x' | center(5) }} {{ range(3) | join(',') }}"
    )
    assert render(source, variables) == "1. A, 2. B | 1024 ababab   3.1      x Q?! [1, 2, 3] a+b   x   0,1,2"


def test_templates_cannot_mutate_runtime_variables():
    tools = [{"name": "a"}]
    with pytest.raises(Exception, match="unsafe"):
        render("{{ tools.append(1) }}{{ tools[0].update({'name': 'b'}) }}", {"tools": tools})
    assert tools == [{"name": "a"}]


@pytest.mark.parametrize(
    "tag", ['{% import "macros.j2" as m %}{{ m.x() }}', '{% from "macros.j2" import x %}{{ x() }}', '{% extends "base.j2" %}']
)
def test_import_from_and_extends_are_refused_at_validate_like_at_runtime(tmp_path, tag):
    (tmp_path / "macros.j2").write_text("{% macro x() %}hi{% endmacro %}")
    (tmp_path / "base.j2").write_text("base {% block b %}{% endblock %}")
    result = timed_check(graph_with_system(tag), tmp_path)
    assert codes(result) == ["template-unsupported"]
    assert "not supported" in result.issues[0].message and "include" in result.issues[0].message


def test_include_inside_the_folder_validates_and_renders(tmp_path):
    (tmp_path / "part.j2").write_text("part for {{ question }}\n")
    result = timed_check(graph_with_system('{% include "part.j2" %} end'), tmp_path)
    assert result.ok
    program, _ = compile_graph(result.graph, tmp_path, trust=TrustPolicy())
    variables = sample_variables(Partial.from_graph(result.graph), "a")
    assert render(program.roles["a"].system.source, variables).startswith("part for What is")


def test_template_source_too_long_is_refused(tmp_path):
    result = timed_check(graph_with_system("x" * 300_000), tmp_path)
    assert codes(result) == ["template-limit"]


def test_deeply_nested_template_expression_is_a_verdict_not_a_recursion_error(tmp_path):
    source = "{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}"
    result = timed_check(graph_with_system(source), tmp_path)
    assert codes(result) == ["template-limit"]


def test_value_dependent_render_failure_is_a_warning(tmp_path):
    result = timed_check(graph_with_system("{{ args.missing_argument }}"), tmp_path)
    assert result.ok and [i.code for i in result.issues] == ["template-render"]
