"""Safe YAML loading that remembers where every node came from.

Loading is exactly ``yaml.safe_load`` (SafeLoader constructors, no Python objects); in addition
the composed node tree is walked to map each YAML path to its position, so that a pydantic ``loc``
or a semantic check can point at a line and column. Duplicate mapping keys, which ``safe_load``
silently resolves to the last one, are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from matpo_graph.core.errors import SpecIssue

__all__ = ["MarkedYaml", "Position", "load_marked"]

Position = tuple[int, int]  # 1-based (line, col)
PathKey = tuple[str | int, ...]


class _MarkLoader(yaml.SafeLoader):
    """SafeLoader that keeps the composed node, so positions can be read after construction."""


@dataclass
class MarkedYaml:
    """Loaded data plus positions: `values[path]` is where the value starts, `keys[path]` its key."""

    data: Any
    values: dict[PathKey, Position] = field(default_factory=dict)
    keys: dict[PathKey, Position] = field(default_factory=dict)
    issues: list[SpecIssue] = field(default_factory=list)

    def position(self, loc: PathKey, *, prefer_key: bool = False) -> Position | None:
        """Position of the longest known prefix of `loc` (missing keys point at their parent)."""
        loc = tuple(loc)
        while True:
            if prefer_key and loc in self.keys:
                return self.keys[loc]
            if loc in self.values:
                return self.values[loc]
            if loc in self.keys:
                return self.keys[loc]
            if not loc:
                return None
            loc = loc[:-1]


def _pos(mark: yaml.Mark) -> Position:
    return (mark.line + 1, mark.column + 1)


def _scalar_key(node: yaml.Node) -> str | int | None:
    if isinstance(node, yaml.ScalarNode):
        return str(node.value)
    return None


def _walk(node: yaml.Node, path: PathKey, out: MarkedYaml, seen: set[int]) -> None:
    out.values.setdefault(path, _pos(node.start_mark))
    if id(node) in seen:  # an alias: positions of the anchor are enough
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[str | int, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = _scalar_key(key_node)
            if key is None:
                continue
            if key == "<<":  # merge key: its contents are folded in by the constructor
                continue
            child = (*path, key)
            if key in first:
                out.issues.append(
                    SpecIssue.at(
                        "duplicate-key",
                        child,
                        f"key {key!r} appears twice (first at line {first[key].start_mark.line + 1})",
                        "remove one of them; YAML would silently keep the last",
                    ).located(*_pos(key_node.start_mark))
                )
                continue
            first[key] = key_node
            out.keys[child] = _pos(key_node.start_mark)
            _walk(value_node, child, out, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), out, seen)


def load_marked(text: str) -> MarkedYaml:
    """Parse YAML text with safe_load semantics and record node positions.

    YAML errors do not raise: they come back as a `yaml-syntax` issue with the problem's position
    and `data` None.
    """
    loader: _MarkLoader | None = None
    try:
        loader = _MarkLoader(text)  # the reader already refuses control characters here
        node = loader.get_single_node()
        if node is None:
            return MarkedYaml(data=None)
        data = loader.construct_document(node)
    except yaml.reader.ReaderError as exc:
        before = text[: exc.position]
        line, col = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
        issue = SpecIssue.at("yaml-syntax", (), f"invalid YAML: character {exc.character:#06x} is not allowed", "remove control characters")
        return MarkedYaml(data=None, issues=[issue.located(line, col)])
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        started = getattr(exc, "context_mark", None)
        if context and started is not None and mark is not None and started.line != mark.line:
            context += f" that starts at line {started.line + 1}, column {started.column + 1}"
        message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
        issue = SpecIssue.at("yaml-syntax", (), message, "check indentation, colons and quotes near this position")
        if mark is not None:
            issue = issue.located(*_pos(mark))
        return MarkedYaml(data=None, issues=[issue])
    finally:
        if loader is not None:
            loader.dispose()
    out = MarkedYaml(data=data)
    _walk(node, (), out, set())
    return out
