"""The tool protocol: validated JSON arguments in, a short text for the model out. Tools never raise."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Tool", "ToolResult"]


class ToolResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="What the model sees (already truncated).")
    ok: bool = True
    error: str | None = Field(default=None, description="Short error kind/text when ok is False.")
    seconds: float = 0.0
    cached: bool = False
    attempts: int = 1


@runtime_checkable
class Tool(Protocol):
    name: str

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        """Run the tool. Failures come back as ToolResult(ok=False, text=<short message for the model>)."""
        ...
