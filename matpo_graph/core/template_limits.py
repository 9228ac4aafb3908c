"""A Jinja sandbox that bounds work, not only attribute access: time, output and value sizes.

Jinja's sandbox stops templates from reaching Python internals, but not from asking for a lot of
work: ``{{ 9 ** 9 ** 9 }}``, ``{{ "x" * 10 ** 9 }}``, ``{{ "x"|center(10 ** 9) }}``, a macro that
doubles a string at each recursion, nested loops over large ranges. Graphs may come from strangers,
so :class:`BoundedSandbox`:

- intercepts the arithmetic operators and refuses results larger than :data:`MAX_VALUE_CHARS`
  characters or items, or integers wider than :data:`MAX_INT_BITS` bits, *before* computing them;
- checks the size a join, concatenation (``~``), replace, padding, ``%``/``format`` or wrap would
  produce before doing it, for filters and for string methods alike; numeric arguments of filters
  are capped at :data:`MAX_FILTER_INT`;
- counts every list, tuple, dict and namespace a template builds (literals, operator, filter and call
  results, namespace assignments) with shared references expanded, as YAML aliases are counted, and
  refuses one larger than :data:`MAX_EXPANDED_SIZE` (items plus the characters of the strings inside):
  a list doubled by reference 64 times is tiny in memory, but comparing, sorting, hashing or printing
  it would walk 2^64 nodes in C, where no deadline can stop it; namespaces may not be nested or kept
  in containers (so nothing a template builds can change after it was counted);
- checks the size a ``format`` width or precision, ``%``-format, ``expandtabs``, ``translate``,
  ``tojson(indent=...)`` or ``pprint`` would produce *before* doing it; templates get no bytes;
- caps captured blocks and macro output (their buffers, as pieces arrive) and the rendered text at
  :data:`MAX_OUTPUT_CHARS`;
- is immutable (templates cannot change lists or dicts they are given) and compiles without
  constant folding, so nothing is evaluated while a template is checked or compiled;
- runs every compile and render under a wall-clock deadline (:data:`RENDER_SECONDS`), checked on
  each line of template code and each Python call made while rendering (a trace function,
  installed only for the duration of the call and only in the calling thread).

Every refusal raises :class:`TemplateLimitError` (a ``SecurityError``).
"""

from __future__ import annotations

import re
import string
import sys
import threading
import time
from collections.abc import Callable, ItemsView, Iterable, KeysView, ValuesView
from functools import update_wrapper, wraps
from types import BuiltinMethodType
from typing import Any, TypeVar

import jinja2
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter
from jinja2.utils import Namespace
from markupsafe import Markup

__all__ = [
    "MAX_EXPANDED_SIZE",
    "MAX_FILTER_INT",
    "MAX_INT_BITS",
    "MAX_OUTPUT_CHARS",
    "MAX_RANGE",
    "MAX_TOTAL_CHARS",
    "MAX_TEMPLATE_CHARS",
    "MAX_VALUE_CHARS",
    "RENDER_SECONDS",
    "BoundedSandbox",
    "TemplateLimitError",
    "within_deadline",
]

MAX_TEMPLATE_CHARS = 200_000
"""Longest template source (includes inlined)."""
MAX_VALUE_CHARS = 1_000_000
"""Largest string (characters) or sequence (items) an operation may produce."""
MAX_OUTPUT_CHARS = 1_000_000
"""Longest rendered text (and captured block or macro output)."""
MAX_INT_BITS = 4096
"""Widest integer an operation may produce."""
MAX_FILTER_INT = 10_000
"""Largest number a filter or padding method accepts as an argument (widths, counts, indents)."""
MAX_RANGE = 100_000
"""Most items of range()."""
MAX_EXPANDED_SIZE = 1_000_000
"""Largest list, tuple, dict or namespace a template may build, counted with shared references expanded:
one per item, plus the characters of each string (printing it writes a few characters per unit)."""
MAX_TOTAL_CHARS = 20_000_000
"""Most characters (or items) all the checked operations of one render may produce together."""
RENDER_SECONDS = 2.0
"""Wall-clock limit of one compile or render."""

T = TypeVar("T")
_TEMPLATE_FILE = "<template>"


class TemplateLimitError(SecurityError):
    """A template asked for more work or memory than the limits allow."""


def _too_big(what: str, size: int, limit: int) -> TemplateLimitError:
    return TemplateLimitError(f"template limit: {what} would be {size} long, more than {limit}")


def _measure(value: Any) -> int:
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        return len(value)
    return 0


_BUDGET = threading.local()


def _charge(size: int) -> None:
    """Count what one render (or compile) has produced so far; values kept in lists or namespaces
    across a loop are each within MAX_VALUE_CHARS, but together they must stay within MAX_TOTAL_CHARS."""
    used = getattr(_BUDGET, "used", None)
    if used is None:  # outside within_deadline (e.g. a direct call in a test): nothing to count against
        return
    used += size
    _BUDGET.used = used
    if used > MAX_TOTAL_CHARS:
        raise _too_big("everything this template computed", used, MAX_TOTAL_CHARS)


def _check(value: T) -> T:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise _too_big("an integer (bits)", value.bit_length(), MAX_INT_BITS)
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise TemplateLimitError("template limit: templates work with text; bytes are not available")
    size = _measure(value)
    if size > MAX_VALUE_CHARS:
        raise _too_big("a value", size, MAX_VALUE_CHARS)
    if isinstance(value, _CONTAINERS):
        _weigh(value)
    _charge(size)
    return value


# --------------------------------------------------------------------------- expanded size


_CONTAINERS = (list, tuple, set, frozenset, dict, KeysView, ValuesView, ItemsView, Namespace)


def _children(value: Any) -> list[Any] | None:
    """The values a container holds (dict keys and values flattened), or None for a leaf."""
    if not isinstance(value, _CONTAINERS):
        return None
    if isinstance(value, (list, tuple, set, frozenset, KeysView, ValuesView)):
        return list(value)
    if isinstance(value, dict):
        return [x for pair in value.items() for x in pair]
    if isinstance(value, ItemsView):
        return [x for pair in value for x in pair]
    if isinstance(value, Namespace):
        attrs = object.__getattribute__(value, "_Namespace__attrs")
        return [x for pair in attrs.items() for x in pair]
    return None


def _leaf_size(value: Any) -> int:
    if isinstance(value, str):
        return max(len(value), 1)
    if isinstance(value, int) and not isinstance(value, bool):
        return 1 + value.bit_length() // 3
    return 1


def _weigh(value: Any) -> tuple[int, int]:
    """(expanded size, nesting depth) of a container, each distinct container counted once per render
    (cached by identity; the sandbox is immutable, so a counted list cannot change afterwards).

    Iterative, so deep nesting cannot exhaust the stack. Refuses a size over MAX_EXPANDED_SIZE as
    soon as it is reached, a namespace kept inside a container, and a structure that contains itself.
    """
    memo: dict[int, tuple[Any, int, int]] = getattr(_BUDGET, "weights", None)
    if memo is None:
        memo = {}
    local: dict[int, tuple[Any, int, int]] = {}  # namespaces: mutable, so counted afresh each time

    def known(obj: Any) -> tuple[Any, int, int] | None:
        hit = memo.get(id(obj)) or local.get(id(obj))
        return hit if hit is not None and hit[0] is obj else None

    open_: set[int] = set()
    stack: list[tuple[Any, bool, int]] = [(value, False, 0)]
    while stack:
        obj, done, level = stack.pop()
        kids = _children(obj)
        if kids is None or (not done and known(obj) is not None):
            continue
        if not done:
            if id(obj) in open_:
                raise TemplateLimitError("template limit: a value that contains itself")
            if level and isinstance(obj, Namespace):
                raise TemplateLimitError("template limit: a namespace cannot be kept inside a list, dict or namespace")
            open_.add(id(obj))
            stack.append((obj, True, level))
            stack.extend((kid, False, level + 1) for kid in kids if isinstance(kid, _CONTAINERS) and known(kid) is None)
            continue
        open_.discard(id(obj))
        size, depth = 1, 0
        for kid in kids:
            hit = known(kid) if isinstance(kid, _CONTAINERS) else None
            size += hit[1] if hit is not None else _leaf_size(kid)
            depth = max(depth, hit[2] + 1 if hit is not None else 1)
            if size > MAX_EXPANDED_SIZE:
                raise _too_big("a structure (items and characters, shared references counted each time)", size, MAX_EXPANDED_SIZE)
        (local if isinstance(obj, Namespace) else memo)[id(obj)] = (obj, size, depth)
    hit = known(value)
    return (hit[1], hit[2]) if hit is not None else (_leaf_size(value), 0)


class BoundedNamespace(Namespace):
    """``namespace()`` in templates: each assignment is counted like any value a template builds."""

    def __setitem__(self, name: str, value: Any) -> None:
        if isinstance(value, Namespace):
            raise TemplateLimitError("template limit: a namespace cannot be kept inside a list, dict or namespace")
        _check(value)
        super().__setitem__(name, value)
        _weigh(self)


# --------------------------------------------------------------------------- formats


_NUMBER = re.compile(r"\d+")
_MAX_DIGITS = len(str(MAX_FILTER_INT))


def _percent_fields(fmt: str) -> Iterable[tuple[str | None, str | None]]:
    """(width, precision) of each conversion of a %-format, parsed as CPython does (a mapping key
    may hold nested parentheses; '*' takes the number from the arguments)."""
    i, n = 0, len(fmt)
    while True:
        i = fmt.find("%", i)
        if i < 0 or i + 1 >= n:
            return
        i += 1
        if fmt[i] == "(":
            depth, i = 1, i + 1
            while i < n and depth:
                depth += {"(": 1, ")": -1}.get(fmt[i], 0)
                i += 1
        while i < n and fmt[i] in "-+ #0":
            i += 1
        width = precision = None
        start = i
        if i < n and fmt[i] == "*":
            i += 1
        while i < n and fmt[i].isdigit():
            i += 1
        width = fmt[start:i] or None
        if i < n and fmt[i] == ".":
            i += 1
            start = i
            if i < n and fmt[i] == "*":
                i += 1
            while i < n and fmt[i].isdigit():
                i += 1
            precision = fmt[start:i] or None
        while i < n and fmt[i] in "hlL":
            i += 1
        i += 1  # the conversion character ('%' for a literal percent sign)
        yield width, precision


def _check_number_text(what: str, digits: str) -> None:
    if len(digits) > _MAX_DIGITS or int(digits) > MAX_FILTER_INT:
        raise _too_big(what, int(digits[: _MAX_DIGITS + 1]), MAX_FILTER_INT)


def _check_percent_format(fmt: str) -> None:
    for width, precision in _percent_fields(fmt):
        for group in (width, precision):
            if group is None:
                continue
            if "*" in group:
                raise TemplateLimitError("template limit: '*' widths in %-formatting are not allowed")
            _check_number_text("a %-format width", group)


def _check_brace_format(fmt: str, depth: int = 0) -> None:
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises the same error itself
    for _, _, spec, _ in parsed:
        if spec:
            for number in _NUMBER.findall(spec):
                _check_number_text("a format width", number)
            if depth < 2:
                _check_brace_format(spec, depth + 1)


_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d*))?[A-Za-z%]?", re.DOTALL)


def _check_format_spec(spec: str) -> None:
    """The final spec of one ``str.format`` field (nested fields already filled in), before formatting."""
    m = _SPEC.fullmatch(spec)
    numbers = [g for g in (m["width"], m["precision"]) if g] if m else _NUMBER.findall(spec)
    for number in numbers:
        _check_number_text("a format width", number)


class _BoundedFormatter(SandboxedFormatter):
    """``str.format`` in the sandbox, checking each field's width and precision before formatting it
    (``"{0:{1}}".format("x", 10**9)`` takes the width from an argument, out of sight of the source)."""

    def format_field(self, value: Any, format_spec: str) -> Any:
        _check_format_spec(format_spec)
        return _check(super().format_field(value, format_spec))


class _BoundedEscapeFormatter(SandboxedEscapeFormatter):
    def format_field(self, value: Any, format_spec: str) -> Any:
        _check_format_spec(format_spec)
        return _check(super().format_field(value, format_spec))


def _check_binop(op: str, left: Any, right: Any) -> None:
    ints = isinstance(left, int) and isinstance(right, int)
    if op == "**" and ints and right > 0:
        bits = max(left.bit_length(), 1) * right
        if abs(left) > 1 and bits > MAX_INT_BITS:
            raise _too_big("a power (bits)", bits, MAX_INT_BITS)
    elif op == "*":
        if ints:
            bits = left.bit_length() + right.bit_length()
            if bits > MAX_INT_BITS:
                raise _too_big("a product (bits)", bits, MAX_INT_BITS)
        elif isinstance(left, int) or isinstance(right, int):
            seq, n = (right, left) if isinstance(left, int) else (left, right)
            size = _measure(seq) * max(int(n), 0)
            if size > MAX_VALUE_CHARS:
                raise _too_big("a repetition", size, MAX_VALUE_CHARS)
    elif op == "+" and not ints:
        size = _measure(left) + _measure(right)
        if size > MAX_VALUE_CHARS:
            raise _too_big("a sum", size, MAX_VALUE_CHARS)
    elif op == "%" and isinstance(left, str):
        _check_percent_format(left)


def _join_size(items: list[Any], sep: str) -> int:
    return sum(len(x) if isinstance(x, str) else 8 for x in items) + len(sep) * max(len(items) - 1, 0)


def _check_replace(s: str, old: str, new: str, count: Any = -1) -> None:
    hits = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    size = len(s) + hits * max(len(new) - len(old), 0)
    if size > MAX_VALUE_CHARS:
        raise _too_big("a replacement", size, MAX_VALUE_CHARS)


def _check_wrap(s: Any, width: Any, wrapstring: Any) -> None:
    if isinstance(s, str) and isinstance(wrapstring, str) and isinstance(width, int):
        lines = len(s) // max(width, 1) + s.count("\n") + 1
        size = len(s) + lines * len(wrapstring)
        if size > MAX_VALUE_CHARS:
            raise _too_big("wrapped text", size, MAX_VALUE_CHARS)


def _check_indent(s: Any, width: Any) -> None:
    if isinstance(s, str):
        per_line = len(width) if isinstance(width, str) else (width if isinstance(width, int) else 0)
        size = len(s) + (s.count("\n") + 1) * per_line
        if size > MAX_VALUE_CHARS:
            raise _too_big("indented text", size, MAX_VALUE_CHARS)


def _check_int_args(name: str, args: Iterable[Any]) -> None:
    for value in args:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_FILTER_INT:
            raise TemplateLimitError(f"template limit: {name}() got the number {value}, more than {MAX_FILTER_INT}")


def _materialise(value: Any) -> Any:
    if isinstance(value, (str, list, tuple, dict, set, frozenset)):
        return value
    if isinstance(value, Iterable):
        items = []
        for item in value:
            items.append(item)
            if len(items) > MAX_VALUE_CHARS:
                raise _too_big("a sequence", len(items), MAX_VALUE_CHARS)
        return items
    return value


def _guard_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter with the size checks above; the jinja pass_arg marker is kept by `wraps`."""
    passes = getattr(fn, "jinja_pass_arg", None)

    @wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        lead = 1 if passes is not None else 0  # context / eval_context / environment first
        args = list(args)
        if len(args) > lead:
            if name in ("join", "replace", "wordwrap", "indent", "center", "format"):
                args[lead] = _materialise(args[lead]) if name == "join" else args[lead]
            value, rest = args[lead], args[lead + 1 :]
            if name != "format":
                _check_int_args(name, [*rest, *kwargs.values()])
            if name == "join":
                sep = rest[0] if rest else kwargs.get("d", "")
                size = _join_size(list(value), sep if isinstance(sep, str) else "")
                if size > MAX_VALUE_CHARS:
                    raise _too_big("a join", size, MAX_VALUE_CHARS)
            elif name == "replace" and isinstance(value, str) and len(rest) >= 2:
                _check_replace(value, str(rest[0]), str(rest[1]), rest[2] if len(rest) > 2 else kwargs.get("count", -1))
            elif name == "wordwrap":
                width = rest[0] if rest else kwargs.get("width", 79)
                wrapstring = rest[2] if len(rest) > 2 else kwargs.get("wrapstring")
                _check_wrap(value, width, wrapstring if wrapstring is not None else "\n")
            elif name == "indent":
                _check_indent(value, rest[0] if rest else kwargs.get("width", 4))
            elif name == "format" and isinstance(value, str):
                _check_percent_format(value)
            elif name in ("tojson", "pprint"):
                _check_dump(name, value, rest[0] if rest else kwargs.get("indent"))
            elif name == "urlize":
                for extra in [*rest, *kwargs.values()]:
                    if isinstance(extra, str) and len(extra) > 100:  # repeated on every link
                        raise _too_big("an urlize attribute", len(extra), 100)
        return _check(fn(*args, **kwargs))

    return guarded


_PADDING_METHODS = {"center", "ljust", "rjust", "zfill", "expandtabs"}


def _check_method_call(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Size checks for methods that can amplify; returns the arguments (a join's items listed)."""
    inner = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format / format_map
    owner = getattr(inner, "__self__", None)
    name = getattr(inner, "__name__", "")
    if isinstance(inner, BuiltinMethodType) and not isinstance(owner, type(sys)):
        for value in [*args, *kwargs.values()]:  # e.g. (1).to_bytes(10 ** 9): a size asked of C code
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_VALUE_CHARS:
                raise _too_big(f"an argument of {name}()", abs(value), MAX_VALUE_CHARS)
    if not isinstance(owner, str):
        return args
    if name in _PADDING_METHODS:
        _check_int_args(f"str.{name}", [*args, *kwargs.values()])
        if name == "expandtabs":
            tabsize = args[0] if args else kwargs.get("tabsize", 8)
            size = len(owner) + owner.count("\t") * max(tabsize if isinstance(tabsize, int) else 8, 0)
            if size > MAX_VALUE_CHARS:
                raise _too_big("expanded tabs", size, MAX_VALUE_CHARS)
    elif name == "join" and args:
        items = _materialise(args[0])
        size = _join_size(list(items), owner)
        if size > MAX_VALUE_CHARS:
            raise _too_big("a join", size, MAX_VALUE_CHARS)
        args = (items, *args[1:])
    elif name == "replace" and len(args) >= 2:
        _check_replace(owner, str(args[0]), str(args[1]), args[2] if len(args) > 2 else kwargs.get("count", -1))
    elif name in ("format", "format_map"):
        _check_brace_format(owner)
    elif name == "translate" and args:
        table = args[0]
        values = table.values() if isinstance(table, dict) else []
        longest = max((len(v) for v in values if isinstance(v, str)), default=1)
        size = len(owner) * max(longest, 1)
        if size > MAX_VALUE_CHARS:
            raise _too_big("a translation", size, MAX_VALUE_CHARS)
    return args


def _check_dump(name: str, value: Any, indent: Any) -> None:
    """tojson(indent=n) and pprint indent every line by its depth: check the text they would write."""
    if not isinstance(value, _CONTAINERS):
        return
    size, depth = _weigh(value)
    step = indent if isinstance(indent, int) and not isinstance(indent, bool) else (len(indent) if isinstance(indent, str) else 0)
    estimate = size * (1 + max(step, 0) * depth) if name == "tojson" else size * (1 + depth)
    if estimate > MAX_VALUE_CHARS * 4:
        raise _too_big(f"the text of {name}", estimate, MAX_VALUE_CHARS * 4)


class _BoundedBuffer(list[Any]):
    """The output buffer of a captured block, macro or call block: refuses more than MAX_OUTPUT_CHARS
    as pieces arrive (a loop inside a block would otherwise pile up pieces until the deadline)."""

    _size = 0

    def append(self, piece: Any) -> None:
        self._size += len(piece) if isinstance(piece, str) else 0
        if self._size > MAX_OUTPUT_CHARS:
            raise _too_big("captured template output", self._size, MAX_OUTPUT_CHARS)
        super().append(piece)

    def extend(self, pieces: Iterable[Any]) -> None:
        for piece in pieces:
            self.append(piece)


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles `a ~ b` into a size-checked join, slices into checked getitem calls, list, tuple and
    dict literals into counted values, and block buffers into size-checked lists."""

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.bounded_buffer()")

    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:
        """Jinja compiles `x[a:b]` to a bare subscript; route slices through the (checking) getitem too."""
        if not isinstance(node.arg, nodes.Slice):
            super().visit_Getitem(node, frame)
            return
        self.write("environment.getitem(")
        self.visit(node.node, frame)
        self.write(", slice(")
        for i, part in enumerate((node.arg.start, node.arg.stop, node.arg.step)):
            self.write(", " if i else "")
            if part is None:
                self.write("None")
            else:
                self.visit(part, frame)
        self.write("))")

    def visit_List(self, node: nodes.List, frame: Frame) -> None:
        self.write("environment.bounded_value(")
        super().visit_List(node, frame)
        self.write(")")

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self.write("environment.bounded_value(")
        super().visit_Dict(node, frame)
        self.write(")")

    def visit_Tuple(self, node: nodes.Tuple, frame: Frame) -> None:
        if node.ctx != "load":  # an unpacking target: `{% for a, b in x %}`
            super().visit_Tuple(node, frame)
            return
        self.write("environment.bounded_value(")
        super().visit_Tuple(node, frame)
        self.write(")")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_str_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _bounded_range(*args: int) -> range:
    rng = range(*args)
    if len(rng) > MAX_RANGE:
        raise _too_big("a range", len(rng), MAX_RANGE)
    return rng


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the work bounds described in the module docstring."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("optimized", False)
        super().__init__(**kwargs)
        self.filters = {name: _guard_filter(name, fn) for name, fn in self.filters.items()}
        self.globals.pop("lipsum", None)  # generates text of a caller-chosen size
        self.globals["range"] = _bounded_range
        self.globals["namespace"] = BoundedNamespace

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format`` / ``format_map`` through a formatter that checks each field's final width."""
        if not isinstance(value, BuiltinMethodType) or value.__name__ not in ("format", "format_map"):
            return None
        f_self = value.__self__
        if not isinstance(f_self, str):
            return None
        str_type = type(f_self)
        is_format_map = value.__name__ == "format_map"
        formatter: SandboxedFormatter = (
            _BoundedEscapeFormatter(self, escape=f_self.escape) if isinstance(f_self, Markup) else _BoundedFormatter(self)
        )

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument and no keyword arguments")
                kwargs, args = args[0], ()
            return str_type(formatter.vformat(f_self, args, kwargs))

        return update_wrapper(wrapper, value)

    @staticmethod
    def bounded_value(value: T) -> T:
        """A list, tuple or dict literal: counted like any value a template builds (see _weigh)."""
        return _check(value)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return _check(self.binop_table[operator](left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's signature)
        args = _check_method_call(__obj, args, kwargs)
        return _check(super().call(__context, __obj, *args, **kwargs))

    @staticmethod
    def bounded_buffer() -> list[Any]:
        """A fresh output buffer for a block or macro (see _BoundedBuffer)."""
        return _BoundedBuffer()

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        return _check(value) if isinstance(argument, slice) else value  # a slice is a new value

    def bounded_str_join(self, parts: Iterable[Any]) -> str:
        """`a ~ b ~ c`: refused when the result would exceed MAX_VALUE_CHARS."""
        texts = [str(p) for p in parts]
        size = sum(map(len, texts))
        if size > MAX_VALUE_CHARS:
            raise _too_big("a concatenation", size, MAX_VALUE_CHARS)
        _charge(size)
        return "".join(texts)

    def concat(self, pieces: Iterable[str]) -> str:  # type: ignore[override]
        """Joins captured blocks and macro output, refusing more than MAX_OUTPUT_CHARS."""
        out: list[str] = []
        size = 0
        for piece in pieces:
            size += len(piece)
            if size > MAX_OUTPUT_CHARS:
                raise _too_big("template output", size, MAX_OUTPUT_CHARS)
            out.append(piece)
        return "".join(out)


def within_deadline(fn: Callable[[], T], seconds: float = RENDER_SECONDS) -> T:
    """Run `fn` in this thread, raising TemplateLimitError once `seconds` have passed.

    The deadline is checked on every Python call and on every line of compiled template code, so a
    loop in a template stops; a single C-level operation is bounded by the size checks instead.
    Deep recursion (a macro calling itself) comes back as TemplateLimitError too.
    """
    deadline = time.monotonic() + seconds
    clock = time.monotonic

    def expired() -> TemplateLimitError:
        return TemplateLimitError(f"template limit: rendering took longer than {seconds:g}s")

    def local(frame: Any, event: str, arg: Any) -> Any:
        if clock() > deadline:
            raise expired()
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if clock() > deadline:
            raise expired()
        return local if frame.f_code.co_filename == _TEMPLATE_FILE else None

    previous = sys.gettrace()
    outer_budget = getattr(_BUDGET, "used", None)
    outer_weights = getattr(_BUDGET, "weights", None)
    _BUDGET.used = 0 if outer_budget is None else outer_budget
    _BUDGET.weights = {} if outer_weights is None else outer_weights
    sys.settrace(tracer)
    try:
        return fn()
    except RecursionError:
        raise TemplateLimitError("template limit: nested too deeply (a macro or include calling itself?)") from None
    except MemoryError:
        raise TemplateLimitError("template limit: out of memory") from None
    finally:
        sys.settrace(previous)
        _BUDGET.used = outer_budget
        _BUDGET.weights = outer_weights
