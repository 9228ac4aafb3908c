"""Tool-call text formats: parse calls out of model text, write them, and clean text for a parent.

Formats:

- ``hermes``: ``<tool_call>{"name": "web_search", "arguments": {"query": "..."}}</tool_call>``
- ``xml`` (paper style): ``<use_tool><name>web_search</name><arguments>{"query": "..."}</arguments></use_tool>``
- ``native``: the model's own chat template renders the tools and the results (``apply_chat_template(tools=...)``);
  its calls are read in the template's dialect, one of NATIVE_DIALECTS: ``hermes`` (Qwen2.5, Qwen3: the
  tags above) or ``llama3_json`` (Llama 3.x: the reply is ``{"name": ..., "parameters": {...}}``, optionally
  after ``<|python_tag|>``, several separated by ``;``). Given ``native`` itself, parsing picks the dialect
  from the text (tags present: hermes; a reply that is a JSON object: llama3_json).

Parsing is lenient where a small model is sloppy but the intent is clear (whitespace, code fences around
the JSON, one stray trailing character), and strict where it matters: a call whose JSON does not parse,
that has no name, or whose tag is never closed is returned with ``error`` set, so the executor can refuse
to run it and the reward can count it as malformed. Pure: no I/O, stdlib only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "NATIVE_DIALECTS",
    "ParsedCall",
    "ToolCallFormat",
    "answer_instructions",
    "format_tool_call",
    "format_tool_result",
    "parse_tool_calls",
    "strip_for_parent",
    "strip_thinking",
    "strip_tool_calls",
    "tool_instructions",
]

ToolCallFormat = Literal["xml", "hermes", "native", "llama3_json"]
NATIVE_DIALECTS: tuple[str, ...] = ("hermes", "llama3_json")
_FORMATS = ("xml", "hermes", "native", "llama3_json")
_PYTHON_TAG = "<|python_tag|>"

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)

_TAGS: dict[str, tuple[str, str]] = {"hermes": ("<tool_call>", "</tool_call>"), "xml": ("<use_tool>", "</use_tool>")}


@dataclass(frozen=True)
class ParsedCall:
    """One call found in model text. ``error`` is None exactly when the call is well-formed."""

    name: str
    arguments: dict[str, Any] | None
    raw: str
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


def _check_format(fmt: str) -> None:
    if fmt not in _FORMATS:
        raise ValueError(f"unknown tool call format {fmt!r}: use 'xml', 'hermes' or 'native'")


def _parse_llama3_json(text: str) -> list[ParsedCall]:
    """Llama 3.x JSON calls: the whole reply is one or more ``{"name", "parameters"}`` objects."""
    body = text.strip()
    if body.startswith(_PYTHON_TAG):
        body = body[len(_PYTHON_TAG):].strip()
    if not body.startswith("{"):
        return []
    calls: list[ParsedCall] = []
    decoder = json.JSONDecoder()
    pos = 0
    while pos < len(body):
        while pos < len(body) and body[pos] in " \t\r\n;":
            pos += 1
        if pos >= len(body):
            break
        if body[pos] != "{":
            calls.append(ParsedCall(name="", arguments=None, raw=body[pos:], error="text after the JSON call"))
            break
        try:
            obj, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as exc:
            calls.append(ParsedCall(name="", arguments=None, raw=body[pos:], error=f"bad JSON ({exc.msg})"))
            break
        raw = body[pos:end]
        pos = end
        name, args, err = _parse_hermes(raw) if isinstance(obj, dict) else ("", None, "a call must be a JSON object")
        calls.append(ParsedCall(name=name, arguments=args, raw=raw, error=err))
    return calls


def _blocks(text: str, open_tag: str, close_tag: str) -> list[tuple[str, str, bool]]:
    """(raw block, inner text, closed) for each opening tag, in order; an unclosed block runs to the end."""
    out: list[tuple[str, str, bool]] = []
    lower = text.lower()
    o, c = open_tag.lower(), close_tag.lower()
    pos = 0
    while True:
        start = lower.find(o, pos)
        if start < 0:
            return out
        inner_start = start + len(o)
        json_end = _json_end(text, lower, inner_start, c)  # tags quoted inside the JSON do not count
        end = json_end if json_end >= 0 else lower.find(c, inner_start)
        nxt = lower.find(o, inner_start)
        if end < 0 or (0 <= nxt < end and json_end < 0):  # never closed (or a new call opens first)
            stop = nxt if nxt >= 0 else len(text)
            out.append((text[start:stop], text[inner_start:stop], False))
            pos = stop
        else:
            out.append((text[start : end + len(c)], text[inner_start:end], True))
            pos = end + len(c)


def _json_end(text: str, lower: str, inner_start: int, close: str) -> int:
    """Where the closing tag sits when the block's content is one JSON object followed by it, else -1.

    So a closing tag inside a JSON string (an argument that quotes ``</tool_call>``) does not end the block.
    """
    j = inner_start
    while j < len(text) and text[j].isspace():
        j += 1
    if j >= len(text) or text[j] != "{":
        return -1
    try:
        _, k = json.JSONDecoder().raw_decode(text, j)
    except json.JSONDecodeError:
        return -1
    while k < len(text) and text[k].isspace():
        k += 1
    return k if lower.startswith(close, k) else -1


def _loads_lenient(raw: str) -> tuple[Any, str | None]:
    """Parse JSON, tolerating code fences and trailing garbage after one complete value."""
    s = raw.strip()
    fenced = _FENCE.match(s)
    if fenced:
        s = fenced.group(1).strip()
    s = s.strip("`").strip()
    if not s:
        return None, "empty JSON"
    try:
        return json.loads(s), None
    except json.JSONDecodeError:
        pass
    start = s.find("{")
    if start < 0:
        return None, f"not a JSON object: {s[:60]!r}"
    try:
        value, _ = json.JSONDecoder().raw_decode(s[start:])
        return value, None
    except json.JSONDecodeError as exc:
        return None, f"bad JSON ({exc.msg} at char {exc.pos})"


def _arguments(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    if value is None:
        return {}, None
    if isinstance(value, str):  # OpenAI style: arguments as a JSON string
        parsed, err = _loads_lenient(value) if value.strip() else ({}, None)
        if err is not None:
            return None, f"arguments: {err}"
        value = parsed
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def _parse_hermes(inner: str) -> tuple[str, dict[str, Any] | None, str | None]:
    obj, err = _loads_lenient(inner)
    if err is not None:
        return "", None, err
    if not isinstance(obj, dict):
        return "", None, f"a call must be a JSON object, got {type(obj).__name__}"
    name = obj.get("name")
    args, arg_err = _arguments(obj.get("arguments", obj.get("parameters")))
    if not isinstance(name, str) or not name.strip():
        return "", args, "missing name"
    return name.strip(), args, arg_err


def _inner_tag(text: str, tag: str) -> tuple[str | None, bool]:
    """Content of <tag>..</tag> (closed=True), or from <tag> to the end (closed=False), or None."""
    m = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL | re.IGNORECASE)
    if m:
        return m.group(1), True
    m = re.search(rf"<{tag}>(.*)", text, re.DOTALL | re.IGNORECASE)
    return (m.group(1), False) if m else (None, True)


def _parse_xml(inner: str) -> tuple[str, dict[str, Any] | None, str | None]:
    name, name_closed = _inner_tag(inner, "name")
    args_text, args_closed = _inner_tag(inner, "arguments")
    errors: list[str] = []
    args: dict[str, Any] | None = {}
    if args_text is not None:
        args, err = _arguments(args_text) if args_text.strip() else ({}, None)
        if err is not None:
            errors.append(err.removeprefix("arguments: "))
        if not args_closed:
            errors.append("unclosed <arguments> tag")
    clean_name = (name or "").strip()
    if not name_closed and clean_name:
        clean_name = clean_name.split("<", 1)[0].strip()
        errors.append("unclosed <name> tag")
    if not clean_name:
        errors.insert(0, "missing name")
    return clean_name, args, "; ".join(errors) or None


def parse_tool_calls(text: str, fmt: ToolCallFormat) -> list[ParsedCall]:
    """All tool calls in ``text`` (outside ``<think>`` blocks), in order of appearance.

    Args:
        text: the decoded model output of one turn.
        fmt: ``"hermes"``, ``"xml"``, ``"llama3_json"`` or ``"native"`` (dialect read from the text).

    Returns:
        One :class:`ParsedCall` per opening tag; malformed ones carry ``error`` and are still returned,
        so that they count in the format score.

    Raises:
        ValueError: unknown ``fmt``.
    """
    _check_format(fmt)
    if fmt == "native":
        cleaned = strip_thinking(text)
        fmt = "hermes" if _TAGS["hermes"][0] in cleaned.lower() else "llama3_json"
    if fmt == "llama3_json":
        return _parse_llama3_json(strip_thinking(text))
    open_tag, close_tag = _TAGS[fmt]
    calls: list[ParsedCall] = []
    for raw, inner, closed in _blocks(strip_thinking(text), open_tag, close_tag):
        name, args, err = (_parse_hermes if fmt == "hermes" else _parse_xml)(inner)
        if not closed:
            err = f"unclosed {open_tag} tag" + (f"; {err}" if err else "")
        calls.append(ParsedCall(name=name, arguments=args, raw=raw, error=err))
    return calls


def format_tool_call(name: str, arguments: dict[str, Any], fmt: ToolCallFormat) -> str:
    """The canonical text of one call; :func:`parse_tool_calls` reads it back unchanged.

    ``native`` writes the hermes form (the dialect of Qwen's templates); a Llama 3.x model's calls are
    ``llama3_json``.
    """
    _check_format(fmt)
    if fmt == "llama3_json":
        return _json_text({"name": name, "parameters": arguments})
    if fmt in ("hermes", "native"):
        return "<tool_call>\n" + _json_text({"name": name, "arguments": arguments}) + "\n</tool_call>"
    return f"<use_tool>\n<name>{name}</name>\n<arguments>{_json_text(arguments)}</arguments>\n</use_tool>"


def _json_text(value: Any) -> str:
    """JSON with every '<' written as \\u003c: an argument holding '<think>' or '</tool_call>' would otherwise
    open a thinking block or close the call when the text is parsed back ('<' only occurs inside JSON strings,
    so the escape is exact)."""
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")


def format_tool_result(name: str, text: str, fmt: ToolCallFormat) -> str:
    """How a call's result is shown to the model (a user-side message); with ``native`` (and its dialects)
    the text as it is: the chat template wraps a ``tool`` message itself."""
    _check_format(fmt)
    if fmt in ("native", "llama3_json"):
        return text
    if fmt == "hermes":
        return f"<tool_response>\n{text}\n</tool_response>"
    return f'<tool_result name="{name}">\n{text}\n</tool_result>'


def strip_thinking(text: str) -> str:
    """Remove ``<think>...</think>`` blocks; an unclosed one runs to the end, a lone ``</think>`` drops what precedes it."""
    out = _THINK_BLOCK.sub("", text)
    close = _THINK_CLOSE.search(out)
    if close:
        out = out[close.end() :]
    opened = _THINK_OPEN.search(out)
    if opened:
        out = out[: opened.start()]
    return out


def strip_tool_calls(text: str) -> str:
    """Remove the blocks of both call formats (closed or not)."""
    out = text
    for open_tag, close_tag in _TAGS.values():
        for raw, _, _ in _blocks(out, open_tag, close_tag):
            out = out.replace(raw, "", 1)
    return out


def strip_for_parent(text: str) -> str:
    """What a child returns to its parent: no thinking, no call blocks, tidy blank lines."""
    out = strip_tool_calls(strip_thinking(text))
    out = re.sub(r"\n{3,}", "\n\n", out)
    return out.strip()


def _example_arguments(parameters: dict[str, Any]) -> dict[str, Any]:
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    out: dict[str, Any] = {}
    for key, schema in (props or {}).items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        out[key] = {"integer": 3, "number": 1.5, "boolean": True, "array": [], "object": {}}.get(str(kind), "...")
        if len(out) == 2:
            break
    return out


def tool_instructions(fmt: ToolCallFormat, tools: Sequence[dict[str, Any]]) -> str:
    """Built-in text telling the model which tools it has and exactly how to call them.

    With ``native`` the chat template lists the tools and the call format itself, so this only says so.
    """
    _check_format(fmt)
    if not tools:
        return "You have no tools in this task. Work from what you already know."
    if fmt == "native":
        names = ", ".join(t["name"] for t in tools)
        return (f"You can use these tools: {names}. Call them in the format described with the tools above; "
                "each result comes back in the next message. Write no call when you are done.")
    lines = ["You can use the following tools:"]
    for t in tools:
        params = json.dumps(t.get("parameters", {}), ensure_ascii=False, separators=(",", ":"))
        lines.append(f"- {t['name']}: {t.get('description', '').strip()} Arguments (JSON Schema): {params}")
    first = tools[0]
    example = format_tool_call(first["name"], _example_arguments(first.get("parameters", {})), fmt)
    lines += [
        "",
        "To use a tool, write a call in exactly this form, with the arguments as a JSON object:",
        example,
        (
            "You may write several calls in one reply; they run at the same time. After your reply you will "
            "receive each result, then you continue. Write no call when you are done."
        ),
    ]
    return "\n".join(lines)


def answer_instructions(answer_format: Literal["boxed", "tag"], *, is_root: bool = True) -> str:
    """Built-in text telling the model how to write its final answer (or, for a helper, its report)."""
    if not is_root:
        return (
            "When you have what the task asks for, stop calling tools and reply with a short, factual report "
            "of what you found, including the key facts and where they came from."
        )
    if answer_format == "boxed":
        return "When you are sure, give the final answer with no further tool calls, as \\boxed{your answer}."
    if answer_format == "tag":
        return "When you are sure, give the final answer with no further tool calls, as <answer>your answer</answer>."
    raise ValueError(f"unknown answer format {answer_format!r}: use 'boxed' or 'tag'")
