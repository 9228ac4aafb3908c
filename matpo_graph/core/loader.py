"""Read a graph file: YAML with positions -> pydantic shape check -> semantic checks, all issues at once.

When the shape check fails, the parts that do validate (each role, tool and edge on its own) are
still checked semantically, so one run of ``matpo-graph validate`` shows every problem of a file.

Files may come from strangers: anything that is not a regular file (a directory, a FIFO, a device)
is refused at once, a file larger than :data:`MAX_GRAPH_BYTES` is refused before it is read, YAML is bounded (see :mod:`matpo_graph.core.yaml_loader`), code and secrets the graph names are
checked against the user's :class:`~matpo_graph.core.trust.TrustPolicy`, and no check raises: a
failure nobody foresaw comes back as an `internal-error` issue.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from matpo_graph.core.errors import GraphError, SpecIssue, did_you_mean
from matpo_graph.core.files import NotRegularFile, TooLargeFile, read_regular_file
from matpo_graph.core.spec import CreditSpec, Edge, Graph, Limits, PolicySpec, RewardSpec, Role, ToolSpec
from matpo_graph.core.trust import TrustPolicy
from matpo_graph.core.validate import Partial, semantic_issues
from matpo_graph.core.yaml_loader import MarkedYaml, load_marked

__all__ = ["MAX_GRAPH_BYTES", "GraphCheck", "check_graph", "check_text", "load_graph"]

MAX_GRAPH_BYTES = 1_000_000
"""Largest graph file read (the default graphs are about 3 kB)."""


@dataclass
class GraphCheck:
    """Result of checking one file: the graph when it is valid, and every issue (errors and warnings)."""

    file: str
    graph: Graph | None
    issues: list[SpecIssue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.graph is not None and not any(i.severity == "error" for i in self.issues)

    def error(self) -> GraphError:
        return GraphError(self.file, self.issues)


def load_graph(path: str | Path, *, trust: TrustPolicy | None = None) -> Graph:
    """Load and fully validate a graph file.

    Args:
        path: the graph file.
        trust: what the user allows the graph's code, secrets and endpoints to do; by default
            :func:`~matpo_graph.core.trust.active_trust`.

    Raises:
        GraphError: with every error of the file (warnings included), each with file, line and path.
    """
    check = check_graph(path, trust=trust)
    if not check.ok or check.graph is None:
        raise check.error()
    return check.graph


def check_graph(path: str | Path, *, trust: TrustPolicy | None = None) -> GraphCheck:
    """Check a graph file without raising; `file` in messages is the path as given."""
    path = Path(path)
    shown = str(path)
    try:
        raw = read_regular_file(path, MAX_GRAPH_BYTES)
    except FileNotFoundError:
        return GraphCheck(shown, None, [SpecIssue.at("file-not-found", (), f"no graph file at {shown}").located(1, 1)])
    except NotRegularFile as exc:
        return GraphCheck(shown, None, [SpecIssue.at("file-not-found", (), f"refused: {shown} is {exc}, not a regular file").located(1, 1)])
    except TooLargeFile as exc:
        return GraphCheck(shown, None, [SpecIssue.at(
            "file-too-large", (), f"refused: the file has {exc.size} bytes, more than the {MAX_GRAPH_BYTES} a graph may have"
        ).located(1, 1)])
    except (OSError, ValueError) as exc:
        return GraphCheck(shown, None, [SpecIssue.at("file-not-found", (), f"cannot read {shown}: {exc}").located(1, 1)])
    if len(raw) > MAX_GRAPH_BYTES:  # grew while being read, or a special file
        return GraphCheck(shown, None, [SpecIssue.at(
            "file-too-large", (), f"refused: the file has more than the {MAX_GRAPH_BYTES} bytes a graph may have"
        ).located(1, 1)])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line, col = before.count(b"\n") + 1, exc.start - (before.rfind(b"\n") + 1) + 1
        issue = SpecIssue.at("invalid-encoding", (), f"the file is not UTF-8 text: byte {raw[exc.start]:#04x} cannot be decoded",
                             "save the graph as UTF-8")
        return GraphCheck(shown, None, [issue.located(line, col)])
    return check_text(text, base_dir=path.parent, file=shown, trust=trust)


def check_text(text: str, *, base_dir: Path, file: str = "<graph>", trust: TrustPolicy | None = None) -> GraphCheck:
    """Check graph YAML given as text; template and example files resolve against `base_dir`.

    Never raises: an unforeseen failure of a check is reported as an `internal-error` issue.
    """
    if len(text) > MAX_GRAPH_BYTES:
        return GraphCheck(file, None, [SpecIssue.at(
            "file-too-large", (), f"refused: the graph has {len(text)} characters, more than {MAX_GRAPH_BYTES}"
        ).located(1, 1)])
    try:
        return _check_text(text, base_dir=base_dir, file=file, trust=trust)
    except (RecursionError, MemoryError) as exc:
        issue = SpecIssue.at("yaml-too-complex", (), f"refused: checking the graph ran out of {'stack' if isinstance(exc, RecursionError) else 'memory'}")
        return GraphCheck(file, None, [issue.located(1, 1)])
    except Exception as exc:  # noqa: BLE001 (a verdict, never a traceback)
        issue = SpecIssue.at("internal-error", (), f"the graph could not be checked: {type(exc).__name__}: {str(exc)[:300]}")
        return GraphCheck(file, None, [issue.located(1, 1)])


def _check_text(text: str, *, base_dir: Path, file: str, trust: TrustPolicy | None) -> GraphCheck:
    marked = load_marked(text)
    issues = list(marked.issues)
    if marked.data is None and issues:
        return GraphCheck(file, None, issues)
    if not isinstance(marked.data, dict):
        got = "an empty file" if marked.data is None else f"a {_yaml_type(marked.data)}"
        issue = SpecIssue.at("not-a-mapping", (), f"a graph file must be a mapping with keys name, root, roles, ...; got {got}")
        issues.append(issue.located(1, 1) if marked.data is None else issue)
        return GraphCheck(file, None, _locate(issues, marked))
    data: dict[str, Any] = marked.data
    graph: Graph | None = None
    try:
        graph = Graph.model_validate(data)
        partial = Partial.from_graph(graph)
    except ValidationError as exc:
        issues.extend(_shape_issues(exc, data))
        partial = _salvage(data)
    issues.extend(semantic_issues(partial, base_dir, trust=trust))
    located = _locate(issues, marked)
    has_error = any(i.severity == "error" for i in located)
    return GraphCheck(file, None if has_error else graph, located)


# --------------------------------------------------------------------------- positions


_KEY_CODES = {"unknown-key", "duplicate-key", "unreachable-role", "invalid-name", "unused-tool", "unused-policy"}


def _locate(issues: list[SpecIssue], marked: MarkedYaml) -> list[SpecIssue]:
    out: list[SpecIssue] = []
    for issue in issues:
        if issue.line is None:
            pos = marked.position(issue.loc, prefer_key=issue.code in _KEY_CODES)
            issue = issue.located(*pos) if pos is not None else issue.located(1, 1)
        out.append(issue)
    unique = list(dict.fromkeys(out))
    return sorted(unique, key=lambda i: (i.line or 0, i.col or 0, i.path, i.code))


def _yaml_type(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), type(value).__name__
    ) if value is not None else "null"


# --------------------------------------------------------------------------- shape errors


def _data_path(loc: tuple[Any, ...], data: Any) -> tuple[tuple[str | int, ...], Any, bool]:
    """Turn a pydantic loc into a YAML path: drop union-branch tags, keep a trailing missing key.

    Returns (path, value at path or None, whether the path exists in the data).
    """
    path: list[str | int] = []
    cur: Any = data
    exists = True
    for i, part in enumerate(loc):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
            path.append(part)
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            cur = cur[part]
            path.append(part)
        elif isinstance(part, str) and exists and _looks_like_field(part, loc[i + 1 :]):
            path.append(part)
            cur, exists = None, False
        # else: a union-branch or validator tag such as 'list[list[ExampleMessage]]' or 'str'
    return tuple(path), cur, exists


def _looks_like_field(part: str, rest: tuple[Any, ...]) -> bool:
    return part.isidentifier() and not part[:1].isupper() and part not in ("str", "int", "float", "bool", "list", "dict") and not rest


def _model_at(path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The spec model that a YAML path points into (for suggesting valid keys)."""
    tp: Any = Graph
    for part in path:
        tp = _step(tp, part)
        if tp is None:
            return None
    return _as_model(tp)


def _as_model(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in typing.get_args(tp):
        model = _as_model(arg)
        if model is not None:
            return model
    return None


def _step(tp: Any, part: str | int) -> Any:
    model = _as_model(tp) if not isinstance(tp, types.GenericAlias) else None
    if isinstance(part, str) and model is not None and not _is_container(tp):
        for name, info in model.model_fields.items():
            if part in (name, info.alias):
                return info.annotation
        return None
    for arg in _flatten(tp):
        origin = typing.get_origin(arg)
        if origin is dict and isinstance(part, str):
            return typing.get_args(arg)[1]
        if origin is list and isinstance(part, int):
            return typing.get_args(arg)[0]
    return None


def _flatten(tp: Any) -> list[Any]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [a for arg in typing.get_args(tp) for a in _flatten(arg)]
    if typing.get_origin(tp) is typing.Annotated:
        return _flatten(typing.get_args(tp)[0])
    return [tp]


def _is_container(tp: Any) -> bool:
    return any(typing.get_origin(a) in (dict, list) for a in _flatten(tp)) and not any(
        isinstance(a, type) and issubclass(a, BaseModel) for a in _flatten(tp)
    )


def _keys_of(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


_RANGE_TYPES = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short", "too_long"}


def _shape_issues(exc: ValidationError, data: dict[str, Any]) -> list[SpecIssue]:
    grouped: dict[tuple[str | int, ...], list[dict[str, Any]]] = {}
    for err in exc.errors(include_url=False):
        path, _, _ = _data_path(tuple(err["loc"]), data)
        grouped.setdefault(path, []).append(err)
    issues: list[SpecIssue] = []
    for path, errs in grouped.items():
        type_errs = [e for e in errs if e["type"].endswith(("_type", "_parsing")) or e["type"] == "model_type"]
        if len(type_errs) > 1:  # one per union branch: merge them into one readable message
            expected = " or ".join(dict.fromkeys(_expected(e) for e in type_errs))
            issues.append(SpecIssue.at("wrong-type", path, f"expected {expected}, got {_shown(type_errs[0]['input'])}"))
            errs = [e for e in errs if e not in type_errs]
        issues.extend(_one_issue(path, e) for e in errs)
    return issues


def _expected(err: dict[str, Any]) -> str:
    if err["type"] == "model_type":
        return _model_type_expected(err)
    msg = err["msg"]
    expected = msg.removeprefix("Input should be ").split(",")[0]
    return _PLAIN.get(expected, expected)


_PLAIN = {
    "a valid dictionary": "a mapping",
    "a valid list": "a list",
    "a valid string": "a string",
    "a valid integer": "an integer",
    "a valid number": "a number",
    "a valid boolean": "true or false",
}


def _model_type_expected(err: dict[str, Any]) -> str:
    if (err.get("ctx") or {}).get("class_name") == "TemplateRef":
        return "a template (inline text, a file path such as prompts/x.j2, or {text: ...} / {file: ...})"
    return "a mapping"


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{_yaml_type(value)} {text if len(text) <= 60 else text[:57] + '...'}"


def _one_issue(path: tuple[str | int, ...], err: dict[str, Any]) -> SpecIssue:
    kind, msg, value = err["type"], err["msg"], err.get("input")
    if kind == "extra_forbidden":
        key = path[-1] if path else "?"
        model = _model_at(path[:-1])
        valid = _keys_of(model) if model else []
        hint = did_you_mean(str(key), valid) or (f"valid keys: {', '.join(valid)}" if valid else None)
        return SpecIssue.at("unknown-key", path, f"unknown key {key!r}", hint)
    if kind == "missing":
        return SpecIssue.at("missing-key", path, f"missing required key {path[-1]!r}" if path else "missing value")
    if kind == "literal_error":
        expected = (err.get("ctx") or {}).get("expected", "")
        options = [o.strip(" '") for o in expected.replace(" or ", ",").split(",") if o.strip()]
        hint = did_you_mean(str(value), options) if isinstance(value, str) else None
        return SpecIssue.at("invalid-value", path, f"invalid value {value!r}: expected {expected}", hint)
    if kind in _RANGE_TYPES:
        text = f"must be {msg.removeprefix('Input should be ')}" if msg.startswith("Input should be ") else msg
        return SpecIssue.at("out-of-range", path, f"{text}, got {value!r}")
    if kind == "model_type":
        return SpecIssue.at("wrong-type", path, f"expected {_model_type_expected(err)}, got {_shown(value)}")
    if kind.endswith(("_type", "_parsing")):
        return SpecIssue.at("wrong-type", path, f"expected {_expected(err)}, got {_shown(value)}")
    text = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    code = "invalid-name" if "must match" in text else "invalid-value"
    return SpecIssue.at(code, path, text)


# --------------------------------------------------------------------------- salvage


def _salvage(data: dict[str, Any]) -> Partial:
    """The parts of an invalid file that validate on their own, for the semantic checks."""
    raw_roles = data.get("roles") if isinstance(data.get("roles"), dict) else {}
    raw_tools = data.get("tools") if isinstance(data.get("tools"), dict) else {}
    raw_edges = data.get("edges") if isinstance(data.get("edges"), list) else []
    raw_policies = data.get("policies") if isinstance(data.get("policies"), dict) else {}
    roles: dict[str, Role] = {}
    for name, raw in raw_roles.items():
        roles[str(name)] = _try(Role, raw)  # type: ignore[assignment]
    tools = {str(name): _try(ToolSpec, raw) for name, raw in raw_tools.items()}
    edges = [(i, _try(Edge, raw)) for i, raw in enumerate(raw_edges)]
    limits = _try(Limits, data.get("limits", {}))
    # Without a roles mapping, references to roles cannot be checked: leave them to the shape error.
    root = data.get("root") if isinstance(data.get("root"), str) and isinstance(data.get("roles"), dict) else None
    if not isinstance(data.get("roles"), dict):
        edges = []
    reward, credit = _try(RewardSpec, data.get("reward", {})), _try(CreditSpec, data.get("credit", {}))
    return Partial(
        root=root,
        roles=roles,
        tools=tools,
        edges=edges,
        limits=limits,
        max_depth_explicit=isinstance(data.get("limits"), dict) and "max_depth" in data["limits"],
        tool_call_format=data.get("tool_call_format", "hermes") if data.get("tool_call_format") in ("xml", "hermes", "native") else None,
        answer_format=reward.answer_format if reward is not None else None,
        complete=False,
        credit=credit,
        reward=reward,
        policies={str(name): _try(PolicySpec, raw) for name, raw in raw_policies.items()},
    )


def _try(model: type[BaseModel], raw: Any) -> Any:
    """Validate `raw`; when it fails, retry once without the keys that failed (their errors are already
    reported), so that the rest of the part still gets its semantic checks."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        if not isinstance(raw, dict):
            return None
        bad = {e["loc"][0] for e in exc.errors() if e["loc"] and e["loc"][0] in raw}
    if not bad:
        return None
    try:
        return model.model_validate({k: v for k, v in raw.items() if k not in bad})
    except ValidationError:
        return None
