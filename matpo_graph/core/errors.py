"""One shape for every problem found in a graph file: `SpecIssue`, collected into `GraphError`.

Issues carry a stable kebab-case code, the YAML path and (when known) the line and column, so a
message reads like a compiler diagnostic::

    graphs/x.yaml:14:7 roles.planner.tools[1]: unknown tool 'serch'; did you mean 'search'? [unknown-tool]
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

__all__ = [
    "IssueCode",
    "Severity",
    "GraphError",
    "SpecIssue",
    "did_you_mean",
    "format_path",
]

IssueCode = Literal[
    # reading the file
    "file-not-found",
    "yaml-syntax",
    "duplicate-key",
    "not-a-mapping",
    "invalid-encoding",
    "file-too-large",
    "yaml-too-complex",
    # shape (pydantic)
    "unknown-key",
    "missing-key",
    "wrong-type",
    "invalid-value",
    "out-of-range",
    "invalid-name",
    # references and structure
    "unknown-role",
    "unknown-tool",
    "name-collision",
    "duplicate-tool",
    "unbounded-cycle",
    "unreachable-role",
    "depth-exceeded",
    "unused-tool",
    "unknown-policy",
    "unused-policy",
    # templates
    "template-syntax",
    "template-not-found",
    "template-path-escape",
    "undefined-template-variable",
    "template-unsupported",
    "template-limit",
    "template-render",
    # what a graph may make this machine do (see matpo_graph.core.trust)
    "untrusted-code",
    "untrusted-secret",
    "unsafe-endpoint",
    # schemas and examples
    "invalid-json-schema",
    "schema-not-object",
    "missing-subtask",
    "invalid-examples",
    "example-tool-call",
    # a check failed in a way the checks did not foresee (reported, never raised)
    "internal-error",
]

Severity = Literal["error", "warning"]

PathPart = str | int


def format_path(loc: Sequence[PathPart]) -> str:
    """('roles', 'planner', 'tools', 1) -> 'roles.planner.tools[1]'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """A 'did you mean ...?' hint for the closest candidate, or None when nothing is close."""
    close = difflib.get_close_matches(str(word), sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a graph file.

    Attributes:
        code: stable identifier of the kind of problem (see `IssueCode`).
        path: YAML path such as ``roles.planner.tools[1]`` ("" for the whole file).
        message: what is wrong, with the value received and what was expected.
        hint: how to fix it, when there is something specific to say.
        line, col: 1-based position in the file, when known.
        severity: warnings are printed but do not make a graph invalid.
        loc: the path as a tuple, used to look up the position.
    """

    code: IssueCode
    path: str
    message: str
    hint: str | None = None
    line: int | None = None
    col: int | None = None
    severity: Severity = "error"
    loc: tuple[PathPart, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def at(
        cls,
        code: IssueCode,
        loc: Sequence[PathPart],
        message: str,
        hint: str | None = None,
        *,
        severity: Severity = "error",
    ) -> "SpecIssue":
        """Build an issue from a path tuple; the loader fills in line and column."""
        return cls(code=code, path=format_path(loc), message=message, hint=hint, severity=severity, loc=tuple(loc))

    def located(self, line: int | None, col: int | None) -> "SpecIssue":
        return replace(self, line=line, col=col)

    def render(self, file: str | None = None) -> str:
        """`file:line:col path: message; hint [code]`, leaving out the parts that are unknown."""
        where = file or ""
        if file and self.line is not None:
            where += f":{self.line}" + (f":{self.col}" if self.col is not None else "")
        head = " ".join(p for p in (where, f"{self.path}:" if self.path else "") if p)
        text = self.message + (f"; {self.hint}" if self.hint else "")
        kind = "" if self.severity == "error" else "warning: "
        return f"{head} {kind}{text} [{self.code}]" if head else f"{kind}{text} [{self.code}]"


class GraphError(Exception):
    """Every error of one graph file, raised by :func:`matpo_graph.core.loader.load_graph`."""

    def __init__(self, file: str, issues: Sequence[SpecIssue]) -> None:
        self.file = file
        self.issues: list[SpecIssue] = list(issues)
        super().__init__(self.render())

    @property
    def errors(self) -> list[SpecIssue]:
        return [i for i in self.issues if i.severity == "error"]

    def codes(self) -> list[str]:
        return [i.code for i in self.issues]

    def render(self) -> str:
        return "\n".join(i.render(self.file) for i in self.issues)

    def __str__(self) -> str:
        return self.render()
