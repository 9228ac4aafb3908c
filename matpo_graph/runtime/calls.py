"""Checking one parsed call against what a role may call, and the texts the model gets back.

Kept apart from the executor so the rules (declared callables only, arguments validated against the
callable's JSON Schema, clear error messages for the model) are small and testable on their own.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from matpo_graph.core.program import CallableView, RoleProgram
from matpo_graph.core.schemas import SchemaProblem, make_validator
from matpo_graph.core.toolcalls import ParsedCall
from matpo_graph.tools.base import Tool, ToolResult

__all__ = ["CallCheck", "RoleValidators", "call_tool", "check_call", "clip_result", "request_seed"]

_MAX_ERRORS = 3


@dataclass(frozen=True)
class CallCheck:
    """Outcome of checking one parsed call: the callable to run, or why not."""

    callable: CallableView | None
    arguments: dict[str, Any] | None
    kind: str  # "tool" | "child" | "invalid"
    error: str | None  # None: well-formed and allowed
    message: str | None  # text for the model when the call is refused


class RoleValidators:
    """JSON Schema validators for every callable of one role, built once."""

    def __init__(self, role: RoleProgram) -> None:
        self.role = role
        self._validators: dict[str, Draft202012Validator] = {}
        for c in role.callables:
            try:  # local references only, and an empty registry: argument checks never fetch anything
                self._validators[c.name] = make_validator(c.parameters)
            except SchemaProblem as exc:
                raise ValueError(f"role {role.name!r}: callable {c.name!r} has an invalid parameter schema: {exc}") from exc

    def errors(self, name: str, arguments: dict[str, Any]) -> list[str]:
        found = sorted(self._validators[name].iter_errors(arguments), key=lambda e: list(e.absolute_path))
        out = []
        for err in found[:_MAX_ERRORS]:
            where = "/".join(str(p) for p in err.absolute_path)
            out.append(f"{where}: {err.message}" if where else err.message)
        return out


def check_call(parsed: ParsedCall, validators: RoleValidators) -> CallCheck:
    """Decide whether a parsed call may run; refusals carry a message telling the model what to fix."""
    role = validators.role
    names = ", ".join(c.name for c in role.callables) or "nothing"
    if parsed.error is not None:
        return CallCheck(
            None,
            parsed.arguments,
            "invalid",
            parsed.error,
            f"Error: malformed call ({parsed.error}). Nothing was run; write the call exactly in the format described.",
        )
    target = role.callable(parsed.name)
    if target is None:
        return CallCheck(
            None,
            parsed.arguments,
            "invalid",
            f"unknown callable {parsed.name!r}",
            f"Error: {parsed.name!r} is not available to you. You can call: {names}.",
        )
    arguments = parsed.arguments if parsed.arguments is not None else {}
    problems = validators.errors(target.name, arguments)
    if problems:
        detail = "; ".join(problems)
        return CallCheck(
            target,
            arguments,
            target.kind,
            f"invalid arguments: {detail}",
            f"Error: invalid arguments for {target.name!r}: {detail}. Nothing was run.",
        )
    return CallCheck(target, arguments, target.kind, None, None)


def clip_result(text: str, max_chars: int) -> str:
    """Cap a result at `max_chars` characters, saying that it was cut."""
    if len(text) <= max_chars:
        return text
    marker = " [...truncated]"
    return text[: max(0, max_chars - len(marker))] + marker


async def call_tool(tool: Tool, arguments: dict[str, Any]) -> ToolResult:
    """Tools never raise by contract; one that does anyway is recorded as a failed call."""
    start = time.perf_counter()
    try:
        return await tool.call(arguments)
    except Exception as exc:  # noqa: BLE001
        return ToolResult(
            text=f"Error: the tool failed ({type(exc).__name__}).",
            ok=False,
            error=f"{type(exc).__name__}: {exc}",
            seconds=time.perf_counter() - start,
        )


def request_seed(seed: int, tree_id: str, traj_id: str, turn: int, purpose: str) -> int:
    """A per-request seed derived from the tree's seed: reproducible, and different for every generation."""
    digest = hashlib.sha256(f"{seed}|{tree_id}|{traj_id}|{turn}|{purpose}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF
