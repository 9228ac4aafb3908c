"""How every verb talks to the terminal and ends: one exit-code rule, and text from graphs printed safely.

Exit codes: 0 done; 1 (:data:`EXIT_INVALID`) the verb ran and its input failed: a graph fails validation,
compiling or rendering, a generated file is out of date, a run has nothing to export, a port is taken; 2 (:data:`EXIT_USAGE`) the command was not run as asked: an
unknown flag, key or value, a missing file, a file that is not what the verb reads (rollout trees, a run
folder, a credit plan), a missing extra, as argparse does for its own errors. Anything the user's input contains is printed through :func:`show`.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

__all__ = ["EXIT_INVALID", "EXIT_USAGE", "fail", "show", "terminal_safe"]

EXIT_INVALID = 1
EXIT_USAGE = 2


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """`text` with control characters (C0 but newline and tab, DEL, C1), bidirectional overrides and
    lone surrogates written as escapes: a graph's text cannot drive the terminal (an OSC 52 sequence
    would write the clipboard, others move the cursor or rewrite what was printed)."""
    return _CONTROL.sub(_escape, text)


def show(text: str, stream: TextIO | None = None) -> None:
    """Print graph-derived text: escaped on a terminal, exact elsewhere (lone surrogates, which no
    encoding can write, are escaped everywhere)."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    text = terminal_safe(text) if isatty is not None and isatty() else _SURROGATE.sub(_escape, text)
    print(text, file=stream)


def fail(message: str, code: int = EXIT_INVALID) -> int:
    """Print `message` on stderr (safely) and return `code`, for ``return fail(...)`` in a verb."""
    show(message, sys.stderr)
    return code
