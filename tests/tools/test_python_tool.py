"""Python tools: schema-checked arguments, sync and async functions, exceptions and timeouts as results."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from matpo_graph.core.trust import TrustPolicy
from matpo_graph.tools.builtin import CALCULATE_PARAMETERS
from matpo_graph.tools.common import ToolConfigError
from matpo_graph.tools.registry import build_tools


@pytest.fixture(autouse=True)
def _importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


# The test functions are this suite's own code: trusted explicitly, as a user would trust theirs.
TRUST = TrustPolicy(trusted_code=("matpo_test_pyfuncs", "no_such_module_xyz"))


def tool(function: str, parameters: dict | None = None, **extra):
    spec = {"backend": "python", "description": "d", "config": {"function": function},
            "parameters": parameters or {"type": "object"}, **extra}
    return build_tools({"fn": spec}, trust=TRUST)["fn"]


ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"], "additionalProperties": False}


def test_python_tool_sync_function():
    result = asyncio.run(tool("matpo_test_pyfuncs:add", ADD_SCHEMA).call({"a": 2, "b": 40}))
    assert result.ok and result.text == "42"


def test_python_tool_async_function_json_result():
    result = asyncio.run(tool("matpo_test_pyfuncs:greet").call({"name": "Ada"}))
    assert result.ok and result.text == '{"greeting": "hello Ada"}'


@pytest.mark.parametrize("args", [{"a": 1}, {"a": "1", "b": 2}, {"a": 1, "b": 2, "c": 3}])
def test_python_tool_arguments_validated_before_call(args):
    result = asyncio.run(tool("matpo_test_pyfuncs:add", ADD_SCHEMA).call(args))
    assert not result.ok and result.error == "invalid_args"
    assert result.attempts == 0


def test_python_tool_exception_becomes_error_result():
    t = tool("matpo_test_pyfuncs:explode")
    result = asyncio.run(t.call({"reason": "no"}))
    assert not result.ok and result.error == "exception"
    assert result.text == "[fn error] RuntimeError: cannot do that: no"
    assert result.attempts == 1  # not retried
    assert t.metrics.errors_by_kind() == {"exception": 1}


def test_python_tool_timeout():
    result = asyncio.run(tool("matpo_test_pyfuncs:sleepy", timeout_s=0.1, retries=3).call({}))
    assert not result.ok and result.error == "timeout" and result.attempts == 1


def test_python_tool_builtin_calculate():
    calc = tool("matpo_graph.tools.builtin:calculate", CALCULATE_PARAMETERS)
    assert asyncio.run(calc.call({"expression": "(1870 - 1795) * 2"})).text == "150"
    bad = asyncio.run(calc.call({"expression": "__import__('os').system('true')"}))
    assert not bad.ok and bad.error == "exception" and "CalculationError" in bad.text


@pytest.mark.parametrize("function, message", [
    ("no_such_module_xyz:f", "cannot import module"),
    ("matpo_test_pyfuncs:missing", "has no callable"),
    ("matpo_test_pyfuncs:NOT_CALLABLE", "has no callable"),
])
def test_python_tool_bad_function_fails_at_build(function, message):
    with pytest.raises(ToolConfigError, match=message):
        tool(function)


def test_python_tool_invalid_schema_fails_at_build():
    with pytest.raises(ToolConfigError, match="not a valid JSON Schema"):
        tool("matpo_test_pyfuncs:add", {"type": "object", "properties": {"a": {"type": "integr"}}})
