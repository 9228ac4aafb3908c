"""JSON Schemas a graph brings (tool and edge ``parameters``): checked, and turned into validators that
cannot reach anything outside the schema.

``jsonschema``'s default registry resolves a reference it does not know by opening the URL, so a
schema from a stranger could make argument checking fetch ``http://127.0.0.1:.../`` or read
``file:///etc/...``. Here a schema may refer only to itself: every ``$ref`` is ``#`` or a JSON pointer
``#/...`` that resolves inside the same schema (``$defs`` and the like); ``$id``, anchors and dynamic
references, which name other resources, are refused. Followed through its references, a schema has
at most :data:`MAX_SCHEMA_NODES` subschemas and no reference leads back to itself, so checking one
argument object is bounded work. :func:`schema_problems` is what ``validate`` reports (each problem
at its path inside the schema) and what the runtime refuses; :func:`make_validator` builds the
validator with an empty ``referencing`` registry, so that nothing is fetched whatever the check missed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry

__all__ = ["MAX_SCHEMA_NODES", "SchemaProblem", "make_validator", "schema_problems"]

MAX_SCHEMA_NODES = 10_000
"""Most subschemas of one schema with every ``$ref`` followed (each use counted)."""

Loc = tuple[str | int, ...]

_ONE = ("additionalProperties", "items", "contains", "propertyNames", "not", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_ELSEWHERE = ("$id", "$anchor", "$dynamicAnchor", "$dynamicRef", "$recursiveRef", "$recursiveAnchor")


class SchemaProblem(ValueError):
    """A schema that cannot be used: the first problem, with its path inside the schema."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _subschemas(node: dict[str, Any]) -> Iterator[tuple[Loc, Any]]:
    for key in _ONE:
        if key in node:
            yield (key,), node[key]
    for key in _LIST:
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                yield (key, i), sub
    for key in _MAP:
        if isinstance(node.get(key), dict):
            for name, sub in node[key].items():
                yield (key, name), sub


def _pointer(root: Any, ref: str) -> tuple[Loc, Any]:
    """The schema a local reference names, and its path; raises KeyError when there is none."""
    fragment = unquote(ref[1:])
    if not fragment:
        return (), root
    if not fragment.startswith("/"):
        raise KeyError(ref)
    node, path = root, []
    for raw in fragment[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node, key = node[part], part
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node, key = node[int(part)], int(part)
        else:
            raise KeyError(ref)
        path.append(key)
    return tuple(path), node


def schema_problems(schema: Any) -> list[tuple[Loc, str]]:
    """Why `schema` cannot describe a tool's arguments, as (path inside the schema, message); [] when it can."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return [(tuple(exc.path), f"not a valid JSON Schema: {exc.message}")]
    problems: list[tuple[Loc, str]] = []
    targets: dict[int, tuple[Loc, Any]] = {}
    stack: list[tuple[Loc, Any]] = [((), schema)]
    seen: set[int] = set()
    while stack:
        loc, node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        for key in _ELSEWHERE:
            if key in node:
                problems.append(((*loc, key), f"{key} is not supported: a schema in a graph may refer only to itself "
                                              "($ref: '#/$defs/name')"))
        ref = node.get("$ref")
        if ref is not None:
            if not isinstance(ref, str) or not ref.startswith("#"):
                problems.append(((*loc, "$ref"), f"$ref {ref!r} points outside the schema: a schema in a graph may refer "
                                                 "only to itself ('#/$defs/name'); nothing is fetched"))
            else:
                try:
                    targets[id(node)] = _pointer(schema, ref)
                except KeyError:
                    problems.append(((*loc, "$ref"), f"$ref {ref!r} names nothing in this schema"))
        stack.extend(((*loc, *sub_loc), sub) for sub_loc, sub in _subschemas(node))
    if problems:
        return problems
    return _expansion_problems(schema, targets)


def _expansion_problems(schema: Any, targets: dict[int, tuple[Loc, Any]]) -> list[tuple[Loc, str]]:
    """Count subschemas with references followed (once per distinct node); refuse cycles and blow-ups."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Loc, Any, bool]] = [((), schema, False)]
    while stack:
        loc, node, done = stack.pop()
        if not isinstance(node, dict) or (not done and id(node) in sizes):
            continue
        kids = [((*loc, *sub_loc), sub) for sub_loc, sub in _subschemas(node)]
        if id(node) in targets:
            kids.append(targets[id(node)])
        if done:
            open_.discard(id(node))
            total = 1 + sum(sizes.get(id(k), 1) for _, k in kids)
            if total > MAX_SCHEMA_NODES:
                return [(loc, f"the schema is too large: with its $refs followed it has more than {MAX_SCHEMA_NODES} parts")]
            sizes[id(node)] = total
            continue
        if id(node) in open_:
            return [(loc, "a $ref leads back to a schema that contains it (recursive schemas are not supported)")]
        open_.add(id(node))
        stack.append((loc, node, True))
        for kid_loc, kid in kids:
            if isinstance(kid, dict) and id(kid) in open_:
                return [(loc, "a $ref leads back to a schema that contains it (recursive schemas are not supported)")]
            stack.append((kid_loc, kid, False))
    return []


def make_validator(schema: Any) -> Draft202012Validator:
    """A draft 2020-12 validator for `schema` that resolves references only inside it.

    Raises:
        SchemaProblem: :func:`schema_problems` found something (the first one is raised).
    """
    problems = schema_problems(schema)
    if problems:
        loc, message = problems[0]
        raise SchemaProblem(loc, message)
    return Draft202012Validator(schema, registry=Registry())  # empty: an unknown reference fails, never fetches
