"""Final-answer extraction from model text: ``\\boxed{...}`` or ``<answer>...</answer>``.

Pure string functions. Only a marked answer counts: free text without the graph's answer marker
extracts to ``None`` (and so scores 0), because rewarding unmarked text would teach the policy
that the declared answer format does not matter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

__all__ = ["AnswerFormat", "extract_answer", "extract_boxed", "extract_tagged", "strip_think"]

AnswerFormat = Literal["boxed", "tag"]

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_BOXED_OPEN = "\\boxed{"


def strip_think(text: str) -> str:
    """Drop closed ``<think>...</think>`` blocks: an answer drafted while thinking is not the final one."""
    return _THINK_RE.sub(" ", text)


def _balanced_body(text: str, start: int) -> str | None:
    """Body of the brace group opened just before `start`, or None when it never closes."""
    depth = 1
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2  # a backslash escapes the next character: \{ and \} are content, not structure
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (nested braces allowed); None if there is none."""
    text = strip_think(text)
    pos = text.rfind(_BOXED_OPEN)
    while pos != -1:
        body = _balanced_body(text, pos + len(_BOXED_OPEN))
        if body is not None:
            return body.strip()
        pos = text.rfind(_BOXED_OPEN, 0, pos)
    return None


def extract_tagged(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` block; None if there is none."""
    matches = _TAG_RE.findall(strip_think(text))
    return matches[-1].strip() if matches else None


def extract_answer(texts: str | Iterable[str], answer_format: AnswerFormat) -> str | None:
    """The final answer in the first text (of several, in priority order) that holds a marked answer.

    Args:
        texts: one text, or candidates in priority order (e.g. the root's final text, then its
            turns from last to first).
        answer_format: "boxed" or "tag", the graph's declared format.

    Returns:
        The stripped answer, or None when no candidate holds one in the declared format.

    Raises:
        ValueError: for an unknown answer format.
    """
    if answer_format == "boxed":
        extract = extract_boxed
    elif answer_format == "tag":
        extract = extract_tagged
    else:
        raise ValueError(f"unknown answer format {answer_format!r}: expected 'boxed' or 'tag'")
    for text in [texts] if isinstance(texts, str) else texts:
        found = extract(text)
        if found is not None:
            return found
    return None
