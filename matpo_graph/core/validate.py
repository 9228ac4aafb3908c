"""Semantic checks of a graph: references, reachability, recursion, templates, schemas and examples.

These run after the pydantic shape check, on whatever parts of the file validated (see `Partial`),
and return issues instead of raising, so a file's problems are all reported together.

Recursion rule: a cycle among roles (a role that can end up calling itself) is an error unless the
file sets ``limits.max_depth`` explicitly; with it, a call that would run deeper than ``max_depth`` is
refused at run time, which bounds the recursion. An acyclic graph whose longest delegation chain is
deeper than ``max_depth`` gets a warning (the deepest calls would always be refused).

Trust rule (see :mod:`matpo_graph.core.trust`): every field that names code (a python tool's
``config.function``, a custom ``credit.strategy`` or ``reward.accuracy.scorer``), every environment
variable named as an API key and every endpoint with a non-public literal address is checked against
the user's policy, and reported with how to allow it when the policy does not.

Templates are checked as the runtime will use them: parsed, includes inlined, tags that need a
loader refused, and rendered once with sample values of the runtime variables under the runtime's
limits (:mod:`matpo_graph.core.template_limits`); a template that exceeds them is an error.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import networkx as nx
import yaml
from pydantic import TypeAdapter, ValidationError

from matpo_graph.core.addresses import http_url_problem
from matpo_graph.core.errors import SpecIssue, did_you_mean
from matpo_graph.core.policies import policy_issues
from matpo_graph.core.program import RUNTIME_VARIABLES
from matpo_graph.core.registry import CREDIT_STRATEGIES
from matpo_graph.core.schemas import schema_problems
from matpo_graph.core.spec import (
    BUILTIN_SCORERS,
    CreditSpec,
    Edge,
    ExampleMessage,
    Graph,
    Limits,
    PolicySpec,
    RewardSpec,
    Role,
    TemplateRef,
    ToolSpec,
)
from matpo_graph.core.template_limits import RENDER_SECONDS, TemplateLimitError
from matpo_graph.core.templates import TemplateIncludeError, read_inside, render, resolve_template, undeclared_variables
from matpo_graph.core.toolconfig import ToolConfigProblem, parse_tool_config
from matpo_graph.core.trust import TrustPolicy, active_trust, code_ref_problem, literal_host_problem
from matpo_graph.core.yaml_loader import has_surrogate

__all__ = ["Partial", "ExampleError", "load_examples", "sample_variables", "semantic_issues", "trust_issues", "validate_examples"]

Loc = tuple[str | int, ...]
_TEMPLATE_PARTS = ("system", "user", "summary_prompt")


@dataclass
class Partial:
    """The checkable parts of a graph; a part that failed its shape check is None (known by name only)."""

    root: str | None
    roles: dict[str, Role | None]
    tools: dict[str, ToolSpec | None]
    edges: list[tuple[int, Edge | None]]
    limits: Limits | None
    max_depth_explicit: bool
    tool_call_format: str | None = "hermes"
    answer_format: str | None = "boxed"
    complete: bool = True
    credit: CreditSpec | None = field(default=None)
    reward: RewardSpec | None = field(default=None)
    policies: dict[str, PolicySpec | None] = field(default_factory=dict)

    @classmethod
    def from_graph(cls, graph: Graph) -> "Partial":
        return cls(
            root=graph.root,
            roles=dict(graph.roles),
            tools=dict(graph.tools),
            edges=list(enumerate(graph.edges)),
            limits=graph.limits,
            max_depth_explicit=graph.max_depth_is_explicit(),
            tool_call_format=graph.tool_call_format,
            answer_format=graph.reward.answer_format,
            credit=graph.credit,
            reward=graph.reward,
            policies=dict(graph.policies),
        )

    def valid_edges(self) -> Iterator[tuple[int, Edge]]:
        for i, e in self.edges:
            if e is not None:
                yield i, e


def semantic_issues(g: Partial, base_dir: Path | None, *, trust: TrustPolicy | None = None) -> list[SpecIssue]:
    """Every semantic issue of the (possibly partial) graph, in no particular order.

    `trust` is the user's policy for code, secrets and endpoints (default: the active one).
    """
    issues: list[SpecIssue] = []
    issues += _reference_issues(g)
    issues += policy_issues(g.roles, g.policies)
    issues += _structure_issues(g)
    issues += _schema_issues(g)
    budget = _InlinedText()
    issues += _template_issues(g, base_dir, budget)
    issues += _example_issues(g, base_dir, budget)
    issues += trust_issues(g, trust if trust is not None else active_trust())
    return issues


# --------------------------------------------------------------------------- trust


def trust_issues(g: Partial, trust: TrustPolicy) -> list[SpecIssue]:
    """Code, secrets and endpoints the graph names that the user's policy does not allow, and tool
    configs the runtime could not build (read with the runtime's own parser,
    :func:`~matpo_graph.core.toolconfig.parse_tool_config`)."""
    out: list[SpecIssue] = []

    def code(loc: Loc, ref: object, builtins: tuple[str, ...] = ()) -> None:
        if isinstance(ref, str) and ref in builtins:
            return
        invalid = code_ref_problem(ref, builtins)
        if invalid:
            out.append(SpecIssue.at("invalid-value", loc, invalid))
            return
        problem = trust.code_problem(str(ref))
        if problem:
            out.append(SpecIssue.at("untrusted-code", loc, problem))

    def secret(loc: Loc, env_name: object, endpoint: str) -> None:
        if isinstance(env_name, str):
            problem = trust.secret_problem(env_name, endpoint)
            if problem:
                out.append(SpecIssue.at("untrusted-secret", loc, problem))

    def address(loc: Loc, endpoint: str) -> None:
        problem = literal_host_problem(endpoint, trust)
        if problem:
            out.append(SpecIssue.at(
                "unsafe-endpoint", loc, f"refused: {problem}",
                "a graph cannot allow this itself; if you mean it, run with --allow-host HOST[:PORT]",
            ))

    for name, tool in g.tools.items():
        if tool is None:
            continue
        where: Loc = ("tools", name, "config")
        try:
            settings = parse_tool_config(tool.backend, tool.config, timeout_s=tool.timeout_s)
        except ToolConfigProblem as exc:
            out.append(SpecIssue.at("invalid-value", (*where, *exc.key), str(exc)))
            continue
        if tool.backend == "python":
            code((*where, "function"), settings["function"])
        elif tool.backend == "scrape":
            hosts = tool.config.get("allow_hosts", [])
            for i, entry in enumerate(settings["allow_hosts"]):
                problem = trust.host_entry_problem(entry)
                if problem:
                    out.append(SpecIssue.at("unsafe-endpoint", (*where, "allow_hosts", *(() if isinstance(hosts, str) else (i,))), problem))
        elif tool.backend == "search":
            endpoint = settings["endpoint"]
            if endpoint != "embedded":
                address((*where, "endpoint"), endpoint)
            key_loc: Loc = (*where, "api_key_env") if "api_key_env" in tool.config else (*where, "endpoint")
            secret(key_loc, settings["api_key_env"], endpoint)
    if g.credit is not None:
        code(("credit", "strategy"), g.credit.strategy, CREDIT_STRATEGIES.names)
    if g.reward is not None:
        accuracy = g.reward.accuracy
        code(("reward", "accuracy", "scorer"), accuracy.scorer, BUILTIN_SCORERS)
        if accuracy.judge is not None:
            judge_loc: Loc = ("reward", "accuracy", "judge")
            invalid = http_url_problem(accuracy.judge.endpoint)
            if invalid:
                out.append(SpecIssue.at("invalid-value", (*judge_loc, "endpoint"), f"the judge endpoint {invalid}"))
            else:
                address((*judge_loc, "endpoint"), accuracy.judge.endpoint)
                if accuracy.judge.api_key_env is not None:
                    secret((*judge_loc, "api_key_env"), accuracy.judge.api_key_env, accuracy.judge.endpoint)
    return out


# --------------------------------------------------------------------------- references


def _reference_issues(g: Partial) -> list[SpecIssue]:
    out: list[SpecIssue] = []
    role_names = list(g.roles)
    if g.root is not None and g.root not in g.roles:
        out.append(SpecIssue.at("unknown-role", ("root",), f"root role {g.root!r} is not defined under roles", _role_hint(g.root, role_names)))
    edge_names: dict[str, dict[str, int]] = {}
    for i, e in g.valid_edges():
        for key, name in (("from", e.from_), ("to", e.to)):
            if name not in g.roles:
                out.append(SpecIssue.at("unknown-role", ("edges", i, key), f"unknown role {name!r}", _role_hint(name, role_names)))
        seen = edge_names.setdefault(e.from_, {})
        if e.as_ in seen:
            out.append(
                SpecIssue.at(
                    "name-collision",
                    ("edges", i, "as"),
                    f"role {e.from_!r} already has an edge named {e.as_!r} (edges[{seen[e.as_]}])",
                    "give each edge leaving a role its own 'as' name",
                )
            )
        else:
            seen[e.as_] = i
    all_edge_names = {n: r for r, names in edge_names.items() for n in names}
    for rname, role in g.roles.items():
        if role is None:
            continue
        mine = edge_names.get(rname, {})
        listed: dict[str, int] = {}
        for j, tool in enumerate(role.tools):
            loc = ("roles", rname, "tools", j)
            if tool in listed:
                out.append(SpecIssue.at("duplicate-tool", loc, f"tool {tool!r} is listed twice (also at tools[{listed[tool]}])", "list each tool once"))
                continue
            listed[tool] = j
            if tool in mine:
                out.append(
                    SpecIssue.at(
                        "name-collision",
                        loc,
                        f"{tool!r} is the name of the edge edges[{mine[tool]}] leaving this role",
                        "edges leaving a role are callable automatically; remove it from tools",
                    )
                )
            elif tool not in g.tools:
                if tool in all_edge_names:
                    hint = f"{tool!r} is an edge of role {all_edge_names[tool]!r}; add an edge from {rname!r} to use it"
                else:
                    hint = did_you_mean(tool, [*g.tools, *mine]) or (
                        f"defined tools: {', '.join(sorted(g.tools))}" if g.tools else "define it under the top-level 'tools:' key"
                    )
                out.append(SpecIssue.at("unknown-tool", loc, f"unknown tool {tool!r}", hint))
    return out


def _role_hint(name: str, role_names: Sequence[str]) -> str | None:
    return did_you_mean(name, role_names) or (f"defined roles: {', '.join(sorted(role_names))}" if role_names else None)


# --------------------------------------------------------------------------- structure


def _role_graph(g: Partial) -> nx.DiGraph:
    dg = nx.DiGraph()
    dg.add_nodes_from(g.roles)
    for i, e in g.valid_edges():
        if e.from_ in g.roles and e.to in g.roles:
            dg.add_edge(e.from_, e.to, index=i)
    return dg


def _structure_issues(g: Partial) -> list[SpecIssue]:
    out: list[SpecIssue] = []
    dg = _role_graph(g)
    if g.root is None or g.root not in g.roles:
        return out
    reachable = {g.root} | nx.descendants(dg, g.root)
    # A broken edge (bad shape or unknown end) is reported on its own; roles it was meant to reach
    # would only add noise.
    edges_intact = all(e is not None and e.from_ in g.roles and e.to in g.roles for _, e in g.edges)
    for name in g.roles:
        if name not in reachable and edges_intact:
            out.append(
                SpecIssue.at(
                    "unreachable-role",
                    ("roles", name),
                    f"role {name!r} cannot be reached from the root {g.root!r}",
                    "add an edge to it from a role the root can reach, or remove it",
                )
            )
    sub = dg.subgraph(reachable)
    cyclic = [c for c in nx.strongly_connected_components(sub) if len(c) > 1 or any(sub.has_edge(n, n) for n in c)]
    if cyclic and not g.max_depth_explicit and g.limits is not None:
        for comp in sorted(cyclic, key=lambda c: sorted(c)):
            cycle = nx.find_cycle(sub.subgraph(comp))
            u, v = cycle[-1][0], cycle[-1][1]
            path = " -> ".join([c[0] for c in cycle] + [cycle[0][0]])
            out.append(
                SpecIssue.at(
                    "unbounded-cycle",
                    ("edges", sub.edges[u, v]["index"]),
                    f"roles form a cycle {path}, so recursion is not bounded by the graph itself",
                    "set limits.max_depth explicitly to allow bounded recursion, or remove an edge of the cycle",
                )
            )
    if not cyclic and g.limits is not None and len(sub) > 1:
        longest = nx.dag_longest_path(sub)  # starts at the root: every node of `sub` is reachable from it
        depth = len(longest) - 1
        if depth > g.limits.max_depth:
            out.append(
                SpecIssue.at(
                    "depth-exceeded",
                    ("limits", "max_depth"),
                    f"the delegation chain {' -> '.join(longest)} is {depth} levels deep but limits.max_depth is {g.limits.max_depth}",
                    "calls deeper than max_depth are refused at run time; raise max_depth or shorten the chain",
                    severity="warning",
                )
            )
    used = {t for r in g.roles.values() if r is not None for t in r.tools}
    if all(r is not None for r in g.roles.values()):
        for name in g.tools:
            if name not in used:
                out.append(SpecIssue.at("unused-tool", ("tools", name), f"tool {name!r} is not used by any role", severity="warning"))
    return out


# --------------------------------------------------------------------------- JSON schemas


def _schema_issues(g: Partial) -> list[SpecIssue]:
    out: list[SpecIssue] = []
    targets: list[tuple[Loc, dict[str, Any]]] = [(("tools", n, "parameters"), t.parameters) for n, t in g.tools.items() if t is not None]
    targets += [(("edges", i, "parameters"), e.parameters) for i, e in g.valid_edges()]
    for loc, schema in targets:
        problems = schema_problems(schema)
        for where, message in problems:
            out.append(SpecIssue.at("invalid-json-schema", (*loc, *where), message, "see https://json-schema.org/draft/2020-12"))
        if problems:
            continue
        if schema.get("type") != "object":
            out.append(
                SpecIssue.at(
                    "schema-not-object",
                    loc,
                    f"tool arguments must be described by an object schema, got type {schema.get('type')!r}",
                    "use {type: object, properties: {...}, required: [...]}",
                )
            )
    for i, e in g.valid_edges():
        child = g.roles.get(e.to)
        props = e.parameters.get("properties") if isinstance(e.parameters.get("properties"), dict) else {}
        if child is not None and child.user is None and "subtask" not in props:
            out.append(
                SpecIssue.at(
                    "missing-subtask",
                    ("edges", i, "parameters"),
                    f"role {e.to!r} uses the default first message, which shows the 'subtask' argument, but this edge has none",
                    f"add a 'subtask' property or give role {e.to!r} a 'user' template",
                    severity="warning",
                )
            )
    return out


# --------------------------------------------------------------------------- templates


MAX_INLINED_CHARS = 4_000_000
"""Most characters of template and example text all roles together carry once files are inlined
(compile copies each role's text: 900 roles naming one large file would otherwise write gigabytes)."""


class _InlinedText:
    """Counts the template and example text a compiled program would hold."""

    def __init__(self) -> None:
        self.used = 0
        self.reported = False

    def add(self, size: int, loc: Loc) -> list[SpecIssue]:
        self.used += size
        if self.used <= MAX_INLINED_CHARS or self.reported:
            return []
        self.reported = True
        return [SpecIssue.at("template-limit", loc, f"refused: the graph's templates and examples add up to more than "
                             f"{MAX_INLINED_CHARS} characters once files are inlined (each role carries its own copy)")]


VALIDATE_RENDER_SECONDS = 10.0
"""Total time the trial renders of one graph may take (each also within the runtime's own deadline)."""


def _template_issues(g: Partial, base_dir: Path | None, budget: _InlinedText | None = None) -> list[SpecIssue]:
    out: list[SpecIssue] = []
    budget = budget if budget is not None else _InlinedText()
    budget_ends = time.monotonic() + VALIDATE_RENDER_SECONDS
    allowed = sorted(RUNTIME_VARIABLES)
    for rname, role in g.roles.items():
        if role is None:
            continue
        for part in _TEMPLATE_PARTS:
            ref: TemplateRef | None = getattr(role, part)
            if ref is None:
                continue
            loc: Loc = ("roles", rname, part)
            where = f"template {ref.file!r}" if ref.file is not None else "inline template"
            try:
                source, _, _ = resolve_template(ref.text, ref.file, base_dir)
                too_much = budget.add(len(source), loc)
                if too_much:
                    out.extend(too_much)
                    continue
                names = undeclared_variables(source)
            except TemplateLimitError as exc:
                out.append(SpecIssue.at("template-limit", loc, f"{where}: {exc}"))
                continue
            except TemplateIncludeError as exc:
                code = "template-path-escape" if exc.kind == "escape" else "template-not-found"
                if exc.kind in ("cycle", "too-large"):
                    code = "template-syntax"
                if exc.kind == "unsupported":
                    code = "template-unsupported"
                what = "template file" if exc.name is not None and exc.name == ref.file else f"{where}: include"
                text = f"{what} {exc}" if exc.kind in ("escape", "not-found") else f"{where}: {exc}"
                out.append(SpecIssue.at(code, loc, text))
                continue
            except jinja2.TemplateSyntaxError as exc:
                src = f"{exc.name or exc.filename or ''} " if (exc.name or exc.filename) else ""
                out.append(SpecIssue.at("template-syntax", loc, f"{where}: {src}line {exc.lineno}: {exc.message}"))
                continue
            unknown = sorted(names - RUNTIME_VARIABLES)
            for var in unknown:
                hint = did_you_mean(var, allowed) or f"available: {', '.join(allowed)}"
                out.append(SpecIssue.at("undefined-template-variable", loc, f"{where} uses undefined variable {var!r}", hint))
            if not unknown:
                left = budget_ends - time.monotonic()
                if left <= 0:
                    out.append(SpecIssue.at("template-limit", loc, f"{where}: not checked: the graph's templates used up "
                                            f"the {VALIDATE_RENDER_SECONDS:g}s validation allows"))
                    continue
                out.extend(_trial_render(g, rname, source, loc, where, left))
    return out


def sample_variables(g: Partial, role: str) -> dict[str, Any]:
    """Runtime variables with placeholder values, shaped as the executor builds them for `role`."""
    from matpo_graph.core import toolcalls  # noqa: PLC0415 (the runtime's own helpers)

    rp = g.roles.get(role)
    is_root = role == g.root
    views: list[dict[str, Any]] = []
    for tool in (rp.tools if rp is not None else []):
        spec = g.tools.get(tool)
        if spec is not None:
            views.append({"name": tool, "description": spec.description, "parameters": spec.parameters, "kind": "tool"})
    for _, e in g.valid_edges():
        if e.from_ == role:
            views.append({"name": e.as_, "description": e.description, "parameters": e.parameters, "kind": "child"})
    fmt = g.tool_call_format or "hermes"
    answer = g.answer_format or "boxed"
    question = "What is the capital of the country where the river Quill rises?"
    subtask = "" if is_root else "Find where the river Quill rises."
    parent = None if is_root else next((e.from_ for _, e in g.valid_edges() if e.to == role), None)
    return {
        "role": role,
        "depth": 0 if is_root else 1,
        "max_turns": rp.max_turns if rp is not None else 8,
        "tools": views,
        "tool_names": [v["name"] for v in views],
        "tool_format": fmt,
        "tool_instructions": toolcalls.tool_instructions(fmt, views),  # type: ignore[arg-type]
        "answer_format": answer,
        "answer_instructions": toolcalls.answer_instructions(answer, is_root=is_root),  # type: ignore[arg-type]
        "question": question,
        "root_query": question,
        "subtask": subtask,
        "args": {} if is_root else {"subtask": subtask},
        "parent_role": parent,
    }


def _trial_render(g: Partial, role: str, source: str, loc: Loc, where: str, seconds: float) -> list[SpecIssue]:
    """Render once with sample values under the runtime's limits.

    Exceeding a limit is an error: the runtime would refuse the same template. So is any other
    failure (``{{ 1/0 }}``, an overflow, a type error), except an undefined value: that depends on
    the values (an argument the sample call lacks, say) and is a warning.
    """
    try:
        render(source, sample_variables(g, role), timeout_s=min(seconds, RENDER_SECONDS))
    except (TemplateLimitError, RecursionError, MemoryError) as exc:
        text = str(exc) if isinstance(exc, TemplateLimitError) else f"template limit: {type(exc).__name__}"
        return [SpecIssue.at("template-limit", loc, f"{where}: {text}")]
    except jinja2.exceptions.SecurityError as exc:
        return [SpecIssue.at("template-limit", loc, f"{where}: the sandbox refused: {exc}")]
    except jinja2.UndefinedError as exc:  # value-dependent: real arguments may have it
        message = f"{where} fails when rendered with sample values: {type(exc).__name__}: {str(exc)[:200]}"
        return [SpecIssue.at("template-render", loc, message, "check it with `matpo-graph render`", severity="warning")]
    except Exception as exc:  # noqa: BLE001 (a verdict, never raised)
        message = f"{where} cannot be rendered: {type(exc).__name__}: {str(exc)[:200]}"
        return [SpecIssue.at("template-render", loc, message, "the runtime would fail the same way; check it with `matpo-graph render`")]
    return []


# --------------------------------------------------------------------------- examples


class ExampleError(ValueError):
    """Few-shot examples that cannot be loaded or are malformed."""


_EXAMPLES = TypeAdapter(list[list[ExampleMessage]])


def load_examples(value: list[list[ExampleMessage]] | str, base_dir: Path | None) -> list[list[ExampleMessage]]:
    """Inline examples as they are, or the demonstrations in a YAML/JSON file next to the graph.

    Raises:
        ExampleError: missing or escaping file, unreadable content, or the wrong shape.
    """
    if not isinstance(value, str):
        return value
    if base_dir is None:
        raise ExampleError(f"examples file {value!r} needs a graph file to resolve against")
    try:
        text = read_inside(base_dir, value)
    except TemplateIncludeError as exc:
        raise ExampleError(f"examples file {exc}") from exc
    try:
        raw = json.loads(text) if value.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ExampleError(f"examples file {value!r} does not parse: {exc}".splitlines()[0]) from exc
    try:
        demos = _EXAMPLES.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        raise ExampleError(f"examples file {value!r}{where}: {first['msg']}") from exc
    for d, demo in enumerate(demos):
        for m, msg in enumerate(demo):
            if has_surrogate(msg.content):
                raise ExampleError(f"examples file {value!r}[{d}][{m}]: the content holds a lone surrogate (an escape such as \\ud800)")
    return demos


def validate_examples(demos: Sequence[Sequence[ExampleMessage]], *, fmt: str, allowed: Sequence[str]) -> list[tuple[Loc, str]]:
    """Problems of few-shot demonstrations as (path inside `examples`, message).

    Checked: each demonstration starts with a user message and ends with an assistant message,
    tool messages follow an assistant message that made a call, and (when the runtime's tool-call
    parser is available) every call in an assistant message parses and names a callable of the role.
    """
    problems: list[tuple[Loc, str]] = []
    parser = _tool_call_parser()
    for d, demo in enumerate(demos):
        if not demo:
            problems.append(((d,), "a demonstration needs at least a user and an assistant message"))
            continue
        if demo[0].role != "user":
            problems.append(((d, 0), f"a demonstration starts with a user message, not {demo[0].role!r}"))
        if demo[-1].role != "assistant":
            problems.append(((d, len(demo) - 1), f"a demonstration ends with an assistant message, not {demo[-1].role!r}"))
        prev: str | None = None
        calls_open = False
        for m, msg in enumerate(demo):
            if msg.role == "assistant":
                if prev == "assistant":
                    problems.append(((d, m), "two assistant messages in a row"))
                try:
                    calls = parser(msg.content, fmt) if parser is not None else []
                except Exception as exc:  # noqa: BLE001 (a parser bug must not hide the other checks)
                    problems.append(((d, m), f"tool calls could not be parsed: {exc}"))
                    calls = []
                calls_open = bool(calls) or parser is None
                for call in calls:
                    if getattr(call, "error", None):
                        problems.append(((d, m), f"malformed tool call: {call.error}"))
                    elif call.name not in allowed:
                        problems.append(((d, m), f"calls {call.name!r}, which this role cannot call" + (f"; {h}" if (h := did_you_mean(call.name, allowed)) else "")))
            elif msg.role == "tool":
                if prev not in ("assistant", "tool") or not calls_open:
                    problems.append(((d, m), "a tool message must follow an assistant message that made a call"))
            elif prev == "user":
                problems.append(((d, m), "two user messages in a row"))
            prev = msg.role
    return problems


def _tool_call_parser() -> Any:
    module = sys.modules.get("matpo_graph.core.toolcalls")
    if module is None:
        try:
            import matpo_graph.core.toolcalls as module  # noqa: PLC0415 (optional, owned by the runtime)
        except ImportError:
            return None
    return getattr(module, "parse_tool_calls", None)


def _example_issues(g: Partial, base_dir: Path | None, budget: _InlinedText | None = None) -> list[SpecIssue]:
    out: list[SpecIssue] = []
    budget = budget if budget is not None else _InlinedText()
    for rname, role in g.roles.items():
        if role is None or not role.examples:
            continue
        loc: Loc = ("roles", rname, "examples")
        try:
            demos = load_examples(role.examples, base_dir)
        except ExampleError as exc:
            out.append(SpecIssue.at("invalid-examples", loc, str(exc)))
            continue
        too_much = budget.add(sum(len(m.content) for demo in demos for m in demo), loc)
        if too_much:
            out.extend(too_much)
            continue
        allowed = [*role.tools, *(e.as_ for _, e in g.valid_edges() if e.from_ == rname)]
        inline = not isinstance(role.examples, str)
        for sub, message in validate_examples(demos, fmt=g.tool_call_format or "hermes", allowed=allowed):
            code = "example-tool-call" if "call" in message and "tool message" not in message else "invalid-examples"
            where = (*loc, *sub) if inline else loc
            prefix = "" if inline else f"{role.examples}{''.join(f'[{p}]' for p in sub)}: "
            out.append(SpecIssue.at(code, where, prefix + message))
    return out
