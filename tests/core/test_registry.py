"""The name tables of pluggable pieces are the one source the spec, its schema, validation and both compilers read."""

from __future__ import annotations

from pathlib import Path

import pytest

from matpo_graph.compilers.verl import LOSS_AGG_MODES
from matpo_graph.core.loader import check_text
from matpo_graph.core.credit import BUILTIN_STRATEGIES
from matpo_graph.core.registry import (
    ADVANTAGE_NORMALIZATIONS,
    CREDIT_STRATEGIES,
    LOCAL_SCORER_NAMES,
    LOSS_AGGREGATIONS,
    POLICY_KINDS,
    SCORERS,
    NameTable,
)
from matpo_graph.core.reward import LOCAL_SCORERS
from matpo_graph.core.spec import Graph


def _schema_enum(schema: dict, model: str, field: str) -> list[str]:
    prop = schema["$defs"][model]["properties"][field]
    options = prop.get("anyOf", [prop])
    return next(o["enum"] for o in options if "enum" in o)


def test_schema_enums_are_the_tables():
    schema = Graph.model_json_schema(by_alias=True)
    assert _schema_enum(schema, "CreditSpec", "loss_agg") == list(LOSS_AGGREGATIONS.names)
    assert _schema_enum(schema, "CreditSpec", "normalization") == list(ADVANTAGE_NORMALIZATIONS.names)
    assert _schema_enum(schema, "PolicySpec", "kind") == list(POLICY_KINDS.names)
    assert _schema_enum(schema, "JudgeSpec", "fallback") == list(LOCAL_SCORER_NAMES)
    for name in CREDIT_STRATEGIES:
        assert name in schema["$defs"]["CreditSpec"]["properties"]["strategy"]["description"]


def test_implementations_cover_exactly_the_tables():
    assert list(BUILTIN_STRATEGIES) == list(CREDIT_STRATEGIES.names)
    assert list(LOCAL_SCORERS) == list(LOCAL_SCORER_NAMES) and set(SCORERS) - set(LOCAL_SCORERS) == {"judge"}
    assert list(LOSS_AGG_MODES) == list(LOSS_AGGREGATIONS.names)


def test_a_table_refuses_implementations_that_do_not_match():
    table = NameTable("thing", {"a": "first", "b": "second"})
    assert table.implemented_by({"b": 2, "a": 1}) == {"a": 1, "b": 2}  # table order
    with pytest.raises(RuntimeError, match="do not match"):
        table.implemented_by({"a": 1})
    with pytest.raises(RuntimeError, match="do not match"):
        table.implemented_by({"a": 1, "b": 2, "c": 3})
    assert table.choices() == "a or b"
    assert NameTable("x", {"a": ""}, custom_code=True).choices() == "a or a custom 'package.module:function'"


@pytest.mark.parametrize(("path", "value", "table"), [
    ("credit:\n  strategy: {v}\n", "broadcastt", CREDIT_STRATEGIES),
    ("reward:\n  accuracy:\n    scorer: {v}\n", "exact", SCORERS),
    ("credit:\n  loss_agg: {v}\n", "mean", LOSS_AGGREGATIONS),
])
def test_validate_names_every_choice_of_the_table(path: str, value: str, table: NameTable):
    text = "name: g\nroot: a\nroles:\n  a: {system: hi}\n" + path.format(v=value)
    report = check_text(text, base_dir=Path("."))
    message = " ".join(str(i) for i in report.issues)
    assert report.issues
    for name in table:
        assert name in message
