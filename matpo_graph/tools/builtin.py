"""Built-in python tools for graphs, e.g. `config: {function: matpo_graph.tools.builtin:calculate}`.

`calculate` evaluates arithmetic by walking the parsed AST; nothing is ever passed to eval, and
sizes are bounded so a model cannot make it run forever (e.g. 9**9**9).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["CALCULATE_PARAMETERS", "CalculationError", "calculate"]

CALCULATE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"expression": {"type": "string", "description": "Arithmetic, e.g. '(1870 - 1795) * 2 / 3'."}},
    "required": ["expression"],
    "additionalProperties": False,
}

_MAX_CHARS = 500
_MAX_NODES = 200
_MAX_EXPONENT = 1000
_MAX_MAGNITUDE = 10**300

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt, "log": math.log,
    "log10": math.log10, "log2": math.log2, "exp": math.exp, "sin": math.sin, "cos": math.cos,
    "tan": math.tan, "floor": math.floor, "ceil": math.ceil, "factorial": math.factorial,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


class CalculationError(ValueError):
    """The expression is not plain arithmetic or is too large to evaluate."""


def _check_size(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalculationError("only numbers are supported")
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise CalculationError("result is not a finite number")
    if abs(value) > _MAX_MAGNITUDE:
        raise CalculationError("result is too large")
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        return _check_size(node.value)
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculationError(f"unknown name {node.id!r}")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_size(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise CalculationError(f"exponent larger than {_MAX_EXPONENT}")
        if isinstance(node.op, ast.Pow) and abs(left) > 1 and abs(right) * math.log10(abs(left)) > 300:
            raise CalculationError("result is too large")
        try:
            return _check_size(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculationError("division by zero") from None
        except OverflowError:
            raise CalculationError("result is too large") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id not in _FUNCTIONS:
            raise CalculationError(f"unknown function {node.func.id!r}")
        args = [_eval(a) for a in node.args]
        if node.func.id == "factorial" and (len(args) != 1 or not isinstance(args[0], int) or not 0 <= args[0] <= 170):
            raise CalculationError("factorial needs an integer between 0 and 170")
        try:
            return _check_size(_FUNCTIONS[node.func.id](*args))
        except (ValueError, TypeError, OverflowError) as exc:
            raise CalculationError(f"{node.func.id}: {exc}") from None
    raise CalculationError(f"unsupported syntax: {type(node).__name__}")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result as text (integers without '.0').

    Supports + - * / // % **, parentheses, pi/e/tau and abs, round, min, max, sqrt, log, log10,
    log2, exp, sin, cos, tan, floor, ceil, factorial. Raises CalculationError for anything else.
    """
    if not isinstance(expression, str):
        raise CalculationError("expression must be a string")
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if not text:
        raise CalculationError("empty expression")
    if len(text) > _MAX_CHARS:
        raise CalculationError(f"expression longer than {_MAX_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculationError("not a valid arithmetic expression") from None
    if sum(1 for _ in ast.walk(tree)) > _MAX_NODES:
        raise CalculationError("expression is too long")
    value = _eval(tree)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return repr(round(value, 12))
    return str(value)
