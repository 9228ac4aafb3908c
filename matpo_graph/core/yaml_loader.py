"""Safe YAML loading that remembers where every node came from.

Loading is exactly ``yaml.safe_load`` (SafeLoader constructors, no Python objects); in addition
the composed node tree is walked to map each YAML path to its position, so that a pydantic ``loc``
or a semantic check can point at a line and column. Duplicate mapping keys, which ``safe_load``
silently resolves to the last one, are reported.

Graphs may come from strangers, so loading is bounded: nesting deeper than :data:`MAX_DEPTH`, more
than :data:`MAX_ALIASES` alias uses, or a document that would expand (aliases followed) to more than
:data:`MAX_NODES` nodes or :data:`MAX_EXPANDED_CHARS` characters of scalars is refused with a
`yaml-too-complex` issue before anything walks it (a "billion laughs" file is a few lines that expand
to 10^9 nodes; one long string anchored once and referenced by every role is few nodes but many
bytes). A scalar that cannot be converted (a date that does not exist, an integer of thousands of
digits) and a string holding a lone surrogate (which no UTF-8 output can hold) are reported at their
own line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from matpo_graph.core.errors import SpecIssue

__all__ = ["MAX_ALIASES", "MAX_DEPTH", "MAX_EXPANDED_CHARS", "MAX_NODES", "MarkedYaml", "Position", "has_surrogate", "load_marked"]

MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences (a graph needs about 10; JSON Schemas a few more)."""
MAX_ALIASES = 1000
"""Most alias uses (*name) in one document."""
MAX_NODES = 200_000
"""Most nodes of the document with every alias expanded."""
MAX_EXPANDED_CHARS = 4_000_000
"""Most characters of scalars (keys and values) of the document with every alias expanded."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    """Whether `text` holds a lone surrogate code point (YAML's and JSON's escapes can write one)."""
    return _SURROGATE.search(text) is not None

Position = tuple[int, int]  # 1-based (line, col)
PathKey = tuple[str | int, ...]


class _TooComplex(Exception):
    def __init__(self, message: str, mark: yaml.Mark | None) -> None:
        super().__init__(message)
        self.mark = mark


class _BadScalar(Exception):
    """A node whose value the safe constructors could not build, with where it starts."""

    def __init__(self, exc: BaseException, mark: yaml.Mark) -> None:
        super().__init__(f"{type(exc).__name__}: {str(exc)[:200]}")
        self.mark = mark


class _MarkLoader(yaml.SafeLoader):
    """SafeLoader that keeps the composed node, so positions can be read after construction, and
    refuses documents nested deeper than MAX_DEPTH or with more than MAX_ALIASES aliases while composing."""

    _depth = 0
    _aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _TooComplex(f"uses more than {MAX_ALIASES} aliases", self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooComplex(f"is nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as exc:
            raise _BadScalar(exc, node.start_mark) from None


def _expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(nodes, characters of scalars) with aliases expanded, computed once per distinct node (each
    capped just past its bound).

    Iterative, so that a long flat list cannot exhaust the Python stack. A node that contains itself
    (a recursive alias) is refused: nothing downstream could walk it.
    """
    sizes: dict[int, tuple[int, int]] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if done:
            open_.discard(id(node))
            own = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            nodes = min(1 + sum(sizes[id(c)][0] for c in children), MAX_NODES + 1)
            chars = min(own + sum(sizes[id(c)][1] for c in children), MAX_EXPANDED_CHARS + 1)
            sizes[id(node)] = (nodes, chars)
            continue
        if id(node) in open_:
            raise _TooComplex("is recursive (an alias refers to a node that contains it)", node.start_mark)
        open_.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_:
                raise _TooComplex("is recursive (an alias refers to a node that contains it)", child.start_mark)
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes.get(id(root), (1, 0))


def _distinct_nodes(root: yaml.Node) -> tuple[list[yaml.Node], dict[int, int]]:
    """Every distinct node once (document order) and how often each is reached (more than once: aliased)."""
    order: list[yaml.Node] = []
    uses: dict[int, int] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        uses[id(node)] = uses.get(id(node), 0) + 1
        if uses[id(node)] > 1:
            continue
        order.append(node)
        if isinstance(node, yaml.MappingNode):
            stack.extend(reversed([n for pair in node.value for n in pair]))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(reversed(node.value))
    return order, uses


def _heaviest_alias(root: yaml.Node) -> yaml.Mark:
    """The anchor whose aliases repeat the most text, for the message's position."""
    order, uses = _distinct_nodes(root)
    chars: dict[int, int] = {}
    for node in reversed(order):  # children before parents
        if isinstance(node, yaml.ScalarNode):
            chars[id(node)] = len(node.value)
        else:
            kids = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
            chars[id(node)] = min(sum(chars.get(id(k), 0) for k in kids), MAX_EXPANDED_CHARS + 1)
    aliased = [n for n in order if uses[id(n)] > 1]
    if not aliased:
        return root.start_mark
    return max(aliased, key=lambda n: chars[id(n)] * (uses[id(n)] - 1)).start_mark


def _surrogate_node(root: yaml.Node) -> yaml.Node | None:
    order, _ = _distinct_nodes(root)
    return next((n for n in order if isinstance(n, yaml.ScalarNode) and has_surrogate(n.value)), None)


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
        nodes, chars = _expanded_size(node)
        if nodes > MAX_NODES:
            raise _TooComplex(f"would expand to more than {MAX_NODES} nodes once aliases are followed", node.start_mark)
        if chars > MAX_EXPANDED_CHARS:
            raise _TooComplex(
                f"would expand to more than {MAX_EXPANDED_CHARS} characters once aliases are followed", _heaviest_alias(node)
            )
        surrogate = _surrogate_node(node)
        if surrogate is not None:
            issue = SpecIssue.at("invalid-encoding", (), "a string holds a lone surrogate (an escape such as \\ud800 that is no character)",
                                 "write the character itself, or a pair of escapes for one character")
            return MarkedYaml(data=None, issues=[issue.located(*_pos(surrogate.start_mark))])
        data = loader.construct_document(node)
    except _TooComplex as exc:
        issue = SpecIssue.at("yaml-too-complex", (), f"refused: the YAML document {exc}", "write the graph out plainly")
        return MarkedYaml(data=None, issues=[issue.located(*_pos(exc.mark)) if exc.mark else issue.located(1, 1)])
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
        return MarkedYaml(data=None, issues=[issue if issue.line is not None else issue.located(1, 1)])
    except _BadScalar as exc:
        issue = SpecIssue.at("yaml-syntax", (), f"invalid YAML value: {exc}")
        return MarkedYaml(data=None, issues=[issue.located(*_pos(exc.mark))])
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        # the safe constructors convert scalars (dates, big integers) and can fail outside YAMLError
        issue = SpecIssue.at("yaml-syntax", (), f"invalid YAML value: {type(exc).__name__}: {str(exc)[:200]}")
        return MarkedYaml(data=None, issues=[issue.located(1, 1)])
    finally:
        if loader is not None:
            loader.dispose()
    out = MarkedYaml(data=data)
    _walk(node, (), out, set())
    return out
