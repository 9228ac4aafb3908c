"""Sandboxed rendering, confined includes and variable discovery."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from jinja2.exceptions import SecurityError

from matpo_graph.core.program import RUNTIME_VARIABLES
from matpo_graph.core.templates import (
    BUILTIN_TEMPLATES,
    TemplateIncludeError,
    flatten_includes,
    render,
    resolve_template,
    undeclared_variables,
)


def test_render_strict_undefined_raises():
    with pytest.raises(jinja2.UndefinedError, match="questoin"):
        render("Q: {{ questoin }}", {"question": "x"})


def test_render_sandbox_blocks_private_attributes():
    with pytest.raises(SecurityError):
        render("{{ ''.__class__.__mro__[1].__subclasses__() }}", {})


def test_render_no_autoescape():
    assert render("{{ v }}", {"v": "<b>&</b>"}) == "<b>&</b>"


def test_render_trims_block_lines():
    src = "A\n  {% if x %}\n  B\n  {% endif %}\nC"
    assert render(src, {"x": True}) == "A\n  B\nC"


def test_render_include_without_base_dir_fails():
    with pytest.raises(TypeError):
        render('{% include "a.j2" %}', {})


def _write(base: Path, name: str, text: str) -> None:
    path = base / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_flatten_includes_renders_like_include(tmp_path: Path):
    _write(tmp_path, "parts/a.j2", "Hi {{ name }}\n{% set n = 2 %}\n  {% if n %}\n  n={{ n }}\n  {% endif %}\n")
    src = 'top\n  {% include "parts/a.j2" %}\nmid {{ name }}\n{%- include "parts/a.j2" -%}\n  end\n'
    flat, included = flatten_includes(src, tmp_path)
    assert included == ["parts/a.j2"]
    assert "include" not in flat
    assert render(flat, {"name": "N"}) == render(src, {"name": "N"}, base_dir=tmp_path)


def test_flatten_includes_keeps_included_assignments_local(tmp_path: Path):
    _write(tmp_path, "a.j2", "{% set x = 'inner' %}{{ x }}")
    src = "{% set x = 'outer' %}{% include 'a.j2' %} {{ x }}"
    flat, _ = flatten_includes(src, tmp_path)
    assert render(flat, {}) == render(src, {}, base_dir=tmp_path) == "inner outer"


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ('{% include "../outside.j2" %}', "escape"),
        ('{% include "/etc/hostname" %}', "escape"),
        ('{% include "missing.j2" %}', "not-found"),
        ("{% include name %}", "unsupported"),
        ('{% include "a.j2" ignore missing %}', "unsupported"),
    ],
)
def test_flatten_includes_refuses_bad_includes(tmp_path: Path, source: str, kind: str):
    (tmp_path / "inner").mkdir()
    (tmp_path / "outside.j2").write_text("secret")
    with pytest.raises(TemplateIncludeError) as info:
        flatten_includes(source, tmp_path / "inner")
    assert info.value.kind == kind


def test_flatten_includes_refuses_symlink_escape(tmp_path: Path):
    (tmp_path / "secret.txt").write_text("secret")
    base = tmp_path / "graph"
    base.mkdir()
    (base / "link.j2").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(TemplateIncludeError, match="outside"):
        flatten_includes('{% include "link.j2" %}', base)


def test_flatten_includes_detects_cycles(tmp_path: Path):
    _write(tmp_path, "a.j2", '{% include "b.j2" %}')
    _write(tmp_path, "b.j2", '{% include "a.j2" %}')
    with pytest.raises(TemplateIncludeError, match="cycle"):
        flatten_includes('{% include "a.j2" %}', tmp_path)


def test_undeclared_variables_follow_includes(tmp_path: Path):
    _write(tmp_path, "a.j2", "{{ subtask }} {% for t in tools %}{{ t.name }}{% endfor %}")
    src = '{% set local = 1 %}{{ question }} {{ local }} {% include "a.j2" %}'
    assert undeclared_variables(src, tmp_path) == {"question", "subtask", "tools"}


def test_undeclared_variables_syntax_error_has_line():
    with pytest.raises(jinja2.TemplateSyntaxError) as info:
        undeclared_variables("ok\n{{ broken }")
    assert info.value.lineno == 2


def test_resolve_template_file_origin_is_relative(tmp_path: Path):
    _write(tmp_path, "prompts/s.j2", "System {{ role }}\n")
    source, origin, included = resolve_template(None, "prompts/s.j2", tmp_path)
    assert (source, origin, included) == ("System {{ role }}", "prompts/s.j2", [])


@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_builtin_templates_use_only_runtime_variables(name: str):
    assert undeclared_variables(BUILTIN_TEMPLATES[name]) <= RUNTIME_VARIABLES


def test_builtin_child_user_recaps_root_query():
    text = render(BUILTIN_TEMPLATES["child_user"], {"subtask": "Find the year.", "root_query": "When was X born?"})
    assert "Find the year." in text and "When was X born?" in text


def test_builtin_summary_asks_root_for_answer_and_child_for_report():
    root = render(BUILTIN_TEMPLATES["summary"], {"depth": 0, "answer_instructions": "ANSWER-FORMAT"})
    child = render(BUILTIN_TEMPLATES["summary"], {"depth": 1, "answer_instructions": "ANSWER-FORMAT"})
    assert "ANSWER-FORMAT" in root and "final answer" in root
    assert "ANSWER-FORMAT" not in child and "report" in child
