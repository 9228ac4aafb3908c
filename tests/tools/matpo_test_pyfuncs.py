"""Functions used as python tools by the tests (imported by 'matpo_test_pyfuncs:<name>')."""

from __future__ import annotations

import asyncio
import time


def add(a: int, b: int) -> int:
    return a + b


async def greet(name: str) -> dict:
    await asyncio.sleep(0)
    return {"greeting": f"hello {name}"}


def explode(reason: str) -> str:
    raise RuntimeError(f"cannot do that: {reason}\nsecond line of detail")


def sleepy() -> str:
    time.sleep(1.0)
    return "late"


NOT_CALLABLE = 3
