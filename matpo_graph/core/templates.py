"""Prompt templates: sandboxed Jinja rendering, include resolution and variable discovery.

Templates are rendered at rollout time (never baked into data), so rendering must be safe on
untrusted graph files: a :class:`~matpo_graph.core.template_limits.BoundedSandbox` (Jinja's immutable
sandbox, plus bounds on time, output and value sizes) with ``StrictUndefined`` (a misspelled
variable is an error, not an empty string) and no autoescaping (prompts are not HTML).

``{% include "file" %}`` is resolved against the graph's folder and may not leave it. The compiler
inlines includes (:func:`flatten_includes`), so a compiled template source renders on its own with
:func:`render` and its hash covers every included file. ``{% import %}``, ``{% from %}`` and
``{% extends %}`` would need a loader at run time, where there is none, so they are refused when the
template is checked (the verdict of ``validate`` is the runtime's).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta, nodes

from matpo_graph.core.files import TooLargeFile, read_regular_file
from matpo_graph.core.template_limits import MAX_OUTPUT_CHARS, MAX_TEMPLATE_CHARS, BoundedSandbox, TemplateLimitError, within_deadline

__all__ = [
    "BUILTIN_TEMPLATES",
    "DEFAULT_CHILD_USER",
    "DEFAULT_ROOT_USER",
    "DEFAULT_SUMMARY",
    "ConfinedLoader",
    "TemplateIncludeError",
    "TemplateLimitError",
    "flatten_includes",
    "make_environment",
    "parse",
    "read_inside",
    "render",
    "resolve_inside",
    "resolve_template",
    "undeclared_variables",
]

DEFAULT_ROOT_USER = "{{ question }}"

DEFAULT_CHILD_USER = """\
Your assignment:
{{ subtask }}

This assignment is one step towards answering the user's original question, repeated here for context:
{{ root_query }}
Work only on your assignment; the caller combines the pieces."""

DEFAULT_SUMMARY = """\
{% if depth == 0 %}
You are out of turns or context. Do not call any more tools. Using what you have gathered so far, \
give your best final answer now.
{{ answer_instructions }}
{%- else %}
Stop here and do not call any more tools. Write a short report for the agent that gave you this \
assignment: the facts you found that answer it, where each came from, and what is still uncertain. \
The caller sees only this report.
{%- endif %}"""

BUILTIN_TEMPLATES: dict[str, str] = {
    "root_user": DEFAULT_ROOT_USER,
    "child_user": DEFAULT_CHILD_USER,
    "summary": DEFAULT_SUMMARY,
}


class TemplateIncludeError(Exception):
    """An include that cannot be resolved: missing file, path escape, non-literal name or a cycle."""

    def __init__(self, message: str, name: str | None = None, kind: str = "not-found") -> None:
        super().__init__(message)
        self.name = name
        self.kind = kind  # not-found | escape | unsupported | cycle | too-large


def resolve_inside(base_dir: Path, name: str) -> Path:
    """Resolve `name` relative to `base_dir`, refusing absolute paths and anything outside it.

    Raises:
        TemplateIncludeError: the path is absolute, escapes `base_dir` (also through symlinks) or
            does not name an existing file.
    """
    if not name or Path(name).is_absolute() or name.startswith(("/", "\\")):
        raise TemplateIncludeError(f"{name!r} must be a relative path inside the graph's folder", name, "escape")
    try:
        root = base_dir.resolve()
        target = (root / name).resolve()
        if target != root and root not in target.parents:
            raise TemplateIncludeError(f"{name!r} points outside the graph's folder", name, "escape")
        found = target.is_file()
    except (OSError, ValueError) as exc:  # e.g. a NUL byte or an over-long name
        raise TemplateIncludeError(f"{name!r} is not a usable file name ({exc})", name) from exc
    if not found:
        raise TemplateIncludeError(f"{name!r} not found (paths are relative to the graph file's folder)", name)
    return target


def read_inside(base_dir: Path, name: str) -> str:
    """Text of a file inside `base_dir` (see :func:`resolve_inside`); unreadable files raise too."""
    path = resolve_inside(base_dir, name)
    try:
        raw = read_regular_file(path, MAX_TEMPLATE_CHARS * 4)  # a FIFO swapped in after the check is refused, not waited on
        return raw.decode("utf-8")
    except TooLargeFile:
        raise TemplateIncludeError(f"{name!r} is larger than {MAX_TEMPLATE_CHARS * 4} bytes", name, "too-large") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateIncludeError(f"{name!r} cannot be read as UTF-8 text ({exc})", name) from exc


class ConfinedLoader(jinja2.BaseLoader):
    """Loads templates by relative path from one folder and never from outside it."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir)

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        try:
            path = resolve_inside(self.base_dir, template)
        except TemplateIncludeError as exc:
            raise jinja2.TemplateNotFound(template, str(exc)) from exc
        mtime = path.stat().st_mtime
        return path.read_text(encoding="utf-8"), str(path), lambda: path.stat().st_mtime == mtime


def make_environment(base_dir: Path | None = None) -> BoundedSandbox:
    """The one Jinja environment shape used everywhere; `base_dir` enables confined includes."""
    return BoundedSandbox(
        loader=ConfinedLoader(base_dir) if base_dir is not None else None,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


_ENV = make_environment()


def _check_length(source: str) -> None:
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateLimitError(f"template limit: the template has {len(source)} characters, more than {MAX_TEMPLATE_CHARS}")


@lru_cache(maxsize=256)
def _compiled(source: str) -> jinja2.Template:
    _check_length(source)
    return within_deadline(lambda: _ENV.from_string(source))


def _bounded_render(template: jinja2.Template, variables: dict[str, Any], seconds: float | None = None) -> str:
    def run() -> str:
        out: list[str] = []
        size = 0
        for piece in template.generate(variables):
            size += len(piece)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateLimitError(f"template limit: the rendered text is longer than {MAX_OUTPUT_CHARS} characters")
            out.append(piece)
        return "".join(out)

    return within_deadline(run) if seconds is None else within_deadline(run, seconds)


def render(source: str, variables: dict[str, Any], *, base_dir: Path | None = None, timeout_s: float | None = None) -> str:
    """Render a template source with the given variables, within the limits of
    :mod:`matpo_graph.core.template_limits` (time, output and value sizes).

    Args:
        source: Jinja text. Compiled program templates have their includes inlined already.
        variables: the runtime variables (see ``matpo_graph.core.program``).
        base_dir: folder that ``{% include %}`` names resolve against; without it includes fail.
        timeout_s: a shorter deadline than the default RENDER_SECONDS (validation shares one budget).

    Raises:
        jinja2.UndefinedError: the template uses a variable not in `variables`.
        jinja2.TemplateSyntaxError: the source does not parse.
        jinja2.exceptions.SecurityError: the template tried something the sandbox forbids;
            :class:`TemplateLimitError` (a SecurityError) when it asked for too much work.
    """
    if base_dir is None:
        return _bounded_render(_compiled(source), variables, timeout_s)
    _check_length(source)
    env = make_environment(base_dir)
    return _bounded_render(within_deadline(lambda: env.from_string(source)), variables, timeout_s)


def parse(source: str) -> nodes.Template:
    """Parse without rendering; raises ``jinja2.TemplateSyntaxError`` (with ``lineno``), or
    :class:`TemplateLimitError` for a source too long or nested too deeply to parse."""
    _check_length(source)
    return within_deadline(lambda: _ENV.parse(source))


# {% include "x" %} with an optional whitespace-control marker on either side and an optional
# context modifier. Non-literal or multi-name includes are refused (they cannot be checked).
_INCLUDE_RE = re.compile(
    r"\{%(?P<lead>[-+]?)\s*include\s+(?P<q>['\"])(?P<name>[^'\"]+)(?P=q)"
    r"(?P<mod>\s+(?:with|without)\s+context)?\s*(?P<trail>[-+]?)%\}"
)


def _count_includes(tree: nodes.Template) -> int:
    return sum(1 for _ in tree.find_all(nodes.Include))


def flatten_includes(source: str, base_dir: Path | None, *, _stack: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """Inline every ``{% include "name" %}`` recursively, returning (source, included names).

    Each include becomes a ``{% with %}`` block holding the file's text (one trailing newline
    dropped, as Jinja does when loading), which renders like the include: the same context,
    the file's own assignments stay local.

    Raises:
        jinja2.TemplateSyntaxError: `source` or an included file does not parse.
        TemplateIncludeError: a missing or escaping file, a non-literal include, or an include cycle.
    """
    tree = parse(source)
    for kind, tag in ((nodes.Extends, "extends"), (nodes.Import, "import"), (nodes.FromImport, "from ... import")):
        if any(True for _ in tree.find_all(kind)):
            raise TemplateIncludeError(
                f"{{% {tag} %}} is not supported (templates render without a loader at run time); "
                "use {% include \"file.j2\" %} and macros defined in the same template",
                kind="unsupported",
            )
    total = _count_includes(tree)
    if total == 0:
        return source, []
    literal = list(_INCLUDE_RE.finditer(source))
    if len(literal) != total or any(n.ignore_missing for n in tree.find_all(nodes.Include)):
        raise TemplateIncludeError(
            "only literal includes are supported: {% include \"relative/file.j2\" %} (no variables, lists or 'ignore missing')",
            kind="unsupported",
        )
    if base_dir is None:
        raise TemplateIncludeError("includes need a graph file to resolve against", literal[0]["name"], "unsupported")
    included: list[str] = []
    out: list[str] = []
    pos = 0
    for m in literal:
        name = m["name"]
        if name in _stack:
            raise TemplateIncludeError(f"include cycle: {' -> '.join((*_stack, name))}", name, "cycle")
        text = read_inside(base_dir, name)
        if text.endswith("\n"):
            text = text[:-1]
        inner, nested = flatten_includes(text, base_dir, _stack=(*_stack, name))
        out.append(source[pos : m.start()])
        out.append("{%" + m["lead"] + " with %}\n" + inner + "{% endwith " + m["trail"] + "%}")
        pos = m.end()
        included.extend([name, *nested])
    out.append(source[pos:])
    return "".join(out), list(dict.fromkeys(included))


def resolve_template(text: str | None, file: str | None, base_dir: Path | None) -> tuple[str, str, list[str]]:
    """Source of an inline or file template with includes inlined: (source, origin, included files).

    `origin` is 'inline' or the file path as written (relative to the graph's folder, '/'-separated).

    Raises the same errors as :func:`flatten_includes`; a file template also needs `base_dir`.
    """
    if file is not None:
        if base_dir is None:
            raise TemplateIncludeError(f"template file {file!r} needs a graph file to resolve against", file, "unsupported")
        raw = read_inside(base_dir, file)
        if raw.endswith("\n"):
            raw = raw[:-1]
        flat, included = flatten_includes(raw, base_dir, _stack=(file,))
        return flat, Path(file).as_posix(), included
    flat, included = flatten_includes(text or "", base_dir)
    return flat, "inline", included


def undeclared_variables(source: str, base_dir: Path | None = None) -> set[str]:
    """Variables a template (with its included files) reads from the outside.

    Raises the same errors as :func:`flatten_includes`.
    """
    flat, _ = flatten_includes(source, base_dir)
    return set(meta.find_undeclared_variables(parse(flat)))
